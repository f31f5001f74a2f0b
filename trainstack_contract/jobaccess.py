"""What one job's own code may reach in Cloud Storage, and what only its node's agent writes.

A node's account writes every job directory of its stack (the queue creates them:
``jobs/q<ID>_<NAME>/`` beside job 0's), so a job's code must not act as that account: a queued
job could then forge another's status, its one-node claim, its backup or its tuning report.
The agent keeps the node's token and hands each job a token of that job's own, downscoped by a
Credential Access Boundary (https://cloud.google.com/iam/docs/downscoping-short-lived-credentials):
its own directory, less the objects the agent alone writes there, and the places the stack
says it reads and writes (job.buckets).

Google's limits on a boundary, as the STS API's reference gives them (2026-11-28,
https://cloud.google.com/iam/docs/reference/sts/rest/v1/AccessBoundary): at most 10 rules, each
on one bucket, its permissions named as ``inRole:ROLE``, its condition a CEL expression. The
``!`` in the write rule's condition is IAM Conditions' logical NOT; that the boundary's CEL
takes it as IAM Conditions do is unverified here (the page's examples show ``startsWith`` and
``||`` alone).

Standard library only, Python 3.10: the node agent ships it.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from trainstack_contract.layout import LAYOUT
from trainstack_contract.names import ANY_BUCKET_NAME

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
_NAMED_URI: Final = re.compile(rf"gs://({ANY_BUCKET_NAME})((?:/[^\s*?\[]*)?)")


class BoundaryError(ValueError):
    """A job's boundary would break Google's limits; the message says which."""


def bucket_resource(bucket: str) -> str:
    """A bucket's full resource name, as a boundary rule names it."""
    return f"//storage.googleapis.com/projects/_/buckets/{bucket}"


def object_name(bucket: str, name: str) -> str:
    """An object's resource name, as IAM Conditions and access boundaries see it."""
    return f"projects/_/buckets/{bucket}/objects/{name}"


def objects_under(bucket: str, prefix: str) -> str:
    """The CEL test that an object of ``bucket`` is named under ``prefix``."""
    return f'resource.name.startsWith("{object_name(bucket, prefix)}")'


def _lists_under(prefix: str) -> str:
    return f'api.getAttribute("{LIST_PREFIX_ATTRIBUTE}", "").startsWith("{prefix}")'


def split_uri(uri: str) -> tuple[str, str]:
    """``gs://BUCKET/PREFIX`` as (BUCKET, PREFIX without a trailing slash; "" for the bucket)."""
    if not uri.startswith("gs://"):
        raise BoundaryError(f"{uri!r} is not a gs:// URI")
    bucket, _, prefix = uri[len("gs://") :].partition("/")
    return bucket, prefix.strip("/")


@dataclass(frozen=True)
class JobAccess:
    """What one job's code may reach: its directory (``gs://BUCKET/PREFIX``, read and written
    but for :data:`AGENT_WRITTEN_DIRS`), the places it reads and those it writes
    (``gs://BUCKET`` or ``gs://BUCKET/FOLDER/``, as job.buckets declares them)."""

    job_dir: str | None
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()

    def rules(self) -> list[dict[str, Any]]:
        rules: list[dict[str, Any]] = []
        if self.job_dir is not None and self.job_dir.startswith("gs://"):
            bucket, prefix = split_uri(self.job_dir)
            own = f"{prefix}/"
            spared = " ".join(
                f"&& !{objects_under(bucket, posixpath.join(own, each) + '/')}" for each in AGENT_WRITTEN_DIRS
            )
            rules.append(
                _rule(bucket, WRITE_PERMISSIONS, f"{objects_under(bucket, own)} {spared}", "the job's own directory")
            )
            rules.append(
                _rule(
                    bucket,
                    READ_PERMISSIONS,
                    f"{objects_under(bucket, own)} || {_lists_under(own)}",
                    "read and list the job's own directory",
                )
            )
        for permissions, places, what in (
            (READ_PERMISSIONS, self.reads, "read what the job reads"),
            (WRITE_PERMISSIONS, self.writes, "write where the job writes"),
        ):
            for uri in places:
                bucket, prefix = split_uri(uri)
                if not prefix:
                    rules.append(_rule(bucket, permissions, None, what))
                    continue
                own = f"{objects_under(bucket, prefix + '/')} || {_lists_under(prefix + '/')}"
                rules.append(_rule(bucket, permissions, own, what))
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


# Flags whose gs:// value a job writes under (AI Platform's --job-dir, the samples' --output_dir,
# Keras' model and checkpoint folders), and those whose value it reads: a URI after any other
# flag, or in job.env, says nothing of which, and is declared in job.buckets.
WRITE_FLAG: Final = re.compile(r"--(?:job|output|model|export|checkpoint|log|tensorboard)[-_](?:dir|path)")
READ_FLAG: Final = re.compile(
    r"--(?:[a-z0-9]+[-_])*(?:data|files?|input|inputs|dataset|vocab)(?:[-_](?:path|dir|pattern|uri)s?)?"
)
# A place a stack declares its job reads or writes: a bucket, or a folder of one (a trailing "/").
PLACE: Final = re.compile(rf"gs://{ANY_BUCKET_NAME}(?:/(?:(?!\.{{1,2}}/)[A-Za-z0-9_.=-]{{1,200}}/){{1,16}})?")
MAX_PLACES: Final = 8
READ: Final = "read"
WRITE: Final = "write"


@dataclass(frozen=True)
class BucketUse:
    """A gs:// URI the job's arguments or variables name: the folder it lies in (``gs://B/F/``,
    or ``gs://B`` for the bucket), whether a flag says the job reads or writes it (None: no
    flag says), and where it was named (``job.args[3]``, ``job.env.NAME``)."""

    uri: str
    folder: str
    kind: str | None
    where: str


def _folder(bucket: str, path: str) -> str:
    folder = path if path.endswith("/") or not path else posixpath.dirname(path) + "/"
    folder = folder.lstrip("/")
    return f"gs://{bucket}/{folder}" if folder and folder != "/" else f"gs://{bucket}"


def _kind(flag: str | None) -> str | None:
    if flag is None:
        return None
    if WRITE_FLAG.fullmatch(flag):
        return WRITE
    return READ if READ_FLAG.fullmatch(flag) else None


def bucket_uses(args: Iterable[str], env: Iterable[tuple[str, str]] = ()) -> tuple[BucketUse, ...]:
    """Every gs:// URI in the job's arguments (after ``--flag`` or as ``--flag=URI``) and
    variables, with what its flag says of it."""
    uses: list[BucketUse] = []
    previous: str | None = None
    for index, arg in enumerate(args):
        flag, _, value = arg.partition("=") if arg.startswith("--") and "=" in arg else (previous, "", arg)
        kind = _kind(flag)
        for match in _NAMED_URI.finditer(value):
            # A directory flag's value is the folder itself, not the one it lies in.
            path = match[2].rstrip("/") + "/" if kind == WRITE and match[2].strip("/") else match[2]
            uses.append(BucketUse(match[0], _folder(match[1], path), kind, f"job.args[{index}]"))
        previous = arg if arg.startswith("--") and "=" not in arg else None
    for name, value in env:
        for match in _NAMED_URI.finditer(value):
            uses.append(BucketUse(match[0], _folder(match[1], match[2]), None, f"job.env.{name}"))
    return tuple(uses)


def covers(places: Iterable[str], folder: str) -> bool:
    """Whether one of ``places`` (buckets, or folders ending in "/") holds ``folder``."""
    return any(
        folder == place or (folder + "/").startswith(place if place.endswith("/") else place + "/") for place in places
    )


def places_json(reads: tuple[str, ...], writes: tuple[str, ...]) -> str:
    """The job's declared places as its metadata carries them."""
    return json.dumps({READ: list(reads), WRITE: list(writes)}, separators=(",", ":"))


def places_from_json(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(reads, writes) from :func:`places_json`'s text; ValueError names what is wrong."""
    document = json.loads(text)
    if not isinstance(document, dict) or set(document) - {READ, WRITE}:
        raise ValueError('not {"read": [...], "write": [...]}')
    found: list[tuple[str, ...]] = []
    for kind in (READ, WRITE):
        places = document.get(kind, [])
        if not isinstance(places, list) or len(places) > MAX_PLACES:
            raise ValueError(f"{kind} is not a list of at most {MAX_PLACES} places")
        for place in places:
            if not isinstance(place, str) or not PLACE.fullmatch(place):
                raise ValueError(f"{str(place)[:100]!r} is not gs://BUCKET or gs://BUCKET/FOLDER/")
        found.append(tuple(places))
    return found[0], found[1]


def _rule(bucket: str, permissions: str, expression: str | None, title: str) -> dict[str, Any]:
    rule: dict[str, Any] = {"availableResource": bucket_resource(bucket), "availablePermissions": [permissions]}
    if expression is not None:
        rule["availabilityCondition"] = {"expression": expression, "title": title}
    return rule
