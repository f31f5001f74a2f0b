"""The job's state after ``pulumi up``, read from its status objects (``trainstack status`` prints it).

The boot scripts write the job's state into the job directory (``trainstack_contract``,
:class:`~trainstack_contract.BucketLayout`): ``status/job.json`` (the chief's, whose ``time`` it
rewrites as a heartbeat while the job runs), ``status/<node>.json`` for every node, and
``metrics.json`` when the job has finished. This module reads them through one small
interface, :class:`Objects` (``read(name) -> bytes | None``), with two implementations:

- :class:`GcsObjects`: the stack's bucket, through the Cloud Storage client library.
  ``google.cloud.storage.Client`` honours ``STORAGE_EMULATOR_HOST`` itself (the endpoint,
  scheme included, with anonymous credentials), which is how the tests point it at an emulator;
- :class:`LocalObjects`: the directory that stands in for the bucket in ``trainstack local``
  (``<workdir>/bucket/<bucket name>``).

Every read is bounded (:data:`MAX_OBJECT_BYTES`); an object that is too large, not UTF-8 or
not a JSON object ends the command with one line saying which object and why.
"""

from __future__ import annotations

import json
import os
import posixpath
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from trainstack.base.googleapis import api_reasons, perimeter_refusal
from trainstack.base.records import record_json
from trainstack_contract import LAYOUT
from trainstack_contract.lifecycle import JobState
from trainstack_contract.status import CLUSTER_PORT_WARNING, MAX_REASON_CHARS, MAX_WARNINGS, TF_CONFIG_DOCS

if TYPE_CHECKING:
    from trainstack.stackmodel.resolved import ResolvedStack

# A status object is a few hundred bytes and metrics.json a few kilobytes: anything larger
# is not what the boot scripts or the trainer wrote.
MAX_OBJECT_BYTES = 1 << 20
# One Cloud Storage request, and all its retries together, in seconds.
READ_TIMEOUT_SECONDS = 20.0
RETRY_SECONDS = 30.0
CREDENTIALS_HINT = "run `gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS)"
# How much of metrics.json the text report shows on its line.
METRICS_CHARACTERS = 2000


class StatusReadError(Exception):
    """The bucket or one of its objects cannot be read; the message is one line for the user."""


class ObjectContentError(StatusReadError):
    """What is in the bucket cannot be taken: an object that is not the JSON object expected, is
    larger than its bound, or a directory of more objects than read whole. Reading again gives
    the same answer, unlike a failed call."""


class Objects(Protocol):
    """Objects of one bucket by name (``jobs/<job>/status/job.json``)."""

    def read(self, name: str) -> bytes | None:
        """The object's bytes (at most :data:`MAX_OBJECT_BYTES`), or None when there is no
        such object; :class:`StatusReadError` when it cannot be read."""
        ...

    def location(self, name: str) -> str:
        """Where the object is, for messages: ``gs://bucket/name`` or a local path."""
        ...


class ListedObjects(Objects, Protocol):
    """Objects that can also be listed and read with a bound of the caller's (a trial's summaries)."""

    def names(self, prefix: str, limit: int) -> list[str]:
        """The names under ``prefix`` (at most ``limit``; :class:`StatusReadError` beyond it)."""
        ...

    def read_upto(self, name: str, limit: int) -> bytes | None:
        """As :meth:`Objects.read`, with ``limit`` for the bound."""
        ...


def _too_many(where: str, limit: int) -> StatusReadError:
    return ObjectContentError(f"{where} holds more than {limit} objects; not a job directory trainstack reads whole")


def _too_large(where: str, limit: int = MAX_OBJECT_BYTES) -> StatusReadError:
    return ObjectContentError(f"{where} is larger than {limit} bytes; not an object trainstack wrote")


def read_local(path: Path, limit: int) -> bytes | None:
    """A stand-in bucket's object (a file) of at most ``limit`` bytes; None when there is none."""
    from trainstack.base.files import FileProblem, read_bounded

    try:
        return read_bounded(path, limit)
    except FileNotFoundError:
        return None
    except FileProblem as problem:
        if path.is_file() and path.stat().st_size > limit:
            raise _too_large(str(path), limit) from None
        raise StatusReadError(f"cannot read {path}: {problem}") from None


class GcsBucketAccess:
    """The stack's bucket through ``google.cloud.storage`` (credentials: Application Default
    Credentials; endpoint: ``STORAGE_EMULATOR_HOST`` when set, as the library reads it): what
    the status reader and the job queue's store share."""

    def __init__(self, project: str, bucket: str, client: Any = None) -> None:
        """``client``: a ``google.cloud.storage.Client``; by default one made on first use."""
        self.project = project
        self.bucket_name = bucket
        self._client = client

    def location(self, name: str) -> str:
        return f"gs://{self.bucket_name}/{name}"

    def bucket(self) -> Any:
        if self._client is None:
            from google.cloud.storage import Client  # type: ignore[import-untyped]

            self._client = Client(project=self.project)
        return self._client.bucket(self.bucket_name)


class GcsObjects(GcsBucketAccess):
    """Status objects read from the stack's bucket, bounded."""

    def _blob(self, name: str) -> Any:
        return self.bucket().blob(name)

    def read(self, name: str) -> bytes | None:
        return self.read_upto(name, MAX_OBJECT_BYTES)

    def names(self, prefix: str, limit: int) -> list[str]:
        from google.cloud.storage.retry import DEFAULT_RETRY  # type: ignore[import-untyped]

        where = self.location(prefix)
        try:
            blobs = self.bucket().list_blobs(
                prefix=prefix,
                max_results=limit + 1,
                timeout=READ_TIMEOUT_SECONDS,
                retry=DEFAULT_RETRY.with_timeout(RETRY_SECONDS),
            )
            found = [str(blob.name) for blob in blobs]
        except gcs_errors() as error:
            raise StatusReadError(gcs_failure(error, f"cannot list {where}", "storage.objects.list")) from None
        if len(found) > limit:
            raise _too_many(where, limit)
        return found

    def read_upto(self, name: str, limit: int) -> bytes | None:
        from google.api_core import exceptions
        from google.cloud.storage.retry import DEFAULT_RETRY

        where = self.location(name)
        try:
            # end is inclusive: one byte more than the bound tells a too-large object apart.
            data: bytes = self._blob(name).download_as_bytes(
                start=0,
                end=limit,
                timeout=READ_TIMEOUT_SECONDS,
                retry=DEFAULT_RETRY.with_timeout(RETRY_SECONDS),
            )
        except exceptions.NotFound:
            return None
        except exceptions.RequestRangeNotSatisfiable:
            # A range request for an empty object.
            return b""
        except gcs_errors() as error:
            raise StatusReadError(gcs_failure(error, f"cannot read {where}", "storage.objects.get")) from None
        if len(data) > limit:
            raise _too_large(where, limit)
        return data


def gcs_errors() -> tuple[type[BaseException], ...]:
    """What a Cloud Storage request raises for a reason outside this program: API errors,
    credentials, and the network (the requests library's errors are OSErrors)."""
    from google.api_core import exceptions
    from google.auth import exceptions as auth_exceptions

    return (exceptions.GoogleAPICallError, exceptions.RetryError, auth_exceptions.GoogleAuthError, OSError)


def gcs_failure(error: BaseException, what: str, permission: str) -> str:
    """One line for a failed Cloud Storage request: ``what`` ("cannot read gs://b/o"), why, and
    what to do; ``permission``: the one the request needs."""
    from google.api_core import exceptions
    from google.auth import exceptions as auth_exceptions

    if isinstance(error, (auth_exceptions.DefaultCredentialsError, auth_exceptions.RefreshError)):
        return f"{what}: no usable Google Cloud credentials ({_one_line(error)}); {CREDENTIALS_HINT}"
    refusal = (
        perimeter_refusal(str(error.message), api_reasons(error)) if isinstance(error, exceptions.Forbidden) else None
    )
    if refusal is not None:
        return f"{what}: {refusal}"
    if isinstance(error, exceptions.Forbidden):
        return f"{what}: permission denied ({_one_line(error.message)}); it needs {permission} on the bucket"
    if isinstance(error, exceptions.RetryError):
        return f"{what}: no answer within {RETRY_SECONDS:g} s ({_one_line(error.cause or error)})"
    if isinstance(error, exceptions.GoogleAPICallError):
        return f"{what}: {_one_line(error.message or error)}"
    # OSError includes the requests library's connection errors and timeouts.
    return f"{what}: {_one_line(error)}"


class LocalObjects:
    """The directory that stands in for the bucket in ``trainstack local``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def location(self, name: str) -> str:
        return str(self.root / name)

    def read(self, name: str) -> bytes | None:
        return read_local(self.root / name, MAX_OBJECT_BYTES)

    def read_upto(self, name: str, limit: int) -> bytes | None:
        return read_local(self.root / name, limit)

    def names(self, prefix: str, limit: int) -> list[str]:
        """Files under ``prefix`` as object names (a directory's files, recursively, as a
        bucket lists the objects under a prefix); links are not followed."""
        base = self.root / prefix
        if not base.is_dir():
            return []
        found = []
        for directory, folders, files in os.walk(base):
            for file_name in files:
                path = Path(directory) / file_name
                if path.is_file() and not path.is_symlink():
                    found.append(path.relative_to(self.root).as_posix())
                    if len(found) > limit:
                        raise _too_many(str(base), limit)
            folders.sort()
        return sorted(found)


def _one_line(value: object) -> str:
    return " ".join(str(value).split())


def printable(value: object) -> str:
    """``value`` as text safe to print: the objects come from a bucket, not from us."""
    return "".join(ch if ch.isprintable() else "?" for ch in str(value))


def read_json(objects: Objects, name: str) -> dict[str, Any] | None:
    """A JSON object from the bucket, None when absent; :class:`StatusReadError` when it is
    not UTF-8, not JSON or not an object."""
    data = objects.read(name)
    if data is None:
        return None
    where = objects.location(name)
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ObjectContentError(f"{where} is not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise ObjectContentError(
            f"{where} is not valid JSON ({error.msg} at line {error.lineno} column {error.colno})"
        ) from None
    if not isinstance(value, dict):
        raise ObjectContentError(f"{where} holds JSON, but not an object")
    return value


# --- The report ----------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeStatus:
    name: str
    status: dict[str, Any] | None


@dataclass(frozen=True)
class StatusReport:
    stack: str
    job: str | None
    # gs://BUCKET/jobs/JOB on the cloud, the local directory with --local; None without a job.
    job_dir: str | None
    source: str  # "gcs" or "local"
    job_status: dict[str, Any] | None
    nodes: tuple[NodeStatus, ...]
    # Seconds since the chief last rewrote its RUNNING job status; None unless RUNNING.
    heartbeat_age_seconds: float | None
    heartbeat_timeout_seconds: int | None
    metrics: dict[str, Any] | None

    @property
    def state(self) -> str | None:
        state = (self.job_status or {}).get("state")
        return state if isinstance(state, str) else None

    def to_json(self) -> dict[str, Any]:
        return record_json(
            self,
            heartbeat_age_seconds=None if self.heartbeat_age_seconds is None else round(self.heartbeat_age_seconds, 3),
            nodes=[{"name": node.name, "status": node.status} for node in self.nodes],
            state=self.state,
        )


def node_names(stack: ResolvedStack) -> list[str]:
    """The nodes that write status objects: the cluster's, then the TPU VM."""
    names = [node.name for node in stack.cluster.nodes] if stack.cluster else []
    return names + ([stack.tpu.name] if stack.tpu else [])


def parse_time(value: object) -> datetime | None:
    """A status object's ``time`` (``date -u +%Y-%m-%dT%H:%M:%S.%NZ``), or None."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def heartbeat_age(job_status: dict[str, Any] | None, now: float) -> float | None:
    """Seconds since the chief's heartbeat: ``now`` minus the ``time`` of a RUNNING job status."""
    if job_status is None or job_status.get("state") != JobState.RUNNING:
        return None
    written = parse_time(job_status.get("time"))
    return None if written is None else now - written.timestamp()


def build_report(
    stack: ResolvedStack, objects: Objects, source: str, job_dir: str | None, now: float | None = None
) -> StatusReport:
    job = stack.job
    timeout = stack.cluster.heartbeat_timeout_seconds if stack.cluster else None
    if job is None:
        return StatusReport(stack.stack, None, None, source, None, (), None, timeout, None)
    # jobs/<name> of the stack's bucket, or job.job_dir's folder in the team's own bucket.
    prefix = job.job_dir_prefix or posixpath.join(LAYOUT.jobs, job.name)
    job_status = read_json(objects, posixpath.join(prefix, LAYOUT.job_status))
    nodes = tuple(
        NodeStatus(name, read_json(objects, posixpath.join(prefix, LAYOUT.node_status(name))))
        for name in node_names(stack)
    )
    metrics = read_json(objects, posixpath.join(prefix, LAYOUT.metrics))
    age = heartbeat_age(job_status, time.time() if now is None else now)
    return StatusReport(stack.stack, job.name, job_dir, source, job_status, nodes, age, timeout, metrics)


def _duration(seconds: float) -> str:
    whole = round(seconds)
    if whole < 0:
        return f"{-whole} s in the future (clock skew?)"
    if whole < 120:
        return f"{whole} s ago"
    if whole < 7200:
        return f"{whole // 60} min {whole % 60} s ago"
    return f"{whole // 3600} h {whole % 3600 // 60} min ago"


def _status_line(status: dict[str, Any]) -> str:
    state = printable(status.get("state", "?"))
    exit_code = status.get("exit_code")
    line = f"{state:<11} exit {'-' if exit_code is None else printable(exit_code):<4} at {printable(status.get('time', '?'))}"
    reason = status.get("reason")
    return line + (f"  ({printable(reason)})" if reason else "")


# A node's history as shown: its last few states (the object keeps up to 50).
HISTORY_SHOWN = 10


def history_text(status: dict[str, Any]) -> str | None:
    """A node's way to its state, oldest first ("RUNNING -> PREEMPTED (SIGTERM) -> RUNNING"),
    or None when it has not changed state."""
    entries = [entry for entry in status.get("history") or [] if isinstance(entry, dict)]
    if len(entries) < 2:
        return None
    shown = [
        printable(entry.get("state", "?")) + (f" ({printable(entry['reason'])})" if entry.get("reason") else "")
        for entry in entries[-HISTORY_SHOWN:]
    ]
    return ("... -> " if len(entries) > HISTORY_SHOWN else "") + " -> ".join(shown)


def _warnings(status: dict[str, Any] | None) -> list[tuple[str, str]]:
    """A node's warnings, by name, as far as they are what a node writes (bounded, text)."""
    value = (status or {}).get("warnings")
    if not isinstance(value, dict):
        return []
    return [
        (name, text[:MAX_REASON_CHARS])
        for name, text in list(value.items())[:MAX_WARNINGS]
        if isinstance(name, str) and isinstance(text, str)
    ]


def warning_lines(nodes: Iterable[tuple[str, dict[str, Any] | None]]) -> list[str]:
    """What the nodes' status objects warn of, one line each: code that ignored TF_CONFIG once
    for every node it ran on, with what it means and where the docs say what to do; any other
    warning as its node wrote it."""
    ignored: list[str] = []
    lines: list[str] = []
    for node, status in nodes:
        for name, text in _warnings(status):
            if name == CLUSTER_PORT_WARNING:
                ignored.append(printable(node))
            else:
                lines.append(f"warning ({printable(node)}): {printable(text)}")
    if ignored:
        lines.insert(
            0,
            f"warning: the job's code ignored TF_CONFIG on {', '.join(ignored)} (it never listened on the "
            "node's TF_CONFIG port): each of these nodes trained a model of its own instead of one model with "
            "the others, all writing this job directory, all billed; the code must build its strategy from "
            f"TF_CONFIG (see {TF_CONFIG_DOCS})",
        )
    return lines


def print_report(report: StatusReport, out: IO[str] | None = None) -> None:
    out = out or sys.stdout
    if report.job is None:
        print(f"stack {report.stack} has no job (trainstack:job is absent or none): nothing writes status", file=out)
        return
    if report.job_status is None:
        print(f"job {report.job}: no status yet", file=out)
    else:
        print(f"job {report.job}: {_status_line(report.job_status)}", file=out)
    if report.heartbeat_age_seconds is not None:
        line = f"chief heartbeat: {_duration(report.heartbeat_age_seconds)}"
        if (
            report.heartbeat_timeout_seconds is not None
            and report.heartbeat_age_seconds > report.heartbeat_timeout_seconds
        ):
            line += (
                f"; older than the {report.heartbeat_timeout_seconds} s heartbeat timeout: "
                "the chief may be gone (`trainstack logs --node chief`)"
            )
        print(line, file=out)
    for warning in warning_lines((node.name, node.status) for node in report.nodes):
        print(warning, file=out)
    for node in report.nodes:
        text = "no status yet" if node.status is None else _status_line(node.status)
        print(f"  {node.name:<10} {text}", file=out)
        history = None if node.status is None else history_text(node.status)
        if history:
            print(f"  {'':<10} history: {history}", file=out)
    print(f"job directory: {report.job_dir}", file=out)
    if report.metrics is not None:
        shown = json.dumps(report.metrics, sort_keys=True)
        if len(shown) > METRICS_CHARACTERS:
            shown = shown[:METRICS_CHARACTERS] + " ..."
        print(f"{LAYOUT.metrics}: {printable(shown)}", file=out)


def default_workdir(stack: str) -> Path:
    """Where `trainstack local` keeps a stack's run (its --workdir default)."""
    return Path(".trainstack-local") / stack


def local_bucket(workdir: Path, stack: ResolvedStack) -> Path:
    """The stand-in bucket of a `trainstack local` run (``LocalStackRun.bucket``)."""
    return workdir / "bucket" / stack.bucket_name
