"""The lifecycles of a job, a tuning trial and a study: their states, which of them have ended,
the moves a trial and a study may make, and how a job's end becomes its trial's.

A job's moves are not checked here: each node's agent writes its own state, and a node that
boots again may take up its job from any state but an ended one.

A state is written into JSON objects (status/job.json, a study's study.json) as its text; the
enums here are that text (``JobState.RUNNING == "RUNNING"``), so a state read back from an
object compares, hashes and prints as the member it was written from.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Final, TypeVar


class _State(str, Enum):
    """A state that is its own text, in ``str()`` and f-strings too."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, format_spec: str) -> str:
        return str.__format__(str.__str__(self), format_spec)


class JobState(_State):
    """A job's state: ``state`` of its status objects, or QUEUED before any node wrote one."""

    # On a standing cluster's queue; no node has taken it yet (no status object says so).
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    # The node agent got a termination signal: the job stays resumable.
    INTERRUPTED = "INTERRUPTED"
    # The termination signal came from Compute Engine reclaiming a Spot VM (the metadata
    # server's instance/preempted says TRUE): not a failure of the job, which stays resumable.
    PREEMPTED = "PREEMPTED"
    # `trainstack cancel` ended the job (a queued job of a standing cluster): not resumed.
    CANCELLED = "CANCELLED"


# What a status object may say (QUEUED is the queue's, never a node's).
REPORTED_JOB_STATES: Final = frozenset(JobState) - {JobState.QUEUED}
# A job whose status/job.json (or, for a node, its own status) says one of these has ended: no
# node runs it again, and `cancel` leaves it as it is.
ENDED_JOB_STATES: Final = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
# A node stopped from outside: its job resumes from its backup when the node comes back.
DOWN_JOB_STATES: Final = frozenset({JobState.PREEMPTED, JobState.INTERRUPTED})


class TrialState(_State):
    """A tuning trial's state in its study."""

    PENDING = "PENDING"  # parameters chosen and recorded; its job not yet known to be queued
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"  # ended early: its intermediate values were worse than the others' median
    CANCELLED = "CANCELLED"  # its job was cancelled (`trainstack cancel`, or the study ended)


OUTSTANDING_TRIAL_STATES: Final = frozenset({TrialState.PENDING, TrialState.QUEUED, TrialState.RUNNING})
_TRIAL_ENDS: Final = frozenset(TrialState) - OUTSTANDING_TRIAL_STATES
# Where a trial goes from each state. A running trial stays RUNNING as its values come in; one
# whose job ended before it was seen running goes from QUEUED to its end.
TRIAL_MOVES: Final = {
    TrialState.PENDING: frozenset({TrialState.QUEUED, TrialState.CANCELLED}),
    TrialState.QUEUED: frozenset({TrialState.RUNNING, *_TRIAL_ENDS}),
    TrialState.RUNNING: frozenset({TrialState.RUNNING, *_TRIAL_ENDS}),
    **{ended: frozenset[TrialState]() for ended in _TRIAL_ENDS},
}


class StudyState(_State):
    ACTIVE = "ACTIVE"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


STUDY_MOVES: Final = {
    StudyState.ACTIVE: frozenset({StudyState.SUCCEEDED, StudyState.FAILED}),
    StudyState.SUCCEEDED: frozenset[StudyState](),
    StudyState.FAILED: frozenset[StudyState](),
}


State = TypeVar("State", TrialState, StudyState)


class LifecycleError(ValueError):
    """A move its lifecycle does not have (a program's mistake, not a user's)."""


def check_move(moves: Mapping[State, frozenset[State]], current: State, new: State, what: str) -> None:
    """Raises LifecycleError unless ``current`` may move to ``new``."""
    if new not in moves[current]:
        raise LifecycleError(f"a {what} cannot go from {current} to {new}")


def trial_state_after_job(job_state: JobState, metric_reported: bool) -> TrialState:
    """A trial's state once its job has ended in ``job_state`` (one of ENDED_JOB_STATES): it
    succeeds only with its job and a reported metric, and is cancelled with its job."""
    if job_state not in ENDED_JOB_STATES:
        raise LifecycleError(f"a job in {job_state} has not ended")
    if job_state == JobState.SUCCEEDED:
        return TrialState.SUCCEEDED if metric_reported else TrialState.FAILED
    if job_state == JobState.CANCELLED:
        return TrialState.CANCELLED
    return TrialState.FAILED
