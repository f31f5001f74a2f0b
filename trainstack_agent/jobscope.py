"""Everything one job's code started, ended with the job.

Ending the job's process group is not enough: a process of the job's code that calls
``setsid`` (a daemon, a double fork) leaves the group, and on a standing node it would run on,
as the same user, into the next job: reading that job's environment from /proc, writing its
metric report, holding the GPU. So each job's code runs in a cgroup (v2) of its own: a process
cannot leave its cgroup by any session trick, and ``cgroup.kill`` ends every one at once when the
job ends. Where no cgroup v2 can be made (no unified hierarchy, no permission), every process of
the job's user that carries this job's mark in its environment is ended instead, pass after
pass until none is left: weaker, since a process may clear its environment, and said in the log.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from collections.abc import Callable
from pathlib import Path

Log = Callable[[str], None]

# The variable that marks every process of one job (the fallback's way to find them).
SCOPE_ENV = "TRAINSTACK_JOB_SCOPE"
# Where the jobs' cgroups live, under the cgroup v2 hierarchy's root.
CGROUP_PARENT = "trainstack-jobs"
# How long ending a job's processes may take before the agent goes on (a process stuck in the
# kernel outlives SIGKILL; waiting on it would keep the machine billing).
END_SECONDS = 10.0
MOUNTS = Path("/proc/self/mounts")
PROC = Path("/proc")


def cgroup2_root(mounts: Path = MOUNTS) -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup`` on a unified host,
    ``/sys/fs/cgroup/unified`` on a hybrid one), or None."""
    try:
        lines = mounts.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


class JobScope:
    """One job's processes: its cgroup when one could be made, and its mark."""

    def __init__(self, mark: str, uid: int | None, log: Log, cgroup: Path | None) -> None:
        self.mark = mark
        self.uid = uid
        self.log = log
        self.cgroup = cgroup
        self.ended = False

    @classmethod
    def create(cls, name: str, uid: int | None, log: Log, root: Path | None = None) -> JobScope:
        """A new scope, in a new cgroup ``<root>/trainstack-jobs/<name>-<mark>`` where it can be made."""
        mark = secrets.token_hex(8)
        root = cgroup2_root() if root is None else root
        if root is None:
            return cls(mark, uid, log, None)
        path = root / CGROUP_PARENT / f"{name}-{mark}"
        try:
            path.mkdir(parents=True)
        except OSError as error:
            log(f"no cgroup for the job ({error.strerror}): its processes are found by their mark when it ends")
            return cls(mark, uid, log, None)
        return cls(mark, uid, log, path)

    @property
    def env(self) -> dict[str, str]:
        return {SCOPE_ENV: self.mark}

    def adopt(self, pid: int) -> None:
        """Moves ``pid`` (the job's first process) into the job's cgroup; its children follow."""
        if self.cgroup is None:
            return
        try:
            (self.cgroup / "cgroup.procs").write_text(f"{pid}\n", encoding="ascii")
        except OSError as error:
            self.log(f"could not move the job's code into its cgroup ({error.strerror}); its mark finds it at the end")
            self._remove()

    def end(self) -> None:
        """Ends every process of the job, whatever session or group it made for itself."""
        self.ended = True
        deadline = time.monotonic() + END_SECONDS
        if self.cgroup is not None:
            self._kill_cgroup(deadline)
        self._kill_marked(deadline)

    def _kill_cgroup(self, deadline: float) -> None:
        assert self.cgroup is not None
        kill = self.cgroup / "cgroup.kill"
        while time.monotonic() < deadline:
            pids = self._cgroup_pids()
            if not pids:
                break
            if kill.exists():
                with contextlib.suppress(OSError):
                    kill.write_text("1\n", encoding="ascii")
            else:  # before Linux 5.14: each process, pass after pass
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        self._remove()

    def _cgroup_pids(self) -> list[int]:
        assert self.cgroup is not None
        try:
            text = (self.cgroup / "cgroup.procs").read_text(encoding="ascii")
        except OSError:
            return []
        return [int(word) for word in text.split() if word.isdigit()]

    def _remove(self) -> None:
        if self.cgroup is not None:
            with contextlib.suppress(OSError):  # busy: a process stuck in the kernel
                self.cgroup.rmdir()
            self.cgroup = None

    def _kill_marked(self, deadline: float) -> None:
        """Every process of the job's user whose environment carries this job's mark."""
        ended = 0
        while time.monotonic() < deadline:
            pids = marked_processes(self.mark, self.uid)
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    ended += 1
            time.sleep(0.02)
        if ended:
            self.log(f"ended {ended} process(es) the job's code left running outside its cgroup")


def marked_processes(mark: str, uid: int | None, proc: Path = PROC) -> list[int]:
    """The running processes (of ``uid``, when given) whose environment holds the mark."""
    wanted = f"{SCOPE_ENV}={mark}".encode()
    found = []
    own = os.getpid()
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == own:
            continue
        try:
            if uid is not None and entry.stat().st_uid != uid:
                continue
            state = (entry / "stat").read_text(errors="replace").rsplit(")", 1)[1].split()[0]
            environ = (entry / "environ").read_bytes()
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X") and wanted in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def end_abandoned_scopes(log: Log, root: Path | None = None) -> None:
    """Ends and removes the job cgroups of agents that are gone (their pid, in the cgroup's
    name, runs no more): a killed agent's job, or an empty cgroup it left. Another live agent's
    (the other nodes of a local run on one host) are left alone."""
    root = cgroup2_root() if root is None else root
    parent = None if root is None else root / CGROUP_PARENT
    if parent is None or not parent.is_dir():
        return
    for cgroup in parent.iterdir():
        fields = cgroup.name.split("-")
        if not cgroup.is_dir() or len(fields) != 3 or not fields[1].isdigit() or (PROC / fields[1]).exists():
            continue
        JobScope(fields[2], None, log, cgroup).end()
