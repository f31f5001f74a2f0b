"""`trainstack tune` and `tune status` at the command line, before any trial runs: a bad spec,
a stack without a queue, a corrupt or missing study and misplaced options are each a clear
line and exit status, with nothing written; `tune status` reads a study back as a table, JSON
and a chart."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from test_standing_queue import stack_config

from stack_helpers import write_stack
from trainstack.base.bucket import DirectoryBucket
from trainstack.commands.main import main
from trainstack.tuning import engine
from trainstack.tuning.spec import spec_from_mapping
from trainstack.tuning.study import Trial, study_object
from trainstack_contract.lifecycle import TrialState

GOOD = """\
trainingInput:
  hyperparameters:
    goal: MINIMIZE
    hyperparameterMetricTag: epoch_loss
    maxTrials: 2
    params:
      - {parameterName: learning-rate, type: DOUBLE, minValue: 0.001, maxValue: 0.1, scaleType: UNIT_LOG_SCALE}
"""


@pytest.fixture
def target(tmp_path: Path) -> list[str]:
    stack_file = write_stack(tmp_path, stack_config(), stack="loop")
    return ["--stack-file", str(stack_file), "--local", "--workdir", str(tmp_path / "work")]


def bucket_of(tmp_path: Path) -> Path:
    return tmp_path / "work" / "bucket" / "your-gcp-project_loop"


def test_a_bad_spec_is_one_line_per_problem_and_nothing_is_written(
    tmp_path: Path, target: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "hp.yaml"
    spec.write_text(GOOD.replace("minValue: 0.001", "minValue: 0.5").replace("maxTrials: 2", "maxTrials: 100000"))
    assert main(["tune", *target, "--spec", str(spec)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"trainstack: tune: {spec}: trainingInput.hyperparameters.params[0]: minValue 0.5 is not below maxValue 0.1",
        f"trainstack: tune: {spec}: trainingInput.hyperparameters.maxTrials: 100000 is outside 1 to 1000 "
        "(each trial is a job on the stack's queue)",
    ]
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("job-dir", "parameterName job-dir: --job-dir is a flag the stack sets for every trial"),
        ("job", "parameterName job: --job is a prefix of --job-dir, which argparse expands to a flag"),
        (
            "epochs",
            "parameterName epochs: --epochs is a flag the stack sets for every trial; use trainstack:job.epochs",
        ),
    ],
)
def test_a_parameter_named_as_a_flag_the_stack_sets_is_refused(
    tmp_path: Path, target: list[str], capsys: pytest.CaptureFixture[str], name: str, words: str
) -> None:
    """--job-dir=VALUE after the stack's own would move the trial's outputs out of its directory;
    the built-in trainer's job keys are the stack's to set too."""
    spec = tmp_path / "hp.yaml"
    spec.write_text(GOOD.replace("parameterName: learning-rate", f"parameterName: {name}"))
    assert main(["tune", *target, "--spec", str(spec)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert words in err
    assert not bucket_of(tmp_path).exists()


def test_a_stack_without_a_queue_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = stack_config()
    del config["trainstack:cluster"]["idle_minutes"]
    del config["trainstack:job"]
    stack_file = write_stack(tmp_path, config, stack="noqueue")
    spec = tmp_path / "hp.yaml"
    spec.write_text(GOOD)
    code = main(["tune", "--stack-file", str(stack_file), "--local", "--spec", str(spec), "--epochs", "1"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1
    assert "runs no queue" in err


def test_status_reads_a_study_back_as_a_table_json_and_a_chart(
    tmp_path: Path, target: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    store = DirectoryBucket(bucket_of(tmp_path))
    spec = spec_from_mapping({"goal": "MINIMIZE", "hyperparameterMetricTag": "epoch_loss", "maxTrials": 2, "params": [
        {"parameterName": "learning-rate", "type": "DOUBLE", "minValue": 0.001, "maxValue": 0.1, "scaleType": "UNIT_LOG_SCALE"},
        {"parameterName": "act", "type": "CATEGORICAL", "categoricalValues": ["relu", "tanh"]},
    ]})  # fmt: skip
    study, _ = engine.open_study(store, "lr", spec, {"k": "v"}, "2026-11-26T00:00:00Z", seed=1)
    trials = (
        Trial(
            1,
            {"learning-rate": 0.01, "act": "relu"},
            "t",
            TrialState.SUCCEEDED,
            1,
            "jobs/q1_lr_t1",
            0.5,
            ended="2026-11-26T00:01:00Z",
        ),
        Trial(
            2,
            {"learning-rate": 0.05, "act": "tanh"},
            "t",
            TrialState.SUCCEEDED,
            2,
            "jobs/q2_lr_t2",
            0.25,
            ended="2026-11-26T00:02:00Z",
        ),
    )
    (bucket_of(tmp_path) / study_object("lr")).write_bytes(replace(study, trials=trials).to_json())
    chart = tmp_path / "lr.svg"
    assert main(["tune", "status", *target, "--chart", str(chart)]) == 0
    out = capsys.readouterr().out
    assert "study lr: ACTIVE; 2 of 2 trials (2 SUCCEEDED); goal MINIMIZE epoch_loss" in out
    assert "best: trial 2 (job 2): epoch_loss=0.25 with --learning-rate=0.05 --act=tanh" in out
    assert chart.read_text().lstrip().startswith("<?xml")
    assert main(["tune", "status", *target, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["best_trial"] == 2
    assert [t["metric"] for t in document["trials"]] == [0.5, 0.25]


def test_a_corrupt_or_missing_study_is_one_line(
    tmp_path: Path, target: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tune", *target, "--study", "nothing"]) == 1
    assert capsys.readouterr().err == "trainstack: tune: no study nothing on stack loop: start it with --spec FILE\n"
    assert main(["tune", "status", *target]) == 1
    assert "studies on stack loop: none" in capsys.readouterr().err
    path = bucket_of(tmp_path) / study_object("broken")
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"version": 1, "spec": ')
    assert main(["tune", "status", *target, "--study", "broken"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "is not JSON" in err
    assert main(["tune", *target, "--study", "broken"]) == 1
    assert capsys.readouterr().err.count("\n") == 1
    assert path.read_bytes() == b'{"version": 1, "spec": '


def test_options_of_the_other_action_are_refused(
    tmp_path: Path, target: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tune", "status", *target, "--spec", "hp.yaml"]) == 2
    assert "--spec: these start or resume a study" in capsys.readouterr().err
    assert main(["tune", *target, "--chart", "x.png", "--study", "lr"]) == 2
    assert "belong to `trainstack tune status`" in capsys.readouterr().err
    assert main(["tune", *target, "--study", "lr", "--epochs", "3"]) == 1
    assert "--epochs: a study resumed by --study alone runs the job it was started with" in capsys.readouterr().err
