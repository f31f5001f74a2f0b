"""What the queue does with its bucket's objects (trainstack.base.bucket): each read with its
generation and written under a precondition on it. Every read-modify-write of the queue goes
through :func:`update`; a content-addressed object is written once with :func:`create`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from trainstack.base.bucket import Bucket, BucketError, PreconditionFailed

# How many times a read-modify-write reads again after another writer changed the object first.
UPDATE_ATTEMPTS = 12
# Between two attempts: a random wait up to this many seconds, doubled each time, at most a second.
UPDATE_BACKOFF_SECONDS = 0.05
MAX_BACKOFF_SECONDS = 1.0


# --- What the queue does with them ---------------------------------------------------------------
def create(store: Bucket, name: str, data: bytes) -> None:
    """A content-addressed object (code, requirements, a spec) written once: already there
    with the same bytes is done; with other bytes, :class:`BucketError`."""
    try:
        store.write_if_generation(name, data, 0)
    except PreconditionFailed:
        existing = store.read_versioned(name, len(data))
        if existing is None or existing.data != data:
            raise BucketError(
                f"{store.location(name)} already exists with other bytes than these (its name is their digest); "
                "it was not written by trainstack: delete it and submit again"
            ) from None


Result = TypeVar("Result")


def update(
    store: Bucket, name: str, limit: int, change: Callable[[bytes | None], tuple[bytes | None, Result]]
) -> Result:
    """Read-modify-write ``name`` under a generation precondition, reading again when another
    writer came first (at most :data:`UPDATE_ATTEMPTS` times). ``change`` gets the current
    bytes (None: absent) and returns the new bytes (None: write nothing) and a result; what
    it raises ends the update with nothing written."""
    for attempt in range(UPDATE_ATTEMPTS):
        current = store.read_versioned(name, limit)
        data, result = change(None if current is None else current.data)
        if data is None:
            return result
        try:
            store.write_if_generation(name, data, 0 if current is None else current.generation)
        except PreconditionFailed:
            # A jitter that spreads writers apart, not a secret.
            time.sleep(random.uniform(0, min(MAX_BACKOFF_SECONDS, UPDATE_BACKOFF_SECONDS * 2**attempt)))  # noqa: S311
            continue
        return result
    raise BucketError(
        f"{store.location(name)} was changed by others {UPDATE_ATTEMPTS} times while this command changed it; "
        "nothing was written: try again"
    )
