"""Only `pulumi up` writes what nodes run: no machine's account may write the agent, the code,
the requirements, the wheels or the notebook's script, in any shipped stack's plan."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from stack_helpers import SHIPPED_STACKS, plan_for
from trainstack.commands.main import main

WRITE_ROLES = {
    "roles/storage.objectUser",
    "roles/storage.objectAdmin",
    "roles/storage.objectCreator",
    "roles/storage.admin",
}


def grants_on(document: dict[str, Any], bucket: str) -> list[dict[str, Any]]:
    return [
        r["inputs"]
        for r in document["resources"]
        if r["type"] == "gcp:storage/bucketIAMMember:BucketIAMMember" and r["inputs"]["bucket"] == bucket
    ]


def writable_prefix(grant: dict[str, Any], bucket: str) -> str:
    """What a grant lets its member write: "" (everything) unless its condition is exactly a
    startsWith on this bucket's object names."""
    condition = grant.get("condition")
    if not condition:
        return ""
    match = re.fullmatch(
        rf'resource\.name\.startsWith\("projects/_/buckets/{re.escape(bucket)}/objects/([^"]+)"\)',
        condition["expression"],
    )
    return match[1] if match else ""


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
    assert writers, "the machines write their job directories"
    for grant in writers:
        prefix = writable_prefix(grant, bucket)
        assert prefix == "jobs/", (grant["member"], grant.get("condition"))
        assert not [name for name in executed if name.startswith(prefix)], grant["member"]
    assert document["bucket_access"]["writable_executed_objects"] == []


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
    assert "Who can write gs://your-gcp-project_multiworker (besides `pulumi up`):" in out
    assert "serviceAccount:multiworker-train@your-gcp-project.iam.gserviceaccount.com: jobs/*" in out
    assert "is written by `pulumi up` alone" in out and "WARNING" not in out
