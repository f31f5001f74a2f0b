"""Boot scripts rendered from the Jinja2 templates in ``templates/``, and the metadata they read.

A script is rendered once per node kind: what differs between nodes and jobs (role, index,
job directory, trainer arguments, on_finish) travels in instance metadata under
:data:`METADATA_KEYS`, built by :func:`node_metadata` for both the Pulumi program and
``trainstack local``, so a change of job settings updates metadata in place.

Every value a template renders is shell-quoted (``shlex.quote``) unless the program marks
it as :class:`ShellCode` it wrote itself: a stack value can never become shell syntax.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from trainstack.catalog import load_catalog
from trainstack.config import NAMESPACE, StackConfig
from trainstack.errors import Problem
from trainstack.rules import resolved_strategy
from trainstack.topology import Node, cluster_nodes, tf_cluster_spec

REPOSITORY = Path(__file__).resolve().parent.parent
TEMPLATES_DIR = REPOSITORY / "templates"
NODE_REQUIREMENTS = REPOSITORY / "requirements-node.txt"
# The trainer package that `pulumi up` uploads and `trainstack local` stages.
TRAINER_SOURCE = REPOSITORY / "trainer"


class ShellCode(str):
    """Shell code the program wrote itself; rendered as it is. Every other value is quoted."""


def _shell_finalize(value: Any) -> str:
    """Jinja's finalize hook: how each ``{{ ... }}`` lands in a script."""
    if isinstance(value, ShellCode):
        return str(value)
    if isinstance(value, bool) or value is None:
        # A template must decide with {% if %}, never print a Python True/None into bash.
        raise TypeError(f"{value!r} cannot be rendered into a shell script")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return shlex.quote(value)
    raise TypeError(f"a {type(value).__name__} cannot be rendered into a shell script")


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
    # How often the chief refreshes its heartbeat, and the others look at it.
    heartbeat_seconds: str = "trainstack-heartbeat-seconds"
    # How long the others wait for a new heartbeat before taking the chief for dead.
    peer_timeout_seconds: str = "trainstack-peer-timeout-seconds"
    # The TPU VM's run-time cap (Compute Engine's max_run_duration has no TPU equivalent).
    max_run_seconds: str = "trainstack-max-run-seconds"


METADATA_KEYS = MetadataKeys()
# Where the Pulumi program uploads the trainer package inside the stack's bucket.
TRAINER_OBJECT = "trainstack/trainer.zip"
# Heartbeats: a few chances to be seen within the timeout, at most one object write a
# minute (Cloud Storage allows one write per second to one object), at least one every
# second locally.
HEARTBEATS_PER_TIMEOUT = 5
MAX_HEARTBEAT_SECONDS = 60
# Seconds between a non-chief node's looks at the job status (one storage read each), so
# that a chief's recorded FAILED ends its peers within seconds, not a heartbeat period.
PEER_POLL_SECONDS = 10

CLUSTER_NODE = "cluster-node.sh.j2"
TPU_VM = "tpu-vm.sh.j2"
WORKBENCH = "workbench-post-startup.sh.j2"


@dataclass(frozen=True)
class NodeKind:
    """What differs between a Compute Engine node and a TPU VM in how it boots and stops."""

    requirements: tuple[str, ...]
    system_site_packages: bool
    # Shell code run by self_stop; both may use the script's SELF_* constants.
    stop_command: ShellCode
    delete_command: ShellCode

    @property
    def requirements_stamp(self) -> str:
        return hashlib.sha256("\n".join(self.requirements).encode()).hexdigest()[:16]


def _pinned_requirements() -> tuple[str, ...]:
    lines = NODE_REQUIREMENTS.read_text(encoding="utf-8").splitlines()
    return tuple(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def cluster_node_kind() -> NodeKind:
    return NodeKind(
        requirements=_pinned_requirements(),
        system_site_packages=False,
        # A guest shutdown leaves a Compute Engine VM TERMINATED: no vCPU or GPU billing,
        # and it needs no permission at all.
        stop_command=ShellCode("shutdown -h now"),
        # One REST call with the VM's own token; see delete_this_instance in _common.sh.j2.
        delete_command=ShellCode("delete_this_instance"),
    )


def tpu_node_kind(cfg: StackConfig) -> NodeKind:
    assert cfg.settings.tpu is not None
    runtime = load_catalog().tpu_runtimes[cfg.settings.tpu.runtime_version]
    major_minor = ".".join(runtime.tensorflow_version.split(".")[:2])
    return NodeKind(
        # The TPU runtime brings TensorFlow built for the TPU; only the matching Keras 2
        # line is added (Keras 3 cannot train the trainer's multi-worker paths).
        requirements=(f"tf-keras=={major_minor}.*",),
        system_site_packages=True,
        # A TPU VM keeps its TPU (and bills) through a guest shutdown: stop it by API.
        # --async: the call returns once accepted, so only tpu.nodes.stop/delete are
        # needed (waiting would also need tpu.operations.get).
        stop_command=ShellCode('gcloud compute tpus tpu-vm stop "${SELF_NAME}" --zone "${SELF_ZONE}" --async --quiet'),
        delete_command=ShellCode('gcloud compute tpus tpu-vm delete "${SELF_NAME}" --zone "${SELF_ZONE}" --async --quiet'),
    )


def _environment() -> jinja2.Environment:
    # StrictUndefined: a template naming a value the program does not pass fails at render
    # time, in tests, instead of producing a script with an empty string in it.
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        finalize=_shell_finalize,
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


def heartbeat_seconds(peer_timeout_seconds: int) -> int:
    return max(1, min(MAX_HEARTBEAT_SECONDS, peer_timeout_seconds // HEARTBEATS_PER_TIMEOUT))


def node_metadata(cfg: StackConfig, node: Node, bucket: str, with_cluster: bool, args: list[str] | None = None) -> dict[str, str]:
    """Instance metadata the cluster boot script reads; ``bucket`` is a gs:// URI or, locally, a path."""
    cluster = cfg.settings.cluster
    assert cluster is not None
    metadata = {
        METADATA_KEYS.role: node.role,
        METADATA_KEYS.index: str(node.index),
        METADATA_KEYS.job_dir: job_dir(cfg, bucket),
        METADATA_KEYS.bucket: bucket,
        METADATA_KEYS.trainer_args: json.dumps(args if args is not None else trainer_args(cfg, resolved_strategy(cluster))),
        METADATA_KEYS.on_finish: cluster.on_finish,
        METADATA_KEYS.heartbeat_seconds: str(heartbeat_seconds(cluster.heartbeat_timeout_seconds)),
        METADATA_KEYS.peer_timeout_seconds: str(cluster.heartbeat_timeout_seconds),
    }
    if with_cluster:
        metadata[METADATA_KEYS.cluster_key] = cluster_metadata_key(cfg)
    return metadata


def tpu_metadata(cfg: StackConfig, bucket: str) -> dict[str, str]:
    tpu = cfg.settings.tpu
    assert tpu is not None
    return {
        METADATA_KEYS.job_dir: job_dir(cfg, bucket),
        METADATA_KEYS.bucket: bucket,
        METADATA_KEYS.trainer_args: json.dumps(trainer_args(cfg, "tpu")),
        METADATA_KEYS.on_finish: tpu.effective_on_finish,
        METADATA_KEYS.max_run_seconds: str(round(tpu.max_run_hours * 3600)),
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
        bucket_uri=f"gs://{bucket_name(cfg)}",
        trainer_object=TRAINER_OBJECT,
        zone=cfg.settings.zone,
        tpu_name=tpu_vm_name(cfg),
        idle_timeout_minutes=notebook.idle_timeout_minutes if notebook else 0,
        peer_poll_seconds=PEER_POLL_SECONDS,
    )


# Compute Engine metadata limits (REST reference, Metadata): each value at most 256 KiB,
# all keys and values of one instance together under 512 KB.
MAX_METADATA_VALUE_BYTES = 256 * 1024
MAX_INSTANCE_METADATA_BYTES = 512 * 1000
# What GpuCluster and TpuVm add beside the script and node metadata (OS Login, SSH keys).
_FIXED_METADATA_BYTES = 200


def _metadata_bytes(metadata: dict[str, str]) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in metadata.items()) + _FIXED_METADATA_BYTES


def metadata_problems(cfg: StackConfig) -> list[Problem]:
    """Metadata the program would set that Compute Engine would refuse, named by the stack key
    that makes it too large (job.args, or the worker count for the TF_CONFIG cluster)."""
    problems: list[Problem] = []
    cluster = cfg.settings.cluster
    if cluster is not None:
        nodes = cluster_nodes(cfg)
        tf_cluster = json.dumps(tf_cluster_spec(cfg, nodes), separators=(",", ":"))
        if len(tf_cluster.encode()) > MAX_METADATA_VALUE_BYTES:
            per_node = len(tf_cluster.encode()) / len(nodes)
            problems.append(
                Problem(
                    f"{NAMESPACE}:cluster.workers.count",
                    f"the TF_CONFIG cluster of {len(nodes)} nodes is {len(tf_cluster.encode())} bytes, more than a metadata value holds "
                    f"({MAX_METADATA_VALUE_BYTES}); at most about {int(MAX_METADATA_VALUE_BYTES / per_node) - 1 - cluster.ps_count} workers",
                )
            )
        script = render(CLUSTER_NODE, cfg)
        # Every node carries the same script and job metadata; only role and index differ,
        # by a few bytes, so the chief's size stands for all.
        size = _metadata_bytes({"startup-script": script, **node_metadata(cfg, nodes[0], "gs://" + bucket_name(cfg), True)})
        if size > MAX_INSTANCE_METADATA_BYTES:
            problems.append(Problem(f"{NAMESPACE}:job.args", f"a node's metadata would be {size} bytes; Compute Engine allows {MAX_INSTANCE_METADATA_BYTES}"))
    if cfg.settings.tpu is not None:
        size = _metadata_bytes({"startup-script": render(TPU_VM, cfg), **tpu_metadata(cfg, "gs://" + bucket_name(cfg))})
        if size > MAX_INSTANCE_METADATA_BYTES:
            problems.append(Problem(f"{NAMESPACE}:job.args", f"the TPU VM's metadata would be {size} bytes; at most {MAX_INSTANCE_METADATA_BYTES}"))
    return problems


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
