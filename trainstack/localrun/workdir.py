"""A local run's work directory: which one `trainstack local` may write into, and which one
``--fresh`` may delete (only one it made)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

from trainstack.base.project import PROJECT_ROOT
from trainstack_contract.jobuser import JOB_USER_NAME

# Written into every work directory `trainstack local` creates; `--fresh` deletes nothing else.
WORKDIR_MARKER = ".trainstack-local-workdir"
# In a work directory: what the nodes' pip installs from (they reach no package index).
FIND_LINKS_DIR = "pip-find-links"


class JobUserUnreachable(Exception):
    """Run as root, a local run would have to start the job's code as root, not as the cloud's
    unprivileged job user; the message says why and what to do."""


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


def claim_workdir(workdir: Path, stack: str) -> None:
    """Makes ``workdir`` one that `trainstack local` made (its marker written), once it is
    adoptable (:func:`check_adoptable`): `local` and `submit --local`, whichever comes first."""
    check_adoptable(workdir)
    mark_workdir(workdir, stack)


def mark_workdir(workdir: Path, stack: str) -> None:
    """Writes the marker that makes ``workdir`` one `trainstack local` made (``--fresh`` may
    delete it); the caller has checked it may (:func:`check_adoptable`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / WORKDIR_MARKER).write_text(f"trainstack local work directory of stack {stack}\n")


def unreachable_by_others(path: Path) -> Path | None:
    """The first directory above ``path`` (or ``path`` itself, with links followed) that
    another user may not pass through or run; None when every one may."""
    resolved = path.resolve()
    for each in (resolved, *resolved.parents):
        if not each.stat().st_mode & stat.S_IXOTH:
            return each
    return None


def interpreter_for_job_user() -> Path | None:
    """The interpreter the nodes' environments are made from so that the job's unprivileged
    user can run it: this one, or, when this one lies under a directory others may not enter
    (pyenv's under root's home), the system's of the same version, as a VM's own ``python3``
    stands in. None when there is neither."""
    executable = Path(sys.executable)
    if unreachable_by_others(executable) is None:
        return executable
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for directory in ("/usr/local/bin", "/usr/bin"):
        candidate = Path(directory, version)
        if candidate.is_file() and unreachable_by_others(candidate) is None:
            return candidate
    return None


def host_packages_venv(env_dir: Path, interpreter: Path, clear: bool = False) -> Path:
    """A virtual environment of ``interpreter`` (no pip of its own) that sees this interpreter's
    packages through a .pth file, as a local node's environment is made; its python."""
    argv = [str(interpreter), "-m", "venv", "--without-pip", str(env_dir)]
    subprocess.run([*argv[:3], *(["--clear"] if clear else []), *argv[3:]], check=True, capture_output=True)
    python = env_dir / "bin" / "python"
    purelib = subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
    ).strip()
    (Path(purelib) / "trainstack-host.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    return python


def job_user_obstacle(workdir: Path) -> str | None:
    """Run as root, a local run's agents start the job's code as the unprivileged user the
    cloud's nodes use (:mod:`trainstack_agent.jobuser`). That user must pass through every
    directory above the work directory and this interpreter's packages, and run an
    interpreter; what stops it, in words, or None when nothing does. Not root: None, the
    job's code runs as this user, who can. Nodes whose agents make their own environment get a
    ``python3`` that user can run (:func:`nodes_python3`)."""
    if os.geteuid() != 0:
        return None
    packages = Path(sysconfig.get_paths()["purelib"])
    remedies = (
        (
            "the work directory",
            workdir,
            "give --workdir a directory it can reach (under /var/tmp, say), or let it pass through: chmod o+x {blocked}",
        ),
        (
            "this interpreter's packages",
            packages,
            "keep the project and its .venv outside {blocked}, or run as a user other than root (the job's code then "
            "runs as you)",
        ),
    )
    for what, path, remedy in remedies:
        blocked = unreachable_by_others(path)
        if blocked is not None:
            mode = stat.S_IMODE(blocked.stat().st_mode)
            return f"{JOB_USER_NAME} cannot enter {blocked} (mode {mode:04o}) above {what} {path}; " + remedy.format(
                blocked=blocked
            )
    if interpreter_for_job_user() is None:
        return (
            f"{JOB_USER_NAME} cannot run {sys.executable} (under a directory others may not enter) and no "
            f"python{sys.version_info.major}.{sys.version_info.minor} is in /usr/local/bin or /usr/bin"
        )
    return None


def nodes_python3(workdir: Path) -> Path | None:
    """Run as root, where the nodes' agents make their own environment from the ``python3`` on
    PATH and the job's user could not run that one (pyenv's under root's home): the directory
    of a ``python3`` it can run (:func:`interpreter_for_job_user`), linked in the work directory,
    to put first on the nodes' PATH, as a VM's own ``python3`` is. None where none is needed."""
    python3 = shutil.which("python3")
    if os.geteuid() != 0 or (python3 is not None and unreachable_by_others(Path(python3)) is None):
        return None
    interpreter = interpreter_for_job_user()
    if interpreter is None:
        return None
    directory = workdir / "bin"
    directory.mkdir(exist_ok=True)
    link = directory / "python3"
    link.unlink(missing_ok=True)
    link.symlink_to(interpreter)
    return directory
