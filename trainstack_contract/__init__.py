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
import re
from dataclasses import dataclass
from typing import Final, Generic, Literal, TypeVar, get_args

from trainstack_contract.layout import EXECUTED_DIR as EXECUTED_DIR
from trainstack_contract.layout import EXECUTED_PREFIX as EXECUTED_PREFIX
from trainstack_contract.layout import EXTERNAL_JOB_DIR as EXTERNAL_JOB_DIR
from trainstack_contract.layout import FINISHED as FINISHED
from trainstack_contract.layout import LAYOUT as LAYOUT
from trainstack_contract.layout import BucketLayout as BucketLayout
from trainstack_contract.layout import under_prefix as under_prefix
from trainstack_contract.metadata import CAPACITIES as CAPACITIES
from trainstack_contract.metadata import CLUSTER_NODE_KIND as CLUSTER_NODE_KIND
from trainstack_contract.metadata import FLEX_START as FLEX_START
from trainstack_contract.metadata import METADATA_KEYS as METADATA_KEYS
from trainstack_contract.metadata import NODE_KINDS as NODE_KINDS
from trainstack_contract.metadata import ON_DEMAND as ON_DEMAND
from trainstack_contract.metadata import RESERVATION as RESERVATION
from trainstack_contract.metadata import SPOT as SPOT
from trainstack_contract.metadata import STACK_LABEL as STACK_LABEL
from trainstack_contract.metadata import TPU_NODE_KIND as TPU_NODE_KIND
from trainstack_contract.metadata import Capacity as Capacity
from trainstack_contract.metadata import MetadataKeys as MetadataKeys
from trainstack_contract.metadata import NodeKind as NodeKind
from trainstack_contract.names import CHIEF as CHIEF
from trainstack_contract.names import EVALUATOR as EVALUATOR
from trainstack_contract.names import NOTEBOOK_NODE as NOTEBOOK_NODE
from trainstack_contract.names import PS as PS
from trainstack_contract.names import ROLES as ROLES
from trainstack_contract.names import TPU_NODE as TPU_NODE
from trainstack_contract.names import WORKER as WORKER
from trainstack_contract.names import Role as Role
from trainstack_contract.names import node_name as node_name
from trainstack_contract.names import vm_name as vm_name
from trainstack_contract.tf_config import tf_cluster as tf_cluster
from trainstack_contract.tf_config import tf_config as tf_config

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
