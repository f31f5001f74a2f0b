"""The metric a job's code reports through cloudml-hypertune: each job gets its own report file
on its node (CLOUD_ML_HP_METRIC_FILE), and the agent copies it to hypertune/<node>.metrics in
the job directory while the code runs and once it has ended, whatever the end, bounded to its
last whole lines. Run on the fakes (clock, bucket, children); the report files are real."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from agent_fakes import JOB_DIR, MemoryStorage, World, settings, world
from trainstack_agent.environment import Prepared
from trainstack_agent.hypertune import METRIC_DIR, MetricCopy, fresh_metric_file, read_report
from trainstack_agent.job import job_command
from trainstack_agent.jobuser import JobUser
from trainstack_agent.timings import Timings
from trainstack_agent.warm import warm_environment
from trainstack_contract import HYPERTUNE_METRIC_FILE_ENV, LAYOUT, MAX_HYPERTUNE_METRICS_BYTES
from trainstack_contract.lifecycle import JobState

METRICS_URI = f"{JOB_DIR}/{LAYOUT.hypertune_metrics('chief')}"
IMAGE = "registry.example/team/trainer:v1"


def report_line(value: float, step: int) -> str:
    """One report as cloudml-hypertune 0.1.0.dev6 writes it (json.dumps, sorted keys)."""
    body = {"timestamp": 1795000000.5 + step, "trial": "3", "accuracy": str(value), "global_step": str(step)}
    return json.dumps({**body, "checkpoint_path": ""}, sort_keys=True) + "\n"


def write_reports(path: Path, *reports: tuple[float, int]) -> None:
    """What the package does at each report: the whole file rewritten with every report so far."""
    path.write_text("".join(report_line(value, step) for value, step in reports))


def hypertune_world(tmp_path: Path, runs: list[tuple[float, int]], **node: object) -> World:
    """A single node whose job gets a real report file under ``tmp_path``."""

    def prepare() -> Prepared:
        state = tmp_path / "state"
        return Prepared(state / "venv/bin/python", state / "code/x", state, metric_file=fresh_metric_file(state, None))

    return world(settings(peers=(), **node), runs=runs, prepare=prepare)  # type: ignore[arg-type]


def metric_file(w: World) -> Path:
    return Path(w.launcher.started[-1].env[HYPERTUNE_METRIC_FILE_ENV])


def test_a_job_that_reports_twice_has_both_lines_in_the_bucket_and_the_first_while_it_runs(tmp_path: Path) -> None:
    w = hypertune_world(tmp_path, runs=[(60.0, 0)])
    seen_while_running: list[bytes | None] = []

    def on_start(count: int) -> None:
        start = w.clock.now
        w.clock.at(start + 10, lambda: write_reports(metric_file(w), (0.5, 100)))
        w.clock.at(start + 30, lambda: seen_while_running.append(w.storage.objects.get(METRICS_URI)))
        # The last report just before the code exits: only the copy at the end can carry it.
        w.clock.at(start + 59.9, lambda: write_reports(metric_file(w), (0.5, 100), (0.75, 200)))

    w.launcher.on_start = on_start
    assert w.agent.run() == 0
    # A tuning process reads the intermediate report while the trial still runs.
    assert seen_while_running == [report_line(0.5, 100).encode()]
    assert w.storage.objects[METRICS_URI] == (report_line(0.5, 100) + report_line(0.75, 200)).encode()
    # The final copy comes before the end is recorded: a reader that sees SUCCEEDED sees the last report.
    last_copy = max(i for i, uri in enumerate(w.storage.writes) if uri == METRICS_URI)
    succeeded = [i for i, uri in enumerate(w.storage.writes) if uri.endswith("/status/chief.json")][-1]
    assert last_copy < succeeded
    chief = w.status("chief")
    assert chief is not None
    assert chief.state == JobState.SUCCEEDED


@pytest.mark.parametrize("end", ["fails", "is cancelled", "is preempted"])
def test_the_report_of_a_job_that_does_not_succeed_is_copied_too(tmp_path: Path, end: str) -> None:
    w = hypertune_world(tmp_path, runs=[(60.0, 1 if end == "fails" else 0)])
    # The copy while the code runs is not what this test looks at: only the one at its end.
    w.agent.services.timings = Timings(metric_copy=3600.0)

    def signal() -> None:
        raise SystemExit(w.agent.on_termination("SIGTERM"))

    cancelled_at: list[float] = []

    def on_start(count: int) -> None:
        w.clock.at(w.clock.now + 20, lambda: write_reports(metric_file(w), (0.25, 50)))
        cancelled_at.append(w.clock.now + 21)
        if end == "is preempted":
            w.preempted[0] = True
            w.clock.at(w.clock.now + 21, signal)

    w.launcher.on_start = on_start
    if end == "is cancelled":
        # Cancelled once the report is written (its code started: the agent's preparation takes
        # its own time, in which the fake clock moves on).
        w.agent.services.cancelled = lambda: "cancelled" if cancelled_at and w.clock.now >= cancelled_at[0] else None
    if end == "is preempted":
        with pytest.raises(SystemExit):
            w.agent.run()
    else:
        w.agent.run()
    chief = w.status("chief")
    expected = {"fails": JobState.FAILED, "is cancelled": JobState.CANCELLED, "is preempted": JobState.PREEMPTED}[end]
    assert chief is not None
    assert chief.state == expected
    assert w.storage.objects.get(METRICS_URI) == report_line(0.25, 50).encode()


def test_a_copy_that_fails_is_logged_and_made_at_a_later_refresh_and_the_job_still_succeeds(tmp_path: Path) -> None:
    w = hypertune_world(tmp_path, runs=[(60.0, 0)])
    storage = w.storage
    seen_while_running: list[bytes | None] = []

    def on_start(count: int) -> None:
        w.clock.at(w.clock.now + 1, lambda: write_reports(metric_file(w), (0.5, 100)))
        w.clock.at(w.clock.now + 2, lambda: setattr(storage, "fail_writes", True))
        w.clock.at(w.clock.now + 20, lambda: setattr(storage, "fail_writes", False))
        w.clock.at(w.clock.now + 30, lambda: seen_while_running.append(storage.objects.get(METRICS_URI)))

    w.launcher.on_start = on_start
    assert w.agent.run() == 0
    assert storage.objects[METRICS_URI] == report_line(0.5, 100).encode()
    failures = [line for line in w.log if line.startswith("could not copy the job's hypertune report")]
    # Logged once while the outage lasts, not at every refresh.
    assert len(failures) == 1
    assert METRICS_URI in failures[0]
    # Made at a refresh while the code still ran, not left to its end.
    assert seen_while_running == [report_line(0.5, 100).encode()]


def test_a_job_that_reports_nothing_writes_nothing_to_its_job_directory(tmp_path: Path) -> None:
    w = hypertune_world(tmp_path, runs=[(60.0, 0)])
    assert w.agent.run() == 0
    assert METRICS_URI not in w.storage.objects
    assert not any("hypertune" in line for line in w.log)


# Lines in the oversized report: about 3.3 MB.
STEPS = 12000


def oversized_report(path: Path, limit: int) -> bytes:
    """Lines of many lengths, more than ``limit`` bytes in all."""
    lines = [json.dumps({"step": step, "pad": "x" * (step * 37 % 500)}) + "\n" for step in range(STEPS)]
    data = "".join(lines).encode()
    assert len(data) > 3 * limit
    path.write_bytes(data)
    return data


def copy_once(path: Path, user: JobUser | None = None) -> tuple[bytes | None, list[str]]:
    """What one look at the report file copies to the bucket, and what it logs."""
    storage, log = MemoryStorage(), []
    MetricCopy(path, user, storage, METRICS_URI, log.append).copy()  # type: ignore[arg-type]
    return storage.objects.get(METRICS_URI), log


def tail(path: Path, limit: int) -> bytes:
    report = read_report(path, None, limit)
    assert report is not None
    return report[0]


def test_an_oversized_report_is_cut_to_its_last_whole_lines_within_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "output.metrics"
    data = oversized_report(path, MAX_HYPERTUNE_METRICS_BYTES)
    copied, _ = copy_once(path)
    assert copied is not None
    assert 0 < len(copied) <= MAX_HYPERTUNE_METRICS_BYTES
    # The file's end, from the start of a line: every line whole.
    assert data.endswith(copied)
    assert data[len(data) - len(copied) - 1 : len(data) - len(copied)] == b"\n"
    lines = copied.decode().splitlines()
    assert [json.loads(line)["step"] for line in lines] == list(range(STEPS - len(lines), STEPS))
    # No whole line that fits is left out: the next one back would pass the bound.
    earlier = data[: len(data) - len(copied)].decode().splitlines()[-1]
    assert len(copied) + len(earlier) + 1 > MAX_HYPERTUNE_METRICS_BYTES


def test_a_tail_that_starts_exactly_at_a_line_keeps_that_line_and_a_line_being_written_is_left_out(
    tmp_path: Path,
) -> None:
    path = tmp_path / "output.metrics"
    path.write_bytes(b"aaaa\nbbbb\ncccc\ndd")
    # The last 10 bytes of whole lines are "bbbb\ncccc\n": the byte before them is a newline.
    assert tail(path, 10) == b"bbbb\ncccc\n"
    assert tail(path, 9) == b"cccc\n"
    assert tail(path, 100) == b"aaaa\nbbbb\ncccc\n"
    path.write_bytes(b"a line longer than the bound\n")
    assert tail(path, 10) == b""


def test_a_link_or_another_users_file_in_place_of_the_report_is_never_copied(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text(report_line(9.0, 9))
    path = tmp_path / "output.metrics"
    path.symlink_to(secret)
    copied, log = copy_once(path)
    assert copied is None
    assert len(log) == 1
    assert "cannot open" in log[0]
    path.unlink()
    path.write_text(report_line(0.5, 1))
    someone = JobUser("trainstack-job", os.getuid() + 1, os.getgid() + 1, tmp_path, tmp_path)
    copied, log = copy_once(path, user=someone)
    assert copied is None
    assert len(log) == 1
    assert "is not the job's user's own file" in log[0]


def test_every_job_command_names_the_jobs_own_report_file_and_an_image_sees_it_at_that_path(tmp_path: Path) -> None:
    node = settings()
    assert node.job is not None
    report = fresh_metric_file(tmp_path, None)
    base = {"PATH": "/bin", HYPERTUNE_METRIC_FILE_ENV: "/tmp/inherited.metrics"}
    command = job_command(node, base, tmp_path / "python", tmp_path / "code", tmp_path, {}, None, report)
    assert command.env[HYPERTUNE_METRIC_FILE_ENV] == str(report)
    image = replace(node, job=replace(node.job, module=None, image=IMAGE))
    command = job_command(image, base, tmp_path / "python", None, tmp_path, {}, None, report)
    options = list(command.argv[: command.argv.index(IMAGE)])
    # By name from the docker client's environment, and its directory mounted at the same path.
    assert options[options.index(HYPERTUNE_METRIC_FILE_ENV) - 1] == "--env"
    assert command.env[HYPERTUNE_METRIC_FILE_ENV] == str(report)
    assert options[options.index(f"{report.parent}:{report.parent}") - 1] == "--volume"
    # Without a report file of its own, a job gets no variable, not one the agent inherited.
    command = job_command(node, base, tmp_path / "python", tmp_path / "code", tmp_path, {})
    assert HYPERTUNE_METRIC_FILE_ENV not in command.env


def test_each_preparation_gives_a_new_empty_directory_and_removes_the_last_jobs(tmp_path: Path) -> None:
    first = fresh_metric_file(tmp_path, None)
    write_reports(first, (0.5, 1))
    second = fresh_metric_file(tmp_path, None)
    assert second != first
    assert not first.exists()
    assert not second.exists()
    assert second.parent.parent == tmp_path / METRIC_DIR
    assert (second.parent.stat().st_mode & 0o777) == 0o700
    # The warm interpreter of a standing node takes the next job whatever its report file.
    env = {"PATH": "/bin"}
    assert warm_environment({**env, HYPERTUNE_METRIC_FILE_ENV: str(first)}) == warm_environment(
        {**env, HYPERTUNE_METRIC_FILE_ENV: str(second)}
    )
