"""What one job's own code may reach in Cloud Storage, and what only its node's agent writes.

A node's account writes every job directory of its stack (the queue creates them:
``jobs/q<ID>_<NAME>/`` beside job 0's), so a job's code must not act as that account: a queued
job could then forge another's status, its one-node claim, its backup or its tuning report.
The agent keeps the node's token and hands each job a token of that job's own, downscoped by a
Credential Access Boundary (https://cloud.google.com/iam/docs/downscoping-short-lived-credentials):
its own directory, less the objects the agent alone writes there, and the buckets it reads.

Google's limits on a boundary, as the STS API's reference gives them (2026-11-28,
https://cloud.google.com/iam/docs/reference/sts/rest/v1/AccessBoundary): at most 10 rules, each
on one bucket, its permissions named as ``inRole:ROLE``, its condition a CEL expression. The
``!`` in the write rule's condition is IAM Conditions' logical NOT; that the boundary's CEL
takes it as IAM Conditions do is unverified here (the page's examples show ``startsWith`` and
``||`` alone).

Standard library only, Python 3.10: the node agent ships it.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from trainstack_contract.layout import LAYOUT

# In a job's directory: written by its nodes' agents alone (status objects, the one-node claim,
# the settings a run resumes with, the copies of the hypertune reports), never by its code.
AGENT_WRITTEN_DIRS: Final = (LAYOUT.status_dir, LAYOUT.hypertune_dir)
MAX_BOUNDARY_RULES: Final = 10
# The roles a rule makes available: read and list; and read, list, create and replace.
READ_PERMISSIONS: Final = "inRole:roles/storage.objectViewer"
WRITE_PERMISSIONS: Final = "inRole:roles/storage.objectUser"
# The attribute Cloud Storage sets on a list request: the prefix it lists.
LIST_PREFIX_ATTRIBUTE: Final = "storage.googleapis.com/objectListPrefix"


# A gs:// URI inside an argument or a variable's value (``--data=gs://b/x/*.tfrecord``): the
# bucket, and the folder up to the first wildcard.
_NAMED_URI: Final = re.compile(r"gs://([a-z0-9][a-z0-9._-]{1,220}[a-z0-9])((?:/[^\s*?\[]*)?)")


class BoundaryError(ValueError):
    """A job's boundary would break Google's limits; the message says which."""


def bucket_resource(bucket: str) -> str:
    """A bucket's full resource name, as a boundary rule names it."""
    return f"//storage.googleapis.com/projects/_/buckets/{bucket}"


def _object(bucket: str, name: str) -> str:
    return f"projects/_/buckets/{bucket}/objects/{name}"


def _under(bucket: str, prefix: str) -> str:
    return f"resource.name.startsWith('{_object(bucket, prefix)}')"


def _lists_under(prefix: str) -> str:
    return f"api.getAttribute('{LIST_PREFIX_ATTRIBUTE}', '').startsWith('{prefix}')"


def split_uri(uri: str) -> tuple[str, str]:
    """``gs://BUCKET/PREFIX`` as (BUCKET, PREFIX without a trailing slash; "" for the bucket)."""
    if not uri.startswith("gs://"):
        raise BoundaryError(f"{uri!r} is not a gs:// URI")
    bucket, _, prefix = uri[len("gs://") :].partition("/")
    return bucket, prefix.strip("/")


@dataclass(frozen=True)
class JobAccess:
    """What one job's code may reach: its directory (``gs://BUCKET/PREFIX``, read and written
    but for :data:`AGENT_WRITTEN_DIRS`) and the places it reads (``gs://BUCKET[/PREFIX]``)."""

    job_dir: str | None
    reads: tuple[str, ...] = ()

    def rules(self) -> list[dict[str, Any]]:
        rules: list[dict[str, Any]] = []
        if self.job_dir is not None and self.job_dir.startswith("gs://"):
            bucket, prefix = split_uri(self.job_dir)
            own = f"{prefix}/"
            spared = " ".join(f"&& !{_under(bucket, posixpath.join(own, each) + '/')}" for each in AGENT_WRITTEN_DIRS)
            rules.append(_rule(bucket, WRITE_PERMISSIONS, f"{_under(bucket, own)} {spared}", "the job's own directory"))
            rules.append(
                _rule(
                    bucket,
                    READ_PERMISSIONS,
                    f"{_under(bucket, own)} || {_lists_under(own)}",
                    "read and list the job's own directory",
                )
            )
        for uri in self.reads:
            bucket, prefix = split_uri(uri)
            if not prefix:
                rules.append(_rule(bucket, READ_PERMISSIONS, None, "read the job's data"))
                continue
            rules.append(
                _rule(
                    bucket,
                    READ_PERMISSIONS,
                    f"{_under(bucket, prefix + '/')} || {_lists_under(prefix + '/')}",
                    "read the job's data",
                )
            )
        if len(rules) > MAX_BOUNDARY_RULES:
            raise BoundaryError(
                f"the job's token would need {len(rules)} access boundary rules; Google allows at most "
                f"{MAX_BOUNDARY_RULES}: read fewer buckets or folders"
            )
        return rules

    def boundary(self) -> dict[str, Any] | None:
        """The Credential Access Boundary as STS takes it (``{"accessBoundary": ...}``), or
        None when the job reaches no bucket (a local run's directory job with no gs:// data)."""
        rules = self.rules()
        return {"accessBoundary": {"accessBoundaryRules": rules}} if rules else None


def named_reads(values: Iterable[str], own: str | None = None) -> tuple[str, ...]:
    """The places the job's arguments and variables name in Cloud Storage, as ``gs://BUCKET/FOLDER``
    (the folder up to the last "/" before a wildcard or the name's end) or ``gs://BUCKET`` where
    one bucket is named under several folders; ``own`` (the job's directory) and what lies under
    it are left out. What the job may read of them is also bounded by its node's own grants."""
    folders: dict[str, set[str]] = {}
    for value in values:
        for match in _NAMED_URI.finditer(value):
            bucket, path = match[1], match[2].lstrip("/")
            folder = path if path.endswith("/") or not path else posixpath.dirname(path) + "/"
            uri = f"gs://{bucket}/{folder.lstrip('/')}"
            if own is not None and (uri.rstrip("/") + "/").startswith(own.rstrip("/") + "/"):
                continue
            folders.setdefault(bucket, set()).add(folder.lstrip("/"))
    reads = []
    for bucket, named in sorted(folders.items()):
        only = next(iter(named)) if len(named) == 1 else ""
        reads.append(f"gs://{bucket}/{only}" if only else f"gs://{bucket}")
    return tuple(reads)


def _rule(bucket: str, permissions: str, expression: str | None, title: str) -> dict[str, Any]:
    rule: dict[str, Any] = {"availableResource": bucket_resource(bucket), "availablePermissions": [permissions]}
    if expression is not None:
        rule["availabilityCondition"] = {"expression": expression, "title": title}
    return rule
