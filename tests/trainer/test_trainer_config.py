"""Flag parsing: the contract the boot scripts rely on, without importing TensorFlow."""

from __future__ import annotations

import pytest
from trainer_test_helpers import run_python

from trainer.config import parse_args


def test_help_answers_without_loading_tensorflow() -> None:
    result = run_python(
        [
            "-c",
            "import sys, trainer.task as t\n"
            "try:\n    t.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('TF_LOADED' if 'tensorflow' in sys.modules else 'TF_NOT_LOADED')",
        ],
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "--job-dir" in result.stdout
    assert "--strategy" in result.stdout
    assert "TF_NOT_LOADED" in result.stdout


def test_defaults_suit_a_real_run() -> None:
    config = parse_args(["--job-dir", "gs://bucket/job", "--data", "gs://bucket/flowers"], environ={})
    assert config.strategy == "auto"
    assert config.batch_size_per_replica == 32
    assert config.image_size == 180
    assert config.precision == "auto"
    assert config.logical_cpus == 1
    assert not config.overwrite


def test_job_dir_defaults_from_vertex_environment() -> None:
    environ = {
        "AIP_MODEL_DIR": "gs://bucket/base/model/",
        "AIP_CHECKPOINT_DIR": "gs://bucket/base/checkpoints/",
        "AIP_TENSORBOARD_LOG_DIR": "gs://bucket/tb/logs/",
    }
    config = parse_args(["--data", "synthetic"], environ=environ)
    assert config.job_dir == "gs://bucket/base"
    assert config.model_dir_override == "gs://bucket/base/model/"
    assert config.tensorboard_dir_override == "gs://bucket/tb/logs/"


def test_missing_job_dir_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--data", "synthetic"], environ={})
    assert exit_info.value.code == 2
    assert "--job-dir is required" in capsys.readouterr().err


@pytest.mark.parametrize(
    "bad",
    [
        ["--strategy", "horovod"],
        ["--epochs", "0"],
        ["--strategy", "tpu"],
        ["--validation-split", "1.5"],
    ],
)
def test_bad_flags_are_rejected(bad: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--job-dir", "/tmp/x", "--data", "synthetic", *bad], environ={})


def test_abbreviated_flags_are_refused() -> None:
    """A stack's job.args may not set --job-dir; an abbreviation must not reach it either."""
    import pytest

    from trainer.config import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--job", "gs://someone-elses-bucket/x", "--data", "synthetic"], environ={})
