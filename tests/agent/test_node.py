"""The node's life, run on fakes (clock, bucket, children): every decision the agent makes about
preparing, waiting, restarting and finishing, in milliseconds."""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from agent_fakes import JOB_DIR, World, settings, world
from trainstack_agent.artifacts import DigestMismatch
from trainstack_agent.cloud import CloudError
from trainstack_agent.environment import Prepared
from trainstack_agent.outcome import EXIT_ENDED
from trainstack_agent.runend import RunEnd
from trainstack_agent.secrets import SecretError
from trainstack_agent.timings import Timings
from trainstack_agent.training import restart_limit
from trainstack_contract.lifecycle import JobState
from trainstack_contract.status import first_status


def failed_reason(w: World, node: str = "chief") -> str:
    """The reason the node's status gives; the status must be there and FAILED."""
    own = w.status(node)
    assert own is not None
    assert own.state == JobState.FAILED
    return own.reason or ""


def assert_failed_before_its_code_started(w: World, words: str) -> None:
    """The agent fails the job with ``words`` in its reason, starts no code and stops the machine."""
    assert w.agent.run() == 1
    assert words in failed_reason(w)
    assert w.launcher.started == []
    assert w.releases == ["stop"]


def test_a_job_that_succeeds_records_running_then_succeeded_and_releases_once() -> None:
    w = world(settings(), runs=[(30.0, 0)])
    assert w.agent.run() == 0
    chief = w.status("chief")
    assert chief is not None
    assert chief.state == JobState.SUCCEEDED
    assert chief.exit_code == 0
    assert [entry.state for entry in chief.history] == [JobState.RUNNING, JobState.SUCCEEDED]
    job = w.job_status()
    assert job is not None
    assert job.state == JobState.SUCCEEDED
    assert w.releases == ["stop"]
    assert len(w.launcher.started) == 1


def test_the_job_gets_its_directory_arguments_and_tf_config() -> None:
    w = world(settings(), runs=[(1.0, 0)])
    w.agent.run()
    [command] = w.launcher.started
    assert command.argv[1:] == ("-m", "trainer.task", "--job-dir", JOB_DIR, "--epochs", "2")
    assert command.env["TF_CONFIG"].startswith('{"cluster"')
    assert command.env["AIP_MODEL_DIR"] == f"{JOB_DIR}/model"
    assert command.env["PYTHONPATH"] == "/state/code/x"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("--note", "two words"), "starting the job (package): --note 'two words'"),
        ((), "starting the job (package) (no arguments)"),
    ],
)
def test_the_log_names_the_jobs_arguments_as_a_shell_would_read_them(args: tuple[str, ...], line: str) -> None:
    base = settings()
    assert base.job is not None
    w = world(replace(base, job=replace(base.job, trainer_args=args)), runs=[(1.0, 0)])
    assert w.agent.run() == 0
    assert line in w.log


def test_a_job_that_already_succeeded_is_not_trained_again_but_on_finish_applies() -> None:
    w = world(settings(), runs=[(1.0, 0)])
    w.put_job_status(JobState.SUCCEEDED)
    assert w.agent.run() == 0
    assert w.launcher.started == []
    assert w.releases == ["stop"]
    assert any("already SUCCEEDED" in line for line in w.log)


@pytest.mark.parametrize(("node", "on_finish"), [("chief", "stop"), ("worker-0", "delete")])
def test_an_oversize_job_status_at_boot_records_failed_naming_it_and_applies_on_finish(
    node: str, on_finish: str
) -> None:
    """Defect: a status/job.json over 256 KiB ended the agent in a traceback before it
    recorded anything; the VM idled (and billed) until max_run_hours."""
    w = world(settings(node=node, on_finish=on_finish), runs=[(1.0, 0)])
    w.storage.objects[f"{JOB_DIR}/status/job.json"] = b" " * (256 * 1024 + 1)
    assert w.agent.run() == 1
    own = w.status(node)
    assert own is not None
    assert own.state == JobState.FAILED
    assert own.exit_code == 1
    assert own.reason is not None
    assert f"{JOB_DIR}/status/job.json" in own.reason
    assert "larger than" in own.reason
    assert w.launcher.started == []
    assert w.releases == [on_finish]


@pytest.mark.parametrize(
    "error",
    [CloudError("no answer after 6 attempts (HTTP 503)"), PermissionError(13, "Permission denied")],
    ids=["cloud-storage-gave-up", "unreadable-file"],
)
def test_a_job_status_that_cannot_be_read_at_boot_records_failed_and_applies_on_finish(error: Exception) -> None:
    """Cloud Storage giving up, or (in a local run) a status file this user cannot read."""
    w = world(settings(), runs=[(1.0, 0)])
    read = w.storage.read

    def give_up(uri: str, max_bytes: int) -> bytes | None:
        if uri.endswith("/status/job.json"):
            raise error
        return read(uri, max_bytes)

    w.storage.read = give_up  # type: ignore[method-assign]
    assert w.agent.run() == 1
    assert w.launcher.started == []
    assert w.releases == ["stop"]
    own = w.status("chief")
    assert own is not None
    assert own.state == JobState.FAILED
    assert own.reason is not None
    assert own.reason.startswith(f"cannot read the job's status {JOB_DIR}/status/job.json")


@pytest.mark.parametrize("on_finish", ["stop", "delete"])
def test_on_finish_is_the_action_released(on_finish: str) -> None:
    w = world(settings(on_finish=on_finish), runs=[(1.0, 0)])
    w.agent.run()
    assert w.releases == [on_finish]


def test_keep_releases_nothing() -> None:
    w = world(settings(on_finish="keep"), runs=[(1.0, 0)])
    w.agent.run()
    assert w.releases == []


def test_a_failure_with_no_lost_peer_is_failed_after_the_settle_window_and_not_restarted() -> None:
    w = world(settings(), runs=[(30.0, 3)])
    w.put_status("worker-0", JobState.RUNNING)
    assert w.agent.run() == 3
    chief = w.status("chief")
    assert chief is not None
    assert (chief.state, chief.exit_code) == (JobState.FAILED, 3)
    assert len(w.launcher.started) == 1
    # It looked for a lost peer for the settle window, and no longer.
    assert 30.0 + Timings().peer_settle <= w.clock.now <= 30.0 + Timings().peer_settle + 5
    assert w.releases == ["stop"]


def test_a_single_node_fails_at_once_without_looking_for_peers() -> None:
    w = world(settings(peers=()), runs=[(30.0, 1)])
    assert w.agent.run() == 1
    assert w.clock.now < 30.0 + 3


# A cluster with a parameter server trains asynchronously: the agent leaves the job's code
# running when a worker is lost, and acts on how the code exits.
ASYNC = ("chief", "worker-0", "ps-0")


@pytest.mark.parametrize("exit_code", [1, 75, 137])
def test_any_exit_after_a_peer_was_preempted_restarts_the_code_once_the_peer_is_back(exit_code: int) -> None:
    """Recovery does not depend on this project's exit code: a team's trainer exits 1 with a
    traceback when TensorFlow reports the lost peer."""
    w = world(settings(peers=ASYNC), runs=[(30.0, exit_code), (40.0, 0)])
    w.put_status("worker-0", JobState.RUNNING, incarnation="aaaa")
    # worker-0 is preempted at 25 s, and its next boot writes RUNNING at 90 s.
    w.clock.at(25.0, lambda: w.put_status("worker-0", JobState.PREEMPTED, incarnation="aaaa"))
    w.clock.at(90.0, lambda: w.put_status("worker-0", JobState.RUNNING, incarnation="bbbb"))
    assert w.agent.run() == 0
    assert len(w.launcher.started) == 2
    # The second start waited for the peer to come back.
    assert w.launcher.children[1].exits_at - 40.0 >= 90.0
    chief = w.status("chief")
    assert chief is not None
    assert chief.state == JobState.SUCCEEDED
    assert chief.attempt == 2
    assert any("restarting" in (entry.reason or "") for entry in chief.history)


def test_a_peer_that_rebooted_while_the_code_ran_counts_as_lost_even_when_it_is_up_again() -> None:
    w = world(settings(peers=ASYNC), runs=[(30.0, 1), (10.0, 0)])
    w.put_status("worker-0", JobState.RUNNING, incarnation="aaaa")
    w.clock.at(20.0, lambda: w.put_status("worker-0", JobState.RUNNING, incarnation="bbbb"))
    assert w.agent.run() == 0
    assert len(w.launcher.started) == 2


def test_restarts_after_lost_peers_are_bounded() -> None:
    """A peer lost again and again (it reboots each time) ends the job at the bound."""
    node_settings = settings(peers=ASYNC, max_restarts=1)
    limit = restart_limit(node_settings)
    assert limit == 3
    w = world(node_settings, runs=[(30.0, 1)])
    w.put_status("worker-0", JobState.RUNNING, incarnation="a0")

    def reboot_peer(start: int) -> None:
        w.clock.at(w.clock.now + 10.0, lambda: w.put_status("worker-0", JobState.RUNNING, incarnation=f"b{start}"))

    w.launcher.on_start = reboot_peer
    assert w.agent.run() == 1
    assert len(w.launcher.started) == limit + 1
    assert f"the most this node restarts it ({limit})" in failed_reason(w)


def test_a_peer_that_stays_down_past_the_timeout_fails_the_node() -> None:
    node_settings = settings(peers=ASYNC, peer_timeout_seconds=120)
    w = world(node_settings, runs=[(30.0, 1)])
    w.peers_running(node_settings)
    w.clock.at(10.0, lambda: w.put_status("worker-0", JobState.PREEMPTED))
    assert w.agent.run() == EXIT_ENDED
    assert failed_reason(w) == "worker-0 did not come back within 120 s"
    assert len(w.launcher.started) == 1
    assert w.releases == ["stop"]


def test_a_node_waits_at_boot_for_a_peer_that_is_down() -> None:
    w = world(settings(), runs=[(5.0, 0)])
    w.put_status("worker-0", JobState.INTERRUPTED)
    w.clock.at(50.0, lambda: w.put_status("worker-0", JobState.RUNNING, incarnation="bbbb"))
    assert w.agent.run() == 0
    assert w.launcher.children[0].exits_at >= 50.0 + 5.0


def test_a_node_waiting_at_boot_for_a_peer_ends_when_the_peer_records_failed() -> None:
    w = world(settings(), runs=[(5.0, 0)])
    w.put_status("worker-0", JobState.INTERRUPTED)
    w.clock.at(50.0, lambda: w.put_status("worker-0", JobState.FAILED))
    assert w.agent.run() == EXIT_ENDED
    chief = w.status("chief")
    assert chief is not None
    assert (chief.state, chief.reason) == (JobState.FAILED, "peer worker-0 recorded FAILED")
    assert w.launcher.started == []


def test_a_peer_that_recorded_failed_since_the_start_ends_the_look_for_a_lost_peer_at_once() -> None:
    w = world(settings(), runs=[(30.0, 3)])
    w.put_status("worker-0", JobState.RUNNING)
    w.clock.at(29.0, lambda: w.put_status("worker-0", JobState.FAILED))
    assert w.agent.run() == 3
    assert len(w.launcher.started) == 1
    # No settle window: a FAILED peer is not coming back.
    assert w.clock.now < 30.0 + Timings().peer_settle


@pytest.mark.parametrize("peers", [("chief", "worker-0"), ("chief", "worker-0", "ps-0")], ids=["synchronous", "ps"])
def test_a_peer_that_records_failed_while_the_code_runs_ends_the_chiefs_code_and_the_job(
    peers: tuple[str, ...],
) -> None:
    """Defect: a worker whose code failed at start left the chief's code waiting in
    MultiWorkerMirroredStrategy's barrier for an hour, its machine billing, before the job
    was recorded FAILED."""
    w = world(settings(peers=peers), runs=[(3600.0, 0)])
    w.put_status("worker-0", JobState.RUNNING)
    w.clock.at(20.0, lambda: w.put_status("worker-0", JobState.FAILED, reason="its code exited 1"))
    assert w.agent.run() == EXIT_ENDED
    assert failed_reason(w) == "peer worker-0 recorded FAILED"
    job = w.job_status()
    assert job is not None
    assert (job.state, job.reason) == (JobState.FAILED, "peer worker-0 recorded FAILED")
    assert len(w.launcher.started) == 1
    assert w.launcher.children[0].stopped
    assert w.clock.now < 20.0 + Timings().peer_watch + 15
    assert w.releases == ["stop"]


def test_a_peer_that_records_no_status_within_the_peer_timeout_ends_the_chiefs_code_and_the_job() -> None:
    """A worker whose boot script stopped its machine before the agent ran (a fetch or digest
    failure) writes nothing: the chief's code would wait for it in TensorFlow's barrier."""
    w = world(settings(peer_timeout_seconds=300), runs=[(3600.0, 0)])
    assert w.agent.run() == EXIT_ENDED
    assert failed_reason(w) == "worker-0 recorded no status for this job within 300 s"
    assert w.launcher.children[0].stopped
    assert 300.0 <= w.clock.now < 300.0 + Timings().peer_watch + 15
    assert w.releases == ["stop"]


def test_a_peer_that_records_its_status_late_but_within_the_peer_timeout_is_waited_for() -> None:
    w = world(settings(peer_timeout_seconds=300), runs=[(600.0, 0)])
    w.clock.at(290.0, lambda: w.put_status("worker-0", JobState.RUNNING))
    assert w.agent.run() == 0


def earlier_failed(w: World, peer: str) -> None:
    """What ``peer`` recorded in an earlier attempt of the job: FAILED, two days before."""
    earlier = first_status(peer, JobState.FAILED, time="2026-11-22T10:00:00.000000Z", incarnation="aaaa")
    w.storage.objects[f"{JOB_DIR}/status/{peer}.json"] = earlier.to_json().encode()


def test_a_peers_failed_from_before_this_job_started_does_not_end_the_chiefs_code_once_it_boots_again() -> None:
    w = world(settings(peer_timeout_seconds=300), runs=[(900.0, 0)])
    earlier_failed(w, "worker-0")
    w.clock.at(30.0, lambda: w.put_status("worker-0", JobState.RUNNING, incarnation="bbbb"))
    assert w.agent.run() == 0
    chief = w.status("chief")
    assert chief is not None
    assert chief.state == JobState.SUCCEEDED


def test_a_peer_whose_last_word_is_an_earlier_failed_ends_the_chiefs_code_after_the_peer_timeout() -> None:
    """Defect: the chief, rebooted after a host maintenance longer than the heartbeat timeout,
    resumed the job while its workers had given up on it (FAILED) and stopped: its code waited
    for them in TensorFlow's barrier."""
    w = world(settings(peer_timeout_seconds=300), runs=[(3600.0, 0)])
    earlier_failed(w, "worker-0")
    assert w.agent.run() == EXIT_ENDED
    assert failed_reason(w) == (
        "worker-0 recorded FAILED before this node began the job, and nothing since within 300 s"
    )
    assert 300.0 <= w.clock.now < 300.0 + Timings().peer_watch + 15


def test_a_peer_lost_within_the_settle_window_after_the_codes_exit_still_gets_the_code_restarted() -> None:
    w = world(settings(), runs=[(30.0, 3), (10.0, 0)])
    w.put_status("worker-0", JobState.RUNNING)
    w.clock.at(20.0, lambda: w.put_status("worker-0", JobState.RUNNING))
    w.clock.at(35.0, lambda: w.put_status("worker-0", JobState.PREEMPTED))
    w.clock.at(45.0, lambda: w.put_status("worker-0", JobState.RUNNING, incarnation="bbbb"))
    assert w.agent.run() == 0
    assert len(w.launcher.started) == 2


def test_a_peer_that_first_wrote_its_status_after_the_code_started_and_rebooted_gets_the_code_restarted() -> None:
    """The look at the peers as the code starts can come before a peer's first status (found
    under load: the worker's collective failed only after its preempted peer was back)."""
    w = world(settings(), runs=[(30.0, 3), (10.0, 0)])
    w.clock.at(5.0, lambda: w.put_status("worker-0", JobState.RUNNING))
    w.clock.at(15.0, lambda: w.put_job_status(JobState.RUNNING))

    def preempted_and_back() -> None:
        document = w.status("worker-0")
        assert document is not None
        down = document.then(JobState.PREEMPTED, time=w.clock.utc_text(), incarnation="aaaa", attempt=0)
        back = down.then(JobState.RUNNING, time=w.clock.utc_text(), incarnation="bbbb", attempt=0)
        w.storage.objects[f"{JOB_DIR}/status/worker-0.json"] = back.to_json().encode()

    w.clock.at(20.0, preempted_and_back)
    assert w.agent.run() == 0
    assert len(w.launcher.started) == 2


def test_a_workers_end_is_recorded_as_its_own_and_the_jobs_is_left_to_the_chief() -> None:
    w = world(settings(node="worker-0"), runs=[(30.0, 0)])
    w.put_job_status(JobState.RUNNING)
    for second in range(10, 60, 10):
        w.clock.at(float(second), lambda: w.put_job_status(JobState.RUNNING))
    assert w.agent.run() == 0
    worker = w.status("worker-0")
    assert worker is not None
    assert worker.state == JobState.SUCCEEDED
    assert not any(uri.endswith("/status/job.json") for uri in w.storage.writes)


def test_a_worker_ends_when_the_chief_records_failed() -> None:
    w = world(settings(node="worker-0"), runs=[(3600.0, 0)])
    w.put_job_status(JobState.RUNNING)
    w.clock.at(100.0, lambda: w.put_job_status(JobState.FAILED))
    assert w.agent.run() == EXIT_ENDED
    worker = w.status("worker-0")
    assert worker is not None
    assert (worker.state, worker.reason) == (JobState.FAILED, "the chief recorded the job FAILED")
    assert w.launcher.children[0].stopped
    assert w.clock.now < 100.0 + 15
    assert w.releases == ["stop"]


@pytest.mark.parametrize(
    ("runs_for", "reason", "ended_by_the_node"),
    [
        (3600.0, "the chief recorded the job SUCCEEDED", True),
        (105.0, None, False),
    ],
    ids=["serves-on", "ends-within-the-grace"],
)
def test_after_the_chiefs_success_a_workers_code_gets_a_grace_then_is_ended_and_the_worker_succeeds(
    runs_for: float, reason: str | None, ended_by_the_node: bool
) -> None:
    """Defect: a parameter server or worker of a user's own ParameterServerStrategy code (its
    server.join() never returns) served on after the chief's SUCCEEDED until the heartbeat
    timeout, then recorded FAILED: 10 more minutes of every such machine, and a false failure.
    Code that ends by itself within the grace records its own end."""
    w = world(settings(node="worker-0"), runs=[(runs_for, 0)])
    w.put_job_status(JobState.RUNNING)
    w.clock.at(100.0, lambda: w.put_job_status(JobState.SUCCEEDED))
    assert w.agent.run() == 0
    worker = w.status("worker-0")
    assert worker is not None
    assert (worker.state, worker.reason) == (JobState.SUCCEEDED, reason)
    assert w.launcher.children[0].stopped == ended_by_the_node
    # Ended so, nothing of the job (an install still running) outlives the node's end.
    assert w.launcher.stopped_all == int(ended_by_the_node)
    grace = Timings().chief_end_grace
    # Not before the grace: code that ends with the chief's has its own end recorded.
    assert (w.clock.now >= 100.0 + grace) == ended_by_the_node
    assert w.clock.now < 100.0 + grace + 15
    assert w.releases == ["stop"]


def test_a_failed_left_by_an_earlier_attempt_does_not_end_this_one() -> None:
    w = world(settings(node="worker-0"), runs=[(30.0, 0)])
    earlier = first_status("chief", JobState.FAILED, time="2026-11-22T10:00:00.000000Z", incarnation="cccc")
    w.storage.objects[f"{JOB_DIR}/status/job.json"] = earlier.to_json().encode()
    # The chief's heartbeat goes on, so only the old FAILED could end this node.
    for second in range(10, 60, 10):
        w.clock.at(float(second), lambda: w.put_job_status(JobState.RUNNING))
    assert w.agent.run() == 0


def test_a_worker_ends_when_the_chief_falls_silent() -> None:
    w = world(settings(node="worker-0", peer_timeout_seconds=300), runs=[(3600.0, 0)])
    w.put_job_status(JobState.RUNNING)
    assert w.agent.run() == EXIT_ENDED
    worker = w.status("worker-0")
    assert worker is not None
    assert worker.reason == "no heartbeat from the chief for 300 s"
    assert 300.0 <= w.clock.now <= 300.0 + 15


def test_a_worker_counts_the_chiefs_silence_from_its_last_heartbeat() -> None:
    w = world(settings(node="worker-0", peer_timeout_seconds=300), runs=[(3600.0, 0)])
    w.put_job_status(JobState.RUNNING)
    # The chief beats every 30 s for ten minutes, then falls silent.
    for second in range(30, 601, 30):
        w.clock.at(float(second), lambda: w.put_job_status(JobState.RUNNING))
    assert w.agent.run() == EXIT_ENDED
    worker = w.status("worker-0")
    assert worker is not None
    assert worker.reason == "no heartbeat from the chief for 300 s"
    assert 600.0 + 300.0 <= w.clock.now <= 600.0 + 300.0 + 15


def test_a_preparation_that_fails_records_failed_exit_1_and_its_cause_and_starts_nothing() -> None:
    def broken() -> Prepared:
        raise OSError("pip install exited 1")

    w = world(settings(), runs=[(1.0, 0)], prepare=broken)
    assert w.agent.run() == 1
    chief, job = w.status("chief"), w.job_status()
    assert chief is not None
    assert (chief.state, chief.exit_code) == (JobState.FAILED, 1)
    assert chief.reason == "preparing the job failed: pip install exited 1"
    assert job is not None
    assert (job.state, job.exit_code, job.reason) == (JobState.FAILED, 1, chief.reason)
    assert w.launcher.started == []
    assert w.releases == ["stop"]


def test_a_job_prepared_at_once_starts_its_code_without_a_ticks_sleep() -> None:
    # A standing node's next job is prepared in milliseconds: its code starts as soon as the
    # preparation ends, not after the duties' next tick (a quarter of a second on every job).
    def quick() -> Prepared:
        time.sleep(0.05)  # milliseconds of real work: files in place, the code unpacked
        return Prepared(Path("/state/venv/bin/python"), Path("/state/code/x"), Path("/state"))

    w = world(settings(), runs=[(1.0, 0)], prepare=quick)
    starts_at: list[float] = []
    start = w.launcher.start

    def recording(command: object) -> object:
        starts_at.append(w.clock.now)
        return start(command)  # type: ignore[arg-type]

    w.launcher.start = recording  # type: ignore[method-assign]
    assert w.agent.run() == 0
    assert starts_at == [0.0]


def test_a_worker_still_preparing_ends_when_the_chief_records_failed() -> None:
    release = threading.Event()

    def slow() -> Prepared:
        release.wait(30)
        return Prepared(Path("/state/venv/bin/python"), Path("/state/code/x"), Path("/state"))

    w = world(settings(node="worker-0"), runs=[(1.0, 0)], prepare=slow)
    w.put_job_status(JobState.RUNNING)
    w.clock.at(100.0, lambda: w.put_job_status(JobState.FAILED))
    try:
        assert w.agent.run() == EXIT_ENDED
    finally:
        release.set()
    worker = w.status("worker-0")
    assert worker is not None
    assert (worker.state, worker.exit_code) == (JobState.FAILED, EXIT_ENDED)
    assert worker.reason == "the chief recorded the job FAILED"
    assert w.launcher.started == []


def test_a_workers_termination_records_its_own_state_and_never_the_jobs() -> None:
    w = world(settings(node="worker-0"), runs=[(3600.0, 0)])
    w.agent._running = True
    w.put_job_status(JobState.RUNNING)
    before = w.job_status()
    w.board.write_node(JobState.RUNNING)
    assert w.agent.on_termination("SIGTERM") == EXIT_ENDED
    worker = w.status("worker-0")
    assert worker is not None
    assert worker.state == JobState.INTERRUPTED
    assert w.job_status() == before


def test_the_chief_refreshes_its_heartbeat_every_heartbeat_period() -> None:
    w = world(settings(heartbeat_seconds=60), runs=[(600.0, 0)])
    w.agent.run()
    heartbeats = [uri for uri in w.storage.writes if uri.endswith("/status/job.json")]
    # One at start, one a minute for ten minutes, and the final SUCCEEDED.
    assert 10 <= len(heartbeats) <= 13


def test_a_termination_signal_records_preempted_ends_the_children_and_applies_no_on_finish() -> None:
    w = world(settings(node="worker-0"), runs=[(3600.0, 0)])
    w.preempted[0] = True
    w.board.write_node(JobState.RUNNING)
    assert w.agent.on_termination("SIGTERM") == EXIT_ENDED
    worker = w.status("worker-0")
    assert worker is not None
    assert (worker.state, worker.reason) == (JobState.PREEMPTED, "SIGTERM")
    assert w.launcher.stopped_all == 1
    assert w.releases == []


def test_a_termination_signal_that_is_not_a_preemption_records_interrupted() -> None:
    w = world(settings(node="worker-0"), runs=[(3600.0, 0)])
    assert w.agent.on_termination("SIGHUP") == EXIT_ENDED
    worker = w.status("worker-0")
    assert worker is not None
    assert worker.state == JobState.INTERRUPTED


def test_a_digest_mismatch_while_preparing_fails_naming_the_object_and_releases_the_node() -> None:
    def prepare():  # type: ignore[no-untyped-def]
        raise DigestMismatch("gs://test-bucket/trainstack/code/x.zip does not match the sha256 pinned in metadata")

    # on_finish=keep keeps a machine whose job ended; one that refused its code stops.
    w = world(settings(on_finish="keep"), runs=[(1.0, 0)], prepare=prepare)
    assert_failed_before_its_code_started(w, "trainstack/code/x.zip does not match the sha256")


def test_an_unexpected_error_records_failed_and_applies_on_finish() -> None:
    w = world(settings(), runs=[(1.0, 0)])

    def broken(command):  # type: ignore[no-untyped-def]
        raise RuntimeError("no such file: python")

    w.launcher.start = broken  # type: ignore[method-assign]
    assert w.agent.run() == 1
    assert "RuntimeError" in failed_reason(w)
    assert w.releases == ["stop"]


def test_a_status_write_that_fails_at_the_end_still_releases_the_machine() -> None:
    w: World = world(settings(), runs=[(10.0, 0)])
    w.clock.at(5.0, lambda: setattr(w.storage, "fail_writes", True))
    assert w.agent.run() == 0
    assert w.releases == ["stop"]
    assert any("could not record SUCCEEDED" in line for line in w.log)


def test_secrets_reach_the_jobs_environment_and_never_its_arguments() -> None:
    w = world(settings(), runs=[(1.0, 0)])
    w.agent.services.secrets = lambda: {"WANDB_API_KEY": "canary-value"}
    assert w.agent.run() == 0
    [command] = w.launcher.started
    assert command.env["WANDB_API_KEY"] == "canary-value"
    assert not any("canary-value" in arg for arg in command.argv)
    assert not any("canary-value" in line for line in w.log)


def test_a_secret_that_cannot_be_read_fails_the_job_before_its_code_starts() -> None:
    w = world(settings(), runs=[(1.0, 0)])

    def unreadable() -> dict[str, str]:
        raise SecretError("cannot read secret s-wandb (for WANDB_API_KEY) from Secret Manager: HTTP 403")

    w.agent.services.secrets = unreadable
    assert_failed_before_its_code_started(w, "WANDB_API_KEY")


# --- A synchronous cluster (no parameter servers): the agent ends the code at once -----------


def test_the_chief_ends_its_code_when_a_peer_goes_down_and_restarts_it_once_the_peer_is_back() -> None:
    """Every step of a synchronous cluster needs every node: waiting for TensorFlow to notice a
    lost peer took up to 36 s in a local run; the chief sees the peer's PREEMPTED itself."""
    w = world(settings(), runs=[(3600.0, 0), (40.0, 0)])
    w.put_status("worker-0", JobState.RUNNING, incarnation="aaaa")
    w.clock.at(25.0, lambda: w.put_status("worker-0", JobState.PREEMPTED, incarnation="aaaa"))
    w.clock.at(60.0, lambda: w.put_status("worker-0", JobState.RUNNING, incarnation="bbbb"))
    assert w.agent.run() == 0
    first, second = w.launcher.children
    assert first.stopped
    assert 60.0 <= second.exits_at - 40.0 <= 60.0 + 5
    assert any("worker-0 was PREEMPTED: ending the job's code" in line for line in w.log)
    job = w.job_status()
    assert job is not None
    assert job.peers_down == ()


def test_the_chiefs_heartbeat_says_which_peers_are_down_as_soon_as_it_sees_them() -> None:
    w = world(settings(heartbeat_seconds=60), runs=[(3600.0, 0)])
    w.put_status("worker-0", JobState.RUNNING, incarnation="aaaa")
    seen: list[tuple[float, tuple[str, ...]]] = []

    def look() -> None:
        job = w.job_status()
        if job is not None:
            seen.append((w.clock.now, job.peers_down))

    w.clock.at(25.0, lambda: w.put_status("worker-0", JobState.PREEMPTED, incarnation="aaaa"))
    for second in range(26, 32):
        w.clock.at(float(second), look)
    w.clock.at(40.0, lambda: w.put_status("worker-0", JobState.RUNNING, incarnation="bbbb"))
    w.clock.at(45.0, look)
    w.clock.at(50.0, lambda: w.launcher.children[-1].stop())
    w.agent.run()
    assert ("worker-0",) in {down for _, down in seen if _ <= 31.0}, seen
    assert seen[-1][1] == ()


def test_a_worker_ends_its_code_when_the_chief_says_a_peer_is_down_and_the_peer_confirms() -> None:
    w = world(settings(node="worker-0", peers=("chief", "worker-0", "worker-1")), runs=[(3600.0, 0), (10.0, 0)])
    w.put_job_status(JobState.RUNNING)
    w.put_status("worker-1", JobState.RUNNING, incarnation="aaaa")

    def worker_1_down() -> None:
        w.put_status("worker-1", JobState.PREEMPTED, incarnation="aaaa")
        w.put_job_status(JobState.RUNNING, peers_down=("worker-1",))

    def worker_1_back() -> None:
        w.put_status("worker-1", JobState.RUNNING, incarnation="bbbb")
        w.put_job_status(JobState.RUNNING)

    w.clock.at(30.0, worker_1_down)
    w.clock.at(70.0, worker_1_back)
    for second in range(80, 200, 5):
        w.clock.at(float(second), lambda: w.put_job_status(JobState.RUNNING))
    assert w.agent.run() == 0
    assert w.launcher.children[0].stopped
    assert len(w.launcher.started) == 2


def test_a_stale_word_from_the_chief_does_not_end_a_workers_code() -> None:
    """The chief's heartbeat lags the peers' own status: the peer's own word decides."""
    w = world(settings(node="worker-0", peers=("chief", "worker-0", "worker-1")), runs=[(60.0, 0)])
    w.put_status("worker-1", JobState.RUNNING, incarnation="aaaa")
    w.put_job_status(JobState.RUNNING, peers_down=("worker-1",))
    for second in range(5, 80, 5):
        w.clock.at(float(second), lambda: w.put_job_status(JobState.RUNNING, peers_down=("worker-1",)))
    assert w.agent.run() == 0
    assert len(w.launcher.started) == 1
    assert not w.launcher.children[0].stopped


def test_with_parameter_servers_the_chief_carries_on_when_a_worker_is_lost() -> None:
    """ParameterServerStrategy's coordinator takes a restarted worker back by itself."""
    w = world(settings(peers=ASYNC), runs=[(100.0, 0)])
    w.put_status("worker-0", JobState.RUNNING, incarnation="aaaa")
    w.clock.at(25.0, lambda: w.put_status("worker-0", JobState.PREEMPTED, incarnation="aaaa"))
    assert w.agent.run() == 0
    assert len(w.launcher.started) == 1
    assert not w.launcher.children[0].stopped


def test_the_chief_looks_often_at_a_spot_peer_it_knows_is_down() -> None:
    looks: list[float] = []

    class CountingRecovery:
        def look(self) -> None:
            looks.append(w.clock.now)

    w = world(
        settings(recover=(("worker-0", "s-worker-0"),)),
        runs=[(3600.0, 0), (10.0, 0)],
        recovery_factory=lambda board, clock, log: CountingRecovery(),
    )
    w.put_status("worker-0", JobState.RUNNING, incarnation="aaaa")
    w.clock.at(25.0, lambda: w.put_status("worker-0", JobState.PREEMPTED, incarnation="aaaa"))
    w.clock.at(45.0, lambda: w.put_status("worker-0", JobState.RUNNING, incarnation="bbbb"))
    w.agent.run()
    before = [b - a for a, b in itertools.pairwise(looks) if b <= 25.0]
    during = [b - a for a, b in itertools.pairwise(looks) if a >= 30.0 and b <= 45.0]
    assert before
    assert set(before) == {10.0}
    assert during
    assert max(during) <= 2.0


def test_a_peer_preempted_past_the_bound_while_the_chief_looks_for_a_lost_peer_ends_the_job() -> None:
    """The chief's recovery keeps watching while it settles after its code's exit: its word
    that a Spot peer was preempted too often ends the job with that reason."""
    too_often = "worker-0 was preempted 4 times, more than cluster.max_restarts (3)"

    class BoundedRecovery:
        def look(self) -> str | None:
            return too_often if w.clock.now > 30.0 else None

    w = world(
        settings(recover=(("worker-0", "s-worker-0"),)),
        runs=[(30.0, 3)],
        recovery_factory=lambda board, clock, log: BoundedRecovery(),
    )
    w.put_status("worker-0", JobState.RUNNING)
    assert w.agent.run() == EXIT_ENDED
    chief, job = w.status("chief"), w.job_status()
    assert chief is not None
    assert (chief.state, chief.exit_code, chief.reason) == (JobState.FAILED, EXIT_ENDED, too_often)
    assert job is not None
    assert (job.state, job.reason) == (JobState.FAILED, too_often)
    assert len(w.launcher.started) == 1


def test_the_chiefs_termination_says_so_of_the_job_too() -> None:
    w = world(settings(), runs=[(3600.0, 0)])
    w.agent._running = True
    w.board.write_node(JobState.RUNNING)
    assert w.agent.on_termination("SIGTERM") == EXIT_ENDED
    job = w.job_status()
    assert job is not None
    assert (job.state, job.reason) == (JobState.INTERRUPTED, "SIGTERM")


def test_the_shutdown_that_on_finish_asked_for_records_nothing_over_the_jobs_end() -> None:
    """Defect: on_finish=stop shuts the guest down, whose SIGTERM reached the agent after it
    recorded SUCCEEDED, and would have recorded INTERRUPTED over it."""
    w = world(settings(), runs=[(10.0, 0)])

    def shutdown(action: str) -> None:
        w.releases.append(action)
        w.agent.on_termination("SIGTERM")

    w.agent.services.release = shutdown
    assert w.agent.run() == 0
    chief, job = w.status("chief"), w.job_status()
    assert chief is not None
    assert chief.state == JobState.SUCCEEDED
    assert job is not None
    assert job.state == JobState.SUCCEEDED


def test_a_flex_start_node_ends_the_job_before_its_run_ends_saying_why_and_releases_the_machine() -> None:
    """Compute Engine deletes a flex-start machine at the end of its run and cannot start it
    again: the node ends the job itself first rather than leave it RUNNING until a timeout."""
    why = "the flex-start run of this machine ends at 2026-11-23T10:10:00Z"
    w = world(settings(on_finish="delete"), runs=[(5000.0, 0)], run_end=RunEnd(300.0, why))
    assert w.agent.run() == EXIT_ENDED
    chief, job = w.status("chief"), w.job_status()
    assert chief is not None
    assert chief.state == JobState.FAILED
    assert chief.reason == why
    assert job is not None
    assert job.state == JobState.FAILED
    assert job.reason == why
    assert w.launcher.children[0].stopped
    assert w.releases == ["delete"]
    assert w.clock.now < 300.0 + Timings().stop_grace + Timings().peer_poll


def test_a_flex_start_node_past_its_run_end_at_boot_starts_no_code() -> None:
    w = world(settings(on_finish="delete"), runs=[(10.0, 0)], run_end=RunEnd(-1.0, "the flex-start run ended"))
    assert w.agent.run() == EXIT_ENDED
    assert w.launcher.started == []
    assert w.releases == ["delete"]


@pytest.mark.parametrize(
    ("builtin", "words"),
    [
        (True, "once the cluster is whole; it resumes from its backup"),
        (
            False,
            "once the cluster is whole; the job's code resumes from what it saved in its job directory, if anything",
        ),
    ],
)
def test_a_restart_says_it_resumes_from_a_backup_only_for_code_that_keeps_one(builtin: bool, words: str) -> None:
    """Defect: a team's code that keeps no backup was said to resume from its backup; an AI
    Platform sample's module is trainer.task too, so the built-in trainer is told by the job's
    metadata (warm start), never by its module's name."""
    base = settings(peers=ASYNC)
    assert base.job is not None
    job = dataclasses.replace(base.job, module="trainer.task", warm_start=builtin)
    node_settings = dataclasses.replace(base, job=job)
    w = world(node_settings, runs=[(30.0, 1), (10.0, 0)])
    w.put_status("worker-0", JobState.RUNNING, incarnation="aaaa")
    w.clock.at(20.0, lambda: w.put_status("worker-0", JobState.RUNNING, incarnation="bbbb"))
    assert w.agent.run() == 0
    [line] = [line for line in w.log if "restart 1 of at most" in line]
    assert words in line
    if not builtin:
        assert "resumes from its backup" not in line


def test_a_local_job_directory_is_taken_back_by_the_last_node_to_end_not_the_first() -> None:
    """A node's token lasts until its own job ends: a chief that ended first took a local job
    directory back while worker-0's code still wrote its share (a flaky PermissionError)."""
    from trainstack_contract.lifecycle import JobState

    chief = world(settings("chief", peers=("chief", "worker-0", "worker-1")), runs=[])
    chief.put_status("worker-0", JobState.RUNNING)
    chief.put_status("worker-1", JobState.SUCCEEDED)
    assert not chief.agent._last_to_end()
    chief.put_status("worker-0", JobState.INTERRUPTED)  # down, to resume: not the job's end
    assert not chief.agent._last_to_end()
    chief.put_status("worker-0", JobState.FAILED)
    assert chief.agent._last_to_end()
    alone = world(settings("worker-0", peers=("chief", "worker-0")), runs=[])
    assert alone.agent._last_to_end()  # the chief never wrote a status: it never ran the code
