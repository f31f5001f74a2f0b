"""AI Platform Training's hyperparameter tuning spec (``trainingInput.hyperparameters``), read
as a team wrote it for AI Platform (its REST reference, HyperparameterSpec and ParameterSpec:
https://cloud.google.com/ai-platform/training/docs/reference/rest/v1/projects.jobs#HyperparameterSpec).

A file may hold the spec alone, under ``hyperparameters:``, under ``trainingInput:`` (a
``gcloud ai-platform jobs submit training --config`` file, as Google's samples ship
``hptuning_config.yaml``) or inside a whole job (``jobId`` and ``trainingInput``). Keys in
either spelling the service took (``maxTrials`` or ``max_trials``). Every problem is one line
naming the key, what it holds and what it may hold, before anything runs.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic.alias_generators import to_camel

from trainstack.base.errors import Problem, shorten
from trainstack.stackmodel.naming import full_match

GOALS = ("MAXIMIZE", "MINIMIZE")
ALGORITHMS = ("ALGORITHM_UNSPECIFIED", "GRID_SEARCH", "RANDOM_SEARCH")
PARAMETER_TYPES = ("DOUBLE", "INTEGER", "CATEGORICAL", "DISCRETE")
SCALE_TYPES = ("NONE", "UNIT_LINEAR_SCALE", "UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE")
LOG_SCALES = frozenset({"UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE"})
# AI Platform's default tag: what cloudml-hypertune reports when given no other.
DEFAULT_METRIC_TAG = "training/hptuning/metric"

# Bounds: a study is a few hundred trials at most; each is a job on the stack's queue.
MAX_TRIALS = 1000
MAX_PARALLEL_TRIALS = 100
MAX_PARAMS = 32
MAX_VALUES = 1000
MAX_VALUE_CHARS = 200
# Grid search enumerates every combination: beyond this it is no grid a study walks.
MAX_GRID_POINTS = 100_000
# Integer parameters are passed as ints: within int32, as AI Platform's were.
MAX_INTEGER = 2**31 - 1
# Each parameter reaches the trainer as --NAME=VALUE (AI Platform's convention).
PARAMETER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
# Tags as TensorFlow summaries and cloudml-hypertune write them (training/hptuning/metric, epoch_accuracy).
METRIC_TAG = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_./-]{0,255}")
CATEGORY = re.compile(rf"[^\x00-\x1f\x7f]{{1,{MAX_VALUE_CHARS}}}")

KEY = "hyperparameters"
MAX_SPEC_FILE_BYTES = 256 * 1024


class SpecError(Exception):
    """The spec cannot be used; one problem per line, each naming its key."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(problem) for problem in problems))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)


class ParameterSpec(_Strict):
    parameter_name: str
    type: Literal["DOUBLE", "INTEGER", "CATEGORICAL", "DISCRETE"]
    min_value: float | None = None
    max_value: float | None = None
    categorical_values: tuple[str, ...] | None = None
    discrete_values: tuple[float, ...] | None = None
    scale_type: Literal["NONE", "UNIT_LINEAR_SCALE", "UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE"] = "NONE"

    @field_validator("parameter_name")
    @classmethod
    def _name(cls, value: str) -> str:
        what = "an argument name: a letter, then up to 63 letters, digits, '_' or '-' (the trainer gets --NAME=VALUE)"
        return full_match(PARAMETER_NAME, value, what)

    @field_validator("min_value", "max_value", "discrete_values", mode="before")
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        # YAML reads yes/no/true as booleans, which a float field would take as 1.0 and 0.0.
        values = value if isinstance(value, list | tuple) else [value]
        for item in values:
            if isinstance(item, bool):
                raise ValueError(f"each value is a number, not {shorten(item)}")
        return value

    @field_validator("categorical_values")
    @classmethod
    def _categories(cls, values: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if values is None:
            return None
        if not 1 <= len(values) <= MAX_VALUES:
            raise ValueError(f"give 1 to {MAX_VALUES} values (got {len(values)})")
        for value in values:
            if CATEGORY.fullmatch(value) is None:
                raise ValueError(f"{shorten(value)}: a value is 1 to {MAX_VALUE_CHARS} printable characters")
        if len(set(values)) != len(values):
            raise ValueError("values repeat: each value once")
        return values

    @field_validator("discrete_values")
    @classmethod
    def _discrete(cls, values: tuple[float, ...] | None) -> tuple[float, ...] | None:
        if values is None:
            return None
        if not 1 <= len(values) <= MAX_VALUES:
            raise ValueError(f"give 1 to {MAX_VALUES} values (got {len(values)})")
        if not all(math.isfinite(value) for value in values):
            raise ValueError("every value is a finite number")
        if any(later <= earlier for earlier, later in itertools.pairwise(values)):
            raise ValueError(f"values in increasing order, each once (got {shorten(list(values))})")
        return values

    @model_validator(mode="after")
    def _by_type(self) -> ParameterSpec:
        """Every problem of the parameter at once, in one message (a spec's author fixes them
        together, not one run of `tune` each)."""
        kind = self.type
        problems: list[str] = []
        if kind in ("DOUBLE", "INTEGER"):
            problems += self._range_problems()
        elif kind == "CATEGORICAL":
            if self.categorical_values is None:
                problems.append("type CATEGORICAL needs categoricalValues (a list of strings)")
            if self.scale_type != "NONE":
                problems.append(f"scaleType {self.scale_type}: a CATEGORICAL parameter has no scale")
        elif self.discrete_values is None:
            problems.append("type DISCRETE needs discreteValues (numbers in increasing order)")
        elif self.scale_type in LOG_SCALES and self.discrete_values[0] <= 0:
            problems.append(f"scaleType {self.scale_type} needs discreteValues above 0")
        extra = {
            "minValue": self.min_value is not None and kind not in ("DOUBLE", "INTEGER"),
            "maxValue": self.max_value is not None and kind not in ("DOUBLE", "INTEGER"),
            "categoricalValues": self.categorical_values is not None and kind != "CATEGORICAL",
            "discreteValues": self.discrete_values is not None and kind != "DISCRETE",
        }
        problems += [f"{key} does not apply to type {kind}" for key, present in extra.items() if present]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _range_problems(self) -> list[str]:
        low, high, kind = self.min_value, self.max_value, self.type
        if low is None or high is None:
            return [f"type {kind} needs both minValue and maxValue (a bounded range)"]
        if not (math.isfinite(low) and math.isfinite(high)):
            return [f"minValue and maxValue are finite numbers (got {low}, {high})"]
        problems = []
        if low >= high:
            problems.append(f"minValue {low:g} is not below maxValue {high:g}")
        if kind == "INTEGER":
            if low != int(low) or high != int(high):
                problems.append(f"type INTEGER needs whole minValue and maxValue (got {low:g}, {high:g})")
            if max(abs(low), abs(high)) > MAX_INTEGER:
                problems.append(f"minValue and maxValue of an INTEGER are within +/-{MAX_INTEGER}")
        if self.scale_type in LOG_SCALES and low <= 0:
            problems.append(f"scaleType {self.scale_type} needs minValue above 0 (got {low:g})")
        return problems

    def grid(self) -> tuple[Any, ...]:
        """Every value a grid search tries (not for DOUBLE)."""
        if self.type == "CATEGORICAL":
            assert self.categorical_values is not None
            return self.categorical_values
        if self.type == "DISCRETE":
            assert self.discrete_values is not None
            return self.discrete_values
        assert self.type == "INTEGER"
        assert self.min_value is not None
        assert self.max_value is not None
        return tuple(range(int(self.min_value), int(self.max_value) + 1))

    def argument(self, value: Any) -> str:
        """The value as the trainer gets it in --NAME=VALUE: whole numbers without a '.0', so
        that an argparse ``type=int`` takes a DISCRETE 32 as it took it from AI Platform."""
        if self.type == "CATEGORICAL":
            return str(value)
        number = float(value)
        if self.type == "INTEGER" or number.is_integer():
            return str(int(number))
        return repr(number)


# The trial counts' bounds, and what the bound means where the number alone does not say it.
COUNT_BOUNDS: dict[str, tuple[int, int, str]] = {
    "max_trials": (1, MAX_TRIALS, " (each trial is a job on the stack's queue)"),
    "max_parallel_trials": (1, MAX_PARALLEL_TRIALS, ""),
    "max_failed_trials": (0, MAX_TRIALS, " (0: trainstack decides, as AI Platform did)"),
}


class HyperparameterSpec(_Strict):
    goal: Literal["MAXIMIZE", "MINIMIZE"]
    params: tuple[ParameterSpec, ...]
    max_trials: int = Field(default=1, strict=True)
    max_parallel_trials: int = Field(default=1, strict=True)
    max_failed_trials: int = Field(default=0, strict=True)
    hyperparameter_metric_tag: str = DEFAULT_METRIC_TAG
    algorithm: Literal["ALGORITHM_UNSPECIFIED", "GRID_SEARCH", "RANDOM_SEARCH"] = "ALGORITHM_UNSPECIFIED"
    enable_trial_early_stopping: bool = Field(default=False, strict=True)
    resume_previous_job_id: str | None = None

    @field_validator("params")
    @classmethod
    def _params(cls, params: tuple[ParameterSpec, ...]) -> tuple[ParameterSpec, ...]:
        if not 1 <= len(params) <= MAX_PARAMS:
            raise ValueError(f"give 1 to {MAX_PARAMS} parameters to tune (got {len(params)})")
        names = [param.parameter_name for param in params]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"parameterName {', '.join(repeated)} given more than once")
        return params

    @field_validator("max_trials", "max_parallel_trials", "max_failed_trials")
    @classmethod
    def _count(cls, value: int, info: ValidationInfo) -> int:
        assert info.field_name is not None
        low, high, meaning = COUNT_BOUNDS[info.field_name]
        if not low <= value <= high:
            raise ValueError(f"{shorten(value)} is outside {low} to {high}{meaning}")
        return value

    @field_validator("hyperparameter_metric_tag")
    @classmethod
    def _tag(cls, value: str) -> str:
        what = "a summary tag: up to 256 letters, digits and '_', '.', '/', '-', not starting with '/' or '-'"
        return full_match(METRIC_TAG, value, what)

    @model_validator(mode="after")
    def _grid(self) -> HyperparameterSpec:
        if self.algorithm != "GRID_SEARCH":
            return self
        doubles = [param.parameter_name for param in self.params if param.type == "DOUBLE"]
        if doubles:
            raise ValueError(
                f"algorithm GRID_SEARCH takes INTEGER, CATEGORICAL and DISCRETE parameters; "
                f"{', '.join(doubles)} is DOUBLE (use DISCRETE values, or another algorithm)"
            )
        if self.grid_size() > MAX_GRID_POINTS:
            raise ValueError(f"algorithm GRID_SEARCH: the grid has more than {MAX_GRID_POINTS} points")
        return self

    def grid_size(self) -> int:
        size = 1
        for param in self.params:
            size *= len(param.grid())
            if size > MAX_GRID_POINTS:
                break
        return size

    @property
    def failures_allowed(self) -> int:
        """How many failed trials end the study: maxFailedTrials, or when it is 0 ("the service
        decides"), trainstack's choice: a quarter of maxTrials, at least one and at most ten, so
        that a trainer that fails every time stops billing after a few trials, not maxTrials."""
        if self.max_failed_trials:
            return self.max_failed_trials
        return min(10, max(1, math.ceil(self.max_trials / 4)))

    @property
    def parallel_trials(self) -> int:
        """Trials queued or running at once: maxParallelTrials, never more than maxTrials."""
        return min(self.max_parallel_trials, self.max_trials)

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return tuple(param.parameter_name for param in self.params)

    def to_json(self) -> dict[str, Any]:
        """The spec in AI Platform's own spelling (camelCase), defaults written out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def _location(loc: tuple[int | str, ...], prefix: str) -> str:
    key = prefix
    for part in loc:
        if isinstance(part, int):
            key += f"[{part}]"
        elif part not in {"function-after[_by_type(), ParameterSpec]"}:
            key += f".{to_camel(part) if '_' in part else part}"
    return key


def _problems(error: ValidationError, prefix: str) -> list[Problem]:
    problems = []
    valid = {
        "goal": GOALS,
        "algorithm": ALGORITHMS,
        "type": PARAMETER_TYPES,
        "scaleType": SCALE_TYPES,
    }
    for detail in error.errors():
        loc = tuple(part for part in detail["loc"] if not str(part).startswith("function-"))
        key = _location(loc, prefix)
        kind = detail["type"]
        if kind == "extra_forbidden":
            known = sorted(
                to_camel(name) for name in (ParameterSpec if "params" in key else HyperparameterSpec).model_fields
            )
            message = f"unknown key; valid keys here: {', '.join(known)}"
        elif kind == "missing":
            message = "required key is missing"
        elif kind == "literal_error":
            choices = valid.get(key.rsplit(".", 1)[-1], ())
            message = f"{shorten(detail.get('input'))} is not one of {', '.join(choices)}"
        else:
            message = str(detail["msg"]).removeprefix("Value error, ")
            if kind not in {"value_error"} and "input" in detail:
                message = f"{message} (got {shorten(detail['input'])})"
        problems.append(Problem(key, message))
    return problems


def spec_from_mapping(value: Any, key: str = KEY) -> HyperparameterSpec:
    """The spec from its mapping (as under ``trainingInput.hyperparameters``); :class:`SpecError`."""
    if not isinstance(value, dict):
        raise SpecError([Problem(key, f"a mapping of goal, params, maxTrials, ... (got {shorten(value)})")])
    try:
        return HyperparameterSpec.model_validate(value)
    except ValidationError as error:
        raise SpecError(_problems(error, key)) from None


def find_spec(document: Any) -> tuple[Any, str] | None:
    """Where the spec is in a document: the spec alone, under ``hyperparameters``, under
    ``trainingInput`` or in a whole job; with its key for messages. None: no spec there."""
    if not isinstance(document, dict):
        return None
    for outer in ("trainingInput", "training_input"):
        if isinstance(document.get(outer), dict):
            inner = document[outer]
            for name in (KEY,):
                if name in inner:
                    return inner[name], f"{outer}.{name}"
            return None
    if KEY in document:
        return document[KEY], KEY
    if "params" in document or "goal" in document:
        return document, KEY
    return None


def reserved_parameter_problems(spec: HyperparameterSpec, reserved: Mapping[str, str]) -> list[str]:
    """A parameter is passed as --NAME=VALUE after the stack's flags: one that is a flag the stack
    sets (``reserved``: flag -> the key to use), or a prefix argparse would expand to one
    (``job`` -> --job-dir), would override it, and could move the trial's outputs out of its
    directory. One line per such parameter, naming it."""
    problems = []
    for name in spec.parameter_names:
        flag = f"--{name}"
        meant = [reserved_flag for reserved_flag in reserved if reserved_flag.startswith(flag)]
        if meant:
            what = "is" if flag in reserved else f"is a prefix of {', '.join(meant)}, which argparse expands to"
            problems.append(
                f"parameterName {name}: --{name} {what} a flag the stack sets for every trial; "
                f"use {'; '.join(reserved[m] for m in meant)}, or give the parameter another name"
            )
    return problems


def read_spec(path: Path) -> HyperparameterSpec:
    """The spec in a YAML or JSON file (module docstring); :class:`SpecError`, the file named."""
    from trainstack.base.files import FileProblem, load_yaml, read_text

    where = str(path)
    try:
        document = load_yaml(read_text(path, MAX_SPEC_FILE_BYTES))
    except FileNotFoundError:
        raise SpecError([Problem(where, "no such file")]) from None
    except FileProblem as problem:
        raise SpecError([Problem(where, str(problem))]) from None
    found = find_spec(document)
    if found is None:
        raise SpecError(
            [
                Problem(
                    where,
                    "holds no hyperparameter spec: give AI Platform's trainingInput.hyperparameters "
                    "(goal, params, maxTrials, ...), alone or in a job config",
                )
            ]
        )
    value, key = found
    try:
        return spec_from_mapping(value, key)
    except SpecError as error:
        raise SpecError([Problem(f"{where}: {problem.key}", problem.message) for problem in error.problems]) from None
