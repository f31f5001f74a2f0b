"""What `submit`, `cancel` and `jobs` do with the queue's objects (``trainstack_contract.queue``):
the spec and code written once under their digests, the index read-modify-written under a
generation precondition, and each job's history read from its status objects."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

from trainstack.base.bucket import Bucket, BucketError, read_json
from trainstack.jobqueue.store import create, update
from trainstack_contract import LAYOUT
from trainstack_contract.lifecycle import ENDED_JOB_STATES
from trainstack_contract.queue import (
    INDEX_OBJECT,
    MAX_ENTRIES,
    MAX_INDEX_BYTES,
    MAX_SPEC_BYTES,
    QueueEntry,
    QueueFormatError,
    QueueIndex,
    spec_bytes,
    spec_object,
    spec_sha256,
)


@dataclass(frozen=True)
class CodeObject:
    """An object the job's spec names by digest (its code archive, its requirements)."""

    name: str
    data: bytes


def parse_index(store: Bucket, data: bytes | None) -> QueueIndex:
    """The index's bytes read back (None: no job submitted yet); :class:`BucketError` naming the
    object and what is wrong with it."""
    if data is None:
        return QueueIndex()
    try:
        return QueueIndex.from_json(data)
    except QueueFormatError as error:
        raise BucketError(
            f"{store.location(INDEX_OBJECT)}: {error}; not a queue index trainstack wrote (nothing was changed)"
        ) from None


def read_index(store: Bucket) -> QueueIndex:
    current = store.read_versioned(INDEX_OBJECT, MAX_INDEX_BYTES)
    return parse_index(store, None if current is None else current.data)


def checked_spec(values: dict[str, str]) -> bytes:
    """A job's spec as it is written; :class:`BucketError` when it cannot be one."""
    try:
        data = spec_bytes(values)
    except QueueFormatError as error:
        raise BucketError(f"the job cannot be queued: {error}") from None
    if len(data) > MAX_SPEC_BYTES:
        raise BucketError(f"the job's spec would be {len(data)} bytes, more than the {MAX_SPEC_BYTES} a node reads")
    return data


def submit(
    store: Bucket,
    name: str,
    values: dict[str, str],
    code: Sequence[CodeObject],
    submitted: str,
    one_node: bool = False,
) -> QueueEntry:
    """Queue a job: its code and spec written (each once, by digest), then the index appended
    under a precondition (a full index makes room by its oldest job that has ended);
    ``one_node``: the job runs on one node, the first to take it.
    Everything is checked before the first write: a corrupt index or a bad spec writes nothing."""
    spec = checked_spec(values)
    sha = spec_sha256(spec)
    read_index(store)
    for item in code:
        create(store, item.name, item.data)
    create(store, spec_object(sha), spec)

    def append(data: bytes | None) -> tuple[bytes | None, QueueEntry]:
        index = parse_index(store, data)
        for entry in index.entries:
            # This very submit, written once already (a write retried after its answer was lost).
            if (entry.name, entry.spec_sha256, entry.submitted) == (name, sha, submitted):
                return None, entry
        if len(index.entries) >= MAX_ENTRIES:
            index = _with_room(store, index)
        try:
            appended, entry = index.appended(name, sha, submitted, one_node)
        except QueueFormatError as error:
            raise BucketError(f"{store.location(INDEX_OBJECT)}: {error}") from None
        return appended.to_json(), entry

    return update(store, INDEX_OBJECT, MAX_INDEX_BYTES, append)


def job_state(bucket: Bucket, prefix: str) -> str | None:
    """The state status/job.json of the job directory ``prefix`` says, None before it has one."""
    status = read_json(bucket, posixpath.join(prefix, LAYOUT.job_status))
    state = (status or {}).get("state")
    return state if isinstance(state, str) else None


def ended_state(bucket: Bucket, entry: QueueEntry) -> str | None:
    """The state a queued job ended in (SUCCEEDED, FAILED, CANCELLED), None while it has not."""
    state = job_state(bucket, job_prefix(entry))
    return state if state in ENDED_JOB_STATES else None


def _with_room(store: Bucket, index: QueueIndex) -> QueueIndex:
    """A full index without its oldest job that has ended (or was cancelled)."""
    for entry in index.entries:
        if entry.cancelled is not None or ended_state(store, entry) is not None:
            return index.without(frozenset({entry.id}))
    raise BucketError(
        f"the queue holds {MAX_ENTRIES} jobs and none has ended: cancel some (`trainstack cancel`) or wait"
    )


class CancelRefused(Exception):
    """The job cannot be cancelled; the message says why. Nothing was changed."""


def cancel(store: Bucket, job_id: int, when: str) -> QueueEntry:
    """Mark job ``job_id`` cancelled under a precondition. :class:`CancelRefused` for a job
    that is not in the queue, was cancelled already or has ended (its status says so)."""

    def mark(data: bytes | None) -> tuple[bytes | None, QueueEntry]:
        index = parse_index(store, data)
        entry = index.entry(job_id)
        if entry is None:
            known = ", ".join(str(e.id) for e in index.entries[-20:]) or "none"
            raise CancelRefused(f"no job {job_id} in the queue (its latest ids: {known}); `trainstack jobs` lists them")
        if entry.cancelled is not None:
            raise CancelRefused(f"job {job_id} ({entry.name}) was cancelled already, at {entry.cancelled}")
        state = ended_state(store, entry)
        if state is not None:
            raise CancelRefused(f"job {job_id} ({entry.name}) has ended already: {state}; nothing to cancel")
        changed = index.with_cancelled(job_id, when)
        marked = changed.entry(job_id)
        assert marked is not None
        return changed.to_json(), marked

    return update(store, INDEX_OBJECT, MAX_INDEX_BYTES, mark)


def job_prefix(entry: QueueEntry) -> str:
    """The job directory of a queued job, in the stack's bucket: jobs/q<id>_<name>."""
    return posixpath.join(LAYOUT.jobs, entry.job_dir_name)
