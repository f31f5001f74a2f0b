"""Only `pulumi up` writes what nodes run: no machine's account may write the agent, the code,
the requirements, the wheels or the notebook's script, in any shipped stack's plan."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stack_helpers import SHIPPED_STACKS, WRITE_ROLES, admits, base_config, may_write, plan_for, plan_of, write_stack
from trainstack.cloud.components.identity import job_dir_condition, writable_objects_condition
from trainstack.commands.main import main


def grants_on(document: dict[str, Any], bucket: str) -> list[dict[str, Any]]:
    return [
        r["inputs"]
        for r in document["resources"]
        if r["type"] == "gcp:storage/bucketIAMMember:BucketIAMMember" and r["inputs"]["bucket"] == bucket
    ]


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_no_machine_can_write_what_nodes_run(stack: str) -> None:
    document = json.loads(json.dumps(plan_for(stack).to_json()))
    bucket = document["bucket_access"]["bucket"]
    executed = [
        r["inputs"]["name"]
        for r in document["resources"]
        if r["type"] == "gcp:storage/bucketObject:BucketObject" and r["inputs"]["bucket"] == bucket
    ]
    assert executed, "a stack with machines uploads what they run"
    writers = [g for g in grants_on(document, bucket) if g["role"] in WRITE_ROLES]
    assert writers, "the machines write their job directories or the notebook's area"
    for grant in writers:
        for name in [*executed, "trainstack/agent/new.pyz", "trainstack/notebook/post-startup-0.sh"]:
            assert not may_write(grant, bucket, name), (grant["member"], name)
    assert document["bucket_access"]["writable_executed_objects"] == []


@pytest.mark.parametrize("prefix", ["", "jobs/", "trainstack/", "trainstack/code/"])
def test_a_write_condition_excludes_what_machines_run_whatever_its_prefix(prefix: str) -> None:
    """Even a mistaken prefix (none, or one that reaches trainstack/) cannot reach what nodes run."""
    for expression in (writable_objects_condition("b", prefix), job_dir_condition("b", prefix.rstrip("/") or "x")):
        for name in ("trainstack/code/trainer-0.zip", "trainstack/agent/a.pyz", "trainstack/notebook/p.sh"):
            assert not admits(expression, "b", name), (expression, name)
    assert admits(writable_objects_condition("b", prefix), "b", f"{prefix}x") != prefix.startswith("trainstack/")


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_machine_account_reads_the_whole_bucket(stack: str) -> None:
    document = plan_for(stack).to_json()
    bucket = document["bucket_access"]["bucket"]
    grants = grants_on(document, bucket)
    members = {g["member"] for g in grants}
    readers = {g["member"] for g in grants if g["role"] == "roles/storage.objectViewer" and not g.get("condition")}
    assert readers == members


def test_plan_says_who_can_write_the_bucket(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["plan", "--stack", "multiworker"]) == 0
    out = capsys.readouterr().out
    assert "Who can write gs://your-gcp-project_multiworker (besides `pulumi up`; every machine reads it all):" in out
    assert "serviceAccount:multiworker-train@your-gcp-project.iam.gserviceaccount.com: jobs/*" in out
    assert "is written by `pulumi up` alone" in out
    assert "WARNING" not in out


def account_member(document: dict[str, Any], suffix: str) -> str:
    [account] = [
        r["inputs"]
        for r in document["resources"]
        if r["type"] == "gcp:serviceaccount/account:Account" and r["inputs"]["accountId"].endswith(suffix)
    ]
    return f"serviceAccount:{account['accountId']}@{account['project']}.iam.gserviceaccount.com"


def cluster_and_notebook(tmp_path: Path) -> Path:
    config = base_config()
    config["trainstack:notebook"] = {"machine_type": "n1-standard-8"}
    return write_stack(tmp_path, config)


# What the chief, every node and Keras write in the cluster's job directory: a forged status
# ends or skips the job, a forged backup poisons its resume.
CLUSTER_OBJECTS = (
    "status/job.json",
    "status/chief.json",
    "status/worker-0.json",
    "status/settings.json",
    "backup/chief/checkpoint",
    "checkpoints/ckpt-1.index",
    "metrics.json",
    "progress.json",
)


def test_the_notebook_cannot_write_the_clusters_status_or_backups(tmp_path: Path) -> None:
    plan = plan_of(cluster_and_notebook(tmp_path))
    document = json.loads(json.dumps(plan.to_json()))
    bucket = plan.resolved.bucket_name
    notebook, training = account_member(document, "-nb"), account_member(document, "-train")
    grants = grants_on(document, bucket)
    notebook_grants = [g for g in grants if g["member"] == notebook]
    training_grants = [g for g in grants if g["member"] == training]
    for name in CLUSTER_OBJECTS:
        assert not any(may_write(g, bucket, f"jobs/flowers_mwms/{name}") for g in notebook_grants), name
        assert any(may_write(g, bucket, f"jobs/flowers_mwms/{name}") for g in training_grants), name
        # The nodes write every job directory the queue makes (queued jobs, tuning trials);
        # each job's code holds a token for its own alone (tests/agent/test_jobtoken.py).
        assert any(may_write(g, bucket, f"jobs/q3_lr_low/{name}") for g in training_grants), name
        assert not any(may_write(g, bucket, f"trainstack/queue/{name}") for g in training_grants), name
    # The notebook writes its own area and reads everything, results included.
    assert any(may_write(g, bucket, "notebooks/runs/model/saved_model.pb") for g in notebook_grants)
    assert not any(may_write(g, bucket, "notebooks/runs/x") for g in training_grants)
    assert any(g["role"] == "roles/storage.objectViewer" and not g.get("condition") for g in notebook_grants)
    assert plan.bucket_access()["job_dir"] == {
        "uri": "gs://test-project-123_test/jobs/flowers_mwms",
        "writers": [training],
        "reads": [],
        "writes": [],
    }


def test_plans_table_says_the_notebook_writes_its_own_area_and_not_the_jobs_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--stack-file", str(cluster_and_notebook(tmp_path))]) == 0
    out = capsys.readouterr().out
    table = out[out.index("Who can write gs://test-project-123_test") :]
    notebook = "serviceAccount:test-nb@test-project-123.iam.gserviceaccount.com"
    training = "serviceAccount:test-train@test-project-123.iam.gserviceaccount.com"
    assert f"  {notebook}: notebooks/*\n" in table
    assert f"  {training}: jobs/*\n" in table
    status = table[table.index("Who can write the job's status and backups") :].split("\nWhat the job's code")[0]
    assert status.splitlines() == [
        "Who can write the job's status and backups in gs://test-project-123_test/jobs/flowers_mwms/:",
        f"  {training}",
    ]


def with_teammates(tmp_path: Path, members: list[str]) -> Path:
    config = base_config()
    config["trainstack:access"] = {"members": members}
    return write_stack(tmp_path, config)


def test_teammates_who_queue_jobs_are_shown_as_such_and_no_machine_gains_a_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A teammate's queue grants reach trainstack/ by design: the plan lists them as queueing jobs
    (create-only, or the index alone), not as a machine that can rewrite what nodes run, and the
    job's status and backups stay the job's machines' alone."""
    path = with_teammates(tmp_path, ["user:ana@example.com"])
    access = plan_of(path).bucket_access()
    assert access["writable_executed_objects"] == []
    mine = sorted((g["objects"], g["queues_jobs"]) for g in access["grants"] if g["member"] == "user:ana@example.com")
    assert mine == [
        ("*", False),  # the reader
        ("trainstack/code/*", True),
        ("trainstack/queue/index.json", True),
        ("trainstack/queue/specs/*", True),
        ("trainstack/tune/*", True),
    ]
    assert access["job_dir"]["writers"] == ["serviceAccount:test-train@test-project-123.iam.gserviceaccount.com"]
    assert main(["plan", "--stack-file", str(path)]) == 0
    out = capsys.readouterr().out
    assert "user:ana@example.com: trainstack/queue/index.json (queues jobs: replaces this one object)" in out
    assert "user:ana@example.com: trainstack/tune/* (queues jobs: creates and replaces tuning studies)" in out
    assert "user:ana@example.com: trainstack/code/* (queues jobs: creates new objects, replaces none)" in out
    assert "WARNING" not in out


def test_a_queue_grant_held_by_a_machine_account_is_a_machine_that_can_rewrite_what_nodes_run(
    tmp_path: Path,
) -> None:
    """Only a teammate's queue grants are spared the warning: the same grant on the training
    account (listed in trainstack:access by mistake, or by a changed program) is flagged."""
    from trainstack.cloud.planning import PlannedResource

    plan = plan_of(with_teammates(tmp_path, ["user:ana@example.com"]))
    [index] = [r for r in plan.of_type("gcp:storage/bucketIAMMember:BucketIAMMember") if r.name.endswith("-index")]
    machine = "serviceAccount:test-train@test-project-123.iam.gserviceaccount.com"
    plan.resources.append(PlannedResource(index.type, "machine-index", {**index.inputs, "member": machine}))
    assert plan.bucket_access()["writable_executed_objects"] == [f"trainstack/ ({machine})"]
