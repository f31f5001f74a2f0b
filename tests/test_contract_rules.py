"""The contract's small rules, each as the program, the agent and `trainstack local` rely on it.

The object names are what a node built by one release reads from a bucket written by another:
a change to one is a change of the contract, and these tests say so. Each case here was a
mutant that no test of the mutation selection reached (docs/mutation.md)."""

from __future__ import annotations

import json

import pytest

from trainstack.stackmodel.secrets import JobSecret
from trainstack_contract import requirements_stamp
from trainstack_contract.documents import json_object
from trainstack_contract.grants import submit_grants
from trainstack_contract.layout import EXECUTED_PREFIX, LAYOUT, under_prefix
from trainstack_contract.queue import QueueEntry, QueueFormatError, QueueIndex, queued_job_dir, read_spec, spec_sha256
from trainstack_contract.tf_config import TfConfigError, parse_tf_config
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
    assert LAYOUT.notebook_script(DIGEST) == f"trainstack/notebook/post-startup-{DIGEST}.sh"
    # The notebook's runs stay in its own area, apart from the clusters' jobs/.
    assert LAYOUT.notebook_job_dir("gs://acme_ml") == "gs://acme_ml/notebooks/runs"


def test_a_queued_job_writes_under_jobs_by_its_id_and_name() -> None:
    assert queued_job_dir("gs://acme_ml", 7, "resnet") == "gs://acme_ml/jobs/q7_resnet"
    assert LAYOUT.job_dir("gs://acme_ml", "resnet") == "gs://acme_ml/jobs/resnet"


def test_a_spec_is_read_only_within_its_bound_with_its_digest_and_version() -> None:
    def refused(data: bytes, digest: str | None = None) -> str:
        with pytest.raises(QueueFormatError, match=r"\S") as caught:  # the whole message is compared below
            read_spec(data, spec_sha256(data) if digest is None else digest)
        return str(caught.value)

    assert refused(b" " * (256 * 1024 + 1)) == "the job's spec is larger than 262144 bytes"
    # At the bound the size passes; what fails is that blanks are not JSON.
    assert refused(b" " * (256 * 1024)) == "the job's spec is not JSON"
    assert refused(b"{}", digest="0" * 64) == "the job's spec does not match the sha256 its queue entry names"
    assert refused(json.dumps({"version": 2, "metadata": {}}).encode()) == "the job's spec is not a version 1 spec"


def test_a_document_that_is_json_but_not_an_object_reads_as_none() -> None:
    assert json_object(b'{"state": "RUNNING"}') == {"state": "RUNNING"}
    assert json_object(b'["RUNNING"]') is None
    assert json_object(b"RUNNING") is None


@pytest.mark.parametrize(("index", "read"), [(1, 1), ("1", 1), (" 2 ", 2), (0, 0)])
def test_a_tf_config_task_index_is_a_whole_number_from_zero_as_tensorflow_reads_it(index: object, read: int) -> None:
    cluster = {"chief": ["h0:2222"], "worker": ["h1:2222", "h2:2222", "h3:2222"]}
    task_type = "chief" if read == 0 else "worker"
    text = json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})

    assert parse_tf_config(text).task_id == read


@pytest.mark.parametrize("index", [-1, 1.5, True, "one", None])
def test_any_other_tf_config_task_index_is_refused_by_name(index: object) -> None:
    text = json.dumps({"cluster": {"worker": ["h1:2222"]}, "task": {"type": "worker", "index": index}})

    with pytest.raises(TfConfigError) as caught:
        parse_tf_config(text)
    assert str(caught.value) == f"TF_CONFIG task index must be a whole number from 0, got {index!r}"


@pytest.mark.parametrize("document", ["  ", "{}"], ids=["blank", "no cluster or task"])
def test_a_tf_config_without_a_cluster_is_task_zero_of_one_local_process(document: str) -> None:
    config = parse_tf_config(document)

    assert (config.cluster, config.task_type, config.task_id) == ({}, None, 0)


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


def test_a_member_may_create_code_and_specs_replace_the_index_and_studies_and_write_nothing_else_there() -> None:
    """The grants' purposes name their Pulumi resources and their titles show in the console."""
    objects = "projects/_/buckets/acme_ml/objects"
    assert [(grant.purpose, grant.role, grant.expression, grant.title) for grant in submit_grants("acme_ml")] == [
        (
            "code",
            "roles/storage.objectCreator",
            f'resource.name.startsWith("{objects}/trainstack/code/")',
            "create job code under trainstack/code/",
        ),
        (
            "specs",
            "roles/storage.objectCreator",
            f'resource.name.startsWith("{objects}/trainstack/queue/specs/")',
            "create job specs under trainstack/queue/specs/",
        ),
        (
            "index",
            "roles/storage.objectUser",
            f'resource.name == "{objects}/trainstack/queue/index.json"',
            "replace the job queue's index alone",
        ),
        (
            "studies",
            "roles/storage.objectUser",
            f'resource.name.startsWith("{objects}/trainstack/tune/")',
            "create and replace tuning studies under trainstack/tune/",
        ),
    ]


CLUSTER = {"chief": ["h0:2222"], "worker": ["h1:2222", "h2:2222"]}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("not json", "TF_CONFIG is not valid JSON: Expecting value: line 1 column 1 (char 0)"),
        (
            "[" + "1," * 50 + "1]",
            'TF_CONFIG must be a JSON object {"cluster": ..., "task": ...}, got [' + "1," * 39 + "1",
        ),
        (
            json.dumps({"cluster": "h0:2222"}),
            'TF_CONFIG cluster must be an object like {"worker": ["host:port"]}, got \'h0:2222\'',
        ),
        (
            json.dumps({"cluster": {"worker": "h1:2222"}}),
            "TF_CONFIG cluster 'worker' must be a list of \"host:port\" strings, got 'h1:2222'",
        ),
        (
            json.dumps({"task": "worker"}),
            'TF_CONFIG task must be an object like {"type": "worker", "index": 0}, got \'worker\'',
        ),
        (
            json.dumps({"cluster": CLUSTER, "task": {"type": "boss", "index": 0}}),
            "TF_CONFIG task type 'boss' is not one of ['chief', 'evaluator', 'ps', 'worker']",
        ),
        (
            json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": 2}}),
            "TF_CONFIG task worker:2 is not in its cluster (2 worker task(s) listed: indexes 0..1)",
        ),
        (
            json.dumps({"cluster": CLUSTER, "task": {"type": "ps", "index": 0}}),
            "TF_CONFIG task ps:0 is not in its cluster (0 ps task(s) listed: none)",
        ),
        (
            json.dumps({"cluster": {"chief": ["h0:2222", "h9:2222"]}, "task": {"type": "chief", "index": 0}}),
            "TF_CONFIG may name at most one chief",
        ),
    ],
    ids=[
        "not json",
        "an array",
        "cluster text",
        "addresses text",
        "task text",
        "unknown type",
        "index past",
        "no such role",
        "two chiefs",
    ],
)
def test_a_tf_config_that_cannot_hold_the_node_is_refused_with_what_was_wrong(document: str, message: str) -> None:
    with pytest.raises(TfConfigError) as caught:
        parse_tf_config(document)
    assert str(caught.value) == message
