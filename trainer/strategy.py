"""Choosing and building the tf.distribute strategy from the environment.

The choice is a pure function of TF_CONFIG, the number of visible GPUs and the
--tpu flag, so it is unit-tested for GPU and TPU machines that this CI does not
have. ``auto`` is the contract's rule (``trainstack_contract.auto_strategy``), the same
one the stack's validation applies; here the devices are the visible GPUs, or the
logical CPU devices of a test.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainstack_contract import (
    AUTO,
    CHIEF,
    MIRRORED,
    MULTI_WORKER_MIRRORED,
    ONE_DEVICE,
    PARAMETER_SERVER,
    TPU,
    auto_strategy,
)
from trainstack_contract.tf_config import TfConfig, TfConfigError
from trainstack_contract.tf_config import parse_tf_config as read_tf_config

if TYPE_CHECKING:  # TensorFlow is imported lazily so the choice logic stays cheap to test.
    import tensorflow as tf


class StrategyError(ValueError):
    """The requested strategy does not fit the environment."""


# What TF_CONFIG says about the cluster and this process's place in it (the contract reads it).
ClusterInfo = TfConfig


def parse_tf_config(environ: Mapping[str, str]) -> ClusterInfo:
    """Reads TF_CONFIG (the contract's reading); an absent or empty one means a single local
    process. A TF_CONFIG TensorFlow would misread is a StrategyError naming what is wrong: the
    trainer reads TF_CONFIG before it waits for peers."""
    try:
        return read_tf_config(environ.get("TF_CONFIG", ""))
    except TfConfigError as error:
        raise StrategyError(str(error)) from error


def choose_strategy(requested: str, cluster: ClusterInfo, num_gpus: int, tpu: str | None, logical_cpus: int = 1) -> str:
    """Returns the strategy kind for this environment, or raises StrategyError.

    Explicit requests are checked against the environment, because a mismatch
    (say parameter_server without any ps task) would otherwise hang or fail deep
    inside TensorFlow with a far less helpful message.
    """
    if requested == AUTO:
        return auto_strategy(
            tpu=bool(tpu),
            parameter_servers=cluster.num_ps,
            training_machines=cluster.num_workers,
            devices_per_machine=max(num_gpus, logical_cpus),
        )
    if requested == TPU:
        if not tpu:
            raise StrategyError("--strategy tpu needs --tpu NAME or --tpu local")
        if cluster.num_ps > 0:
            # TPUStrategy has no parameter servers; AI Platform Training rejected such jobs
            # (https://cloud.google.com/ai-platform/training/docs/using-tpus). Fail before connecting.
            raise StrategyError("a TPU job cannot have parameter servers in TF_CONFIG")
        return TPU
    if requested == PARAMETER_SERVER:
        if cluster.num_ps == 0 or not cluster.cluster.get(CHIEF):
            raise StrategyError(f"{PARAMETER_SERVER} needs TF_CONFIG with a chief, workers and at least one ps")
        return PARAMETER_SERVER
    if requested == MULTI_WORKER_MIRRORED:
        if cluster.num_ps > 0:
            raise StrategyError(f"{MULTI_WORKER_MIRRORED} cannot use the ps tasks in TF_CONFIG")
        return MULTI_WORKER_MIRRORED
    if requested in (MIRRORED, ONE_DEVICE):
        if cluster.num_workers > 1 or cluster.num_ps > 0:
            raise StrategyError(
                f"{requested} is single-machine but TF_CONFIG describes a cluster; "
                f"use {MULTI_WORKER_MIRRORED}, {PARAMETER_SERVER} or {AUTO}"
            )
        return requested
    raise StrategyError(f"unknown strategy {requested!r}")


def configure_logical_cpus(count: int) -> None:
    """Splits the CPU into logical devices; must run before TensorFlow initialises."""
    if count <= 1:
        return
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])


def build_strategy(kind: str, tpu: str | None = None) -> tf.distribute.Strategy:
    """Creates the strategy object. Parameter-server workers never call this."""
    import tensorflow as tf

    if kind == TPU:
        # connect() resolves the TPU ("local" on a TPU VM, else its name),
        # connects to it and initialises the TPU system, in the documented order.
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver.connect(tpu=tpu)
        return tf.distribute.TPUStrategy(resolver)
    if kind == PARAMETER_SERVER:
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return tf.distribute.ParameterServerStrategy(resolver)
    if kind == MULTI_WORKER_MIRRORED:
        return tf.distribute.MultiWorkerMirroredStrategy()
    if kind == MIRRORED:
        gpus = tf.config.list_logical_devices("GPU")
        if gpus:
            return tf.distribute.MirroredStrategy()
        # No GPU: mirror over the logical CPU devices (tests) instead of
        # silently falling back to a single replica.
        cpus = [device.name for device in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices=cpus, cross_device_ops=tf.distribute.ReductionToOneDevice())
    if kind == ONE_DEVICE:
        # The default strategy, not OneDeviceStrategy: tf-keras' BackupAndRestore
        # rejects OneDeviceStrategy. The default one places work on GPU:0 when
        # there is a GPU and on the CPU otherwise.
        return tf.distribute.get_strategy()
    raise StrategyError(f"unknown strategy {kind!r}")


def task_identity(strategy: Any) -> tuple[str, int]:
    """(task_type, task_id) for naming per-worker temporary paths; ('local', 0) alone."""
    resolver = getattr(strategy, "cluster_resolver", None)
    task_type = getattr(resolver, "task_type", None) if resolver is not None else None
    task_id = getattr(resolver, "task_id", None) if resolver is not None else None
    return (task_type or "local", int(task_id or 0))
