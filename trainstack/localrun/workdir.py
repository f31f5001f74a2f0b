"""A local run's work directory: which one `trainstack local` may write into, and which one
``--fresh`` may delete (only one it made)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from trainstack.base.project import PROJECT_ROOT
from trainstack_agent.jobuser import JOB_USER_NAME

# Written into every work directory `trainstack local` creates; `--fresh` deletes nothing else.
WORKDIR_MARKER = ".trainstack-local-workdir"


class WorkdirError(Exception):
    """A work directory `trainstack local` refuses to use or delete."""


def clear_workdir(workdir: Path) -> None:
    """Delete a work directory that `trainstack local` made, and nothing else.

    Refused: a path that is not a directory or is a symlink, one without the marker file
    that :meth:`LocalStackRun.prepare` writes, and any directory holding the current directory,
    the repository or the home directory (a stack named ".." once pointed --fresh at the
    repository itself)."""
    if not workdir.exists() and not workdir.is_symlink():
        return
    if workdir.is_symlink() or not workdir.is_dir():
        raise WorkdirError(f"{workdir} is not a directory that trainstack local made; not deleting it")
    resolved = workdir.resolve()
    protected = {Path.cwd().resolve(), PROJECT_ROOT.resolve(), Path.home().resolve()}
    if any(resolved == p or resolved in p.parents for p in protected):
        raise WorkdirError(
            f"{workdir} holds {', '.join(str(p) for p in sorted(protected) if resolved == p or resolved in p.parents)}; not deleting it"
        )
    if not (resolved / WORKDIR_MARKER).is_file():
        raise WorkdirError(
            f"{workdir} has no {WORKDIR_MARKER} file, so trainstack local did not make it; not deleting it"
        )
    shutil.rmtree(resolved)


def check_adoptable(workdir: Path) -> None:
    """A work directory `trainstack local` may write into: absent, empty, or one it made. A
    non-empty directory it did not make is refused, so that a later --fresh never deletes a
    user's files (--fresh deletes only a directory holding the marker)."""
    if workdir.is_symlink() or (workdir.exists() and not workdir.is_dir()):
        raise WorkdirError(f"{workdir} is not a directory; choose another --workdir")
    if workdir.is_dir() and not (workdir / WORKDIR_MARKER).is_file() and any(workdir.iterdir()):
        raise WorkdirError(
            f"{workdir} is not empty and trainstack local did not make it; choose an empty or new --workdir"
        )


def unreachable_by_others(path: Path) -> Path | None:
    """The first directory above ``path`` (or ``path`` itself, with links followed) that
    another user may not pass through or run; None when every one may."""
    resolved = path.resolve()
    for each in (resolved, *resolved.parents):
        if not each.stat().st_mode & stat.S_IXOTH:
            return each
    return None


def check_reachable_by_job_user(workdir: Path) -> None:
    """Run as root, a local run's agents start the job's code as the unprivileged user the
    cloud's nodes use (:mod:`trainstack_agent.jobuser`): that user must be able to pass
    through every directory above the nodes' state and the job directory. One it cannot
    pass through is refused here, with what to do, rather than failing the job's start.
    Not root: the job's code runs as this user, who can."""
    if os.geteuid() != 0:
        return
    blocked = unreachable_by_others(workdir)
    if blocked is not None:
        raise WorkdirError(
            f"{workdir}: run as root, the job's code runs as the unprivileged user {JOB_USER_NAME}, "
            f"which cannot enter {blocked} (mode {stat.S_IMODE(blocked.stat().st_mode):04o}); choose a --workdir "
            "under directories others may enter (o+x)"
        )
