"""Strategy choice from TF_CONFIG, GPUs and --tpu, including machines CI does not have."""

from __future__ import annotations

import json

import pytest

from trainer.strategy import (
    MIRRORED,
    MULTI_WORKER_MIRRORED,
    ONE_DEVICE,
    PARAMETER_SERVER,
    TPU,
    ClusterInfo,
    StrategyError,
    choose_strategy,
    parse_tf_config,
)


def tf_config(cluster: dict[str, int], task: str, index: int = 0) -> dict[str, str]:
    addresses = {role: [f"host-{role}-{i}:2222" for i in range(count)] for role, count in cluster.items()}
    return {"TF_CONFIG": json.dumps({"cluster": addresses, "task": {"type": task, "index": index}})}


LOCAL = parse_tf_config({})


@pytest.mark.parametrize(
    ("environ", "gpus", "tpu", "expected"),
    [
        ({}, 0, None, ONE_DEVICE),
        ({}, 1, None, ONE_DEVICE),
        ({}, 4, None, MIRRORED),  # one machine, several GPUs
        ({}, 0, "local", TPU),  # TPU VM
        ({}, 8, "my-tpu", TPU),  # a TPU wins over GPUs when asked for
        (tf_config({"worker": 2}, "worker", 1), 0, None, MULTI_WORKER_MIRRORED),
        (tf_config({"chief": 1, "worker": 3}, "chief"), 4, None, MULTI_WORKER_MIRRORED),
        (tf_config({"chief": 1, "worker": 2, "ps": 1}, "chief"), 0, None, PARAMETER_SERVER),
        (tf_config({"chief": 1, "worker": 9, "ps": 3}, "chief"), 4, None, PARAMETER_SERVER),
        (tf_config({"worker": 1}, "worker"), 2, None, MIRRORED),  # a one-worker "cluster"
    ],
)
def test_auto_follows_tensorflow_cloud(environ: dict[str, str], gpus: int, tpu: str | None, expected: str) -> None:
    assert choose_strategy("auto", parse_tf_config(environ), gpus, tpu) == expected


def test_logical_cpus_select_mirrored_without_gpus() -> None:
    assert choose_strategy("auto", LOCAL, num_gpus=0, tpu=None, logical_cpus=2) == MIRRORED


@pytest.mark.parametrize(
    ("requested", "environ", "tpu"),
    [
        ("tpu", {}, None),
        ("tpu", tf_config({"chief": 1, "worker": 1, "ps": 1}, "chief"), "local"),
        ("parameter_server", {}, None),
        ("parameter_server", tf_config({"worker": 2, "ps": 1}, "worker"), None),  # no chief
        ("multi_worker_mirrored", tf_config({"chief": 1, "worker": 1, "ps": 1}, "chief"), None),
        ("mirrored", tf_config({"worker": 2}, "worker"), None),
        ("one_device", tf_config({"chief": 1, "worker": 1, "ps": 1}, "chief"), None),
    ],
)
def test_mismatched_requests_fail_with_a_reason(requested: str, environ: dict[str, str], tpu: str | None) -> None:
    with pytest.raises(StrategyError):
        choose_strategy(requested, parse_tf_config(environ), 0, tpu)


def test_explicit_requests_that_fit_are_kept() -> None:
    cluster = parse_tf_config(tf_config({"worker": 2}, "worker"))
    assert choose_strategy("multi_worker_mirrored", cluster, 0, None) == MULTI_WORKER_MIRRORED
    assert choose_strategy("one_device", LOCAL, 4, None) == ONE_DEVICE
    assert choose_strategy("tpu", LOCAL, 0, "local") == TPU


def test_tf_config_roles_are_parsed() -> None:
    info = parse_tf_config(tf_config({"chief": 1, "worker": 2, "ps": 1, "evaluator": 1}, "evaluator"))
    assert info.task_type == "evaluator"
    assert info.num_workers == 3
    assert info.num_ps == 1
    assert parse_tf_config(tf_config({"worker": 2}, "worker", 1)).task_name == "worker-1"
    assert not LOCAL.cluster
    assert LOCAL.task_type is None


@pytest.mark.parametrize(
    "raw",
    [
        "{not json",
        json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "master", "index": 0}}),
        json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}),
        # A type that is not text is refused as any unknown type, not raised as a TypeError.
        json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": ["worker"], "index": 0}}),
    ],
)
def test_broken_tf_config_is_rejected(raw: str) -> None:
    with pytest.raises(StrategyError):
        parse_tf_config({"TF_CONFIG": raw})


def test_cluster_info_counts_chief_as_worker() -> None:
    info = ClusterInfo(cluster={"chief": ["a:1"], "worker": ["b:1"]}, task_type="chief", task_id=0)
    assert info.num_workers == 2
