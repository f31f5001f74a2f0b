"""A study's state: one JSON object in the stack's bucket, ``trainstack/tune/<study>/study.json``,
read-modify-written under Cloud Storage's generation preconditions (the queue's store), so the
study outlives the machine that started it and two `tune` commands at once lose nothing.

It holds the spec as given, the trials' job (its spec values, the same for every trial but for
the trial's arguments and id), and every trial: its number (1, 2, ... as AI Platform's), its
parameters, the queued job that runs it, its state and metric. A trial is recorded PENDING with
its parameters and its submit time before its job is queued; the queue takes a job once per
(name, spec, submit time), so a `tune` killed between the two queues that same job when it
resumes, never a second one, and never loses the trial.
"""

from __future__ import annotations

import json
import math
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from trainstack.base.bucket import Bucket
from trainstack.base.records import record_json
from trainstack.tuning.metrics import MAX_STEPS
from trainstack.tuning.spec import MAX_INTEGER, MAX_TRIALS, HyperparameterSpec, SpecError, spec_from_mapping
from trainstack_contract import LAYOUT
from trainstack_contract.lifecycle import (
    OUTSTANDING_TRIAL_STATES,
    STUDY_MOVES,
    TRIAL_MOVES,
    StudyState,
    TrialState,
    check_move,
)
from trainstack_contract.queue import STUDIES_DIR

STUDIES_PREFIX = STUDIES_DIR
STUDY_OBJECT = "study.json"
# A study's name: its trials' jobs are <study>_t<N> on the queue (at most 100 characters).
STUDY_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
VERSION = 1
# Bucket listed under trainstack/tune/ to find a stack's studies.
MAX_STUDIES = 10_000
# 1000 trials of a few hundred bytes and up to 200 intermediate values each.
MAX_STUDY_BYTES = 16 << 20
# A trial's free text is cut to these lengths where it is written, so that a study's worst case
# (worst_case_study_bytes) is known from its spec and always fits MAX_STUDY_BYTES.
MAX_PROBLEM_CHARS = 500
MAX_SOURCE_CHARS = 200
# Free text is kept as printable ASCII (other characters become "?"), whose longest in JSON is
# a quote or a backslash: two bytes.
WORST_CHAR = '"'


def display_text(text: str | None, limit: int) -> str | None:
    """A trial's or study's free text as recorded: cut to ``limit``, printable ASCII alone (it
    may quote a trial's own file names)."""
    return None if text is None else "".join(c if " " <= c <= "~" else "?" for c in text[:limit])


class StudyFormatError(Exception):
    """The study's object is not one trainstack wrote; the message says what is wrong."""


def study_object(study: str) -> str:
    return posixpath.join(STUDIES_PREFIX, study, STUDY_OBJECT)


def study_names(objects: Bucket, limit: int = MAX_STUDIES) -> list[str]:
    """The studies of a stack: the names under trainstack/tune/ that hold a study object."""
    names = set()
    for name in objects.names(STUDIES_PREFIX + "/", limit):
        parts = name.split("/")
        if len(parts) == 4 and parts[3] == STUDY_OBJECT and STUDY_NAME.fullmatch(parts[2]):
            names.add(parts[2])
    return sorted(names)


def trial_job_name(study: str, number: int) -> str:
    return f"{study}_t{number}"


# What trial_job_name writes, read back: the study's name and the trial's number.
_TRIAL_JOB_NAME = re.compile(r"(?P<study>.+)_t(?P<number>[1-9][0-9]{0,5})")


def study_of_trial_job(name: str) -> str | None:
    """The study a trial's job name (trial_job_name) belongs to; None for any other job name."""
    match = _TRIAL_JOB_NAME.fullmatch(name)
    return match["study"] if match else None


@dataclass(frozen=True)
class Trial:
    number: int
    params: dict[str, Any]
    submitted: str
    state: TrialState = TrialState.PENDING
    job_id: int | None = None
    job_dir: str | None = None
    metric: float | None = None
    steps: tuple[tuple[int, float], ...] = ()
    source: str | None = None
    problem: str | None = None
    ended: str | None = None

    @property
    def outstanding(self) -> bool:
        return self.state in OUTSTANDING_TRIAL_STATES

    def moved(self, state: TrialState, **changes: Any) -> Trial:
        """The trial in ``state`` (one of TRIAL_MOVES' from its own), with ``changes``."""
        check_move(TRIAL_MOVES, self.state, state, "trial")
        return replace(self, state=state, **changes)

    def to_json(self) -> dict[str, Any]:
        return record_json(
            self,
            steps=[list(step) for step in self.steps],
            problem=display_text(self.problem, MAX_PROBLEM_CHARS),
            source=display_text(self.source, MAX_SOURCE_CHARS),
        )


@dataclass(frozen=True)
class Study:
    name: str
    spec: HyperparameterSpec
    # The trials' job: the queue's spec values of the job every trial runs, before its arguments.
    job: dict[str, str]
    created: str
    seed: int
    state: StudyState = StudyState.ACTIVE
    trials: tuple[Trial, ...] = ()
    problem: str | None = None
    # Each trial runs on one node of the cluster (queued one_node): trials side by side.
    one_node: bool = False

    def to_json(self) -> bytes:
        document = {
            "version": VERSION,
            "study": self.name,
            "spec": self.spec.to_json(),
            "job": self.job,
            "one_node": self.one_node,
            "created": self.created,
            "seed": self.seed,
            "state": self.state,
            "problem": display_text(self.problem, MAX_PROBLEM_CHARS),
            "trials": [trial.to_json() for trial in self.trials],
        }
        # Compact: a study of 1000 trials with 200 reported steps each must fit MAX_STUDY_BYTES.
        return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()

    def moved(self, state: StudyState, **changes: Any) -> Study:
        """The study in ``state`` (one of STUDY_MOVES' from its own), with ``changes``."""
        check_move(STUDY_MOVES, self.state, state, "study")
        return replace(self, state=state, **changes)

    def counts(self) -> dict[TrialState, int]:
        counted = dict.fromkeys(TrialState, 0)
        for trial in self.trials:
            counted[trial.state] += 1
        return counted

    @property
    def outstanding(self) -> list[Trial]:
        return [trial for trial in self.trials if trial.outstanding]

    @property
    def failed(self) -> int:
        return sum(trial.state == TrialState.FAILED for trial in self.trials)

    def best(self) -> Trial | None:
        """The SUCCEEDED trial with the best metric for the spec's goal (the first on ties)."""
        done = [trial for trial in self.trials if trial.state == TrialState.SUCCEEDED and trial.metric is not None]
        if not done:
            return None
        sign = 1.0 if self.spec.goal == "MAXIMIZE" else -1.0
        return max(done, key=lambda trial: (sign * (trial.metric or 0.0), -trial.number))

    def with_trial(self, trial: Trial) -> Study:
        trials = [trial if existing.number == trial.number else existing for existing in self.trials]
        if all(existing.number != trial.number for existing in self.trials):
            trials.append(trial)
        return replace(self, trials=tuple(trials))


def worst_case_study_bytes(study: Study) -> tuple[int, int]:
    """The most bytes ``study`` can come to without its trials, and the most one trial adds:
    its longest parameter values, MAX_STEPS reported steps of the widest numbers, and free text
    at its cut. All its spec's trials: the first plus maxTrials times the second."""
    widest = -2.2250738585072014e-308  # the longest repr a finite float has
    longest_int = -(2**63)
    params: dict[str, Any] = {}
    for param in study.spec.params:
        if param.type == "CATEGORICAL":
            params[param.parameter_name] = max(param.categorical_values or ("",), key=lambda v: len(json.dumps(v)))
        elif param.type == "INTEGER":
            params[param.parameter_name] = -MAX_INTEGER
        else:
            params[param.parameter_name] = widest
    trial = Trial(
        number=MAX_TRIALS,
        params=params,
        submitted="2026-01-01T00:00:00.000000+00:00",
        state=max(TrialState, key=len),
        job_id=longest_int,
        # The queue names it: jobs/q<ID>_<study>_t<N>, ASCII (queue ID an int64, study STUDY_NAME).
        job_dir=posixpath.join(LAYOUT.jobs, f"q{2**63}_{study.name}_t{MAX_TRIALS}"),
        metric=widest,
        steps=((longest_int, widest),) * MAX_STEPS,
        source=WORST_CHAR * MAX_SOURCE_CHARS,
        problem=WORST_CHAR * MAX_PROBLEM_CHARS,
        ended="2026-01-01T00:00:00.000000+00:00",
    )
    one = len(json.dumps(trial.to_json(), separators=(",", ":"), sort_keys=True)) + 1
    empty = replace(study, trials=(), problem=WORST_CHAR * MAX_PROBLEM_CHARS, state=max(StudyState, key=len))
    return len(empty.to_json()), one


def _field(document: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = document.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise StudyFormatError(f"{where}: {key} is missing or not a {getattr(kind, '__name__', kind)}")
    return value


def _optional(document: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = document.get(key)
    if value is None:
        return None
    return _field(document, key, kind, where)


def _trial(value: Any, where: str, names: tuple[str, ...]) -> Trial:
    if not isinstance(value, dict):
        raise StudyFormatError(f"{where} is not an object")
    number = _field(value, "number", int, where)
    params = _field(value, "params", dict, where)
    if sorted(params) != sorted(names):
        raise StudyFormatError(f"{where}: params are not the spec's parameters")
    state = _field(value, "state", str, where)
    if state not in TrialState.__members__:
        raise StudyFormatError(f"{where}: state {state[:20]!r} is not one of {', '.join(TrialState)}")
    metric = _optional(value, "metric", (int, float), where)
    if metric is not None and not math.isfinite(metric):
        raise StudyFormatError(f"{where}: metric is not a finite number")
    steps = []
    for step in _field(value, "steps", list, where):
        if not (
            isinstance(step, list)
            and len(step) == 2
            and isinstance(step[0], int)
            and isinstance(step[1], (int, float))
            and math.isfinite(step[1])
        ):
            raise StudyFormatError(f"{where}: steps holds something other than [step, value] pairs")
        steps.append((step[0], float(step[1])))
    return Trial(
        number=number,
        params=params,
        submitted=_field(value, "submitted", str, where),
        state=TrialState(state),
        job_id=_optional(value, "job_id", int, where),
        job_dir=_optional(value, "job_dir", str, where),
        metric=None if metric is None else float(metric),
        steps=tuple(steps),
        source=_optional(value, "source", str, where),
        problem=_optional(value, "problem", str, where),
        ended=_optional(value, "ended", str, where),
    )


def parse_study(data: bytes, where: str) -> Study:
    """A study's object read back; :class:`StudyFormatError` naming ``where`` and what is wrong."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise StudyFormatError(f"{where} is not JSON ({str(error)[:100]}); not a study trainstack wrote") from None
    if not isinstance(document, dict) or document.get("version") != VERSION:
        raise StudyFormatError(f"{where} is not a version {VERSION} study of trainstack's")
    try:
        spec = spec_from_mapping(document.get("spec"), "spec")
    except SpecError as error:
        raise StudyFormatError(f"{where}: {error.problems[0]}") from None
    job = _field(document, "job", dict, where)
    if not all(isinstance(key, str) and isinstance(value, str) for key, value in job.items()):
        raise StudyFormatError(f"{where}: job holds something other than text values")
    raw_trials = _field(document, "trials", list, where)
    if len(raw_trials) > MAX_TRIALS:
        raise StudyFormatError(f"{where} holds {len(raw_trials)} trials, more than {MAX_TRIALS}")
    trials = tuple(
        _trial(value, f"{where}: trial {index + 1}", spec.parameter_names) for index, value in enumerate(raw_trials)
    )
    if [trial.number for trial in trials] != list(range(1, len(trials) + 1)):
        raise StudyFormatError(f"{where}: trial numbers are not 1, 2, ... in order")
    name = _field(document, "study", str, where)
    state = _field(document, "state", str, where)
    if STUDY_NAME.fullmatch(name) is None or state not in StudyState.__members__:
        raise StudyFormatError(f"{where}: its name or state is not one trainstack writes")
    return Study(
        name=name,
        spec=spec,
        job=job,
        created=_field(document, "created", str, where),
        seed=_field(document, "seed", int, where),
        state=StudyState(state),
        trials=trials,
        problem=_optional(document, "problem", str, where),
        one_node=bool(_optional(document, "one_node", bool, where)),
    )
