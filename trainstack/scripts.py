"""Boot scripts rendered from the Jinja2 templates in ``templates/``, and the metadata they read.

A script is rendered once per node kind: what differs between nodes and jobs (role, index,
job directory, trainer arguments, on_finish) travels in instance metadata under
:data:`METADATA_KEYS`, built by :func:`node_metadata` for both the Pulumi program and
``trainstack local``, so a change of job settings updates metadata in place.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import jinja2

from trainstack.catalog import load_catalog
from trainstack.config import StackConfig
from trainstack.rules import resolved_strategy
from trainstack.topology import Node

REPOSITORY = Path(__file__).resolve().parent.parent
TEMPLATES_DIR = REPOSITORY / "templates"
NODE_REQUIREMENTS = REPOSITORY / "requirements-node.txt"
# The trainer package that `pulumi up` uploads and `trainstack local` stages.
TRAINER_SOURCE = REPOSITORY / "trainer"


@dataclass(frozen=True)
class MetadataKeys:
    role: str = "trainstack-role"
    index: str = "trainstack-index"
    # Names the project attribute that holds the TF_CONFIG cluster (see GpuCluster).
    cluster_key: str = "trainstack-cluster-key"
    job_dir: str = "trainstack-job-dir"
    bucket: str = "trainstack-bucket"
    trainer_args: str = "trainstack-trainer-args"
    on_finish: str = "trainstack-on-finish"
    # The name self-stop acts on when the host's own name is not it (TPU VMs).
    self_name: str = "trainstack-self-name"


METADATA_KEYS = MetadataKeys()
# Where the Pulumi program uploads the trainer package inside the stack's bucket.
TRAINER_OBJECT = "trainstack/trainer.zip"
# Seconds between a non-chief node's looks at the job status (one storage read each).
PEER_POLL_SECONDS = 10

CLUSTER_NODE = "cluster-node.sh.j2"
TPU_VM = "tpu-vm.sh.j2"
WORKBENCH = "workbench-post-startup.sh.j2"


@dataclass(frozen=True)
class NodeKind:
    """What differs between a Compute Engine node and a TPU VM in how it boots and stops."""

    requirements: str
    system_site_packages: bool
    stop_command: str
    delete_command: str

    @property
    def requirements_stamp(self) -> str:
        return hashlib.sha256(self.requirements.encode()).hexdigest()[:16]


def _pinned_requirements() -> str:
    lines = NODE_REQUIREMENTS.read_text(encoding="utf-8").splitlines()
    return "\n".join(line for line in lines if line.strip() and not line.startswith("#"))


def cluster_node_kind() -> NodeKind:
    return NodeKind(
        requirements=_pinned_requirements(),
        system_site_packages=False,
        # A guest shutdown leaves a Compute Engine VM TERMINATED: no vCPU or GPU billing.
        stop_command="shutdown -h now",
        delete_command='gcloud compute instances delete "${name}" --zone "${zone}" --quiet',
    )


def tpu_node_kind(cfg: StackConfig) -> NodeKind:
    assert cfg.settings.tpu is not None
    runtime = load_catalog().tpu_runtimes[cfg.settings.tpu.runtime_version]
    major_minor = ".".join(runtime.tensorflow_version.split(".")[:2])
    return NodeKind(
        # The TPU runtime brings TensorFlow built for the TPU; only the matching Keras 2
        # line is added (Keras 3 cannot train the trainer's multi-worker paths).
        requirements=f"tf-keras=={major_minor}.*",
        system_site_packages=True,
        # A TPU VM keeps its TPU (and bills) through a guest shutdown: stop it by API.
        stop_command='gcloud compute tpus tpu-vm stop "${name}" --zone "${zone}" --quiet',
        delete_command='gcloud compute tpus tpu-vm delete "${name}" --zone "${zone}" --quiet',
    )


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


def job_dir(cfg: StackConfig, bucket: str | None = None) -> str:
    return f"{bucket or 'gs://' + bucket_name(cfg)}/jobs/{cfg.settings.job.name}"


def cluster_metadata_key(cfg: StackConfig) -> str:
    """Project metadata key of this stack's TF_CONFIG cluster; unique per stack in a project."""
    return f"trainstack-{cfg.name}-cluster"


def trainer_args(cfg: StackConfig, strategy: str) -> list[str]:
    """The trainer's flags for this stack's job (the job directory is added by the script)."""
    job = cfg.settings.job
    args = [
        "--model", job.model,
        "--data", job.data,
        "--epochs", str(job.epochs),
        "--batch-size-per-replica", str(job.batch_size_per_replica),
        "--image-size", str(job.image_size),
        "--strategy", strategy,
    ]  # fmt: skip
    if job.steps_per_epoch is not None:
        args += ["--steps-per-epoch", str(job.steps_per_epoch)]
    if strategy == "tpu":
        args += ["--tpu", "local"]
    return args + list(job.args)


def node_metadata(cfg: StackConfig, node: Node, bucket: str, with_cluster: bool, args: list[str] | None = None) -> dict[str, str]:
    """Instance metadata the cluster boot script reads; ``bucket`` is a gs:// URI or, locally, a path."""
    assert cfg.settings.cluster is not None
    metadata = {
        METADATA_KEYS.role: node.role,
        METADATA_KEYS.index: str(node.index),
        METADATA_KEYS.job_dir: job_dir(cfg, bucket),
        METADATA_KEYS.bucket: bucket,
        METADATA_KEYS.trainer_args: json.dumps(args if args is not None else trainer_args(cfg, resolved_strategy(cfg.settings.cluster))),
        METADATA_KEYS.on_finish: cfg.settings.cluster.on_finish,
    }
    if with_cluster:
        metadata[METADATA_KEYS.cluster_key] = cluster_metadata_key(cfg)
    return metadata


def tpu_metadata(cfg: StackConfig, bucket: str) -> dict[str, str]:
    assert cfg.settings.tpu is not None
    return {
        METADATA_KEYS.job_dir: job_dir(cfg, bucket),
        METADATA_KEYS.bucket: bucket,
        METADATA_KEYS.trainer_args: json.dumps(trainer_args(cfg, "tpu")),
        METADATA_KEYS.on_finish: cfg.settings.tpu.on_finish,
        METADATA_KEYS.self_name: tpu_vm_name(cfg),
    }


def tpu_vm_name(cfg: StackConfig) -> str:
    return f"{cfg.name}-tpu"


def render(template: str, cfg: StackConfig, kind: NodeKind | None = None) -> str:
    if kind is None:
        kind = tpu_node_kind(cfg) if template == TPU_VM else cluster_node_kind()
    notebook = cfg.settings.notebook
    return _environment().get_template(template).render(
        stack=cfg.stack,
        keys=METADATA_KEYS,
        kind=kind,
        bucket=bucket_name(cfg),
        idle_timeout_minutes=notebook.idle_timeout_minutes if notebook else 0,
        peer_poll_seconds=PEER_POLL_SECONDS,
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
