"""The agent's log, and the child processes it runs (installs, the job's code).

Every child starts in its own session, so that ending its process group ends whatever it
started (pip's builds, the trainer's workers, a docker client); the agent keeps each one it
starts, so that a termination signal ends them all. Their output goes line by line to the
agent's log, under the job's journal tag.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import IO, Protocol, TextIO

from trainstack_agent.job import JobCommand
from trainstack_agent.jobscope import JobScope, end_abandoned_scopes
from trainstack_agent.jobuser import JobUser
from trainstack_agent.timings import Timings
from trainstack_contract.sessions import popen_in_own_session

# The journal tags Cloud Logging collects on Deep Learning VM and TPU VM images
# (`trainstack logs` queries both).
AGENT_TAG = "trainstack"
JOB_TAG = "trainstack-trainer"
JOURNAL_SOCKET = Path("/run/systemd/journal/stdout")
# How long a stopped group's processes may take to end once SIGKILLed.
KILL_WAIT_SECONDS = 5.0
# What stop() returns for a child that SIGKILL did not end within KILL_WAIT_SECONDS.
EXIT_UNREAPED = 128 + signal.SIGKILL
# After SIGTERM, how long a child gets before SIGKILL (Timings.stop_grace by default).
STOP_GRACE_SECONDS = Timings().stop_grace


class Log:
    """The agent's lines (``trainstack: ...``) and the job's, to standard error and, where
    there is one, the systemd journal."""

    def __init__(self, stream: TextIO | None = None, journal: bool | None = None) -> None:
        self.stream = stream
        self._lock = threading.Lock()
        self._journal: dict[str, subprocess.Popen[str]] = {}
        use_journal = journal if journal is not None else JOURNAL_SOCKET.is_socket() and shutil.which("systemd-cat")
        if use_journal:
            for tag in (AGENT_TAG, JOB_TAG):
                try:
                    self._journal[tag] = subprocess.Popen(
                        ["systemd-cat", "-t", tag],  # noqa: S607 - found on the PATH just above
                        stdin=subprocess.PIPE,
                        text=True,
                        start_new_session=True,
                    )
                except OSError:
                    self._journal.clear()
                    break

    def _write(self, tag: str, line: str) -> None:
        with self._lock:
            stream = self.stream or sys.stderr
            stream.write(line + "\n")
            stream.flush()
            journal = self._journal.get(tag)
            if journal is not None and journal.stdin is not None:
                try:
                    journal.stdin.write(line + "\n")
                    journal.stdin.flush()
                except OSError:
                    self._journal.pop(tag, None)

    def __call__(self, message: str) -> None:
        self._write(AGENT_TAG, f"trainstack: {message}")

    def job_line(self, line: str) -> None:
        self._write(JOB_TAG, line)

    def close(self) -> None:
        for journal in self._journal.values():
            if journal.stdin is not None:
                journal.stdin.close()
            try:
                journal.wait(timeout=5)
            except subprocess.TimeoutExpired:
                journal.kill()


class ChildProcess(Protocol):
    """A process of the agent's and its process group, however it was started."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def signal(self, signum: int) -> None: ...

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> int: ...


class Child:
    """A started process and its process group."""

    def __init__(self, popen: subprocess.Popen[str], reader: threading.Thread) -> None:
        self.popen = popen
        self.reader = reader

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def signal(self, signum: int) -> None:
        # Until the agent reaps the leader, its pid (the group's id) cannot be reused.
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signum)

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> int:
        """SIGTERM to the group, SIGKILL after ``grace`` seconds; returns the exit status."""
        self.signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=grace)
        # The leader may have gone while others of its group linger: they go too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        try:
            code = self.popen.wait(timeout=KILL_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            # A process in uninterruptible sleep (a hung GPU driver or mount) outlives SIGKILL.
            # Waiting on it would keep the agent from recording the end and releasing the
            # machine, which ends the process for good.
            return EXIT_UNREAPED
        # SIGKILL takes effect when each process is next scheduled: on a loaded machine one of
        # the group may still run a moment after killpg returns. The job has ended only once
        # none does (zombies, waiting for their reaper, run nothing); bounded.
        deadline = time.monotonic() + KILL_WAIT_SECONDS
        while group_running(self.popen.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.reader.join(timeout=5)
        return code


def group_running(group: int) -> bool:
    """Whether a process of process group ``group`` still runs (Linux's /proc; a zombie does
    not run). False where there is no /proc to tell."""
    try:
        entries = list(os.scandir("/proc"))
    except OSError:
        return False
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            with open(os.path.join(entry.path, "stat"), encoding="utf-8", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # After the command's name: state, parent, process group.
        if len(fields) > 2 and fields[2] == str(group) and fields[0] not in ("Z", "X"):
            return True
    return False


class Processes:
    """Starts children, streams their output to the log, and ends them all on demand."""

    def __init__(self, log: Log, keep_fds: Sequence[int] = (), stop_grace: float = STOP_GRACE_SECONDS) -> None:
        self.log = log
        self.stop_grace = stop_grace
        # File descriptors every child inherits (the boot lock: held while anything of this
        # boot still runs).
        self.keep_fds = tuple(keep_fds)
        self._children: list[ChildProcess] = []
        self._lock = threading.Lock()
        self._closed = False

    def start(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        user: JobUser | None = None,
        pass_fds: Sequence[int] = (),
    ) -> Child:
        """``argv`` as a child that ends with the agent (a killed agent leaves none behind),
        as ``user`` when one is given, with ``pass_fds`` open in it besides the boot lock."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the agent is ending; no new process starts")
            popen = popen_in_own_session(
                argv,
                env,
                cwd,
                pass_fds=(*self.keep_fds, *pass_fds),
                user_ids=None if user is None else (user.uid, user.gid),
                die_with_parent=True,
            )
            # A standing node starts children job after job: those that ended are let go.
            self._children = [each for each in self._children if each.poll() is None]
            reader = threading.Thread(target=self._pump, args=(popen.stdout,), daemon=True)
            reader.start()
            child = Child(popen, reader)
            self._children.append(child)
            return child

    def track(self, child: ChildProcess) -> None:
        """A process started otherwise (a warm interpreter forked by the zygote), ended with
        the others."""
        with self._lock:
            self._children = [each for each in self._children if each.poll() is None]
            self._children.append(child)

    def _pump(self, stream: IO[str] | None) -> None:
        if stream is None:
            return
        with stream:
            for line in stream:
                self.log.job_line(line.rstrip("\n"))

    def run(
        self,
        argv: Sequence[str],
        timeout: float,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> int:
        """Runs a command to its end, at most ``timeout`` seconds (then it is stopped and the
        status is 124, as timeout(1) gives); its output goes to the log."""
        child = self.start(argv, env, cwd)
        deadline = time.monotonic() + timeout
        while child.poll() is None:
            if time.monotonic() >= deadline:
                child.stop(self.stop_grace)
                return 124
            time.sleep(0.2)
        child.reader.join(timeout=5)
        return child.popen.returncode

    def stop_all(self, grace: float | None = None, close: bool = True, keep: Collection[ChildProcess] = ()) -> None:
        """Ends every child still running but those of ``keep`` (SIGKILL after ``grace``, by default this
        boot's stop grace); with ``close``, none starts after this (a standing node's job that
        ended leaves the next one free to start, and the warm interpreter waiting for it)."""
        grace = self.stop_grace if grace is None else grace
        with self._lock:
            self._closed = self._closed or close
            children = [child for child in self._children if not any(child is kept for kept in keep)]
        for child in children:
            child.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in children:
            remaining = max(0.0, deadline - time.monotonic())
            child.stop(grace=remaining)


def remove_container(name: str) -> None:
    """A container outlives its docker client: ending the job removes it too."""
    docker = shutil.which("docker")
    if docker is not None:
        subprocess.run([docker, "rm", "--force", name], capture_output=True, timeout=60, check=False)


class JobChild:
    """The job's code: a child process, its container for an image job, and the scope of
    every process it starts (:mod:`trainstack_agent.jobscope`)."""

    def __init__(
        self,
        child: ChildProcess,
        container: str | None,
        stop_grace: float = STOP_GRACE_SECONDS,
        scope: JobScope | None = None,
    ) -> None:
        self.child = child
        self.container = container
        self.stop_grace = stop_grace
        self.scope = scope

    def poll(self) -> int | None:
        return self.child.poll()

    def stop(self, grace: float | None = None) -> int:
        """Ends the job's code (its process group, then whatever left the group), whether it
        still runs or has exited on its own; returns its exit status."""
        code = self.child.stop(self.stop_grace if grace is None else grace)
        if self.scope is not None:
            self.scope.end()
        if self.container is not None:
            remove_container(self.container)
        return code


class JobLauncher:
    """Starts the job's code as a child of :class:`Processes`."""

    def __init__(self, processes: Processes) -> None:
        self.processes = processes
        self._containers: list[str] = []
        self._scopes: list[JobScope] = []
        # What an agent killed before it could end its jobs left behind (a host restart leaves
        # nothing; a killed agent on a standing node may).
        end_abandoned_scopes(processes.log)

    def scope(self, user: JobUser | None) -> JobScope:
        """A new job's scope, ended with every child of the boot (:meth:`stop_all`)."""
        scope = JobScope.create(f"job-{os.getpid()}", user.uid if user else None, self.processes.log)
        self._scopes = [each for each in self._scopes if not each.ended] + [scope]
        return scope

    def start(self, command: JobCommand) -> JobChild:
        if command.container is not None:
            self._containers.append(command.container)
        scope = self.scope(command.user)
        child = self.processes.start(command.argv, {**command.env, **scope.env}, command.cwd, command.user)
        scope.adopt(child.pid)
        return JobChild(child, command.container, self.processes.stop_grace, scope)

    def stop_all(self, close: bool = True, keep: Collection[ChildProcess] = ()) -> None:
        """Every child of this boot (installs included) but those of ``keep``, whatever each job's code
        started (its scope), and the job's containers."""
        self.processes.stop_all(close=close, keep=keep)
        for scope in self._scopes:
            scope.end()
        self._scopes = []
        for container in self._containers:
            remove_container(container)
