"""A local run's work directory: which one `trainstack local` may write into, and which one
``--fresh`` may delete (only one it made)."""

from __future__ import annotations

import shutil
from pathlib import Path

from trainstack.base.project import PROJECT_ROOT

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
