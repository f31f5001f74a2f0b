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
from dataclasses import dataclass
from typing import Final, Generic, Literal, TypeVar, get_args

from trainstack_contract.jobenv import ALLOWED_PYTHON_ENV as ALLOWED_PYTHON_ENV
from trainstack_contract.jobenv import HYPERTUNE_METRIC_FILE_ENV as HYPERTUNE_METRIC_FILE_ENV
from trainstack_contract.jobenv import JOB_ENV_NAME as JOB_ENV_NAME
from trainstack_contract.jobenv import MAX_HYPERTUNE_METRICS_BYTES as MAX_HYPERTUNE_METRICS_BYTES
from trainstack_contract.jobenv import MAX_JOB_ENV as MAX_JOB_ENV
from trainstack_contract.jobenv import MAX_JOB_ENV_CHARS as MAX_JOB_ENV_CHARS
from trainstack_contract.jobenv import MAX_JOB_ENV_VALUE_CHARS as MAX_JOB_ENV_VALUE_CHARS
from trainstack_contract.jobenv import RESERVED_JOB_ENV_NAMES as RESERVED_JOB_ENV_NAMES
from trainstack_contract.jobenv import RESERVED_JOB_ENV_PREFIXES as RESERVED_JOB_ENV_PREFIXES
from trainstack_contract.jobenv import TRIAL_ID_ENV as TRIAL_ID_ENV
from trainstack_contract.jobenv import job_env_problem as job_env_problem
from trainstack_contract.layout import EXECUTED_DIR as EXECUTED_DIR
from trainstack_contract.layout import EXECUTED_PREFIX as EXECUTED_PREFIX
from trainstack_contract.layout import EXTERNAL_JOB_DIR as EXTERNAL_JOB_DIR
from trainstack_contract.layout import FINISHED as FINISHED
from trainstack_contract.layout import LAYOUT as LAYOUT
from trainstack_contract.layout import BucketLayout as BucketLayout
from trainstack_contract.layout import under_prefix as under_prefix
from trainstack_contract.metadata import CAPACITIES as CAPACITIES
from trainstack_contract.metadata import CLUSTER_NODE_KIND as CLUSTER_NODE_KIND
from trainstack_contract.metadata import CODE_INSTALLS as CODE_INSTALLS
from trainstack_contract.metadata import FLEX_START as FLEX_START
from trainstack_contract.metadata import IMAGE_JOB as IMAGE_JOB
from trainstack_contract.metadata import JOB_MODES as JOB_MODES
from trainstack_contract.metadata import METADATA_KEYS as METADATA_KEYS
from trainstack_contract.metadata import NO_JOB as NO_JOB
from trainstack_contract.metadata import NODE_KINDS as NODE_KINDS
from trainstack_contract.metadata import ON_DEMAND as ON_DEMAND
from trainstack_contract.metadata import PACKAGE_JOB as PACKAGE_JOB
from trainstack_contract.metadata import PATH_INSTALL as PATH_INSTALL
from trainstack_contract.metadata import PROJECT_INSTALL as PROJECT_INSTALL
from trainstack_contract.metadata import RESERVATION as RESERVATION
from trainstack_contract.metadata import SPOT as SPOT
from trainstack_contract.metadata import STACK_LABEL as STACK_LABEL
from trainstack_contract.metadata import TPU_NODE_KIND as TPU_NODE_KIND
from trainstack_contract.metadata import Capacity as Capacity
from trainstack_contract.metadata import CodeInstall as CodeInstall
from trainstack_contract.metadata import JobMode as JobMode
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
# None: the trainer's own interval (trainer/config.py SAVE_EVERY_SECONDS, five minutes).
SAVE_EVERY_MINUTES: Final = Bound[None](default=None, low=1, high=24 * 60)


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
    save_every_seconds: str = "--save-every-seconds"
    strategy: str = "--strategy"
    tpu: str = "--tpu"
    # Logical devices the CPU is split into: replicas for MirroredStrategy where no GPU or TPU
    # is (`trainstack local`'s stand-in for a TPU, the tests).
    logical_cpus: str = "--logical-cpus"


FLAGS: Final = TrainerFlags()
# The --tpu value on a TPU VM: the TPU attached to this host.
LOCAL_TPU: Final = "local"


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


# --- What a node runs -------------------------------------------------------------------------
BUILTIN_PACKAGE: Final = "trainer"
# This package: the built-in trainer imports it, so it ships beside the trainer.
CONTRACT_PACKAGE: Final = "trainstack_contract"
BUILTIN_MODULE: Final = "trainer.task"
# Its rehearsal (trainer.rehearsal.rehearse): a standing node's warm interpreter prepares the
# next job's strategy and model with it (trainstack_agent.warm).
REHEARSAL_MODULE: Final = "trainer.rehearsal"
# What the rehearsal tells the agent once its strategy is made, every node of the cluster with
# it: what remains (the model, one traced step) depends on no node that has not come.
REHEARSAL_STRATEGY_MADE: Final = "strategy made"


# TensorFlow's switch for oneDNN's CPU kernels, read once as it loads: the built-in trainer asks
# for them (trainer.kernels), and a warm interpreter that loads TensorFlow for it
# (trainstack_agent.warm) sets it as the trainer would.
ONEDNN_SWITCH: Final = "TF_ENABLE_ONEDNN_OPTS"


def requirements_stamp(lock_sha256: str | None) -> str:
    """What a node's Python environment was installed from (the sha256 of its hash-locked
    requirements, or none): the agent reinstalls when it changes, and `trainstack local` stamps
    the environment it lends its nodes the same way."""
    return lock_sha256 or "none"
