"""Ending the job's code: a child that SIGKILL does not end keeps no agent from recording and
releasing."""

from __future__ import annotations

import io
import subprocess

import pytest

from trainstack_agent.processes import EXIT_UNREAPED, KILL_WAIT_SECONDS, Log, Processes


def test_a_child_that_sigkill_does_not_end_is_let_go_after_a_bounded_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect: after SIGKILL the agent waited on its child without a bound; a trainer stuck in
    uninterruptible sleep (a hung GPU driver or mount) kept the agent from recording FAILED
    and releasing its machine."""
    child = Processes(Log(io.StringIO(), journal=False)).start(["sleep", "60"])
    real_wait = child.popen.wait
    waits: list[float | None] = []

    def stuck(timeout: float | None = None) -> int:
        waits.append(timeout)
        assert timeout is not None, "an unbounded wait on the child"
        raise subprocess.TimeoutExpired("sleep", timeout)

    monkeypatch.setattr(child.popen, "wait", stuck)
    assert child.stop(grace=0.1) == EXIT_UNREAPED
    assert waits == [0.1, KILL_WAIT_SECONDS]
    # The real process did end on the signals: reaped here so nothing outlives the test.
    assert real_wait(timeout=30) < 0
