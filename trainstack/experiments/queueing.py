"""A queued job cancelled, and one queued (each once: a submit retried after a crash queues the
same job, never a second)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainstack.experiments.place import QueuePlace

if TYPE_CHECKING:
    from trainstack.jobqueue.queue import CodeObject
    from trainstack_contract.queue import QueueEntry


def queue_entry(
    place: QueuePlace, name: str, values: dict[str, str], code: list[CodeObject], submitted: str, one_node: bool
) -> QueueEntry:
    """A job at the end of the queue under a generation precondition, its code objects put
    first; once per (name, spec, submit time)."""
    from trainstack.jobqueue.queue import submit

    return submit(place.bucket, name, values, code, submitted, one_node)


def cancel_job(place: QueuePlace, job_id: int) -> QueueEntry:
    """The job's entry marked cancelled under a generation precondition: a queued job never
    starts, its running nodes end it. CancelRefused when it has ended or was cancelled."""
    from trainstack.jobqueue.queue import cancel
    from trainstack_contract.status import utc_now

    return cancel(place.bucket, job_id, utc_now())
