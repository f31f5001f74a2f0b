"""The contract's small rules, each as the program, the agent and `trainstack local` rely on it.

The object names are what a node built by one release reads from a bucket written by another:
a change to one is a change of the contract, and these tests say so. Each case here was a
mutant that no test of the mutation selection reached (docs/mutation.md)."""

from __future__ import annotations

import pytest

from trainstack.stackmodel.secrets import JobSecret
from trainstack_contract import requirements_stamp
from trainstack_contract.layout import EXECUTED_PREFIX, LAYOUT, under_prefix
from trainstack_contract.queue import QueueEntry, QueueIndex
from trainstack_contract.tpu import is_pod_runtime

DIGEST = "0123456789abcdef"


@pytest.mark.parametrize(
    ("name", "under"),
    [
        ("trainstack", True),  # the folder itself, as a folder name has no slash
        ("trainstack/", True),
        ("trainstack/code/trainer-0123.zip", True),
        ("trainstackx", False),  # shares the letters, not the folder
        ("trainstackx/code", False),
        ("jobs/trainstack/x", False),  # the prefix further in
        ("", False),
    ],
)
def test_under_prefix_holds_the_folder_and_what_lies_in_it_and_nothing_that_only_begins_alike(
    name: str, under: bool
) -> None:
    assert under_prefix(name, EXECUTED_PREFIX) is under


def test_the_objects_nodes_run_are_named_by_their_digest_under_the_executed_folder() -> None:
    assert LAYOUT.agent_archive(DIGEST) == f"trainstack/agent/trainstack-agent-{DIGEST}.pyz"
    assert LAYOUT.code_requirements(DIGEST) == f"trainstack/code/requirements-{DIGEST}.txt"
    assert LAYOUT.wheelhouse_manifest(DIGEST) == f"trainstack/wheelhouse/manifest-{DIGEST}.json"
    assert LAYOUT.wheel("numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.whl") == (
        "trainstack/wheelhouse/numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.whl"
    )
    assert LAYOUT.hypertune_metrics("worker-0") == "hypertune/worker-0.metrics"


@pytest.mark.parametrize(
    ("runtime", "pod"),
    [
        ("tpu-vm-tf-2.17.0-pod-pjrt", True),
        ("tpu-vm-tf-2.17.0-pjrt", False),
        ("tpu-vm-tf-2.16.1-pod", False),  # the mark is "-pod-", inside the name
    ],
)
def test_a_pod_runtime_is_told_by_its_pod_mark(runtime: str, pod: bool) -> None:
    assert is_pod_runtime(runtime) is pod


def test_a_node_without_a_lock_stamps_its_environment_none_and_with_one_its_digest() -> None:
    assert requirements_stamp(None) == "none"
    assert requirements_stamp("") == "none"
    assert requirements_stamp("ab" * 32) == "ab" * 32


def test_an_index_without_ended_jobs_keeps_the_others_in_order_and_its_next_id() -> None:
    entries = tuple(QueueEntry(number, f"job{number}", "0" * 64, "2026-11-26T09:00:00Z") for number in (1, 2, 3, 4))
    index = QueueIndex(next_id=5, entries=entries)

    smaller = index.without(frozenset({1, 3}))

    assert [entry.id for entry in smaller.entries] == [2, 4]
    assert smaller.next_id == 5
    assert index.without(frozenset()).entries == entries


@pytest.mark.parametrize("value", [None, "s3cr3t-token"])
def test_a_secrets_repr_never_shows_its_value(value: str | None) -> None:
    shown = repr(JobSecret(value))

    assert shown == ("JobSecret(<set>)" if value is None else "JobSecret(<value>)")
    assert "s3cr3t" not in shown
