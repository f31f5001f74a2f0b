"""One decision per job: every replica trains with the chief's settings, and a resume keeps
the settings recorded beside its backup (trainer.job_settings)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from trainer_test_helpers import FAST_ARGS, trainer_env

from trainer.config import parse_args
from trainer.job_settings import (
    MAX_SETTINGS_BYTES,
    JobSettings,
    SettingsChanged,
    parse_record,
    resume_with,
)
from trainstack.localrun.bare_trainers import run_local_cluster

RECORDED = JobSettings(
    precision="mixed_bfloat16",
    xla=False,
    steps_per_epoch=40,
    steps_per_execution=8,
    global_batch=32,
    num_classes=5,
    model="cnn",
    data="synthetic",
    image_size=32,
    batch_size_per_replica=16,
    replicas=2,
    epochs=5,
    learning_rate=0.002,
    seed=42,
    validation_split=0.2,
)
PATH = "/jobs/flowers/backup/job_settings.json"


def config_for(*flags: str):  # type: ignore[no-untyped-def]
    return parse_args(["--job-dir", "/jobs/flowers", "--data", "synthetic", *flags], environ={})


def test_a_resume_under_auto_takes_the_recorded_precision_and_xla() -> None:
    # This node measured float32 (say, under load); the job started in bfloat16.
    mine = dataclasses.replace(RECORDED, precision="float32")
    assert resume_with(config_for("--precision", "auto"), RECORDED, mine, PATH) == RECORDED


def test_a_resume_that_asks_for_other_settings_is_refused_naming_each() -> None:
    mine = dataclasses.replace(RECORDED, precision="float32", image_size=64, epochs=2)
    with pytest.raises(SettingsChanged) as refused:
        resume_with(config_for("--precision", "float32"), RECORDED, mine, PATH)
    message = str(refused.value)
    assert "--precision float32 (backup: mixed_bfloat16)" in message
    assert "--image-size 64 (backup: 32)" in message
    assert "--epochs 2 (backup: 5)" in message
    assert "/jobs/flowers/backup" in message
    # The two ways on.
    assert "Resume with the backup's settings" in message
    assert "--fresh" in message


def test_a_resume_on_another_cluster_shape_is_refused() -> None:
    mine = dataclasses.replace(RECORDED, replicas=3, global_batch=48)
    with pytest.raises(SettingsChanged, match=r"global batch 48 \(backup: 32\); replicas 3 \(backup: 2\)"):
        resume_with(config_for(), RECORDED, mine, PATH)


def test_the_record_reads_back_what_was_written() -> None:
    assert parse_record(json.dumps(dataclasses.asdict(RECORDED)), PATH) == RECORDED


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[]", "not a JSON object"),
        ("{", "not a JSON object"),
        (json.dumps({**dataclasses.asdict(RECORDED), "extra": 1}), "its keys differ"),
        (json.dumps({**dataclasses.asdict(RECORDED), "image_size": "32"}), "image_size is '32'"),
        (json.dumps({**dataclasses.asdict(RECORDED), "epochs": True}), "epochs is True"),
        (json.dumps({**dataclasses.asdict(RECORDED), "precision": "fp8"}), "precision 'fp8'"),
        (" " * (MAX_SETTINGS_BYTES + 1), f"over {MAX_SETTINGS_BYTES} bytes"),
    ],
)
def test_a_damaged_or_foreign_record_stops_the_run_with_what_to_do(text: str, why: str) -> None:
    with pytest.raises(Exception, match="remove the backup to start over") as refused:
        parse_record(text, PATH)
    assert why in str(refused.value)


# Appended to a line ``choices = {NODE: PRECISION}``.
HOOK = """
import json, os
task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {})
choice = choices.get(f"{task.get('type')}-{task.get('index')}")
if choice:
    # This node's own measurement, as a loaded CPU once gave it.
    import trainer.precision
    trainer.precision.auto_precision = lambda kind, num_gpus: choice
"""


@pytest.mark.slow
def test_workers_whose_probes_disagree_train_with_the_chiefs_precision(tmp_path: Path) -> None:
    """The README's main job once failed with 'Shape mismatch in the collective instance':
    two workers took mixed_bfloat16 and one float32, each from its own probe."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(f"choices = {{'worker-0': 'mixed_bfloat16', 'worker-1': 'float32'}}\n{HOOK}")
    job_dir = tmp_path / "job"
    environment = trainer_env()
    environment["PYTHONPATH"] = f"{hook}:{environment['PYTHONPATH']}"
    result = run_local_cluster(
        workers=2,
        args=[*FAST_ARGS, "--epochs", "1", "--steps-per-epoch", "8", "--precision", "auto"],
        job_dir=job_dir,
        env=environment,
        timeout=240,
        threads_per_node=1,
        echo=False,
    )
    assert result.exit_codes == {"worker-0": 0, "worker-1": 0}, result.log_text()[-4000:]
    for node in ("worker-0", "worker-1"):
        assert "precision=mixed_bfloat16" in result.log_text(node)
    assert "this node on its own would train with precision float32; it follows the job's decision" in (
        result.log_text("worker-1")
    )
    assert "follows the job's decision" not in result.log_text("worker-0")
    assert json.loads((job_dir / "metrics.json").read_text())["precision"] == "mixed_bfloat16"
