"""A standing node's job queue, run on the fakes (clock, bucket, children): the stack's own job,
then each queued job as a whole job, cancel, hostile specs, a corrupt index, the idle wait
before on_finish, and a reboot mid-queue."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from agent_fakes import BUCKET, JOB_DIR, FakeClock, FakeLauncher, MemoryStorage, settings
from trainstack_agent.artifacts import DigestMismatch
from trainstack_agent.board import Board
from trainstack_agent.environment import Prepared
from trainstack_agent.hypertune import fresh_metric_file
from trainstack_agent.jobqueue import DONE_FILE, JobQueue, QueueServices
from trainstack_agent.node import NodeAgent
from trainstack_agent.outcome import EXIT_ENDED
from trainstack_agent.runend import RunEnd
from trainstack_agent.services import Services
from trainstack_agent.settings import NodeSettings
from trainstack_agent.timings import Timings
from trainstack_contract import HYPERTUNE_METRIC_FILE_ENV, LAYOUT, METADATA_KEYS
from trainstack_contract.lifecycle import JobState
from trainstack_contract.queue import (
    INDEX_OBJECT,
    MAX_SPEC_BYTES,
    TAKEN_BY,
    QueueIndex,
    queued_job_dir,
    spec_bytes,
    spec_object,
    spec_sha256,
    taken_by_bytes,
)
from trainstack_contract.status import StatusDocument, first_status

KEYS = METADATA_KEYS
INDEX_URI = f"{BUCKET}/{INDEX_OBJECT}"
SPEC = {
    KEYS.job_mode: "package",
    KEYS.trainer_args: '["--epochs", "1"]',
    KEYS.code_archive: "trainstack/code/trainer-0123456789abcdef.zip",
    KEYS.code_archive_sha256: "a" * 64,
    KEYS.module: "trainer.task",
}


@dataclass
class Queue:
    """One boot of a standing node over a bucket, a clock and a state directory."""

    clock: FakeClock
    storage: MemoryStorage
    launcher: FakeLauncher
    releases: list[tuple[float, str]]
    log: list[str]
    queue: JobQueue
    prepare: Callable[[NodeSettings], Prepared]

    def job_dirs_started(self) -> list[str]:
        return [command.argv[command.argv.index("--job-dir") + 1] for command in self.launcher.started]


def status(storage: MemoryStorage, job_id: int, name: str, node: str = "chief") -> StatusDocument | None:
    data = storage.objects.get(f"{queued_job_dir(BUCKET, job_id, name)}/status/{node}.json")
    return None if data is None else StatusDocument.from_json(data)


def states(storage: MemoryStorage, job_id: int, name: str, node: str = "chief") -> list[str]:
    document = status(storage, job_id, name, node)
    return [] if document is None else [entry.state for entry in document.history]


def put_spec(storage: MemoryStorage, values: dict[str, str] | None = None) -> str:
    data = spec_bytes(values or SPEC)
    sha = spec_sha256(data)
    storage.objects[f"{BUCKET}/{spec_object(sha)}"] = data
    return sha


def submit(
    storage: MemoryStorage,
    name: str,
    sha: str | None = None,
    when: str = "2026-11-23T10:00:00Z",
    one_node: bool = False,
) -> int:
    """What `trainstack submit` does to the index (the spec already written)."""
    raw = storage.objects.get(INDEX_URI)
    index = QueueIndex.from_json(raw) if raw is not None else QueueIndex()
    index, entry = index.appended(name, sha or put_spec(storage), when, one_node=one_node)
    storage.objects[INDEX_URI] = index.to_json()
    return entry.id


def cancel(storage: MemoryStorage, job_id: int, when: str = "2026-11-23T10:05:00Z") -> None:
    index = QueueIndex.from_json(storage.objects[INDEX_URI]).with_cancelled(job_id, when)
    storage.objects[INDEX_URI] = index.to_json()


def fake_prepare(job_settings: NodeSettings) -> Prepared:
    return Prepared(Path("/state/venv/bin/python"), Path("/state/code/x"), Path("/state"))


def boot(
    state_dir: Path,
    runs: list[tuple[float, int]],
    idle_seconds: int = 0,
    node_settings: NodeSettings | None = None,
    storage: MemoryStorage | None = None,
    incarnation: str = "1111",
    time_scale: float = 1.0,
    prepare: Callable[[NodeSettings], Prepared] = fake_prepare,
    run_end: RunEnd | None = None,
) -> Queue:
    """A node's boot with the queue; by default a single node without a job of its own."""
    clock = FakeClock()
    storage = storage or MemoryStorage()
    launcher = FakeLauncher(clock, runs)
    releases: list[tuple[float, str]] = []
    log: list[str] = []
    base = node_settings or settings(peers=(), with_job=False)
    base = replace(base, idle_seconds=idle_seconds)

    def board(job_dir: str) -> Board:
        return Board(storage, job_dir, base.node, incarnation, now=clock.utc_text)  # type: ignore[arg-type]

    def release(action: str) -> None:
        releases.append((clock.now, action))

    def new_job(job_settings: NodeSettings, cancelled: Callable[[], str | None] | None) -> NodeAgent:
        assert job_settings.job is not None
        services = Services(
            board=board(job_settings.job.job_dir),
            launcher=launcher,
            prepare=lambda: prepare(job_settings),
            ready=lambda: log.append("ready"),
            secrets=dict,
            release=release,
            preempted=lambda: False,
            recovery=None,
            clock=clock,
            log=log.append,
            environment={},
            timings=Timings(),
            listening=lambda port: False,
            cancelled=cancelled,
            run_end=run_end,
        )
        return NodeAgent(job_settings, services, clock.utc(), release_at_end=False)

    services = QueueServices(
        storage=storage,  # type: ignore[arg-type]
        board=board,
        new_job=new_job,
        ready=lambda: log.append("ready"),
        release=release,
        clock=clock,
        log=log.append,
        state_dir=state_dir,
        time_scale=time_scale,
        run_end=run_end,
    )
    return Queue(clock, storage, launcher, releases, log, JobQueue(base, services), prepare)


def run_until_sigterm(q: Queue, at: float) -> None:
    """Run the queue until a SIGTERM at ``at`` seconds, as a machine's shutdown sends it, ends the agent."""

    def shutdown() -> None:
        raise SystemExit(q.queue.on_termination("SIGTERM"))

    q.clock.at(at, shutdown)
    with pytest.raises(SystemExit) as ended:
        q.queue.run()
    assert ended.value.code == EXIT_ENDED


def test_two_queued_jobs_run_one_after_the_other_in_one_boot_and_on_finish_applies_once(tmp_path: Path) -> None:
    storage = MemoryStorage()
    first, second = submit(storage, "first"), submit(storage, "second")
    q = boot(tmp_path, runs=[(30.0, 0), (40.0, 0)], storage=storage)
    assert q.queue.run() == 0
    assert q.job_dirs_started() == [queued_job_dir(BUCKET, first, "first"), queued_job_dir(BUCKET, second, "second")]
    one, two = status(storage, first, "first"), status(storage, second, "second")
    assert one is not None
    assert two is not None
    assert (one.state, two.state) == (JobState.SUCCEEDED, JobState.SUCCEEDED)
    # One boot: the same incarnation in both jobs' status objects, the second started after the first ended.
    assert one.incarnation == two.incarnation == "1111"
    assert two.history[0].time >= one.time
    job = storage.objects.get(f"{queued_job_dir(BUCKET, first, 'first')}/status/job.json")
    assert job is not None
    assert StatusDocument.from_json(job).state == JobState.SUCCEEDED
    assert q.releases == [(70.0, "stop")]
    assert "ready" in q.log
    assert "queue: job 1 (q1_first) starting" in q.log
    assert "queue: job 2 (q2_second) starting" in q.log


def test_the_stacks_own_job_runs_first_and_is_not_run_again_once_it_ended(tmp_path: Path) -> None:
    storage = MemoryStorage()
    submit(storage, "queued")
    own = settings(peers=())
    q = boot(tmp_path, runs=[(10.0, 0), (10.0, 0)], node_settings=own, storage=storage)
    assert q.queue.run() == 0
    assert q.job_dirs_started() == [JOB_DIR, queued_job_dir(BUCKET, 1, "queued")]
    assert [action for _, action in q.releases] == ["stop"]
    # The next boot (a submit started the machine again) runs neither again.
    again = boot(tmp_path, runs=[(10.0, 0)], node_settings=own, storage=storage, incarnation="2222")
    assert again.queue.run() == 0
    assert again.launcher.started == []
    assert [action for _, action in again.releases] == ["stop"]


def test_a_cancelled_running_job_ends_cancelled_and_the_next_starts(tmp_path: Path) -> None:
    storage = MemoryStorage()
    first, second = submit(storage, "first"), submit(storage, "second")
    q = boot(tmp_path, runs=[(500.0, 0), (20.0, 0)], storage=storage)
    q.clock.at(100.0, lambda: cancel(storage, first))
    assert q.queue.run() == 0
    assert states(storage, first, "first") == [JobState.RUNNING, JobState.CANCELLED]
    job = StatusDocument.from_json(storage.objects[f"{queued_job_dir(BUCKET, first, 'first')}/status/job.json"])
    assert job.state == JobState.CANCELLED
    assert q.launcher.children[0].stopped
    # Seen within a peer_poll of the cancel.
    assert 100.0 <= q.launcher.children[1].exits_at - 20.0 <= 100.0 + Timings().peer_poll + 1
    assert states(storage, second, "second") == [JobState.RUNNING, JobState.SUCCEEDED]
    assert "queue: job 1 cancelled: ending its code" in q.log
    # No on_finish at the cancel: once, at the end of the queue.
    assert [action for _, action in q.releases] == ["stop"]


def test_a_node_ends_its_code_when_the_chief_recorded_the_job_cancelled(tmp_path: Path) -> None:
    """A worker that has not seen the index's cancel yet follows the chief's CANCELLED."""
    storage = MemoryStorage()
    first = submit(storage, "first")
    worker = settings(node="worker-0", peers=("chief", "worker-0"), with_job=False)
    q = boot(tmp_path, runs=[(500.0, 0)], node_settings=worker, storage=storage)
    job_dir = queued_job_dir(BUCKET, first, "first")

    def chief_cancels() -> None:
        chief = Board(storage, job_dir, "chief", "cccc", now=q.clock.utc_text)  # type: ignore[arg-type]
        chief.write_job(JobState.CANCELLED, None, "job 1 was cancelled")

    q.clock.at(100.0, chief_cancels)
    q.queue.run()
    assert states(storage, first, "first", node="worker-0") == [JobState.RUNNING, JobState.CANCELLED]
    assert q.launcher.children[0].stopped


def test_a_cancelled_queued_job_is_skipped(tmp_path: Path) -> None:
    storage = MemoryStorage()
    first, second = submit(storage, "first"), submit(storage, "second")
    cancel(storage, first)
    q = boot(tmp_path, runs=[(10.0, 0)], storage=storage)
    assert q.queue.run() == 0
    assert q.job_dirs_started() == [queued_job_dir(BUCKET, second, "second")]
    assert status(storage, first, "first") is None
    assert "queue: job 1 (q1_first) was cancelled: skipping it" in q.log


def test_a_failed_job_does_not_stop_the_queue(tmp_path: Path) -> None:
    storage = MemoryStorage()
    first, second = submit(storage, "first"), submit(storage, "second")
    q = boot(tmp_path, runs=[(10.0, 3), (10.0, 0)], storage=storage)
    assert q.queue.run() == 0
    failed = status(storage, first, "first")
    assert failed is not None
    assert (failed.state, failed.exit_code) == (JobState.FAILED, 3)
    assert states(storage, second, "second") == [JobState.RUNNING, JobState.SUCCEEDED]
    assert [action for _, action in q.releases] == ["stop"]
    # The failed job's children were ended without closing the launcher to the next job's.
    assert q.launcher.stopped_all >= 1
    assert not q.launcher.closed


def test_a_refused_digest_stops_the_machine_and_the_queue(tmp_path: Path) -> None:
    storage = MemoryStorage()
    first = submit(storage, "first")
    submit(storage, "second")

    def mismatch(job_settings: NodeSettings) -> Prepared:
        raise DigestMismatch(f"{BUCKET}/{SPEC[KEYS.code_archive]} does not match the sha256 its spec names")

    q = boot(
        tmp_path,
        runs=[(10.0, 0)],
        storage=storage,
        prepare=mismatch,
        node_settings=settings(peers=(), with_job=False, on_finish="keep"),
    )
    assert q.queue.run() == 1
    assert states(storage, first, "first") == [JobState.RUNNING, JobState.FAILED]
    assert q.launcher.started == []
    assert [action for _, action in q.releases] == ["stop"]
    assert status(storage, 2, "second") is None


@pytest.mark.parametrize("time_scale", [1.0, 0.25])
def test_on_finish_applies_after_the_idle_wait_since_the_last_job_ended(tmp_path: Path, time_scale: float) -> None:
    storage = MemoryStorage()
    submit(storage, "first")
    q = boot(tmp_path, runs=[(30.0, 0), (30.0, 0)], idle_seconds=600, storage=storage, time_scale=time_scale)
    idle = 600 * time_scale
    # A job submitted while the node idles runs, and the idle wait starts again at its end.
    q.clock.at(30.0 + idle / 2, lambda: submit(storage, "second"))
    assert q.queue.run() == 0
    assert len(q.launcher.started) == 2
    second_end = q.launcher.children[1].exits_at
    [(when, action)] = q.releases
    assert action == "stop"
    assert second_end + idle <= when <= second_end + idle + Timings().queue_poll + 1
    assert any(line.startswith("queue: empty; idle for 0 s of ") for line in q.log)


def test_idle_seconds_zero_applies_on_finish_at_once_with_an_empty_queue(tmp_path: Path) -> None:
    q = boot(tmp_path, runs=[(10.0, 0)], idle_seconds=0)
    assert q.queue.run() == 0
    assert q.releases == [(0.0, "stop")]
    assert q.launcher.started == []


def test_on_finish_keep_keeps_the_machine_after_the_idle_wait(tmp_path: Path) -> None:
    q = boot(
        tmp_path, runs=[(10.0, 0)], idle_seconds=60, node_settings=settings(peers=(), with_job=False, on_finish="keep")
    )
    assert q.queue.run() == 0
    assert q.releases == []
    assert q.clock.now >= 60.0
    assert any("on_finish=keep" in line for line in q.log)


def _oversize() -> bytes:
    big = "x" * 60000
    return spec_bytes(
        {
            **SPEC,
            KEYS.trainer_args: json.dumps([big]),
            KEYS.module: big,
            KEYS.image: big,
            KEYS.job_env: big,
            KEYS.secrets: big,
        }
    )


HOSTILE: dict[str, tuple[Callable[[], tuple[bytes, str | None]], str]] = {
    "sha256-mismatch": (lambda: (spec_bytes(SPEC), "b" * 64), "does not match the sha256 its queue entry names"),
    "unknown-key": (
        lambda: (
            (json.dumps({"version": 1, "metadata": {**SPEC, KEYS.bucket: "gs://elsewhere"}}) + "\n").encode(),
            None,
        ),
        "which are not a job's metadata keys",
    ),
    "oversize": (lambda: (_oversize(), None), f"is larger than {MAX_SPEC_BYTES} bytes"),
    "bad-module": (
        lambda: (spec_bytes({**SPEC, KEYS.module: "trainer.task; rm -rf /"}), None),
        f"metadata {KEYS.module} is not a Python module name",
    ),
    "code-outside-the-code-dir": (
        lambda: (spec_bytes({**SPEC, KEYS.code_archive: "jobs/other/model.zip"}), None),
        f"metadata {KEYS.code_archive} is not a code archive",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_spec_that_fails_its_checks_fails_that_job_only_with_a_clear_reason(tmp_path: Path, case: str) -> None:
    storage = MemoryStorage()
    make, expected = HOSTILE[case]
    data, named = make()
    sha = named or spec_sha256(data)
    storage.objects[f"{BUCKET}/{spec_object(sha if named is None else named)}"] = data
    bad = submit(storage, "bad", sha=sha)
    good = submit(storage, "good")
    q = boot(tmp_path, runs=[(10.0, 0)], storage=storage)
    assert q.queue.run() == 0
    refused = status(storage, bad, "bad")
    assert refused is not None
    assert refused.state == JobState.FAILED
    assert refused.reason is not None
    assert expected in refused.reason
    assert refused.reason.startswith(f"the job's spec {BUCKET}/{spec_object(sha)}")
    [line] = [line for line in q.log if line.startswith("queue: job 1 (q1_bad) refused: ")]
    assert expected in line
    assert q.job_dirs_started() == [queued_job_dir(BUCKET, good, "good")]
    assert [action for _, action in q.releases] == ["stop"]


def test_a_missing_spec_fails_that_job_only(tmp_path: Path) -> None:
    storage = MemoryStorage()
    submit(storage, "bad", sha="c" * 64)
    submit(storage, "good")
    q = boot(tmp_path, runs=[(10.0, 0)], storage=storage)
    assert q.queue.run() == 0
    refused = status(storage, 1, "bad")
    assert refused is not None
    assert refused.state == JobState.FAILED
    assert "does not exist" in (refused.reason or "")
    assert states(storage, 2, "good") == [JobState.RUNNING, JobState.SUCCEEDED]


def test_a_corrupt_index_does_not_stop_a_running_job_or_lose_its_entries(tmp_path: Path) -> None:
    storage = MemoryStorage()
    first, second = submit(storage, "first"), submit(storage, "second")
    q = boot(tmp_path, runs=[(100.0, 0), (10.0, 0)], idle_seconds=30, storage=storage)

    def corrupt() -> None:
        storage.objects[INDEX_URI] = b'{"version": 1, "next_id": "x"'

    q.clock.at(20.0, corrupt)
    assert q.queue.run() == 0
    assert states(storage, first, "first") == [JobState.RUNNING, JobState.SUCCEEDED]
    assert states(storage, second, "second") == [JobState.RUNNING, JobState.SUCCEEDED]
    problems = [line for line in q.log if line.startswith(f"queue: cannot read {INDEX_URI} (")]
    # Read every peer_poll and every queue_poll since, said once.
    assert len(problems) == 1
    assert "going on with the queue as last read" in problems[0]
    assert [action for _, action in q.releases] == ["stop"]


def test_a_reboot_mid_queue_resumes_the_unfinished_job_not_the_finished_ones(tmp_path: Path) -> None:
    storage = MemoryStorage()
    first, second, third = submit(storage, "first"), submit(storage, "second"), submit(storage, "third")
    q = boot(tmp_path, runs=[(10.0, 0), (100.0, 0)], storage=storage)
    run_until_sigterm(q, at=50.0)
    assert states(storage, second, "second") == [JobState.RUNNING, JobState.INTERRUPTED]
    assert q.releases == []
    reads: list[str] = []
    storage.read_outage = lambda uri: reads.append(uri) and False
    again = boot(tmp_path, runs=[(20.0, 0)], storage=storage, incarnation="2222")
    assert again.queue.run() == 0
    assert again.job_dirs_started() == [
        queued_job_dir(BUCKET, second, "second"),
        queued_job_dir(BUCKET, third, "third"),
    ]
    resumed = status(storage, second, "second")
    assert resumed is not None
    assert resumed.state == JobState.SUCCEEDED
    assert [entry.incarnation for entry in resumed.history] == ["1111", "1111", "2222", "2222"]
    # The finished job is known done from the node's state directory: its status is not read again.
    first_dir = queued_job_dir(BUCKET, first, "first")
    assert not any(uri.startswith(first_dir) for uri in reads)
    assert first in json.loads((tmp_path / DONE_FILE).read_text())["done"]


def test_a_signal_between_jobs_records_nothing_and_exits(tmp_path: Path) -> None:
    q = boot(tmp_path, runs=[(10.0, 0)], idle_seconds=600)
    run_until_sigterm(q, at=100.0)
    assert q.releases == []
    assert "received SIGTERM between jobs: exiting; the next boot runs the queue again" in q.log


def test_the_agents_queue_gives_every_job_this_boots_incarnation_and_leaves_on_finish_to_the_queue(
    tmp_path: Path,
) -> None:
    """How run_node puts a standing node together (trainstack_agent.boot.job_queue)."""
    import io

    from trainstack_agent.agent import Agent
    from trainstack_agent.boot import job_queue
    from trainstack_agent.processes import Log, Processes

    agent = Agent({"TRAINSTACK_STATE_DIR": str(tmp_path), "TRAINSTACK_SELF_STOP_LOG": str(tmp_path / "stops.log")})
    agent.log = Log(io.StringIO(), journal=False)
    base = replace(settings(peers=(), with_job=False), bucket=str(tmp_path / "bucket"), idle_seconds=600)
    queue = job_queue(agent, base, "abcd", Processes(agent.log), Timings().scaled(0.25), 0.25)
    assert queue.idle_limit == 150.0
    assert queue.services.state_dir == tmp_path
    job_dir = queued_job_dir(base.bucket, 1, "first")
    assert queue.services.board(job_dir).incarnation == "abcd"
    job = settings(peers=()).job
    assert job is not None
    nodes = [
        queue.services.new_job(replace(base, job=replace(job, job_dir=queued_job_dir(base.bucket, n, "x"))), cancel)
        for n, cancel in ((1, lambda: None), (2, lambda: "job 2 was cancelled"))
    ]
    assert [node.board.incarnation for node in nodes] == ["abcd", "abcd"]
    assert [node.board.job_dir for node in nodes] == [queued_job_dir(base.bucket, n, "x") for n in (1, 2)]
    assert not any(node.release_at_end for node in nodes)
    assert [node.services.cancelled() for node in nodes if node.services.cancelled] == [None, "job 2 was cancelled"]


def test_a_job_that_ended_without_this_node_is_not_run_and_its_own_job_not_run_again(tmp_path: Path) -> None:
    """What the node's state directory does not know (a new disk, another node's end) is read
    from the job's status objects: ended for the cluster, or for this node, is not run."""
    storage = MemoryStorage()
    first, second, third = submit(storage, "first"), submit(storage, "second"), submit(storage, "third")
    worker = replace(settings(node="worker-0", peers=("chief", "worker-0")), heartbeat_seconds=5)
    for job_dir, node, state in (
        (queued_job_dir(BUCKET, first, "first"), "chief", JobState.FAILED),
        (queued_job_dir(BUCKET, second, "second"), "worker-0", JobState.CANCELLED),
        (JOB_DIR, "chief", JobState.FAILED),
    ):
        board = Board(storage, job_dir, node, "0000")  # type: ignore[arg-type]
        (board.write_job if node == "chief" else board.write_node)(state, 1, "ended before this boot")
    q = boot(tmp_path, runs=[(10.0, 0)], node_settings=worker, storage=storage)
    assert q.queue.run() == 0
    assert q.job_dirs_started() == [queued_job_dir(BUCKET, third, "third")]
    assert f"queue: job 0 (the stack's own job, {JOB_DIR}) has ended; not running it again" in q.log


def test_each_queued_job_gets_its_own_hypertune_report_file_and_never_sees_the_last_jobs(tmp_path: Path) -> None:
    """A standing node runs trial after trial: each job's CLOUD_ML_HP_METRIC_FILE is new and
    empty, and each job's report reaches its own job directory alone."""
    storage = MemoryStorage()
    first, second = submit(storage, "first"), submit(storage, "second")
    node_state = tmp_path / "node"

    def prepare(job_settings: NodeSettings) -> Prepared:
        metric_file = fresh_metric_file(node_state, None)
        return Prepared(node_state / "venv/bin/python", node_state / "code/x", node_state, metric_file=metric_file)

    q = boot(tmp_path, runs=[(30.0, 0), (40.0, 0)], storage=storage, prepare=prepare)
    found_at_start: list[bool] = []

    def on_start(count: int) -> None:
        report = Path(q.launcher.started[-1].env[HYPERTUNE_METRIC_FILE_ENV])
        found_at_start.append(report.exists())
        report.write_text(json.dumps({"accuracy": str(count / 10), "trial": str(count)}) + "\n")

    q.launcher.on_start = on_start
    assert q.queue.run() == 0
    one, two = (Path(command.env[HYPERTUNE_METRIC_FILE_ENV]) for command in q.launcher.started)
    assert one != two
    assert found_at_start == [False, False]
    # The first job's file is gone once the second is prepared.
    assert not one.exists()
    assert two.exists()
    for job_id, name, trial in ((first, "first", 1), (second, "second", 2)):
        copied = storage.objects[f"{queued_job_dir(BUCKET, job_id, name)}/{LAYOUT.hypertune_metrics('chief')}"]
        assert json.loads(copied)["trial"] == str(trial)


def test_a_flex_start_node_ends_its_job_before_its_run_ends_and_leaves_the_queue_to_later_machines(
    tmp_path: Path,
) -> None:
    """Compute Engine deletes a flex-start machine at the end of its run: the node ends the
    running job first, saying why, takes no further job and applies on_finish (delete)."""
    storage = MemoryStorage()
    first, second = submit(storage, "first"), submit(storage, "second")
    why = "the flex-start run of this machine ends at 2026-11-23T10:05:00Z"
    node = settings(peers=(), with_job=False, on_finish="delete")
    q = boot(tmp_path, runs=[(500.0, 0), (20.0, 0)], node_settings=node, storage=storage, run_end=RunEnd(100.0, why))
    q.queue.run()
    assert states(storage, first, "first") == [JobState.RUNNING, JobState.FAILED]
    ended = status(storage, first, "first")
    assert ended is not None
    assert ended.reason == why
    assert q.launcher.children[0].stopped
    assert len(q.launcher.started) == 1
    # The second job was never taken: it is still queued, for the machines a later `pulumi up` creates.
    assert status(storage, second, "second") is None
    assert [action for _, action in q.releases] == ["delete"]
    assert q.releases[0][0] < 100.0 + Timings().peer_poll + Timings().stop_grace + 1


# --- one-node jobs: one per node, side by side ---------------------------------------------
CLUSTER = ("chief", "worker-0", "worker-1")


def cluster_node(node: str) -> NodeSettings:
    """A node of a three-node cluster with no job of its own."""
    return settings(node=node, peers=CLUSTER, with_job=False, tf_port=2222)


def taken_by_node(storage: MemoryStorage, job_id: int, name: str) -> str | None:
    data = storage.objects.get(f"{queued_job_dir(BUCKET, job_id, name)}/{TAKEN_BY}")
    return None if data is None else json.loads(data)["node"]


def record_job_state(storage: MemoryStorage, job_id: int, name: str, state: str, second: int = 0) -> None:
    """The job's status as the node that runs it writes it (``second``: past 10:10 that day)."""
    minute, rest = divmod(10 * 60 + second, 60)
    document = first_status("job", state, time=f"2026-11-23T10:{minute:02d}:{rest:02d}Z", incarnation="9999")
    storage.objects[f"{queued_job_dir(BUCKET, job_id, name)}/{LAYOUT.job_status}"] = document.to_json()


def test_one_node_jobs_are_taken_one_per_node_and_a_whole_cluster_job_waits_until_they_end(tmp_path: Path) -> None:
    storage = MemoryStorage()
    first = submit(storage, "first", one_node=True)
    second = submit(storage, "second", one_node=True)
    whole = submit(storage, "whole")
    for node in CLUSTER:
        (tmp_path / node).mkdir()
    nodes = {
        node: boot(tmp_path / node, runs=[], node_settings=cluster_node(node), storage=storage) for node in CLUSTER
    }
    index = QueueIndex.from_json(storage.objects[INDEX_URI])
    picks = {node: q.queue.next_job.next(index) for node, q in nodes.items()}
    assert {node: None if entry is None else entry.id for node, entry in picks.items()} == {
        "chief": first,
        "worker-0": second,
        "worker-1": None,
    }
    assert taken_by_node(storage, first, "first") == "chief"
    assert taken_by_node(storage, second, "second") == "worker-0"
    assert nodes["worker-1"].queue.next_job.waiting
    # Looking again changes nothing: a node keeps the job it took, and no other takes it.
    again = {node: q.queue.next_job.next(index) for node, q in nodes.items()}
    assert again == picks
    record_job_state(storage, first, "first", JobState.SUCCEEDED)
    assert nodes["worker-1"].queue.next_job.next(index) is None
    record_job_state(storage, second, "second", JobState.FAILED)
    for q in nodes.values():
        picked = q.queue.next_job.next(index)
        assert picked is not None
        assert picked.id == whole
        assert not q.queue.next_job.waiting


def test_a_one_node_job_runs_alone_as_its_own_chief_on_the_node_that_took_it(tmp_path: Path) -> None:
    storage = MemoryStorage()
    job = submit(storage, "alone", one_node=True)
    q = boot(tmp_path, runs=[(30.0, 0)], node_settings=cluster_node("worker-1"), storage=storage)
    assert q.queue.run() == 0
    (command,) = q.launcher.started
    assert "TF_CONFIG" not in command.env
    assert states(storage, job, "alone", node="worker-1") == [JobState.RUNNING, JobState.SUCCEEDED]
    # It wrote the job's status, as a chief does: no other node runs it.
    assert states(storage, job, "alone", node="job") == [JobState.RUNNING, JobState.SUCCEEDED]
    assert taken_by_node(storage, job, "alone") == "worker-1"
    assert "queue: job 1 (q1_alone) runs on one node: this one took it" in q.log


def test_a_node_waiting_for_a_whole_cluster_job_is_not_idle_and_runs_it_once_the_one_node_job_ends(
    tmp_path: Path,
) -> None:
    storage = MemoryStorage()
    held = submit(storage, "held", one_node=True)
    storage.objects[f"{queued_job_dir(BUCKET, held, 'held')}/{TAKEN_BY}"] = taken_by_bytes(
        "chief", "2026-11-23T10:00:00Z"
    )
    whole = submit(storage, "whole")
    q = boot(tmp_path, runs=[(20.0, 0)], idle_seconds=60, node_settings=cluster_node("worker-1"), storage=storage)
    q.clock.at(500.0, lambda: record_job_state(storage, held, "held", JobState.SUCCEEDED))
    assert q.queue.run() == 0
    assert q.job_dirs_started() == [queued_job_dir(BUCKET, whole, "whole")]
    # The job started at 500 s, ran 20 s, then the idle wait of 60 s: nothing stopped the node before.
    assert [action for _, action in q.releases] == ["stop"]
    assert q.releases[0][0] >= 580.0


def held_by_the_chief(storage: MemoryStorage, name: str) -> int:
    """A one-node job the chief took."""
    held = submit(storage, name, one_node=True)
    storage.objects[f"{queued_job_dir(BUCKET, held, name)}/{TAKEN_BY}"] = taken_by_bytes(
        "chief", "2026-11-23T10:00:00Z"
    )
    return held


def test_a_whole_cluster_job_behind_a_one_node_job_whose_node_is_gone_lets_this_node_idle_out(
    tmp_path: Path,
) -> None:
    """Defect: the chief, holding a one-node job, was preempted and not started again; every
    other node waited for that job to end, never idle, billing until max_run_hours."""
    storage = MemoryStorage()
    held = held_by_the_chief(storage, "held")
    record_job_state(storage, held, "held", JobState.PREEMPTED)
    whole = submit(storage, "whole")
    q = boot(tmp_path, runs=[(20.0, 0)], idle_seconds=60, node_settings=cluster_node("worker-1"), storage=storage)
    assert q.queue.run() == 0
    # The whole-cluster job still waits for the held one: the queue's order stands.
    assert q.job_dirs_started() == []
    assert [action for _, action in q.releases] == ["stop"]
    assert q.releases[0][0] < 60.0 + 15
    assert any(
        line == "queue: job 1 (q1_held) runs on another node, but its node is PREEMPTED: the jobs after it wait, "
        "and this node counts as idle meanwhile"
        for line in q.log
    ), q.log
    assert whole == held + 1


def test_a_one_node_job_whose_status_stops_changing_for_the_peer_timeout_stops_holding_this_node(
    tmp_path: Path,
) -> None:
    storage = MemoryStorage()
    held = held_by_the_chief(storage, "held")
    record_job_state(storage, held, "held", JobState.RUNNING)
    submit(storage, "whole")
    node_settings = replace(cluster_node("worker-1"), peer_timeout_seconds=300)
    q = boot(tmp_path, runs=[(20.0, 0)], idle_seconds=60, node_settings=node_settings, storage=storage)
    assert q.queue.run() == 0
    assert q.job_dirs_started() == []
    # Held for the peer timeout (its last look within one poll of it), then the idle wait:
    # no sooner, and not forever.
    assert 300.0 + 60.0 - Timings().queue_poll <= q.releases[0][0] < 300.0 + 60.0 + 15
    assert any("but its status has not changed for 300 s" in line for line in q.log), q.log


def test_a_one_node_job_whose_holder_beats_keeps_this_node_waiting_past_the_peer_timeout(tmp_path: Path) -> None:
    storage = MemoryStorage()
    held = held_by_the_chief(storage, "held")
    whole = submit(storage, "whole")
    node_settings = replace(cluster_node("worker-1"), peer_timeout_seconds=300)
    q = boot(tmp_path, runs=[(20.0, 0)], idle_seconds=60, node_settings=node_settings, storage=storage)
    # The holder's heartbeat rewrites the job's status every 60 s until it succeeds at 1000 s.
    for second in range(0, 1000, 60):
        q.clock.at(float(second), lambda s=second: record_job_state(storage, held, "held", JobState.RUNNING, s))
    q.clock.at(1000.0, lambda: record_job_state(storage, held, "held", JobState.SUCCEEDED))
    assert q.queue.run() == 0
    assert q.job_dirs_started() == [queued_job_dir(BUCKET, whole, "whole")]
    assert q.releases[0][0] >= 1000.0 + 20.0 + 60.0


def test_a_node_that_rebooted_mid_one_node_job_resumes_it(tmp_path: Path) -> None:
    storage = MemoryStorage()
    job = submit(storage, "long", one_node=True)
    q = boot(tmp_path, runs=[(100.0, 0)], node_settings=cluster_node("worker-0"), storage=storage)
    run_until_sigterm(q, at=50.0)
    again = boot(
        tmp_path, runs=[(20.0, 0)], node_settings=cluster_node("worker-0"), storage=storage, incarnation="2222"
    )
    assert again.queue.run() == 0
    assert again.job_dirs_started() == [queued_job_dir(BUCKET, job, "long")]
    assert states(storage, job, "long", node="worker-0")[-1] == JobState.SUCCEEDED


def test_a_one_node_jobs_corrupt_taken_by_record_fails_that_job_alone(tmp_path: Path) -> None:
    storage = MemoryStorage()
    bad = submit(storage, "bad", one_node=True)
    storage.objects[f"{queued_job_dir(BUCKET, bad, 'bad')}/{TAKEN_BY}"] = b'{"version": 1, "node": "../x"}'
    good = submit(storage, "good", one_node=True)
    q = boot(tmp_path, runs=[(10.0, 0)], node_settings=cluster_node("worker-0"), storage=storage)
    assert q.queue.run() == 0
    assert q.job_dirs_started() == [queued_job_dir(BUCKET, good, "good")]
    failed = status(storage, bad, "bad", node="job")
    assert failed is not None
    assert failed.state == JobState.FAILED
    assert failed.reason == f"job 1 (q1_bad) cannot be run: {TAKEN_BY} names no node"


def test_a_cancelled_one_node_job_is_ended_and_recorded_by_the_node_that_took_it(tmp_path: Path) -> None:
    storage = MemoryStorage()
    job = submit(storage, "solo", one_node=True)
    after = submit(storage, "after", one_node=True)
    q = boot(tmp_path, runs=[(500.0, 0), (20.0, 0)], node_settings=cluster_node("worker-1"), storage=storage)
    q.clock.at(100.0, lambda: cancel(storage, job))
    assert q.queue.run() == 0
    assert states(storage, job, "solo", node="worker-1") == [JobState.RUNNING, JobState.CANCELLED]
    assert states(storage, job, "solo", node="job") == [JobState.RUNNING, JobState.CANCELLED]
    assert q.launcher.children[0].stopped
    assert states(storage, after, "after", node="job") == [JobState.RUNNING, JobState.SUCCEEDED]


def test_a_one_node_job_whose_taker_cannot_be_read_waits_and_is_logged_once(tmp_path: Path) -> None:
    storage = MemoryStorage()
    job = submit(storage, "solo", one_node=True)
    taken = f"{queued_job_dir(BUCKET, job, 'solo')}/{TAKEN_BY}"
    outage = {"on": True}
    storage.read_outage = lambda uri: uri == taken and outage["on"]
    q = boot(tmp_path, runs=[(10.0, 0)], idle_seconds=60, node_settings=cluster_node("worker-0"), storage=storage)

    def recover() -> None:
        outage["on"] = False

    q.clock.at(30.0, recover)
    assert q.queue.run() == 0
    # Not taken while Cloud Storage gave up; taken at the first look after.
    assert q.job_dirs_started() == [queued_job_dir(BUCKET, job, "solo")]
    assert q.launcher.children[0].exits_at >= 40.0
    problems = [line for line in q.log if line.startswith("queue: cannot tell which node holds job 1")]
    assert len(problems) == 1
