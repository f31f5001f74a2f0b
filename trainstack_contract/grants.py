"""IAM conditions on the objects of a stack's bucket: the CEL expressions the program writes on
its bucket grants, and the only grants that may write under ``trainstack/`` (what machines run).

The Pulumi program writes them, `trainstack plan` reads them back to say who may write what,
and the policy pack checks every bucket grant against them. A condition on the object name is
how Cloud Storage limits a role to some objects (IAM Conditions: ``resource.name`` is
``projects/_/buckets/BUCKET/objects/NAME`` and takes ``startsWith`` and ``==``).

Under ``trainstack/`` only `pulumi up` writes, with one exception: a stack's
``trainstack:access`` members queue jobs (`trainstack submit`). Each of them may create new
objects under ``trainstack/code/`` (job code, named by its digest) and
``trainstack/queue/specs/`` (job specs, named by their digest) but replace none (Storage
Object Creator cannot overwrite: replacing an object takes storage.objects.delete too), may
replace the queue's index alone, and may create and replace studies under ``trainstack/tune/``
(`trainstack tune`: no machine reads anything there as code or settings). Never a machine's account: a machine that could queue a
job could run code on every other machine of the stack.

Standard library only, Python 3.10: the policy pack reads it from the checkout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from trainstack_contract import EXECUTED_PREFIX, LAYOUT
from trainstack_contract.jobaccess import object_name, objects_under
from trainstack_contract.queue import INDEX_OBJECT, SPECS_DIR, STUDIES_DIR

# Creates objects; cannot read, replace or delete one.
CREATE_ONLY_ROLE: Final = "roles/storage.objectCreator"
# The narrowest predefined role that replaces an object (storage.objects.create and .delete;
# no IAM, no ACLs), on the one object its condition names.
REPLACE_ROLE: Final = "roles/storage.objectUser"
# What a member reads: the index, specs and every job's directory (`trainstack jobs`).
READ_ROLE: Final = "roles/storage.objectViewer"
# Principals a stack file may name in trainstack:access (trainstack.stackmodel.naming.MEMBER_PATTERN).
MEMBER_KINDS: Final = ("user:", "group:", "serviceAccount:")


def object_named(bucket: str, name: str) -> str:
    """The CEL test that an object of ``bucket`` is ``name`` itself."""
    return f'resource.name == "{object_name(bucket, name)}"'


def spares_executed(bucket: str) -> str:
    """The clause that keeps a write grant's condition off ``trainstack/`` (it ends the condition)."""
    return f"&& !{objects_under(bucket, EXECUTED_PREFIX)}"


@dataclass(frozen=True)
class SubmitGrant:
    """One bucket grant a trainstack:access member holds to queue jobs."""

    # Part of the grant's logical name: code, specs, index, studies.
    purpose: str
    role: str
    expression: str
    title: str


def submit_grants(bucket: str) -> tuple[SubmitGrant, ...]:
    """The writes under trainstack/ that queueing a job takes, and nothing else."""
    return (
        SubmitGrant(
            "code",
            CREATE_ONLY_ROLE,
            objects_under(bucket, f"{LAYOUT.code_dir}/"),
            "create job code under trainstack/code/",
        ),
        SubmitGrant(
            "specs",
            CREATE_ONLY_ROLE,
            objects_under(bucket, f"{SPECS_DIR}/"),
            "create job specs under trainstack/queue/specs/",
        ),
        SubmitGrant(
            "index",
            REPLACE_ROLE,
            object_named(bucket, INDEX_OBJECT),
            "replace the job queue's index alone",
        ),
        SubmitGrant(
            "studies",
            REPLACE_ROLE,
            objects_under(bucket, f"{STUDIES_DIR}/"),
            "create and replace tuning studies under trainstack/tune/",
        ),
    )


# Where the queue puts every job's directory (queued jobs and tuning trials as jobs/q<ID>_<NAME>/):
# the machines that run a stack's jobs write all of it, never one job's folder alone, which
# leaves every queued job's status and backups a 403. Each job's code holds a token for its own
# directory alone (trainstack_contract.jobaccess).
JOBS_AREA: Final = f"{LAYOUT.jobs}/"


def narrower_than_jobs_area(bucket: str, expression: str) -> str | None:
    """The one job's folder (``jobs/NAME/``) a write grant's condition limits it to, where it
    does: a job's machines granted that alone cannot write the queue's other jobs."""
    head = f'resource.name.startsWith("{object_name(bucket, JOBS_AREA)}'
    text = expression.strip()
    if not text.startswith(head):
        return None
    folder = text[len(head) :].split('"', 1)[0]
    return f"{JOBS_AREA}{folder}" if folder else None


def is_submit_grant(bucket: str, role: str, expression: str) -> bool:
    """Whether a bucket grant is exactly one of :func:`submit_grants`: its role on its objects."""
    return any(g.role == role and g.expression == expression.strip() for g in submit_grants(bucket))
