"""The job queue of a standing cluster: what `trainstack submit` and `cancel` write, what
`trainstack jobs` lists and what every node of the stack reads between jobs.

In the stack's bucket, under what machines run (``trainstack/``: only the principals that may
deploy and the stack's ``trainstack:access`` members write there, never a machine's account):

    trainstack/queue/index.json           every submitted job, in submit order: its id, name,
                                          job directory, the sha256 of its spec, when it was
                                          submitted and cancelled. Read-modify-written only
                                          under Cloud Storage's generation preconditions.
    trainstack/queue/specs/<sha256>.json  a job's spec: the job's metadata values (the keys the
                                          stack's own job has in instance metadata, job
                                          directory aside), named by its own sha256 and
                                          written once (ifGenerationMatch=0).

A queued job's directory is ``jobs/q<id>_<name>``: the id makes it new, so no job resumes
another's backup. The stack's own ``trainstack:job`` (instance metadata) is job 0, the first.

A job runs on all the cluster's nodes, or, queued ``one_node``, on the one node that takes it
first: that node creates ``status/taken_by.json`` in the job's directory under
``ifGenerationMatch=0`` (:func:`taken_by_bytes`), so however many nodes look at once, one runs
it. One-node jobs run side by side, one per node; a whole-cluster job starts once every job
queued before it has ended.

Standard library only, Python 3.10: the node agent ships it.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from trainstack_contract import EXECUTED_DIR, LAYOUT, METADATA_KEYS
from trainstack_contract.metadata import MAX_TRAINER_ARGS_CHARS
from trainstack_contract.names import NODE_NAME, SHA256

QUEUE_DIR: Final = f"{EXECUTED_DIR}/queue"
INDEX_OBJECT: Final = f"{QUEUE_DIR}/index.json"
SPECS_DIR: Final = f"{QUEUE_DIR}/specs"
# Hyperparameter studies (`trainstack tune`): trainstack/tune/<study>/study.json, read-modify-
# written under generation preconditions by whoever may queue jobs; no machine runs or writes it.
STUDIES_DIR: Final = f"{EXECUTED_DIR}/tune"
INDEX_VERSION: Final = 1
SPEC_VERSION: Final = 1
# Bounds: what one read of the index or a spec may cost a node, and how many jobs the index
# keeps (`submit` drops the oldest finished ones to make room; `jobs` lists what it keeps).
MAX_INDEX_BYTES: Final = 1 << 20
MAX_SPEC_BYTES: Final = 256 * 1024
MAX_ENTRIES: Final = 1000
MAX_JOB_ID: Final = 10**9
# A queued job's name: as trainstack:job.name, short enough that jobs/q<id>_<name> is a job
# directory name (at most 128 characters).
QUEUED_JOB_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,99}")
# UTC, as status objects write it: 2026-11-25T21:40:00.123000Z
_TIME: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?Z")
# What a spec may set: the job's own metadata keys (JobMetadata.to_metadata but job_dir), no other.
SPEC_KEYS: Final = frozenset(
    {
        METADATA_KEYS.job_mode,
        METADATA_KEYS.trainer_args,
        METADATA_KEYS.code_archive,
        METADATA_KEYS.code_archive_sha256,
        METADATA_KEYS.module,
        METADATA_KEYS.code_install,
        METADATA_KEYS.requirements,
        METADATA_KEYS.requirements_sha256,
        METADATA_KEYS.image,
        METADATA_KEYS.secrets,
        METADATA_KEYS.job_env,
        METADATA_KEYS.job_buckets,
        METADATA_KEYS.warm_start,
    }
)
# Each value of a spec: at most the agent's longest (the trainer's arguments).
MAX_SPEC_VALUE_CHARS: Final = MAX_TRAINER_ARGS_CHARS


class QueueFormatError(ValueError):
    """The index or a spec is not what `submit` writes; the message names what is wrong."""


def spec_object(sha256: str) -> str:
    return posixpath.join(SPECS_DIR, f"{sha256}.json")


def queued_job_dir_name(job_id: int, name: str) -> str:
    """The job directory's name under jobs/ of a queued job."""
    return f"q{job_id}_{name}"


def queued_job_dir(bucket: str, job_id: int, name: str) -> str:
    """``bucket`` is a gs:// URI or, locally, a directory path."""
    return LAYOUT.job_dir(bucket, queued_job_dir_name(job_id, name))


@dataclass(frozen=True)
class QueueEntry:
    """One submitted job. ``id``: 1, 2, ... in submit order (never reused)."""

    id: int
    name: str
    spec_sha256: str
    submitted: str
    cancelled: str | None = None
    # Runs on one node (the first to take it), not on all of them.
    one_node: bool = False

    @property
    def job_dir_name(self) -> str:
        return queued_job_dir_name(self.id, self.name)

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "spec_sha256": self.spec_sha256,
            "submitted": self.submitted,
        }
        if self.cancelled is not None:
            entry["cancelled"] = self.cancelled
        if self.one_node:
            entry["one_node"] = True
        return entry

    @classmethod
    def from_json(cls, value: object, where: str) -> QueueEntry:
        if not isinstance(value, dict):
            raise QueueFormatError(f"{where} is not an object")
        unknown = set(value) - {"id", "name", "spec_sha256", "submitted", "cancelled", "one_node"}
        if unknown:
            raise QueueFormatError(f"{where} has unknown keys {', '.join(sorted(map(str, unknown)))[:200]}")
        job_id = value.get("id")
        if not isinstance(job_id, int) or isinstance(job_id, bool) or not 1 <= job_id <= MAX_JOB_ID:
            raise QueueFormatError(f"{where}: id is not a whole number from 1 to {MAX_JOB_ID}")
        name = value.get("name")
        if not isinstance(name, str) or QUEUED_JOB_NAME.fullmatch(name) is None:
            raise QueueFormatError(f"{where}: name is not a job name (letters, digits, '_', at most 100)")
        sha = value.get("spec_sha256")
        if not isinstance(sha, str) or SHA256.fullmatch(sha) is None:
            raise QueueFormatError(f"{where}: spec_sha256 is not a sha256 in hex")
        submitted = value.get("submitted")
        if not isinstance(submitted, str) or _TIME.fullmatch(submitted) is None:
            raise QueueFormatError(f"{where}: submitted is not a UTC time")
        cancelled = value.get("cancelled")
        if cancelled is not None and (not isinstance(cancelled, str) or _TIME.fullmatch(cancelled) is None):
            raise QueueFormatError(f"{where}: cancelled is not a UTC time")
        one_node = value.get("one_node", False)
        if not isinstance(one_node, bool):
            raise QueueFormatError(f"{where}: one_node is not true or false")
        return cls(job_id, name, sha, submitted, cancelled, one_node)


@dataclass(frozen=True)
class QueueIndex:
    """The queue: ``entries`` in submit order; ``next_id`` the id the next submit takes."""

    next_id: int = 1
    entries: tuple[QueueEntry, ...] = ()

    def to_json(self) -> bytes:
        document = {
            "version": INDEX_VERSION,
            "next_id": self.next_id,
            "jobs": [entry.to_json() for entry in self.entries],
        }
        return (json.dumps(document, separators=(",", ":")) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes) -> QueueIndex:
        """The index read back; :class:`QueueFormatError` for anything `submit` does not write."""
        if len(data) > MAX_INDEX_BYTES:
            raise QueueFormatError(f"the queue index is larger than {MAX_INDEX_BYTES} bytes")
        document = _versioned(data, "the queue index", INDEX_VERSION, "queue")
        next_id, jobs = document.get("next_id"), document.get("jobs")
        if not isinstance(next_id, int) or isinstance(next_id, bool) or not 1 <= next_id <= MAX_JOB_ID + 1:
            raise QueueFormatError("the queue index's next_id is not a whole number")
        if not isinstance(jobs, list) or len(jobs) > MAX_ENTRIES:
            raise QueueFormatError(f"the queue index's jobs is not a list of at most {MAX_ENTRIES}")
        entries = tuple(QueueEntry.from_json(job, f"queue entry {number}") for number, job in enumerate(jobs))
        ids = [entry.id for entry in entries]
        if ids != sorted(set(ids)) or (ids and ids[-1] >= next_id):
            raise QueueFormatError("the queue index's ids are not increasing and below next_id")
        return cls(next_id, entries)

    def entry(self, job_id: int) -> QueueEntry | None:
        return next((entry for entry in self.entries if entry.id == job_id), None)

    def appended(
        self, name: str, spec_sha256: str, submitted: str, one_node: bool = False
    ) -> tuple[QueueIndex, QueueEntry]:
        """This index with one more job at its end."""
        if QUEUED_JOB_NAME.fullmatch(name) is None:
            raise QueueFormatError(f"{name[:40]!r} is not a job name (letters, digits, '_', at most 100)")
        if self.next_id > MAX_JOB_ID:
            raise QueueFormatError(f"the queue has given out its {MAX_JOB_ID} ids")
        entry = QueueEntry(self.next_id, name, spec_sha256, submitted, one_node=one_node)
        return QueueIndex(self.next_id + 1, (*self.entries, entry)), entry

    def with_cancelled(self, job_id: int, when: str) -> QueueIndex:
        """This index with job ``job_id`` marked cancelled (already cancelled: unchanged)."""
        entries = tuple(
            replace(entry, cancelled=when) if entry.id == job_id and entry.cancelled is None else entry
            for entry in self.entries
        )
        return replace(self, entries=entries)

    def without(self, job_ids: frozenset[int]) -> QueueIndex:
        """This index without the given (finished) jobs: room for new ones."""
        return replace(self, entries=tuple(entry for entry in self.entries if entry.id not in job_ids))


# In a one-node job's directory: which node took it (created once, never replaced).
TAKEN_BY: Final = f"{LAYOUT.status_dir}/taken_by.json"
MAX_TAKEN_BY_BYTES: Final = 1024


def taken_by_bytes(node: str, when: str) -> bytes:
    """What a node writes to take a one-node job."""
    return (json.dumps({"version": 1, "node": node, "time": when}, separators=(",", ":")) + "\n").encode()


def taken_by(data: bytes) -> str:
    """The node that took a one-node job, from its TAKEN_BY object; QueueFormatError otherwise."""
    if len(data) > MAX_TAKEN_BY_BYTES:
        raise QueueFormatError(f"{TAKEN_BY} is larger than {MAX_TAKEN_BY_BYTES} bytes")
    document = _versioned(data, TAKEN_BY, 1, "record of the node that took the job")
    node = document.get("node")
    if not isinstance(node, str) or NODE_NAME.fullmatch(node) is None:
        raise QueueFormatError(f"{TAKEN_BY} names no node")
    return node


def spec_bytes(values: Mapping[str, str]) -> bytes:
    """A job's spec as `submit` writes it: its metadata values, keys sorted."""
    problem = spec_problem(values)
    if problem is not None:
        raise QueueFormatError(problem)
    document = {"version": SPEC_VERSION, "metadata": dict(sorted(values.items()))}
    return (json.dumps(document, separators=(",", ":")) + "\n").encode()


def spec_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def spec_problem(values: Mapping[str, object]) -> str | None:
    """Why ``values`` cannot be a spec's metadata, or None (each value is checked again, whole,
    by the agent as it checks instance metadata)."""
    unknown = set(values) - SPEC_KEYS
    if unknown:
        return f"a spec sets {', '.join(sorted(map(str, unknown)))[:300]}, which are not a job's metadata keys"
    for key, value in values.items():
        if not isinstance(value, str) or len(value) > MAX_SPEC_VALUE_CHARS:
            return f"spec value {key} is not text of at most {MAX_SPEC_VALUE_CHARS} characters"
    if METADATA_KEYS.job_mode not in values:
        return f"a spec without {METADATA_KEYS.job_mode}"
    return None


def read_spec(data: bytes, expected_sha256: str) -> dict[str, str]:
    """A spec's metadata values, once its bytes match the sha256 its queue entry names."""
    if len(data) > MAX_SPEC_BYTES:
        raise QueueFormatError(f"the job's spec is larger than {MAX_SPEC_BYTES} bytes")
    if spec_sha256(data) != expected_sha256:
        raise QueueFormatError("the job's spec does not match the sha256 its queue entry names")
    document = _versioned(data, "the job's spec", SPEC_VERSION, "spec")
    values = document.get("metadata")
    if not isinstance(values, dict):
        raise QueueFormatError("the job's spec has no metadata object")
    problem = spec_problem(values)
    if problem is not None:
        raise QueueFormatError(problem)
    return {str(key): str(value) for key, value in values.items()}


def _versioned(data: bytes, what: str, version: int, kind: str) -> dict[str, Any]:
    """The JSON object ``data`` holds, once it says it is of this ``version``; QueueFormatError
    names ``what`` was read otherwise."""
    try:
        document = json.loads(data)
    except ValueError:
        raise QueueFormatError(f"{what} is not JSON") from None
    if not isinstance(document, dict) or document.get("version") != version:
        raise QueueFormatError(f"{what} is not a version {version} {kind}")
    return document
