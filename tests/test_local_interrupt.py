"""Ctrl-C, SIGTERM or a closed terminal (SIGHUP) on `trainstack local`: every node stops,
records INTERRUPTED, and no process of the run is left; the job resumes from where it was."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import select
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from trainstack.localrun.supervisor import descendants

REPO = Path(__file__).resolve().parent.parent
# A hang guard for the whole command, not a measure.
HANG_SECONDS = 300


def processes_of(workdir: Path) -> list[str]:
    """Every process whose environment names this run's work directory: the nodes' boot
    scripts, agents and trainers all inherit it."""
    found = []
    marker = str(workdir).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environment = (entry / "environ").read_bytes()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in environment:
            found.append(f"{entry.name}: {command}")
    return found


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_local_run_stops_every_node_and_leaves_the_job_resumable(
    tmp_path: Path, signum: signal.Signals
) -> None:
    workdir = tmp_path / "work"
    command = [sys.executable, "-m", "trainstack", "local", "--stack", "multiworker", "--workdir", str(workdir)]
    command += ["--epochs", "50", "--steps-per-epoch", "200", "--image-size", "32"]
    # SIGINT as a terminal gives it: a shell runs a background job (a CI step started with &)
    # with SIGINT ignored, which the command would inherit.
    cli = subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # pytest-xdist's workers ignore SIGINT and a child inherits it: the command must feel it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    deadline = time.monotonic() + HANG_SECONDS
    assert cli.stdout is not None
    # Once every node's trainer has taken its first step.
    started = 0
    for line in cli.stdout:
        started += "training from the start" in line
        if started == 3:
            break
        assert time.monotonic() < deadline, "the run did not start"
        assert cli.poll() is None, "the run did not start"
    cli.send_signal(signum)
    _out, err = cli.communicate(timeout=HANG_SECONDS)
    assert cli.returncode == 130, err
    assert "Traceback" not in err
    assert f"interrupted ({signum.name})" in err
    assert "the job resumes from its backup, with the settings this run had" in err
    # The command to resume carries the run's settings: the stack's own would not fit its backup.
    settings = "--epochs 50 --steps-per-epoch 200 --image-size 32"
    assert f"trainstack local --stack multiworker --workdir {workdir} {settings}" in err
    assert processes_of(workdir) == []
    status_dir = workdir / "bucket" / "your-gcp-project_multiworker" / "jobs" / "flowers_mwms" / "status"
    for node in ("chief", "worker-0", "worker-1", "job"):
        status = json.loads((status_dir / f"{node}.json").read_text())
        assert status["state"] == "INTERRUPTED", (node, status)
    assert not (workdir / "self-stop.log").exists(), "on_finish was applied to an interrupted job"

    # Resumed with other settings, the run is refused before any node starts, naming the change.
    other = subprocess.run(
        [*command[:-6], "--epochs", "5", "--steps-per-epoch", "200", "--image-size", "32"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )
    assert other.returncode == 2, other.stderr
    assert "--epochs 5 (interrupted run: 50)" in other.stderr
    assert "--fresh" in other.stderr
    assert settings in other.stderr
    assert json.loads((status_dir / "job.json").read_text())["state"] == "INTERRUPTED"


def start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat), None once it is gone: with the
    pid it names one process, never a later one that reuses the pid."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def read_until(master: int, text: str, process: subprocess.Popen[bytes]) -> str:
    """What the terminal shows, read from its master side until ``text`` appears."""
    shown = b""
    deadline = time.monotonic() + HANG_SECONDS
    while text.encode() not in shown:
        assert time.monotonic() < deadline, shown.decode(errors="replace")[-2000:]
        assert process.poll() is None, shown.decode(errors="replace")[-2000:]
        if select.select([master], [], [], 1.0)[0]:
            shown += os.read(master, 65536)
    return shown.decode(errors="replace")


def login_session() -> None:
    """In the child: the pseudo-terminal (its stdin) becomes its controlling terminal, and SIGHUP
    its default action, as in a login shell's session. A test suite started under `nohup` hands
    its children SIGHUP ignored, which `local` rightly keeps ignoring: it then trained to the end."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.mark.slow
def test_a_closed_terminal_stops_every_process_of_the_run_and_records_it_interrupted(tmp_path: Path) -> None:
    """A closed terminal or a dropped ssh session hangs up `local`'s terminal: the kernel sends
    SIGHUP to its controlling process. The nodes run in sessions of their own, so only `local`
    hears it: it must stop them all, as for Ctrl-C, though nothing can be printed any more."""
    workdir = tmp_path / "work"
    command = [sys.executable, "-m", "trainstack", "local", "--stack", "dev", "--workdir", str(workdir)]
    command += ["--epochs", "50", "--steps-per-epoch", "200", "--image-size", "32"]
    master, terminal = pty.openpty()
    cli = subprocess.Popen(
        command,
        cwd=REPO,
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        # A session of its own whose controlling terminal is the pseudo-terminal, as a login shell's.
        start_new_session=True,
        preexec_fn=login_session,  # noqa: PLW1509
    )
    os.close(terminal)
    try:
        read_until(master, "training from the start", cli)
        run = {pid: start_time(pid) for pid in descendants(cli.pid)}
        holder = b"sleep\0infinity"  # unshare --net -- sleep infinity, after its exec
        assert any(holder in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in run), "no namespace holder"
    finally:
        # The terminal goes away: its master side closes, and the kernel hangs it up.
        os.close(master)
    assert cli.wait(timeout=HANG_SECONDS) == 130
    survivors = {
        pid: Path(f"/proc/{pid}/cmdline").read_bytes() for pid, when in run.items() if when and start_time(pid) == when
    }
    for pid in survivors:
        # Not left behind by a failing run.
        os.kill(pid, signal.SIGKILL)
    assert survivors == {}
    assert processes_of(workdir) == []
    status_dir = workdir / "bucket" / "your-gcp-project_dev" / "jobs" / "flowers_dev" / "status"
    # Every status a node writes (settings.json records the job's start, not a state).
    states = {path.stem: json.loads(path.read_text()).get("state") for path in status_dir.glob("*.json")}
    assert states == {"chief": "INTERRUPTED", "job": "INTERRUPTED", "settings": None}


def test_an_interrupted_teams_job_is_not_said_to_resume_from_a_backup_it_may_not_keep() -> None:
    """Defect: `local` said every interrupted job resumes from its backup, a team's code too."""
    from trainstack.commands.local import resumes
    from trainstack.stackmodel.resolved import ResolvedStack, resolve_stack
    from trainstack.stackmodel.stackfile import load_stack

    def stack(name: str) -> ResolvedStack:
        return resolve_stack(load_stack(REPO / "stacks" / f"Pulumi.{name}.yaml")[0])

    assert resumes(stack("multiworker")) == "the job resumes from its backup"
    team = resumes(stack("ownpackage"))
    assert "backup" not in team
    assert "resumes from what its code saved in its job directory, if anything" in team


def read_to_end(stream: int) -> bytes:
    """Everything left on a pipe, up to its end (every writer gone); bounded."""
    shown = b""
    deadline = time.monotonic() + HANG_SECONDS
    while time.monotonic() < deadline:
        if select.select([stream], [], [], 1.0)[0]:
            chunk = os.read(stream, 65536)
            if not chunk:
                return shown
            shown += chunk
    raise AssertionError(
        f"a process of the killed run still holds its output: {shown.decode(errors='replace')[-2000:]}"
    )


@pytest.mark.slow
def test_a_killed_local_run_leaves_no_namespace_holder_and_its_output_ends(tmp_path: Path) -> None:
    """SIGKILL (an OOM kill, `kill -9`) gives `local` no chance to stop anything. Defect: the
    sleeping process that holds the nodes' network namespace outlived it, holding the run's
    output open, so a caller reading that output to its end waited for ever."""
    command = [sys.executable, "-m", "trainstack", "local", "--stack", "dev", "--fresh"]
    command += ["--epochs", "50", "--steps-per-epoch", "200", "--image-size", "32"]
    reader, writer = os.pipe()
    cli = subprocess.Popen([*command, "--workdir", str(tmp_path / "work")], cwd=REPO, stdout=writer, stderr=writer)
    os.close(writer)
    run: dict[int, str | None] = {}
    try:
        shown = b""
        deadline = time.monotonic() + HANG_SECONDS
        while b"training from the start" not in shown:
            assert time.monotonic() < deadline, shown.decode(errors="replace")[-2000:]
            assert cli.poll() is None, shown.decode(errors="replace")[-2000:]
            if select.select([reader], [], [], 1.0)[0]:
                shown += os.read(reader, 65536)
        run = {pid: start_time(pid) for pid in descendants(cli.pid)}
        holder = b"sleep\0infinity"  # unshare --net -- sleep infinity, after its exec
        holders = [pid for pid in run if holder in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert holders, "no namespace holder"
        cli.kill()
        cli.wait(timeout=HANG_SECONDS)
        read_to_end(reader)
        assert wait_gone(holders[0], run[holders[0]])
    finally:
        os.close(reader)
        # The nodes are not bound to `local` (a stand-in's restart starts them from any thread):
        # a killed run's agents are ended here.
        for pid, when in run.items():
            if when and start_time(pid) == when:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def wait_gone(pid: int, when: str | None) -> bool:
    """Whether the process is gone (or a zombie) within the hang guard."""
    deadline = time.monotonic() + HANG_SECONDS
    while time.monotonic() < deadline:
        if start_time(pid) != when or zombie(pid):
            return True
        time.sleep(0.05)
    return False


def zombie(pid: int) -> bool:
    """Whether the process has ended and waits only to be reaped."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def test_stopping_after_the_terminal_hung_up_records_a_lost_agent_without_failing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hung-up terminal answers every write with EIO: the line saying that a node's agent was
    lost must not turn the interrupted run into a failed `local` (exit 1 instead of 130)."""
    import errno

    from trainstack.localrun import run

    class HungUp:
        def write(self, text: str) -> int:
            raise OSError(errno.EIO, "Input/output error")

        def flush(self) -> None:
            raise OSError(errno.EIO, "Input/output error")

    class Stopped:
        stopped = False

        def stop(self, timeout: float) -> None:
            self.stopped = True

    recorded: list[object] = []

    def lost_agents(layout: object) -> list[str]:
        recorded.append(layout)
        return ["chief", "worker-0"]

    monkeypatch.setattr(run, "record_lost_agents", lost_agents)
    monkeypatch.setattr(sys, "stdout", HungUp())
    supervisor = Stopped()
    run.stop_nodes(supervisor, "the layout", echo=True, timeout=1)  # type: ignore[arg-type]
    assert supervisor.stopped
    assert recorded == ["the layout"]
