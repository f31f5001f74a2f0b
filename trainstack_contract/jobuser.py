"""The unprivileged system user a job's code runs as: its name, and how it is made.

A node's agent makes it once when it runs as root (trainstack_agent.jobuser says what the user
may reach); `trainstack local` makes the same user on this machine to prepare a project's
metadata in a sandbox as a node would run it.
"""

from __future__ import annotations

import pwd
import subprocess

# The system user (and its group) every node's job runs as.
JOB_USER_NAME = "trainstack-job"
USERADD = ("useradd", "--system", "--user-group", "--no-create-home")
USERADD_SECONDS = 60


class JobUserError(Exception):
    """The job's user cannot be made or its paths cannot be put in place."""


def _lookup(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def ensure_user(name: str = JOB_USER_NAME) -> tuple[int, int]:
    """The uid and gid of system user ``name``, made with ``useradd --system`` when missing (a
    second agent of a local run may make it at the same moment: that is no failure)."""
    entry = _lookup(name)
    if entry is None:
        command = [*USERADD, "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=USERADD_SECONDS, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise JobUserError(f"cannot make the job's user {name} ({error})") from None
        entry = _lookup(name)
        if entry is None:
            raise JobUserError(f"cannot make the job's user {name}: {done.stderr.strip()[:300]}")
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise JobUserError(f"the job's user {name} has uid or gid 0; it must be unprivileged")
    return entry.pw_uid, entry.pw_gid
