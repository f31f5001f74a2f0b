"""A queue's jobs as they end: whether one has ended (what the queue asks before it takes a
job twice), and a job cancelled."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from trainstack.experiments.place import QueuePlace

if TYPE_CHECKING:
    from trainstack.jobqueue.queue import CodeObject
    from trainstack_contract.queue import QueueEntry


def ended_state(place: QueuePlace) -> Callable[[QueueEntry], str | None]:
    """The state a queued job ended in, by its status objects in ``place``; None while it has not."""
    from trainstack.jobqueue.history import job_state
    from trainstack.jobqueue.queue import job_prefix
    from trainstack_contract.lifecycle import ENDED_JOB_STATES

    def ended(entry: QueueEntry) -> str | None:
        state = job_state(place.objects, job_prefix(entry))
        return state if state in ENDED_JOB_STATES else None

    return ended


def job_ended(place: QueuePlace) -> Callable[[QueueEntry], bool]:
    """Whether a queued job has ended (SUCCEEDED, FAILED or CANCELLED)."""
    state = ended_state(place)
    return lambda entry: state(entry) is not None


def queue_entry(
    place: QueuePlace, name: str, values: dict[str, str], code: list[CodeObject], submitted: str, one_node: bool
) -> QueueEntry:
    """A job at the end of the queue under a generation precondition, its code objects put
    first; once per (name, spec, submit time): a submit retried after a crash queues the
    same job, never a second, unless the first has ended."""
    from trainstack.jobqueue.queue import submit

    return submit(place.store, name, values, code, submitted, job_ended(place), one_node)


def cancel_job(place: QueuePlace, job_id: int) -> QueueEntry:
    """The job's entry marked cancelled under a generation precondition: a queued job never
    starts, its running nodes end it. CancelRefused when it has ended or was cancelled."""
    from trainstack.jobqueue.queue import cancel
    from trainstack_contract.status import utc_now

    return cancel(place.store, job_id, utc_now(), ended_state(place))
