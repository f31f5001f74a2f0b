"""A team's AI Platform tuning material, unchanged, through the commands a user types: the
notebook's bash cell imports (package, module, the notebook's own unpinned requirements file,
the tuning spec), the requirements are hash-locked for the nodes against the package index, a
study of 4 trials runs on a standing local cluster with the spec as AI Platform took it, each
trial keeps its own model (the sample joins TF_CONFIG's task.trial to its --output_dir and
deletes that folder first), `jobs` shows each trial's reported rmse, and the same code on two
nodes is warned about for ignoring TF_CONFIG whatever its outcome.

The lock and the nodes' cloudml-hypertune come from the package index this machine's pip and
uv reach, as a user's would: this test does not run offline."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from test_standing_queue import job_state, start_standing, trainstack, until

from trainstack.commands.main import main

SAMPLE = Path(__file__).parent / "fixtures" / "taxifare_notebook"
HEADER = "fare_amount,pickuplon,pickuplat,dropofflon,dropofflat,passengers"


def taxi_data(folder: Path) -> tuple[Path, Path]:
    """Fares that grow with the trip's length and the passengers, as CSV files the job's
    unprivileged user may read."""
    folder.mkdir()
    rng = np.random.default_rng(7)
    paths = []
    for name, rows in (("taxi-train.csv", 2000), ("taxi-valid.csv", 400)):
        places = rng.uniform(-1, 1, size=(rows, 4))
        passengers = rng.integers(1, 5, size=rows)
        trip = np.hypot(places[:, 0] - places[:, 2], places[:, 1] - places[:, 3])
        fare = 2.5 + 6.0 * trip + 0.5 * passengers + rng.normal(0, 0.3, rows)
        path = folder / name
        np.savetxt(path, np.column_stack([fare, places, passengers]), delimiter=",", header=HEADER, comments="")
        paths.append(path)
    return paths[0], paths[1]


def imported_stack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path]:
    """The notebook's material copied as a team keeps it, imported from its cell: the stack
    file and the tuning spec import wrote."""
    team = tmp_path / "notebook"
    shutil.copytree(SAMPLE, team)
    stack_file = tmp_path / "Pulumi.taxi.yaml"
    options = ["--stack", "taxi", "--project", "acme-ml", "--out", str(stack_file)]
    assert main(["import", str(team / "submit_cell.sh"), *options]) == 0, capsys.readouterr().err
    said = capsys.readouterr().out
    assert "job.requirements: requirements.txt beside the package's setup.py" in said
    return stack_file, tmp_path / "Pulumi.taxi.hptuning.yaml"


def for_a_local_rehearsal(stack_file: Path, data: tuple[Path, Path], models: Path, **cluster: Any) -> dict[str, Any]:
    """What a user changes to rehearse on this machine: the data and output paths of the
    job's arguments (its gs:// ones are Google's), the bucket folder kept as job.job_dir, and
    the cluster's shape."""
    document = yaml.safe_load(stack_file.read_text())
    config = document["config"]
    job = config["trainstack:job"]
    job.pop("job_dir", None)
    job.pop("buckets", None)
    job["args"] = [
        f"--train_data_paths={data[0]}",
        f"--eval_data_paths={data[1]}",
        f"--output_dir={models}",
        *[arg for arg in job["args"] if arg.startswith("--num_epochs")],
    ]
    config["trainstack:cluster"].update(cluster)
    return dict(document)


@pytest.mark.slow
def test_an_ai_platform_tuning_sample_imports_from_its_notebook_cell_and_tunes_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The package index a user's machine reaches, not the tests' own folder of wheels.
    monkeypatch.delenv("UV_OFFLINE")
    monkeypatch.delenv("UV_FIND_LINKS")
    stack_file, spec = imported_stack(tmp_path, capsys)
    data = taxi_data(tmp_path / "data")
    models = tmp_path / "models"
    models.mkdir()
    # Every trial's user writes its own folder there, as in a team's bucket.
    models.chmod(0o1777)
    stack_file.write_text(yaml.safe_dump(for_a_local_rehearsal(stack_file, data, models, idle_minutes=1)))
    assert main(["plan", "--stack-file", str(stack_file), "--json"]) == 0, capsys.readouterr().err
    [requirements] = [
        entry
        for entry in json.loads(capsys.readouterr().out)["executed_artifacts"]
        if entry["artifact"] == "job requirements"
    ]
    assert requirements["locked_from"].endswith("notebook/taxifare/requirements.txt")
    assert [pin.partition("==")[0] for pin in requirements["pins"]] == ["cloudml-hypertune"]

    workdir = tmp_path / "work"
    target = ["--stack-file", str(stack_file), "--local", "--workdir", str(workdir)]
    standing = start_standing(stack_file, workdir)
    try:
        bucket = until(lambda: next(iter(sorted((workdir / "bucket").glob("*_taxi"))), None), "the bucket", standing)
        until(lambda: job_state(bucket / "jobs" / "taxi") == "SUCCEEDED", "the stack's own job", standing)
        # --args overrides the stack's arguments flag by flag: the data paths stay.
        tuned = trainstack(
            "tune", *target, "--spec", str(spec), "--name", "fares", "--args", "--num_epochs=4", timeout=900
        )
        jobs = trainstack("jobs", *target, "--json")
    finally:
        standing.send_signal(signal.SIGTERM)
        standing.communicate(timeout=120)
    assert tuned.returncode == 0, tuned.stdout + tuned.stderr
    assert "--output_dir=" in tuned.stdout
    assert "--num_epochs=4 and then the trial's parameters" in tuned.stdout
    study = json.loads((bucket / "trainstack" / "tune" / "fares" / "study.json").read_text())
    trials = study["trials"]
    assert [trial["state"] for trial in trials] == ["SUCCEEDED"] * 4
    # Each trial kept its own model; the stack's own job (no trial) wrote the folder itself.
    assert sorted(path.name for path in models.iterdir()) == ["1", "2", "3", "4", "export"]
    for trial in trials:
        assert (models / str(trial["number"]) / "export" / "savedmodel" / "saved_model.pb").is_file()
    # `jobs` shows each trial's final metric, by name, as its code reported it.
    assert jobs.returncode == 0, jobs.stderr
    metrics = {row["name"]: row["metric"] for row in json.loads(jobs.stdout)["jobs"]}
    for trial in trials:
        assert metrics[f"fares_t{trial['number']}"] == {"name": "rmse", "value": pytest.approx(trial["metric"])}

    # The same code on two nodes: each trains alone and they race on one output folder; the
    # warning comes whatever the outcome.
    two_nodes = for_a_local_rehearsal(stack_file, data, models, workers={"count": 1, "machine_type": "n1-standard-4"})
    two_nodes["config"]["trainstack:cluster"].pop("idle_minutes")
    stack_file.write_text(yaml.safe_dump(two_nodes))
    ran = trainstack("local", "--stack-file", str(stack_file), "--workdir", str(tmp_path / "pair"), timeout=600)
    assert ran.returncode in (0, 3), ran.stdout + ran.stderr
    [warning] = [line for line in ran.stdout.splitlines() if line.startswith("warning: the job's code ignored")]
    assert "TF_CONFIG on chief, worker-0" in warning
