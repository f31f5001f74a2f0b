"""A job changed under its name never resumes what its earlier run left (trainstack_agent.job_record)."""

from __future__ import annotations

import dataclasses
import json

from agent_fakes import JOB_DIR, settings, world
from trainstack_contract.lifecycle import JobState

RECORD = f"{JOB_DIR}/status/settings.json"


def test_the_chief_records_what_the_job_was_first_started_with() -> None:
    w = world(settings(), runs=[(1.0, 0)])
    assert w.agent.run() == 0
    assert json.loads(w.storage.objects[RECORD]) == {
        "mode": "package",
        "module": "trainer.task",
        "image": None,
        "args": ["--epochs", "2"],
        "env": [],
    }


def test_the_same_job_started_again_resumes() -> None:
    w = world(settings(), runs=[(1.0, 0)])
    w.storage.objects[RECORD] = json.dumps(
        {"mode": "package", "module": "trainer.task", "image": None, "args": ["--epochs", "2"], "env": []}
    ).encode()
    assert w.agent.run() == 0
    assert len(w.launcher.started) == 1


def test_a_job_started_again_with_other_arguments_is_refused_naming_them_and_its_machine_stops() -> None:
    first = world(settings(), runs=[(1.0, 1)])
    first.agent.run()
    changed = settings(on_finish="keep")
    assert changed.job is not None
    changed = dataclasses.replace(
        changed, job=dataclasses.replace(changed.job, trainer_args=("--epochs", "20", "--image-size", "64"))
    )
    w = world(changed, runs=[(1.0, 0)])
    w.storage.objects.update(first.storage.objects)
    assert w.agent.run() == 1
    assert w.launcher.started == [], "the job's code ran against a backup made with other settings"
    job = w.job_status()
    assert job is not None
    assert job.state == JobState.FAILED
    assert job.reason is not None
    assert "args --epochs 20 --image-size 64 (first started with: --epochs 2)" in job.reason
    assert "a new name (trainstack:job.name)" in job.reason
    # Refused: released whatever on_finish says.
    assert w.releases == ["stop"]


def test_a_record_that_is_not_one_is_refused() -> None:
    w = world(settings(), runs=[(1.0, 0)])
    w.storage.objects[RECORD] = b"[1, 2]"
    assert w.agent.run() == 1
    assert w.launcher.started == []


def test_only_the_chief_records() -> None:
    w = world(settings(node="worker-0"), runs=[(1.0, 0)])
    w.put_job_status(JobState.RUNNING)
    w.agent.run()
    assert RECORD not in w.storage.objects


def test_a_job_started_again_with_another_job_env_is_refused() -> None:
    first = world(settings(), runs=[(1.0, 1)])
    first.agent.run()
    changed = settings()
    assert changed.job is not None
    changed = dataclasses.replace(changed, job=dataclasses.replace(changed.job, env=(("TF_USE_LEGACY_KERAS", "1"),)))
    w = world(changed, runs=[(1.0, 0)])
    w.storage.objects.update(first.storage.objects)
    assert w.agent.run() == 1
    job = w.job_status()
    assert job is not None
    assert job.reason is not None
    assert "env TF_USE_LEGACY_KERAS=1 (first started with: (none))" in job.reason
