"""How one job's run on this node ended (:class:`Outcome`), and what ends it early (:class:`Ended`)."""

from __future__ import annotations

from dataclasses import dataclass

# The exit status of a node ended by a signal or by one of its duties (128 + SIGTERM).
EXIT_ENDED = 143


class Ended(Exception):
    """A duty ended this node's work (the chief failed or fell silent, a peer stayed down,
    a Spot peer was preempted too often); the message is the reason recorded."""


class Cancelled(Ended):
    """The job was cancelled (`trainstack cancel`): recorded CANCELLED, not FAILED."""


class ChiefSucceeded(Ended):
    """The chief recorded the job SUCCEEDED: this node's part is over (recorded SUCCEEDED)."""


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    reason: str | None = None
    # The node refused what it was given to run (a digest mismatch): it stops whatever
    # on_finish says, since nothing it could still do there is trustworthy.
    refused: bool = False
    # The node ended the job's code itself because a peer was lost (a synchronous cluster).
    lost: str | None = None
    # The job was cancelled: recorded CANCELLED.
    cancelled: bool = False
    # The chief's SUCCEEDED ended this node's part before its code ended by itself: recorded
    # SUCCEEDED, and whatever of the job still runs here is stopped.
    ended_by_chief: bool = False


def ended_outcome(ended: Ended) -> Outcome:
    if isinstance(ended, ChiefSucceeded):
        return Outcome(0, str(ended), ended_by_chief=True)
    return Outcome(EXIT_ENDED, str(ended), cancelled=isinstance(ended, Cancelled))
