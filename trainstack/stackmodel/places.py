"""Where a stack's job reads and writes in Cloud Storage besides its own directory: decided once
from job.buckets and what job.args, job.env and job.data make plain, then granted by `plan`,
carried by the job's own token, and shown.

A gs:// URI after a flag that says what the job does with it (``--output_dir``, ``--job-dir``,
``--train_data_path``: trainstack_contract.jobaccess) is a place of its own; any other (an
unknown flag's value, a variable) must be declared in job.buckets, or `validate` names it with
the line to add: without a grant the first read after `pulumi up` would be a 403.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainstack.base.errors import Problem
from trainstack.stackmodel.naming import NAMESPACE
from trainstack.stackmodel.schema import Job
from trainstack_contract import LAYOUT
from trainstack_contract.jobaccess import (
    MAX_PLACES,
    PLACE,
    READ,
    WRITE,
    BoundaryError,
    BucketUse,
    JobAccess,
    bucket_uses,
    covers,
)

KEY = f"{NAMESPACE}:job.buckets"


@dataclass(frozen=True)
class JobPlaces:
    """The places the job reads and writes (gs://BUCKET or gs://BUCKET/FOLDER/), declared and
    inferred, its own directory and what it holds left out."""

    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()

    @property
    def buckets(self) -> tuple[str, ...]:
        return tuple(sorted({p.removeprefix("gs://").partition("/")[0] for p in (*self.reads, *self.writes)}))


def _add(places: list[str], place: str) -> None:
    if not covers(places, place):
        places[:] = [p for p in places if not covers([place], p)] + [place]


def job_places(job: Job, job_dir: str, own_bucket: str) -> tuple[JobPlaces, list[Problem]]:
    """The job's places, and every problem with them: a URI no flag or declaration says the
    job reads or writes, a write in the stack's own bucket outside the job's directory, more
    places than a token holds."""
    reads, writes = list(job.buckets.read), list(job.buckets.write)
    uses = list(bucket_uses(job.args, sorted(job.env.items())))
    if job.builtin and job.data.startswith("gs://"):
        uses.append(BucketUse(job.data, bucket_uses([job.data])[0].folder, READ, "job.data"))
    problems: list[Problem] = []
    own_dir = f"{job_dir}/"
    for use in uses:
        if covers([own_dir], use.folder) or covers(writes, use.folder):
            continue
        if not PLACE.fullmatch(use.folder):
            problems.append(
                Problem(
                    KEY,
                    f"{use.where} names {use.uri[:200]}, in a folder trainstack cannot grant ({use.folder[:200]}): "
                    "folder names are letters, digits and '._=-', never '.' or '..' alone",
                )
            )
            continue
        if use.kind == WRITE:
            _add(writes, use.folder)
        elif use.kind == READ or covers(reads, use.folder):
            _add(reads, use.folder)
        else:
            problems.append(
                Problem(
                    KEY,
                    f"{use.where} names {use.uri}, which the stack grants its job nothing on: say what the job does "
                    f"there, under trainstack:job add `buckets: {{read: [{use.folder}]}}` (or write)",
                )
            )
    own = f"gs://{own_bucket}"
    for place in writes:
        if covers([own], place) and not covers([own_dir], place):
            problems.append(
                Problem(
                    KEY,
                    f"the job writes {place}, in this stack's own bucket outside its job directory ({job_dir}); "
                    f"write under the job directory (--job-dir, $AIP_MODEL_DIR), or in {LAYOUT.jobs}/ through job.job_dir",
                )
            )
    places = JobPlaces(tuple(reads), tuple(writes))
    for kind, found in ((READ, places.reads), (WRITE, places.writes)):
        if len(found) > MAX_PLACES:
            problems.append(Problem(KEY, f"the job {kind}s {len(found)} places; at most {MAX_PLACES}: name buckets"))
    try:
        JobAccess(job_dir, places.reads, places.writes).rules()
    except BoundaryError as error:
        problems.append(Problem(KEY, str(error)))
    return places, problems
