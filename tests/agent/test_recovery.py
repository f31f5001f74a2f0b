"""The chief's recovery of preempted Spot peers: who is started, when again, and when never."""

from __future__ import annotations

import pytest

from agent_fakes import JOB_DIR, FakeClock, MemoryStorage
from trainstack_agent.board import Board
from trainstack_agent.cloud import CloudError
from trainstack_agent.recovery import TERMINATED, SpotRecovery
from trainstack_agent.timings import Timings
from trainstack_contract import STATES
from trainstack_contract.status import first_status


class FakeInstances:
    """Compute Engine as the chief sees it: a status per instance, start calls recorded."""

    def __init__(self) -> None:
        self.statuses: dict[str, str] = {}
        self.starts: list[tuple[float, str]] = []
        self.start_fails = False
        self.clock: FakeClock | None = None

    def status(self, instance: str) -> str:
        if instance not in self.statuses:
            raise CloudError(f"GET {instance}: HTTP 503")
        return self.statuses[instance]

    def start(self, instance: str) -> None:
        assert self.clock is not None
        self.starts.append((self.clock.now, instance))
        if self.start_fails:
            raise CloudError(f"POST {instance}/start: HTTP 503")


def setup(max_restarts: int = 3) -> tuple[SpotRecovery, FakeInstances, MemoryStorage, FakeClock, list[str]]:
    clock, storage, instances, log = FakeClock(), MemoryStorage(), FakeInstances(), []
    instances.clock = clock
    board = Board(storage, JOB_DIR, "chief", "1111", now=clock.utc_text)  # type: ignore[arg-type]
    recovery = SpotRecovery((("worker-0", "s-worker-0"),), max_restarts, instances, board, clock.monotonic, log.append)
    return recovery, instances, storage, clock, log


def peer_status(storage: MemoryStorage, clock: FakeClock, state: str) -> None:
    document = first_status("worker-0", state, time=clock.utc_text(), incarnation="aaaa")
    storage.objects[f"{JOB_DIR}/status/worker-0.json"] = document.to_json().encode()


@pytest.mark.parametrize("state", [STATES.preempted, STATES.running])
def test_a_stopped_peer_that_was_at_work_is_started_again(state: str) -> None:
    recovery, instances, storage, clock, _ = setup()
    instances.statuses["s-worker-0"] = TERMINATED
    peer_status(storage, clock, state)
    assert recovery.look() is None
    assert instances.starts == [(0.0, "s-worker-0")]


@pytest.mark.parametrize("state", [STATES.succeeded, STATES.failed, STATES.interrupted])
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
    peer_status(storage, clock, STATES.preempted)
    recovery.look()
    assert instances.starts == []


def test_the_start_call_is_repeated_with_doubling_back_off_while_the_peer_stays_stopped() -> None:
    recovery, instances, storage, clock, _ = setup()
    instances.statuses["s-worker-0"] = TERMINATED
    peer_status(storage, clock, STATES.preempted)
    for _ in range(4000):
        recovery.look()
        clock.sleep(1.0)
    times = [when for when, _ in instances.starts]
    gaps = [round(b - a) for a, b in zip(times, times[1:], strict=False)]
    first, last = Timings().start_backoff
    assert gaps[:5] == [first, first * 2, first * 4, first * 8, first * 16]
    assert max(gaps) == last and set(gaps[5:]) == {last}


def test_a_failed_start_call_is_retried_with_back_off_too() -> None:
    recovery, instances, storage, clock, log = setup()
    instances.statuses["s-worker-0"] = TERMINATED
    instances.start_fails = True
    peer_status(storage, clock, STATES.preempted)
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
        peer_status(storage, clock, STATES.preempted)
        reasons += [recovery.look(), recovery.look()]
        clock.sleep(5.0)
    assert reasons[:4] == [None] * 4
    assert reasons[4] == "worker-0 was preempted 3 times, more than cluster.max_restarts (2)"


def test_a_peer_preempted_again_before_it_could_say_so_still_counts() -> None:
    """Its status is RUNNING from its last boot, with a time of its own: a new outage."""
    recovery, instances, storage, clock, _ = setup(max_restarts=1)
    instances.statuses["s-worker-0"] = TERMINATED
    peer_status(storage, clock, STATES.preempted)
    assert recovery.look() is None
    clock.sleep(60.0)
    peer_status(storage, clock, STATES.running)
    assert recovery.look() == "worker-0 was preempted 2 times, more than cluster.max_restarts (1)"


def test_an_unreadable_instance_is_skipped_and_said() -> None:
    recovery, instances, _, _, log = setup()
    assert recovery.look() is None
    assert instances.starts == [] and any("could not read the status of s-worker-0" in line for line in log)


def test_every_peer_is_looked_at_whatever_the_ones_before_it_are() -> None:
    clock, storage, instances, log = FakeClock(), MemoryStorage(), FakeInstances(), []
    instances.clock = clock
    board = Board(storage, JOB_DIR, "chief", "1111", now=clock.utc_text)  # type: ignore[arg-type]
    peers = tuple((f"worker-{i}", f"s-worker-{i}") for i in range(4))
    recovery = SpotRecovery(peers, 3, instances, board, clock.monotonic, log.append)
    # worker-0's instance cannot be read, worker-1 is up, worker-2 stopped at the end of its
    # work; only worker-3 was preempted.
    instances.statuses.update({"s-worker-1": "RUNNING", "s-worker-2": TERMINATED, "s-worker-3": TERMINATED})
    for node, state in (("worker-2", STATES.succeeded), ("worker-3", STATES.preempted)):
        document = first_status(node, state, time=clock.utc_text(), incarnation="aaaa")
        storage.objects[f"{JOB_DIR}/status/{node}.json"] = document.to_json().encode()
    assert recovery.look() is None
    assert instances.starts == [(0.0, "s-worker-3")]
