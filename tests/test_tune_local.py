"""A study on a standing local cluster, end to end through the commands a user types:
`trainstack tune --local` queues trials of the built-in trainer with Optuna's parameters, the
`tune` command is killed while trials are queued and running and resumed with --study alone,
and every trial runs once, with its own parameters, its metric read from the summaries in its
own job directory; `tune status` names the best and draws the chart."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_standing_queue import (
    REPOSITORY_ROOT,
    SHORT,
    environment,
    job_state,
    stack_config,
    start_standing,
    trainstack,
    until,
)

from stack_helpers import LEARNING_RATE_STUDY, write_stack


def study_document(bucket: Path) -> dict[str, Any] | None:
    path = bucket / "trainstack" / "tune" / "study" / "study.json"
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def study_on_a_standing_stack(
    tmp_path: Path, shipped: str, stack: str, idle_minutes: int, parallel: int
) -> tuple[Path, Path, list[str]]:
    """A stack file, its work directory and a spec of three learning-rate trials (``parallel``
    at once); the target options of its commands."""
    stack_file = write_stack(tmp_path, stack_config(shipped, idle_minutes=idle_minutes), stack=stack)
    workdir = tmp_path / "work"
    (tmp_path / "hptuning_config.yaml").write_text(LEARNING_RATE_STUDY.format(trials=3, parallel=parallel))
    return stack_file, workdir, ["--stack-file", str(stack_file), "--local", "--workdir", str(workdir)]


@pytest.mark.slow
def test_a_study_killed_midway_resumes_and_runs_every_trial_once_with_its_own_metric(tmp_path: Path) -> None:
    stack_file, workdir, target = study_on_a_standing_stack(tmp_path, "dev", "tuned", idle_minutes=2, parallel=2)
    spec = tmp_path / "hptuning_config.yaml"
    standing = start_standing(stack_file, workdir)
    try:
        bucket = until(lambda: next(iter(sorted((workdir / "bucket").glob("*_tuned"))), None), "the bucket", standing)
        tune = subprocess.Popen(
            [sys.executable, "-m", "trainstack", "tune", *target, "--spec", str(spec), "--name", "study", *SHORT],
            cwd=REPOSITORY_ROOT,
            env=environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

        def first_trial_running() -> bool:
            study = study_document(bucket)
            return bool(study and study["trials"] and study["trials"][0]["state"] == "RUNNING")

        until(first_trial_running, "the first trial running", standing)
        tune.send_signal(signal.SIGTERM)
        out, err = tune.communicate(timeout=60)
        assert tune.returncode == 130, out + err
        assert "go on on stack tuned" in err
        assert f"`trainstack tune {' '.join(target)} --study study` resumes it" in err
        assert "Traceback" not in err
        left = study_document(bucket)
        assert left is not None
        assert 1 <= len(left["trials"]) <= 2
        # Resumed from the bucket alone: its spec and job are in the study.
        # The rest of the study: its trials train one after another (a hang guard).
        resumed = trainstack("tune", *target, "--study", "study", timeout=600)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert "study study resumed" in resumed.stdout
    finally:
        standing.send_signal(signal.SIGTERM)
        standing.communicate(timeout=120)
    study = study_document(bucket)
    assert study is not None
    assert study["state"] == "SUCCEEDED"
    trials = study["trials"]
    assert [trial["state"] for trial in trials] == ["SUCCEEDED"] * 3
    assert len({trial["params"]["learning-rate"] for trial in trials}) == 3
    # One job per trial, whatever the kill interrupted.
    index = json.loads((bucket / "trainstack" / "queue" / "index.json").read_text())
    assert [entry["name"] for entry in index["jobs"]] == ["study_t1", "study_t2", "study_t3"]
    for trial in trials:
        job_dir = bucket / trial["job_dir"]
        # The metric is the trial's own: what its trainer logged for its (only) epoch.
        assert trial["source"] == str(job_dir / "logs" / "train")
        assert trial["metric"] == json.loads((job_dir / "progress.json").read_text())["accuracy"]
        # What the nodes ran: the job's arguments, then the trial's, and the trial's number.
        settings = json.loads((job_dir / "status" / "settings.json").read_text())
        assert settings["args"][-1] == f"--learning-rate={trial['params']['learning-rate']!r}"
        assert (
            settings["args"][:-1]
            == json.loads((bucket / trials[0]["job_dir"] / "status" / "settings.json").read_text())["args"][:-1]
        )
        assert settings["env"] == [f"CLOUD_ML_TRIAL_ID={trial['number']}"]
    shown = trainstack("tune", "status", *target, "--chart", str(tmp_path / "study.png"))
    assert shown.returncode == 0, shown.stderr
    best = max(trials, key=lambda trial: (trial["metric"], -trial["number"]))
    assert f"best: trial {best['number']} (job {best['job_id']})" in shown.stdout
    assert (tmp_path / "study.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_one_node_trials_of_the_built_in_trainer_run_each_on_one_node_of_a_cluster(tmp_path: Path) -> None:
    stack_file, workdir, target = study_on_a_standing_stack(
        tmp_path, "multiworker", "spread", idle_minutes=1, parallel=3
    )
    spec = tmp_path / "hptuning_config.yaml"
    standing = start_standing(stack_file, workdir)
    try:
        tuned = trainstack("tune", *target, "--one-node", "--spec", str(spec), "--name", "study", *SHORT, timeout=600)
    finally:
        standing.send_signal(signal.SIGTERM)
        standing.communicate(timeout=120)
    assert tuned.returncode == 0, tuned.stdout + tuned.stderr
    assert "each trial runs on one of stack spread's 3 machines, so up to 3 run at once" in tuned.stdout
    bucket = next(iter((workdir / "bucket").glob("*_spread")))
    study = study_document(bucket)
    assert study is not None
    assert (study["state"], study["one_node"]) == ("SUCCEEDED", True)
    index = json.loads((bucket / "trainstack" / "queue" / "index.json").read_text())
    assert [entry.get("one_node") for entry in index["jobs"]] == [True, True, True]
    for trial in study["trials"]:
        job_dir = bucket / trial["job_dir"]
        taker = json.loads((job_dir / "status" / "taken_by.json").read_text())["node"]
        ran = sorted(path.stem for path in (job_dir / "status").glob("*.json"))
        # The node that took it ran it alone, as one machine: no other node's status.
        assert ran == sorted(["job", "settings", "taken_by", taker]), ran
        settings = json.loads((job_dir / "status" / "settings.json").read_text())
        args = settings["args"]
        assert args[args.index("--strategy") + 1] == "auto"
        assert trial["metric"] == json.loads((job_dir / "progress.json").read_text())["accuracy"]


@pytest.mark.slow
def test_on_a_stack_whose_own_job_writes_in_a_teams_bucket_a_queued_job_and_a_trial_succeed_in_theirs(
    tmp_path: Path,
) -> None:
    """The stack's own job writes in job.job_dir (a team's bucket); the queue's jobs and trials
    in jobs/q<ID>_<NAME>/ of the stack's bucket, which its nodes' grants reach too (on Google
    Cloud they were a 403): each records its status, backs up, reports its metric and SUCCEEDS,
    its code writing where the local stand-ins let it (its own directory but status/)."""
    config = stack_config("dev", idle_minutes=2)
    config["trainstack:job"]["job_dir"] = "gs://team-models/flowers/run1"
    stack_file = write_stack(tmp_path, config, stack="teamdir")
    workdir = tmp_path / "work"
    (tmp_path / "hptuning_config.yaml").write_text(LEARNING_RATE_STUDY.format(trials=1, parallel=1))
    target = ["--stack-file", str(stack_file), "--local", "--workdir", str(workdir)]
    standing = start_standing(stack_file, workdir)
    try:
        team_dir = workdir / "bucket" / "team-models" / "flowers" / "run1"
        until(lambda: job_state(team_dir) == "SUCCEEDED", "the stack's own job in the team's bucket", standing)
        bucket = until(lambda: next(iter(sorted((workdir / "bucket").glob("*_teamdir"))), None), "the bucket", standing)
        submitted = trainstack("submit", *target, "--name", "queued", *SHORT)
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        tuned = trainstack(
            "tune", *target, "--spec", str(tmp_path / "hptuning_config.yaml"), "--name", "study", *SHORT, timeout=600
        )
        assert tuned.returncode == 0, tuned.stdout + tuned.stderr
        queued = bucket / "jobs" / "q1_queued"
        until(lambda: job_state(queued) == "SUCCEEDED", "the queued job's end", standing)
    finally:
        standing.send_signal(signal.SIGTERM)
        standing.communicate(timeout=120)
    study = study_document(bucket)
    assert study is not None
    [trial] = study["trials"]
    assert trial["state"] == "SUCCEEDED"
    for job_dir in (queued, bucket / trial["job_dir"]):
        assert job_state(job_dir) == "SUCCEEDED"
        assert (job_dir / "status" / "chief.json").is_file()
        assert (job_dir / "metrics.json").is_file()
        assert (job_dir / "checkpoints").is_dir()
        # What the agents write there is theirs alone; the rest is the job's.
        assert (job_dir / "status").stat().st_uid == 0
    assert trial["metric"] == json.loads((bucket / trial["job_dir"] / "progress.json").read_text())["accuracy"]


# A team's trial: the first writes more objects in its job directory than a study reads whole;
# the others report their metric as cloudml-hypertune does.
FLOODING_TRIAL = """
import json, os, pathlib, sys
argv = sys.argv[1:]
job_dir = pathlib.Path(argv[argv.index("--job-dir") + 1])
if os.environ["CLOUD_ML_TRIAL_ID"] == "1":
    many = job_dir / "many"
    many.mkdir(parents=True, exist_ok=True)
    for n in range(5001):
        (many / str(n)).touch()
else:
    record = {"accuracy": "0.5", "global_step": "1", "checkpoint_path": "", "timestamp": 1.0, "trial": "2"}
    with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "a") as handle:
        handle.write(json.dumps(record) + "\\n")
"""
FLOOD_STUDY = """\
trainingInput:
  hyperparameters:
    goal: MAXIMIZE
    hyperparameterMetricTag: accuracy
    maxTrials: 2
    maxFailedTrials: 2
    params:
      - {parameterName: rate, type: DOUBLE, minValue: 0.01, maxValue: 0.1}
"""


@pytest.mark.slow
def test_a_trial_whose_code_floods_its_directory_fails_alone_and_the_study_goes_on(tmp_path: Path) -> None:
    """On a standing local cluster: trial 1's code writes 5001 objects in its job directory,
    more than a study reads whole. It is recorded FAILED, in one line; trial 2 runs and the
    study ends, where `tune` used to retry trial 1 for ever."""
    package = tmp_path / "code" / "flood_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "main.py").write_text(FLOODING_TRIAL)
    stack_file, workdir, target = study_on_a_standing_stack(tmp_path, "dev", "flood", idle_minutes=2, parallel=1)
    spec = tmp_path / "flood.yaml"
    spec.write_text(FLOOD_STUDY)
    code = ["--package", str(package), "--module", "flood_pkg.main", "--name", "flood"]
    standing = start_standing(stack_file, workdir)
    try:
        tuned = trainstack("tune", *target, "--spec", str(spec), *code, timeout=600)
    finally:
        standing.send_signal(signal.SIGTERM)
        standing.communicate(timeout=120)
    assert tuned.returncode == 0, tuned.stdout + tuned.stderr
    bucket = next(iter(sorted((workdir / "bucket").glob("*_flood"))))
    study = json.loads((bucket / "trainstack" / "tune" / "flood" / "study.json").read_text())
    first, second = study["trials"]
    assert first["state"] == "FAILED"
    assert "holds more than 5000 objects" in first["problem"]
    assert second["state"] == "SUCCEEDED"
    assert second["metric"] == 0.5
