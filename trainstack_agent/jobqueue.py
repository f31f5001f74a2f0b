"""A standing node's job queue: the stack's own job, then every queued job, one after another.

A node whose metadata sets ``trainstack-idle-seconds`` runs, in one boot:

1. the stack's own job (instance metadata), if it has one and it has not ended, as a node
   without a queue does, except that on_finish waits for the end of the queue;
2. then, one after another, the first runnable job of the queue's index
   (``trainstack_contract.queue``): not cancelled, its ``status/job.json`` and this node's own
   status not SUCCEEDED, FAILED or CANCELLED. Each is a whole job (:class:`NodeAgent`): its own
   settings from its spec (checked by the code that checks instance metadata, its code and
   requirements against the spec's sha256s), job directory, TF_CONFIG, status, Spot recovery.
   A one-node job is run by the node that takes it first (``status/taken_by.json``, created
   once), alone: no TF_CONFIG, no peers, its chief; the other nodes pass it by for the jobs
   after it. A whole-cluster job waits until every job before it has ended;
3. with no runnable job, a look at the index every ``queue_poll`` until ``idle_seconds`` have
   passed since the last job ended (or the boot); then on_finish, once.

The node only reads the queue: it writes its own status objects in each job's directory (the
chief also the job's, and the node that takes a one-node job its ``taken_by.json``), never the
index. A spec that fails its checks fails that job alone; an
index that cannot be read is taken as it was last read. A job cancelled while it runs is ended
and recorded CANCELLED; a job that FAILED or was CANCELLED does not stop the queue, but a node
that refused what it was given to run (a digest mismatch) stops its machine, as without a queue.
The ids of the jobs this node is done with are kept in its state directory, so a look reads the
status of one job at most, whatever the queue's history.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from trainstack_agent.board import Board
from trainstack_agent.cloud import CloudError, TooLarge
from trainstack_agent.duties import parse_status
from trainstack_agent.gcs import Storage
from trainstack_agent.jobend import apply_on_finish
from trainstack_agent.node import NodeAgent
from trainstack_agent.outcome import EXIT_ENDED
from trainstack_agent.runend import RunEnd
from trainstack_agent.services import Clock
from trainstack_agent.settings import NodeSettings, SettingsError, is_job_dir, job_from_spec
from trainstack_agent.timings import Timings
from trainstack_contract import CHIEF
from trainstack_contract.lifecycle import DOWN_JOB_STATES, ENDED_JOB_STATES, JobState
from trainstack_contract.queue import (
    INDEX_OBJECT,
    MAX_ENTRIES,
    MAX_INDEX_BYTES,
    MAX_SPEC_BYTES,
    MAX_TAKEN_BY_BYTES,
    TAKEN_BY,
    QueueEntry,
    QueueFormatError,
    QueueIndex,
    queued_job_dir,
    read_spec,
    spec_object,
    taken_by,
    taken_by_bytes,
)
from trainstack_contract.status import StatusDocument, utc_now

# The node's record of the queued jobs it is done with, in its state directory.
DONE_FILE: Final = "queue-done.json"
_DONE_VERSION: Final = 1
_MAX_DONE_BYTES: Final = 64 * 1024


# The job directory of the job this boot runs (or ran last), in the node's state directory: a
# TPU VM's run-time cap records FAILED there, not in the stack's own job's directory.
RUNNING_FILE: Final = "queue-running.json"
_MAX_RUNNING_BYTES: Final = 8192


def record_running(state_dir: Path, job_dir: str) -> None:
    path = state_dir / RUNNING_FILE
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps({"job_dir": job_dir}) + "\n")
    os.replace(temporary, path)


def running_job_dir(state_dir: Path, bucket: str) -> str | None:
    """The job directory :func:`record_running` recorded, if it is one of ``bucket``'s
    (checked as instance metadata's is); None when there is none or it is not."""
    try:
        with (state_dir / RUNNING_FILE).open("rb") as handle:
            document = json.loads(handle.read(_MAX_RUNNING_BYTES + 1))
    except (OSError, ValueError):
        return None
    job_dir = document.get("job_dir") if isinstance(document, dict) else None
    return job_dir if isinstance(job_dir, str) and is_job_dir(job_dir, bucket) else None


class SpecRefused(Exception):
    """A queued job's spec that fails its checks; the message says why."""


def queued_settings(storage: Storage, settings: NodeSettings, entry: QueueEntry, job_dir: str) -> NodeSettings:
    """A queued job's settings from its spec; SpecRefused says why not. Cloud Storage giving
    up raises CloudError: the job is looked at again."""
    uri = f"{settings.bucket}/{spec_object(entry.spec_sha256)}"
    try:
        data = storage.read(uri, MAX_SPEC_BYTES)
    except TooLarge:
        raise SpecRefused(f"the job's spec {uri} is larger than {MAX_SPEC_BYTES} bytes") from None
    if data is None:
        raise SpecRefused(f"the job's spec {uri} does not exist")
    try:
        job = job_from_spec(read_spec(data, entry.spec_sha256), settings.bucket, job_dir)
    except (QueueFormatError, SettingsError) as error:
        raise SpecRefused(f"the job's spec {uri}: {str(error)[:400]}") from None
    if entry.one_node:
        # The job is this node's alone: a single machine, whatever the cluster's shape.
        return replace(settings, job=job, role=CHIEF, index=0, tf_config=None, peers=(), recover=())
    return replace(settings, job=job)


class IndexReader:
    """The queue's index as last read: one that cannot be read (corrupt, oversize, Cloud
    Storage giving up) leaves the last one in force, and is logged once per problem."""

    def __init__(self, storage: Storage, bucket: str, log: Callable[[str], None]) -> None:
        self.storage = storage
        self.uri = f"{bucket}/{INDEX_OBJECT}"
        self.log = log
        self.last = QueueIndex()
        self._problem: str | None = None

    def read(self) -> QueueIndex:
        try:
            data = self.storage.read(self.uri, MAX_INDEX_BYTES)
            index = QueueIndex() if data is None else QueueIndex.from_json(data)
        except (QueueFormatError, CloudError) as error:
            problem = str(error)[:300]
            if problem != self._problem:
                self.log(f"queue: cannot read {self.uri} ({problem}); going on with the queue as last read")
                self._problem = problem
            return self.last
        if self._problem is not None:
            self.log(f"queue: {self.uri} is readable again")
            self._problem = None
        self.last = index
        return index


class DoneJobs:
    """The ids of queued jobs this node need not look at again (ended, cancelled, refused),
    kept in ``path`` across boots; at most the index's entries."""

    def __init__(self, path: Path, log: Callable[[str], None]) -> None:
        self.path = path
        self.ids: set[int] = set()
        try:
            with path.open("rb") as handle:
                document = json.loads(handle.read(_MAX_DONE_BYTES + 1))
            ids = document.get("done") if isinstance(document, dict) else None
            if isinstance(ids, list) and all(isinstance(each, int) and not isinstance(each, bool) for each in ids):
                self.ids = set(ids[:MAX_ENTRIES])
            else:
                log(f"queue: {path} is not a record of finished jobs; looking at every queued job again")
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as error:
            log(f"queue: cannot read {path} ({str(error)[:200]}); looking at every queued job again")

    def __contains__(self, job_id: int) -> bool:
        return job_id in self.ids

    def add(self, job_id: int, index: QueueIndex) -> None:
        """Records ``job_id`` done; ids the index no longer holds are forgotten."""
        self.ids = {entry.id for entry in index.entries if entry.id in self.ids} | {job_id}
        document = {"version": _DONE_VERSION, "done": sorted(self.ids)}
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(document) + "\n")
        os.replace(temporary, self.path)


@dataclass
class QueueServices:
    """What the queue needs from the world; the tests pass stand-ins."""

    storage: Storage
    # A Board on a job directory, in this boot's incarnation.
    board: Callable[[str], Board]
    # A whole job's life on this node: its settings, and what says it was cancelled.
    new_job: Callable[[NodeSettings, Callable[[], str | None] | None], NodeAgent]
    # A node without a job of its own: its environment, ready for a user's shell.
    ready: Callable[[], None]
    release: Callable[[str], None]
    clock: Clock
    log: Callable[[str], None]
    state_dir: Path
    timings: Timings = field(default_factory=Timings)
    # TRAINSTACK_AGENT_TIME_SCALE's factor: idle_seconds scales with it, as every other wait.
    time_scale: float = 1.0
    # After each job this boot ran (its settings), on the main thread: readies the next start.
    between_jobs: Callable[[NodeSettings], None] = lambda ended: None
    # Before on_finish at the end of the idle wait.
    before_release: Callable[[], None] = lambda: None
    # A flex-start node's: when its work ends; it then takes no further job and applies on_finish.
    run_end: RunEnd | None = None
    # The time a node writes when it takes a one-node job.
    utc_now: Callable[[], str] = utc_now


class HolderWatch:
    """Whether the nodes holding one-node jobs elsewhere show signs of life."""

    def __init__(self, settings: NodeSettings, services: QueueServices) -> None:
        self.settings = settings
        self.services = services
        self.log = services.log
        # Each one-node job held elsewhere: its status/job.json as last read, and when that
        # last changed (this node's clock); and the jobs whose holder was found gone, logged once.
        self.seen: dict[str, tuple[bytes | None, float]] = {}
        self.gone: set[str] = set()

    def alive(self, entry: QueueEntry, job_dir: str) -> bool:
        """Whether the node holding a one-node job shows signs of life: it runs the job as
        its chief, its heartbeat rewriting status/job.json, so that object has changed within
        the peer timeout and does not say the holder is down (PREEMPTED or INTERRUPTED). A
        holder preempted or stopped for good must not keep every other node billing while a
        whole-cluster job waits behind its job: the queue resumes when the nodes are started
        again (`trainstack submit` starts them), the holder first resuming its job."""
        board, now = self.services.board(job_dir), self.services.clock.monotonic()
        seen = self.seen.get(job_dir)
        try:
            raw = board.read_raw(board.job_uri)
        except CloudError:
            # Unknown: taken as unchanged, so a Cloud Storage outage ends in the idle wait too.
            raw = None if seen is None else seen[0]
        if seen is None or raw != seen[0]:
            seen = self.seen[job_dir] = (raw, now)
        document = parse_status(raw)
        down = document is not None and document.state in DOWN_JOB_STATES
        timeout = self.settings.peer_timeout_seconds
        if not down and now - seen[1] < timeout:
            self.gone.discard(job_dir)
            return True
        if job_dir not in self.gone:
            self.gone.add(job_dir)
            why = (
                f"its node is {document.state}" if down and document else f"its status has not changed for {timeout} s"
            )
            self.log(
                f"queue: job {entry.id} ({entry.job_dir_name}) runs on another node, but {why}: "
                "the jobs after it wait, and this node counts as idle meanwhile"
            )
        return False


class NextJob:
    """Which job this node runs next: the first of the queue's index it is not done with, not
    cancelled, whose status and this node's own are not SUCCEEDED, FAILED or CANCELLED; a
    one-node job only if this node holds it or takes it now, and a whole-cluster job only once
    every job before it has ended (``waiting`` says when one is held back so)."""

    def __init__(self, settings: NodeSettings, services: QueueServices, done: DoneJobs) -> None:
        self.settings = settings
        self.services = services
        self.log = services.log
        self.done = done
        # The last look found a whole-cluster job waiting for one-node jobs on other nodes.
        self.waiting = False
        # The last problem reading a one-node job's taker, logged once.
        self._holder_problem: str | None = None
        self.holders = HolderWatch(settings, services)

    def _read_status(self, board: Board, uri: str) -> StatusDocument | None:
        """None when absent, or unreadable: the job's own run then records what it cannot read."""
        try:
            return board.read(uri)
        except Exception:  # noqa: BLE001 - unreadable is not ended; the job's run says why
            return None

    def ended(self, job_dir: str) -> bool:
        """Whether the job at ``job_dir`` has ended, for the cluster or for this node."""
        board = self.services.board(job_dir)
        for uri in (board.job_uri, board.node_uri(self.settings.node)):
            document = self._read_status(board, uri)
            if document is not None and document.state in ENDED_JOB_STATES:
                return True
        return False

    def next(self, index: QueueIndex) -> QueueEntry | None:
        """The first runnable job of the index; each one found done is recorded so."""
        self.waiting = False
        elsewhere = alive = False
        for entry in index.entries:
            if entry.id in self.done:
                continue
            job_dir = queued_job_dir(self.settings.bucket, entry.id, entry.name)
            if entry.cancelled is not None:
                self._skip_cancelled(entry, job_dir)
            elif not self.ended(job_dir):
                if not entry.one_node:
                    # Held back while a one-node job before it has not ended; idle (on_finish
                    # after idle_seconds) when no node holding one shows signs of life.
                    self.waiting = elsewhere and alive
                    return None if elsewhere else entry
                holder = self._holder(entry, job_dir)
                if holder == self.settings.node:
                    return entry
                if holder is not None:
                    elsewhere = True
                    alive = self.holders.alive(entry, job_dir) or alive
                    continue
            self.done.add(entry.id, index)
        return None

    def _holder(self, entry: QueueEntry, job_dir: str) -> str | None:
        """The node that holds the one-node job, this one if it takes it now; None when the
        job was refused here (its taken_by record is not one: recorded FAILED); "" when Cloud
        Storage gave up, which counts as another node's hold until the next look."""
        uri = f"{job_dir}/{TAKEN_BY}"
        storage = self.services.storage
        label = f"job {entry.id} ({entry.job_dir_name})"
        try:
            data = storage.read(uri, MAX_TAKEN_BY_BYTES)
            if data is None:
                if storage.create(uri, taken_by_bytes(self.settings.node, self.services.utc_now())):
                    self.log(f"queue: {label} runs on one node: this one took it")
                    return self.settings.node
                data = storage.read(uri, MAX_TAKEN_BY_BYTES)
            return taken_by(data or b"")
        except CloudError as error:
            problem = f"queue: cannot tell which node holds {label} ({str(error)[:300]}); looking again"
            if problem != self._holder_problem:
                self.log(problem)
                self._holder_problem = problem
            return ""
        except QueueFormatError as error:
            reason = f"{label} cannot be run: {error}"
            self.log(f"queue: {reason}")
            board = self.services.board(job_dir)
            board.record(JobState.FAILED, 1, reason, True, self.log)
            return None

    def _skip_cancelled(self, entry: QueueEntry, job_dir: str) -> None:
        """A job cancelled before this node ran it: skipped. One this node had started (and was
        interrupted in) is recorded CANCELLED, by the chief (or the one-node job's node) for
        the job too."""
        board = self.services.board(job_dir)
        own = self._read_status(board, board.node_uri(self.settings.node))
        if own is None or own.state in ENDED_JOB_STATES:
            self.log(f"queue: job {entry.id} ({entry.job_dir_name}) was cancelled: skipping it")
            return
        self.log(f"queue: job {entry.id} ({entry.job_dir_name}) was cancelled while this node was down")
        reason = f"job {entry.id} was cancelled at {entry.cancelled}"
        board.record(JobState.CANCELLED, None, reason, self.settings.is_chief or entry.one_node, self.log)


class JobQueue:
    """One boot of a standing node (``settings.idle_seconds`` set)."""

    def __init__(self, settings: NodeSettings, services: QueueServices) -> None:
        assert settings.idle_seconds is not None
        self.settings = settings
        self.services = services
        self.log = services.log
        self.index = IndexReader(services.storage, settings.bucket, services.log)
        self.done = DoneJobs(services.state_dir / DONE_FILE, services.log)
        self.next_job = NextJob(settings, services, self.done)
        self.idle_limit = settings.idle_seconds * services.time_scale
        # The job running now; None between jobs.
        self.current: NodeAgent | None = None
        self._released = False

    def run(self) -> int:
        """The exit status of the last job this boot ran (0 when none did)."""
        clock, code = self.services.clock, 0
        if self.settings.job is None:
            self.services.ready()
        elif self.next_job.ended(self.settings.job.job_dir):
            self.log(f"queue: job 0 (the stack's own job, {self.settings.job.job_dir}) has ended; not running it again")
        else:
            self.log(f"queue: job 0 (the stack's own job, {self.settings.job.job_dir}) starting")
            node = self.services.new_job(self.settings, None)
            code = self._run(node)
            if node.outcome is not None and node.outcome.refused:
                return code
        last_end, next_idle_log = clock.monotonic(), clock.monotonic()
        what = f"queue: empty for {self.idle_limit:g} s"
        while True:
            run_end = self.services.run_end
            if run_end is not None and clock.monotonic() >= run_end.at:
                what = (
                    "queue: this machine's flex-start run is about to end; queued jobs stay queued for the "
                    "machines a later `pulumi up` creates"
                )
                break
            index = self.index.read()
            entry = self.next_job.next(index)
            if entry is not None:
                queued = self._start(entry, index)
                if queued is not None:
                    code = self._run(queued)
                    if queued.outcome is not None:
                        self.done.add(entry.id, index)
                        if queued.outcome.refused:
                            return code
                    last_end = next_idle_log = clock.monotonic()
                    continue
                if entry.id in self.done:
                    continue
            if self.next_job.waiting:
                # Not idle: a whole-cluster job waits for one-node jobs on other nodes.
                last_end = clock.monotonic()
            idle = clock.monotonic() - last_end
            if idle >= self.idle_limit:
                break
            if not self.next_job.waiting and clock.monotonic() >= next_idle_log:
                self.log(f"queue: empty; idle for {idle:.0f} s of {self.idle_limit:g}")
                next_idle_log = clock.monotonic() + self.services.timings.queue_idle_log
            clock.sleep(self.services.timings.queue_poll)
        self._released = True
        self.services.before_release()
        apply_on_finish(self.settings.on_finish, self.services.release, self.log, what=what)
        return code

    def _run(self, node: NodeAgent) -> int:
        self.current = node
        assert node.settings.job is not None
        record_running(self.services.state_dir, node.settings.job.job_dir)
        try:
            code = node.run()
        finally:
            self.current = None
        if node.outcome is None or not node.outcome.refused:
            self.services.between_jobs(node.settings)
        return code

    def on_termination(self, signal_name: str) -> int:
        """A termination signal: the job running now records why (its next boot resumes it)."""
        node = self.current
        if node is not None:
            return node.on_termination(signal_name)
        if self._released:
            self.log(f"received {signal_name} after on_finish was applied")
        else:
            self.log(f"received {signal_name} between jobs: exiting; the next boot runs the queue again")
        return EXIT_ENDED

    # --- one queued job ------------------------------------------------------------------
    def _start(self, entry: QueueEntry, index: QueueIndex) -> NodeAgent | None:
        """The job's life on this node, ready to run; None when its spec is refused (the job
        is recorded FAILED, and done) or cannot be read now."""
        job_dir = queued_job_dir(self.settings.bucket, entry.id, entry.name)
        label = f"job {entry.id} ({entry.job_dir_name})"
        try:
            settings = queued_settings(self.services.storage, self.settings, entry, job_dir)
        except CloudError as error:
            self.log(f"queue: cannot read the spec of {label} ({str(error)[:300]}); looking again")
            return None
        except SpecRefused as refused:
            self.log(f"queue: {label} refused: {refused}")
            board = self.services.board(job_dir)
            board.record(JobState.FAILED, 1, str(refused), self.settings.is_chief, self.log)
            self.done.add(entry.id, index)
            return None
        self.log(f"queue: {label} starting")
        return self.services.new_job(settings, lambda: self._cancelled(entry))

    def _cancelled(self, entry: QueueEntry) -> str | None:
        """Why the running job ``entry`` ends, when its entry says it was cancelled."""
        now = self.index.read().entry(entry.id)
        if now is None or now.cancelled is None:
            return None
        self.log(f"queue: job {entry.id} cancelled: ending its code")
        return f"job {entry.id} was cancelled at {now.cancelled}"
