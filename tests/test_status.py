"""`trainstack status`: the status objects the boot scripts write, read back from a Cloud Storage
emulator (through the real client library) and from the stand-in bucket of `trainstack local`."""

from __future__ import annotations

import functools
import json
import re
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from gcp_storage_emulator.server import create_server
from google.cloud import storage

from stack_helpers import base_config, write_stack
from trainstack.base import bucket as bucket_module
from trainstack.commands import status as status_command
from trainstack.commands.main import main
from trainstack.jobstate import report as status_report
from trainstack.localrun.nodes import TrainerOverrides
from trainstack.localrun.run import LocalStackRun
from trainstack.stackmodel.resolved import resolve_stack
from trainstack.stackmodel.stackfile import load_stack
from trainstack_contract import LAYOUT
from trainstack_contract.lifecycle import JobState
from trainstack_contract.status import CLUSTER_PORT_WARNING, TF_CONFIG_DOCS

PROBE_TRAINER = Path(__file__).resolve().parent / "fixtures" / "probe_trainer" / "trainer"
# base_config(): project test-project-123, stack "test", job flowers_mwms, chief and two workers.
BUCKET = "test-project-123_test"
JOB = "flowers_mwms"
PREFIX = f"{LAYOUT.jobs}/{JOB}"
NODES = ["chief", "worker-0", "worker-1"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as handle:
        handle.bind(("127.0.0.1", 0))
        return int(handle.getsockname()[1])


@pytest.fixture(scope="module")
def emulator_server() -> Iterator[Any]:
    """A Cloud Storage JSON API server on a free loopback port, in memory, in this process."""
    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    server.url = f"http://127.0.0.1:{port}"
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def bucket(emulator_server: Any, monkeypatch: pytest.MonkeyPatch) -> storage.Bucket:
    """The stack's bucket, empty, in the emulator; the client library finds the emulator
    through STORAGE_EMULATOR_HOST, as `trainstack status` does."""
    emulator_server.wipe()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator_server.url)
    return storage.Client(project="test-project-123").create_bucket(BUCKET)


def stack_file(tmp_path: Path, workers: int = 2, job: bool = True) -> Path:
    config = base_config()
    config["trainstack:cluster"]["workers"]["count"] = workers
    if not job:
        del config["trainstack:job"]
    return write_stack(tmp_path, config)


def script_time(seconds: float) -> str:
    """A time as the boot script writes it: date -u +%Y-%m-%dT%H:%M:%S.%NZ."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def put(bucket: storage.Bucket, name: str, value: Any) -> None:
    data = value if isinstance(value, bytes) else json.dumps(value).encode()
    bucket.blob(f"{PREFIX}/{name}").upload_from_string(data)


def status_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["status", *args, "--json"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    document = json.loads(out)
    assert out == json.dumps(document, indent=2, sort_keys=True) + "\n", "one JSON document, sorted keys"
    return document


# --- (a) the same states from a real local run and from the emulator ----------------------------------
@pytest.mark.slow
def test_a_local_runs_status_reads_the_same_from_its_directory_and_from_the_bucket(
    tmp_path: Path, bucket: storage.Bucket, capsys: pytest.CaptureFixture[str]
) -> None:
    path = stack_file(tmp_path, workers=1)
    workdir = tmp_path / "work"
    cfg = load_stack(path)[0]
    result = (
        LocalStackRun(resolve_stack(cfg), workdir, TrainerOverrides(), echo=False, trainer_source=PROBE_TRAINER)
        .start()
        .wait(300)
    )
    assert result.succeeded, result.logs

    local = status_json(capsys, "--stack-file", str(path), "--local", "--workdir", str(workdir))
    assert local["source"] == "local"
    assert local["job_dir"] == str(result.job_dir)
    assert local["state"] == JobState.SUCCEEDED
    assert local["job_status"] == result.job_status
    assert [(n["name"], n["status"]) for n in local["nodes"]] == list(result.node_status.items())
    assert local["heartbeat_age_seconds"] is None, "a finished job has no heartbeat"

    # The boot script writes gs:// objects with `gcloud storage`, which is not here: upload the
    # objects the run wrote, under the same names, with the client library.
    uploaded = sorted(p.relative_to(result.job_dir).as_posix() for p in (result.job_dir / "status").glob("*.json"))
    assert uploaded == sorted(
        [LAYOUT.job_status, LAYOUT.job_settings, LAYOUT.node_status("chief"), LAYOUT.node_status("worker-0")]
    )
    for name in uploaded:
        bucket.blob(f"{PREFIX}/{name}").upload_from_filename(str(result.job_dir / name))

    cloud = status_json(capsys, "--stack-file", str(path))
    assert cloud["source"] == "gcs"
    assert cloud["job_dir"] == f"gs://{BUCKET}/{PREFIX}"
    assert resolve_stack(cfg).job_dir == cloud["job_dir"]
    for key in ("state", "job_status", "nodes", "metrics", "heartbeat_age_seconds", "stack", "job"):
        assert cloud[key] == local[key], key

    assert main(["status", "--stack-file", str(path)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"job {JOB}: SUCCEEDED   exit 0")
    assert f"job directory: gs://{BUCKET}/{PREFIX}" in text
    for node in ("chief", "worker-0"):
        assert f"  {node:<10} SUCCEEDED   exit 0" in text


# --- (b) the chief's heartbeat -----------------------------------------------------------------------
# The clock `trainstack status` reads in these tests: build_report's ``now``, fixed, so that what the
# command prints does not depend on how long the test took to get there.
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC).timestamp()


@pytest.fixture
def clock_at_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status_command, "build_report", functools.partial(status_report.build_report, now=NOW))


def put_running_job_status(bucket: storage.Bucket, written: float) -> None:
    put(
        bucket,
        LAYOUT.job_status,
        {"state": "RUNNING", "node": "chief", "exit_code": None, "time": script_time(written)},
    )


@pytest.mark.usefixtures("clock_at_now")
def test_heartbeat_age_is_now_minus_the_time_of_the_running_job_status(
    tmp_path: Path, bucket: storage.Bucket, capsys: pytest.CaptureFixture[str]
) -> None:
    path = stack_file(tmp_path)
    put_running_job_status(bucket, NOW - 95)
    put(bucket, LAYOUT.node_status("chief"), {"state": "RUNNING", "node": "chief", "exit_code": None, "time": "t"})
    document = status_json(capsys, "--stack-file", str(path))
    assert document["heartbeat_age_seconds"] == 95
    assert document["heartbeat_timeout_seconds"] == 600
    assert main(["status", "--stack-file", str(path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^chief heartbeat: 95 s ago$", out, re.MULTILINE), out


def test_without_a_given_clock_the_heartbeat_age_is_measured_from_the_time_of_the_call(
    tmp_path: Path, bucket: storage.Bucket, capsys: pytest.CaptureFixture[str]
) -> None:
    path = stack_file(tmp_path)
    written = datetime.fromisoformat(script_time(time.time() - 95)).timestamp()
    put_running_job_status(bucket, written)
    before = time.time()
    document = status_json(capsys, "--stack-file", str(path))
    after = time.time()
    # to_json rounds the age to milliseconds.
    assert before - written - 0.0005 <= document["heartbeat_age_seconds"] <= after - written + 0.0005


@pytest.mark.usefixtures("clock_at_now")
def test_a_heartbeat_older_than_the_timeout_says_the_chief_may_be_gone(
    tmp_path: Path, bucket: storage.Bucket, capsys: pytest.CaptureFixture[str]
) -> None:
    path = stack_file(tmp_path)
    put(bucket, LAYOUT.job_status, {"state": "RUNNING", "exit_code": None, "time": script_time(NOW - 3 * 3600)})
    assert main(["status", "--stack-file", str(path)]) == 0
    out = capsys.readouterr().out
    assert "chief heartbeat: 3 h 0 min ago; older than the 600 s heartbeat timeout" in out


# --- (c) nothing written yet -------------------------------------------------------------------------
def test_missing_objects_say_no_status_yet(
    tmp_path: Path, bucket: storage.Bucket, capsys: pytest.CaptureFixture[str]
) -> None:
    path = stack_file(tmp_path)
    put(
        bucket, LAYOUT.node_status("worker-1"), {"state": "RUNNING", "node": "worker-1", "exit_code": None, "time": "x"}
    )
    assert main(["status", "--stack-file", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"job {JOB}: no status yet"
    assert out[1:4] == [
        "  chief      no status yet",
        "  worker-0   no status yet",
        "  worker-1   RUNNING     exit -    at x",
    ]
    assert out[4] == f"job directory: gs://{BUCKET}/{PREFIX}"
    assert len(out) == 5, "no metrics.json, no heartbeat"


def test_a_stack_without_a_job_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = stack_file(tmp_path, job=False)
    assert main(["status", "--stack-file", str(path)]) == 0
    assert "has no job" in capsys.readouterr().out
    assert status_json(capsys, "--stack-file", str(path))["job"] is None


# --- (d) what is not a status object ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b'{"state": "RUNNING", ', "is not valid JSON (Expecting property name enclosed in double quotes at line 1"),
        (b'["RUNNING"]', "holds JSON, but not an object"),
        (b"\xff\xfe{}", "is not UTF-8 text"),
        (b" " * (bucket_module.MAX_OBJECT_BYTES + 1), f"is larger than {bucket_module.MAX_OBJECT_BYTES} bytes"),
    ],
    ids=["bad-json", "not-an-object", "not-utf8", "oversized"],
)
@pytest.mark.parametrize("where", ["gcs", "local"])
def test_an_object_that_is_not_a_status_object_is_one_clear_error(
    tmp_path: Path,
    bucket: storage.Bucket,
    capsys: pytest.CaptureFixture[str],
    content: bytes,
    words: str,
    where: str,
) -> None:
    path = stack_file(tmp_path)
    name = LAYOUT.node_status("worker-0")
    if where == "gcs":
        put(bucket, name, content)
        args = ["--stack-file", str(path)]
        expected = f"gs://{BUCKET}/{PREFIX}/{name}"
    else:
        workdir = tmp_path / "work"
        target = workdir / "bucket" / BUCKET / PREFIX / name
        target.parent.mkdir(parents=True)
        target.write_bytes(content)
        args = ["--stack-file", str(path), "--local", "--workdir", str(workdir)]
        expected = str(target)
    assert main(["status", *args]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"trainstack: {expected} {words}"), captured.err
    assert captured.err.count("\n") == 1
    assert "Traceback" not in captured.err


# --- (e) --json -----------------------------------------------------------------------------------------
def test_json_is_one_document_with_every_node_in_order_and_the_metrics(
    tmp_path: Path, bucket: storage.Bucket, capsys: pytest.CaptureFixture[str]
) -> None:
    path = stack_file(tmp_path)
    done = {"state": "SUCCEEDED", "node": "chief", "exit_code": 0, "time": "2026-01-02T03:04:05.000000000Z"}
    put(bucket, LAYOUT.job_status, done)
    put(bucket, LAYOUT.node_status("chief"), done)
    put(bucket, LAYOUT.metrics, {"status": "finished", "accuracy": 0.5})
    document = status_json(capsys, "--stack-file", str(path))
    assert document == {
        "stack": "test",
        "job": JOB,
        "job_dir": f"gs://{BUCKET}/{PREFIX}",
        "source": "gcs",
        "state": "SUCCEEDED",
        "job_status": done,
        "heartbeat_age_seconds": None,
        "heartbeat_timeout_seconds": 600,
        "nodes": [
            {"name": "chief", "status": done},
            {"name": "worker-0", "status": None},
            {"name": "worker-1", "status": None},
        ],
        "metrics": {"status": "finished", "accuracy": 0.5},
    }
    assert main(["status", "--stack-file", str(path)]) == 0
    assert 'metrics.json: {"accuracy": 0.5, "status": "finished"}' in capsys.readouterr().out


# --- When the bucket cannot be read --------------------------------------------------------------------
def test_missing_credentials_say_how_to_log_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-key.json"))
    assert main(["status", "--stack-file", str(stack_file(tmp_path))]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert "Traceback" not in captured.err
    assert captured.err.startswith(f"trainstack: cannot read gs://{BUCKET}/{PREFIX}/{LAYOUT.job_status}: ")
    assert "run `gcloud auth application-default login`" in captured.err


def test_a_failed_cloud_read_points_at_the_local_run_when_one_exists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: `status` without --local failed on credentials and did not say a local run was there."""
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-key.json"))
    path = stack_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".trainstack-local" / "test" / "bucket" / BUCKET).mkdir(parents=True)
    assert main(["status", "--stack-file", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[1] == (
        "trainstack: a local run of stack test exists: `.venv/bin/trainstack status --stack test --local` reads it"
    )


def test_an_unreachable_endpoint_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setattr(bucket_module, "RETRY_SECONDS", 1.0)
    assert main(["status", "--stack-file", str(stack_file(tmp_path))]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"trainstack: cannot read gs://{BUCKET}/"), err
    assert err.count("\n") == 1, err


def test_local_without_a_run_says_how_to_make_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = stack_file(tmp_path)
    assert main(["status", "--stack-file", str(path), "--local", "--workdir", str(tmp_path / "none")]) == 1
    assert "run `trainstack local --stack test` first" in capsys.readouterr().err
    assert main(["status", "--stack-file", str(path), "--workdir", str(tmp_path)]) == 2
    assert "use it with --local" in capsys.readouterr().err


def test_a_nodes_history_is_shown_oldest_first_and_cleaned() -> None:
    entries = [
        {"state": "RUNNING", "time": "t0"},
        {"state": "PREEMPTED", "time": "t1", "reason": "SIGTERM"},
        {"state": "RUNNING", "time": "t2"},
        {"state": "SUCCEEDED\x1b[2J", "time": "t3"},
    ]
    assert status_report.history_text({"state": "SUCCEEDED", "history": entries}) == (
        "RUNNING -> PREEMPTED (SIGTERM) -> RUNNING -> SUCCEEDED?[2J"
    )
    assert status_report.history_text({"state": "RUNNING", "history": entries[:1]}) is None
    long = [{"state": f"S{i}"} for i in range(status_report.HISTORY_SHOWN + 3)]
    assert status_report.history_text({"history": long}).startswith("... -> S3 -> ")  # type: ignore[union-attr]


# --- (e) a node's warnings -------------------------------------------------------------------------
def node_status(node: str, warnings: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"state": "SUCCEEDED", "node": node, "exit_code": 0, "time": "t1"}
    if warnings is not None:
        status["warnings"] = warnings
    return status


IGNORED = {CLUSTER_PORT_WARNING: "the job's code ended (exit 0) after 90 s ... (see docs)"}


def test_code_that_ignored_tf_config_is_one_warning_naming_its_nodes_and_the_docs(
    tmp_path: Path, bucket: storage.Bucket, capsys: pytest.CaptureFixture[str]
) -> None:
    path = stack_file(tmp_path)
    put(bucket, LAYOUT.job_status, node_status("chief"))
    put(bucket, LAYOUT.node_status("chief"), node_status("chief", IGNORED))
    put(bucket, LAYOUT.node_status("worker-0"), node_status("worker-0", IGNORED))
    put(bucket, LAYOUT.node_status("worker-1"), node_status("worker-1", {}))
    assert main(["status", "--stack-file", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"job {JOB}: SUCCEEDED")
    warning = out[1]
    assert warning.startswith("warning: the job's code ignored TF_CONFIG on chief, worker-0 (")
    assert "each of these nodes trained a model of its own" in warning
    assert warning.endswith(f"(see {TF_CONFIG_DOCS})")
    assert out[2].startswith("  chief ")
    assert sum(line.startswith("warning") for line in out) == 1
    # --json keeps each node's own words.
    nodes = status_json(capsys, "--stack-file", str(path))["nodes"]
    assert [node["status"].get("warnings") for node in nodes] == [IGNORED, IGNORED, {}]


def test_no_warning_no_line_and_other_warnings_show_as_their_node_wrote_them_cleaned() -> None:
    assert status_report.warning_lines([("chief", node_status("chief")), ("worker-0", None)]) == []
    lines = status_report.warning_lines(
        [
            ("chief", node_status("chief", {"precision": "followed the job's mixed_bfloat16\x1b[2J"})),
            ("worker-0", node_status("worker-0", {"bad": 3, "list": ["x"]})),
            ("worker-1", {"warnings": "not an object"}),
        ]
    )
    assert lines == ["warning (chief): followed the job's mixed_bfloat16?[2J"]
