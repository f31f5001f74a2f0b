"""Host restarts: SIGKILL a two-worker job after its first epoch and start it again; a resume
from a damaged backup."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from polling import wait_until
from trainer_test_helpers import FAST_ARGS, REPOSITORY_ROOT, read_metrics, run_python, run_trainer, trainer_env

from trainstack.localrun.bare_trainers import BareTrainerCluster, run_local_cluster

EPOCHS = 5
# A step bound longer than an epoch: only the backup at every epoch's end lets the restart
# resume (it once started over from step 0). The default interval, minutes of training, would
# not save before the kill.
RESUME_ARGS = [*FAST_ARGS, "--epochs", str(EPOCHS), "--steps-per-epoch", "40", "--save-every-steps", "200"]
# A generous bound for a stuck run; the test never waits on it when all is well.
DEADLINE_SECONDS = 240


def wait_for_first_epoch(job_dir: Path, cluster: BareTrainerCluster) -> dict[str, object]:
    """Polls the chief's progress file: training state for epoch 1 is backed up."""
    progress = job_dir / "progress.json"

    def first_epoch_backed_up() -> dict[str, object] | None:
        content: dict[str, object] = json.loads(progress.read_text()) if progress.exists() else {}
        return content if int(str(content.get("epochs_completed", 0))) >= 1 else None

    def nodes_exited() -> str | None:
        exited = {name: code for name, code in cluster.supervisor.returncodes().items() if code is not None}
        if not exited:
            return None
        return f"nodes exited early: {exited}\n" + "\n".join(
            line for lines in cluster.logs.values() for line in lines[-20:]
        )

    return wait_until(
        first_epoch_backed_up, "the first epoch's backup", DEADLINE_SECONDS, interval=0.05, gone_wrong=nodes_exited
    )


@pytest.mark.slow
def test_killed_job_resumes_instead_of_starting_over(job_dir: Path) -> None:
    cluster = BareTrainerCluster(
        workers=2, args=[*RESUME_ARGS, "--job-dir", str(job_dir)], env=trainer_env(), threads_per_node=1, echo=False
    ).start()
    try:
        progress = wait_for_first_epoch(job_dir, cluster)
    finally:
        # Every process at once, without warning, as a host restart does.
        cluster.signal_all(signal.SIGKILL)
        for name in cluster.supervisor.names:
            cluster.supervisor.process(name).wait(timeout=30)
        cluster.supervisor.close()
    assert not (job_dir / "metrics.json").exists(), "the job finished before the kill"
    assert list((job_dir / "backup").rglob("*.index")), "no backup was written"
    recorded = json.loads((job_dir / "backup" / "job_settings.json").read_text())
    assert recorded["image_size"] == 32
    assert recorded["epochs"] == EPOCHS

    # Restarted with another image size, the job would restore the backup into another
    # shape (or, with fewer epochs, ship the old model as final): every node refuses.
    changed = run_local_cluster(
        workers=2,
        args=[*RESUME_ARGS, "--image-size", "40"],
        job_dir=job_dir,
        env=trainer_env(),
        timeout=DEADLINE_SECONDS,
        threads_per_node=1,
        echo=False,
    )
    assert changed.exit_codes == {"worker-0": 2, "worker-1": 2}, changed.log_text()[-5000:]
    for node in ("worker-0", "worker-1"):
        assert "--image-size 40 (backup: 32)" in changed.log_text(node)
    assert json.loads((job_dir / "backup" / "job_settings.json").read_text()) == recorded

    result = run_local_cluster(
        workers=2,
        args=RESUME_ARGS,
        job_dir=job_dir,
        env=trainer_env(),
        timeout=DEADLINE_SECONDS,
        threads_per_node=1,
        echo=False,
    )
    assert result.chief_exit_code == 0, result.log_text()[-5000:]

    metrics = read_metrics(job_dir)
    assert metrics["resumed"] is True
    resumed_epochs = metrics["epochs_resumed"]
    assert 1 <= resumed_epochs < EPOCHS
    # Only the remaining epochs ran after the restart...
    assert metrics["epochs_run"] == EPOCHS - resumed_epochs
    assert f"Epoch {resumed_epochs + 1}/{EPOCHS}" in result.log_text("worker-0")
    assert "Epoch 1/" not in result.log_text("worker-0")
    assert "resuming from the backup" in result.log_text("worker-0")
    # ...starting from the trained weights, not from scratch.
    assert metrics["loss_history"][0] < float(progress["loss"])  # type: ignore[arg-type]
    assert metrics["replicas"] == 2

    # The exported model loads and predicts.
    check = run_python(
        [
            "-c",
            "import sys, numpy as np, tf_keras as keras\n"
            "model = keras.models.load_model(sys.argv[1])\n"
            "probabilities = model.predict(np.zeros((2, 32, 32, 3), np.float32), verbose=0)\n"
            "assert probabilities.shape == (2, 5), probabilities.shape\n"
            "assert np.allclose(probabilities.sum(axis=1), 1.0, atol=1e-3)\n"
            "print('PREDICTED')",
            str(job_dir / "model"),
        ],
        timeout=120,
    )
    assert "PREDICTED" in check.stdout, check.stderr[-3000:]


def interrupted_single_node_job(job_dir: Path) -> None:
    """One trainer (no TF_CONFIG), killed without warning once its first epoch is backed up."""
    trainer = subprocess.Popen(
        [sys.executable, "-m", "trainer.task", *RESUME_ARGS, "--job-dir", str(job_dir)],
        cwd=REPOSITORY_ROOT,
        env=trainer_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    progress = job_dir / "progress.json"
    try:
        wait_until(
            lambda: progress.exists() and json.loads(progress.read_text())["epochs_completed"] >= 1,
            "the first epoch's end",
            DEADLINE_SECONDS,
            interval=0.05,
            gone_wrong=lambda: None if trainer.poll() is None else trainer.communicate()[1][-3000:],
        )
    finally:
        trainer.kill()
        trainer.communicate(timeout=60)
    assert not (job_dir / "metrics.json").exists(), "the job finished before the kill"


def latest_backup(job_dir: Path) -> Path:
    """The prefix of the backup checkpoint a resume restores (tf-keras reads backup/chief)."""
    state = (job_dir / "backup" / "chief" / "checkpoint").read_text()
    match = re.search(r'^model_checkpoint_path: "([^"]+)"$', state, re.MULTILINE)
    assert match is not None, state
    return job_dir / "backup" / "chief" / match.group(1)


@pytest.mark.slow
def test_a_truncated_backup_fails_the_resume_naming_the_file_and_changes_nothing(tmp_path: Path) -> None:
    """Defect: a backup file cut short (a full disk, a copy that stopped) made every resume end
    in TensorFlow's IndexError traceback. The resume now exits 2 with one line that names the
    damaged file and what to do, and leaves every file of the job as it was."""
    interrupted = tmp_path / "interrupted"
    interrupted_single_node_job(interrupted)
    for damaged in ("data-00000-of-00001", "index"):
        job_dir = tmp_path / damaged
        shutil.copytree(interrupted, job_dir)
        target = Path(f"{latest_backup(job_dir)}.{damaged}")
        with target.open("r+b") as handle:
            handle.truncate(target.stat().st_size // 2)
        before = {path: path.read_bytes() for path in job_dir.rglob("*") if path.is_file()}

        result = run_trainer([*RESUME_ARGS, "--job-dir", str(job_dir)])

        assert result.returncode == 2, result.stderr[-3000:]
        assert "Traceback" not in result.stderr, result.stderr[-3000:]
        [line] = [each for each in result.stderr.splitlines() if each.startswith("trainer: error:")]
        # A data file cut short is told from its index; an index cut short is no table at all.
        expected = "truncated: Read less bytes than requested" if damaged.startswith("data") else "truncated or corrupt"
        assert f"{target} is damaged ({expected}" in line
        assert f"Move {job_dir / 'backup'} aside (or remove it) to start the job over" in line
        assert {path: path.read_bytes() for path in job_dir.rglob("*") if path.is_file()} == before


# Steps of 32 px images at batch 16 take milliseconds here: an epoch of 600 lasts seconds, so
# one-second backups land inside epochs, where only a time-based backup can be.
TIMED_ARGS = [*FAST_ARGS, "--epochs", "2", "--steps-per-epoch", "600", "--steps-per-execution", "10"]
_BACKUP_AT = re.compile(r"backup at step (\d+) of the job")
_STOPPED = re.compile(r"stopped by SIGTERM after step (\d+) of the job; the backup reaches step (\d+)")
_RESUMED_AT = re.compile(r"resuming from the backup at epoch (\d+), step (\d+)")


@pytest.mark.slow
def test_a_preempted_job_resumes_from_its_last_timed_backup_redoing_at_most_one_interval(tmp_path: Path) -> None:
    """Backups by training time (--save-every-seconds, here a short one), written in the
    background: SIGTERM (a preemption) lets the backup under way finish, and the restart
    resumes at the last backup, having lost no more than one interval's steps."""
    job_dir = tmp_path / "job"
    args = [*TIMED_ARGS, "--save-every-seconds", "1", "--job-dir", str(job_dir)]
    trainer = subprocess.Popen(
        [sys.executable, "-m", "trainer.task", *args],
        cwd=REPOSITORY_ROOT,
        env=trainer_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    deadline = time.monotonic() + DEADLINE_SECONDS
    assert trainer.stderr is not None
    try:
        # Two backups, the second inside the first epoch: the interval, in steps, is known.
        while len([m for line in lines if (m := _BACKUP_AT.search(line))]) < 2:
            line = trainer.stderr.readline()
            assert line or trainer.poll() is None, "\n".join(lines[-40:])
            assert time.monotonic() < deadline, "no two backups were written"
            lines.append(line.rstrip())
        trainer.send_signal(signal.SIGTERM)
        _, rest = trainer.communicate(timeout=120)
    finally:
        if trainer.poll() is None:
            trainer.kill()
    lines += rest.splitlines()
    assert trainer.returncode == 128 + signal.SIGTERM, "\n".join(lines[-40:])
    backups = [int(m[1]) for line in lines if (m := _BACKUP_AT.search(line))]
    [(trained, backed_up)] = [(int(m[1]), int(m[2])) for line in lines if (m := _STOPPED.search(line))]
    assert backed_up == backups[-1]
    assert backups[0] % 600 != 0, backups  # inside an epoch: by time, not at an epoch's end
    longest_interval = max(later - earlier for earlier, later in zip([0, *backups], backups, strict=False))
    assert trained - backed_up <= longest_interval + 10, (trained, backups)

    resumed = run_trainer(args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    [(epoch, step)] = [
        (int(m[1]), int(m[2])) for line in resumed.stderr.splitlines() if (m := _RESUMED_AT.search(line))
    ]
    assert epoch * 600 + step == backed_up
    assert read_metrics(job_dir)["resumed"] is True
