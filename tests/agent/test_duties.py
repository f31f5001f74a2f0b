"""A node's periodic duties (trainstack_agent.duties.Duties): each on its own interval, and a
Cloud error in one neither stops the others nor that duty's next run."""

from __future__ import annotations

from agent_fakes import FakeClock, settings, world
from trainstack_agent.board import Board
from trainstack_agent.cloud import CloudError
from trainstack_agent.timings import Timings
from trainstack_contract.lifecycle import JobState


class FailingRecovery:
    """A Spot recovery whose every look meets an error it does not handle itself."""

    def __init__(self) -> None:
        self.looks = 0

    def look(self) -> str | None:
        self.looks += 1
        raise CloudError("GET instances/worker-0: HTTP 500")


def test_a_duty_that_fails_is_logged_and_runs_again_while_the_heartbeat_goes_on() -> None:
    recovery = FailingRecovery()

    def recovery_factory(board: Board, clock: FakeClock, log: object) -> FailingRecovery:
        return recovery

    node = settings(recover=(("worker-0", "spot"),), heartbeat_seconds=60)
    timings = Timings()
    w = world(node, runs=[], recovery_factory=recovery_factory, timings=timings)
    w.peers_running(node)
    duties = w.agent.duties
    duties.tick()
    heartbeats = w.storage.writes.count(w.board.job_uri)
    assert recovery.looks == 1
    assert any(line.startswith("recover Spot peers: GET instances/worker-0: HTTP 500") for line in w.log), w.log
    job = w.job_status()
    assert job is not None
    assert job.state == JobState.RUNNING
    # Before the recovery's interval: neither it nor the heartbeat runs again.
    w.clock.sleep(min(timings.recover_poll, 60) - 1)
    duties.tick()
    assert (recovery.looks, w.storage.writes.count(w.board.job_uri)) == (1, heartbeats)
    # Past both intervals each runs again, the failing one included.
    w.clock.sleep(max(timings.recover_poll, 60))
    duties.tick()
    assert recovery.looks == 2
    assert w.storage.writes.count(w.board.job_uri) == heartbeats + 1
