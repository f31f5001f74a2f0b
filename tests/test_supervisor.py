"""The process supervisor behind `trainstack local` and the trainer's loopback cluster,
exercised with tiny bash and python children.

Nothing here asserts on elapsed time: the tests wait for lines, files and exits, with
deadlines far beyond what a loaded machine needs."""

from __future__ import annotations

import io
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainstack.localrun.supervisor import Supervisor, wait_for

# A bound for a stuck test; a passing one never comes near it.
DEADLINE_SECONDS = 60.0


@pytest.fixture
def supervisor() -> Iterator[Supervisor]:
    supervisor = Supervisor(echo=False)
    try:
        yield supervisor
    finally:
        supervisor.kill_all()
        supervisor.close()


def deadline() -> float:
    return time.monotonic() + DEADLINE_SECONDS


def wait_for_line(supervisor: Supervisor, name: str, line: str) -> None:
    assert supervisor.wait_for(lambda: line in supervisor.lines(name), deadline()), supervisor.lines(name)


def wait_for_exit(supervisor: Supervisor, name: str) -> int:
    assert supervisor.wait_for(lambda: not supervisor.running(name), deadline()), f"{name} still runs"
    code = supervisor.returncode(name)
    assert code is not None
    return code


def gone(pid: int) -> bool:
    """The process has exited: no /proc entry, or only a zombie left for its new parent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    # The state follows the parenthesised command name.
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def test_lines_are_collected_per_name_and_echoed_with_a_prefix() -> None:
    out = io.StringIO()
    supervisor = Supervisor(echo=True, out=out)
    supervisor.start("alpha", ["bash", "-c", "echo one; echo two >&2"])
    supervisor.start("beta", [sys.executable, "-c", "print('three')"])
    for name in ("alpha", "beta"):
        wait_for_exit(supervisor, name)
    supervisor.close()
    assert supervisor.lines("alpha") == ["one", "two"]
    assert supervisor.logs == {"alpha": ["one", "two"], "beta": ["three"]}
    echoed = out.getvalue().splitlines()
    assert sorted(echoed) == ["[alpha] one", "[alpha] two", "[beta] three"]
    # Each process's lines keep their order.
    assert echoed.index("[alpha] one") < echoed.index("[alpha] two")


def test_echo_off_prints_nothing(capsys: pytest.CaptureFixture[str], supervisor: Supervisor) -> None:
    supervisor.start("quiet", ["bash", "-c", "echo hidden"])
    wait_for_exit(supervisor, "quiet")
    supervisor.close()
    assert supervisor.lines("quiet") == ["hidden"]
    assert capsys.readouterr().out == ""


def test_environment_and_working_directory_are_the_callers(supervisor: Supervisor, tmp_path: Path) -> None:
    supervisor.start(
        "env",
        ["bash", "-c", 'echo "$GREETING"; pwd'],
        env={"GREETING": "hello", "PATH": os.environ["PATH"]},
        cwd=tmp_path,
    )
    wait_for_exit(supervisor, "env")
    supervisor.close()
    assert supervisor.lines("env") == ["hello", str(tmp_path.resolve())]


def test_a_restart_runs_the_first_command_again_with_its_environment_and_directory(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    """A stopped local VM booted again: the same boot command, environment and directory, even
    where the caller changed its own copy of the environment since; the lines follow the first
    run's, and a running process is not started twice."""
    environment = {"GREETING": "hello", "PATH": os.environ["PATH"]}
    supervisor.start("vm", ["bash", "-c", 'echo "$GREETING"; pwd'], env=environment, cwd=tmp_path)
    environment["GREETING"] = "changed"
    wait_for_exit(supervisor, "vm")
    supervisor.restart("vm")
    wait_for_exit(supervisor, "vm")
    supervisor.start("busy", ["bash", "-c", "sleep 60"])
    with pytest.raises(ValueError, match="still running"):
        supervisor.restart("busy")
    supervisor.stop(["busy"], timeout=DEADLINE_SECONDS)
    supervisor.close()
    assert supervisor.lines("vm") == ["hello", str(tmp_path.resolve())] * 2


def test_returncodes_are_exit_statuses_or_negative_signals(supervisor: Supervisor) -> None:
    supervisor.start("ok", ["bash", "-c", "exit 0"])
    supervisor.start("failed", ["bash", "-c", "exit 3"])
    supervisor.start("terminated", ["sleep", "1000"])
    assert supervisor.returncode("terminated") is None
    assert supervisor.running("terminated")
    supervisor.signal("terminated", signal.SIGTERM)
    assert wait_for_exit(supervisor, "ok") == 0
    assert wait_for_exit(supervisor, "failed") == 3
    assert wait_for_exit(supervisor, "terminated") == -signal.SIGTERM
    assert supervisor.returncodes() == {"ok": 0, "failed": 3, "terminated": -signal.SIGTERM}
    assert supervisor.names == ["ok", "failed", "terminated"]


def test_a_signal_reaches_the_whole_process_group(supervisor: Supervisor, tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    supervisor.start("node", ["bash", "-c", f'sleep 1000 & echo $! > "{pid_file}"; echo started; wait'])
    wait_for_line(supervisor, "node", "started")
    grandchild = int(pid_file.read_text())
    assert not gone(grandchild)
    assert os.getpgid(grandchild) == supervisor.process("node").pid

    supervisor.signal("node", signal.SIGTERM)
    assert wait_for_exit(supervisor, "node") == -signal.SIGTERM
    assert wait_for(lambda: gone(grandchild), deadline()), "the grandchild outlived the signal"


def test_signalling_an_exited_process_does_nothing(supervisor: Supervisor) -> None:
    supervisor.start("done", ["bash", "-c", "exit 5"])
    wait_for_exit(supervisor, "done")
    supervisor.signal("done", signal.SIGKILL)
    supervisor.stop(["done"])
    assert supervisor.returncode("done") == 5


def test_stop_ends_a_process_with_sigterm(supervisor: Supervisor) -> None:
    supervisor.start("polite", ["bash", "-c", "echo ready; while :; do sleep 1; done"])
    wait_for_line(supervisor, "polite", "ready")
    supervisor.stop(["polite"], timeout=DEADLINE_SECONDS)
    assert supervisor.returncode("polite") == -signal.SIGTERM


def test_stop_escalates_to_sigkill_when_sigterm_is_ignored(supervisor: Supervisor) -> None:
    # An ignored signal stays ignored across fork and exec: the sleeps ignore it too.
    supervisor.start("stubborn", ["bash", "-c", 'trap "" TERM; echo ready; while :; do sleep 1; done'])
    supervisor.start("bystander", ["sleep", "1000"])
    wait_for_line(supervisor, "stubborn", "ready")
    supervisor.stop(["stubborn"], timeout=0.5)
    assert supervisor.returncode("stubborn") == -signal.SIGKILL
    # Only the named processes are stopped.
    assert supervisor.running("bystander")
    supervisor.stop(["bystander"], timeout=DEADLINE_SECONDS)
    assert supervisor.returncode("bystander") == -signal.SIGTERM
    supervisor.close()
    assert supervisor.lines("stubborn") == ["ready"]


@pytest.mark.parametrize("ending", ["stop", "kill_all"])
def test_a_watcher_left_in_the_group_by_an_exited_leader_is_ended_too(
    supervisor: Supervisor, tmp_path: Path, ending: str
) -> None:
    """A TPU VM's run-time cap watcher stays in the boot's group and outlives the boot script;
    a VM's stop ends it, and so must the end of a local run."""
    pid_file = tmp_path / "watcher.pid"
    # The watcher closes the output it inherited, so the leader's reader sees the end.
    supervisor.start("boot", ["bash", "-c", f"sleep 1000 >/dev/null 2>&1 & echo $! > {pid_file}; echo started"])
    wait_for_line(supervisor, "boot", "started")
    assert wait_for_exit(supervisor, "boot") == 0
    watcher = int(pid_file.read_text())
    assert not gone(watcher)
    if ending == "stop":
        supervisor.stop(["boot"], timeout=DEADLINE_SECONDS)
    else:
        supervisor.kill_all()
    assert wait_for(lambda: gone(watcher), deadline())


def test_kill_all_kills_every_group(supervisor: Supervisor) -> None:
    supervisor.start("a", ["bash", "-c", 'trap "" TERM; echo ready; while :; do sleep 1; done'])
    supervisor.start("b", ["sleep", "1000"])
    wait_for_line(supervisor, "a", "ready")
    supervisor.kill_all()
    assert supervisor.returncodes() == {"a": -signal.SIGKILL, "b": -signal.SIGKILL}


def test_names_are_unique(supervisor: Supervisor) -> None:
    supervisor.start("twice", ["bash", "-c", "exit 0"])
    with pytest.raises(ValueError, match="twice"):
        supervisor.start("twice", ["bash", "-c", "exit 0"])


def test_wait_for_reports_whether_the_predicate_held() -> None:
    assert wait_for(lambda: True, deadline=None)
    # A deadline already past: one look, then False.
    assert not wait_for(lambda: False, deadline=time.monotonic() - 1)
    calls: list[int] = []

    def third_call() -> bool:
        calls.append(1)
        return len(calls) >= 3

    assert wait_for(third_call, deadline(), poll_seconds=0.001)
    assert len(calls) == 3
