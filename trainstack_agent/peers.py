"""A node's watch on its peers: it waits until none is down, and tells whether one was lost
while the job's code ran (:class:`PeerWatch`).

A peer is lost to a run of the code when it is down (PREEMPTED or INTERRUPTED), has rebooted
since the code started (its incarnation changed), or its history shows it down since then (a
peer that wrote its first status after the look at the start and has rebooted since,
:func:`peer_lost`). A peer that has written no
status yet is booting for the first time and counts as up: TensorFlow waits for it (the chief's
duties end the job when one stays silent for the peer timeout, :class:`~trainstack_agent.duties.Duties`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from trainstack_agent.board import Board
from trainstack_agent.cloud import CloudError
from trainstack_agent.duties import TICK_SECONDS, Duties
from trainstack_agent.outcome import Ended
from trainstack_contract.lifecycle import DOWN_JOB_STATES, JobState
from trainstack_contract.status import StatusDocument, parse_time, recorded_since


@dataclass(frozen=True)
class PeerSnapshot:
    """The peers as the code started: each readable peer's incarnation, and when that was."""

    incarnations: dict[str, str]
    taken: datetime


def peer_lost(peer: str, document: StatusDocument | None, snapshot: PeerSnapshot) -> str | None:
    """What says ``peer`` was lost to code started at ``snapshot``: it is down now, it has
    rebooted since, or its history records it down since; None otherwise."""
    if document is None:
        return None
    if document.state in DOWN_JOB_STATES:
        return f"{peer} was {document.state}"
    if peer in snapshot.incarnations and document.incarnation != snapshot.incarnations[peer]:
        return f"{peer} rebooted"
    for entry in document.history:
        if entry.state in DOWN_JOB_STATES and parse_time(entry.time) > snapshot.taken:
            return f"{peer} was {entry.state} since the code started"
    return None


def peer_states(board: Board, peers: tuple[str, ...], started_at: datetime) -> tuple[list[str], str | None]:
    """The peers that are down, and one that recorded FAILED since ``started_at``."""
    down: list[str] = []
    for peer in peers:
        document = board.peer(peer)
        if document is None:
            continue
        if document.state in DOWN_JOB_STATES:
            down.append(peer)
        elif recorded_since(document, JobState.FAILED, started_at):
            return down, peer
    return down, None


class PeerWatch:
    """This node's looks at its peers' status, its duties ticking while it waits."""

    def __init__(self, duties: Duties, started_at: datetime) -> None:
        self.duties = duties
        self.settings = duties.settings
        self.services = duties.services
        self.board = duties.services.board
        self.log = duties.services.log
        self.started_at = started_at

    def wait_until_whole(self) -> None:
        """Returns once no other node is down. A node that has written no status yet is
        booting for the first time and counts as up: TensorFlow waits for it."""
        clock, timeout = self.services.clock, self.settings.peer_timeout_seconds
        started, next_look, announced = clock.monotonic(), clock.monotonic(), False
        while True:
            now = clock.monotonic()
            if now >= next_look:
                next_look = now + self.services.timings.peer_wait_poll
                unread: str | None = None
                try:
                    down, failed = peer_states(self.board, self.settings.other_nodes, self.started_at)
                except CloudError as error:
                    # Cloud Storage gave up: the peers are unknown (not down) until the next look.
                    self.log(f"could not read the peers' status: {error}")
                    down, failed, unread = [], None, str(error)[:300]
                if failed is not None:
                    raise Ended(f"peer {failed} recorded FAILED")
                if not down and unread is None:
                    return
                if down and not announced:
                    self.log(f"waiting for {' '.join(down)} to come back (at most {timeout} s)")
                    announced = True
                if now - started >= timeout:
                    if unread is not None:
                        raise Ended(f"could not read the peers' status for {timeout} s: {unread}")
                    raise Ended(f"{' '.join(down)} did not come back within {timeout} s")
            self.duties.tick()
            clock.sleep(TICK_SECONDS)

    def _peer_or_unknown(self, peer: str) -> StatusDocument | None:
        """The peer's status; None (unknown) when Cloud Storage gave up reading it: one
        give-up does not end the job, and the callers look again within their own bounds."""
        try:
            return self.board.peer(peer)
        except CloudError as error:
            self.log(f"could not read the status of {peer}: {error}")
            return None

    def snapshot(self) -> PeerSnapshot:
        """Each peer's incarnation now: a peer whose incarnation changes has rebooted (one
        whose status cannot be read now, or that has written none yet, is still seen when it
        is down, or its history says it was)."""
        taken = parse_time(self.board.now())
        incarnations = {}
        for peer in self.settings.other_nodes:
            document = self._peer_or_unknown(peer)
            if document is not None:
                incarnations[peer] = document.incarnation
        return PeerSnapshot(incarnations, taken)

    def broken(self, snapshot: PeerSnapshot, started: float) -> str | None:
        """In a synchronous cluster (no parameter servers: every step needs every node), a
        peer that is down, or has rebooted since the job's code started, breaks the code's
        collectives: what says so, as the chief saw it (or, on other nodes, as its heartbeat
        said and the peer's own status confirms)."""
        if not self.settings.synchronous:
            return None
        duties = self.duties
        if self.settings.is_chief:
            # Only a look taken since the code started speaks of this run of it.
            if duties.peer_documents_at < started:
                return None
            documents = duties.peer_documents
        elif duties.peers_down:
            try:
                documents = {peer: self.board.peer(peer) for peer in duties.peers_down}
            except CloudError:
                # Unknown for now: the next tick reads them again.
                return None
        else:
            return None
        for peer, document in documents.items():
            lost = peer_lost(peer, document, snapshot)
            if lost is not None:
                return lost
        return None

    def lost(self, snapshot: PeerSnapshot) -> str | None:
        """What says a peer was lost while the job's code ran: a peer down now, or one that
        has rebooted since (its incarnation changed); None when no peer was lost within
        :attr:`Timings.peer_settle`. A single node has no peers to lose."""
        if not self.settings.other_nodes:
            return None
        clock = self.services.clock
        deadline = clock.monotonic() + self.services.timings.peer_settle
        while True:
            for peer in self.settings.other_nodes:
                document = self._peer_or_unknown(peer)
                lost = peer_lost(peer, document, snapshot)
                if lost is not None:
                    return lost
                if document is not None and recorded_since(document, JobState.FAILED, self.started_at):
                    return None
            if clock.monotonic() >= deadline:
                return None
            self.duties.tick()
            clock.sleep(TICK_SECONDS)
