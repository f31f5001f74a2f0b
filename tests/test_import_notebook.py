"""`trainstack import` of a notebook's bash cell: the gcloud command found among the cell's
other lines, the variables the cell assigns plainly written in, every other one named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from wheel_index import node_pins, wheel

from trainstack.base.project import PROJECT_ROOT
from trainstack.commands.main import main

# As a tuning sample's notebook cell has it: variables, an echo, a cleanup, then the submit.
CELL = f"""%%bash
BUCKET=acme-taxi
REGION=us-central1
JOB_NAME=taxifare_$(date -u +%y%m%d_%H%M%S)
OUTDIR=gs://${{BUCKET}}/taxifare/trained
echo $OUTDIR $REGION $JOB_NAME
gcloud storage rm -r $OUTDIR
gcloud ai-platform jobs submit training $JOB_NAME \\
    --region=$REGION \\
    --module-name=tabular_mlp.task \\
    --package-path={PROJECT_ROOT}/examples/tabular_mlp \\
    --scale-tier=BASIC \\
    --runtime-version=2.11 \\
    -- \\
    --output_dir=$OUTDIR \\
    --train_data_path="gs://${{BUCKET}}/taxifare/data/taxi-train*" \\
    --nbuckets=10
"""


def run_import(tmp_path: Path, text: str, *options: str) -> tuple[int, Path]:
    cell = tmp_path / "cell.sh"
    cell.write_text(text)
    out = tmp_path / "Pulumi.taxi.yaml"
    return main(["import", str(cell), "--stack", "taxi", "--project", "acme-ml", "--out", str(out), *options]), out


def test_a_notebook_cells_command_imports_with_the_cells_own_variables_written_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defect: such a file was answered "neither YAML nor JSON"."""
    code, out = run_import(tmp_path, CELL)
    err = capsys.readouterr()
    assert code == 0, err
    config = yaml.safe_load(out.read_text())["config"]
    job = config["trainstack:job"]
    assert job["args"] == [
        "--output_dir=gs://acme-taxi/taxifare/trained",
        "--train_data_path=gs://acme-taxi/taxifare/data/taxi-train*",
        "--nbuckets=10",
    ]
    assert config["gcp:region"] == "us-central1"
    # Built at run time, so not a value: the job is named after the stack.
    assert job["name"] == "taxi"
    text = out.read_text()
    assert "the cell's own variables are written into the command: BUCKET, OUTDIR, REGION" in text
    assert "the cell assigns JOB_NAME with more than a plain value" in text
    assert "the cell's other lines are not imported (nothing of it runs): line 6 (echo $OUTDIR $REGION); line 7" in text


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("DATA=$HOME/data", "$DATA"),  # built of what the environment holds
        ('DATA="gs://a b"', "$DATA"),  # not one plain word
        ("DATA=`cat path`", "$DATA"),
    ],
)
def test_a_variable_the_cell_does_not_assign_plainly_is_named_never_taken_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, line: str, named: str
) -> None:
    monkeypatch.setenv("DATA", "gs://from-the-environment/x")
    monkeypatch.setenv("HOME", "/root")
    text = CELL.replace("echo $OUTDIR", f"{line}\necho $OUTDIR").replace("--nbuckets=10", "--data=$DATA")
    code, out = run_import(tmp_path, text)
    err = capsys.readouterr().err
    assert code == 1
    assert f"the command uses shell variables ({named})" in err
    assert "from-the-environment" not in err
    assert not out.exists()


def test_a_password_the_cell_assigns_is_refused_as_in_a_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = CELL.replace("REGION=us-central1", "REGION=us-central1\nDB=postgres://trainer:Tr0ub4dor3@db:5432/runs")
    text = text.replace("--nbuckets=10", "--db=$DB")
    code, out = run_import(tmp_path, text)
    err = capsys.readouterr().err
    assert code == 1
    assert "Tr0ub4dor3" not in err
    assert not out.exists()


def test_a_file_with_no_submit_command_is_still_neither_yaml_nor_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = run_import(tmp_path, "%%bash\nBUCKET=x\necho hello: [\n")
    assert code == 1
    assert "Traceback" not in capsys.readouterr().err


def test_a_tuned_job_whose_package_imports_hypertune_is_told_to_list_cloudml_hypertune(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], wheel_index: Path
) -> None:
    for version in node_pins("numpy"):
        wheel(wheel_index, "numpy", version)
    wheel(wheel_index, "cloudml-hypertune", "0.1.0.dev6")
    package = tmp_path / "team" / "trainer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text("import json\nimport hypertune\n\nhpt = hypertune.HyperTune()\n")
    (tmp_path / "team" / "hptuning_config.yaml").write_text(
        "trainingInput:\n  hyperparameters:\n    goal: MINIMIZE\n    hyperparameterMetricTag: rmse\n"
        "    maxTrials: 4\n    params:\n      - {parameterName: lr, type: DOUBLE, minValue: 0.0001, maxValue: 0.1, "
        "scaleType: UNIT_LOG_SCALE}\n"
    )
    text = (
        CELL.replace(f"{PROJECT_ROOT}/examples/tabular_mlp", str(package))
        .replace("tabular_mlp.task", "trainer.task")
        .replace("--scale-tier=BASIC", f"--scale-tier=BASIC --config={tmp_path / 'team' / 'hptuning_config.yaml'}")
    )
    code, out = run_import(tmp_path, text)
    captured = capsys.readouterr()
    assert out.exists(), captured.err
    said = "the job's package imports hypertune, which no node installs: add the line cloudml-hypertune to a "
    assert said + "requirements file and name it in trainstack:job.requirements" in out.read_text()
    assert code == 0, captured.err
    # Beside the package's setup.py (AI Platform's layout), the requirements file is the job's:
    # the notice names it until it lists cloudml-hypertune, in any form.
    (tmp_path / "team" / "setup.py").write_text("from setuptools import setup\nsetup(name='trainer')\n")
    (tmp_path / "team" / "requirements.txt").write_text("numpy>=1.14\n")
    code, out = run_import(tmp_path, text, "--force")
    written = out.read_text()
    assert code == 0
    assert "requirements: ../" in written, written
    assert (
        f"add the line cloudml-hypertune to {os.path.relpath(tmp_path / 'team' / 'requirements.txt', PROJECT_ROOT)}"
        in written
    )
    (tmp_path / "team" / "requirements.txt").write_text("numpy>=1.14\ncloudml_hypertune  # reports the metric\n")
    code, out = run_import(tmp_path, text, "--force")
    assert code == 0
    assert "imports hypertune" not in out.read_text()
