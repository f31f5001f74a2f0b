"""Choosing and building the tf.distribute strategy from the environment.

The choice is a pure function of TF_CONFIG, the number of visible GPUs and the
--tpu flag, so it is unit-tested for GPU and TPU machines that this CI does not
have. ``auto`` is the contract's rule (``trainstack_contract.auto_strategy``), the same
one the stack's validation applies; here the devices are the visible GPUs, or the
logical CPU devices of a test.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainstack_contract import (
    AUTO,
    CHIEF,
    EVALUATOR,
    MIRRORED,
    MULTI_WORKER_MIRRORED,
    ONE_DEVICE,
    PARAMETER_SERVER,
    PS,
    TPU,
    WORKER,
    auto_strategy,
    node_name,
)

if TYPE_CHECKING:  # TensorFlow is imported lazily so the choice logic stays cheap to test.
    import tensorflow as tf


class StrategyError(ValueError):
    """The requested strategy does not fit the environment."""


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """What TF_CONFIG says about the cluster and this process's place in it."""

    cluster: dict[str, list[str]]
    task_type: str | None
    task_id: int

    @property
    def num_workers(self) -> int:
        """Training workers, counting the chief (MWMS treats it as worker 0)."""
        return len(self.cluster.get(CHIEF, [])) + len(self.cluster.get(WORKER, []))

    @property
    def num_ps(self) -> int:
        return len(self.cluster.get(PS, []))

    @property
    def task_name(self) -> str:
        return node_name(self.task_type or "local", self.task_id)


def parse_tf_config(environ: Mapping[str, str]) -> ClusterInfo:
    """Reads TF_CONFIG; an absent or empty one means a single local process.

    Every shape TensorFlow would misread (or trip over much later, on one node only) is a
    StrategyError naming what is wrong: the trainer reads TF_CONFIG before it waits for peers.
    """
    raw = environ.get("TF_CONFIG", "").strip()
    if not raw:
        return ClusterInfo(cluster={}, task_type=None, task_id=0)
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as error:
        raise StrategyError(f"TF_CONFIG is not valid JSON: {error}") from error
    if not isinstance(parsed, dict):
        raise StrategyError(f'TF_CONFIG must be a JSON object {{"cluster": ..., "task": ...}}, got {raw[:80]}')
    cluster = _tf_config_cluster(parsed.get("cluster", {}))
    task = parsed.get("task", {})
    if not isinstance(task, dict):
        raise StrategyError(f'TF_CONFIG task must be an object like {{"type": "worker", "index": 0}}, got {task!r}')
    task_type = task.get("type")
    task_id = _task_index(task.get("index", 0))
    known = {CHIEF, WORKER, PS, EVALUATOR}
    if task_type is not None and task_type not in known:
        raise StrategyError(f"TF_CONFIG task type {task_type!r} is not one of {sorted(known)}")
    if task_type in (CHIEF, WORKER, PS):
        members = len(cluster.get(task_type, []))
        if task_id >= members:
            listed = f"indexes 0..{members - 1}" if members else "none"
            raise StrategyError(
                f"TF_CONFIG task {task_type}:{task_id} is not in its cluster "
                f"({members} {task_type} task(s) listed: {listed})"
            )
    if len(cluster.get(CHIEF, [])) > 1:
        raise StrategyError("TF_CONFIG may name at most one chief")
    return ClusterInfo(cluster=cluster, task_type=task_type, task_id=task_id)


def _task_index(index: Any) -> int:
    """A whole number from 0; "1" is read as 1, as TensorFlow's resolvers do."""
    if isinstance(index, str) and index.strip().isdigit():
        return int(index)
    # bool is an int to Python, not to anyone writing TF_CONFIG by hand.
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise StrategyError(f"TF_CONFIG task index must be a whole number from 0, got {index!r}")
    return index


def _tf_config_cluster(raw: Any) -> dict[str, list[str]]:
    """The cluster of TF_CONFIG: each role a list of "host:port" strings.

    ``list()`` of a lone string would split it into characters, one "task" per letter."""
    if not isinstance(raw, dict):
        raise StrategyError(f'TF_CONFIG cluster must be an object like {{"worker": ["host:port"]}}, got {raw!r}')
    cluster: dict[str, list[str]] = {}
    for role, addresses in raw.items():
        if not isinstance(addresses, list) or not all(isinstance(address, str) for address in addresses):
            raise StrategyError(f'TF_CONFIG cluster {role!r} must be a list of "host:port" strings, got {addresses!r}')
        cluster[role] = list(addresses)
    return cluster


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
