"""`trainstack status` reads, from a Cloud Storage emulator, the status objects a real boot script
wrote there.

A two-node probe job runs through `trainstack local` (LocalStackRun) with its bucket named
``gs://BUCKET`` (:class:`trainstack.base.bucket.GcsBucket`): the rendered boot script then reaches it
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
from pathlib import Path
from typing import Any

import pytest
from google.cloud import storage

import test_status
from recording_commands import recorded_calls
from test_status import BUCKET, PREFIX, PROBE_TRAINER, stack_file
from trainstack.base.bucket import GcsBucket
from trainstack.base.project import PROJECT_ROOT
from trainstack.jobcode import artifacts
from trainstack.localrun.nodes import TrainerOverrides
from trainstack.localrun.outcome import LocalStackRunResult
from trainstack.localrun.run import LocalStackRun
from trainstack.stackmodel.resolved import resolve_stack
from trainstack.stackmodel.stackfile import load_stack
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


def share_probe_records(local: LocalStackRun) -> Path:
    """The probe trainer writes its records with plain file calls, so a gs:// job directory is
    a relative path under each node's working directory (its state directory), and the probe
    chief would wait a minute for peers it cannot see. One shared directory behind each node's
    ``gs:`` entry lets the nodes see each other's records, as trainers reading the bucket would.
    Only the probe's own records go there: status objects go through the Cloud Storage API."""
    shared = local.workdir / "probe-gs"
    shared.mkdir(parents=True)
    # The job's code runs as the unprivileged job user, from its own working directory.
    shared.chmod(0o1777)
    for local_node in local.nodes:
        for directory in (local_node.state_dir, local_node.state_dir / "job-work"):
            directory.mkdir(parents=True)
            (directory / "gs:").symlink_to(shared, target_is_directory=True)
    return shared


def run_on_emulator(tmp_path: Path) -> tuple[LocalStackRun, LocalStackRunResult, Path]:
    """The probe job on a chief and one worker, storage on the emulator: (run, result, the stack file)."""
    path = stack_file(tmp_path, workers=1)
    cfg = load_stack(path)[0]
    stack = resolve_stack(cfg)
    local = LocalStackRun(
        resolve_stack(cfg),
        tmp_path / "work",
        TrainerOverrides(),
        echo=False,
        trainer_source=PROBE_TRAINER,
        bucket=GcsBucket(stack.project, stack.bucket_name),
        # The nodes reach the emulator in this machine's network.
        allow_shared_network=True,
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
    assert document["source"] == "gcs"
    assert document["job_dir"] == JOB_DIR
    return document


@pytest.mark.slow
def test_status_reads_the_job_a_real_boot_script_wrote_to_the_emulator(
    tmp_path: Path, emulator_bucket: storage.Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = install_gcloud_shim(tmp_path, monkeypatch)
    local, result, path = run_on_emulator(tmp_path)
    assert result.succeeded, result.logs
    assert result.job_dir == JOB_DIR
    # Storage was the emulator only: no stand-in bucket directory; node state stays local.
    assert not (local.workdir / "bucket").exists()
    assert sorted(line.split()[1:] for line in result.self_stops) == [["stop", node] for node in NODES]

    document = trainstack_status(path)
    assert document["state"] == "SUCCEEDED"
    assert document["job_status"]["exit_code"] == 0
    assert document["job_status"] == result.job_status, "status and LocalStackRun read the same object"
    assert [n["name"] for n in document["nodes"]] == NODES
    for node in document["nodes"]:
        assert (node["status"]["state"], node["status"]["exit_code"], node["status"]["node"]) == (
            "SUCCEEDED",
            0,
            node["name"],
        )
    assert document["heartbeat_age_seconds"] is None
    assert document["metrics"] is None

    # Every object is in the emulator: what `pulumi up` uploads (the agent, the code) and,
    # under the job directory, what the nodes' agents wrote through the JSON API.
    names = sorted(blob.name for blob in emulator_bucket.list_blobs())
    assert local.job is not None
    assert local.job.package is not None
    archive = local.job.package.object_name
    agent = artifacts.agent_archive().object_name
    assert archive.startswith(f"{LAYOUT.code_dir}/trainer-")
    assert archive.endswith(".zip")
    assert names == sorted(
        [
            agent,
            archive,
            local.layout.kind.lock_artifact.object_name,
            f"{PREFIX}/{LAYOUT.job_status}",
            f"{PREFIX}/{LAYOUT.job_settings}",
            *(f"{PREFIX}/{LAYOUT.node_status(n)}" for n in NODES),
        ]
    )
    # gcloud is asked for one thing only: each boot script fetches the agent.
    assert sorted(recorded_calls(calls)) == sorted(
        ["storage", "cp", "--quiet", f"gs://{BUCKET}/{agent}", str(n.state_dir / "trainstack-agent.pyz")]
        for n in local.nodes
    )
    for node in NODES:
        history = [entry["state"] for entry in result.node_status[node]["history"]]  # type: ignore[index]
        assert history == ["RUNNING", "SUCCEEDED"], node

    # The trainer was given the gs:// job directory the metadata named.
    for node in NODES:
        record = json.loads((local.workdir / "probe-gs" / BUCKET / PREFIX / "probe" / f"{node}.json").read_text())
        assert record["argv"][record["argv"].index("--job-dir") + 1] == JOB_DIR


@pytest.mark.slow
def test_status_reports_a_failed_job_with_the_chiefs_exit_code(
    tmp_path: Path, emulator_bucket: storage.Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_gcloud_shim(tmp_path, monkeypatch)
    monkeypatch.setenv("PROBE_CHIEF_EXIT", "3")
    # The worker would serve for ten minutes, longer than the run waits for it: it ends only
    # by reading the chief's FAILED job status from the emulator.
    monkeypatch.setenv("PROBE_OTHERS_SLEEP", "600")
    _, result, path = run_on_emulator(tmp_path)
    assert result.job_status is not None
    assert (result.job_status["state"], result.job_status["exit_code"]) == (
        "FAILED",
        3,
    )

    document = trainstack_status(path)
    assert document["state"] == "FAILED"
    assert document["job_status"] == result.job_status
    chief, worker = (node["status"] for node in document["nodes"])
    assert (chief["state"], chief["exit_code"]) == ("FAILED", 3)
    assert worker["state"] == "FAILED"
    assert worker["reason"] == "the chief recorded the job FAILED"
