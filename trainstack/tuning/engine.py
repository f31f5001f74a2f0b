"""What `trainstack tune` does, round after round, until the study ends: each trial's job read
back from the queue and its status objects (and its metric once it has succeeded), a running
trial stopped early when Optuna's pruner says so, and new trials asked and queued while fewer
than maxParallelTrials are outstanding and fewer than maxTrials were asked.

Every change goes into the study's object under a generation precondition first, and is then
acted on (module docstring of :mod:`trainstack.tuning.study`): a `tune` killed at any point
loses no trial, and the next `tune` of the study finishes what it left.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from trainstack.base.bucket import Bucket, BucketError, ObjectContentError, read_json
from trainstack.jobqueue.queue import CancelRefused
from trainstack.jobqueue.store import update
from trainstack.tuning import optimizer
from trainstack.tuning.metrics import MAX_STEPS, MetricReading, read_metric
from trainstack.tuning.spec import HyperparameterSpec
from trainstack.tuning.study import (
    MAX_STUDY_BYTES,
    Study,
    StudyFormatError,
    Trial,
    parse_study,
    study_object,
    trial_job_name,
    worst_case_study_bytes,
)
from trainstack_contract import LAYOUT, METADATA_KEYS, TRIAL_ID_ENV
from trainstack_contract.lifecycle import (
    ENDED_JOB_STATES,
    REPORTED_JOB_STATES,
    JobState,
    StudyState,
    TrialState,
    trial_state_after_job,
)
from trainstack_contract.queue import (
    MAX_TAKEN_BY_BYTES,
    TAKEN_BY,
    QueueEntry,
    QueueFormatError,
    taken_by,
)


class StudyRefused(Exception):
    """The study cannot go on; one line says why. Nothing more was changed."""


@dataclass
class TuneServices:
    """What the engine acts through: the stack's bucket (the study, the trials' job
    directories) and its queue."""

    bucket: Bucket
    # Queues a trial's job (name, spec values, submit time, on one node); the same queue it once only.
    submit: Callable[[str, dict[str, str], str, bool], QueueEntry]
    cancel: Callable[[int], None]
    # The queue's entries by id (for the cancelled mark of a trial's job).
    entries: Callable[[], dict[int, QueueEntry]]
    # After a trial's job was queued: wake or start the stack's machines.
    queued: Callable[[], None]
    now: Callable[[], str]
    log: Callable[[str], None]
    # The node whose cloudml-hypertune report is the trial's (the chief).
    chief: str
    # Early stopping reads a running trial's job directory (a listing, its event files) at most
    # this often: each look costs requests to the bucket, and trials report per epoch.
    early_stop_seconds: float = 30.0
    clock: Callable[[], float] = time.monotonic
    # When each running trial's values were last read (by trial number).
    looked: dict[int, float] = field(default_factory=dict)


def _change(services: TuneServices, name: str, change: Callable[[Study], Study | None]) -> Study:
    """Applies ``change`` to the study's current object under a precondition (None: no change)."""
    store = services.bucket
    where = store.location(study_object(name))

    def apply(data: bytes | None) -> tuple[bytes | None, Study]:
        if data is None:
            raise StudyRefused(f"no study {name} at {where}")
        try:
            current = parse_study(data, where)
        except StudyFormatError as error:
            raise StudyRefused(f"{error}; nothing was changed") from None
        changed = change(current)
        return (None, current) if changed is None else (bounded(changed.to_json(), where), changed)

    return update(store, study_object(name), MAX_STUDY_BYTES, apply)


def bounded(data: bytes, where: str) -> bytes:
    """A study's object as written, never larger than what is read back (MAX_STUDY_BYTES)."""
    if len(data) > MAX_STUDY_BYTES:
        raise StudyRefused(f"{where} would come to {len(data)} bytes, over the {MAX_STUDY_BYTES} a study may hold")
    return data


def read_study(store: Bucket, name: str) -> Study | None:
    where = store.location(study_object(name))
    current = store.read_versioned(study_object(name), MAX_STUDY_BYTES)
    if current is None:
        return None
    try:
        return parse_study(current.data, where)
    except StudyFormatError as error:
        raise StudyRefused(str(error)) from None


def open_study(
    store: Bucket,
    name: str,
    spec: HyperparameterSpec,
    job: dict[str, str],
    now: str,
    seed: int | None = None,
    one_node: bool = False,
) -> tuple[Study, bool]:
    """The study ``name``: created with this spec and job, or the existing one when it has the
    same (a study resumes); whether it was created. :class:`StudyRefused` when one of that
    name exists with another spec or job. ``seed``: the suggestions' (by default a random one,
    recorded in the study). ``one_node``: each trial on one node of the cluster."""
    where = store.location(study_object(name))
    seed = random.randrange(2**31) if seed is None else seed  # noqa: S311 - a search seed, not a secret
    fresh = Study(name=name, spec=spec, job=job, created=now, seed=seed, one_node=one_node)
    overhead, per_trial = worst_case_study_bytes(fresh)
    worst = overhead + spec.max_trials * per_trial
    if worst > MAX_STUDY_BYTES:
        fits = (MAX_STUDY_BYTES - overhead) // per_trial
        raise StudyRefused(
            f"maxTrials {spec.max_trials}: at its largest (every parameter at its longest value, {MAX_STEPS} reported "
            f"steps a trial) the study would come to {worst / (1 << 20):.1f} MiB, over the {MAX_STUDY_BYTES >> 20} MiB "
            f"a study may hold; at most {fits} trials of these parameters fit"
        )

    def create_or_check(data: bytes | None) -> tuple[bytes | None, tuple[Study, bool]]:
        if data is None:
            return bounded(fresh.to_json(), where), (fresh, True)
        try:
            existing = parse_study(data, where)
        except StudyFormatError as error:
            raise StudyRefused(f"{error}; nothing was changed (give --study a new name for a new study)") from None
        if existing.spec != spec:
            raise StudyRefused(
                f"study {name} ({where}) was started with another spec: give the same spec to resume it, "
                "or --study NEW for a new study"
            )
        if existing.job != job:
            raise StudyRefused(
                f"study {name} ({where}) runs another job (other code, arguments or settings): give the same "
                "job to resume it, or --study NEW for a new study"
            )
        if existing.one_node != one_node:
            placed = "one node each" if existing.one_node else "all the cluster's nodes"
            raise StudyRefused(
                f"study {name} ({where}) runs its trials on {placed}: resume it "
                f"{'with' if existing.one_node else 'without'} --one-node, or --study NEW for a new study"
            )
        return None, (existing, False)

    return update(store, study_object(name), MAX_STUDY_BYTES, create_or_check)


def trial_values(study: Study, trial: Trial) -> dict[str, str]:
    """The trial's job: the study's job with the trial's --NAME=VALUE arguments after its own,
    and its number in CLOUD_ML_TRIAL_ID."""
    values = dict(study.job)
    args = json.loads(values.get(METADATA_KEYS.trainer_args, "[]"))
    values[METADATA_KEYS.trainer_args] = json.dumps([*args, *optimizer.arguments(study.spec, trial.params)])
    env = json.loads(values.get(METADATA_KEYS.job_env, "{}"))
    env[TRIAL_ID_ENV] = str(trial.number)
    values[METADATA_KEYS.job_env] = json.dumps(env, separators=(",", ":"))
    return values


def _queue(services: TuneServices, study: Study, trial: Trial) -> Study:
    """Queues a PENDING trial's job (once, whatever happened before) and records it QUEUED."""
    name, values = trial_job_name(study.name, trial.number), trial_values(study, trial)
    entry = services.submit(name, values, trial.submitted, study.one_node)
    job_dir = posixpath.join(LAYOUT.jobs, entry.job_dir_name)

    def record(current: Study) -> Study | None:
        now = current.trials[trial.number - 1]
        if now.state != TrialState.PENDING:
            return None
        return current.with_trial(now.moved(TrialState.QUEUED, job_id=entry.id, job_dir=job_dir))

    services.log(
        f"trial {trial.number}: job {entry.id} ({entry.job_dir_name}) queued: "
        + " ".join(optimizer.arguments(study.spec, trial.params))
    )
    services.queued()
    return _change(services, study.name, record)


def _ask(services: TuneServices, name: str) -> Study:
    """Records the next trial PENDING with Optuna's suggestion, when the study has room for one."""

    def add(current: Study) -> Study | None:
        spec = current.spec
        if (
            current.state != StudyState.ACTIVE
            or len(current.trials) >= spec.max_trials
            or len(current.outstanding) >= spec.parallel_trials
            or current.failed >= spec.failures_allowed
        ):
            return None
        try:
            params = optimizer.suggest(current)
        except optimizer.SearchExhausted:
            return None
        trial = Trial(number=len(current.trials) + 1, params=params, submitted=services.now())
        return replace(current, trials=(*current.trials, trial))

    return _change(services, name, add)


def _trial_metric(services: TuneServices, study: Study, trial: Trial) -> MetricReading:
    """The trial's metric as its job directory holds it now."""
    assert trial.job_dir is not None
    tag = study.spec.hyperparameter_metric_tag
    return read_metric(services.bucket, trial.job_dir, tag, _reporting_node(services, study, trial.job_dir))


def _reporting_node(services: TuneServices, study: Study, job_dir: str) -> str:
    """The node whose cloudml-hypertune report is the trial's: the chief, or the node that
    took a one-node trial (the chief's name when that cannot be read: no report is found)."""
    if not study.one_node:
        return services.chief
    try:
        data = services.bucket.read_upto(posixpath.join(job_dir, TAKEN_BY), MAX_TAKEN_BY_BYTES)
        return services.chief if data is None else taken_by(data)
    except (BucketError, QueueFormatError):
        return services.chief


def _ended(services: TuneServices, study: Study, trial: Trial, state: JobState, problem: str | None) -> Trial:
    """The trial once its job has ended in ``state``."""
    now = services.now()
    if state == JobState.SUCCEEDED:
        reading = _trial_metric(services, study, trial)
        ended = trial_state_after_job(state, metric_reported=reading.final is not None)
        if ended != TrialState.SUCCEEDED:
            return trial.moved(ended, problem=reading.missing(study.spec.hyperparameter_metric_tag), ended=now)
        return trial.moved(ended, metric=reading.final, steps=tuple(reading.steps), source=reading.source, ended=now)
    ended = trial_state_after_job(state, metric_reported=False)
    default = "its job was cancelled" if ended == TrialState.CANCELLED else f"its job ended {state}"
    return trial.moved(ended, problem=problem or default, ended=now)


def _observe(services: TuneServices, study: Study, trial: Trial, entry: QueueEntry | None) -> Trial:
    """The trial as its job's status objects (and the queue's cancel mark) tell it now."""
    assert trial.job_dir is not None
    where = posixpath.join(trial.job_dir, LAYOUT.job_status)
    status = read_json(services.bucket, where) or {}
    state = status.get("state")
    if state is not None and (not isinstance(state, str) or state not in REPORTED_JOB_STATES):
        raise ObjectContentError(f"{services.bucket.location(where)}: state {str(state)[:40]!r} is not a job state")
    if state in ENDED_JOB_STATES:
        problem = status.get("reason") if isinstance(status.get("reason"), str) else None
        return _ended(services, study, trial, JobState(state), problem and f"its job ended {state}: {problem[:300]}")
    if entry is not None and entry.cancelled is not None and state is None:
        # Cancelled while queued: its job never starts, and no node records it.
        return _ended(services, study, trial, JobState.CANCELLED, None)
    if state is None:
        return trial
    running = trial.moved(TrialState.RUNNING)
    last = services.looked.get(trial.number)
    if study.spec.enable_trial_early_stopping and (
        last is None or services.clock() - last >= services.early_stop_seconds
    ):
        services.looked[trial.number] = services.clock()
        reading = _trial_metric(services, study, trial)
        running = replace(running, steps=tuple(reading.steps))
        if optimizer.should_stop(study, running):
            services.cancel(trial.job_id or 0)
            last = running.steps[-1][1] if running.steps else None
            return running.moved(
                TrialState.STOPPED,
                metric=last,
                problem="stopped early: its values were worse than the median of the finished trials'",
                ended=services.now(),
            )
    return running


def _refresh(services: TuneServices, study: Study) -> Study:
    """Every outstanding trial brought up to date; PENDING ones queued."""
    entries = services.entries()
    updates: dict[int, Trial] = {}
    for trial in study.outstanding:
        if trial.state == TrialState.PENDING:
            study = _queue(services, study, trial)
            continue
        try:
            seen = _observe(services, study, trial, entries.get(trial.job_id or -1))
        except ObjectContentError as error:
            # What the trial's job wrote cannot be read, and will not be on a later look: the
            # trial fails (its job, if it still runs, is cancelled) and the study goes on.
            with contextlib.suppress(CancelRefused):  # it has ended, or was cancelled: nothing runs
                services.cancel(trial.job_id or 0)
            seen = trial.moved(
                TrialState.FAILED, problem=f"its job's objects cannot be read: {error}", ended=services.now()
            )
        except BucketError as error:
            services.log(f"trial {trial.number}: cannot read its job's state ({error}); trying again")
            continue
        if seen != trial:
            updates[trial.number] = seen
            if seen.state != trial.state:
                services.log(_transition(study, seen))
    if not updates:
        return study

    def apply(current: Study) -> Study | None:
        changed = current
        for number, seen in updates.items():
            if current.trials[number - 1].outstanding:
                changed = changed.with_trial(seen)
        return changed

    return _change(services, study.name, apply)


def _transition(study: Study, trial: Trial) -> str:
    what = f"trial {trial.number} {trial.state}"
    if trial.metric is not None:
        what += f": {study.spec.hyperparameter_metric_tag}={trial.metric:.6g}"
    if trial.state == TrialState.SUCCEEDED:
        best = study.with_trial(trial).best()
        if best is not None and best.number == trial.number:
            what += " (best so far)"
    if trial.problem:
        what += f" ({trial.problem})"
    return what


def _finish(services: TuneServices, study: Study) -> Study:
    """The study's end, when it has come: too many failed trials (the outstanding ones are
    cancelled: nothing goes on billing for a study that has failed), or every trial ended."""
    spec = study.spec
    if study.state != StudyState.ACTIVE:
        return study
    if study.failed >= spec.failures_allowed:
        for trial in study.outstanding:
            if trial.job_id is not None:
                try:
                    services.cancel(trial.job_id)
                except BucketError as error:
                    services.log(f"trial {trial.number}: its job {trial.job_id} could not be cancelled: {error}")
        problem = (
            f"{study.failed} trials failed; the study stops at {spec.failures_allowed} "
            f"(maxFailedTrials {spec.max_failed_trials or 'unset: trainstack decides'})"
        )

        def fail(current: Study) -> Study | None:
            trials = tuple(
                t.moved(TrialState.CANCELLED, problem="the study failed", ended=services.now()) if t.outstanding else t
                for t in current.trials
            )
            return current.moved(StudyState.FAILED, problem=problem, trials=trials)

        return _change(services, study.name, fail)
    exhausted = len(study.trials) >= spec.max_trials or (
        spec.algorithm == "GRID_SEARCH" and len(study.trials) >= spec.grid_size()
    )
    if not exhausted or study.outstanding:
        return study
    best = study.best()

    def end(current: Study) -> Study | None:
        if current.outstanding or current.state != StudyState.ACTIVE:
            return None
        if best is None:
            return current.moved(StudyState.FAILED, problem="no trial succeeded")
        return current.moved(StudyState.SUCCEEDED)

    return _change(services, study.name, end)


def step(services: TuneServices, name: str) -> Study:
    """One round: outstanding trials brought up to date, the study ended if it has, new trials
    asked and queued while there is room."""
    study = read_study(services.bucket, name)
    if study is None:
        raise StudyRefused(f"no study {name} at {services.bucket.location(study_object(name))}")
    study = _refresh(services, study)
    study = _finish(services, study)
    while study.state == StudyState.ACTIVE:
        asked = _ask(services, name)
        if len(asked.trials) == len(study.trials):
            break
        study = _queue(services, asked, asked.trials[-1])
    return _finish(services, study)


def run(services: TuneServices, name: str, poll_seconds: float, sleep: Callable[[float], None]) -> Study:
    """Rounds until the study has ended; returns its final state."""
    while True:
        study = step(services, name)
        if study.state != StudyState.ACTIVE:
            return study
        sleep(poll_seconds)
