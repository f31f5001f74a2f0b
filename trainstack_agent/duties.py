"""What a node does every tick, whatever else it is doing (:class:`Duties`), and the loops
that tick them while it waits for something else (:func:`supervise`, :func:`supervised_preparation`).

The chief refreshes its heartbeat in the job's status, watches its peers' status and starts
preempted Spot peers again; a peer gone for good (:func:`peer_gone`: it recorded FAILED since
this job started, or nothing for the peer timeout) ends the chief's work, and with it the
job's. Every other node watches that heartbeat and ends its work when the chief recorded
FAILED or CANCELLED or fell silent, or recorded SUCCEEDED while this node's code still runs
:attr:`Timings.chief_end_grace` later (recorded SUCCEEDED). Every node ends its work when the
job is cancelled or a flex-start run is about to end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from trainstack_agent.cloud import CloudError
from trainstack_agent.environment import Prepared
from trainstack_agent.outcome import Cancelled, ChiefSucceeded, Ended
from trainstack_agent.services import Services
from trainstack_agent.settings import NodeSettings
from trainstack_contract.lifecycle import DOWN_JOB_STATES, JobState
from trainstack_contract.status import StatusDocument, StatusFormatError, recorded_since

# How often the loops look at the job's code and at their duties (every other wait is in
# :class:`Timings`).
TICK_SECONDS = 0.25


@dataclass
class Duty:
    """One of a node's periodic duties: ``run(now)`` once its time has come, then again
    ``interval()`` seconds later (the interval is read as it runs, so it may follow the
    node's state). A Cloud error the duty does not handle itself is logged, and the duty runs
    again at its next time; the other duties go on. Only :class:`Ended` ends the node's work."""

    name: str
    run: Callable[[float], None]
    interval: Callable[[], float]
    due: float = float("-inf")


class Duties:
    """What a node does every tick, whatever else it is doing (preparing, waiting, training):
    its registered :class:`Duty` list, each on its own interval, in order."""

    def __init__(self, settings: NodeSettings, services: Services, started_at: datetime) -> None:
        self.settings = settings
        self.services = services
        self.started_at = started_at
        now = services.clock.monotonic()
        # When this job's work began here: a peer silent since then for peer_timeout_seconds
        # never started it.
        self.began = now
        self.last_seen: bytes | None = None
        self.seen_at = now
        # The chief's last look at each peer's status, and the peers it saw down; on other
        # nodes, the peers the chief's last heartbeat said were down.
        self.peer_documents: dict[str, StatusDocument | None] = {}
        self.peer_documents_at = float("-inf")
        self.peers_down: tuple[str, ...] = ()
        # On a node other than the chief: when it first saw the chief's SUCCEEDED.
        self.chief_succeeded_at: float | None = None
        self.heartbeat = Duty("heartbeat", self._heartbeat, lambda: settings.heartbeat_seconds)
        self.duties = self._registered()

    def _registered(self) -> list[Duty]:
        timings, settings = self.services.timings, self.settings
        duties = [Duty("look for a cancel", self._look_for_cancel, lambda: timings.peer_poll)]
        if settings.is_chief:
            if settings.other_nodes:
                duties.append(Duty("watch the peers", self._watch_peers, lambda: timings.peer_watch))
            duties.append(self.heartbeat)
            duties.append(Duty("recover Spot peers", self._recover, self._recovery_interval))
        else:
            duties.append(
                Duty("watch the chief", self._watch_chief, lambda: min(timings.peer_poll, settings.heartbeat_seconds))
            )
        return duties

    def tick(self) -> None:
        """Runs each duty whose time has come. Raises :class:`Ended` when this node's work must end."""
        run_end = self.services.run_end
        if run_end is not None and self.services.clock.monotonic() >= run_end.at:
            raise Ended(run_end.reason)
        for duty in self.duties:
            now = self.services.clock.monotonic()
            if now < duty.due:
                continue
            duty.due = now + duty.interval()
            try:
                duty.run(now)
            except CloudError as error:
                self.services.log(f"{duty.name}: {error}; again in {duty.interval():g} s")

    def _look_for_cancel(self, now: float) -> None:
        # Only a queued job can be cancelled (the queue gives it the look).
        reason = self.services.cancelled() if self.services.cancelled is not None else None
        if reason is not None:
            raise Cancelled(reason)

    def _watch_peers(self, now: float) -> None:
        """The chief reads every peer's status; a change in who is down is written at once."""
        try:
            self.peer_documents = {peer: self.services.board.peer(peer) for peer in self.settings.other_nodes}
            self.peer_documents_at = now
        except CloudError as error:
            self.services.log(f"could not read the peers' status: {error}")
            return
        gone = peer_gone(self.peer_documents, self.started_at, now - self.began, self.settings.peer_timeout_seconds)
        if gone is not None:
            raise Ended(gone)
        down = tuple(
            peer for peer, doc in self.peer_documents.items() if doc is not None and doc.state in DOWN_JOB_STATES
        )
        if down != self.peers_down:
            self.peers_down = down
            self.heartbeat.due = now

    def _heartbeat(self, now: float) -> None:
        services = self.services
        try:
            services.board.write_job(JobState.RUNNING, peers_down=self.peers_down)
        except CloudError as error:
            services.log(f"could not refresh the heartbeat in {services.board.job_uri}: {error}")

    def _recovery_interval(self) -> float:
        # A Spot peer known to be down is looked at often: it is started the moment Compute
        # Engine has stopped it.
        recovering = any(node in self.peers_down for node, _ in self.settings.recover)
        timings = self.services.timings
        return timings.recover_fast_poll if recovering else timings.recover_poll

    def _recover(self, now: float) -> None:
        if self.services.recovery is None:  # the chief has no Spot peer to start again
            return
        reason = self.services.recovery.look()
        if reason is not None:
            raise Ended(reason)

    def _watch_chief(self, now: float) -> None:
        services = self.services
        try:
            raw = services.board.read_raw(services.board.job_uri)
        except CloudError as error:
            services.log(f"could not read the job's status: {error}")
            raw = self.last_seen
        document = parse_status(raw)
        if document is not None and recorded_since(document, JobState.FAILED, self.started_at):
            raise Ended("the chief recorded the job FAILED")
        if document is not None and recorded_since(document, JobState.CANCELLED, self.started_at):
            raise Cancelled("the chief recorded the job CANCELLED")
        if document is not None and recorded_since(document, JobState.SUCCEEDED, self.started_at):
            if self.chief_succeeded_at is None:
                self.chief_succeeded_at = now
            elif now - self.chief_succeeded_at >= services.timings.chief_end_grace:
                raise ChiefSucceeded("the chief recorded the job SUCCEEDED")
        self.peers_down = tuple(peer for peer in document.peers_down if peer != self.settings.node) if document else ()
        if raw != self.last_seen:
            self.last_seen, self.seen_at = raw, now
        elif now - self.seen_at >= self.settings.peer_timeout_seconds:
            raise Ended(f"no heartbeat from the chief for {self.settings.peer_timeout_seconds} s")


def peer_gone(
    documents: dict[str, StatusDocument | None], started_at: datetime, began_ago: float, timeout: int
) -> str | None:
    """Why the chief ends the job for a peer gone for good, as its peers' status objects
    show ``began_ago`` seconds after it began the job (at ``started_at``); None while none is."""
    for peer, document in documents.items():
        if document is not None and recorded_since(document, JobState.FAILED, started_at):
            # The peer's job ended for good (its code failed, it could not prepare): the
            # cluster can no longer train, and waiting on it (TensorFlow's own barrier waits an
            # hour) would bill every other machine for nothing.
            return f"peer {peer} recorded FAILED"
    if began_ago < timeout:
        return None
    for peer, document in documents.items():
        # A peer's agent records RUNNING before it prepares: one with no status at all has not
        # booted, or stopped before its agent ran (a fetch or digest failure); one whose last
        # word is a FAILED from before this node began the job (it gave up on a chief down for
        # longer than the timeout) has stopped for good. The cluster's code would wait for
        # either in TensorFlow's barrier.
        if document is None:
            return f"{peer} recorded no status for this job within {timeout} s"
        if document.state == JobState.FAILED:
            return f"{peer} recorded FAILED before this node began the job, and nothing since within {timeout} s"
    return None


def supervise(duties: Duties, done: Callable[[], bool]) -> None:
    """Ticks this node's duties until ``done`` holds; :class:`Ended` ends it early."""
    clock = duties.services.clock
    while not done():
        duties.tick()
        clock.sleep(TICK_SECONDS)


def supervised_preparation(duties: Duties) -> Prepared:
    """The job's preparation (environment, code or image) in a thread of its own, this node's
    duties ticking meanwhile; what it raised is raised here."""
    result: list[Prepared] = []
    failure: list[BaseException] = []

    def prepare() -> None:
        try:
            result.append(duties.services.prepare())
        except BaseException as error:  # noqa: BLE001 - handed to the main thread
            failure.append(error)

    worker = threading.Thread(target=prepare, name="prepare", daemon=True)
    worker.start()
    # A standing node's next job is prepared in milliseconds (its environment and user are in
    # place): joined at once rather than looked at after a tick's sleep, which would add a
    # quarter of a second to every queued job's start.
    worker.join(TICK_SECONDS)
    supervise(duties, lambda: not worker.is_alive())
    if failure:
        raise failure[0]
    return result[0]


def parse_status(raw: bytes | None) -> StatusDocument | None:
    """A status object read raw; None when there is none or it is not one."""
    if raw is None:
        return None
    try:
        return StatusDocument.from_json(raw)
    except StatusFormatError:
        return None
