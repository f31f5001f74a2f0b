"""Shared test helpers: stack files written to a temporary folder, and plans of the shipped stacks.

A module of its own (not conftest.py): tests/trainer/ has a conftest too, and a bare
`import conftest` finds whichever of the two was imported first."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from trainstack.cloud.planning import Plan, run_plan
from trainstack.localrun.nodelogs import node_log
from trainstack.stackmodel.stackfile import STACKS_DIR, read_stack_config_map, stack_name_from_path

SHIPPED_STACKS = sorted(stack_name_from_path(p) for p in STACKS_DIR.glob("Pulumi.*.yaml"))

# The built-in trainer's flags for a job short enough to run locally that still saves
# (every 10 steps) and can be killed and resumed mid-way; two held-out batches of evaluation.
SHORT_RESUMABLE_JOB = {
    "--epochs": "3",
    "--steps-per-epoch": "30",
    "--image-size": "32",
    "--batch-size-per-replica": "8",
    "--save-every-steps": "10",
    "--eval-steps": "2",
}

# An AI Platform hptuning_config.yaml: a study of the built-in trainer's learning rate, on a log
# scale, for the best epoch_accuracy (format it with trials= and parallel=).
LEARNING_RATE_STUDY = """\
trainingInput:
  hyperparameters:
    goal: MAXIMIZE
    hyperparameterMetricTag: epoch_accuracy
    maxTrials: {trials}
    maxParallelTrials: {parallel}
    params:
      - parameterName: learning-rate
        type: DOUBLE
        minValue: 0.0001
        maxValue: 0.1
        scaleType: UNIT_LOG_SCALE
"""

# A valid multi-worker stack that the invalid-input tests mutate one key at a time.
BASE_CONFIG: dict[str, Any] = {
    "gcp:project": "test-project-123",
    "gcp:region": "us-central1",
    "trainstack:zone": "us-central1-a",
    "trainstack:labels": {"team": "vision"},
    "trainstack:cluster": {
        "chief": {"machine_type": "n1-standard-8", "accelerator": {"type": "nvidia-tesla-t4", "count": 2}},
        "workers": {
            "count": 2,
            "machine_type": "n1-standard-8",
            "accelerator": {"type": "nvidia-tesla-t4", "count": 2},
            "spot": True,
        },
        "strategy": "auto",
        "max_run_hours": 24,
        "on_finish": "stop",
    },
    "trainstack:job": {
        "name": "flowers_mwms",
        "model": "cnn",
        "data": "synthetic",
        "epochs": 10,
        "batch_size_per_replica": 32,
    },
}


# A valid single-host TPU VM stack.
TPU_STACK: dict[str, Any] = {
    "gcp:project": "test-project-123",
    "gcp:region": "us-central1",
    "trainstack:zone": "us-central1-b",
    "trainstack:tpu": {"accelerator_type": "v2-8", "runtime_version": "tpu-vm-tf-2.18.0-pjrt"},
}

# A change's value that removes its key.
DELETE = object()


def base_config() -> dict[str, Any]:
    return copy.deepcopy(BASE_CONFIG)


def with_changes(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``{"trainstack:cluster.chief.disk_gb": 0}``-style changes (DELETE removes)."""
    config = copy.deepcopy(base)
    for dotted, value in changes.items():
        *path, key = dotted.split(".")
        node = config
        for part in path:
            node = node.setdefault(part, {})
        if value is DELETE:
            node.pop(key, None)
        else:
            node[key] = value
    return config


def plan_of(path: Path) -> Plan:
    """Plan a stack file as `python -m trainstack plan --stack-file PATH` does."""
    return run_plan(stack_name_from_path(path), read_stack_config_map(path))


def write_stack(directory: Path, config: dict[str, Any], stack: str = "test") -> Path:
    path = directory / f"Pulumi.{stack}.yaml"
    path.write_text(yaml.safe_dump({"config": config}, sort_keys=False), encoding="utf-8")
    return path


_plans: dict[str, Plan] = {}


def plan_for(stack: str) -> Plan:
    """Plan a shipped stack once per test session (each plan runs the whole program)."""
    if stack not in _plans:
        _plans[stack] = run_plan(stack, read_stack_config_map(STACKS_DIR / f"Pulumi.{stack}.yaml"))
    return _plans[stack]


# Cloud Storage roles that can create, replace or delete objects.
WRITE_ROLES = {
    "roles/storage.objectUser",
    "roles/storage.objectAdmin",
    "roles/storage.objectCreator",
    "roles/storage.admin",
}
# The IAM Conditions subset the program writes, turned into Python one token at a time: a
# token outside it fails the test rather than being guessed at.
_CEL_TOKEN = re.compile(
    r'\s+|resource\.name\.startsWith\("(?P<prefix>[^"]*)"\)|resource\.name == "(?P<exact>[^"]*)"'
    r'|resource\.type == "(?P<type>[^"]*)"|&&|\|\||!|\(|\)'
)
OBJECT_TYPE = "storage.googleapis.com/Object"


def admits(expression: str, bucket: str, name: str) -> bool:
    """Whether an IAM condition lets its grant act on object ``name`` of ``bucket``."""
    words, position = [], 0
    while position < len(expression):
        token = _CEL_TOKEN.match(expression, position)
        assert token is not None, f"not in the subset this test reads: {expression[position:]!r}"
        text = token[0]
        if token["prefix"] is not None:
            words.append(f"name.startswith({token['prefix']!r})")
        elif token["exact"] is not None:
            words.append(f"(name == {token['exact']!r})")
        elif token["type"] is not None:
            words.append(f"(type == {token['type']!r})")
        else:
            words.append({"&&": " and ", "||": " or ", "!": " not "}.get(text, text))
        position = token.end()
    scope = {"name": f"projects/_/buckets/{bucket}/objects/{name}", "type": OBJECT_TYPE}
    return bool(eval("".join(words), {"__builtins__": {}}, scope))  # noqa: S307 (the program's own expression)


def may_write(grant: dict[str, Any], bucket: str, name: str) -> bool:
    """Whether a planned grant's inputs let its member write object ``name`` of ``bucket``."""
    condition = grant.get("condition")
    return grant["role"] in WRITE_ROLES and (not condition or admits(condition["expression"], bucket, name))


def node_log_tails(workdir: Path, lines: int = 40) -> str:
    """The last lines of every node's log in a local run's work directory: what a failed
    multi-node run's assertion shows, since the run's own output ends with the last node to
    stop, not with the one that failed first."""
    parts = []
    for log in sorted((workdir / "nodes").glob("*/boot.log")):
        node = log.parent.name
        tail = node_log(workdir, node).read_text(errors="replace").splitlines()[-lines:]
        parts.append(f"--- {node} ---\n" + "\n".join(tail))
    return "\n".join(parts) or f"no node logs under {workdir}"
