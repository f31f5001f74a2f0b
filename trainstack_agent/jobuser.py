"""The unprivileged user the job's code runs as, and the few paths it may use.

The agent runs as root (it installs packages, stops the machine); the job's code does not:
anyone who can reach its process (TensorFlow's gRPC port listens on the node, and
`trainstack:access` members log in without sudo) would otherwise act as root. When the agent
is root it makes a system user for the job once (``useradd --system``), and starts the job's
code as that user with no supplementary group, with:

- a HOME and a working directory of its own under the state directory (mode 0700);
- the Python environment and the job's code readable through the user's group, never writable;
- a job directory on this machine's disk (a local run's) its own to write, but for what the
  agents alone write there (status/, hypertune/); a ``gs://`` one it reaches with a token of its
  own (trainstack_agent.jobtoken), which leaves out those too.

The state directory itself is traversable, not listable (0711): the boot lock, the agent's
archive and its other files stay root's alone. The job's secrets reach it in its environment
only, which no other unprivileged user can read (``/proc/PID/environ`` is the owner's).

An agent that is not root (`trainstack local` run by a user) cannot switch users: the job's
code runs as that user, as the agent does.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from trainstack_contract.jobaccess import AGENT_WRITTEN_DIRS
from trainstack_contract.jobuser import JOB_USER_NAME, JobUserError, ensure_user


@dataclass(frozen=True)
class JobUser:
    name: str
    uid: int
    gid: int
    # Its HOME and working directory (both its own, mode 0700).
    home: Path
    workdir: Path


def _own_directory(path: Path, uid: int, gid: int) -> None:
    """``path`` a real directory of ``uid`` alone (0700); a link in its place is refused."""
    path.mkdir(parents=True, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise JobUserError(f"{path} is not a directory")
    os.chown(path, uid, gid, follow_symlinks=False)
    os.chmod(path, 0o700)


def share_read_only(root: Path, gid: int) -> None:
    """Everything under ``root`` readable (and, where its owner may run it, runnable) by group
    ``gid``, never writable by it; owners stay as they are. Links are left alone (what they
    point to keeps its own modes)."""

    def share(path: Path, is_dir: bool) -> None:
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            return
        mode = stat.S_IMODE(info.st_mode) & ~stat.S_IWGRP | stat.S_IRGRP
        if is_dir or info.st_mode & stat.S_IXUSR:
            mode |= stat.S_IXGRP
        os.chown(path, -1, gid, follow_symlinks=False)
        os.chmod(path, mode)

    if not root.is_dir() or root.is_symlink():
        return
    share(root, True)
    for directory, subdirectories, files in os.walk(root):
        for each in subdirectories:
            share(Path(directory, each), True)
        for each in files:
            share(Path(directory, each), False)


def give_tree(root: Path, uid: int, gid: int) -> None:
    """A local run's job directory ``root`` laid out for the job's code as its token lays out a
    Cloud Storage one (trainstack_contract.jobaccess): everything in it the job's (``uid``)
    but what its nodes' agents alone write (status/, hypertune/: this agent's, closed to the
    job); ``root`` itself this agent's, sticky and writable by group ``gid``, so the job's code
    makes what it likes in it but cannot rename or replace those. Links are not followed. The
    directories just above it that this agent made (closed to others by its umask) are opened
    to passing through, up to the first that is open already."""
    root.mkdir(parents=True, exist_ok=True)
    for parent in root.parents:
        info = parent.lstat()
        if info.st_mode & stat.S_IXOTH or info.st_uid != os.geteuid() or not stat.S_ISDIR(info.st_mode):
            break
        os.chmod(parent, stat.S_IMODE(info.st_mode) | stat.S_IXOTH)
    agent_uid, agent_gid = os.geteuid(), os.getegid()
    os.chown(root, agent_uid, gid, follow_symlinks=False)
    os.chmod(root, stat.S_ISVTX | 0o775)  # noqa: S103 - sticky: the job adds its own, replaces no agent's
    agents = [root / name for name in AGENT_WRITTEN_DIRS]
    for directory in agents:
        directory.mkdir(exist_ok=True)
        _own_tree(directory, agent_uid, agent_gid)
        os.chmod(directory, 0o755)  # noqa: S103 - readable as every job directory is, written by root alone
    for entry in root.iterdir():
        if entry not in agents:
            _own_tree(entry, uid, gid)


def take_back_tree(root: Path) -> None:
    """A local run's job directory, once its job has ended, this agent's again and writable by
    it alone: the job's user, which every later job's code runs as too, may no longer change a
    finished job's backups, checkpoints, model or metrics (on Google Cloud its token ends with
    it). Readable as before; links are not followed. A later run of the same job hands it over
    again (:func:`give_tree`)."""
    if os.geteuid() != 0 or not root.is_dir() or root.is_symlink():
        return
    agent_uid, agent_gid = os.geteuid(), os.getegid()
    _own_tree(root, agent_uid, agent_gid)
    for directory, subdirectories, files in os.walk(root):
        for each in (directory, *(os.path.join(directory, name) for name in (*subdirectories, *files))):
            try:
                info = os.lstat(each)
                if not stat.S_ISLNK(info.st_mode):
                    os.chmod(each, stat.S_IMODE(info.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH | stat.S_ISVTX))
            except FileNotFoundError:
                continue


def _own_tree(top: Path, uid: int, gid: int) -> None:
    """``top`` and everything under it owned by ``uid``; links are not followed."""
    try:
        os.chown(top, uid, gid, follow_symlinks=False)
    except FileNotFoundError:
        return
    if top.is_symlink() or not top.is_dir():
        return
    for directory, subdirectories, files in os.walk(top):
        for each in (*subdirectories, *files):
            try:
                os.chown(Path(directory, each), uid, gid, follow_symlinks=False)
            except FileNotFoundError:
                # The other nodes' agents write the same local job directory meanwhile: a
                # status object's temporary file is renamed away between listing and chown.
                continue


def prepare_job_user(
    state_dir: Path, readable: tuple[Path, ...], job_dir: str | None, name: str = JOB_USER_NAME
) -> JobUser | None:
    """The job's user with its paths in place, or None when this agent is not root (the job's
    code then runs as the agent's own user). ``readable``: what the job's code reads (its
    Python environment, its code); ``job_dir``: the job's directory, given to the user when it
    is on this machine's disk."""
    if os.geteuid() != 0:
        return None
    try:
        uid, gid = ensure_user(name)
        # Searchable, not listable: the job's user reaches its own directories below it.
        os.chmod(state_dir, 0o711)  # noqa: S103
        home, workdir = state_dir / "job-home", state_dir / "job-work"
        for directory in (home, workdir):
            _own_directory(directory, uid, gid)
        for path in readable:
            share_read_only(path, gid)
        if job_dir is not None and not job_dir.startswith("gs://"):
            give_tree(Path(job_dir), uid, gid)
    except OSError as error:
        raise JobUserError(f"cannot put the job's paths in place for {name}: {error}") from None
    return JobUser(name, uid, gid, home, workdir)
