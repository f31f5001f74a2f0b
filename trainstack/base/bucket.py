"""A bucket of objects by name: the stack's Cloud Storage bucket, or the directory that stands in
for it in ``trainstack local``. One interface, :class:`Bucket`, for every layer that reads or
writes one (the job's status, the queue, a study, a local run's stand-in):

- a bounded read (:meth:`Bucket.read_upto`; :meth:`Bucket.read` at :data:`MAX_OBJECT_BYTES`),
  and a bounded listing (:meth:`Bucket.names`);
- a read with the object's generation (:meth:`Bucket.read_versioned`) and a write under a
  precondition on it (:meth:`Bucket.write_if_generation`), as Cloud Storage's
  ``ifGenerationMatch`` does: a write names the generation it read (0: the object must not exist
  yet) and fails, changing nothing, when the object has changed since;
- an object put from a file (:meth:`Bucket.put`: what `trainstack local` uploads for its nodes).

Two implementations: :class:`GcsBucket`, through ``google.cloud.storage`` (credentials:
Application Default Credentials; endpoint: ``STORAGE_EMULATOR_HOST`` when set, as the library
reads it, which is how the tests point it at an emulator), and :class:`DirectoryBucket`, a
directory whose layout is the bucket's, with the same semantics: one lock file serializes its
writers, and each object's generation is kept beside it. Every failure is a
:class:`BucketError` whose message is one line for the user.
"""

from __future__ import annotations

import fcntl
import json
import os
import posixpath
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from trainstack.base.googleapis import api_reasons, perimeter_refusal

# A status object is a few hundred bytes and metrics.json a few kilobytes: anything larger
# is not what the nodes or the trainer wrote.
MAX_OBJECT_BYTES = 1 << 20
# One Cloud Storage request, and all its retries together, in seconds.
READ_TIMEOUT_SECONDS = 20.0
RETRY_SECONDS = 30.0
CREDENTIALS_HINT = "run `gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS)"
# How many times a versioned read starts again when the object changed while it was read.
VERSIONED_READ_ATTEMPTS = 12
# Kept in the stand-in bucket's directory beside its objects: the writers' lock and each
# object's generation (an object with none, written by `trainstack local` itself, is generation 1).
STORE_DIR = ".trainstack-store"


class BucketError(Exception):
    """An object cannot be read or written, or a listing cannot be had; the message is one line
    for the user."""


class ObjectContentError(BucketError):
    """What a bucket holds is not what trainstack wrote (too large, too many, not JSON): a
    later look will not read it either."""


class PreconditionFailed(Exception):
    """The object's generation is not the one the write named: another writer came first."""


@dataclass(frozen=True)
class Versioned:
    """An object's bytes and the generation they are."""

    data: bytes
    generation: int


class Bucket(Protocol):
    @property
    def uri(self) -> str:
        """The bucket as a node's metadata names it: ``gs://NAME``, or the stand-in's directory."""
        ...

    def location(self, name: str) -> str:
        """Where the object is, for messages: ``gs://bucket/name`` or a local path."""
        ...

    def read(self, name: str) -> bytes | None:
        """The object's bytes (at most :data:`MAX_OBJECT_BYTES`), None when there is no such
        object; :class:`BucketError` when it cannot be read, ObjectContentError when larger."""
        ...

    def read_upto(self, name: str, limit: int) -> bytes | None:
        """As :meth:`read`, with ``limit`` for the bound."""
        ...

    def names(self, prefix: str, limit: int) -> list[str]:
        """The names under ``prefix`` (at most ``limit``; ObjectContentError beyond it)."""
        ...

    def read_versioned(self, name: str, limit: int) -> Versioned | None:
        """The object and its generation, None when there is none; :class:`BucketError` when it
        cannot be read or is larger than ``limit`` bytes."""
        ...

    def write_if_generation(self, name: str, data: bytes, generation: int) -> None:
        """Writes the object when its generation is ``generation`` (0: absent);
        :class:`PreconditionFailed` otherwise, with nothing written."""
        ...

    def put(self, name: str, write: Callable[[Path], object]) -> None:
        """Object ``name``, which ``write`` writes as a file at the path it is given (what
        `trainstack local` puts in its stand-in for its nodes)."""
        ...


def too_many(where: str, limit: int) -> ObjectContentError:
    return ObjectContentError(f"{where} holds more than {limit} objects; not a job directory trainstack reads whole")


def too_large(where: str, limit: int = MAX_OBJECT_BYTES) -> ObjectContentError:
    return ObjectContentError(f"{where} is larger than {limit} bytes; not an object trainstack wrote")


def _one_line(value: object) -> str:
    return " ".join(str(value).split())


def read_json(objects: Bucket, name: str) -> dict[str, Any] | None:
    """A JSON object from the bucket, None when absent; :class:`BucketError` when it is
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


# --- Cloud Storage ---------------------------------------------------------------------------------
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


class GcsBucket:
    """The stack's bucket (or a team's) through ``google.cloud.storage``."""

    def __init__(self, project: str, bucket: str, client: Any = None) -> None:
        """``client``: a ``google.cloud.storage.Client``; by default one made on first use."""
        self.project = project
        self.bucket_name = bucket
        self._client = client

    @property
    def uri(self) -> str:
        return f"gs://{self.bucket_name}"

    def location(self, name: str) -> str:
        return f"gs://{self.bucket_name}/{name}"

    def client(self) -> Any:
        if self._client is None:
            from google.cloud.storage import Client  # type: ignore[import-untyped]

            self._client = Client(project=self.project)
        return self._client

    def bucket(self) -> Any:
        return self.client().bucket(self.bucket_name)

    def read(self, name: str) -> bytes | None:
        return self.read_upto(name, MAX_OBJECT_BYTES)

    def read_upto(self, name: str, limit: int) -> bytes | None:
        from google.api_core import exceptions
        from google.cloud.storage.retry import DEFAULT_RETRY  # type: ignore[import-untyped]

        where = self.location(name)
        try:
            # end is inclusive: one byte more than the bound tells a too-large object apart.
            data: bytes = (
                self.bucket()
                .blob(name)
                .download_as_bytes(
                    start=0, end=limit, timeout=READ_TIMEOUT_SECONDS, retry=DEFAULT_RETRY.with_timeout(RETRY_SECONDS)
                )
            )
        except exceptions.NotFound:
            return None
        except exceptions.RequestRangeNotSatisfiable:
            # A range request for an empty object.
            return b""
        except gcs_errors() as error:
            raise BucketError(gcs_failure(error, f"cannot read {where}", "storage.objects.get")) from None
        if len(data) > limit:
            raise too_large(where, limit)
        return data

    def names(self, prefix: str, limit: int) -> list[str]:
        from google.cloud.storage.retry import DEFAULT_RETRY

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
            raise BucketError(gcs_failure(error, f"cannot list {where}", "storage.objects.list")) from None
        if len(found) > limit:
            raise too_many(where, limit)
        return found

    def read_versioned(self, name: str, limit: int) -> Versioned | None:
        return _read_generation(self.bucket(), self.location(name), name, limit)

    def write_if_generation(self, name: str, data: bytes, generation: int) -> None:
        from google.api_core import exceptions
        from google.cloud.storage.retry import DEFAULT_RETRY

        where = self.location(name)
        try:
            self.bucket().blob(name).upload_from_string(
                data,
                content_type="application/json" if name.endswith(".json") else "application/octet-stream",
                if_generation_match=generation,
                timeout=READ_TIMEOUT_SECONDS,
                # Safe to retry: a precondition always applies (a retried write that had landed
                # fails it, and the caller reads again: `submit` finds its entry there).
                retry=DEFAULT_RETRY.with_timeout(RETRY_SECONDS),
            )
        except exceptions.PreconditionFailed:
            raise PreconditionFailed(where) from None
        except gcs_errors() as error:
            raise BucketError(gcs_failure(error, f"cannot write {where}", "storage.objects.create")) from None

    def put(self, name: str, write: Callable[[Path], object]) -> None:
        """Object ``name``, which ``write`` writes as a file at the path it is given, uploaded."""
        with tempfile.TemporaryDirectory(prefix="trainstack-upload-") as staging:
            path = Path(staging) / posixpath.basename(name)
            write(path)
            self.bucket().blob(name).upload_from_filename(str(path))


def _read_generation(bucket: Any, where: str, name: str, limit: int) -> Versioned | None:
    """The object's bytes of one generation: read again when it changes between the look at
    its generation and the read of its bytes (the read's precondition fails)."""
    from google.api_core import exceptions
    from google.cloud.storage.retry import DEFAULT_RETRY

    retry = DEFAULT_RETRY.with_timeout(RETRY_SECONDS)
    for _ in range(VERSIONED_READ_ATTEMPTS):
        try:
            blob = bucket.get_blob(name, timeout=READ_TIMEOUT_SECONDS, retry=retry)
            if blob is None:
                return None
            if blob.size is not None and int(blob.size) > limit:
                raise too_large(where, limit)
            generation = int(blob.generation)
            if not blob.size:
                return Versioned(b"", generation)
            # These bytes are that generation's, or the read fails (412) and starts again.
            data: bytes = blob.download_as_bytes(
                start=0, end=limit, if_generation_match=generation, timeout=READ_TIMEOUT_SECONDS, retry=retry
            )
        except exceptions.NotFound:
            return None
        except exceptions.PreconditionFailed:
            continue
        except gcs_errors() as error:
            raise BucketError(gcs_failure(error, f"cannot read {where}", "storage.objects.get")) from None
        if len(data) > limit:
            raise too_large(where, limit)
        return Versioned(data, generation)
    raise BucketError(f"cannot read {where}: it changed {VERSIONED_READ_ATTEMPTS} times while being read; try again")


# --- The local stand-in ----------------------------------------------------------------------------
def read_local(path: Path, limit: int) -> bytes | None:
    """A stand-in bucket's object (a file) of at most ``limit`` bytes; None when there is none."""
    from trainstack.base.files import FileProblem, read_bounded

    try:
        return read_bounded(path, limit)
    except FileNotFoundError:
        return None
    except FileProblem as problem:
        if path.is_file() and path.stat().st_size > limit:
            raise too_large(str(path), limit) from None
        raise BucketError(f"cannot read {path}: {problem}") from None


@dataclass(frozen=True)
class DirectoryBucket:
    """A directory whose layout is the bucket's: ``<workdir>/bucket/<bucket name>`` of
    `trainstack local` (its nodes use the plain paths as they are)."""

    root: Path

    @property
    def uri(self) -> str:
        return str(self.root)

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
                        raise too_many(str(base), limit)
            folders.sort()
        return sorted(found)

    def _generation_file(self, name: str) -> Path:
        return self.root / STORE_DIR / "generations" / name

    @contextmanager
    def _locked(self) -> Iterator[None]:
        lock = self.root / STORE_DIR / "lock"
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            handle = lock.open("a")
        except OSError as error:
            raise BucketError(f"cannot lock {lock}: {error.strerror or error}") from None
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def _generation(self, name: str) -> int:
        if not (self.root / name).is_file():
            return 0
        try:
            return int(self._generation_file(name).read_text())
        except (OSError, ValueError):
            return 1

    def read_versioned(self, name: str, limit: int) -> Versioned | None:
        """Without the lock (a read writes nothing): the generation is read before and after
        the bytes, and a writer replaces the bytes before the generation, so equal
        generations are those bytes' (bytes newer than their generation only make the next
        write fail its precondition and read again)."""
        path = self.root / name
        for _ in range(VERSIONED_READ_ATTEMPTS):
            before = self._generation(name)
            data = read_local(path, limit)
            if data is None:
                return None
            if self._generation(name) == before:
                return Versioned(data, before)
        raise BucketError(f"cannot read {path}: it changed {VERSIONED_READ_ATTEMPTS} times while being read; try again")

    def write_if_generation(self, name: str, data: bytes, generation: int) -> None:
        path = self.root / name
        with self._locked():
            current = self._generation(name)
            if current != generation:
                raise PreconditionFailed(str(path))
            try:
                _replace(path, data)
                _replace(self._generation_file(name), str(max(current + 1, time.time_ns())).encode())
            except OSError as error:
                raise BucketError(f"cannot write {path}: {error.strerror or error}") from None

    def put(self, name: str, write: Callable[[Path], object]) -> None:
        """Object ``name``, which ``write`` writes as a file at the path it is given."""
        destination = self.root / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        write(destination)


def _replace(path: Path, data: bytes) -> None:
    """``path`` holds ``data``, whole, at once (a reader sees the old bytes or the new)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
