"""The chief starts its preempted Spot peers again, with back-off and a bound.

A Spot VM that Compute Engine preempts stops (its termination action is STOP) and keeps its
disk; started again, it boots its agent, which resumes the node's work. The chief looks at each
Spot peer every ``Timings.recover_poll``. A peer that is TERMINATED while its status says it was at
work (PREEMPTED, or RUNNING when it had no time to say) is started again; the start call is
repeated with back-off while the peer stays stopped (no Spot capacity yet). A peer that
stopped at the end of its own work (SUCCEEDED, FAILED) or was shut down on purpose
(INTERRUPTED) is left alone. Each preemption is counted once, by the time on the peer's status
(a peer may boot and be preempted again between two looks); past ``max_restarts`` the job
ends FAILED.

A stopped peer whose status cannot be read (Cloud Storage gave up after its retries) is looked
at again at the next look: it is neither started (it may have ended its work) nor a reason to
end the job, until its status has stayed unreadable for ``unreadable_bound`` seconds (the
peer timeout), when the job ends FAILED, naming the peer.

A look never holds the chief for long: each Compute Engine call is tried once, for at most
``CALL_SECONDS`` (the next look is its retry), and a look that has taken ``budget`` seconds
stops, and the next one goes on from the peer after the last one looked at. The chief's
heartbeat is written between looks, so an API that hangs delays it by at most a budget and one
peer's two calls, never by every peer's calls with their retries (the other nodes end the job
after the peer timeout without a heartbeat).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Protocol

from trainstack_agent.board import Board
from trainstack_agent.cloud import CloudError
from trainstack_agent.timings import Timings
from trainstack_contract.lifecycle import JobState

# A stopped instance, as Compute Engine reports it.
TERMINATED = "TERMINATED"
# The most one Compute Engine call of a look may take (one try: the next look is the retry).
CALL_SECONDS = 10.0


class Instances(Protocol):
    def status(self, instance: str) -> str: ...

    def start(self, instance: str) -> None: ...


@dataclass
class _Outage:
    """One peer's preemptions so far and the start calls of the current one."""

    preemptions: int = 0
    # The time of the peer's status when this outage was counted.
    counted_at: str | None = None
    next_start: float = 0.0
    backoff: float = 0.0
    # Since when the stopped peer's status could not be read (None: it could, last time).
    unreadable_since: float | None = None


@dataclass(eq=False)
class SpotRecovery:
    """One look at every Spot peer per :meth:`look`; ``clock`` is monotonic seconds."""

    peers: tuple[tuple[str, str], ...]
    max_restarts: int
    instances: Instances
    board: Board
    clock: Callable[[], float]
    log: Callable[[str], None]
    backoff: tuple[float, float] = Timings().start_backoff
    _: KW_ONLY
    unreadable_bound: float
    # Seconds after which a look stops before its next peer.
    budget: float = Timings().recover_look_budget
    outages: dict[str, _Outage] = field(init=False)
    # Where the next look starts: the peer after the last one looked at.
    _next: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.outages = {node: _Outage(backoff=self.backoff[0]) for node, _ in self.peers}

    def look(self) -> str | None:
        """Starts what needs starting; returns why the job must end once a peer has been
        preempted more than ``max_restarts`` times, else None."""
        started, first, count = self.clock(), self._next, len(self.peers)
        for step in range(count):
            position = (first + step) % count
            node, instance = self.peers[position]
            spent = self.clock() - started
            if step and spent >= self.budget:
                self.log(
                    f"looked at {step} of {count} Spot peers in {spent:.0f} s; "
                    f"the next look starts with {node} ({instance})"
                )
                return None
            self._next = (position + 1) % count
            reason = self._look_at(node, instance)
            if reason is not None:
                return reason
        return None

    def _look_at(self, node: str, instance: str) -> str | None:
        try:
            status = self.instances.status(instance)
        except CloudError as error:
            self.log(f"could not read the status of {instance} from the Compute Engine API: {error}")
            return None
        # Up, or on its way up or down: a later look decides.
        if status != TERMINATED:
            return None
        try:
            document = self.board.peer(node)
        except CloudError as error:
            return self._unreadable(node, instance, error)
        self.outages[node].unreadable_since = None
        if document is None or document.state not in (JobState.PREEMPTED, JobState.RUNNING):
            return None
        outage = self.outages[node]
        now = self.clock()
        if outage.counted_at != document.time:
            outage.counted_at = document.time
            outage.preemptions += 1
            outage.next_start = now
            outage.backoff = self.backoff[0]
            if outage.preemptions > self.max_restarts:
                return (
                    f"{node} was preempted {outage.preemptions} times, "
                    f"more than cluster.max_restarts ({self.max_restarts})"
                )
            self.log(
                f"{node} ({instance}) was preempted: starting it again "
                f"(restart {outage.preemptions} of at most {self.max_restarts})"
            )
        if now < outage.next_start:
            return None
        try:
            self.instances.start(instance)
            self.log(f"asked Compute Engine to start {instance}")
        except CloudError as error:
            self.log(f"the start call for {instance} failed ({error}); trying again in {outage.backoff:.0f} s")
        outage.next_start = now + outage.backoff
        outage.backoff = min(self.backoff[1], outage.backoff * 2)
        return None

    def _unreadable(self, node: str, instance: str, error: CloudError) -> str | None:
        """A stopped peer's status could not be read: why the job must end once that has
        lasted ``unreadable_bound`` seconds, else None (a later look reads it again)."""
        outage, now = self.outages[node], self.clock()
        if outage.unreadable_since is None:
            outage.unreadable_since = now
        waited = now - outage.unreadable_since
        if waited >= self.unreadable_bound:
            return (
                f"could not read the status of {node} for {self.unreadable_bound:g} s while its instance "
                f"{instance} is {TERMINATED}: {str(error)[:300]}"
            )
        self.log(
            f"{instance} is {TERMINATED} and the status of {node} could not be read ({error}); "
            f"looking again (for at most {self.unreadable_bound - waited:.0f} s more)"
        )
        return None
