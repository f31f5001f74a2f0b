"""Where a stack's queue and its jobs' status objects are: the stack's bucket, or the stand-in
of `trainstack local` in its work directory."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trainstack.base.bucket import Bucket, DirectoryBucket, GcsBucket
from trainstack.jobstate.report import default_workdir, local_bucket
from trainstack_contract import LAYOUT

if TYPE_CHECKING:
    from trainstack.base.bucket import Bucket
    from trainstack.stackmodel.resolved import ResolvedStack


class QueueUsageError(Exception):
    """The command line names no usable queue; the message is one line."""


@dataclass(frozen=True)
class QueuePlace:
    """The stack's queue (read and written under preconditions) and its jobs' status objects."""

    bucket: Bucket
    # --local: the run's work directory and its stand-in bucket's directory; None on the cloud.
    workdir: Path | None = None
    bucket_dir: Path | None = None


def place_of(stack: ResolvedStack, local: bool, workdir: Path | None) -> QueuePlace:
    """The cloud's queue of ``stack``, or (``local``) its standing local run's in ``workdir``
    (default .trainstack-local/<stack>)."""
    from trainstack.base.bucket import DirectoryBucket, GcsBucket

    if workdir is not None and not local:
        raise QueueUsageError("--workdir is the work directory of a local run: use it with --local")
    if not local:
        return QueuePlace(GcsBucket(stack.project, stack.bucket_name))
    workdir = workdir or default_workdir(stack.stack)
    bucket = local_bucket(workdir, stack)
    return QueuePlace(DirectoryBucket(bucket), workdir, bucket)


def stack_job_objects(stack: ResolvedStack, bucket: Path | None) -> tuple[Bucket, str] | None:
    """Where the stack's own job (job 0) writes its status objects: the bucket and its prefix
    there (jobs/<name>, or job.job_dir's folder in the team's bucket). ``bucket``: the
    stand-in of a local run (which stands in for the team's bucket beside the stack's);
    None for the cloud. None when the stack has no job."""
    job = stack.job
    if job is None:
        return None
    prefix = job.job_dir_prefix or posixpath.join(LAYOUT.jobs, job.name)
    external = job.job_dir_bucket if job.job_dir_prefix else None
    if bucket is not None:
        return DirectoryBucket(bucket.parent / external if external else bucket), prefix
    return GcsBucket(stack.project, external or stack.bucket_name), prefix
