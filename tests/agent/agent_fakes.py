"""Stand-ins for the node agent's world, for tests that run its state machine in milliseconds:
a clock whose sleep advances time and fires scheduled events, a bucket in memory, children
that exit after a scripted time, and a recorder of releases.

They implement the same small interfaces the agent's real parts do (Board's storage, the
launcher, the clock); the agent's own code runs unchanged on top of them.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from trainstack_agent.board import Board
from trainstack_agent.cloud import CloudError, TooLarge, Unavailable
from trainstack_agent.environment import Prepared
from trainstack_agent.job import JobCommand
from trainstack_agent.node import NodeAgent
from trainstack_agent.runend import RunEnd
from trainstack_agent.services import Services
from trainstack_agent.settings import JobSettings, NodeSettings, PythonSettings
from trainstack_agent.timings import Timings
from trainstack_contract import tf_cluster
from trainstack_contract import tf_config as contract_tf_config
from trainstack_contract.lifecycle import JobState
from trainstack_contract.status import StatusDocument, first_status, format_time

BUCKET = "gs://test-bucket"
JOB_DIR = f"{BUCKET}/jobs/train"
EPOCH = datetime(2026, 11, 23, 10, 0, 0, tzinfo=UTC)


class FakeClock:
    """Monotonic seconds from 0; ``sleep`` advances them and fires the events scheduled up to
    the new time, in order. ``utc()`` is the wall clock that goes with it."""

    def __init__(self) -> None:
        self.now = 0.0
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self.slept = 0.0

    def monotonic(self) -> float:
        return self.now

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (when, next(self._order), action))

    def sleep(self, seconds: float) -> None:
        target = self.now + seconds
        while self._events and self._events[0][0] <= target:
            when, _, action = heapq.heappop(self._events)
            self.now = max(self.now, when)
            action()
        self.now = target
        self.slept += seconds
        # A runaway loop shows as a failure, not a hung test.
        assert self.now < 10 * 86400, "the fake clock ran for ten days: a loop that never ends"

    def utc(self) -> datetime:
        return EPOCH + timedelta(seconds=self.now)

    def utc_text(self) -> str:
        return format_time(self.utc())


class MemoryStorage:
    """A bucket in memory, by URI; ``fail_writes`` makes every write raise as an outage would,
    and ``read_outage`` (when set) says which reads end as the real client's give-up does
    (:class:`Unavailable`, after its retries)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.writes: list[str] = []
        self.fail_writes = False
        self.read_outage: Callable[[str], bool] | None = None
        self.failed_reads: list[str] = []

    def read(self, uri: str, max_bytes: int) -> bytes | None:
        if self.read_outage is not None and self.read_outage(uri):
            self.failed_reads.append(uri)
            raise Unavailable(f"GET {uri}: no answer after 6 attempts (HTTP 503 Service Unavailable)")
        data = self.objects.get(uri)
        if data is not None and len(data) > max_bytes:
            raise TooLarge(f"GET {uri}: answer larger than {max_bytes} bytes")
        return data

    def write(self, uri: str, data: bytes, content_type: str = "application/json") -> None:
        if self.fail_writes:
            raise CloudError(f"POST {uri}: HTTP 503")
        self.objects[uri] = data
        self.writes.append(uri)

    def create(self, uri: str, data: bytes) -> bool:
        """As Cloud Storage's ``ifGenerationMatch=0``: written only if absent."""
        if uri in self.objects:
            return False
        self.write(uri, data)
        return True

    def download(self, uri: str, destination: Path, max_bytes: int) -> str:
        data = self.objects.get(uri)
        if data is None:
            raise CloudError(f"{uri} does not exist")
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(data)
        return hashlib.sha256(data).hexdigest()


class FakeInstances:
    """Compute Engine as the chief sees it: a status per instance (an unknown one cannot be
    read), start calls recorded with the time; ``on_start`` runs after each recorded call. Each
    status call takes ``call_seconds`` of the clock (an API that answers slowly, or not at all
    until the call's timeout)."""

    def __init__(self) -> None:
        self.statuses: dict[str, str] = {}
        self.starts: list[tuple[float, str]] = []
        self.start_fails = False
        self.clock: FakeClock | None = None
        self.on_start: Callable[[str], None] | None = None
        self.call_seconds = 0.0
        self.status_calls: list[tuple[float, str]] = []

    def status(self, instance: str) -> str:
        if self.clock is not None:
            self.status_calls.append((self.clock.now, instance))
            self.clock.sleep(self.call_seconds)
        if instance not in self.statuses:
            raise CloudError(f"GET {instance}: HTTP 503")
        return self.statuses[instance]

    def start(self, instance: str) -> None:
        assert self.clock is not None
        self.starts.append((self.clock.now, instance))
        if self.start_fails:
            raise CloudError(f"POST {instance}/start: HTTP 503")
        if self.on_start is not None:
            self.on_start(instance)


@dataclass
class FakeChild:
    """The job's code: exits with ``code`` once the clock reaches ``exits_at``."""

    clock: FakeClock
    exits_at: float
    code: int
    stopped: bool = False

    def poll(self) -> int | None:
        if self.stopped:
            return -15
        return self.code if self.clock.now >= self.exits_at else None

    def stop(self, grace: float = 10.0) -> int:
        if self.poll() is None:
            self.stopped = True
        return -15


@dataclass
class FakeLauncher:
    """Starts the scripted runs in order: (seconds it runs, exit code), one per start."""

    clock: FakeClock
    runs: list[tuple[float, int]]
    started: list[JobCommand] = field(default_factory=list)
    children: list[FakeChild] = field(default_factory=list)
    stopped_all: int = 0
    on_start: Callable[[int], None] | None = None
    # Whether a stop_all said no child may start after it (the agent ending).
    closed: bool = False

    def start(self, command: JobCommand) -> FakeChild:
        assert not self.closed, "a child started after stop_all closed the launcher"
        seconds, code = self.runs[len(self.started)] if len(self.started) < len(self.runs) else self.runs[-1]
        self.started.append(command)
        child = FakeChild(self.clock, self.clock.now + seconds, code)
        self.children.append(child)
        if self.on_start is not None:
            self.on_start(len(self.started))
        return child

    def stop_all(self, close: bool = True) -> None:
        self.stopped_all += 1
        self.closed = self.closed or close
        for child in self.children:
            child.stop()


def settings(
    node: str = "chief",
    peers: tuple[str, ...] = ("chief", "worker-0"),
    max_restarts: int = 2,
    peer_timeout_seconds: int = 600,
    heartbeat_seconds: int = 60,
    on_finish: str = "stop",
    recover: tuple[tuple[str, str], ...] = (),
    with_job: bool = True,
    tf_port: int | None = None,
) -> NodeSettings:
    """``tf_port``: TF_CONFIG's cluster names every node at a loopback address with this port
    (else the cluster is empty); the node is task 0 of its role."""
    role = "chief" if node == "chief" else node.rsplit("-", 1)[0]
    job = JobSettings("package", JOB_DIR, ("--epochs", "2"), module="trainer.task", code=None) if with_job else None
    tf_config = '{"cluster": {}, "task": {"type": "chief", "index": 0}}' if len(peers) > 1 else None
    if tf_port is not None and len(peers) > 1:
        members = [(peer.rsplit("-", 1)[0] if peer != "chief" else "chief", f"127.0.0.1:{tf_port}") for peer in peers]
        tf_config = contract_tf_config(tf_cluster(members), role, 0)
    return NodeSettings(
        kind="cluster",
        node=node,
        role=role,
        index=0,
        bucket=BUCKET,
        on_finish=on_finish,
        heartbeat_seconds=heartbeat_seconds,
        peer_timeout_seconds=peer_timeout_seconds,
        gpu_count=0,
        python=PythonSettings(None, False),
        job=job,
        tf_config=tf_config,
        peers=peers,
        max_restarts=max_restarts,
        recover=recover,
    )


@dataclass
class World:
    """One node's agent over the fakes, with what it did recorded."""

    clock: FakeClock
    storage: MemoryStorage
    launcher: FakeLauncher
    releases: list[str]
    log: list[str]
    agent: NodeAgent
    board: Board
    preempted: list[bool]

    def status(self, node: str) -> StatusDocument | None:
        data = self.storage.objects.get(f"{JOB_DIR}/status/{node}.json")
        return None if data is None else StatusDocument.from_json(data)

    def job_status(self) -> StatusDocument | None:
        data = self.storage.objects.get(f"{JOB_DIR}/status/job.json")
        return None if data is None else StatusDocument.from_json(data)

    def put_status(self, node: str, state: str, incarnation: str = "aaaa", reason: str | None = None) -> None:
        """A peer's agent writes its status now."""
        document = first_status(node, state, time=self.clock.utc_text(), incarnation=incarnation, reason=reason)
        self.storage.objects[f"{JOB_DIR}/status/{node}.json"] = document.to_json().encode()

    def peers_running(self, node_settings: NodeSettings) -> None:
        """Every other node's agent has recorded RUNNING, as each does before it prepares."""
        for peer in node_settings.other_nodes:
            self.put_status(peer, JobState.RUNNING)

    def put_job_status(self, state: str, peers_down: tuple[str, ...] = ()) -> None:
        document = first_status("chief", state, time=self.clock.utc_text(), incarnation="cccc")
        document = document.then(state, time=document.time, incarnation="cccc", attempt=0, peers_down=peers_down)
        self.storage.objects[f"{JOB_DIR}/status/job.json"] = document.to_json().encode()


def world(
    node_settings: NodeSettings,
    runs: list[tuple[float, int]],
    prepare: Callable[[], Prepared] | None = None,
    recovery_factory: Callable[[Board, FakeClock, Callable[[str], None]], object] | None = None,
    timings: Timings | None = None,
    listening: Callable[[int], bool | None] | None = None,
    run_end: RunEnd | None = None,
) -> World:
    clock = FakeClock()
    storage = MemoryStorage()
    launcher = FakeLauncher(clock, runs)
    releases: list[str] = []
    log: list[str] = []
    preempted = [False]
    board = Board(storage, JOB_DIR, node_settings.node, "1111", now=clock.utc_text)  # type: ignore[arg-type]
    recovery = recovery_factory(board, clock, log.append) if recovery_factory else None
    services = Services(
        board=board,
        launcher=launcher,
        prepare=prepare or (lambda: Prepared(Path("/state/venv/bin/python"), Path("/state/code/x"), Path("/state"))),
        ready=lambda: log.append("ready"),
        secrets=dict,
        release=releases.append,
        preempted=lambda: preempted[0],
        recovery=recovery,  # type: ignore[arg-type]
        clock=clock,
        log=log.append,
        environment={},
        timings=timings or Timings(),
        # No test here reads this machine's /proc by accident: nothing listens unless told.
        listening=listening or (lambda port: False),
        run_end=run_end,
    )
    agent = NodeAgent(node_settings, services, clock.utc())
    return World(clock, storage, launcher, releases, log, agent, board, preempted)


def running(state: str) -> bool:
    return state == JobState.RUNNING
