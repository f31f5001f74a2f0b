"""One boot of a node: prepare, wait for the cluster, train, recover from lost peers, finish.

What a node does, in order:

1. A job that already SUCCEEDED is not trained again; on_finish is applied.
2. The node records RUNNING, then prepares the job (environment, verified code or image).
3. It waits until no peer is down (PREEMPTED or INTERRUPTED, not booted again yet).
4. It runs the job's code. Meanwhile, every tick (:class:`Duties`), the chief refreshes its
   heartbeat in the job's status and starts preempted Spot peers again; every other node
   watches that heartbeat and ends its work when the chief recorded FAILED or fell silent.
5. When the job's code exits non-zero, the node looks at its peers: if one is down or has
   rebooted since the code started, the exit is the peer's loss, whatever its code, and the
   node starts the code again once the cluster is whole (it resumes from its backup), at
   most :func:`restart_limit` times. Otherwise the job failed.
6. It records SUCCEEDED or FAILED (the chief also for the job) and applies on_finish.

A termination signal (a guest shutdown, a reboot, host maintenance, a Spot preemption) is not
the job's end: the node records PREEMPTED or INTERRUPTED, ends its children and exits 143,
without on_finish; its next boot resumes. Anything unexpected records FAILED and applies
on_finish: a node must never idle and bill.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from trainstack_agent import job_record
from trainstack_agent.artifacts import DigestMismatch
from trainstack_agent.board import Board
from trainstack_agent.cloud import CloudError
from trainstack_agent.clusterport import cluster_port_watch, port_listening
from trainstack_agent.environment import Prepared
from trainstack_agent.hypertune import MetricCopy
from trainstack_agent.job import JobCommand, job_command
from trainstack_agent.recovery import SpotRecovery
from trainstack_agent.runend import RunEnd
from trainstack_agent.secrets import SecretError
from trainstack_agent.settings import NodeSettings
from trainstack_agent.timings import Timings
from trainstack_contract import LAYOUT, STATES
from trainstack_contract.status import StatusDocument, StatusFormatError

# How often the loops look at the job's code and at their duties (every other wait is in
# :class:`Timings`).
TICK_SECONDS = 0.25
# The exit status of a node ended by a signal or by one of its duties (128 + SIGTERM).
EXIT_ENDED = 143
DOWN_STATES = (STATES.preempted, STATES.interrupted)


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class RunningChild(Protocol):
    def poll(self) -> int | None: ...

    def stop(self, grace: float | None = ...) -> int: ...


class Launcher(Protocol):
    def start(self, command: JobCommand) -> RunningChild: ...

    def stop_all(self, close: bool = True) -> None:
        """Ends every child; ``close``: none starts after this (the agent is ending)."""
        ...


class Ended(Exception):
    """A duty ended this node's work (the chief failed or fell silent, a peer stayed down,
    a Spot peer was preempted too often); the message is the reason recorded."""


class Cancelled(Ended):
    """The job was cancelled (`trainstack cancel`): recorded CANCELLED, not FAILED."""


def restart_limit(settings: NodeSettings) -> int:
    """The most times one node starts its job's code again after a lost peer: each
    preemption of a peer costs every node one restart, and the chief ends the job once one
    peer has been preempted more than ``max_restarts`` times; one more for a peer lost
    without being preempted."""
    return settings.max_restarts * max(len(settings.peers) - 1, 0) + 1


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


def ended_outcome(ended: Ended) -> Outcome:
    return Outcome(EXIT_ENDED, str(ended), cancelled=isinstance(ended, Cancelled))


@dataclass
class Services:
    """What a node's life needs from the world; the tests pass stand-ins."""

    board: Board
    launcher: Launcher
    # The job's preparation (environment, code or image), and a node's without a job.
    prepare: Callable[[], Prepared]
    ready: Callable[[], None]
    secrets: Callable[[], dict[str, str]]
    release: Callable[[str], None]
    preempted: Callable[[], bool]
    recovery: SpotRecovery | None
    clock: Clock
    log: Callable[[str], None]
    # The environment the job's code starts from.
    environment: Mapping[str, str]
    timings: Timings = Timings()
    # Whether anything on this node listens on a TCP port (None: cannot tell).
    listening: Callable[[int], bool | None] = port_listening
    # A queued job's: why it was cancelled (`trainstack cancel`), or None; asked every peer_poll.
    cancelled: Callable[[], str | None] | None = None
    # A flex-start node's: when its work ends, before Compute Engine deletes the machine.
    run_end: RunEnd | None = None


class Duties:
    """What a node does every tick, whatever else it is doing (preparing, waiting, training)."""

    def __init__(self, settings: NodeSettings, services: Services, started_at: datetime) -> None:
        self.settings = settings
        self.services = services
        self.started_at = started_at
        now = services.clock.monotonic()
        self.next_heartbeat = now
        self.next_recovery = now
        self.next_watch = now
        self.next_peer_watch = now
        self.next_cancel_look = now
        self.last_seen: bytes | None = None
        self.seen_at = now
        # The chief's last look at each peer's status, and the peers it saw down; on other
        # nodes, the peers the chief's last heartbeat said were down.
        self.peer_documents: dict[str, StatusDocument | None] = {}
        self.peer_documents_at = float("-inf")
        self.peers_down: tuple[str, ...] = ()

    def tick(self) -> None:
        """Raises :class:`Ended` when this node's work must end."""
        run_end = self.services.run_end
        if run_end is not None and self.services.clock.monotonic() >= run_end.at:
            raise Ended(run_end.reason)
        self._look_for_cancel()
        if self.settings.is_chief:
            self._chief()
        else:
            self._watch_chief()

    def _look_for_cancel(self) -> None:
        cancelled, now = self.services.cancelled, self.services.clock.monotonic()
        if cancelled is None or now < self.next_cancel_look:
            return
        self.next_cancel_look = now + self.services.timings.peer_poll
        reason = cancelled()
        if reason is not None:
            raise Cancelled(reason)

    def _watch_peers(self, now: float) -> None:
        """The chief reads every peer's status; a change in who is down is written at once."""
        if not self.settings.other_nodes or now < self.next_peer_watch:
            return
        self.next_peer_watch = now + self.services.timings.peer_watch
        try:
            self.peer_documents = {peer: self.services.board.peer(peer) for peer in self.settings.other_nodes}
            self.peer_documents_at = now
        except CloudError as error:
            self.services.log(f"could not read the peers' status: {error}")
            return
        down = tuple(peer for peer, doc in self.peer_documents.items() if doc is not None and doc.state in DOWN_STATES)
        if down != self.peers_down:
            self.peers_down = down
            self.next_heartbeat = now

    def _chief(self) -> None:
        services, now = self.services, self.services.clock.monotonic()
        self._watch_peers(now)
        if now >= self.next_heartbeat:
            self.next_heartbeat = now + self.settings.heartbeat_seconds
            try:
                services.board.write_job(STATES.running, peers_down=self.peers_down)
            except CloudError as error:
                services.log(f"could not refresh the heartbeat in {services.board.job_uri}: {error}")
        if services.recovery is not None and now >= self.next_recovery:
            # A Spot peer known to be down is looked at often: it is started the moment
            # Compute Engine has stopped it.
            recovering = any(node in self.peers_down for node, _ in self.settings.recover)
            timings = services.timings
            self.next_recovery = now + (timings.recover_fast_poll if recovering else timings.recover_poll)
            reason = services.recovery.look()
            if reason is not None:
                raise Ended(reason)

    def _watch_chief(self) -> None:
        services, now = self.services, self.services.clock.monotonic()
        if now < self.next_watch:
            return
        self.next_watch = now + min(services.timings.peer_poll, self.settings.heartbeat_seconds)
        try:
            raw = services.board.read_raw(services.board.job_uri)
        except CloudError as error:
            services.log(f"could not read the job's status: {error}")
            raw = self.last_seen
        document = _status(raw)
        if document is not None and document.state == STATES.failed and document.moment > self.started_at:
            raise Ended("the chief recorded the job FAILED")
        if document is not None and document.state == STATES.cancelled and document.moment > self.started_at:
            raise Cancelled("the chief recorded the job CANCELLED")
        self.peers_down = tuple(peer for peer in document.peers_down if peer != self.settings.node) if document else ()
        if raw != self.last_seen:
            self.last_seen, self.seen_at = raw, now
        elif now - self.seen_at >= self.settings.peer_timeout_seconds:
            raise Ended(f"no heartbeat from the chief for {self.settings.peer_timeout_seconds} s")


def peer_lost(peer: str, document: StatusDocument | None, snapshot: dict[str, str]) -> str | None:
    """What says ``peer`` was lost to code started at ``snapshot`` (peers' incarnations then):
    it is down now, or it has rebooted since; None otherwise."""
    if document is None:
        return None
    if document.state in DOWN_STATES:
        return f"{peer} was {document.state}"
    if peer in snapshot and document.incarnation != snapshot[peer]:
        return f"{peer} rebooted"
    return None


def apply_on_finish(
    on_finish: str,
    release: Callable[[str], None],
    log: Callable[[str], None],
    refused: bool = False,
    what: str = "job over",
) -> None:
    """stop, delete or keep this machine; one that refused what it was given to run stops."""
    if refused and on_finish == "keep":
        log("this node refused what it was given to run: releasing it whatever on_finish says")
        release("stop")
        return
    if on_finish == "keep":
        log(f"{what}; on_finish=keep: this machine keeps running (and billing)")
        return
    log(f"{what}; on_finish={on_finish}: releasing this machine")
    release(on_finish)


def _status(raw: bytes | None) -> StatusDocument | None:
    if raw is None:
        return None
    try:
        return StatusDocument.from_json(raw)
    except StatusFormatError:
        return None


class NodeAgent:
    """One job's life on this node. ``release_at_end``: apply on_finish when the job ends (a
    node without a queue); a queued job leaves that to the queue (:mod:`trainstack_agent.jobqueue`),
    except when the node refused what it was given to run."""

    def __init__(
        self, settings: NodeSettings, services: Services, started_at: datetime, release_at_end: bool = True
    ) -> None:
        self.settings = settings
        self.release_at_end = release_at_end
        # How the job ended in this boot (None: it did not, or was not run).
        self.outcome: Outcome | None = None
        self.services = services
        self.started_at = started_at
        self.duties = Duties(settings, services, started_at)
        self.log = services.log
        self.board = services.board
        # The starts of the job's code by this boot (the first included).
        self.starts = 0
        self._terminating = False
        # Whether this boot recorded the job RUNNING, and whether it has recorded its end: a
        # termination signal after the end (the shutdown on_finish asked for) records nothing.
        self._running = False
        self._finished = False
        # The job's cloudml-hypertune report and its copy in the job directory, once prepared.
        self.metrics: MetricCopy | None = None

    # --- the life of a boot ----------------------------------------------------------------
    def run(self) -> int:
        settings = self.settings
        if settings.job is None:
            self.services.ready()
            return 0
        try:
            job = self.board.job()
        except Exception as error:  # noqa: BLE001 - a node must record and release, whatever failed
            # An oversize or unreadable status/job.json, or Cloud Storage giving up: the node
            # cannot tell whether the job already ended, so it fails and releases its machine
            # rather than idle (and bill) until the run-time cap.
            return self.finish(Outcome(1, f"cannot read the job's status {self.board.job_uri}: {str(error)[:300]}"))
        if job is not None and job.state == STATES.succeeded:
            self.log(f"job already SUCCEEDED ({self.board.job_uri}); not training again")
            if self.release_at_end:
                self.apply_on_finish()
            return 0
        try:
            self.board.write_node(STATES.running)
            self._running = True
            outcome = self.run_job()
        except Exception as error:  # noqa: BLE001 - a node must record and release, whatever failed
            if self._terminating:
                raise
            outcome = Outcome(1, f"the node agent failed: {type(error).__name__}: {str(error)[:300]}")
        return self.finish(outcome)

    def run_job(self) -> Outcome:
        job = self.settings.job
        assert job is not None
        if self.settings.is_chief:
            try:
                job_record.check_or_record(self.board.storage, job)
            except job_record.SettingsChanged as changed:
                return Outcome(1, str(changed)[:1200], refused=True)
        try:
            # A duty may end the work before anything starts (a flex-start run already over).
            self.duties.tick()
            prepared = self._supervised_preparation()
        except Ended as ended:
            return ended_outcome(ended)
        except DigestMismatch as error:
            return Outcome(1, str(error)[:400], refused=True)
        except Exception as error:  # noqa: BLE001 - the reason names what failed
            return Outcome(1, f"preparing the job failed: {str(error)[:300]}")
        if prepared.metric_file is not None:
            uri = f"{job.job_dir}/{LAYOUT.hypertune_metrics(self.settings.node)}"
            self.metrics = MetricCopy(prepared.metric_file, prepared.user, self.board.storage, uri, self.log)
        limit, restarts = restart_limit(self.settings), 0
        while True:
            try:
                self._wait_for_peers()
                outcome, snapshot = self._run_code(prepared)
            except Ended as ended:
                return ended_outcome(ended)
            except SecretError as error:
                # The job's code must not run without a secret it was promised.
                return Outcome(1, str(error))
            if (outcome.exit_code == 0 and outcome.lost is None) or outcome.reason is not None:
                return outcome
            try:
                lost = outcome.lost or self._lost_peer(snapshot)
            except Ended as ended:
                return ended_outcome(ended)
            if lost is None:
                return outcome
            if restarts >= limit:
                return Outcome(
                    outcome.exit_code,
                    f"the job's code exited {outcome.exit_code} after {lost}, {restarts} times: "
                    f"the most this node restarts it ({limit})",
                )
            restarts += 1
            self.log(
                f"the job's code exited {outcome.exit_code} after {lost}: restart {restarts} of at most {limit} "
                "once the cluster is whole; it resumes from its backup"
            )
            try:
                self.board.write_node(STATES.running, reason=f"{lost}; restarting the job's code")
            except CloudError as error:
                self.log(f"could not record the restart: {error}")

    def finish(self, outcome: Outcome) -> int:
        self._finished = True
        self.outcome = outcome
        state = STATES.succeeded if outcome.exit_code == 0 else STATES.failed
        if outcome.cancelled:
            state = STATES.cancelled
        reason = f" ({outcome.reason})" if outcome.reason else ""
        self.log(f"job step ended with status {outcome.exit_code}: {state}{reason}")
        if state != STATES.succeeded:
            # A job recorded FAILED or CANCELLED runs nothing more, whatever on_finish keeps: on_finish=keep
            # keeps the machine, not the job's code (which an unexpected error may have left running).
            try:
                # A standing node's next job still starts its processes.
                self.services.launcher.stop_all(close=self.release_at_end)
            except Exception as error:  # noqa: BLE001 - the end is recorded whatever happens here
                self.log(f"could not end the job's processes: {type(error).__name__}: {error}")
        # The code has ended: its last report reaches the job directory before its end does, so
        # a reader that sees SUCCEEDED sees the final metric too.
        self.copy_metrics()
        for write in (self.board.write_node, *([self.board.write_job] if self.settings.is_chief else [])):
            try:
                write(state, outcome.exit_code, outcome.reason)
            except CloudError as error:
                self.log(f"could not record {state}: {error}")
        if self.release_at_end or outcome.refused:
            self.apply_on_finish(refused=outcome.refused)
        return outcome.exit_code

    def apply_on_finish(self, refused: bool = False) -> None:
        apply_on_finish(self.settings.on_finish, self.services.release, self.log, refused=refused)

    def on_termination(self, signal_name: str) -> int:
        """A termination signal: record why, end every child, and leave the job resumable."""
        self._terminating = True
        if self._finished:
            # The job's end is recorded; this is the shutdown that ends the machine.
            self.log(f"received {signal_name} after the job's end was recorded")
            self.services.launcher.stop_all()
            return EXIT_ENDED
        state, why = STATES.interrupted, "a guest shutdown, reboot or host maintenance"
        if self.services.preempted():
            state, why = STATES.preempted, "Compute Engine preempted this Spot VM"
        self.log(
            f"received {signal_name} ({why}): recording {state}; on_finish is not applied, and the next boot resumes the job"
        )
        # The status first: a preempted VM has about 30 s, and its peers look for this state.
        # The chief's also says so of the job (`trainstack status`): resumable, not running.
        writes = [self.board.write_node] + ([self.board.write_job] if self.settings.is_chief and self._running else [])
        for write in writes:
            try:
                write(state, None, signal_name)
            except CloudError as error:
                self.log(f"could not record {state}: {error}")
        self.services.launcher.stop_all()
        # After the status (a preempted VM has about 30 s): the ended code's last report.
        self.copy_metrics()
        return EXIT_ENDED

    def copy_metrics(self) -> None:
        """The job's hypertune report to the job directory, if it changed; never fatal."""
        if self.metrics is None:
            return
        try:
            self.metrics.copy()
        except Exception as error:  # noqa: BLE001 - the job's end is recorded whatever happens here
            self.log(f"could not copy the job's hypertune report: {type(error).__name__}: {error}")

    # --- the steps ------------------------------------------------------------------------
    def _supervised(self, done: Callable[[], bool]) -> None:
        """Ticks this node's duties until ``done`` holds; :class:`Ended` ends it early."""
        clock = self.services.clock
        while not done():
            self.duties.tick()
            clock.sleep(TICK_SECONDS)

    def _supervised_preparation(self) -> Prepared:
        result: list[Prepared] = []
        failure: list[BaseException] = []

        def prepare() -> None:
            try:
                result.append(self.services.prepare())
            except BaseException as error:  # noqa: BLE001 - handed to the main thread
                failure.append(error)

        worker = threading.Thread(target=prepare, name="prepare", daemon=True)
        worker.start()
        self._supervised(lambda: not worker.is_alive())
        if failure:
            raise failure[0]
        return result[0]

    def _peer_states(self) -> tuple[list[str], str | None]:
        """The peers that are down, and one that recorded FAILED since this node started."""
        down: list[str] = []
        for peer in self.settings.other_nodes:
            document = self.board.peer(peer)
            if document is None:
                continue
            if document.state in DOWN_STATES:
                down.append(peer)
            elif document.state == STATES.failed and document.moment > self.started_at:
                return down, peer
        return down, None

    def _wait_for_peers(self) -> None:
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
                    down, failed = self._peer_states()
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

    def _snapshot(self) -> dict[str, str]:
        """Each peer's incarnation now: a peer whose incarnation changes has rebooted (one
        whose status cannot be read now is still seen when it is down)."""
        snapshot = {}
        for peer in self.settings.other_nodes:
            document = self._peer_or_unknown(peer)
            if document is not None:
                snapshot[peer] = document.incarnation
        return snapshot

    def _run_code(self, prepared: Prepared) -> tuple[Outcome, dict[str, str]]:
        snapshot = self._snapshot()
        secrets = self.services.secrets()
        self.starts += 1
        self.board.attempt = self.starts
        command = job_command(
            self.settings,
            self.services.environment,
            prepared.python,
            prepared.code_dir,
            prepared.state_dir,
            secrets,
            prepared.user,
            prepared.metric_file,
        )
        job = self.settings.job
        assert job is not None
        self.log(f"starting the job ({job.mode}): {' '.join(job.trainer_args)}")
        clock = self.services.clock
        # Does the code join the cluster (listen on this node's TF_CONFIG port)? Warned if not.
        watch = cluster_port_watch(self.settings, self.board, self.services.listening, self.services.timings, self.log)
        if watch is not None:
            watch.start(clock.monotonic())
        child = self.services.launcher.start(command)
        started = clock.monotonic()
        broken: list[str] = []
        next_copy = started + self.services.timings.metric_copy

        def done() -> bool:
            nonlocal next_copy
            if watch is not None:
                watch.look(clock.monotonic())
            if child.poll() is not None:
                return True
            if clock.monotonic() >= next_copy:
                # An intermediate report: a tuning process may stop the trial early on it.
                next_copy = clock.monotonic() + self.services.timings.metric_copy
                self.copy_metrics()
            lost = self._broken_peer(snapshot, started)
            if lost is not None:
                broken.append(lost)
            return lost is not None

        try:
            self._supervised(done)
        except Ended:
            child.stop()
            raise
        if broken:
            self.log(f"{broken[0]}: ending the job's code, which cannot train without it")
            return Outcome(child.stop(self.services.timings.peer_down_grace), lost=broken[0]), snapshot
        code = child.poll()
        assert code is not None
        if watch is not None:
            watch.end(clock.monotonic(), code)
        return Outcome(code), snapshot

    def _broken_peer(self, snapshot: dict[str, str], started: float) -> str | None:
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

    def _lost_peer(self, snapshot: dict[str, str]) -> str | None:
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
                if document is not None and document.state == STATES.failed and document.moment > self.started_at:
                    return None
            if clock.monotonic() >= deadline:
                return None
            self.duties.tick()
            clock.sleep(TICK_SECONDS)
