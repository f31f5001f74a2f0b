"""`trainstack logs`: the Cloud Logging query for the boot scripts' journal lines, the exact
gcloud command it runs, and the node logs of a `trainstack local` run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from recording_commands import install_recording_command, recorded_calls
from stack_helpers import base_config, write_stack
from trainstack.commands.logs import (
    GCLOUD_FORMAT,
    SCRIPT_IDENTIFIER,
    TRAINER_IDENTIFIER,
    LogSource,
    log_query,
)
from trainstack.commands.main import main
from trainstack.localrun.nodelogs import node_log, run_heading
from trainstack.localrun.nodes import TrainerOverrides
from trainstack.localrun.run import LocalStackRun
from trainstack.stackmodel.resolved import resolve_stack
from trainstack.stackmodel.stackfile import load_stack

PROBE_TRAINER = Path(__file__).resolve().parent / "fixtures" / "probe_trainer" / "trainer"
IDENTIFIERS = 'jsonPayload.SYSLOG_IDENTIFIER=("trainstack-trainer" OR "trainstack")'
MULTIWORKER_QUERY = (
    'resource.type="gce_instance"\n'
    'labels."compute.googleapis.com/resource_name"=("multiworker-chief" OR "multiworker-worker-0" OR '
    '"multiworker-worker-1")\n' + IDENTIFIERS
)


@pytest.fixture
def gcloud_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    calls = install_recording_command("gcloud", tmp_path, monkeypatch)
    return calls


# --- The query ---------------------------------------------------------------------------------------
def test_the_query_names_every_vm_of_the_stack_and_both_journal_tags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "--stack", "multiworker", "--print-query"]) == 0
    assert capsys.readouterr().out == MULTIWORKER_QUERY + "\n"


def test_node_restricts_the_query_to_one_vm(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "--stack", "multiworker", "--node", "worker-1", "--print-query"]) == 0
    assert capsys.readouterr().out == (
        'resource.type="gce_instance"\nlabels."compute.googleapis.com/resource_name"="multiworker-worker-1"\n'
        + IDENTIFIERS
        + "\n"
    )


def test_a_tpu_vm_and_a_cluster_in_one_query() -> None:
    query = log_query(
        [LogSource("chief", "s-chief", "gce_instance"), LogSource("tpu", "s-tpu", "tpu_worker")],
    )
    assert query == (
        '(resource.type="gce_instance" AND labels."compute.googleapis.com/resource_name"="s-chief") OR '
        '(resource.type="tpu_worker" AND resource.labels.node_id="s-tpu")\n' + IDENTIFIERS
    )


def test_the_tpu_stacks_query(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "--stack", "tpu", "--print-query"]) == 0
    assert capsys.readouterr().out == (
        'resource.type="tpu_worker"\nresource.labels.node_id="tpu-tpu"\n' + IDENTIFIERS + "\n"
    )


def test_an_unknown_node_lists_the_valid_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "--stack", "multiworker", "--node", "worker-7", "--print-query"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        captured.err == "trainstack: --node 'worker-7' is not a node of this stack; valid: chief, worker-0, worker-1\n"
    )


def test_the_tags_are_the_ones_the_node_agent_logs_under(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent hands its own lines and the job's to the journal (Cloud Logging collects it)
    under two tags; the query asks for exactly those."""
    import io

    from trainstack_agent.processes import Log

    calls = install_recording_command("systemd-cat", tmp_path, monkeypatch)
    log = Log(stream=io.StringIO(), journal=True)
    log("node chief starting")
    log.job_line("Epoch 1/10")
    log.close()
    assert sorted(recorded_calls(calls)) == sorted([["-t", SCRIPT_IDENTIFIER], ["-t", TRAINER_IDENTIFIER]])


def test_each_line_reaches_the_journal_under_its_tag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from trainstack_agent.processes import Log

    # A systemd-cat that keeps what it reads on stdin in a file named by its tag.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    journal = bin_dir / "systemd-cat"
    journal.write_text(f'#!/bin/bash\ncat > "{tmp_path}/$2.journal"\n')
    journal.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    log = Log(stream=io.StringIO(), journal=True)
    log("node chief starting")
    log.job_line("Epoch 1/10")
    log.close()
    assert "node chief starting" in (tmp_path / f"{SCRIPT_IDENTIFIER}.journal").read_text()
    assert (tmp_path / f"{TRAINER_IDENTIFIER}.journal").read_text() == "Epoch 1/10\n"


# --- gcloud ---------------------------------------------------------------------------------------------
def test_logs_runs_gcloud_logging_read_with_the_query(gcloud_calls: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "--stack", "multiworker"]) == 0
    assert recorded_calls(gcloud_calls) == [
        [
            "logging",
            "read",
            MULTIWORKER_QUERY,
            "--project=your-gcp-project",
            "--freshness=1d",
            "--limit=1000",
            f"--format={GCLOUD_FORMAT}",
        ]
    ]
    assert MULTIWORKER_QUERY in capsys.readouterr().err


def test_follow_tails_with_gcloud_beta(gcloud_calls: Path) -> None:
    assert main(["logs", "--stack", "multiworker", "--node", "chief", "--follow"]) == 0
    query = 'resource.type="gce_instance"\nlabels."compute.googleapis.com/resource_name"="multiworker-chief"\n'
    assert recorded_calls(gcloud_calls) == [
        ["beta", "logging", "tail", query + IDENTIFIERS, "--project=your-gcp-project", f"--format={GCLOUD_FORMAT}"]
    ]


def test_freshness_and_limit_go_to_gcloud(gcloud_calls: Path) -> None:
    assert main(["logs", "--stack", "multiworker", "--freshness", "6h", "--limit", "50"]) == 0
    [call] = recorded_calls(gcloud_calls)
    assert call[3:6] == ["--project=your-gcp-project", "--freshness=6h", "--limit=50"]


def test_print_query_runs_nothing(gcloud_calls: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "--stack", "multiworker", "--print-query"]) == 0
    assert recorded_calls(gcloud_calls) == []


def test_without_gcloud_it_says_so_and_prints_the_query_to_paste(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert main(["logs", "--stack", "multiworker"]) == 1
    captured = capsys.readouterr()
    assert captured.out == MULTIWORKER_QUERY + "\n"
    assert "needs the Google Cloud CLI (`gcloud`), which is not on the PATH" in captured.err
    assert "https://console.cloud.google.com/logs/query?project=your-gcp-project" in captured.err


# --- trainstack local ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_local_prints_each_run_under_one_heading_node_after_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defect: `logs --local` ran successive runs together, with TensorFlow's start-up noise
    that `local` hides."""
    config = base_config()
    config["trainstack:cluster"]["workers"]["count"] = 1
    path = write_stack(tmp_path, config)
    workdir = tmp_path / "work"
    run = LocalStackRun(
        resolve_stack(load_stack(path)[0]), workdir, TrainerOverrides(), echo=False, trainer_source=PROBE_TRAINER
    )
    result = run.start().wait(timeout=300)
    assert result.succeeded, result.logs
    for node in ("chief", "worker-0"):
        assert result.logs[node], node
        assert node_log(workdir, node).read_text().splitlines() == [run_heading(run.started_at), *result.logs[node]]
    # A line of TensorFlow's native chatter, as every CPU-only node prints one.
    noise = "E0000 00:00:1732000000.000000   12345 cuda_platform.cc:52] failed call to cuInit: INTERNAL"
    with node_log(workdir, "chief").open("a") as log:
        log.write(noise + "\n")

    assert main(["logs", "--stack-file", str(path), "--local", "--workdir", str(workdir)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        run_heading(run.started_at),
        *(f"[chief] {line}" for line in result.logs["chief"]),
        *(f"[worker-0] {line}" for line in result.logs["worker-0"]),
    ]
    assert main(["logs", "--stack-file", str(path), "--local", "--workdir", str(workdir), "--verbose"]) == 0
    assert f"[chief] {noise}" in capsys.readouterr().out.splitlines()

    assert main(["logs", "--stack-file", str(path), "--local", "--workdir", str(workdir), "--node", "worker-0"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        run_heading(run.started_at),
        *(f"[worker-0] {line}" for line in result.logs["worker-0"]),
    ]

    # A second run adds to the logs, as a VM's journal keeps its earlier boots, under its own heading.
    second = LocalStackRun(
        resolve_stack(load_stack(path)[0]), workdir, TrainerOverrides(), echo=False, trainer_source=PROBE_TRAINER
    )
    again = second.start().wait(timeout=300)
    assert main(["logs", "--stack-file", str(path), "--local", "--workdir", str(workdir), "--node", "chief"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        run_heading(run.started_at),
        *(f"[chief] {line}" for line in result.logs["chief"]),
        run_heading(second.started_at),
        *(f"[chief] {line}" for line in again.logs["chief"]),
    ]


def test_local_without_a_run_says_how_to_make_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_stack(tmp_path, base_config())
    assert main(["logs", "--stack-file", str(path), "--local", "--workdir", str(tmp_path / "none")]) == 1
    assert "run `trainstack local --stack test` first" in capsys.readouterr().err
    assert main(["logs", "--stack", "tpu", "--local", "--workdir", str(tmp_path / "none")]) == 1
    assert "run `trainstack local --stack tpu` first" in capsys.readouterr().err
