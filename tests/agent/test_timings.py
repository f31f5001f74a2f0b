"""The agent's waits: Compute Engine's by default, shortened alike for local runs, and a
factor that is not one refused before anything runs."""

from __future__ import annotations

import io
import os
import signal
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest

from agent_fakes import settings, world
from trainstack_agent.job import JobCommand
from trainstack_agent.processes import JobLauncher, Log, Processes
from trainstack_agent.timings import Timings
from trainstack_contract.lifecycle import JobState
from trainstack_contract.timescale import TIME_SCALE_VARIABLE, TimeScaleError, parse_time_scale


@pytest.mark.parametrize(
    ("text", "factor"), [(None, 1.0), ("", 1.0), ("1", 1.0), ("1.000", 1.0), ("0.25", 0.25), ("0.05", 0.05)]
)
def test_a_factor_from_a_twentieth_to_one_is_read(text: str | None, factor: float) -> None:
    assert parse_time_scale(text) == factor


@pytest.mark.parametrize(
    "text", ["0", "0.0", "0.049", "1.5", "2", "-0.5", "1e-1", ".5", "0.25 ", "0.0001", "inf", "nan"]
)
def test_anything_else_is_refused_naming_the_variable_and_the_range(text: str) -> None:
    with pytest.raises(TimeScaleError) as error:
        parse_time_scale(text)
    assert TIME_SCALE_VARIABLE in str(error.value)
    assert "0.05 to 1" in str(error.value)


def test_scaling_shortens_every_wait_alike() -> None:
    default, quarter = Timings(), Timings().scaled(0.25)
    for each in fields(Timings):
        assert getattr(quarter, each.name) == pytest.approx(getattr(default, each.name) / 4), each.name
    assert quarter.start_backoff == (7.5, 150.0)


def test_the_settle_window_a_node_waits_after_a_failed_step_is_the_scaled_one() -> None:
    timings = Timings().scaled(0.25)
    w = world(settings(), runs=[(30.0, 3)], timings=timings)
    w.put_status("worker-0", JobState.RUNNING)
    assert w.agent.run() == 3
    assert 30.0 + timings.peer_settle <= w.clock.now < 30.0 + Timings().peer_settle


# Ignores SIGTERM, says so, and ends by itself (exit 0) only once the test's process is gone: a
# loaded machine cannot make it end before the kill, and a failed test leaves no process behind.
_STUBBORN = (
    "import os, signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "parent = os.getppid()\n"
    "print('ready', flush=True)\n"
    "while os.getppid() == parent:\n"
    "    time.sleep(0.1)\n"
)


@pytest.mark.parametrize("through", ["the job's code", "every child"])
def test_a_child_that_ignores_sigterm_is_killed_after_the_configured_grace(tmp_path: Path, through: str) -> None:
    lines: list[str] = []
    log = Log(stream=io.StringIO())
    log.job_line = lines.append  # type: ignore[method-assign]
    processes = Processes(log, stop_grace=0.3)
    child = JobLauncher(processes).start(JobCommand((sys.executable, "-c", _STUBBORN), dict(os.environ), tmp_path))
    while "ready" not in lines:
        assert child.poll() is None, lines
        time.sleep(0.01)
    if through == "the job's code":
        assert child.stop() == -signal.SIGKILL
    else:
        processes.stop_all()
        assert child.poll() == -signal.SIGKILL
