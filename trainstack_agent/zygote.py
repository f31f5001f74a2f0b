"""One TensorFlow import per standing node: a zygote that forks the warm interpreters.

A warm interpreter (:mod:`trainstack_agent.warm`) is used once: the job it takes runs in it.
Started afresh for each job, each imports TensorFlow again (about 2.6 s of CPU here); while a
short job runs, that import takes the CPU the job leaves, and on a busy machine it may not have
ended when the next job comes (a tuning study's trials come one after the other). So a standing
node keeps one zygote: a process, started like a warm interpreter, that imports TensorFlow once
(at the lowest priority, as the warm interpreter does) and then only forks. Each fork becomes a
warm interpreter in a fraction of a second, with TensorFlow loaded and nothing of it started:
the zygote never runs a TensorFlow op, so no runtime thread pool or server is forked (a forked
child makes its strategy as a new process does; tests/agent/test_zygote.py trains two forked
children as one MultiWorkerMirroredStrategy cluster).

The agent and the zygote talk over a socket pair (SOCK_SEQPACKET: one message per send):

- ``fork ID`` with the read end of the new interpreter's pipe attached (SCM_RIGHTS): the zygote
  forks, answers ``born ID PID``, and the child runs the warm interpreter's RUNNER on that pipe;
- ``exit PID STATUS`` from the zygote when a child has ended; it stays a zombie, so its process
  id and group cannot be reused, until the agent answers ``reap PID``.

A forked interpreter is the zygote's child, not the agent's: it is in a session of its own
(the job's process group, as for any job) and ends with the zygote (PR_SET_PDEATHSIG), which
ends with the agent. The zygote does not end on SIGTERM while a child still runs, so a job
stopped with a grace period gets it; it ends once none does, or when the agent closes the
socket.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from trainstack_agent.jobuser import JobUser
from trainstack_agent.processes import (
    EXIT_UNREAPED,
    KILL_WAIT_SECONDS,
    STOP_GRACE_SECONDS,
    Child,
    ChildProcess,
    Processes,
    group_running,
)

# How long a job waits for its interpreter's birth: the zygote forks once its import has
# ended, which a job that comes that early would wait for in any interpreter.
BIRTH_SECONDS = 120.0
# Between looks at a forked interpreter that is ending.
POLL_SECONDS = 0.01

# What both the zygote and the warm interpreter (trainstack_agent.warm.RUNNER) run to import
# at the lowest priority: nice 19 for the importing thread and, where Linux groups processes by
# session (autogroup), for the process's group, which any process may set back to 0. Linux
# takes one such change in 0.1 s from all the processes without CAP_SYS_ADMIN together (EAGAIN
# otherwise: a cluster's nodes on one machine ask at once), so each is tried again, a bounded
# number of times. Needs os, threading and time imported.
LOW_PRIORITY = """\
def group_nice(value):
    for attempt in range(40):
        try:
            with open("/proc/self/autogroup", "w") as handle:
                handle.write(str(value))
            return True
        except BlockingIOError:
            time.sleep(0.03 + 0.05 * (attempt % 3))
        except OSError:
            return False
    return False
def lower_this_thread():
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass
def import_all(names):
    for name in names:
        try:
            __import__(name)
        except ImportError:
            pass
"""

# The zygote: argv is the socket's descriptor, the warm interpreter's RUNNER, the modules to
# preload (a JSON list), then RUNNER's own arguments after its pipe. It imports those
# modules in a thread at the lowest priority (the thread, and its autogroup), so that its main
# thread, whose priority every fork inherits, keeps its own. A forked child leaves the loop
# with its pipe, takes a session of its own (and so an autogroup of its own, at the usual
# priority), binds itself to the zygote's end, and runs RUNNER as `python -c` would.
ZYGOTE = (
    """\
import ctypes, json, os, select, signal, socket, sys, threading, time
control = socket.socket(fileno=int(sys.argv[1]))
runner, preload, runner_args = sys.argv[2], json.loads(sys.argv[3]), sys.argv[4:]
ending = []
signal.signal(signal.SIGTERM, lambda signum, frame: ending.append(signum))
"""
    + LOW_PRIORITY
    + """\
def load():
    lower_this_thread()
    group_nice(19)
    import_all(preload)
loader = threading.Thread(target=load, name="trainstack-zygote-preload", daemon=True)
loader.start()
loader.join()
def serve():
    children = {}
    while True:
        if ending and all(children.values()):
            os._exit(0)
        if select.select([control], [], [], 0.1)[0]:
            try:
                message, fds, _, _ = socket.recv_fds(control, 256, 4)
            except OSError:
                os._exit(0)
            if not message:
                os._exit(0)
            words = message.decode().split()
            if words[0] == "fork" and len(words) == 2 and len(fds) == 1:
                pid = os.fork()
                if pid == 0:
                    return fds[0]
                children[pid] = False
                control.send(("born " + words[1] + " " + str(pid)).encode())
            elif words[0] == "reap" and len(words) == 2 and int(words[1]) in children:
                os.waitpid(int(words[1]), 0)
                del children[int(words[1])]
            for fd in fds:
                os.close(fd)
        for pid, told in list(children.items()):
            if told:
                continue
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if info is not None:
                code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
                control.send(("exit " + str(pid) + " " + str(code)).encode())
                children[pid] = True
zygote, pipe = os.getpid(), serve()
os.setsid()
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
if os.getppid() != zygote:
    os._exit(1)
control.close()
signal.signal(signal.SIGTERM, signal.SIG_DFL)
sys.argv = ["-c", str(pipe), *runner_args]
exec(compile(runner, "<trainstack-warm>", "exec"))
"""
)


class Zygote:
    """The agent's side of one zygote: its process, the socket, and what it reported."""

    def __init__(self, child: Child, control: socket.socket) -> None:
        self.child = child
        self.control = control
        self._lock = threading.Lock()
        self._requests = 0
        self._reports = _Reports()
        self._closed = False

    @classmethod
    def start(
        cls,
        processes: Processes,
        python: str,
        runner: str,
        preload: Sequence[str],
        runner_args: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        user: JobUser | None,
    ) -> Zygote:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            argv = (python, "-c", ZYGOTE, str(theirs.fileno()), runner, json.dumps(list(preload)), *runner_args)
            child = processes.start(argv, env, cwd, user, pass_fds=(theirs.fileno(),))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        return cls(child, ours)

    def alive(self) -> bool:
        return not self._closed and self.child.poll() is None

    def request(self, pipe: int) -> int | None:
        """Asks for a warm interpreter on ``pipe`` (the read end, sent to the zygote); the
        request's number, or None where the zygote is gone."""
        with self._lock:
            self._requests += 1
            number = self._requests
            try:
                socket.send_fds(self.control, [f"fork {number}".encode()], [pipe])
            except OSError:
                return None
            return number

    def birth(self, number: int, timeout: float) -> int | None:
        """The process id of request ``number``'s interpreter, waiting at most ``timeout``
        seconds; None where it was not born in that time (the zygote gone or still importing)."""
        deadline = time.monotonic() + timeout
        while True:
            self.pump()
            with self._lock:
                if number in self._reports.born:
                    return self._reports.born.pop(number)
            if not self.alive() or time.monotonic() >= deadline:
                return None
            time.sleep(POLL_SECONDS)

    def abandon(self, number: int) -> None:
        """Request ``number``'s interpreter is not wanted (its pipe is closed: it ends)."""
        with self._lock:
            self._reports.abandon(number)
        self.pump()

    def exit_status(self, pid: int) -> int | None:
        self.pump()
        with self._lock:
            return self._reports.exits.get(pid)

    def reap(self, pid: int) -> None:
        with self._lock, contextlib.suppress(OSError):
            self.control.send(f"reap {pid}".encode())

    def pump(self) -> None:
        """Reads what the zygote has said since the last look, without waiting."""
        while True:
            with self._lock:
                try:
                    message = self.control.recv(256)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError:
                    message = b""
                if not message:
                    self._closed = True
                    return
                reap = self._reports.note(message.decode(errors="replace").split())
            if reap is not None:
                self.reap(reap)

    def busy(self) -> bool:
        """Whether an interpreter it forked may still run (a job in it)."""
        self.pump()
        with self._lock:
            return bool(self._reports.live)

    def close(self) -> None:
        """Ends the zygote: the socket closed, then its process (whatever it forked ends with it)."""
        self._closed = True
        with contextlib.suppress(OSError):
            self.control.close()
        self.child.stop()


class _Reports:
    """What a zygote said of its children: born (by request), ended (by process id)."""

    def __init__(self) -> None:
        self.born: dict[int, int] = {}
        self.exits: dict[int, int] = {}
        # Children nobody waits for any more (their pipe closed before they took a job): a
        # process id, or a request's number negated while it is not born yet.
        self.abandoned: set[int] = set()
        # Children born and not yet ended.
        self.live: set[int] = set()

    def abandon(self, number: int) -> None:
        pid = self.born.pop(number, None)
        self.abandoned.add(-number if pid is None else pid)

    def note(self, words: list[str]) -> int | None:
        """Records one message; a process id to reap at once (an abandoned child that ended)."""
        if len(words) != 3 or not (words[1].isdigit() and words[2].lstrip("-").isdigit()):
            return None
        if words[0] == "born":
            number, pid = int(words[1]), int(words[2])
            self.live.add(pid)
            if -number in self.abandoned:
                self.abandoned.discard(-number)
                self.abandoned.add(pid)
            else:
                self.born[number] = pid
        elif words[0] == "exit":
            pid, code = int(words[1]), int(words[2])
            self.live.discard(pid)
            if pid in self.abandoned:
                self.abandoned.discard(pid)
                return pid
            self.exits[pid] = code
        return None


class ForkedChild:
    """A warm interpreter asked of the zygote, seen as the agent's other children are (pid,
    poll, signal, stop): born once the zygote has forked it, its exit status reported by the
    zygote. Its process group is signalled only until it has been reaped, which waits for its
    stop: until then the zombie keeps its id from any new process."""

    def __init__(self, zygote: Zygote, number: int) -> None:
        self.zygote = zygote
        self.number = number
        self._pid: int | None = None
        self._code: int | None = None
        self._reaped = False

    @property
    def pid(self) -> int:
        if self._pid is None:
            raise RuntimeError("the zygote has not forked this interpreter yet")
        return self._pid

    def born(self, timeout: float = 0.0) -> bool:
        """Whether it has been forked, waiting at most ``timeout`` seconds for it."""
        if self._pid is None:
            self._pid = self.zygote.birth(self.number, timeout)
        return self._pid is not None

    def poll(self) -> int | None:
        if self._code is None:
            if self.born():
                self._code = self.zygote.exit_status(self.pid)
            if self._code is None and not self.zygote.alive():
                # The zygote is gone, and with it this child (PR_SET_PDEATHSIG): no status.
                self._code = EXIT_UNREAPED
        return self._code

    def signal(self, signum: int) -> None:
        if self.poll() is None and self._pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._pid, signum)

    def _wait(self, seconds: float) -> int | None:
        deadline = time.monotonic() + seconds
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        return self.poll()

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> int:
        """SIGTERM to the group, SIGKILL after ``grace`` seconds; returns the exit status. One
        not forked yet is not wanted any more: the zygote ends it as soon as it is."""
        if not self.born():
            self.zygote.abandon(self.number)
            return EXIT_UNREAPED
        self.signal(signal.SIGTERM)
        self._wait(grace)
        if self._code is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        code = self._wait(KILL_WAIT_SECONDS)
        if code is None:
            return EXIT_UNREAPED
        deadline = time.monotonic() + KILL_WAIT_SECONDS
        while group_running(self.pid) and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        if not self._reaped:
            self._reaped = True
            self.zygote.reap(self.pid)
        return code


class Forks:
    """A standing node's source of warm interpreters: forks of one zygote, started for the
    settings (interpreter, directory, user, environment) of the jobs it serves. Jobs of other
    settings get a new zygote once the old one serves none; until then, a new process."""

    def __init__(self, processes: Processes, runner: str, preload: Sequence[str], runner_args: Sequence[str]) -> None:
        self.processes = processes
        self.runner = runner
        self.preload = tuple(preload)
        self.runner_args = tuple(runner_args)
        self.zygote: Zygote | None = None
        self._settings: tuple[str, str, object, dict[str, str]] | None = None

    def interpreter(self, python: str, cwd: Path, user: JobUser | None, env: dict[str, str], pipe: int) -> ChildProcess:
        """A warm interpreter that reads ``pipe``."""
        settings = (python, str(cwd), user, env)
        zygote = self.zygote
        if zygote is not None and (not zygote.alive() or self._settings != settings):
            if zygote.alive() and zygote.busy():
                argv = (python, "-c", self.runner, str(pipe), *self.runner_args)
                return self.processes.start(argv, env, cwd, user, pass_fds=(pipe,))
            self.close()
            zygote = None
        if zygote is None:
            zygote = Zygote.start(self.processes, python, self.runner, self.preload, self.runner_args, env, cwd, user)
            self.zygote, self._settings = zygote, settings
        number = zygote.request(pipe)
        if number is None:
            # Gone since it was last seen (killed, out of memory): the next call starts another.
            self.close()
            argv = (python, "-c", self.runner, str(pipe), *self.runner_args)
            return self.processes.start(argv, env, cwd, user, pass_fds=(pipe,))
        child = ForkedChild(zygote, number)
        self.processes.track(child)
        return child

    def kept(self) -> list[ChildProcess]:
        """What stays between jobs: the zygote."""
        return [] if self.zygote is None else [self.zygote.child]

    def close(self) -> None:
        if self.zygote is not None:
            self.zygote.close()
        self.zygote = None
