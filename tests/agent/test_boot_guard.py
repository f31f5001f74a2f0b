"""A boot whose settings were read ends, whatever fails after, in abort: FAILED recorded where
it can be and the machine stopped. The boot script exec's the agent, so an exception that left
it would leave the machine billing until its run-time cap."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_fakes import settings
from trainstack_agent import boot
from trainstack_agent.agent import EXIT_ABORTED, Agent


def test_an_error_after_the_settings_were_read_aborts_the_boot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Defect: an exception outside the job's own guard (here the boot lock on a full disk)
    ended the agent in a traceback, and nothing recorded FAILED or stopped the machine."""
    agent = Agent({"TRAINSTACK_STATE_DIR": str(tmp_path / "state")})
    monkeypatch.setattr(boot, "read_settings", lambda metadata: settings())

    def full_disk(state_dir: Path) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(boot, "take_boot_lock", full_disk)
    aborted: list[str] = []

    def abort(agent: Agent, reason: str) -> int:
        aborted.append(reason)
        return EXIT_ABORTED

    monkeypatch.setattr(boot, "abort", abort)
    assert boot.run_node(agent) == EXIT_ABORTED
    assert aborted == ["the node agent failed: OSError: [Errno 28] No space left on device"]


def test_a_termination_signal_is_not_taken_for_a_failure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A signal's SystemExit (the node records PREEMPTED or INTERRUPTED, its job resumable)
    passes through the guard untouched."""
    agent = Agent({"TRAINSTACK_STATE_DIR": str(tmp_path / "state")})
    monkeypatch.setattr(boot, "read_settings", lambda metadata: settings())

    def terminated(state_dir: Path) -> int:
        raise SystemExit(143)

    monkeypatch.setattr(boot, "take_boot_lock", terminated)
    monkeypatch.setattr(boot, "abort", lambda agent, reason: pytest.fail(f"aborted: {reason}"))
    with pytest.raises(SystemExit):
        boot.run_node(agent)
