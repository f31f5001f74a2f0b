"""`trainstack status` reads, from a Cloud Storage emulator, the status objects a real boot script
wrote there.

A two-node probe job runs through `trainstack local` (LocalRun) with its bucket named
``gs://BUCKET`` (:class:`trainstack.local.GcsBucket`): the rendered boot script then reaches it
through `gcloud storage`, here a stand-in (fixtures/gcloud_storage_shim.py) that implements only
the calls the scripts make, against the emulator, through the real client library. Nothing is
copied up afterwards: what `status` reads is what the nodes wrote.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from google.cloud import storage

import test_status
from recording_commands import recorded_calls
from test_status import BUCKET, PREFIX, PROBE_TRAINER, stack_file
from trainstack.jobcode import PROJECT_ROOT
from trainstack.local import GcsBucket, LocalRun, LocalRunResult, TrainerOverrides
from trainstack.resolved import resolve_stack
from trainstack.stackfile import load_stack
from trainstack_contract import LAYOUT

SHIM = Path(__file__).resolve().parent / "fixtures" / "gcloud_storage_shim.py"
# test_status.py's emulator (module-scoped, in this process): a fixture, found by its name here.
emulator_server = test_status.emulator_server
JOB_DIR = f"gs://{BUCKET}/{PREFIX}"
NODES = ["chief", "worker-0"]


def install_gcloud_shim(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Puts a `gcloud` that runs the shim (with this interpreter, which has the client library)
    first on PATH, for the nodes too; returns the file each call's argv is appended to."""
    bin_dir = directory / "gcloud-bin"
    bin_dir.mkdir()
    gcloud = bin_dir / "gcloud"
    gcloud.write_text(f'#!/bin/bash\nexec {shlex.quote(sys.executable)} {shlex.quote(str(SHIM))} "$@"\n')
    gcloud.chmod(gcloud.stat().st_mode | stat.S_IEXEC)
    calls = directory / "gcloud-calls.jsonl"
    monkeypatch.setenv("GCLOUD_SHIM_CALLS", str(calls))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return calls


@pytest.fixture
def emulator_bucket(emulator_server: Any, monkeypatch: pytest.MonkeyPatch) -> storage.Bucket:
    """The stack's bucket, empty, in the emulator; STORAGE_EMULATOR_HOST (which the nodes, the
    shim and `trainstack status` inherit) points at it."""
    emulator_server.wipe()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator_server.url)
    return storage.Client(project="test-project-123").create_bucket(BUCKET)


def share_probe_records(local: LocalRun) -> Path:
    """The probe trainer writes its records with plain file calls, so a gs:// job directory is
    a relative path under each node's working directory (its state directory), and the probe
    chief would wait a minute for peers it cannot see. One shared directory behind each node's
    ``gs:`` entry lets the nodes see each other's records, as trainers reading the bucket would.
    Only the probe's own records go there: status objects go through gcloud."""
    shared = local.workdir / "probe-gs"
    shared.mkdir(parents=True)
    for local_node in local.nodes:
        local_node.state_dir.mkdir(parents=True)
        (local_node.state_dir / "gs:").symlink_to(shared, target_is_directory=True)
    return shared


def run_on_emulator(tmp_path: Path) -> tuple[LocalRun, LocalRunResult, Path]:
    """The probe job on a chief and one worker, storage on the emulator: (run, result, the stack file)."""
    path = stack_file(tmp_path, workers=1)
    cfg = load_stack(path)[0]
    stack = resolve_stack(cfg)
    local = LocalRun(
        cfg,
        tmp_path / "work",
        TrainerOverrides(),
        echo=False,
        trainer_source=PROBE_TRAINER,
        bucket=GcsBucket(stack.project, stack.bucket_name),
    )
    share_probe_records(local)
    return local, local.start().wait(timeout=300), path


def trainstack_status(path: Path) -> dict[str, Any]:
    """`python -m trainstack status --json`, a process of its own reading the emulator."""
    completed = subprocess.run(
        [sys.executable, "-m", "trainstack", "status", "--stack-file", str(path), "--json"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    document: dict[str, Any] = json.loads(completed.stdout)
    assert document["source"] == "gcs" and document["job_dir"] == JOB_DIR
    return document


def write_call(name: str) -> list[str]:
    return ["storage", "cp", "--quiet", "-", f"{JOB_DIR}/{name}"]


def test_status_reads_the_job_a_real_boot_script_wrote_to_the_emulator(
    tmp_path: Path, emulator_bucket: storage.Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = install_gcloud_shim(tmp_path, monkeypatch)
    started = time.monotonic()
    local, result, path = run_on_emulator(tmp_path)
    assert result.succeeded, result.logs
    assert time.monotonic() - started < 60, "the probe chief waited for peers it could not see"
    assert result.job_dir == JOB_DIR
    # Storage was the emulator only: no stand-in bucket directory; node state stays local.
    assert not (local.workdir / "bucket").exists()
    assert sorted(line.split()[1:] for line in result.self_stops) == [["stop", node] for node in NODES]

    document = trainstack_status(path)
    assert document["state"] == "SUCCEEDED" and document["job_status"]["exit_code"] == 0
    assert document["job_status"] == result.job_status, "status and LocalRun read the same object"
    assert [n["name"] for n in document["nodes"]] == NODES
    for node in document["nodes"]:
        assert (node["status"]["state"], node["status"]["exit_code"], node["status"]["node"]) == (
            "SUCCEEDED",
            0,
            node["name"],
        )
    assert document["heartbeat_age_seconds"] is None and document["metrics"] is None

    # Every object the nodes wrote is in the emulator, under the job directory.
    names = sorted(blob.name for blob in emulator_bucket.list_blobs())
    assert local.job is not None and local.job.package is not None
    archive = local.job.package.object_name
    assert archive.startswith(f"{LAYOUT.code_dir}/trainer-") and archive.endswith(".zip")
    assert names == sorted(
        [archive, f"{PREFIX}/{LAYOUT.job_status}", *(f"{PREFIX}/{LAYOUT.node_status(n)}" for n in NODES)]
    )

    # The exact gcloud calls: nothing else was asked of gcloud.
    recorded = recorded_calls(calls)
    fetches = {
        ("storage", "cp", "--quiet", "--recursive", f"gs://{BUCKET}/{archive}", str(n.state_dir / "code.zip"))
        for n in local.nodes
    }
    expected = {
        ("storage", "cat", f"{JOB_DIR}/{LAYOUT.job_status}"),
        # A node reads its own status before it writes it (the status keeps its history),
        # and its peers' before it starts the trainer (none may be down).
        *(("storage", "cat", f"{JOB_DIR}/{LAYOUT.node_status(n)}") for n in NODES),
        tuple(write_call(LAYOUT.job_status)),
        *(tuple(write_call(LAYOUT.node_status(n))) for n in NODES),
        *fetches,
    }
    assert {tuple(call) for call in recorded} == expected, recorded
    for node in NODES:
        assert recorded.count(write_call(LAYOUT.node_status(node))) == 2, f"{node}: RUNNING, then SUCCEEDED"
    # The chief's heartbeat (RUNNING), then its SUCCEEDED, after its own node status.
    job_writes = [i for i, call in enumerate(recorded) if call == write_call(LAYOUT.job_status)]
    assert len(job_writes) >= 2 and job_writes[-1] > max(
        i for i, call in enumerate(recorded) if call == write_call(LAYOUT.node_status("chief"))
    )

    # The trainer was given the gs:// job directory the metadata named.
    for node in NODES:
        record = json.loads((local.workdir / "probe-gs" / BUCKET / PREFIX / "probe" / f"{node}.json").read_text())
        assert record["argv"][record["argv"].index("--job-dir") + 1] == JOB_DIR


def test_status_reports_a_failed_job_with_the_chiefs_exit_code(
    tmp_path: Path, emulator_bucket: storage.Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = install_gcloud_shim(tmp_path, monkeypatch)
    monkeypatch.setenv("PROBE_CHIEF_EXIT", "3")
    # The worker would serve for ten minutes: it ends only by reading the chief's FAILED
    # job status from the emulator (through `gcloud storage cat`).
    monkeypatch.setenv("PROBE_OTHERS_SLEEP", "600")
    started = time.monotonic()
    _, result, path = run_on_emulator(tmp_path)
    assert time.monotonic() - started < 120, "the worker did not see the chief's FAILED in the bucket"
    assert result.job_status is not None and (result.job_status["state"], result.job_status["exit_code"]) == (
        "FAILED",
        3,
    )

    document = trainstack_status(path)
    assert document["state"] == "FAILED" and document["job_status"] == result.job_status
    chief, worker = (node["status"] for node in document["nodes"])
    assert (chief["state"], chief["exit_code"]) == ("FAILED", 3)
    assert worker["state"] == "FAILED" and worker["reason"] == "the chief recorded the job FAILED"
    assert write_call(LAYOUT.job_status) in recorded_calls(calls)
