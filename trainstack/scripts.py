"""Boot scripts rendered from the Jinja2 templates in ``templates/``.

Scripts are rendered once per node kind: what differs between nodes of a kind (role,
index, cluster addresses) travels in instance metadata under :data:`METADATA_KEYS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import jinja2

from trainstack.config import StackConfig

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"


@dataclass(frozen=True)
class MetadataKeys:
    role: str = "trainstack-role"
    index: str = "trainstack-index"
    # Instance attribute naming the project attribute that holds the TF_CONFIG cluster.
    cluster_key: str = "trainstack-cluster-key"
    job_dir: str = "trainstack-job-dir"


METADATA_KEYS = MetadataKeys()

CLUSTER_NODE = "cluster-node.sh.j2"
TPU_VM = "tpu-vm.sh.j2"
WORKBENCH = "workbench-post-startup.sh.j2"


def _environment() -> jinja2.Environment:
    # StrictUndefined: a template naming a value the program does not pass fails at render
    # time, in tests, instead of producing a script with an empty string in it.
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def bucket_name(cfg: StackConfig) -> str:
    return f"{cfg.project}-{cfg.name}"


def job_dir(cfg: StackConfig) -> str:
    return f"gs://{bucket_name(cfg)}/jobs/{cfg.settings.job.name}"


def cluster_metadata_key(cfg: StackConfig) -> str:
    """Project metadata key of this stack's TF_CONFIG cluster; unique per stack in a project."""
    return f"trainstack-{cfg.name}-cluster"


def render(template: str, cfg: StackConfig) -> str:
    return _environment().get_template(template).render(
        stack=cfg.stack,
        keys=METADATA_KEYS,
        job=cfg.settings.job,
        bucket=bucket_name(cfg),
        job_dir=job_dir(cfg),
    )


def rendered_scripts(cfg: StackConfig) -> dict[str, str]:
    """Every script the stack uses, by file name (what `plan --out DIR` writes)."""
    scripts: dict[str, str] = {}
    if cfg.settings.cluster is not None:
        scripts["cluster-node.sh"] = render(CLUSTER_NODE, cfg)
    if cfg.settings.tpu is not None:
        scripts["tpu-vm.sh"] = render(TPU_VM, cfg)
    if cfg.settings.notebook is not None:
        scripts["workbench-post-startup.sh"] = render(WORKBENCH, cfg)
    return scripts
