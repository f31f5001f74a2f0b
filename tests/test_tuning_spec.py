"""AI Platform's hyperparameter tuning spec (``trainingInput.hyperparameters``) read as teams
wrote it: the file Google's samples ship beside their trainer, the spec alone or inside a whole
job, either key spelling; and every input the service refused (or should have) is one line that
names its key and what it may hold, before a trial runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainstack.tuning.spec import (
    DEFAULT_METRIC_TAG,
    MAX_SPEC_FILE_BYTES,
    MAX_TRIALS,
    HyperparameterSpec,
    SpecError,
    read_spec,
    spec_from_mapping,
)

# As Google's census tf-keras sample ships it (ai-platform-samples training/tensorflow/census/tf-keras).
SAMPLE = (Path(__file__).parent / "fixtures" / "imports" / "census_hptuning_config.yaml").read_text()
SPEC_LINES = SAMPLE.split("hyperparameters:\n", 1)[1]


def write(tmp_path: Path, text: str, name: str = "hptuning_config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def dedent(lines: str, by: int) -> str:
    return "".join(line[by:] + "\n" for line in lines.splitlines())


def check_sample(spec: HyperparameterSpec) -> None:
    assert spec.goal == "MAXIMIZE"
    assert (spec.max_trials, spec.max_parallel_trials) == (4, 2)
    assert spec.hyperparameter_metric_tag == "epoch_accuracy"
    batch, rate = spec.params
    assert (batch.parameter_name, batch.type, batch.min_value, batch.max_value) == ("batch-size", "INTEGER", 8, 256)
    assert (rate.parameter_name, rate.scale_type, rate.min_value, rate.max_value) == (
        "learning-rate",
        "UNIT_LOG_SCALE",
        0.01,
        0.1,
    )


def test_the_hptuning_config_google_samples_ship_reads_as_written(tmp_path: Path) -> None:
    check_sample(read_spec(write(tmp_path, SAMPLE)))


@pytest.mark.parametrize(
    "shape",
    ["alone", "under hyperparameters", "in a whole job", "snake_case keys"],
)
def test_the_same_spec_reads_alone_under_its_key_or_inside_a_whole_job(tmp_path: Path, shape: str) -> None:
    alone = dedent(SPEC_LINES, 4)
    text = {
        "alone": alone,
        "under hyperparameters": "hyperparameters:\n" + dedent(SPEC_LINES, 2),
        "in a whole job": "jobId: census_hp_1\ntrainingInput:\n  scaleTier: BASIC\n  region: us-central1\n"
        "  hyperparameters:\n" + SPEC_LINES,
        "snake_case keys": "training_input:\n  hyperparameters:\n"
        + SPEC_LINES.replace("maxTrials", "max_trials")
        .replace("maxParallelTrials", "max_parallel_trials")
        .replace("hyperparameterMetricTag", "hyperparameter_metric_tag")
        .replace("parameterName", "parameter_name")
        .replace("minValue", "min_value")
        .replace("maxValue", "max_value")
        .replace("scaleType", "scale_type"),
    }[shape]
    check_sample(read_spec(write(tmp_path, text)))


def test_numbers_pyyaml_reads_as_strings_still_count_as_numbers(tmp_path: Path) -> None:
    # YAML 1.1 (PyYAML) reads 1e-4 as a string; AI Platform's gcloud read it as a number.
    text = "goal: MINIMIZE\nparams:\n- {parameterName: lr, type: DOUBLE, minValue: 1e-4, maxValue: 1e-1}\n"
    (param,) = read_spec(write(tmp_path, text)).params
    assert (param.min_value, param.max_value) == (0.0001, 0.1)


def test_defaults_are_ai_platforms_and_written_out_in_camel_case() -> None:
    spec = spec_from_mapping(
        {"goal": "MINIMIZE", "params": [{"parameterName": "units", "type": "INTEGER", "minValue": 8, "maxValue": 64}]}
    )
    document = spec.to_json()
    assert document["maxTrials"] == 1
    assert document["maxParallelTrials"] == 1
    assert document["maxFailedTrials"] == 0
    assert document["hyperparameterMetricTag"] == DEFAULT_METRIC_TAG == "training/hptuning/metric"
    assert document["algorithm"] == "ALGORITHM_UNSPECIFIED"
    assert document["enableTrialEarlyStopping"] is False
    assert document["params"] == [
        {"parameterName": "units", "type": "INTEGER", "minValue": 8, "maxValue": 64, "scaleType": "NONE"}
    ]
    # What to_json writes reads back as the same spec.
    assert spec_from_mapping(document) == spec


@pytest.mark.parametrize(
    ("max_trials", "max_failed", "allowed"),
    [(1, 0, 1), (4, 0, 1), (5, 0, 2), (40, 0, 10), (1000, 0, 10), (20, 3, 3), (20, 20, 20)],
)
def test_failures_allowed_is_max_failed_trials_or_when_zero_a_quarter_of_max_trials_up_to_ten(
    max_trials: int, max_failed: int, allowed: int
) -> None:
    spec = spec_from_mapping(
        {
            "goal": "MAXIMIZE",
            "maxTrials": max_trials,
            "maxFailedTrials": max_failed,
            "params": [{"parameterName": "x", "type": "DISCRETE", "discreteValues": [1, 2]}],
        }
    )
    assert spec.failures_allowed == allowed


def param(**fields: Any) -> dict[str, Any]:
    return {"parameterName": "p", "type": "DOUBLE", "minValue": 0.01, "maxValue": 0.1, **fields}


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        ("INTEGER", 8, "8"),
        ("INTEGER", 8.0, "8"),
        ("DISCRETE", 32.0, "32"),
        ("DISCRETE", 0.5, "0.5"),
        ("DOUBLE", 2.0, "2"),
        ("DOUBLE", 0.001, "0.001"),
        ("DOUBLE", 1e-05, "1e-05"),
        ("CATEGORICAL", "adam", "adam"),
    ],
)
def test_an_argument_is_a_whole_number_without_a_point_zero(kind: str, value: Any, expected: str) -> None:
    fields = {
        "INTEGER": {"type": "INTEGER", "minValue": 1, "maxValue": 64},
        "DISCRETE": {"type": "DISCRETE", "discreteValues": [0.5, 32], "minValue": None, "maxValue": None},
        "DOUBLE": {},
        "CATEGORICAL": {"type": "CATEGORICAL", "categoricalValues": ["adam"], "minValue": None, "maxValue": None},
    }[kind]
    spec = spec_from_mapping(
        {"goal": "MAXIMIZE", "params": [{k: v for k, v in param(**fields).items() if v is not None}]}
    )
    assert spec.params[0].argument(value) == expected
    # An argparse type=int takes what an INTEGER or a whole DISCRETE value becomes.
    if kind in ("INTEGER",) or (kind == "DISCRETE" and float(value).is_integer()):
        assert int(spec.params[0].argument(value)) == value


def problems_of(value: Any) -> list[str]:
    with pytest.raises(SpecError) as caught:
        spec_from_mapping(value)
    lines = str(caught.value).splitlines()
    assert [str(problem) for problem in caught.value.problems] == lines
    for line in lines:
        assert len(line) < 400, line
    return lines


def one_problem(params: list[Any] | None = None, **spec: Any) -> str:
    document = {"goal": "MAXIMIZE", "params": [param()] if params is None else params, **spec}
    (line,) = problems_of(document)
    return line


# (what is wrong, the spec's fields or its one parameter's, words the line holds)
BAD_PARAMS = [
    ("inverted range", param(minValue=0.1, maxValue=0.01), ["params[0]", "minValue 0.1 is not below maxValue 0.01"]),
    ("empty range", param(minValue=0.1, maxValue=0.1), ["params[0]", "minValue 0.1 is not below maxValue 0.1"]),
    ("no minValue", {"parameterName": "p", "type": "DOUBLE", "maxValue": 1}, ["params[0]", "minValue and maxValue"]),
    ("no maxValue", {"parameterName": "p", "type": "INTEGER", "minValue": 1}, ["params[0]", "minValue and maxValue"]),
    ("infinite", param(maxValue=float("inf")), ["params[0]", "finite numbers"]),
    ("nan", param(minValue=float("nan")), ["params[0]", "finite numbers"]),
    ("log from 0", param(minValue=0, scaleType="UNIT_LOG_SCALE"), ["UNIT_LOG_SCALE needs minValue above 0"]),
    ("reverse log below 0", param(minValue=-1, scaleType="UNIT_REVERSE_LOG_SCALE"), ["needs minValue above 0"]),
    (
        "log discrete from 0",
        {"parameterName": "p", "type": "DISCRETE", "discreteValues": [0, 1], "scaleType": "UNIT_LOG_SCALE"},
        ["needs discreteValues above 0"],
    ),
    (
        "integer halves",
        {"parameterName": "p", "type": "INTEGER", "minValue": 1.5, "maxValue": 4},
        ["type INTEGER needs whole minValue and maxValue (got 1.5, 4)"],
    ),
    (
        "integer past int32",
        {"parameterName": "p", "type": "INTEGER", "minValue": 1, "maxValue": 2**40},
        ["within +/-2147483647"],
    ),
    ("no categories", {"parameterName": "p", "type": "CATEGORICAL"}, ["type CATEGORICAL needs categoricalValues"]),
    (
        "empty categories",
        {"parameterName": "p", "type": "CATEGORICAL", "categoricalValues": []},
        ["params[0].categoricalValues", "give 1 to 1000 values (got 0)"],
    ),
    (
        "repeated categories",
        {"parameterName": "p", "type": "CATEGORICAL", "categoricalValues": ["adam", "sgd", "adam"]},
        ["params[0].categoricalValues", "values repeat"],
    ),
    (
        "categorical with a scale",
        {"parameterName": "p", "type": "CATEGORICAL", "categoricalValues": ["a"], "scaleType": "UNIT_LINEAR_SCALE"},
        ["a CATEGORICAL parameter has no scale"],
    ),
    (
        "discrete decreasing",
        {"parameterName": "p", "type": "DISCRETE", "discreteValues": [64, 32]},
        ["params[0].discreteValues", "increasing order"],
    ),
    (
        "discrete repeated",
        {"parameterName": "p", "type": "DISCRETE", "discreteValues": [32, 32]},
        ["params[0].discreteValues", "increasing order"],
    ),
    ("no discrete values", {"parameterName": "p", "type": "DISCRETE"}, ["type DISCRETE needs discreteValues"]),
    (
        "range on a discrete",
        {"parameterName": "p", "type": "DISCRETE", "discreteValues": [1, 2], "minValue": 0},
        ["minValue does not apply to type DISCRETE"],
    ),
    ("unknown key", param(stepSize=2), ["params[0].stepSize", "unknown key", "minValue", "scaleType"]),
    (
        "unknown type",
        param(type="FLOAT"),
        ["params[0].type", "'FLOAT' is not one of DOUBLE, INTEGER, CATEGORICAL, DISCRETE"],
    ),
    (
        "unknown scale",
        param(scaleType="LOG"),
        ["params[0].scaleType", "'LOG' is not one of NONE, UNIT_LINEAR_SCALE, UNIT_LOG_SCALE, UNIT_REVERSE_LOG_SCALE"],
    ),
    ("a yes for a bound", param(minValue=True), ["params[0].minValue", "a number", "true"]),
    (
        "a yes for a value",
        {"parameterName": "p", "type": "DISCRETE", "discreteValues": [True, 2]},
        ["discreteValues", "true"],
    ),
]


@pytest.mark.parametrize(("bad", "fields", "words"), BAD_PARAMS, ids=[case[0] for case in BAD_PARAMS])
def test_a_bad_parameter_is_one_line_naming_its_key(bad: str, fields: dict[str, Any], words: list[str]) -> None:
    line = one_problem([fields])
    assert line.startswith("hyperparameters.params[0]"), line
    for word in words:
        assert word in line, line


@pytest.mark.parametrize(
    "name",
    ["--x", "a b", "x;rm -rf ~", "$(id)", "x\ny", "1abc", "", "x" * 10_000],
    ids=["dashes", "space", "semicolon", "substitution", "newline", "digit first", "empty", "10 kB"],
)
def test_a_hostile_parameter_name_is_refused_in_one_short_line(name: str) -> None:
    line = one_problem([param(parameterName=name)])
    assert line.startswith("hyperparameters.params[0].parameterName: "), line
    assert "is not an argument name: a letter, then up to 63 letters, digits, '_' or '-'" in line
    assert "\n" not in line


BAD_SPECS = [
    ("no params", {"params": []}, ["hyperparameters.params", "give 1 to 32 parameters to tune (got 0)"]),
    ("params not a list", {"params": "lr"}, ["hyperparameters.params"]),
    (
        "unknown key",
        {"maxTrial": 3},
        ["hyperparameters.maxTrial", "unknown key", "maxTrials", "maxParallelTrials", "hyperparameterMetricTag"],
    ),
    ("unknown goal", {"goal": "MAX"}, ["hyperparameters.goal", "'MAX' is not one of MAXIMIZE, MINIMIZE"]),
    (
        "unknown algorithm",
        {"algorithm": "BAYESIAN"},
        ["hyperparameters.algorithm", "'BAYESIAN' is not one of ALGORITHM_UNSPECIFIED, GRID_SEARCH, RANDOM_SEARCH"],
    ),
    (
        "grid with a double",
        {"algorithm": "GRID_SEARCH"},
        ["algorithm GRID_SEARCH takes INTEGER, CATEGORICAL and DISCRETE parameters", "p is DOUBLE"],
    ),
    ("huge maxTrials", {"maxTrials": 10**9}, ["hyperparameters.maxTrials", f"outside 1 to {MAX_TRIALS}"]),
    ("zero maxTrials", {"maxTrials": 0}, ["hyperparameters.maxTrials", f"outside 1 to {MAX_TRIALS}"]),
    ("1000-digit maxTrials", {"maxTrials": 10**999}, ["hyperparameters.maxTrials", f"outside 1 to {MAX_TRIALS}"]),
    ("5000-digit maxTrials", {"maxTrials": 10**5000}, ["hyperparameters.maxTrials", f"outside 1 to {MAX_TRIALS}"]),
    ("huge parallel", {"maxParallelTrials": 10**6}, ["hyperparameters.maxParallelTrials", "outside 1 to 100"]),
    ("negative failures", {"maxFailedTrials": -1}, ["hyperparameters.maxFailedTrials", "outside 0 to"]),
    ("maxTrials a yes", {"maxTrials": True}, ["hyperparameters.maxTrials", "integer", "true"]),
    ("early stopping a string", {"enableTrialEarlyStopping": "yes"}, ["enableTrialEarlyStopping", "boolean"]),
    (
        "tag from the root",
        {"hyperparameterMetricTag": "/accuracy"},
        ["hyperparameterMetricTag", "'/accuracy' is not a summary tag: up to 256 letters"],
    ),
]


@pytest.mark.parametrize(("bad", "fields", "words"), BAD_SPECS, ids=[case[0] for case in BAD_SPECS])
def test_a_bad_spec_is_one_line_naming_its_key(bad: str, fields: dict[str, Any], words: list[str]) -> None:
    line = one_problem(**fields)
    for word in words:
        assert word in line, line


def test_a_grid_too_large_to_walk_is_refused() -> None:
    wide = {"type": "INTEGER", "minValue": 1, "maxValue": 1000}
    line = one_problem([{"parameterName": name, **wide} for name in ("a", "b")], algorithm="GRID_SEARCH")
    assert "the grid has more than 100000 points" in line


def test_every_problem_is_reported_at_once_one_line_each() -> None:
    lines = problems_of(
        {"goal": "UP", "maxTrials": 0, "params": [param(type="FLOAT"), param(parameterName="a b")], "extra": 1}
    )
    keys = sorted(line.split(":", 1)[0] for line in lines)
    assert keys == sorted(
        [
            "hyperparameters.goal",
            "hyperparameters.maxTrials",
            "hyperparameters.params[0].type",
            "hyperparameters.params[1].parameterName",
            "hyperparameters.extra",
        ]
    )


def test_a_repeated_parameter_name_is_named() -> None:
    line = one_problem([param(parameterName="lr"), param(parameterName="lr")])
    assert line == "hyperparameters.params: parameterName lr given more than once"


def file_problem(path: Path) -> str:
    with pytest.raises(SpecError) as caught:
        read_spec(path)
    (line,) = str(caught.value).splitlines()
    return line


def test_a_spec_files_problem_names_the_file_and_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, SAMPLE.replace("maxTrials: 4", "maxTrials: 100000"))
    assert file_problem(path).startswith(f"{path}: trainingInput.hyperparameters.maxTrials: 100000 is outside 1 to")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("- goal: MAXIMIZE\n", ["holds no hyperparameter spec", "trainingInput.hyperparameters"]),
        ("just words\n", ["holds no hyperparameter spec"]),
        ("trainingInput:\n  scaleTier: BASIC\n", ["holds no hyperparameter spec"]),
        ("hyperparameters: [1, 2]\n", ["hyperparameters: a mapping of goal, params"]),
        ("trainingInput:\n  hyperparameters: MAXIMIZE\n", ["trainingInput.hyperparameters: a mapping"]),
        ("goal: MAXIMIZE\nparams: &p []\nagain: *p\n", ["anchors and aliases"]),
        ("goal: [unclosed\n", []),
    ],
    ids=["a list", "a string", "a job without a spec", "spec a list", "spec a word", "aliases", "broken YAML"],
)
def test_a_file_that_holds_no_usable_spec_is_one_line(tmp_path: Path, text: str, words: list[str]) -> None:
    path = write(tmp_path, text)
    line = file_problem(path)
    assert line.startswith(str(path)), line
    for word in words:
        assert word in line, line


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.yaml"
    assert file_problem(path) == f"{path}: no such file"


def test_a_file_over_the_size_bound_is_refused_unread(tmp_path: Path) -> None:
    path = write(tmp_path, SAMPLE + "#" * MAX_SPEC_FILE_BYTES)
    line = file_problem(path)
    assert line.startswith(str(path))
    assert f"at most {MAX_SPEC_FILE_BYTES} are read" in line


def test_a_directory_or_a_fifo_is_refused(tmp_path: Path) -> None:
    import os

    assert "not a regular file" in file_problem(tmp_path)
    fifo = tmp_path / "spec.fifo"
    os.mkfifo(fifo)
    assert "not a regular file" in file_problem(fifo)


def test_every_problem_of_one_parameter_is_named_on_its_line() -> None:
    """Defect: only the first problem of a parameter was shown, the next only after fixing it."""
    line = one_problem(
        [param(type="INTEGER", minValue=0.5, maxValue=0.1, scaleType="UNIT_LOG_SCALE", categoricalValues=["a"])]
    )
    assert line.startswith("hyperparameters.params[0]: ")
    for words in (
        "minValue 0.5 is not below maxValue 0.1",
        "type INTEGER needs whole minValue and maxValue (got 0.5, 0.1)",
        "categoricalValues does not apply to type INTEGER",
    ):
        assert words in line, line
