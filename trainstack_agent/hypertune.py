"""The metric a job's code reports through AI Platform's cloudml-hypertune package, copied to
the job directory.

The package writes its reports to the local file ``CLOUD_ML_HP_METRIC_FILE`` names
(``trainstack_contract.HYPERTUNE_METRIC_FILE_ENV``); the job's code cannot write a gs:// job
directory with ``open()``. So each job gets a file of its own on this node, in a new directory
(:func:`fresh_metric_file`: a queued job never sees the one before it), and the agent copies it
to ``hypertune/<node>.metrics`` in the job directory whenever it changed (:class:`MetricCopy`):
every :attr:`Timings.metric_copy` while the code runs, and once more when it has ended, before
the node records how the job ended.

The directory is ``hypertune/<random>`` in the agent's state directory, which is root's and
traversable only (0711, :mod:`trainstack_agent.jobuser`): the job's user owns its own
``<random>`` directory and nothing above it, so it cannot swap a link in for a directory the
agent reads. The file itself the agent opens without following a link, takes only a regular
file, and, when the job runs as its own user, only one that user owns (never a hard link to
someone else's file): the agent, root, copies nothing the job's user could not read itself.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Final

from trainstack_agent.cloud import CloudError
from trainstack_agent.gcs import Storage
from trainstack_agent.jobuser import JobUser
from trainstack_contract import MAX_HYPERTUNE_METRICS_BYTES

# In the agent's state directory: one directory per job, the job's report file in it, named as
# the package's own default is (/tmp/hypertune/output.metrics).
METRIC_DIR: Final = "hypertune"
METRIC_FILE: Final = "output.metrics"


class MetricFileRefused(Exception):
    """The path holds something the agent does not copy (a link, not a regular file, another
    user's file); the message says what."""


def fresh_metric_file(state_dir: Path, user: JobUser | None) -> Path:
    """A new, empty directory for this job's report, owned by ``user`` (the agent's own user
    when None), and the file's path in it; the directories of earlier jobs are removed first."""
    base = state_dir / METRIC_DIR
    if base.is_symlink():
        base.unlink()
    # Nothing of an earlier job is left to read (rmtree follows no link inside).
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True, exist_ok=True)
    # Searchable, not listable: the job's user reaches its own directory below by its random name.
    os.chmod(base, 0o711)  # noqa: S103
    directory = base / os.urandom(8).hex()
    directory.mkdir(mode=0o700)
    if user is not None:
        os.chown(directory, user.uid, user.gid, follow_symlinks=False)
    return directory / METRIC_FILE


def whole_lines_tail(data: bytes, cut: bool, limit: int = MAX_HYPERTUNE_METRICS_BYTES) -> bytes:
    """The whole lines at the end of ``data``, at most ``limit`` bytes. ``cut``: ``data`` does
    not start at the file's start, so its first line (up to the first newline) may be a part of
    one and is dropped. A last line without its newline is still being written: dropped too."""
    if cut:
        data = data[data.find(b"\n") + 1 :] if b"\n" in data else b""
    data = data[: data.rfind(b"\n") + 1]
    if len(data) > limit:
        # One byte more than the bound: when it is a newline, the line after it is whole.
        data = data[len(data) - limit - 1 :]
        data = data[data.find(b"\n") + 1 :]
    return data


def read_report(
    path: Path, owner: int | None, limit: int = MAX_HYPERTUNE_METRICS_BYTES
) -> tuple[bytes, tuple[int, ...]] | None:
    """The file's last whole lines, at most ``limit`` bytes (the package keeps only its last 100
    reports, a few KiB: only a job writing the file itself reaches the bound; of a larger file,
    at most ``2 * limit + 1`` bytes at its end are read), and what identifies its version (inode, size, modification time); None when there is no file yet.
    ``owner``: the uid the file must have (the job's user), or None for any."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise MetricFileRefused(f"cannot open {path}: {error.strerror}") from None
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise MetricFileRefused(f"{path} is not a regular file")
        if owner is not None and info.st_uid != owner:
            raise MetricFileRefused(f"{path} is not the job's user's own file")
        # Twice the bound and a byte: room for a last line still being written, and the byte
        # before the window, which tells whether the first line read is whole.
        start = max(0, info.st_size - 2 * limit - 1)
        handle.seek(start)
        data = handle.read(2 * limit + 1)
    return whole_lines_tail(data, cut=start > 0, limit=limit), (info.st_ino, info.st_size, info.st_mtime_ns)


class MetricCopy:
    """One job's report file on this node and its copy at ``uri`` in the job directory."""

    def __init__(
        self, path: Path, user: JobUser | None, storage: Storage, uri: str, log: Callable[[str], None]
    ) -> None:
        self.path = path
        self.owner = user.uid if user is not None else None
        self.storage = storage
        self.uri = uri
        self.log = log
        # The version of the file last copied, and what was copied.
        self._version: tuple[int, ...] | None = None
        self._copied: bytes | None = None
        self._problem: str | None = None

    def copy(self) -> bool:
        """Copies the file's last whole lines when they changed since the last copy; True when
        it wrote. A failure is logged (once while it lasts) and left to the next call."""
        try:
            report = read_report(self.path, self.owner)
            if report is None or report[1] == self._version:
                return False
            data, version = report
            if not data:
                # No whole line yet: looked at again next time.
                return False
            if data == self._copied:
                self._version = version
                return False
            self.storage.write(self.uri, data, content_type="text/plain")
        except (OSError, CloudError, MetricFileRefused) as error:
            problem = str(error)[:300]
            if problem != self._problem:
                self.log(f"could not copy the job's hypertune report to {self.uri} ({problem}); trying again later")
                self._problem = problem
            return False
        self._version, self._copied, self._problem = version, data, None
        return True


class JobMetrics:
    """The job's report on this node, once its preparation named one (:meth:`follow`), copied to
    the job directory by :meth:`copy`, which logs a failure and is never fatal."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log
        self.current: MetricCopy | None = None

    def follow(self, copy: MetricCopy) -> None:
        self.current = copy

    def copy(self) -> None:
        """The job's hypertune report to the job directory, if it changed; never fatal."""
        if self.current is None:
            return
        try:
            self.current.copy()
        except Exception as error:  # noqa: BLE001 - the job's end is recorded whatever happens here
            self.log(f"could not copy the job's hypertune report: {type(error).__name__}: {error}")
