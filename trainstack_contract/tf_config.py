"""TF_CONFIG: the cluster the program writes, the agent hands each node, and the trainer reads.

One function builds a node's TF_CONFIG (the Pulumi side, `trainstack local` and the agent all
call :func:`tf_config`), and one reads it back (:func:`parse_tf_config`: the trainer before it
builds its strategy, the agent when it checks the cluster in project metadata and looks for
the node's port). Every shape TensorFlow would misread, or trip over much later on one node
only, is a :class:`TfConfigError` naming what is wrong.

Standard library only, Python 3.10.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from trainstack_contract.names import CHIEF, EVALUATOR, PS, ROLES, WORKER, node_name

# The task types of the cluster's members (ROLES); the trainer's side-car evaluator is none.
MEMBER_TYPES: Final = ROLES


class TfConfigError(ValueError):
    """A TF_CONFIG (or its cluster) that is not one TensorFlow reads as meant; the message says why."""


@dataclass(frozen=True)
class TfConfig:
    """What TF_CONFIG says about the cluster and this process's place in it."""

    cluster: dict[str, list[str]]
    task_type: str | None
    task_id: int

    @property
    def num_workers(self) -> int:
        """Training workers, counting the chief (MultiWorkerMirroredStrategy treats it as worker 0)."""
        return len(self.cluster.get(CHIEF, [])) + len(self.cluster.get(WORKER, []))

    @property
    def num_ps(self) -> int:
        return len(self.cluster.get(PS, []))

    @property
    def task_name(self) -> str:
        return node_name(self.task_type or "local", self.task_id)

    @property
    def own_address(self) -> str | None:
        """This task's "host:port" in the cluster; None for a task that is not a member."""
        if self.task_type not in MEMBER_TYPES:
            return None
        return self.cluster[self.task_type][self.task_id]


def cluster_key(raw: str | None) -> str:
    """What a process that made its strategy from TF_CONFIG ``raw`` is bound to, as one string:
    the cluster and this node's task, where the cluster has more than one task (a lone task
    makes no server: an empty key, as for no TF_CONFIG). A tuning trial's number
    (``task.trial``) names no process and is left out. A TF_CONFIG that does not parse is its
    own key."""
    if not raw:
        return ""
    try:
        parsed = json.loads(raw)
        cluster = parsed.get("cluster") or {}
        task = parsed.get("task") or {}
        if sum(len(addresses) for addresses in cluster.values()) <= 1:
            return ""
        return json.dumps({"cluster": cluster, "type": task.get("type"), "index": task.get("index")}, sort_keys=True)
    except (ValueError, AttributeError, TypeError):
        return raw


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


def trial_tf_config(node_tf_config: str | None, trial: str, own_address: str) -> str:
    """A tuning trial's TF_CONFIG: the node's, or for a trial on one machine a cluster of that
    one chief at ``own_address``, with the trial's number in ``task.trial`` as AI Platform set
    it (its samples join it to their output directory, so that trials keep their own)."""
    parsed = json.loads(node_tf_config) if node_tf_config else json.loads(tf_config({CHIEF: [own_address]}, CHIEF, 0))
    parsed["task"]["trial"] = trial
    return json.dumps(parsed)


def read_cluster(raw: Any) -> dict[str, list[str]]:
    """The cluster of TF_CONFIG: each role a list of "host:port" strings.

    ``list()`` of a lone string would split it into characters, one "task" per letter."""
    if not isinstance(raw, dict):
        raise TfConfigError(f'TF_CONFIG cluster must be an object like {{"worker": ["host:port"]}}, got {raw!r}')
    cluster: dict[str, list[str]] = {}
    for role, addresses in raw.items():
        if not isinstance(addresses, list) or not all(isinstance(address, str) for address in addresses):
            raise TfConfigError(f'TF_CONFIG cluster {role!r} must be a list of "host:port" strings, got {addresses!r}')
        cluster[str(role)] = list(addresses)
    return cluster


def check_task(cluster: dict[str, list[str]], task_type: str | None, task_id: int) -> None:
    """A member task must be listed in its cluster, and a cluster has at most one chief."""
    if task_type in MEMBER_TYPES:
        members = len(cluster.get(task_type, []))
        if task_id >= members:
            listed = f"indexes 0..{members - 1}" if members else "none"
            raise TfConfigError(
                f"TF_CONFIG task {task_type}:{task_id} is not in its cluster "
                f"({members} {task_type} task(s) listed: {listed})"
            )
    if len(cluster.get(CHIEF, [])) > 1:
        raise TfConfigError("TF_CONFIG may name at most one chief")


def _task_index(index: Any) -> int:
    """A whole number from 0; "1" is read as 1, as TensorFlow's resolvers do."""
    if isinstance(index, str) and index.strip().isdigit():
        return int(index)
    # bool is an int to Python, not to anyone writing TF_CONFIG by hand.
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise TfConfigError(f"TF_CONFIG task index must be a whole number from 0, got {index!r}")
    return index


def parse_tf_config(text: str) -> TfConfig:
    """A TF_CONFIG read whole; an empty one means a single local process."""
    raw = text.strip()
    if not raw:
        return TfConfig(cluster={}, task_type=None, task_id=0)
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as error:
        raise TfConfigError(f"TF_CONFIG is not valid JSON: {error}") from error
    if not isinstance(parsed, dict):
        raise TfConfigError(f'TF_CONFIG must be a JSON object {{"cluster": ..., "task": ...}}, got {raw[:80]}')
    cluster = read_cluster(parsed.get("cluster", {}))
    task = parsed.get("task", {})
    if not isinstance(task, dict):
        raise TfConfigError(f'TF_CONFIG task must be an object like {{"type": "worker", "index": 0}}, got {task!r}')
    task_type = task.get("type")
    task_id = _task_index(task.get("index", 0))
    known = {*MEMBER_TYPES, EVALUATOR}
    if task_type is not None and (not isinstance(task_type, str) or task_type not in known):
        raise TfConfigError(f"TF_CONFIG task type {task_type!r} is not one of {sorted(known)}")
    check_task(cluster, task_type, task_id)
    return TfConfig(cluster=cluster, task_type=task_type, task_id=task_id)
