"""Local paths and gs:// URIs: what can be told about them without TensorFlow, and a
bounded first contact with Cloud Storage for what cannot.

The checks here only return a reason or raise ``StorageError``; the callers turn that into
their own typed error (ConfigError for --job-dir, DataError for --data), which names the flag.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import tensorflow as tf

GCS_SCHEME = "gs://"
T = TypeVar("T")

# https://cloud.google.com/storage/docs/buckets#naming: lowercase letters, digits, "-", "_"
# and "."; a letter or digit at both ends; 3-63 characters, or up to 222 in dot-separated
# parts of at most 63; no IP address and no "goog" prefix.
_BUCKET_CHARACTERS = re.compile(r"[a-z0-9][a-z0-9._-]*[a-z0-9]")
_IP_ADDRESS = re.compile(r"\d{1,3}(\.\d{1,3}){3}")
BUCKET_RULE = "3-63 lowercase letters, digits, '-', '_' and '.', starting and ending with a letter or digit"


class StorageError(OSError):
    """A path that cannot be reached; the message says why, without the flag."""


def is_remote(path: str) -> bool:
    return "://" in path


def scheme_problem(path: str) -> str | None:
    """Why a URI's scheme is not one the trainer reads (TensorFlow alone knows gs://)."""
    if is_remote(path) and not path.startswith(GCS_SCHEME):
        return f"only local paths and {GCS_SCHEME}BUCKET/PATH are supported, not {path.split('://', 1)[0]}://"
    return None


def bucket_name_problem(uri: str) -> str | None:
    """Why the bucket of a gs:// URI cannot exist, or None. Checked locally: a bad name
    would otherwise cost a TensorFlow import and a round trip to say the same."""
    bucket = uri[len(GCS_SCHEME) :].split("/", 1)[0]
    if not bucket:
        return f"no bucket name after {GCS_SCHEME}"
    too_long = len(bucket) > 222 or any(len(part) > 63 for part in bucket.split("."))
    if (
        too_long
        or len(bucket) < 3
        or not _BUCKET_CHARACTERS.fullmatch(bucket)
        or _IP_ADDRESS.fullmatch(bucket)
        or bucket.startswith("goog")
        or ".." in bucket
    ):
        return f"{bucket!r} is not a valid Cloud Storage bucket name ({BUCKET_RULE})"
    return None


def remote_problem(path: str) -> str | None:
    """The scheme and bucket checks together: None for local paths and plausible gs:// URIs."""
    if not is_remote(path):
        return None
    return scheme_problem(path) or bucket_name_problem(path)


def summarize(error: tf.errors.OpError) -> str:
    """The reason in a TensorFlow error, on one line.

    Errors raised while a tf.data pipeline runs carry the graph node, the iterator chain and
    stack hints on lines of their own; the reason is the last line that is none of those."""
    reasons = [
        line.strip()
        for line in str(error.message).splitlines()
        if line.strip()
        and not line.startswith((" ", "\t"))
        and not line.startswith(("Graph execution error", "Detected at node", "<stack traces", "File "))
    ]
    reason = reasons[-1] if reasons else type(error).__name__
    # "... transformation with iterator: Iterator::Root::...::ParallelMapV2: <reason>"
    reason = re.sub(r"^.*Iterator::\S+: ", "", reason)
    # Eager ops: "{{function_node __wrapped__DecodeImage_device_...}} <reason> [Op:DecodeImage] name: "
    reason = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", reason)
    return re.sub(r"\s*\[Op:[^\]]*\](\s*name:.*)?$", "", reason).strip() or type(error).__name__


def bounded(call: Callable[[], T], seconds: float, what: str) -> T:
    """Runs ``call`` (a first request to Cloud Storage) for at most ``seconds``.

    TensorFlow's GCS client retries an unanswered request for minutes, and a blocked
    network (a firewall that drops packets, a dead proxy) answers nothing. The call runs in
    a daemon thread that is abandoned on timeout: the process is about to exit anyway.
    Its TensorFlow errors come back as StorageError with the reason on one line."""
    import tensorflow as tf

    outcome: dict[str, object] = {}

    def target() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread below, raised there
            outcome["error"] = error

    thread = threading.Thread(target=target, name=f"first contact with {what}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise StorageError(
            f"no answer from Cloud Storage within {seconds:g} s (network, proxy or credentials?); "
            "--storage-timeout-seconds sets the bound"
        )
    error = outcome.get("error")
    if isinstance(error, tf.errors.OpError):
        raise StorageError(summarize(error)) from None
    if isinstance(error, BaseException):
        raise error
    return outcome["value"]  # type: ignore[return-value]
