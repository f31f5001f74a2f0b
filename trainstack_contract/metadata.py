"""Instance metadata: what the program writes into a node's metadata and the node reads back.

Standard library only, Python 3.10.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args


@dataclass(frozen=True)
class MetadataKeys:
    """The instance metadata keys the boot scripts and the node agent read."""

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

# What a node does when its work ends (the stack's on_finish; the metadata's on_finish key):
# stop its machine, delete it, or keep it running.
OnFinish = Literal["stop", "delete", "keep"]
ON_FINISH_CHOICES: Final[tuple[str, ...]] = get_args(OnFinish)

# What a node runs (the metadata's job_mode), and how a package job's code is installed
# (code_install).
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

# Bounds the stack file's keys take and a node checks again in its metadata.
# Compute Engine's longest run-time limit, 120 days: the stack's max_run_hours, a TPU VM's cap
# (max_run_seconds) and a flex-start node's run.
MAX_RUN_SECONDS: Final = 120 * 86400
# How long a node waits with an empty job queue before on_finish: whole minutes, at most a week
# (the stack's idle_minutes; idle_seconds in metadata).
MAX_IDLE_MINUTES: Final = 7 * 24 * 60
# How often the chief starts one preempted Spot peer again before the job fails (max_restarts).
MAX_RESTARTS: Final = 100
# The job's arguments (job.args; trainer_args in metadata): at most this many.
MAX_JOB_ARGS: Final = 256
