"""The chief's recovery of preempted Spot peers: who is started, when again, and when never;
and what a Cloud Storage give-up during a recovery does to the job."""

from __future__ import annotations

import io
import itertools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from http_stand_in import scripted_server

from agent_fakes import JOB_DIR, FakeClock, FakeInstances, MemoryStorage, World, settings, world
from trainstack_agent.agent import Agent
from trainstack_agent.board import Board
from trainstack_agent.boot import spot_recovery
from trainstack_agent.cloud import Http
from trainstack_agent.job import JobCommand
from trainstack_agent.outcome import EXIT_ENDED
from trainstack_agent.processes import JobChild, JobLauncher, Log, Processes, group_running
from trainstack_agent.recovery import TERMINATED, SpotRecovery
from trainstack_agent.timings import Timings
from trainstack_contract.lifecycle import JobState
from trainstack_contract.status import first_status

PROJECT, ZONE = "your-gcp-project", "us-central1-a"


def setup(max_restarts: int = 3) -> tuple[SpotRecovery, FakeInstances, MemoryStorage, FakeClock, list[str]]:
    clock, storage, instances, log = FakeClock(), MemoryStorage(), FakeInstances(), []
    instances.clock = clock
    board = Board(storage, JOB_DIR, "chief", "1111", now=clock.utc_text)  # type: ignore[arg-type]
    recovery = SpotRecovery(
        (("worker-0", "s-worker-0"),), max_restarts, instances, board, clock.monotonic, log.append, unreadable_bound=600
    )
    return recovery, instances, storage, clock, log


def peer_status(storage: MemoryStorage, clock: FakeClock, state: str) -> None:
    document = first_status("worker-0", state, time=clock.utc_text(), incarnation="aaaa")
    storage.objects[f"{JOB_DIR}/status/worker-0.json"] = document.to_json().encode()


@pytest.mark.parametrize("state", [JobState.PREEMPTED, JobState.RUNNING])
def test_a_stopped_peer_that_was_at_work_is_started_again(state: str) -> None:
    recovery, instances, storage, clock, _ = setup()
    instances.statuses["s-worker-0"] = TERMINATED
    peer_status(storage, clock, state)
    assert recovery.look() is None
    assert instances.starts == [(0.0, "s-worker-0")]


@pytest.mark.parametrize("state", [JobState.SUCCEEDED, JobState.FAILED, JobState.INTERRUPTED])
def test_a_peer_that_stopped_at_the_end_of_its_work_or_on_purpose_is_left_alone(state: str) -> None:
    recovery, instances, storage, clock, _ = setup()
    instances.statuses["s-worker-0"] = TERMINATED
    peer_status(storage, clock, state)
    assert recovery.look() is None
    assert instances.starts == []


@pytest.mark.parametrize("status", ["RUNNING", "STOPPING", "PROVISIONING"])
def test_a_peer_that_is_up_or_on_its_way_is_not_started(status: str) -> None:
    recovery, instances, storage, clock, _ = setup()
    instances.statuses["s-worker-0"] = status
    peer_status(storage, clock, JobState.PREEMPTED)
    recovery.look()
    assert instances.starts == []


def test_the_start_call_is_repeated_with_doubling_back_off_while_the_peer_stays_stopped() -> None:
    recovery, instances, storage, clock, _ = setup()
    instances.statuses["s-worker-0"] = TERMINATED
    peer_status(storage, clock, JobState.PREEMPTED)
    for _ in range(4000):
        recovery.look()
        clock.sleep(1.0)
    times = [when for when, _ in instances.starts]
    gaps = [round(b - a) for a, b in itertools.pairwise(times)]
    first, last = Timings().start_backoff
    assert gaps[:5] == [first, first * 2, first * 4, first * 8, first * 16]
    assert max(gaps) == last
    assert set(gaps[5:]) == {last}


def test_a_failed_start_call_is_retried_with_back_off_too() -> None:
    recovery, instances, storage, clock, log = setup()
    instances.statuses["s-worker-0"] = TERMINATED
    instances.start_fails = True
    peer_status(storage, clock, JobState.PREEMPTED)
    for _ in range(100):
        recovery.look()
        clock.sleep(1.0)
    assert [round(when) for when, _ in instances.starts] == [0, 30, 90]
    assert any("the start call for s-worker-0 failed" in line for line in log)


def test_each_preemption_counts_once_and_past_the_bound_the_job_ends() -> None:
    recovery, instances, storage, clock, _ = setup(max_restarts=2)
    instances.statuses["s-worker-0"] = TERMINATED
    reasons = []
    for _ in range(3):
        peer_status(storage, clock, JobState.PREEMPTED)
        reasons += [recovery.look(), recovery.look()]
        clock.sleep(5.0)
    assert reasons[:4] == [None] * 4
    assert reasons[4] == "worker-0 was preempted 3 times, more than cluster.max_restarts (2)"


def test_a_peer_preempted_again_before_it_could_say_so_still_counts() -> None:
    """Its status is RUNNING from its last boot, with a time of its own: a new outage."""
    recovery, instances, storage, clock, _ = setup(max_restarts=1)
    instances.statuses["s-worker-0"] = TERMINATED
    peer_status(storage, clock, JobState.PREEMPTED)
    assert recovery.look() is None
    clock.sleep(60.0)
    peer_status(storage, clock, JobState.RUNNING)
    assert recovery.look() == "worker-0 was preempted 2 times, more than cluster.max_restarts (1)"


def test_an_unreadable_instance_is_skipped_and_said() -> None:
    recovery, instances, _, _, log = setup()
    assert recovery.look() is None
    assert instances.starts == []
    assert any("could not read the status of s-worker-0" in line for line in log)


def test_every_peer_is_looked_at_whatever_the_ones_before_it_are() -> None:
    clock, storage, instances, log = FakeClock(), MemoryStorage(), FakeInstances(), []
    instances.clock = clock
    board = Board(storage, JOB_DIR, "chief", "1111", now=clock.utc_text)  # type: ignore[arg-type]
    peers = tuple((f"worker-{i}", f"s-worker-{i}") for i in range(4))
    recovery = SpotRecovery(peers, 3, instances, board, clock.monotonic, log.append, unreadable_bound=600)
    # worker-0's instance cannot be read, worker-1 is up, worker-2 stopped at the end of its
    # work; only worker-3 was preempted.
    instances.statuses.update({"s-worker-1": "RUNNING", "s-worker-2": TERMINATED, "s-worker-3": TERMINATED})
    for node, state in (("worker-2", JobState.SUCCEEDED), ("worker-3", JobState.PREEMPTED)):
        document = first_status(node, state, time=clock.utc_text(), incarnation="aaaa")
        storage.objects[f"{JOB_DIR}/status/{node}.json"] = document.to_json().encode()
    assert recovery.look() is None
    assert instances.starts == [(0.0, "s-worker-3")]


def test_a_look_at_a_hanging_api_stops_at_its_budget_and_the_next_goes_on_from_there() -> None:
    """Eight Spot peers whose Compute Engine calls each hang for 10 s (the call's timeout): a look
    ends after its budget, so the chief's heartbeat is never held for the calls of every peer,
    and the looks that follow reach the last peer, which is started."""
    clock, storage, instances, log = FakeClock(), MemoryStorage(), FakeInstances(), []
    instances.clock, instances.call_seconds = clock, 10.0
    board = Board(storage, JOB_DIR, "chief", "1111", now=clock.utc_text)  # type: ignore[arg-type]
    peers = tuple((f"worker-{i}", f"s-worker-{i}") for i in range(8))
    recovery = SpotRecovery(peers, 3, instances, board, clock.monotonic, log.append, unreadable_bound=600, budget=30.0)
    # worker-0 to worker-6 cannot be read; worker-7 was preempted.
    instances.statuses["s-worker-7"] = TERMINATED
    document = first_status("worker-7", JobState.PREEMPTED, time=clock.utc_text(), incarnation="aaaa")
    storage.objects[f"{JOB_DIR}/status/worker-7.json"] = document.to_json().encode()
    looks = []
    while not instances.starts:
        began = clock.now
        assert recovery.look() is None
        looks.append((began, clock.now))
        assert len(looks) <= 3, "the last peer was not reached"
    # Each look stopped once 30 s had gone, after the call under way; the third went round to
    # worker-0 again after starting worker-7.
    assert [end - began for began, end in looks] == [30.0, 30.0, 30.0]
    assert [instance for _, instance in instances.status_calls] == [f"s-worker-{i}" for i in (*range(8), 0)]
    assert instances.starts == [(80.0, "s-worker-7")]
    assert "looked at 3 of 8 Spot peers in 30 s; the next look starts with worker-3 (s-worker-3)" in log


def test_the_chiefs_recovery_tries_each_compute_engine_call_once(tmp_path: Path) -> None:
    """The recovery the agent builds sends one request per call, with no retry: the next look
    is the retry, and the chief's heartbeat waits while a look retries."""
    clock = FakeClock()
    instance = f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances/s-worker-0"
    with scripted_server() as server:
        server.answer("/computeMetadata/v1/project/project-id", (200, PROJECT.encode()))
        server.answer("/computeMetadata/v1/instance/zone", (200, f"projects/123/zones/{ZONE}".encode()))
        server.answer(
            "/computeMetadata/v1/instance/service-accounts/default/token",
            (200, json.dumps({"access_token": "token", "expires_in": 3600}).encode()),
        )
        server.answer(instance, (503, b""))
        agent = Agent(
            {
                "TRAINSTACK_METADATA_ROOT": f"{server.root}/computeMetadata/v1",
                "TRAINSTACK_COMPUTE_API": f"{server.root}/compute/v1",
                "TRAINSTACK_STATE_DIR": str(tmp_path),
            },
            http=Http(timeout=5, sleep=clock.sleep),
        )
        log = io.StringIO()
        agent.log = Log(log, journal=False)
        board = Board(MemoryStorage(), JOB_DIR, "chief", "1111", now=clock.utc_text)  # type: ignore[arg-type]
        recovery = spot_recovery(agent, settings(recover=(("worker-0", "s-worker-0"),)), board, Timings())
        assert recovery is not None
        assert recovery.look() is None
    assert [request["path"] for request in server.requests if request["path"].startswith("/compute/")] == [instance]
    assert "could not read the status of s-worker-0 from the Compute Engine API" in log.getvalue()


# --- The chief's whole life while a Spot peer is down and Cloud Storage gives up ----------------


def spot_world(on_finish: str = "stop", peer_timeout_seconds: int = 600) -> tuple[World, FakeInstances]:
    """The chief of a synchronous cluster whose Spot peer worker-0 is preempted at 25 s; a
    start call boots it again, and its agent says RUNNING 20 s later."""
    instances = FakeInstances()
    node_settings = settings(
        recover=(("worker-0", "s-worker-0"),), on_finish=on_finish, peer_timeout_seconds=peer_timeout_seconds
    )

    def recovery(board: Board, clock: FakeClock, log: Callable[[str], None]) -> SpotRecovery:
        return SpotRecovery(
            node_settings.recover,
            node_settings.max_restarts,
            instances,
            board,
            clock.monotonic,
            log,
            unreadable_bound=node_settings.peer_timeout_seconds,
        )

    w = world(node_settings, runs=[(3600.0, 0), (40.0, 0)], recovery_factory=recovery)
    instances.clock = w.clock
    instances.statuses["s-worker-0"] = "RUNNING"
    w.put_status("worker-0", JobState.RUNNING, incarnation="aaaa")

    def preempt() -> None:
        w.put_status("worker-0", JobState.PREEMPTED, incarnation="aaaa")
        instances.statuses["s-worker-0"] = TERMINATED

    def boot(instance: str) -> None:
        instances.statuses[instance] = "RUNNING"
        w.clock.at(w.clock.now + 20.0, lambda: w.put_status("worker-0", JobState.RUNNING, incarnation="bbbb"))

    w.clock.at(25.0, preempt)
    instances.on_start = boot
    return w, instances


# Every read of the bucket gives up for 15 s (one give-up of the real client spends its 6
# attempts in about as long): from the preemption, while the chief's code still runs and its
# recovery looks at the stopped peer; or once it has ended its code and waits for the peer.
OUTAGES = {"while the chief trains": (25.0, 40.0), "while the chief waits for the peer": (43.0, 58.0)}


@pytest.mark.parametrize("outage", OUTAGES)
def test_a_storage_give_up_while_a_spot_peer_is_terminated_does_not_fail_the_job(outage: str) -> None:
    """Defect: the chief's read of the stopped peer's status gave up once (the client's
    retries spent) and the whole job was recorded FAILED; the next look succeeds and recovers."""
    w, instances = spot_world()
    begin, end = OUTAGES[outage]
    w.storage.read_outage = lambda uri: begin <= w.clock.now < end
    assert w.agent.run() == 0
    assert any(uri.endswith("/status/worker-0.json") for uri in w.storage.failed_reads)
    assert [instance for _, instance in instances.starts] == ["s-worker-0"]
    assert len(w.launcher.started) == 2
    assert w.launcher.children[0].stopped
    chief, job = w.status("chief"), w.job_status()
    assert chief is not None
    assert chief.state == JobState.SUCCEEDED
    assert job is not None
    assert job.state == JobState.SUCCEEDED
    assert any("could not read" in line and "worker-0" in line for line in w.log)


@pytest.mark.parametrize("on_finish", ["stop", "keep"])
def test_a_peers_status_that_stays_unreadable_ends_the_job_within_the_bound(on_finish: str) -> None:
    """Retried, but not forever: the chief cannot tell a preempted peer from one that ended
    its work, so it does not start it, and ends the job once the peer timeout has passed."""
    w, instances = spot_world(on_finish=on_finish, peer_timeout_seconds=300)
    w.storage.read_outage = lambda uri: w.clock.now >= 25.0
    assert w.agent.run() == EXIT_ENDED
    assert instances.starts == []
    assert w.clock.now <= 25.0 + 300.0 + 15.0
    chief = w.status("chief")
    assert chief is not None
    assert chief.state == JobState.FAILED
    assert "could not read the status of worker-0 for 300 s" in (chief.reason or "")
    assert w.launcher.children[0].stopped
    assert w.releases == ([] if on_finish == "keep" else ["stop"])


_TRAINER = (
    "import os, subprocess, sys, time\n"
    "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "open(sys.argv[1], 'w').write(f'{os.getpid()} {worker.pid}')\n"
    "time.sleep(600)\n"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (ended, not yet reaped by its parent) runs nothing.
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] if Path(f"/proc/{pid}").exists() else "X"
    return state not in ("Z", "X")


class _RealTrainer:
    """The agent's own launcher (a process group per start), running a stand-in trainer that
    starts a worker of its own, instead of the job's module."""

    def __init__(self, pids: Path) -> None:
        self.pids = pids
        self.launcher = JobLauncher(Processes(Log(io.StringIO(), journal=False), stop_grace=2.0))

    def start(self, command: JobCommand) -> JobChild:
        argv = (sys.executable, "-c", _TRAINER, str(self.pids))
        child = self.launcher.start(JobCommand(argv, dict(os.environ), self.pids.parent))
        deadline = time.monotonic() + 60
        while not (self.pids.exists() and " " in self.pids.read_text()):
            assert time.monotonic() < deadline, "the stand-in trainer did not start"
            assert child.poll() is None, "the stand-in trainer did not start"
            time.sleep(0.05)
        return child

    def stop_all(self, close: bool = True) -> None:
        self.launcher.stop_all(close)

    def running(self) -> list[int]:
        return [pid for pid in (int(each) for each in self.pids.read_text().split()) if _alive(pid)]


class _BrokenRecovery:
    """A look at the Spot peers that fails in a way nobody planned for."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def look(self) -> str | None:
        if self.clock.now >= 30.0:
            raise RuntimeError("an error nobody planned for")
        return None


@pytest.mark.parametrize("on_finish", ["keep", "stop"])
def test_a_job_recorded_failed_leaves_no_job_process_running_whatever_on_finish_says(
    tmp_path: Path, on_finish: str
) -> None:
    """Defect: an unexpected error while the job's code ran recorded FAILED, and with
    on_finish=keep the code went on running on the kept machine. Here the code is a real
    process group: a trainer and a worker it started."""
    trainer = _RealTrainer(tmp_path / "pids")
    node_settings = settings(recover=(("worker-0", "s-worker-0"),), on_finish=on_finish)
    w = world(node_settings, runs=[(3600.0, 0)], recovery_factory=lambda board, clock, log: _BrokenRecovery(clock))
    w.agent.services.launcher = trainer
    w.put_status("worker-0", JobState.RUNNING)
    try:
        assert w.agent.run() == 1
        chief = w.status("chief")
        assert chief is not None
        assert chief.state == JobState.FAILED
        assert "an error nobody planned for" in (chief.reason or "")
        assert trainer.running() == []
        assert w.releases == ([] if on_finish == "keep" else ["stop"])
    finally:
        trainer.stop_all()


def test_a_stopped_group_has_no_process_running_once_stop_returns(tmp_path: Path) -> None:
    # The leader and a worker it started; stop returns only once neither runs (a zombie left
    # for its reaper runs nothing).
    trainer = _RealTrainer(tmp_path / "pids")
    child = trainer.start(JobCommand(("unused",), {}, tmp_path))
    leader = child.child.popen.pid
    assert group_running(leader)
    assert len(trainer.running()) == 2
    child.stop(grace=0.0)
    assert not group_running(leader)
    assert trainer.running() == []
    trainer.stop_all()
