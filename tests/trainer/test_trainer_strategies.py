"""The real trainer under every strategy this machine can run (STYLE habit 10).

Each run must report the right replica count and a falling loss, and leave the
job directory in the documented layout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from trainer_test_helpers import FAST_ARGS, read_metrics, run_trainer, trainer_env

from trainstack.localrun.bare_trainers import ClusterResult, run_local_cluster

EPOCH_ARGS = ["--epochs", "3", "--steps-per-epoch", "12", "--save-every-steps", "6"]


def assert_trained(metrics: dict[str, Any], strategy: str, replicas: int) -> None:
    assert metrics["status"] == "finished"
    assert metrics["strategy"] == strategy
    assert metrics["replicas"] == replicas
    assert metrics["global_batch_size"] == 16 * replicas
    losses = metrics["loss_history"]
    assert len(losses) == 3
    assert metrics["epochs_run"] == 3
    assert losses[-1] < losses[0], losses
    assert metrics["examples_per_second"] > 0
    assert not metrics["resumed"]
    # What each epoch's backup and checkpoint held training up: part of its seconds.
    assert len(metrics["epoch_save_seconds"]) == 3
    assert all(seconds > 0 for seconds in metrics["epoch_save_seconds"])


def assert_job_dir_layout(job_dir: Path) -> None:
    assert (job_dir / "model" / "saved_model.pb").exists()
    assert list((job_dir / "checkpoints").glob("ckpt-3.index"))
    assert list((job_dir / "logs" / "train").glob("events.out.tfevents.*"))
    assert (job_dir / "progress.json").exists()
    # The backup only matters while training; per-worker scratch paths are gone.
    assert not (job_dir / "backup").exists()
    assert not (job_dir / "tmp").exists()


@pytest.mark.slow
def test_one_device(job_dir: Path, without_tensorflow: dict[str, str]) -> None:
    result = run_trainer(["--job-dir", str(job_dir), *FAST_ARGS, *EPOCH_ARGS])
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = read_metrics(job_dir)
    assert_trained(metrics, "one_device", replicas=1)
    assert metrics["xla"] is False  # XLA is slower than oneDNN on this CPU
    # TensorFlow leaves oneDNN off on CPUs without AVX512_VNNI/BF16 or AMX; the trainer turns it on.
    assert metrics["onednn"] is True
    assert_job_dir_layout(job_dir)

    # A finished job is not trained again: quick exit 0, metrics untouched.
    before = (job_dir / "metrics.json").read_text()
    # Answered before importing TensorFlow: there is none to import in this environment.
    rerun = run_trainer(["--job-dir", str(job_dir), *FAST_ARGS, *EPOCH_ARGS], env=without_tensorflow)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "holds a finished job" in rerun.stderr
    assert "Epoch 1/" not in rerun.stdout + rerun.stderr
    assert (job_dir / "metrics.json").read_text() == before

    # --overwrite trains again and replaces the metrics.
    again = run_trainer(["--job-dir", str(job_dir), *FAST_ARGS, *EPOCH_ARGS, "--overwrite", "--epochs", "1"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert read_metrics(job_dir)["epochs_run"] == 1


@pytest.mark.slow
def test_mirrored_over_two_logical_cpus(job_dir: Path) -> None:
    result = run_trainer(
        ["--job-dir", str(job_dir), *FAST_ARGS, *EPOCH_ARGS, "--strategy", "mirrored", "--logical-cpus", "2"]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert_trained(read_metrics(job_dir), "mirrored", replicas=2)
    assert_job_dir_layout(job_dir)


def run_fast_job_on_a_cluster(job_dir: Path, **nodes: Any) -> ClusterResult:
    """The fast three-epoch job on local trainer processes, one per node of ``nodes``."""
    return run_local_cluster(
        args=[*FAST_ARGS, *EPOCH_ARGS], job_dir=job_dir, env=trainer_env(), timeout=300, echo=False, **nodes
    )


@pytest.mark.slow
def test_multi_worker_mirrored_with_two_processes_and_an_evaluator(job_dir: Path) -> None:
    result = run_fast_job_on_a_cluster(job_dir, workers=2, evaluator=True, threads_per_node=1)
    assert result.chief_exit_code == 0, result.log_text()[-5000:]
    assert result.exit_codes == {"worker-0": 0, "worker-1": 0, "evaluator-0": 0}
    # The side-car evaluator saw the final epoch's checkpoint before it left.
    assert "checkpoints/ckpt-3: loss=" in result.log_text("evaluator-0")
    assert list((job_dir / "logs" / "eval").glob("events.out.tfevents.*"))
    metrics = read_metrics(job_dir)
    assert_trained(metrics, "multi_worker_mirrored", replicas=2)
    assert metrics["workers"] == 2
    assert_job_dir_layout(job_dir)
    # Both workers trained the same synchronous model.
    for node in ("worker-0", "worker-1"):
        assert "Epoch 3/3" in result.log_text(node)


@pytest.mark.slow
def test_parameter_server_with_chief_worker_and_ps(job_dir: Path) -> None:
    result = run_fast_job_on_a_cluster(job_dir, workers=1, ps=1, chief=True)
    assert result.chief_exit_code == 0, result.log_text()[-5000:]
    # The worker and the ps ended by themselves once metrics.json appeared.
    assert result.exit_codes == {"chief": 0, "worker-0": 0, "ps-0": 0}, result.log_text()[-3000:]
    assert "job finished; ps-0 exits" in result.log_text("ps-0")
    metrics = read_metrics(job_dir)
    assert_trained(metrics, "parameter_server", replicas=1)
    assert metrics["workers"] == 1
    assert metrics["parameter_servers"] == 1
    assert (job_dir / "model" / "saved_model.pb").exists()
