"""Objects of the stack's bucket, each read with its generation and written under a
precondition on it, as Cloud Storage's ``ifGenerationMatch`` does: a write names the generation
it read (0: the object must not exist yet) and fails, changing nothing, when the object has
changed since. Every read-modify-write of the queue goes through :func:`update`.

Two stores: :class:`GcsStore`, the bucket through ``google.cloud.storage`` (the endpoint is
``STORAGE_EMULATOR_HOST`` when set, as the library reads it), and :class:`DirectoryStore`, the
directory that stands in for the bucket in ``trainstack local``, with the same semantics: one
lock file serializes its writers, and each object's generation is kept beside it.
"""

from __future__ import annotations

import fcntl
import os
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from trainstack.jobstate.report import (
    READ_TIMEOUT_SECONDS,
    RETRY_SECONDS,
    GcsBucketAccess,
    StatusReadError,
    gcs_errors,
    gcs_failure,
    read_local,
)

# How many times a read-modify-write reads again after another writer changed the object first.
UPDATE_ATTEMPTS = 12
# Between two attempts: a random wait up to this many seconds, doubled each time, at most a second.
UPDATE_BACKOFF_SECONDS = 0.05
MAX_BACKOFF_SECONDS = 1.0


class StoreError(Exception):
    """An object cannot be read or written; the message is one line for the user."""


class PreconditionFailed(Exception):
    """The object's generation is not the one the write named: another writer came first."""


@dataclass(frozen=True)
class Versioned:
    """An object's bytes and the generation they are."""

    data: bytes
    generation: int


class ObjectStore(Protocol):
    def location(self, name: str) -> str:
        """Where the object is, for messages: ``gs://bucket/name`` or a local path."""
        ...

    def read(self, name: str, limit: int) -> Versioned | None:
        """The object and its generation, None when there is none; :class:`StoreError` when it
        cannot be read or is larger than ``limit`` bytes."""
        ...

    def write(self, name: str, data: bytes, if_generation_match: int) -> None:
        """Writes the object when its generation is ``if_generation_match`` (0: absent);
        :class:`PreconditionFailed` otherwise, with nothing written."""
        ...


def too_large(where: str, limit: int) -> StoreError:
    return StoreError(f"{where} is larger than {limit} bytes; not an object trainstack wrote")


# --- Cloud Storage ---------------------------------------------------------------------------------
class GcsStore(GcsBucketAccess):
    """The queue's objects in the stack's bucket, read with their generation and written under
    a generation precondition."""

    def read(self, name: str, limit: int) -> Versioned | None:
        from google.api_core import exceptions
        from google.cloud.storage.retry import DEFAULT_RETRY  # type: ignore[import-untyped]

        where = self.location(name)
        retry = DEFAULT_RETRY.with_timeout(RETRY_SECONDS)
        for _ in range(UPDATE_ATTEMPTS):
            try:
                blob = self.bucket().get_blob(name, timeout=READ_TIMEOUT_SECONDS, retry=retry)
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
                raise StoreError(gcs_failure(error, f"cannot read {where}", "storage.objects.get")) from None
            if len(data) > limit:
                raise too_large(where, limit)
            return Versioned(data, generation)
        raise StoreError(f"cannot read {where}: it changed {UPDATE_ATTEMPTS} times while being read; try again")

    def write(self, name: str, data: bytes, if_generation_match: int) -> None:
        from google.api_core import exceptions
        from google.cloud.storage.retry import DEFAULT_RETRY

        where = self.location(name)
        try:
            self.bucket().blob(name).upload_from_string(
                data,
                content_type="application/json" if name.endswith(".json") else "application/octet-stream",
                if_generation_match=if_generation_match,
                timeout=READ_TIMEOUT_SECONDS,
                # Safe to retry: a precondition always applies (a retried write that had landed
                # fails it, and the caller reads again: `submit` finds its entry there).
                retry=DEFAULT_RETRY.with_timeout(RETRY_SECONDS),
            )
        except exceptions.PreconditionFailed:
            raise PreconditionFailed(where) from None
        except gcs_errors() as error:
            raise StoreError(gcs_failure(error, f"cannot write {where}", "storage.objects.create")) from None


# --- The local stand-in ----------------------------------------------------------------------------
# Kept in the stand-in bucket's directory beside its objects: the writers' lock and each
# object's generation (an object with none, written by `trainstack local` itself, is generation 1).
STORE_DIR = ".trainstack-store"


class DirectoryStore:
    """The directory ``<workdir>/bucket/<bucket name>`` of `trainstack local`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def location(self, name: str) -> str:
        return str(self.root / name)

    def _generation_file(self, name: str) -> Path:
        return self.root / STORE_DIR / "generations" / name

    @contextmanager
    def _locked(self) -> Iterator[None]:
        lock = self.root / STORE_DIR / "lock"
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            handle = lock.open("a")
        except OSError as error:
            raise StoreError(f"cannot lock {lock}: {error.strerror or error}") from None
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

    def read(self, name: str, limit: int) -> Versioned | None:
        """Without the lock (a read writes nothing): the generation is read before and after
        the bytes, and a writer replaces the bytes before the generation, so equal
        generations are those bytes' (bytes newer than their generation only make the next
        write fail its precondition and read again)."""
        path = self.root / name
        for _ in range(UPDATE_ATTEMPTS):
            before = self._generation(name)
            try:
                data = read_local(path, limit)
            except StatusReadError as error:
                raise StoreError(str(error)) from None
            if data is None:
                return None
            if self._generation(name) == before:
                return Versioned(data, before)
        raise StoreError(f"cannot read {path}: it changed {UPDATE_ATTEMPTS} times while being read; try again")

    def write(self, name: str, data: bytes, if_generation_match: int) -> None:
        path = self.root / name
        with self._locked():
            current = self._generation(name)
            if current != if_generation_match:
                raise PreconditionFailed(str(path))
            try:
                _replace(path, data)
                _replace(self._generation_file(name), str(max(current + 1, time.time_ns())).encode())
            except OSError as error:
                raise StoreError(f"cannot write {path}: {error.strerror or error}") from None


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


# --- What the queue does with them ---------------------------------------------------------------
def create(store: ObjectStore, name: str, data: bytes) -> None:
    """A content-addressed object (code, requirements, a spec) written once: already there
    with the same bytes is done; with other bytes, :class:`StoreError`."""
    try:
        store.write(name, data, if_generation_match=0)
    except PreconditionFailed:
        existing = store.read(name, len(data))
        if existing is None or existing.data != data:
            raise StoreError(
                f"{store.location(name)} already exists with other bytes than these (its name is their digest); "
                "it was not written by trainstack: delete it and submit again"
            ) from None


Result = TypeVar("Result")


def update(
    store: ObjectStore, name: str, limit: int, change: Callable[[bytes | None], tuple[bytes | None, Result]]
) -> Result:
    """Read-modify-write ``name`` under a generation precondition, reading again when another
    writer came first (at most :data:`UPDATE_ATTEMPTS` times). ``change`` gets the current
    bytes (None: absent) and returns the new bytes (None: write nothing) and a result; what
    it raises ends the update with nothing written."""
    for attempt in range(UPDATE_ATTEMPTS):
        current = store.read(name, limit)
        data, result = change(None if current is None else current.data)
        if data is None:
            return result
        try:
            store.write(name, data, if_generation_match=0 if current is None else current.generation)
        except PreconditionFailed:
            # A jitter that spreads writers apart, not a secret.
            time.sleep(random.uniform(0, min(MAX_BACKOFF_SECONDS, UPDATE_BACKOFF_SECONDS * 2**attempt)))  # noqa: S311
            continue
        return result
    raise StoreError(
        f"{store.location(name)} was changed by others {UPDATE_ATTEMPTS} times while this command changed it; "
        "nothing was written: try again"
    )
