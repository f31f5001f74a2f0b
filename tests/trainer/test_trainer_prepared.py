"""A rehearsal (trainer.rehearsal, run by a standing node's warm interpreter before the job
comes): the job that follows in the same process takes the rehearsal's model where its settings
fit, and trains exactly as a process that built it afresh would: same losses, epoch by epoch,
and the same held-out figures. A job whose model differs builds its own. The rehearsal writes
nothing where the job's directory is."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer_test_helpers import FAST_ARGS, read_metrics, run_python, run_trainer

# Two epochs of three steps: the optimizer's state and learning rate count from the second step.
JOB = [*FAST_ARGS, "--epochs", "2", "--steps-per-epoch", "3"]
REHEARSED_THEN_RUN = """\
import sys
from trainer import rehearsal, task
rehearsed, job = sys.argv[1].split(), sys.argv[2].split()
print("rehearsal:", rehearsal.rehearse(rehearsed, lambda line: print("told:", line, flush=True)), flush=True)
sys.exit(task.main(job))
"""
REUSED = "the model was built and its training step traced before the job arrived"
NOT_FITTING = "the rehearsed model does not fit this job's settings"
# The trainer's runs differ in their last digits from run to run (threads sum in any order) but
# for TensorFlow's deterministic ops: with them, equal figures mean the same training.
DETERMINISTIC = {"TF_DETERMINISTIC_OPS": "1"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("job_change", "reused"),
    [
        # A study's next trial: another learning rate, the same model.
        (["--learning-rate", "0.01"], True),
        # Another image size: another model, built afresh (the strategy is the rehearsal's).
        (["--image-size", "16"], False),
        # mixed_float16's loss scale moves in the rehearsal's step and is not set back (over
        # three steps it shows in no figure): no model is kept.
        (["--precision", "mixed_float16"], False),
    ],
    ids=["another-learning-rate", "another-model", "mixed-float16"],
)
def test_a_job_after_a_rehearsal_trains_as_a_fresh_process_would(
    job_change: list[str], reused: bool, tmp_path: Path
) -> None:
    job = [*JOB, *job_change]
    # The rehearsal is given the ended job's arguments, its job directory among them.
    ended_dir = tmp_path / "ended"
    rehearsed_dir, fresh_dir = tmp_path / "rehearsed", tmp_path / "fresh"
    rehearsal = [*JOB, *(job_change if "mixed_float16" in job_change else []), "--job-dir", str(ended_dir)]
    run = run_python(
        ["-c", REHEARSED_THEN_RUN, " ".join(rehearsal), " ".join([*job, "--job-dir", str(rehearsed_dir)])],
        DETERMINISTIC,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "rehearsal: a one_device strategy" in run.stdout
    # It told the agent once its strategy was made, before the model (the agent then waits longer).
    assert run.stdout.index("told: strategy made") < run.stdout.index("rehearsal:")
    assert (REUSED in run.stderr) is reused
    assert (NOT_FITTING in run.stderr) is (not reused and "mixed_float16" not in job_change)
    # The rehearsal wrote nothing in the directory of the job it was given.
    assert not ended_dir.exists()
    fresh = run_trainer([*job, "--job-dir", str(fresh_dir)], DETERMINISTIC)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    rehearsed_metrics, fresh_metrics = read_metrics(rehearsed_dir), read_metrics(fresh_dir)
    for figure in ("loss_history", "accuracy_history", "eval_loss", "eval_accuracy"):
        assert rehearsed_metrics[figure] == fresh_metrics[figure], figure
