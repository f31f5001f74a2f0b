"""The lifecycles in trainstack_contract.lifecycle: what a trial and a study may become, how a
job's end becomes its trial's, and states that read back from JSON as the members they were."""

from __future__ import annotations

import json

import pytest

from trainstack.tuning.study import Trial
from trainstack_contract.lifecycle import (
    ENDED_JOB_STATES,
    OUTSTANDING_TRIAL_STATES,
    REPORTED_JOB_STATES,
    STUDY_MOVES,
    TRIAL_MOVES,
    JobState,
    LifecycleError,
    StudyState,
    TrialState,
    trial_state_after_job,
)
from trainstack_contract.status import StatusDocument, StatusFormatError


def test_every_trial_and_study_state_has_its_moves_and_an_ended_one_has_none() -> None:
    assert set(TRIAL_MOVES) == set(TrialState)
    assert set(STUDY_MOVES) == set(StudyState)
    for state, moves in TRIAL_MOVES.items():
        assert (not moves) == (state not in OUTSTANDING_TRIAL_STATES), state


def test_an_outstanding_trial_can_always_end() -> None:
    for state in OUTSTANDING_TRIAL_STATES:
        assert {TrialState.CANCELLED} <= TRIAL_MOVES[state], state


@pytest.mark.parametrize(
    ("job", "metric", "trial"),
    [
        (JobState.SUCCEEDED, True, TrialState.SUCCEEDED),
        (JobState.SUCCEEDED, False, TrialState.FAILED),
        (JobState.FAILED, True, TrialState.FAILED),
        (JobState.CANCELLED, False, TrialState.CANCELLED),
    ],
)
def test_a_job_s_end_becomes_its_trial_s(job: JobState, metric: bool, trial: TrialState) -> None:
    assert trial_state_after_job(job, metric_reported=metric) == trial


@pytest.mark.parametrize("job", sorted(set(JobState) - ENDED_JOB_STATES))
def test_a_job_that_has_not_ended_gives_its_trial_no_end(job: JobState) -> None:
    with pytest.raises(LifecycleError):
        trial_state_after_job(job, metric_reported=True)


def test_a_trial_moves_only_as_its_lifecycle_says() -> None:
    trial = Trial(number=1, params={}, submitted="2026-11-28T00:00:00Z")
    queued = trial.moved(TrialState.QUEUED, job_id=7)
    assert (queued.state, queued.job_id) == (TrialState.QUEUED, 7)
    done = queued.moved(TrialState.RUNNING).moved(TrialState.SUCCEEDED, metric=0.5)
    with pytest.raises(LifecycleError, match="from SUCCEEDED to RUNNING"):
        done.moved(TrialState.RUNNING)
    with pytest.raises(LifecycleError, match="from PENDING to RUNNING"):
        trial.moved(TrialState.RUNNING)


def test_a_state_is_its_text_in_json_and_in_messages() -> None:
    assert json.dumps({"state": JobState.PREEMPTED}) == '{"state": "PREEMPTED"}'
    assert f"{TrialState.STOPPED}|{StudyState.ACTIVE:>8}" == "STOPPED|  ACTIVE"
    assert json.loads(json.dumps(TrialState.QUEUED)) in OUTSTANDING_TRIAL_STATES


def test_a_status_object_says_no_queue_state() -> None:
    assert JobState.QUEUED not in REPORTED_JOB_STATES
    document = {"state": "QUEUED", "node": "chief", "time": "2026-11-28T00:00:00Z"}
    with pytest.raises(StatusFormatError, match="state 'QUEUED' is not one of"):
        StatusDocument.from_json(json.dumps(document))
