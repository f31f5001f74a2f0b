"""A process started in a session of its own, the same way by a node's agent (its job's code)
and by `trainstack local`'s supervisor (the nodes' boot scripts): a signal to its process group
reaches everything it started, and it can be bound to end with its parent."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

# prctl(2): PR_SET_PDEATHSIG, the signal a process gets when the thread that started it ends.
_PR_SET_PDEATHSIG = 1


def ends_with_parent(parent: int) -> Callable[[], None]:
    """What a child runs between fork and exec so that it ends (SIGKILL) when the process that
    started it ends, even by SIGKILL: no trainer outlives a killed agent. The kernel clears
    this setting on a change of user, and CPython switches the user (``user=``) before it
    runs ``preexec_fn``, so it holds for a job run as its own user. A parent already gone
    by then ends the child at once."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def in_child() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return in_child


def popen_in_own_session(
    argv: Sequence[str],
    env: Mapping[str, str] | None,
    cwd: str | os.PathLike[str] | None,
    pass_fds: Sequence[int] = (),
    user_ids: tuple[int, int] | None = None,
    die_with_parent: bool = False,
) -> subprocess.Popen[str]:
    """``argv`` with stdout and stderr merged into one text stream, in a session and process
    group of its own: a signal to the group reaches anything the process started. (`trainstack
    local`'s supervisor starts the nodes' boot scripts the same way.) ``user_ids``: the process
    runs as that uid and gid, with no supplementary group; ``die_with_parent``: it
    ends when this process ends (Linux)."""
    switch: dict[str, Any] = {}
    if user_ids is not None:
        switch = {"user": user_ids[0], "group": user_ids[1], "extra_groups": []}
    return subprocess.Popen(
        list(argv),
        env=None if env is None else dict(env),
        cwd=None if cwd is None else Path(cwd),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,
        pass_fds=tuple(pass_fds),
        preexec_fn=ends_with_parent(os.getpid()) if die_with_parent else None,  # noqa: PLW1509 - the prctl must run in the child
        **switch,
    )
