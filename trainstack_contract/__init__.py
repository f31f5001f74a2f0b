"""The contract between the Pulumi program, the node agent and the trainer.

Everything two of them must agree on lives here, once: strategy and model names, the job's
defaults and bounds, the trainer flags the stack sets, node roles and names, the bucket and
job-directory layout, the instance metadata keys the node reads, the status objects nodes
write, and the TF_CONFIG cluster. The Pulumi side (``trainstack``) imports it, the node
agent (``trainstack_agent``) runs by it on every node, and the built-in trainer imports it.

It imports nothing but the standard library and runs on Python 3.10 (the oldest Python of
the node images): it ships inside the agent's archive and the trainer's, to nodes that have
no Pulumi, and the Pulumi side must not pay for a TensorFlow import.
"""

from __future__ import annotations

import argparse
import json
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Generic, Literal, TypeVar, get_args

# --- Strategies ----------------------------------------------------------------------
# What a stack's cluster may ask for; the trainer also takes "tpu" (the TPU VM asks for it).
ClusterStrategy = Literal["auto", "one_device", "mirrored", "multi_worker_mirrored", "parameter_server"]
Strategy = Literal[ClusterStrategy, "tpu"]
AUTO: Final = "auto"
ONE_DEVICE: Final = "one_device"
MIRRORED: Final = "mirrored"
MULTI_WORKER_MIRRORED: Final = "multi_worker_mirrored"
PARAMETER_SERVER: Final = "parameter_server"
TPU: Final = "tpu"
CLUSTER_STRATEGIES: Final[tuple[str, ...]] = get_args(ClusterStrategy)
STRATEGIES: Final[tuple[str, ...]] = (*CLUSTER_STRATEGIES, TPU)
# Strategies that train on one machine and need no TF_CONFIG cluster.
SINGLE_MACHINE_STRATEGIES: Final = (ONE_DEVICE, MIRRORED)


def auto_strategy(*, tpu: bool, parameter_servers: int, training_machines: int, devices_per_machine: int) -> str:
    """What ``auto`` means, as tensorflow_cloud chose it
    (https://github.com/tensorflow/cloud/blob/master/src/python/tensorflow_cloud/core/deploy.py):
    a TPU -> TPUStrategy; parameter servers -> ParameterServerStrategy; several training
    machines (chief and workers) -> MultiWorkerMirroredStrategy; several devices on the one
    machine -> MirroredStrategy; else one device.

    ``devices_per_machine`` is the GPUs of one machine (the stack knows them from the
    catalog, the trainer counts the visible ones) or, in tests, logical CPU devices."""
    if tpu:
        return TPU
    if parameter_servers > 0:
        return PARAMETER_SERVER
    if training_machines > 1:
        return MULTI_WORKER_MIRRORED
    if devices_per_machine > 1:
        return MIRRORED
    return ONE_DEVICE


# --- Models and the job's settings ----------------------------------------------------
Model = Literal["cnn", "resnet50"]
MODELS: Final[tuple[str, ...]] = get_args(Model)
CNN: Final = "cnn"
# The trainer reads this instead of a data path to generate images in memory.
SYNTHETIC_DATA: Final = "synthetic"


D = TypeVar("D", int, None)


@dataclass(frozen=True)
class Bound(Generic[D]):
    """A whole-number job setting: its default (None: the trainer decides) and its range.

    The ranges keep a typo (or a hostile value) from turning into a week of GPU time or a
    number no consumer can hold."""

    default: D
    low: int
    high: int

    def parse(self, text: str) -> int:
        """A command-line value of this setting (an argparse ``type``): a whole number in range.

        The trainer's flags and `trainstack local`'s overrides both take it, so the two accept
        exactly what a stack file accepts."""
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not self.low <= value <= self.high:
            raise argparse.ArgumentTypeError(f"{value} is not between {self.low} and {self.high}")
        return value


EPOCHS: Final = Bound(default=10, low=1, high=100_000)
BATCH_SIZE_PER_REPLICA: Final = Bound(default=32, low=1, high=65_536)
# None: one pass over the training files (synthetic data: the trainer's own default).
STEPS_PER_EPOCH: Final = Bound[None](default=None, low=1, high=10_000_000)
# 180: the image size of TensorFlow's flowers tutorial
# (https://www.tensorflow.org/tutorials/images/classification).
IMAGE_SIZE: Final = Bound(default=180, low=16, high=1024)


@dataclass(frozen=True)
class TrainerFlags:
    """The trainer's command-line flags that the stack sets from its own keys."""

    job_dir: str = "--job-dir"
    model: str = "--model"
    data: str = "--data"
    epochs: str = "--epochs"
    batch_size_per_replica: str = "--batch-size-per-replica"
    image_size: str = "--image-size"
    steps_per_epoch: str = "--steps-per-epoch"
    strategy: str = "--strategy"
    tpu: str = "--tpu"
    # Logical devices the CPU is split into: replicas for MirroredStrategy where no GPU or TPU
    # is (`trainstack local`'s stand-in for a TPU, the tests).
    logical_cpus: str = "--logical-cpus"


FLAGS: Final = TrainerFlags()
# The --tpu value on a TPU VM: the TPU attached to this host.
LOCAL_TPU: Final = "local"


# --- Nodes -------------------------------------------------------------------------------
Role = Literal["chief", "worker", "ps"]
CHIEF: Final = "chief"
WORKER: Final = "worker"
PS: Final = "ps"
ROLES: Final[tuple[str, ...]] = get_args(Role)
# A TF_CONFIG task type that is not a cluster member (the trainer's side-car evaluator).
EVALUATOR: Final = "evaluator"
# Node names of the machines that are not cluster members.
TPU_NODE: Final = "tpu"
NOTEBOOK_NODE: Final = "notebook"


def node_name(role: str, index: int) -> str:
    """A node's name in status objects, logs, local directories and VM names:
    chief (there is one), worker-0, ps-1."""
    return CHIEF if role == CHIEF else f"{role}-{index}"


def vm_name(prefix: str, node: str) -> str:
    """The Compute Engine or TPU name of a node of the stack named ``prefix``."""
    return f"{prefix}-{node}"


# --- The bucket and the job directory --------------------------------------------------
# What trainstack executes from, in its own bucket and in any other: the agent, the job's code
# and requirements, the wheelhouse, the notebook's post-startup script. No job directory and no
# machine's write grant may reach it, in any bucket.
EXECUTED_DIR: Final = "trainstack"
EXECUTED_PREFIX: Final = f"{EXECUTED_DIR}/"


def under_prefix(name: str, prefix: str) -> bool:
    """True when the object name or folder ``name`` is ``prefix`` (a folder, "a/") or lies
    under it: ``trainstack`` and ``trainstack/code`` are under ``trainstack/``, ``trainstackx`` is not."""
    return name == prefix.removesuffix("/") or name.startswith(prefix)


@dataclass(frozen=True)
class BucketLayout:
    """Object names in the stack's bucket, and paths inside a job directory.

    Job directory (a gs:// URI on the cloud, a local path in ``trainstack local``):

        status/job.json      the job's state, written by the chief's boot script (its heartbeat)
        status/<node>.json   each node's state and exit code
        status/settings.json what the job was first started with (module or image, arguments, env)
        backup/              BackupAndRestore state, removed by Keras when training ends
        checkpoints/         weights after every epoch
        logs/                TensorBoard event files
        model/               the exported SavedModel
        progress.json        epochs completed so far
        metrics.json         final metrics; its presence marks the job finished
        tmp/<node>/          scratch paths of non-chief workers
        hypertune/<node>.metrics  the node's cloudml-hypertune reports, copied by its agent
    """

    # In the bucket. Under trainstack/ (EXECUTED_DIR) is what nodes run: only `pulumi up` writes
    # it (a machine's account writes its job directory or its notebook area alone, and every
    # write grant excludes trainstack/ by name), every object is named by its content, and
    # each node checks its sha256, pinned in metadata, before use.
    # The job's code (the built-in trainer or a team's package) and its extra requirements:
    # a code change is a new object, so no node runs stale code.
    code_dir: str = f"{EXECUTED_DIR}/code"
    # The node agent's archive (trainstack_agent, run by every node's boot script).
    agent_dir: str = f"{EXECUTED_DIR}/agent"
    # Wheels a stack ships for nodes to install from instead of a package index
    # (storage.wheelhouse), listed with their digests in a manifest.
    wheelhouse: str = f"{EXECUTED_DIR}/wheelhouse"
    # The hash-locked requirements of the nodes' Python environment (locks/ in the repository).
    python_dir: str = f"{EXECUTED_DIR}/python"
    notebook_dir: str = f"{EXECUTED_DIR}/notebook"
    # Job directories: jobs/<name>, written by the machines that run that job alone.
    jobs: str = "jobs"
    # The notebook's own area: what its account may write (it reads the rest, results included).
    notebooks: str = "notebooks"
    # In a job directory:
    status_dir: str = "status"
    backup_dir: str = "backup"
    checkpoint_dir: str = "checkpoints"
    log_dir: str = "logs"
    model_dir: str = "model"
    tmp_dir: str = "tmp"
    progress: str = "progress.json"
    # What the job was first started with (module or image, arguments, env), written by the chief's
    # agent: a job started again under its name with other settings is refused.
    job_settings: str = "status/settings.json"
    # The finished marker: a job whose metrics file has status FINISHED is not trained again.
    metrics: str = "metrics.json"
    # Each node's copy of the file its job's code wrote through cloudml-hypertune
    # (HYPERTUNE_METRIC_FILE_ENV): hypertune/<node>.metrics, its last whole lines.
    hypertune_dir: str = "hypertune"

    @property
    def job_status(self) -> str:
        """The job's own status object, beside its nodes'."""
        return self.node_status("job")

    def job_dir(self, bucket: str, job_name: str) -> str:
        """``bucket`` is a gs:// URI or, locally, a directory path."""
        return posixpath.join(bucket, self.jobs, job_name)

    def notebook_job_dir(self, bucket: str) -> str:
        """Where the notebook's own runs write: in its area, never a cluster's job directory."""
        return posixpath.join(bucket, self.notebooks, "runs")

    def node_status(self, node: str) -> str:
        return posixpath.join(self.status_dir, f"{node}.json")

    def hypertune_metrics(self, node: str) -> str:
        """Where ``node``'s agent copies its job's hypertune report in the job directory."""
        return posixpath.join(self.hypertune_dir, f"{node}.metrics")

    def code_archive(self, package: str, digest: str) -> str:
        return posixpath.join(self.code_dir, f"{package}-{digest}.zip")

    def code_requirements(self, digest: str) -> str:
        return posixpath.join(self.code_dir, f"requirements-{digest}.txt")

    def agent_archive(self, digest: str) -> str:
        return posixpath.join(self.agent_dir, f"trainstack-agent-{digest}.pyz")

    def wheelhouse_manifest(self, digest: str) -> str:
        return posixpath.join(self.wheelhouse, f"manifest-{digest}.json")

    def python_lock(self, digest: str) -> str:
        return posixpath.join(self.python_dir, f"lock-{digest}.txt")

    def wheel(self, filename: str) -> str:
        return posixpath.join(self.wheelhouse, filename)

    def notebook_script(self, digest: str) -> str:
        return posixpath.join(self.notebook_dir, f"post-startup-{digest}.sh")


LAYOUT: Final = BucketLayout()
# A job directory a stack names itself (job.job_dir, AI Platform's --job-dir) in place of
# jobs/<name> in its own bucket: gs://BUCKET/PREFIX, PREFIX one or more folder names of
# letters, digits and "._=-" (never "." or ".." alone); the nodes get write access under it alone.
EXTERNAL_JOB_DIR: Final = re.compile(
    r"gs://(?P<bucket>[a-z0-9][a-z0-9_-]{1,61}[a-z0-9])"
    r"/(?P<prefix>(?!\.{1,2}(?:/|$))[A-Za-z0-9_.=-]{1,200}(?:/(?!\.{1,2}(?:/|$))[A-Za-z0-9_.=-]{1,200}){0,15})"
)
# The ``status`` of a finished job's metrics file.
FINISHED: Final = "finished"


@dataclass(frozen=True)
class JobStates:
    """The ``state`` of a status object."""

    running: str = "RUNNING"
    succeeded: str = "SUCCEEDED"
    failed: str = "FAILED"
    # The boot script got a termination signal: the job stays resumable.
    interrupted: str = "INTERRUPTED"
    # The termination signal came from Compute Engine reclaiming a Spot VM (the metadata
    # server's instance/preempted says TRUE): not a failure of the job, which stays resumable.
    preempted: str = "PREEMPTED"
    # `trainstack cancel` ended the job (a queued job of a standing cluster): not resumed.
    cancelled: str = "CANCELLED"


STATES: Final = JobStates()
# A status object's ``history``: its last states, oldest first, at most this many.
STATUS_HISTORY_LIMIT: Final = 50

# The built-in trainer's exit status when TensorFlow reports a peer lost (a preempted or dead
# node). A hint for its logs only: the node agent restarts any trainer whose exit follows a
# peer's loss, whatever its code, once the cluster is whole again (it resumes from its
# backup). 75 is EX_TEMPFAIL (sysexits.h).
EXIT_PEER_LOST: Final = 75

# Vertex AI sets these for custom jobs with a base output directory: <base>/model,
# <base>/checkpoints and <base>/logs
# (https://cloud.google.com/vertex-ai/docs/training/code-requirements#environment-variables).
VERTEX_MODEL_DIR_ENV: Final = "AIP_MODEL_DIR"
VERTEX_CHECKPOINT_DIR_ENV: Final = "AIP_CHECKPOINT_DIR"
VERTEX_TENSORBOARD_DIR_ENV: Final = "AIP_TENSORBOARD_LOG_DIR"

# AI Platform's cloudml-hypertune package (hypertune/hypertune.py in cloudml-hypertune
# 0.1.0.dev6 on PyPI, https://github.com/GoogleCloudPlatform/cloudml-hypertune) writes the
# metric a tuning trial reports to the file this variable names (/tmp/hypertune/output.metrics
# when unset): each report_hyperparameter_tuning_metric() rewrites the whole file with the last
# 100 reports, one JSON object per line (sorted keys: "checkpoint_path", "global_step",
# "timestamp", "trial", and the metric's tag; every value but the timestamp as text). The node
# agent sets it to a file of its own for each job and copies that file to
# LAYOUT.hypertune_metrics(node) in the job directory, at most its last
# MAX_HYPERTUNE_METRICS_BYTES in whole lines.
HYPERTUNE_METRIC_FILE_ENV: Final = "CLOUD_ML_HP_METRIC_FILE"
# The trial a job is, in hyperparameter tuning (1, 2, ...), as AI Platform and Vertex AI set it
# and cloudml-hypertune reads it ("trial" in its records): `trainstack tune` puts it in each
# trial's job.env; TensorFlow never reads it.
TRIAL_ID_ENV: Final = "CLOUD_ML_TRIAL_ID"
MAX_HYPERTUNE_METRICS_BYTES: Final = 1 << 20


# --- The job's own environment variables (job.env) ---------------------------------------------
# What a stack sets in its job's environment (Vertex AI's container ``env``), beside what
# trainstack sets itself. Names as shells take them; never one that trainstack, Vertex AI or
# TensorFlow's cluster set (TF_CONFIG, NODE_NAME, AIP_*, CLUSTER_SPEC), nor one that changes
# where programs and libraries load from (PATH, PYTHONPATH, LD_*). Not for secrets: those are
# trainstack:secrets, kept in Secret Manager.
JOB_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MAX_JOB_ENV: Final = 64
MAX_JOB_ENV_VALUE_CHARS: Final = 4096
# The whole mapping as instance metadata (JSON), far below Compute Engine's 256 KB per value.
MAX_JOB_ENV_CHARS: Final = 32 * 1024
RESERVED_JOB_ENV_NAMES: Final = frozenset(
    {
        "TF_CONFIG",
        "CLUSTER_SPEC",
        "NODE_NAME",
        HYPERTUNE_METRIC_FILE_ENV,
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "IFS",
        "PS4",
        "BASH_ENV",
        "ENV",
    }
)
RESERVED_JOB_ENV_PREFIXES: Final = ("AIP_", "TRAINSTACK_", "CLOUDSDK_", "LD_", "NVIDIA_", "PYTHON")
# PYTHON* variables that change only how Python reports and buffers, never what it loads.
ALLOWED_PYTHON_ENV: Final = frozenset(
    {
        "PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONWARNINGS", "PYTHONFAULTHANDLER", "PYTHONDONTWRITEBYTECODE",
        "PYTHONIOENCODING", "PYTHONUTF8",
    }
)  # fmt: skip


def job_env_problem(name: object, value: object) -> str | None:
    """Why ``name=value`` cannot be in a job's environment, or None. The name is quoted only
    once it matched the pattern; the value never is."""
    if not isinstance(name, str) or JOB_ENV_NAME.fullmatch(name) is None:
        return "a name is letters, digits and '_', not starting with a digit, at most 128 characters"
    if name in RESERVED_JOB_ENV_NAMES or (
        name.startswith(RESERVED_JOB_ENV_PREFIXES) and name not in ALLOWED_PYTHON_ENV
    ):
        return (
            f"{name} is set by trainstack, Vertex AI or the system, or changes what programs load "
            f"(reserved: {', '.join(sorted(RESERVED_JOB_ENV_NAMES))}, and names starting "
            f"{', '.join(RESERVED_JOB_ENV_PREFIXES)} but {', '.join(sorted(ALLOWED_PYTHON_ENV))})"
        )
    if not isinstance(value, str):
        return f"{name}: a value is text"
    if len(value) > MAX_JOB_ENV_VALUE_CHARS or not value.isprintable():
        return f"{name}: a value is printable text of at most {MAX_JOB_ENV_VALUE_CHARS} characters, on one line"
    return None


# --- What a node runs -------------------------------------------------------------------------
# A Python package run as `python -m MODULE` (the built-in trainer is one: BUILTIN_MODULE),
# a container image, or nothing at all (a dev box that boots ready and starts no trainer).
JobMode = Literal["package", "image", "none"]
PACKAGE_JOB: Final = "package"
IMAGE_JOB: Final = "image"
NO_JOB: Final = "none"
JOB_MODES: Final[tuple[JobMode, ...]] = (PACKAGE_JOB, IMAGE_JOB, NO_JOB)
# How a package job's archive becomes importable on a node: unpacked and put on PYTHONPATH
# (a package directory, or a directory holding one), or unpacked and installed with pip with
# its dependencies (a project root with pyproject.toml or setup.py).
CodeInstall = Literal["path", "project"]
PATH_INSTALL: Final = "path"
PROJECT_INSTALL: Final = "project"
CODE_INSTALLS: Final[tuple[CodeInstall, ...]] = (PATH_INSTALL, PROJECT_INSTALL)
BUILTIN_PACKAGE: Final = "trainer"
# This package: the built-in trainer imports it, so it ships beside the trainer.
CONTRACT_PACKAGE: Final = "trainstack_contract"
BUILTIN_MODULE: Final = "trainer.task"


# TensorFlow's switch for oneDNN's CPU kernels, read once as it loads: the built-in trainer asks
# for them (trainer.kernels), and a warm interpreter that loads TensorFlow for it
# (trainstack_agent.warm) sets it as the trainer would.
ONEDNN_SWITCH: Final = "TF_ENABLE_ONEDNN_OPTS"


def requirements_stamp(lock_sha256: str | None) -> str:
    """What a node's Python environment was installed from (the sha256 of its hash-locked
    requirements, or none): the agent reinstalls when it changes, and `trainstack local` stamps
    the environment it lends its nodes the same way."""
    return lock_sha256 or "none"


# --- Instance metadata the boot scripts and the node agent read -------------------------------
@dataclass(frozen=True)
class MetadataKeys:
    # The node agent's archive (a gs:// URI, or a path in `trainstack local`) and its sha256:
    # all a boot script reads.
    agent: str = "trainstack-agent"
    agent_sha256: str = "trainstack-agent-sha256"
    # What kind of machine the agent runs on (NODE_KINDS): how it releases itself.
    node_kind: str = "trainstack-node-kind"
    # The TPU node's own name (a TPU VM's host name is not the node's).
    tpu_name: str = "trainstack-tpu-name"
    role: str = "trainstack-role"
    index: str = "trainstack-index"
    node_name: str = "trainstack-node-name"
    # Names the project attribute that holds the TF_CONFIG cluster.
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
    # What the node runs (JOB_MODES), and with what: a package's archive object and module
    # (with its extra requirements object, if any), or a container image.
    job_mode: str = "trainstack-job-mode"
    code_archive: str = "trainstack-code-archive"
    code_archive_sha256: str = "trainstack-code-archive-sha256"
    module: str = "trainstack-module"
    # CODE_INSTALLS; absent means on PYTHONPATH.
    code_install: str = "trainstack-code-install"
    requirements: str = "trainstack-requirements"
    requirements_sha256: str = "trainstack-requirements-sha256"
    image: str = "trainstack-image"
    # The Python environment the agent installs for the job's code: a hash-locked requirements
    # object (locks/ in the repository) and its sha256, installed with --require-hashes
    # --no-deps; whether it sees the image's own packages (a TPU runtime's TensorFlow), and an
    # optional wheelhouse manifest to install from (with its sha256).
    python_lock: str = "trainstack-python-lock"
    python_lock_sha256: str = "trainstack-python-lock-sha256"
    system_site_packages: str = "trainstack-system-site-packages"
    wheelhouse: str = "trainstack-wheelhouse"
    wheelhouse_sha256: str = "trainstack-wheelhouse-sha256"
    # A Workbench instance's post-startup script (a gs:// URI, or a path in tests) and its
    # sha256: the instance's startup script fetches it, checks it and runs it.
    notebook_script: str = "trainstack-post-startup"
    notebook_script_sha256: str = "trainstack-post-startup-sha256"
    # GPUs on the node: a container gets them passed through (docker run --gpus all).
    gpu_count: str = "trainstack-gpu-count"
    # The job's secrets by name only, "ENV_NAME=SECRET_ID ...": the values stay in Secret
    # Manager until the boot script fetches them into the job's environment.
    secrets: str = "trainstack-secrets"
    # The job's own environment variables (job.env), a JSON object of names and text values.
    job_env: str = "trainstack-job-env"
    # Every node of the cluster by name, "chief worker-0 ...": a node whose trainer lost a
    # peer waits until none of them is down before it starts the trainer again.
    peers: str = "trainstack-peers"
    # The chief's only: the Spot peers it starts again when Compute Engine has preempted
    # them, "NODE=INSTANCE ...", and how often it does so for one node before the job FAILS.
    recover: str = "trainstack-recover"
    max_restarts: str = "trainstack-max-restarts"
    # How long a node waits with an empty job queue before it applies on_finish (seconds; 0:
    # at once, as a node without a queue did). `submit` starts stopped nodes again.
    idle_seconds: str = "trainstack-idle-seconds"
    # "true" for the built-in trainer's job: a standing node may start it in a warm interpreter
    # that loaded TensorFlow before the job came (trainstack_agent.warm); a team's code never.
    warm_start: str = "trainstack-warm-start"
    # How the node got its machine (CAPACITIES): written for flex_start and reservation nodes;
    # absent on an on-demand or Spot node, whose metadata stays as before the key existed.
    capacity: str = "trainstack-capacity"


METADATA_KEYS: Final = MetadataKeys()

# The label naming the stack on every resource the program creates: what the billing budget
# filters on and what the policy pack's cost-labels rule requires by default.
STACK_LABEL: Final = "trainstack-stack"

# What kind of machine a node is: a Compute Engine VM of a training cluster, or a TPU VM.
NodeKind = Literal["cluster", "tpu"]
CLUSTER_NODE_KIND: Final = "cluster"
TPU_NODE_KIND: Final = "tpu"
NODE_KINDS: Final[tuple[str, ...]] = get_args(NodeKind)

# How a node gets its machine (the stack's `capacity` key; Compute Engine's provisioning
# models): on demand, Spot, Dynamic Workload Scheduler flex-start, or from a reservation.
# The program writes it into a node's metadata (METADATA_KEYS.capacity) where it is not one of
# the two every stack had before the key existed (on demand, Spot).
Capacity = Literal["on_demand", "spot", "flex_start", "reservation"]
ON_DEMAND: Final = "on_demand"
SPOT: Final = "spot"
FLEX_START: Final = "flex_start"
RESERVATION: Final = "reservation"
CAPACITIES: Final[tuple[str, ...]] = get_args(Capacity)


# --- TF_CONFIG -------------------------------------------------------------------------------
def tf_cluster(members: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """The ``cluster`` of TF_CONFIG from (role, "host:port") pairs, in the order given:
    a role's list index is its task index."""
    cluster: dict[str, list[str]] = {}
    for role, address in members:
        cluster.setdefault(role, []).append(address)
    return cluster


def tf_config(cluster: dict[str, list[str]], role: str, index: int) -> str:
    """One node's TF_CONFIG."""
    return json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})
