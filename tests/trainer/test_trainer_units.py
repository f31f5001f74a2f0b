"""Pieces that need no training: cluster specs, job-dir layout, synthetic data, step maths."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trainer.checkpointing import backup_save_frequency
from trainer.config import parse_args
from trainer.jobdir import JobLayout
from trainer.training import largest_divisor_at_most
from trainstack.localrun.bare_trainers import BareTrainerCluster, cluster_nodes, tf_configs
from trainstack.localrun.supervisor import free_loopback_ports


def test_ports_are_distinct_loopback_ports() -> None:
    ports = free_loopback_ports(6)
    assert len(set(ports)) == 6
    assert all(0 < port < 65536 for port in ports)


def test_each_node_gets_its_own_task_in_one_cluster() -> None:
    nodes = cluster_nodes(workers=2, ps=1, chief=True, evaluator=True)
    configs = {name: json.loads(raw) for name, raw in tf_configs(nodes).items()}
    assert set(configs) == {"chief", "worker-0", "worker-1", "ps-0", "evaluator-0"}
    cluster = configs["chief"]["cluster"]
    assert {role: len(addresses) for role, addresses in cluster.items()} == {"chief": 1, "worker": 2, "ps": 1}
    assert all(address.startswith("127.0.0.1:") for addresses in cluster.values() for address in addresses)
    assert all(config["cluster"] == cluster for config in configs.values())
    assert configs["worker-1"]["task"] == {"type": "worker", "index": 1}
    assert configs["evaluator-0"]["task"] == {"type": "evaluator", "index": 0}


def test_parameter_servers_need_a_chief() -> None:
    with pytest.raises(ValueError, match=r"^parameter-server training needs a chief \(the coordinator\)$"):
        BareTrainerCluster(workers=2, ps=1, chief=False)


def test_a_cluster_needs_a_worker_or_a_chief() -> None:
    with pytest.raises(ValueError, match=r"^a cluster needs at least one worker or a chief$"):
        BareTrainerCluster(workers=0, ps=0, chief=False)


def test_layout_follows_job_dir_and_vertex_overrides() -> None:
    plain = JobLayout.from_config(parse_args(["--job-dir", "gs://b/job/", "--data", "synthetic"], environ={}))
    assert plain.backup_dir == "gs://b/job/backup"
    assert plain.model_dir == "gs://b/job/model"
    assert plain.metrics_path == "gs://b/job/metrics.json"
    assert plain.worker_tmp_dir("worker", 3) == "gs://b/job/tmp/worker-3"
    vertex = JobLayout.from_config(
        parse_args(
            ["--data", "synthetic"],
            environ={
                "AIP_MODEL_DIR": "gs://b/out/model",
                "AIP_CHECKPOINT_DIR": "gs://b/out/checkpoints",
                "AIP_TENSORBOARD_LOG_DIR": "gs://tb/run",
            },
        )
    )
    assert vertex.root == "gs://b/out"
    assert vertex.backup_dir == "gs://b/out/backup"
    assert vertex.log_dir == "gs://tb/run"


@pytest.mark.parametrize(
    ("steps", "limit", "expected"), [(50, 16, 10), (12, 16, 12), (7, 4, 1), (100, 16, 10), (40, 10, 10)]
)
def test_steps_per_execution_divides_the_epoch(steps: int, limit: int, expected: int) -> None:
    assert largest_divisor_at_most(steps, limit) == expected


def test_backup_frequency_counts_executions_not_steps() -> None:
    assert backup_save_frequency(200, 10, parameter_server=False) == 20
    assert backup_save_frequency(25, 10, parameter_server=False) == 3
    assert backup_save_frequency(5, 10, parameter_server=False) == 1
    assert backup_save_frequency(200, 10, parameter_server=True) == "epoch"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_single_process_saves_once_the_interval_has_passed_by_its_clock() -> None:
    from trainer.checkpointing import SaveInterval, TrainingClock

    time_now = FakeClock()
    interval = SaveInterval(TrainingClock(clock=time_now), seconds=300)
    due = []
    for _ in range(10):  # ten calls of 40 s each
        time_now.now += 40
        interval.clock.call_ended()
        due.append(interval.due())
        if due[-1]:
            interval.saved()
    # Due at the first call that ends 300 s or more after the last save (call 8: 320 s), then
    # counted afresh: never more than one interval (plus the call in progress) unsaved.
    assert due == [False] * 7 + [True, False, False]


def test_a_step_bound_saves_every_n_calls_whatever_the_clock() -> None:
    from trainer.checkpointing import SaveInterval, TrainingClock

    interval = SaveInterval(TrainingClock(clock=FakeClock()), seconds=300, every_calls=3)
    due = []
    for _ in range(7):
        interval.clock.call_ended()
        due.append(interval.due())
        if due[-1]:
            interval.saved()
    assert due == [False, False, True, False, False, True, False]


def test_workers_count_calls_at_the_chiefs_pace_so_they_save_at_the_same_call() -> None:
    """Each worker measures its own pace; all of them save at the call the chief's pace gives."""
    from trainer.checkpointing import CALIBRATION_CALLS, SaveInterval, TrainingClock

    chief_pace = 0.5
    decisions = []
    for own_pace in (0.5, 0.45, 0.7):  # the chief, a faster and a slower worker
        time_now = FakeClock()
        agreed: list[float] = []

        def agree(measured: float, agreed: list[float] = agreed) -> float:
            agreed.append(measured)
            return chief_pace

        interval = SaveInterval(TrainingClock(agree, clock=time_now), seconds=10)
        saved_at = []
        for call in range(1, 60):
            time_now.now += own_pace
            interval.clock.call_ended()
            if interval.due():
                saved_at.append(call)
                interval.saved()
        assert agreed == [pytest.approx(own_pace)]  # measured once, over calls 2..CALIBRATION_CALLS
        decisions.append(saved_at)
    assert decisions[0] == decisions[1] == decisions[2]
    # 10 s at 0.5 s a call: every 20 calls, counted from the calibration.
    assert decisions[0][:2] == [20, 40]
    assert CALIBRATION_CALLS < 20


def test_synthetic_images_are_deterministic_and_class_dependent() -> None:
    from trainer.synthetic_images import synthetic_examples

    first = list(synthetic_examples(0, 200, 24, 5, seed=7).as_numpy_iterator())
    again = list(synthetic_examples(0, 200, 24, 5, seed=7).as_numpy_iterator())
    assert all(np.array_equal(a[0], b[0]) and a[1] == b[1] for a, b in zip(first, again, strict=True))
    images = np.stack([image for image, _ in first]).astype(np.float32)
    labels = np.array([label for _, label in first])
    assert images.dtype == np.float32
    assert images.shape == (200, 24, 24, 3)
    assert set(labels.tolist()) == {0, 1, 2, 3, 4}
    # The tint channel differs by class: a signal a network can learn.
    channel_means = np.stack([images[labels == c].mean(axis=(0, 1, 2)) for c in range(3)])
    assert all(np.argmax(channel_means[c]) == c for c in range(3))


def test_image_folder_split_is_stable(tmp_path: Path) -> None:
    from trainer.data_sources import describe_data

    for class_name in ("cats", "dogs"):
        (tmp_path / class_name).mkdir()
        for index in range(50):
            (tmp_path / class_name / f"{index}.png").write_bytes(b"not decoded here")
        (tmp_path / class_name / "notes.txt").write_text("ignored")
    config = parse_args(["--job-dir", str(tmp_path / "job"), "--data", str(tmp_path)], environ={})
    source = describe_data(config)
    assert source.kind == "images"
    assert source.class_names == ("cats", "dogs")
    assert source.num_train_examples + source.num_eval_examples == 100
    assert 5 <= source.num_eval_examples <= 35
    assert describe_data(config) == source


def test_launcher_cli_prefixes_logs_and_returns_the_chiefs_status(tmp_path: Path) -> None:
    from trainer_test_helpers import run_python

    result = run_python(
        [
            "-m",
            "trainstack.localrun.bare_trainers",
            "--workers",
            "2",
            "--timeout",
            "60",
            "--",
            "--job-dir",
            str(tmp_path / "job"),
            "--data",
            str(tmp_path / "missing"),
        ],
        timeout=120,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "[worker-0] trainer: error: --data" in result.stdout
    assert "[worker-1] trainer: error: --data" in result.stdout
    assert "chief worker-0: exit status 2" in result.stderr


def test_only_tensorflows_lost_peer_errors_count_as_a_lost_peer() -> None:
    import tensorflow as tf

    from trainer.training import peer_loss

    unhealthy = tf.errors.UnavailableError(
        None, None, "The following tasks are unhealthy (stopped sending heartbeats):\nworker 0"
    )
    assert peer_loss(unhealthy) == "UnavailableError: The following tasks are unhealthy (stopped sending heartbeats):"
    aborted = tf.errors.AbortedError(None, None, "Collective ops is aborted by: another task")
    # Keras and multiprocessing re-raise TensorFlow's error wrapped in their own.
    wrapped = RuntimeError("export failed")
    wrapped.__cause__ = aborted
    assert peer_loss(wrapped) == "AbortedError: Collective ops is aborted by: another task"
    assert peer_loss(tf.errors.InvalidArgumentError(None, None, "bad shape")) is None
    assert peer_loss(ValueError("no")) is None


@pytest.mark.parametrize("where", ["before training", "during training"])
def test_a_lost_peer_exits_75_with_one_line_and_no_traceback(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tensorflow as tf

    from trainer import task, training
    from trainer.checkpointing import RunRecord

    lost = tf.errors.UnavailableError(None, None, "The following tasks are unhealthy (stopped sending heartbeats)")

    def run_training(*args: object) -> None:
        if where == "during training":
            raise training.PeerLost(
                training.peer_loss(lost) or "", RunRecord(trained_to_step=137, backed_up_to_step=130)
            )
        raise lost

    monkeypatch.setattr(training, "run_training", run_training)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    code = task.main(["--job-dir", str(tmp_path / "job"), "--data", "synthetic", "--epochs", "1"])
    error = capsys.readouterr().err
    assert code == 75
    assert "Traceback" not in error
    assert "a peer of the cluster was lost (UnavailableError: The following tasks are unhealthy" in error
    if where == "during training":
        assert "after step 137 of the job; the backup reaches step 130, so 7 steps will be trained again" in error
    else:
        assert "before training began" in error


@pytest.mark.slow
@pytest.mark.parametrize(("overwrite", "ends"), [(False, True), (True, False)])
def test_a_parameter_server_node_started_after_the_job_finished_ends_at_once(
    overwrite: bool, ends: bool, tmp_path: Path
) -> None:
    """A preempted worker started again late in the job may find metrics.json written while it
    booted: it must end, not serve until its boot script gives up on the heartbeat. Under
    --overwrite the marker already there is the old run's and does not count."""
    import threading

    from trainer import roles
    from trainer.strategy import ClusterInfo

    config = parse_args(["--job-dir", str(tmp_path), "--data", "synthetic"], environ={})
    layout = JobLayout.from_config(config)
    Path(layout.metrics_path).write_text(json.dumps({"status": "finished"}))
    [port] = free_loopback_ports(1)
    cluster = ClusterInfo(cluster={"worker": [f"127.0.0.1:{port}"]}, task_type="worker", task_id=0)
    serving = threading.Thread(target=roles.serve_until_finished, args=(cluster, layout, overwrite), daemon=True)
    serving.start()
    serving.join(timeout=10 * roles.FINISHED_POLL_SECONDS)
    assert serving.is_alive() is not ends


def test_only_a_backup_whose_bytes_are_damaged_is_named_damaged(tmp_path: Path) -> None:
    """A restore that fails for another reason (an unreachable bucket) keeps TensorFlow's own
    error: the backup is named damaged only when reading its own bytes fails."""
    import tensorflow as tf

    from trainer.checkpointing import damaged_backup_file

    backup = tmp_path / "backup"
    assert damaged_backup_file(str(backup)) is None
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(weights=tf.Variable(tf.ones([256, 64]))), str(backup / "chief"), max_to_keep=1
    )
    prefix = manager.save()
    assert damaged_backup_file(str(backup)) is None
    data = Path(f"{prefix}.data-00000-of-00001")
    data.write_bytes(data.read_bytes()[:1000])
    assert damaged_backup_file(str(backup)) == (str(data), "truncated: Read less bytes than requested")
