"""Supervises the local processes of a cluster run on this machine.

Two tools run a cluster as processes on one machine: ``trainstack local`` (one boot script
per node, :mod:`trainstack.localrun.run`) and the trainer's loopback cluster
(:mod:`trainstack.localrun.bare_trainers`). Both start, watch and end their processes through
:class:`Supervisor`:

- every process starts in its own session, so its process group holds everything it
  starts, and a signal to the group reaches all of it, as a VM restart would;
- stdout and stderr are merged and read line by line in one thread per process; the
  lines are kept per name and, with ``echo``, printed as ``[name] line``;
- :meth:`Supervisor.stop` sends SIGTERM to each group, waits, then sends SIGKILL.

The policy (who waits for whom, and for how long) stays with the callers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from trainstack_contract.sessions import popen_in_own_session

# How long stop() waits after SIGTERM before it sends SIGKILL.
STOP_SECONDS = 10.0
# How often a local run looks at what it waits for: wait_for()'s predicate, the nodes' logs
# (trainstack.localrun.nodelogs), the stand-in preemptions (trainstack.localrun.spot).
POLL_SECONDS = 0.1
# How long close() waits for each reader thread to see the end of its output.
READER_JOIN_SECONDS = 10.0


def free_loopback_ports(count: int) -> list[int]:
    """Ports the kernel reports free, all held open together so none repeats."""
    sockets = []
    try:
        for _ in range(count):
            handle = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            handle.bind(("127.0.0.1", 0))
            sockets.append(handle)
        return [handle.getsockname()[1] for handle in sockets]
    finally:
        for handle in sockets:
            handle.close()


def _process_table() -> list[tuple[int, int, int]]:
    """(pid, parent pid, process group) of every process, read from /proc now."""
    table = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses; the rest follows the last ")".
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[1].isdigit() and fields[2].isdigit():
            table.append((int(entry.name), int(fields[1]), int(fields[2])))
    return table


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, ...), read from /proc now.

    A node's agent starts each child in a session of its own, as a VM's processes need no
    common group; a VM's shutdown still signals every one of them, and so must a local run."""
    children: dict[int, list[int]] = {}
    for child, parent, _ in _process_table():
        children.setdefault(parent, []).append(child)
    found: list[int] = []
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.append(child)
                pending.append(child)
    return found


def group_members(pgid: int) -> list[int]:
    """The processes still in process group ``pgid``, read from /proc now. A group's id is
    not reused while it has a member, so these are the group's own even after its leader
    has exited and been reaped."""
    return [pid for pid, _, group in _process_table() if group == pgid]


def wait_for(predicate: Callable[[], bool], deadline: float | None, poll_seconds: float = POLL_SECONDS) -> bool:
    """Polls ``predicate`` until it holds (True) or the ``time.monotonic()`` ``deadline``
    passes (False); ``None`` waits for ever. The predicate is always tried at least once."""
    while not predicate():
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(poll_seconds)
    return True


def signal_tree(process: subprocess.Popen[str], signum: int) -> None:
    """Sends ``signum`` to the process group ``process`` leads and to every process below it
    (in sessions of their own), if the leader still runs.

    Until the leader is reaped, its pid (the group's id) cannot be reused, so the signal
    cannot reach a stranger; a group that has just emptied is ignored."""
    if process.poll() is not None:
        return
    below = descendants(process.pid)
    # ProcessLookupError: that one has ended by itself meanwhile.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)
    for pid in below:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def print_flushed(text: str, out: TextIO) -> bool:
    """Prints one line at once; False where ``out`` takes no more (a terminal that hung up
    answers EIO, a closed pipe EPIPE): the caller stops echoing, and its readers go on keeping
    the lines, so no process blocks on its output."""
    try:
        print(text, file=out, flush=True)
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class _Command:
    """What a named process runs: kept, so that :meth:`Supervisor.restart` runs it again."""

    argv: tuple[str, ...]
    env: Mapping[str, str] | None
    cwd: str | os.PathLike[str] | None

    def popen(self) -> subprocess.Popen[str]:
        return popen_in_own_session(self.argv, self.env, self.cwd)


@dataclass
class _Child:
    process: subprocess.Popen[str]
    command: _Command
    lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None
    # The readers of the processes this name ran before (Supervisor.restart).
    earlier_readers: list[threading.Thread | None] = field(default_factory=list)

    def follow(self, name: str, on_line: Callable[[str, str], None]) -> None:
        """Reads the process's output in a thread: each line is kept, then handed to ``on_line``."""
        stream = self.process.stdout
        assert stream is not None

        def read() -> None:
            with stream:
                for raw in stream:
                    line = raw.rstrip("\n")
                    self.lines.append(line)
                    on_line(name, line)

        self.reader = threading.Thread(target=read, name=f"supervisor-reader-{name}", daemon=True)
        self.reader.start()


class ProcessTable:
    """Named processes and their output lines: what can be asked of them without changing anything."""

    def __init__(self) -> None:
        self._children: dict[str, _Child] = {}

    @property
    def names(self) -> list[str]:
        """Names in the order they were started."""
        return list(self._children)

    def process(self, name: str) -> subprocess.Popen[str]:
        return self._children[name].process

    def lines(self, name: str) -> list[str]:
        """The output lines of ``name`` read so far; the list grows while the process runs."""
        return self._children[name].lines

    @property
    def logs(self) -> dict[str, list[str]]:
        """Every process's lines so far, by name."""
        return {name: child.lines for name, child in self._children.items()}

    def poll(self, name: str) -> int | None:
        """The exit code (negative: the signal that ended it), or None while it runs."""
        return self._children[name].process.poll()

    def returncode(self, name: str) -> int | None:
        """The exit code known so far, without checking again (see :meth:`poll`)."""
        return self._children[name].process.returncode

    def running(self, name: str) -> bool:
        return self.poll(name) is None

    def returncodes(self) -> dict[str, int | None]:
        return {name: self.poll(name) for name in self._children}


class Supervisor(ProcessTable):
    """A named set of processes, each in its own process group, with their output lines.

    Not meant to be shared between threads except through :meth:`signal` and the read-only
    queries; the reader threads only append to the line lists and print."""

    def __init__(
        self,
        echo: bool = True,
        out: TextIO | None = None,
        poll_seconds: float = POLL_SECONDS,
        shown: Callable[[str], bool] | None = None,
    ) -> None:
        """``echo`` prints every line as ``[name] line`` to ``out`` (``sys.stdout`` at the
        time of printing when None), or only the lines ``shown`` accepts; every line is kept."""
        self.echo = echo
        self.shown = shown
        self.out = out
        self.poll_seconds = poll_seconds
        super().__init__()
        self._echo_lock = threading.Lock()

    # --- starting and reading -------------------------------------------------------------
    def start(
        self,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> subprocess.Popen[str]:
        """Starts ``argv`` as ``name`` in a new session, stdout and stderr merged into one
        stream that a reader thread collects. ``env`` is the whole environment (None: this
        process's)."""
        if name in self._children:
            raise ValueError(f"a process named {name!r} was already started")
        command = _Command(tuple(argv), dict(env) if env is not None else None, cwd)
        child = _Child(command.popen(), command)
        self._children[name] = child
        child.follow(name, self._echo)
        return child.process

    def restart(self, name: str) -> subprocess.Popen[str]:
        """Runs ``name``'s command again once its process has exited (a stopped VM booted
        again): its new output lines are added to the same list."""
        old = self._children[name]
        if old.process.poll() is None:
            raise ValueError(f"{name!r} is still running")
        child = _Child(
            old.command.popen(), old.command, lines=old.lines, earlier_readers=[*old.earlier_readers, old.reader]
        )
        self._children[name] = child
        child.follow(name, self._echo)
        return child.process

    def _echo(self, name: str, line: str) -> None:
        if self.echo and (self.shown is None or self.shown(line)):
            with self._echo_lock:
                self.echo = print_flushed(f"[{name}] {line}", self.out or sys.stdout)

    def wait_for(self, predicate: Callable[[], bool], deadline: float | None) -> bool:
        """:func:`wait_for` at this supervisor's polling interval."""
        return wait_for(predicate, deadline, self.poll_seconds)

    def all_exited(self, names: Iterable[str]) -> bool:
        return all(self.poll(name) is not None for name in names)

    # --- signals and ending -----------------------------------------------------------------
    def signal(self, name: str, signum: int) -> None:
        """Sends ``signum`` to every process of ``name`` (:func:`signal_tree`), as a VM's
        shutdown reaches every process of the VM."""
        signal_tree(self._children[name].process, signum)

    def signal_all(self, signum: int) -> None:
        for name in self._children:
            self.signal(name, signum)

    def stop(self, names: Iterable[str] | None = None, timeout: float = STOP_SECONDS) -> None:
        """SIGTERM to each named group (default: all), up to ``timeout`` seconds for them all
        to exit, then SIGKILL to those left; returns once every named process has exited."""
        selected = list(self._children if names is None else names)
        for name in selected:
            self.signal(name, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        self.wait_for(lambda: self.all_exited(selected), deadline)
        for name in selected:
            self.signal(name, signal.SIGKILL)
        for name in selected:
            self._children[name].process.wait()
            self._kill_leftovers(name)

    def kill_all(self) -> None:
        """SIGKILL to every group, as a host restart does, and wait for every process."""
        self.signal_all(signal.SIGKILL)
        for name, child in self._children.items():
            child.process.wait()
            self._kill_leftovers(name)

    def _kill_leftovers(self, name: str) -> None:
        """SIGKILL to what is left of the group of ``name`` once its leader has exited (a
        watcher the boot started in its own group, which a VM's stop would have ended)."""
        for pid in group_members(self._children[name].process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def close(self, timeout: float = READER_JOIN_SECONDS) -> None:
        """Waits for the reader threads to reach the end of their output (each up to
        ``timeout`` seconds: a process that left a child holding its stdout keeps its reader
        going)."""
        for child in self._children.values():
            for reader in (*child.earlier_readers, child.reader):
                if reader is not None:
                    reader.join(timeout=timeout)
