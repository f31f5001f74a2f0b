"""Boot scripts rendered from the Jinja2 templates in ``templates/``, and the metadata nodes read.

A boot script only fetches the node agent, checks its sha256 and runs it; everything a node
does and every value it needs (role, index, job, code and its digests, on_finish, peers)
travels in instance metadata: a :class:`~trainstack_contract.metadata.NodeMetadata` built by
:func:`cluster_node_metadata` and :func:`tpu_node_metadata` for both the Pulumi program and
``trainstack local`` and written out by its ``to_metadata()``, so a change of job settings
updates metadata in place.

Every value a template renders is shell-quoted (``shlex.quote``) unless the program marks
it as :class:`ShellCode` it wrote itself: a stack value can never become shell syntax.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from trainstack.base.errors import Problem, StackConfigError
from trainstack.base.project import PROJECT_ROOT
from trainstack.jobcode import artifacts
from trainstack.jobcode.node_environment import NODE_LOCK, locked_requirements, tpu_lock
from trainstack.jobcode.package import Wheelhouse
from trainstack.stackmodel.naming import NAMESPACE
from trainstack.stackmodel.resolved import ClusterNode, ResolvedCluster, ResolvedJob, ResolvedStack, ResolvedTpu
from trainstack_contract import (
    CHIEF,
    CLUSTER_NODE_KIND,
    FLEX_START,
    LAYOUT,
    METADATA_KEYS,
    NO_JOB,
    PATH_INSTALL,
    RESERVATION,
    TPU_NODE_KIND,
    requirements_stamp,
)
from trainstack_contract.metadata import (
    ClusterMember,
    JobMetadata,
    NodeMetadata,
    PinnedObject,
    PythonMetadata,
    heartbeat_seconds,
)
from trainstack_contract.names import GCS_BUCKET_NAME

TEMPLATES_DIR = PROJECT_ROOT / "templates"


class ShellCode(str):
    """Shell code the program wrote itself; rendered as it is. Every other value is quoted."""


def _shell_finalize(value: Any) -> str:
    """Jinja's finalize hook: how each ``{{ ... }}`` lands in a script."""
    if isinstance(value, ShellCode):
        return str(value)
    if isinstance(value, jinja2.Undefined):
        # A value the program did not pass: StrictUndefined raises here, naming it.
        return str(value)
    if isinstance(value, bool) or value is None:
        # A template must decide with {% if %}, never print a Python True/None into bash.
        raise TypeError(f"{value!r} cannot be rendered into a shell script")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return shlex.quote(value)
    raise TypeError(f"a {type(value).__name__} cannot be rendered into a shell script")


CLUSTER_NODE = "cluster-node.sh.j2"
TPU_VM = "tpu-vm.sh.j2"
WORKBENCH = "workbench-post-startup.sh.j2"
# The Workbench instance's own startup script: fetches, checks and runs WORKBENCH's object.
WORKBENCH_STARTUP = "workbench-startup.sh.j2"
# What the boot script accepts as the agent's location: a gs:// object or a local path, ending
# in the agent's content-named object (a bash ERE; the value is matched whole).
AGENT_PATTERN = (
    rf"^(gs://{GCS_BUCKET_NAME}|/[^[:cntrl:]]+)/" + LAYOUT.agent_dir + r"/trainstack-agent-[0-9a-f]{16}\.pyz$"
)
# The same for the notebook's post-startup script (LAYOUT.notebook_script).
NOTEBOOK_SCRIPT_PATTERN = (
    rf"^(gs://{GCS_BUCKET_NAME}|/[^[:cntrl:]]+)/"
    + LAYOUT.notebook_dir
    + rf"/post-startup-[0-9a-f]{{{artifacts.NAME_DIGEST_CHARS}}}\.sh$"
)


@dataclass(frozen=True)
class NodeKind:
    """What differs between a Compute Engine node and a TPU VM: the Python environment the agent
    installs for the job's code (a hash-locked requirements file), and how a boot that cannot
    start the agent stops the machine."""

    # The lock's bytes (locks/ in the repository), uploaded by `pulumi up` under trainstack/python/.
    lock: bytes
    system_site_packages: bool
    # Shell code run by the boot script's release().
    stop_command: ShellCode

    @property
    def lock_artifact(self) -> artifacts.BuiltArtifact:
        return artifacts.python_lock(self.lock)

    @property
    def requirements_stamp(self) -> str:
        return requirements_stamp(self.lock_artifact.sha256)


def _read_lock(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise StackConfigError(
            [Problem(f"{NAMESPACE}:tpu", f"no lock of what the machines install: {path.name} ({error.strerror})")]
        ) from None


def cluster_node_kind() -> NodeKind:
    return NodeKind(
        lock=_read_lock(NODE_LOCK),
        system_site_packages=False,
        # A guest shutdown leaves a Compute Engine VM TERMINATED: no vCPU or GPU billing,
        # and it needs no permission at all.
        stop_command=ShellCode("shutdown -h now"),
    )


def tpu_node_kind(tpu: ResolvedTpu, zone: str) -> NodeKind:
    stop = f"gcloud compute tpus tpu-vm stop {shlex.quote(tpu.vm_name)} --zone {shlex.quote(zone)} --async --quiet"
    return NodeKind(
        # The TPU runtime brings TensorFlow built for the TPU; only the matching Keras 2
        # line is added (Keras 3 cannot train the trainer's multi-worker paths), hash-locked.
        lock=_read_lock(tpu_lock(tpu.tensorflow_minor)),
        system_site_packages=True,
        # A TPU VM keeps its TPU (and bills) through a guest shutdown: stop it by API.
        # --async: the call returns once accepted, so only tpu.nodes.stop is needed.
        stop_command=ShellCode(stop),
    )


def node_kinds(stack: ResolvedStack) -> list[NodeKind]:
    """The kinds of machine a stack boots the agent on."""
    return ([cluster_node_kind()] if stack.cluster else []) + (
        [tpu_node_kind(stack.tpu, stack.zone)] if stack.tpu else []
    )


def _environment(templates: Path = TEMPLATES_DIR) -> jinja2.Environment:
    # StrictUndefined: a template naming a value the program does not pass fails at render
    # time, in tests, instead of producing a script with an empty string in it.
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        # The templates render shell, not HTML: every value goes through the shell-quoting finalize.
        autoescape=False,  # noqa: S701
        finalize=_shell_finalize,
    )


def agent_archive(bucket: str) -> PinnedObject:
    """Where the node agent is, and its digest."""
    agent = artifacts.agent_archive()
    return PinnedObject(agent.uri(bucket), agent.sha256)


def python_environment(kind: NodeKind, wheelhouse: Wheelhouse | None) -> PythonMetadata:
    """The Python environment the agent installs: its lock, by digest (from the stack's
    wheelhouse, by its manifest's digest, when it declares one)."""
    lock = kind.lock_artifact
    manifest = artifacts.wheelhouse_manifest(wheelhouse) if wheelhouse is not None else None
    return PythonMetadata(
        lock=PinnedObject(lock.object_name, lock.sha256),
        system_site_packages=kind.system_site_packages,
        wheelhouse=PinnedObject(manifest.object_name, manifest.sha256) if manifest is not None else None,
    )


def node_job(job: ResolvedJob | None, args: tuple[str, ...]) -> JobMetadata:
    """What a node runs: the job's mode and code (with the sha256 the agent checks), its
    directory, arguments and environment variables."""
    if job is None:
        return JobMetadata(NO_JOB)
    package = job.package
    return JobMetadata(
        mode=job.mode,
        # jobs/<name> in the stack's bucket, or job.job_dir (`trainstack local` gives its stand-in).
        job_dir=job.job_dir,
        trainer_args=tuple(args),
        code=PinnedObject(package.object_name, package.sha256) if package is not None else None,
        module=package.module if package is not None else None,
        code_install=package.install if package is not None else PATH_INSTALL,
        requirements=(
            PinnedObject(job.requirements.object_name, job.requirements.sha256)
            if job.requirements is not None
            else None
        ),
        warm_start=job.builtin,
        image=job.image.uri if job.image is not None else None,
        secrets=tuple(job.secrets),
        env=tuple(dict(job.env).items()),
        reads=job.places.reads,
        writes=job.places.writes,
    )


def job_metadata(job: ResolvedJob | None, args: tuple[str, ...]) -> dict[str, str]:
    """The job's part of a node's metadata (what a queued job's spec holds, with its directory)."""
    return node_job(job, args).to_metadata()


def _idle_seconds(stack_idle_seconds: int | None, override: int | None = None) -> int | None:
    """How long a node that runs the job queue waits for a job before it applies on_finish
    (the stack's wait, or ``override``); None where the stack runs no queue."""
    if stack_idle_seconds is None:
        return None
    return stack_idle_seconds if override is None else override


# The capacities a node's metadata names: on-demand and Spot nodes' metadata stays as it was
# before capacity existed (their VMs are not updated by an upgrade of trainstack).
_CAPACITIES_IN_METADATA = (FLEX_START, RESERVATION)


def _capacity(capacity: str) -> str | None:
    """How the node got its machine, for its agent: flex_start or reservation; None for on
    demand or Spot."""
    return capacity if capacity in _CAPACITIES_IN_METADATA else None


def cluster_node_metadata(
    cluster: ResolvedCluster,
    node: ClusterNode,
    bucket: str,
    job: ResolvedJob | None,
    args: tuple[str, ...] | None = None,
    gpu_count: int | None = None,
    kind: NodeKind | None = None,
    wheelhouse: Wheelhouse | None = None,
    idle_seconds: int | None = None,
) -> NodeMetadata:
    """What a cluster node's agent reads; ``bucket`` is a gs:// URI or, locally, a path;
    ``gpu_count`` overrides the node's GPUs (a local run has none); ``idle_seconds`` overrides
    the cluster's idle wait (a one-shot local run idles 0 s) where it runs a queue."""
    gpus = node.accelerator.count if node.accelerator is not None else 0
    several = len(cluster.nodes) > 1
    capacity = _capacity(node.capacity)
    member = ClusterMember(
        role=node.role,
        index=node.index,
        node_name=node.name,
        heartbeat_seconds=heartbeat_seconds(cluster.heartbeat_timeout_seconds),
        peer_timeout_seconds=cluster.heartbeat_timeout_seconds,
        cluster_key=cluster.tf_cluster_metadata_key if cluster.tf_cluster else None,
        peers=tuple(peer.name for peer in cluster.nodes) if several else (),
        max_restarts=cluster.max_restarts if several else None,
        recover=(tuple((peer.name, peer.vm_name) for peer in cluster.recoverable_nodes) if node.role == CHIEF else ()),
    )
    return NodeMetadata(
        kind=CLUSTER_NODE_KIND,
        bucket=bucket,
        on_finish=cluster.on_finish,
        python=python_environment(kind or cluster_node_kind(), wheelhouse),
        job=node_job(job, cluster.trainer_args if args is None else args),
        agent=agent_archive(bucket),
        member=member,
        gpu_count=gpus if gpu_count is None else gpu_count,
        idle_seconds=_idle_seconds(cluster.idle_seconds, idle_seconds),
        capacity=capacity,
        # A flex-start node's run duration: its agent ends the job before Compute Engine
        # deletes the machine (trainstack_agent.runend).
        max_run_seconds=cluster.max_run_seconds if capacity == FLEX_START else None,
    )


def tpu_node_metadata(
    stack: ResolvedStack,
    tpu: ResolvedTpu,
    bucket: str | None = None,
    args: tuple[str, ...] | None = None,
    kind: NodeKind | None = None,
    job: ResolvedJob | None = None,
    idle_seconds: int | None = None,
) -> NodeMetadata:
    """What the TPU VM's agent reads; ``trainstack local`` gives its own bucket, arguments, kind,
    job and idle wait (the stack's otherwise)."""
    bucket = bucket or stack.bucket_uri
    return NodeMetadata(
        kind=TPU_NODE_KIND,
        bucket=bucket,
        on_finish=tpu.on_finish,
        python=python_environment(kind or tpu_node_kind(tpu, stack.zone), stack.wheelhouse),
        job=node_job(job or stack.job, tpu.trainer_args if args is None else args),
        agent=agent_archive(bucket),
        tpu_name=tpu.vm_name,
        idle_seconds=_idle_seconds(tpu.idle_seconds, idle_seconds),
        capacity=_capacity(tpu.capacity),
        max_run_seconds=tpu.max_run_seconds,
    )


def render(template: str, stack: ResolvedStack, kind: NodeKind | None = None, templates: Path = TEMPLATES_DIR) -> str:
    """One boot script; every value it names comes from here (StrictUndefined), quoted."""
    if kind is None:
        kind = (
            tpu_node_kind(stack.tpu, stack.zone)
            if template == TPU_VM and stack.tpu is not None
            else cluster_node_kind()
        )
    # The package's archive is in the bucket only where machines run the job.
    package = stack.job.package if stack.job and (stack.cluster or stack.tpu) else None
    return (
        _environment(templates)
        .get_template(template)
        .render(
            stack=stack.stack,
            keys=METADATA_KEYS,
            layout=LAYOUT,
            stop_command=kind.stop_command,
            agent_pattern=AGENT_PATTERN,
            notebook_script_pattern=NOTEBOOK_SCRIPT_PATTERN,
            bucket_uri=stack.bucket_uri,
            idle_timeout_minutes=stack.notebook.idle_timeout_minutes if stack.notebook else 0,
            code_archive=package.object_name if package else "",
            code_sha256=package.sha256 if package else "",
            code_module=package.module if package else "",
            gpu_count=stack.notebook.accelerator.count if stack.notebook and stack.notebook.accelerator else 0,
        )
    )


# Compute Engine metadata limits: each value at most 256 KiB, all keys and values of one
# instance together under 512 KB
# (https://cloud.google.com/compute/docs/reference/rest/v1/instances, Metadata.items).
MAX_METADATA_VALUE_BYTES = 256 * 1024
MAX_INSTANCE_METADATA_BYTES = 512 * 1000
# What TrainingCluster and TpuVm add beside the script and node metadata (OS Login, SSH keys).
_FIXED_METADATA_BYTES = 200


def _metadata_bytes(metadata: dict[str, str]) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in metadata.items()) + _FIXED_METADATA_BYTES


@dataclass(frozen=True)
class BootFiles:
    """The scripts and metadata a stack's machines boot with, as the program sets them."""

    cluster_script: str | None
    # By node name (chief, worker-0, ...).
    cluster_metadata: dict[str, dict[str, str]]
    tpu_script: str | None
    tpu_metadata: dict[str, str]
    notebook_script: str | None
    # The notebook's startup script, set in its instance metadata: runs notebook_script once verified.
    notebook_startup_script: str | None

    def by_filename(self) -> dict[str, str]:
        """Every script, by file name (what `plan --out DIR` writes)."""
        named = {
            "cluster-node.sh": self.cluster_script,
            "tpu-vm.sh": self.tpu_script,
            "workbench-post-startup.sh": self.notebook_script,
            "workbench-startup.sh": self.notebook_startup_script,
        }
        return {filename: text for filename, text in named.items() if text is not None}


def boot_files(stack: ResolvedStack) -> BootFiles:
    """Render every script and metadata map once; raises when Compute Engine would refuse one."""
    cluster_script = render(CLUSTER_NODE, stack) if stack.cluster else None
    cluster_metadata = (
        {
            n.name: cluster_node_metadata(
                stack.cluster, n, stack.bucket_uri, stack.job, wheelhouse=stack.wheelhouse
            ).to_metadata()
            for n in stack.cluster.nodes
        }
        if stack.cluster
        else {}
    )
    boot = BootFiles(
        cluster_script=cluster_script,
        cluster_metadata=cluster_metadata,
        tpu_script=render(TPU_VM, stack) if stack.tpu else None,
        tpu_metadata=tpu_node_metadata(stack, stack.tpu).to_metadata() if stack.tpu else {},
        notebook_script=render(WORKBENCH, stack) if stack.notebook else None,
        notebook_startup_script=render(WORKBENCH_STARTUP, stack) if stack.notebook else None,
    )
    problems = metadata_problems(stack, boot) + wheelhouse_problems(stack)
    if problems:
        raise StackConfigError(problems)
    return boot


def wheelhouse_problems(stack: ResolvedStack) -> list[Problem]:
    """A wheelhouse must hold a wheel for every requirement the machines' lock pins (`pip
    install --no-index` finds nothing else): each one missing, named, before anything is
    created. A pin with an environment marker (one per Python version) is left to the nodes' pip."""
    if stack.wheelhouse is None:
        return []
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from packaging.version import Version

    offered: dict[str, set[str]] = {}
    for filename in stack.wheelhouse.wheels:
        try:
            name, version, _, _ = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            continue
        offered.setdefault(str(name), set()).add(str(version))
    missing = []
    for kind in node_kinds(stack):
        for entry in locked_requirements(kind.lock.decode("utf-8")):
            if entry.marker is not None or entry.version is None:
                # Which of a name's marker-split pins a node needs depends on its Python: pip says.
                continue
            pin = f"{entry.name}=={entry.version}"
            if str(Version(entry.version)) not in offered.get(entry.name, set()) and pin not in missing:
                missing.append(pin)
    if not missing:
        return []
    return [
        Problem(
            f"{NAMESPACE}:storage.wheelhouse",
            f"no wheel for {', '.join(missing)}, which the machines install; fill it with `pip download "
            "--only-binary=:all: --platform manylinux2014_x86_64 --python-version 3.12 --no-deps -d DIR -r "
            "locks/node.txt` (the Python of the machines' image; locks/tpu-tf-X.Y.txt for a TPU VM)",
        )
    ]


def metadata_problems(stack: ResolvedStack, boot: BootFiles) -> list[Problem]:
    """Metadata the program would set that Compute Engine would refuse, named by the stack key
    that makes it too large (job.args, or the worker count for the TF_CONFIG cluster)."""
    problems: list[Problem] = []
    cluster = stack.cluster
    if cluster is not None and boot.cluster_script is not None:
        tf_cluster = json.dumps(cluster.tf_cluster, separators=(",", ":")).encode()
        if len(tf_cluster) > MAX_METADATA_VALUE_BYTES:
            per_node = len(tf_cluster) / len(cluster.nodes)
            problems.append(
                Problem(
                    f"{NAMESPACE}:cluster.workers.count",
                    f"the TF_CONFIG cluster of {len(cluster.nodes)} nodes is {len(tf_cluster)} bytes, more than a metadata value holds "
                    f"({MAX_METADATA_VALUE_BYTES}); at most about {int(MAX_METADATA_VALUE_BYTES / per_node) - 1 - cluster.ps_count} workers",
                )
            )
        # Every node carries the same script and job metadata; only role, index and name
        # differ, by a few bytes, so the chief's size stands for all.
        size = _metadata_bytes({"startup-script": boot.cluster_script, **boot.cluster_metadata[cluster.chief.name]})
        if size > MAX_INSTANCE_METADATA_BYTES:
            problems.append(
                Problem(
                    f"{NAMESPACE}:job.args",
                    f"a node's metadata would be {size} bytes; Compute Engine allows {MAX_INSTANCE_METADATA_BYTES}",
                )
            )
    if boot.tpu_script is not None:
        size = _metadata_bytes({"startup-script": boot.tpu_script, **boot.tpu_metadata})
        if size > MAX_INSTANCE_METADATA_BYTES:
            problems.append(
                Problem(
                    f"{NAMESPACE}:job.args",
                    f"the TPU VM's metadata would be {size} bytes; at most {MAX_INSTANCE_METADATA_BYTES}",
                )
            )
    return problems
