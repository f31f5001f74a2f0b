"""The tuning engine on the queue's real objects (the directory store of `trainstack local`):
studies run to their end within maxTrials and maxParallelTrials, trials get distinct
parameters from Optuna and their metric from their own job directory, a `tune` killed at any
point loses and repeats no trial, failures end the study and cancel what is outstanding,
early stopping cancels the trial's job, and a corrupt or foreign study is refused whole.

The nodes are played by :class:`Nodes`: it runs each queued job the way a node's agent records
it (status/job.json RUNNING, then its end) and writes the metric the way cloudml-hypertune
writes it, computed from the --NAME=VALUE arguments in the job's spec as the engine queued it.
"""

from __future__ import annotations

import json
import math
import posixpath
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainstack.base.bucket import DirectoryBucket
from trainstack.jobqueue.queue import cancel, job_prefix, read_index, submit
from trainstack.tuning import engine
from trainstack.tuning.spec import spec_from_mapping
from trainstack.tuning.study import study_object
from trainstack_contract import LAYOUT, METADATA_KEYS
from trainstack_contract.lifecycle import StudyState, TrialState
from trainstack_contract.queue import TAKEN_BY, QueueEntry, read_spec, spec_object, taken_by_bytes

JOB = {METADATA_KEYS.job_mode: "package", METADATA_KEYS.trainer_args: json.dumps(["--epochs", "2"])}
TAG = "accuracy"


def spec(**overrides: Any) -> Any:
    document: dict[str, Any] = {
        "goal": "MAXIMIZE",
        "hyperparameterMetricTag": TAG,
        "maxTrials": 4,
        "maxParallelTrials": 1,
        "params": [
            {
                "parameterName": "learning-rate",
                "type": "DOUBLE",
                "minValue": 0.001,
                "maxValue": 1.0,
                "scaleType": "UNIT_LOG_SCALE",
            },
            {"parameterName": "units", "type": "INTEGER", "minValue": 1, "maxValue": 64},
        ],
    }
    document.update(overrides)
    return spec_from_mapping(document)


def trial_arguments(values: dict[str, str]) -> dict[str, str]:
    args = json.loads(values[METADATA_KEYS.trainer_args])
    return dict(arg[2:].split("=", 1) for arg in args if arg.startswith("--") and "=" in arg)


class Nodes:
    """Plays the stack's nodes: each call to :meth:`work` moves the queue's first job that has
    not ended one stage on (QUEUED -> RUNNING -> ended), as the agent records it in the job's
    directory: the cluster runs one job at a time, in submit order."""

    def __init__(self, bucket: Path, store: DirectoryBucket, score: Callable[[dict[str, str]], float | None]) -> None:
        self.bucket, self.store, self.score = bucket, store, score
        self.fail: set[int] = set()
        self.reports: dict[int, list[float]] = {}

    def _status(self, entry: QueueEntry) -> Path:
        return self.bucket / job_prefix(entry) / LAYOUT.job_status

    def state(self, entry: QueueEntry) -> str | None:
        path = self._status(entry)
        return json.loads(path.read_text())["state"] if path.exists() else None

    def _record(self, entry: QueueEntry, state: str) -> None:
        path = self._status(entry)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"state": state, "time": "2026-11-26T00:00:00Z"}))

    def _report(self, entry: QueueEntry, values: list[float]) -> None:
        # cloudml-hypertune's format: the value and global_step as strings, a float timestamp.
        lines = [
            json.dumps(
                {
                    TAG: str(value),
                    "checkpoint_path": "",
                    "global_step": str(step),
                    "timestamp": 1.0 + step,
                    "trial": "1",
                },
                sort_keys=True,
            )
            for step, value in enumerate(values, start=1)
        ]
        path = self.bucket / job_prefix(entry) / "hypertune" / "chief.metrics"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")

    def work(self) -> None:
        for entry in read_index(self.store).entries:
            state = self.state(entry)
            if entry.cancelled is not None:
                if state == "RUNNING":
                    self._record(entry, "CANCELLED")
                continue
            if state in ("SUCCEEDED", "FAILED", "CANCELLED") or not isinstance(state, (str, type(None))):
                continue  # ended (or its status object was overwritten after its end)
            if state is None:
                self._record(entry, "RUNNING")
                values = self.spec_values(entry)
                final = self.score(trial_arguments(values))
                if final is not None:
                    # Intermediate reports climbing to the final value.
                    self.reports[entry.id] = [final * fraction for fraction in (0.5, 0.8, 1.0)]
                    self._report(entry, self.reports[entry.id][:1])
                return
            elif state == "RUNNING":
                if entry.id in self.fail:
                    self._record(entry, "FAILED")
                    return
                if entry.id in self.reports:
                    self._report(entry, self.reports[entry.id])
                self._record(entry, "SUCCEEDED")
            return

    def spec_values(self, entry: QueueEntry) -> dict[str, str]:
        data = (self.bucket / spec_object(entry.spec_sha256)).read_bytes()
        return read_spec(data, entry.spec_sha256)


def score(args: dict[str, str]) -> float:
    """A metric with its best at a learning rate of 0.1: what the study should approach."""
    return 1.0 - abs(math.log10(float(args["learning-rate"])) + 1.0) / 3.0


@pytest.fixture
def bucket(tmp_path: Path) -> Path:
    path = tmp_path / "bucket"
    path.mkdir()
    return path


class Log(list[str]):
    def __call__(self, line: str) -> None:
        self.append(line)


def services(root: Path, **overrides: Any) -> engine.TuneServices:
    store = DirectoryBucket(root)
    clock = iter(f"2026-11-26T00:{minute // 60:02d}:{minute % 60:02d}.000000Z" for minute in range(10_000))

    def queue(name: str, values: dict[str, str], submitted: str, one_node: bool) -> QueueEntry:
        return submit(store, name, values, [], submitted, one_node)

    def cancel_job(job_id: int) -> None:
        cancel(store, job_id, "2026-11-26T01:00:00Z")

    fields: dict[str, Any] = {
        "bucket": store,
        "submit": queue,
        "cancel": cancel_job,
        "entries": lambda: {entry.id: entry for entry in read_index(store).entries},
        "queued": lambda: None,
        "now": lambda: next(clock),
        "log": Log(),
        "chief": "chief",
        # Every round looks at running trials' values (the tests' rounds are not timed).
        "early_stop_seconds": 0.0,
    }
    fields.update(overrides)
    return engine.TuneServices(**fields)


def run_to_end(tune: engine.TuneServices, nodes: Nodes, name: str = "study", rounds: int = 100) -> Any:
    for _ in range(rounds):
        study = engine.step(tune, name)
        if study.state != "ACTIVE":
            return study
        nodes.work()
    raise AssertionError("the study did not end")


def start(bucket: Path, the_spec: Any, name: str = "study") -> None:
    # A fixed seed: the suggestions are the same on every run of the tests.
    engine.open_study(DirectoryBucket(bucket), name, the_spec, dict(JOB), "2026-11-26T00:00:00Z", seed=7)


def test_a_study_runs_max_trials_never_more_than_max_parallel_at_once_and_names_the_best(bucket: Path) -> None:
    start(bucket, spec(maxTrials=6, maxParallelTrials=2))
    tune, nodes = services(bucket), Nodes(bucket, DirectoryBucket(bucket), score)
    most_outstanding = 0
    for _ in range(100):
        study = engine.step(tune, "study")
        most_outstanding = max(most_outstanding, len(study.outstanding))
        if study.state != "ACTIVE":
            break
        nodes.work()
    assert study.state == StudyState.SUCCEEDED
    assert [trial.state for trial in study.trials] == [TrialState.SUCCEEDED] * 6
    assert most_outstanding == 2
    # Six jobs queued, one per trial, each with its trial's parameters and number.
    entries = read_index(DirectoryBucket(bucket)).entries
    assert [entry.name for entry in entries] == [f"study_t{n}" for n in range(1, 7)]
    for trial, entry in zip(study.trials, entries, strict=True):
        values = nodes.spec_values(entry)
        assert trial_arguments(values) == {name: str(value) for name, value in trial.params.items()} | {
            "learning-rate": repr(float(trial.params["learning-rate"]))
        }
        assert json.loads(values[METADATA_KEYS.trainer_args])[:2] == ["--epochs", "2"]
        assert json.loads(values[METADATA_KEYS.job_env]) == {"CLOUD_ML_TRIAL_ID": str(trial.number)}
        assert trial.metric == pytest.approx(score(trial_arguments(values)))
    assert len({json.dumps(trial.params, sort_keys=True) for trial in study.trials}) == 6
    best = study.best()
    assert best is not None
    assert best.metric == max(trial.metric or 0 for trial in study.trials)
    assert all(
        0.001 <= trial.params["learning-rate"] <= 1.0 and 1 <= trial.params["units"] <= 64 for trial in study.trials
    )
    # The final value is the last report; the intermediate ones are kept by step.
    assert [step for step, _ in study.trials[0].steps] == [1, 2, 3]


@pytest.mark.parametrize("crash_at", ["before_submit", "after_submit"])
def test_a_tune_killed_between_recording_a_trial_and_queueing_it_queues_that_trial_once_when_resumed(
    bucket: Path, crash_at: str
) -> None:
    start(bucket, spec(maxTrials=3))
    store = DirectoryBucket(bucket)
    real = services(bucket)

    class Killed(Exception):
        pass

    def dying_submit(name: str, values: dict[str, str], submitted: str, one_node: bool) -> QueueEntry:
        if crash_at == "after_submit":
            real.submit(name, values, submitted, one_node)
        raise Killed

    with pytest.raises(Killed):
        engine.step(services(bucket, submit=dying_submit), "study")
    recorded = engine.read_study(store, "study")
    assert recorded is not None
    assert [trial.state for trial in recorded.trials] == ["PENDING"]
    params = recorded.trials[0].params
    # Resumed (a new process: new services over the same bucket).
    study = run_to_end(services(bucket), Nodes(bucket, store, score))
    assert study.state == StudyState.SUCCEEDED
    assert len(study.trials) == 3
    assert study.trials[0].params == params
    assert [entry.name for entry in read_index(store).entries] == ["study_t1", "study_t2", "study_t3"]


def test_a_resumed_random_study_goes_on_with_new_parameters_not_repeated_ones(bucket: Path) -> None:
    start(bucket, spec(maxTrials=4, algorithm="RANDOM_SEARCH"))
    store = DirectoryBucket(bucket)
    nodes = Nodes(bucket, store, score)
    first = services(bucket)
    for _ in range(4):
        engine.step(first, "study")
        nodes.work()
    # A second `tune` (another machine) takes it over.
    study = run_to_end(services(bucket), nodes)
    seen = [json.dumps(trial.params, sort_keys=True) for trial in study.trials]
    assert len(seen) == 4
    assert len(set(seen)) == 4


def test_failed_trials_end_the_study_at_max_failed_trials_and_cancel_what_is_outstanding(bucket: Path) -> None:
    start(bucket, spec(maxTrials=6, maxParallelTrials=3, maxFailedTrials=2))
    store = DirectoryBucket(bucket)
    nodes = Nodes(bucket, store, score)
    nodes.fail = {1, 2}
    tune = services(bucket)
    study = run_to_end(tune, nodes)
    assert study.state == StudyState.FAILED
    assert "2 trials failed" in (study.problem or "")
    states = [trial.state for trial in study.trials]
    assert states[:2] == [TrialState.FAILED, TrialState.FAILED]
    assert TrialState.CANCELLED in states
    # The outstanding trial's job is cancelled in the queue: nothing bills for a failed study.
    cancelled = {entry.id for entry in read_index(store).entries if entry.cancelled}
    assert cancelled == {trial.job_id for trial in study.trials if trial.state == TrialState.CANCELLED}
    # Nothing is left queued or running, and no trial was asked once the study had failed.
    assert not study.outstanding
    assert len(study.trials) < 6
    assert engine.step(tune, "study").trials == study.trials


def test_a_trial_whose_code_never_writes_the_tag_fails_naming_the_tags_it_wrote(bucket: Path) -> None:
    start(bucket, spec(maxTrials=1, maxFailedTrials=1))
    store = DirectoryBucket(bucket)
    nodes = Nodes(bucket, store, lambda args: None)
    engine.step(services(bucket), "study")
    nodes.work()
    entry = read_index(store).entries[0]
    other = bucket / job_prefix(entry) / "hypertune" / "chief.metrics"
    other.parent.mkdir(parents=True, exist_ok=True)
    other.write_text(
        json.dumps({"loss": "0.5", "global_step": "1", "timestamp": 1.0, "trial": "1", "checkpoint_path": ""}) + "\n"
    )
    study = run_to_end(services(bucket), nodes)
    trial = study.trials[0]
    assert trial.state == TrialState.FAILED
    assert trial.problem == "the metric tag 'accuracy' was never written; the tags written were: loss"
    assert study.state == StudyState.FAILED


def test_early_stopping_stops_a_trial_worse_than_the_median_and_cancels_its_job(bucket: Path) -> None:
    start(bucket, spec(maxTrials=5, enableTrialEarlyStopping=True, algorithm="RANDOM_SEARCH"))
    store = DirectoryBucket(bucket)
    tune = services(bucket)
    nodes = Nodes(bucket, store, lambda args: 0.9)
    # Three trials finish at 0.9 (0.45, 0.72, 0.9 by step).
    for _ in range(3):
        engine.step(tune, "study")
        nodes.work()
        engine.step(tune, "study")
        nodes.work()
    study = engine.step(tune, "study")
    assert [trial.state for trial in study.trials[:3]] == [TrialState.SUCCEEDED] * 3
    # The fourth reports far below the others at its first two steps: stopped at its second.
    nodes.score = lambda args: 0.1
    nodes.work()  # RUNNING, first report 0.05
    entry = read_index(store).entries[3]
    nodes._report(entry, [0.05, 0.06])
    study = engine.step(tune, "study")
    fourth = study.trials[3]
    assert fourth.state == TrialState.STOPPED
    assert fourth.metric == pytest.approx(0.06)
    assert read_index(store).entries[3].cancelled is not None
    assert study.best() is not None
    assert study.best().number in (1, 2, 3)


def test_grid_search_tries_every_point_once_and_ends_when_the_grid_is_walked(bucket: Path) -> None:
    grid = spec(
        maxTrials=50,
        maxParallelTrials=2,
        algorithm="GRID_SEARCH",
        params=[
            {"parameterName": "units", "type": "DISCRETE", "discreteValues": [16, 32]},
            {"parameterName": "act", "type": "CATEGORICAL", "categoricalValues": ["relu", "tanh", "gelu"]},
        ],
    )
    start(bucket, grid)
    study = run_to_end(services(bucket), Nodes(bucket, DirectoryBucket(bucket), lambda args: float(args["units"])))
    points = sorted((trial.params["units"], trial.params["act"]) for trial in study.trials)
    assert points == sorted((units, act) for units in (16.0, 32.0) for act in ("relu", "tanh", "gelu"))
    assert study.state == StudyState.SUCCEEDED
    # DISCRETE 16 reaches an argparse type=int as 16, not 16.0.
    args = json.loads(
        Nodes(bucket, DirectoryBucket(bucket), score).spec_values(read_index(DirectoryBucket(bucket)).entries[0])[
            METADATA_KEYS.trainer_args
        ]
    )
    assert "--units=16" in args


def test_a_corrupt_study_is_refused_in_one_line_and_left_as_it_was(bucket: Path) -> None:
    start(bucket, spec())
    path = bucket / study_object("study")
    document = json.loads(path.read_text())
    document["trials"] = [{"number": 1, "params": {"x": 1}}]
    corrupt = json.dumps(document).encode()
    path.write_bytes(corrupt)
    with pytest.raises(engine.StudyRefused) as refused:
        engine.step(services(bucket), "study")
    assert "\n" not in str(refused.value)
    assert "trial 1" in str(refused.value)
    assert path.read_bytes() == corrupt
    path.write_bytes(b"\x00garbage")
    with pytest.raises(engine.StudyRefused, match="is not JSON"):
        engine.open_study(DirectoryBucket(bucket), "study", spec(), dict(JOB), "now")
    assert path.read_bytes() == b"\x00garbage"
    assert read_index(DirectoryBucket(bucket)).entries == ()


def test_a_study_resumes_only_with_its_own_spec_and_job(bucket: Path) -> None:
    store = DirectoryBucket(bucket)
    start(bucket, spec())
    study, created = engine.open_study(store, "study", spec(), dict(JOB), "later")
    assert not created
    assert study.created == "2026-11-26T00:00:00Z"
    with pytest.raises(engine.StudyRefused, match="another spec"):
        engine.open_study(store, "study", spec(maxTrials=9), dict(JOB), "later")
    with pytest.raises(engine.StudyRefused, match="another job"):
        engine.open_study(store, "study", spec(), {**JOB, METADATA_KEYS.trainer_args: "[]"}, "later")
    with pytest.raises(engine.StudyRefused, match="runs its trials on all the cluster's nodes: resume it without"):
        engine.open_study(store, "study", spec(), dict(JOB), "later", one_node=True)


def test_one_node_trials_are_queued_side_by_side_and_read_from_the_node_that_ran_each(bucket: Path) -> None:
    store = DirectoryBucket(bucket)
    engine.open_study(
        store, "study", spec(maxTrials=3, maxParallelTrials=3), dict(JOB), "2026-11-26T00:00:00Z", 7, True
    )
    tune = services(bucket)
    engine.step(tune, "study")
    entries = read_index(store).entries
    assert [entry.one_node for entry in entries] == [True, True, True]
    # Each node takes one and reports its metric in its own hypertune file, as a node's agent copies it.
    for entry, node, value in zip(entries, ("worker-1", "chief", "worker-0"), (0.25, 0.5, 0.75), strict=True):
        job = bucket / job_prefix(entry)
        (job / "status").mkdir(parents=True)
        (job / TAKEN_BY).write_bytes(taken_by_bytes(node, "2026-11-26T00:00:00Z"))
        (job / LAYOUT.hypertune_metrics(node)).parent.mkdir(exist_ok=True)
        (job / LAYOUT.hypertune_metrics(node)).write_text(
            json.dumps({TAG: str(value), "global_step": "1", "timestamp": 1.0, "trial": "1"}) + "\n"
        )
        (job / LAYOUT.job_status).write_text(json.dumps({"state": "SUCCEEDED", "time": "2026-11-26T00:01:00Z"}))
    study = engine.step(tune, "study")
    assert [(trial.state, trial.metric) for trial in study.trials] == [
        (TrialState.SUCCEEDED, 0.25),
        (TrialState.SUCCEEDED, 0.5),
        (TrialState.SUCCEEDED, 0.75),
    ]
    assert study.one_node
    best = study.best()
    assert best is not None
    assert best.number == 3


def test_reverse_log_scale_stays_in_range_and_is_dense_near_the_maximum(bucket: Path) -> None:
    reverse = spec(
        maxTrials=40,
        maxParallelTrials=40,
        algorithm="RANDOM_SEARCH",
        params=[
            {
                "parameterName": "momentum",
                "type": "DOUBLE",
                "minValue": 0.01,
                "maxValue": 0.99,
                "scaleType": "UNIT_REVERSE_LOG_SCALE",
            }
        ],
    )
    start(bucket, reverse)
    study = engine.step(services(bucket), "study")
    values = [trial.params["momentum"] for trial in study.trials]
    assert len(values) == 40
    assert all(0.01 <= value <= 0.99 for value in values)
    # Mirrored log sampling: most of the mass near the maximum (a uniform draw would put about half above 0.5).
    assert sum(value > 0.9 for value in values) > 10


def test_early_stopping_reads_a_running_trials_values_at_most_once_per_interval(bucket: Path) -> None:
    start(bucket, spec(maxTrials=2, enableTrialEarlyStopping=True))
    now = [0.0]
    looks: list[str] = []
    objects = DirectoryBucket(bucket)

    class Counting(DirectoryBucket):
        def names(self, prefix: str, limit: int) -> list[str]:
            looks.append(prefix)
            return objects.names(prefix, limit)

    tune = services(bucket, bucket=Counting(bucket), early_stop_seconds=30.0, clock=lambda: now[0])
    nodes = Nodes(bucket, DirectoryBucket(bucket), score)
    engine.step(tune, "study")
    nodes.work()  # the first trial runs
    for _ in range(5):
        engine.step(tune, "study")
    assert len(looks) == 1
    now[0] = 31.0
    engine.step(tune, "study")
    assert len(looks) == 2


def test_the_engine_never_reads_a_job_directory_outside_the_trials_own(bucket: Path) -> None:
    start(bucket, spec(maxTrials=1))
    read: list[str] = []
    objects = DirectoryBucket(bucket)

    class Watching(DirectoryBucket):
        def read_upto(self, name: str, limit: int) -> bytes | None:
            read.append(name)
            return objects.read_upto(name, limit)

        def read(self, name: str) -> bytes | None:
            read.append(name)
            return objects.read(name)

    study = run_to_end(services(bucket, bucket=Watching(bucket)), Nodes(bucket, DirectoryBucket(bucket), score))
    job_dir = study.trials[0].job_dir
    assert job_dir is not None
    assert read
    assert all(posixpath.commonpath([name, job_dir]) == job_dir for name in read)


def _spec_of(max_trials: int, params: list[dict[str, Any]]) -> Any:
    return spec_from_mapping(
        {"goal": "MAXIMIZE", "hyperparameterMetricTag": "acc", "maxTrials": max_trials, "params": params}, "spec"
    )


# 32 parameters, each with a 200-character category and a 64-character name: inside every limit
# a spec has, and a study of 1000 of their trials would not fit what a study may hold.
LONG_CATEGORIES = [
    {"parameterName": f"p{i:02d}" + "x" * 61, "type": "CATEGORICAL", "categoricalValues": ["v" * 200, "w"]}
    for i in range(32)
]


def test_a_spec_whose_largest_study_cannot_be_read_back_is_refused_naming_what_fits(bucket: Path) -> None:
    with pytest.raises(engine.StudyRefused) as refused:
        engine.open_study(DirectoryBucket(bucket), "big", _spec_of(1000, LONG_CATEGORIES), dict(JOB), "now", seed=1)
    message = str(refused.value)
    assert message.startswith("maxTrials 1000: at its largest")
    fits = int(message.rsplit("at most ", 1)[1].split()[0])
    assert 500 < fits < 1000
    assert not list(bucket.rglob("*"))
    engine.open_study(DirectoryBucket(bucket), "fits", _spec_of(fits, LONG_CATEGORIES), dict(JOB), "now", seed=1)


def test_the_worst_case_bound_holds_a_study_written_at_its_worst(bucket: Path) -> None:
    """Every trial recorded with the longest values it can have: the study written is within
    the computed bound, and the bound within what is read back."""
    from dataclasses import replace

    from trainstack.tuning.metrics import MAX_STEPS
    from trainstack.tuning.study import MAX_STUDY_BYTES, Study, Trial, worst_case_study_bytes

    spec = _spec_of(300, LONG_CATEGORIES)
    study = Study(name="s" * 64, spec=spec, job=dict(JOB), created="now", seed=1)
    overhead, per_trial = worst_case_study_bytes(study)
    hostile = '\U0001f600\x00"\\' * 300  # text a trial's files could put in a problem or source
    trials = tuple(
        Trial(
            number=n,
            params={p.parameter_name: "v" * 200 for p in spec.params},
            submitted="2026-11-26T00:00:00.000000+00:00",
            state="CANCELLED",
            job_id=2**63 - 1,
            job_dir=f"jobs/q{2**63 - 1}_{'s' * 64}_t{n}",
            metric=-2.2250738585072014e-308,
            steps=((2**63 - 1, -2.2250738585072014e-308),) * MAX_STEPS,
            source=hostile,
            problem=hostile,
            ended="2026-11-26T00:00:00.000000+00:00",
        )
        for n in range(1, 301)
    )
    written = replace(study, trials=trials, problem=hostile, state="SUCCEEDED").to_json()
    assert len(written) <= overhead + 300 * per_trial <= MAX_STUDY_BYTES


def _odd_event_file(directory: Path) -> None:
    """An event file whose scalar for the metric tag is a float tensor of two bytes, not four."""
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    tensor = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_FLOAT, tensor_shape=tensor_shape_pb2.TensorShapeProto(), tensor_content=b"\x00\x01"
    )
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=TAG, tensor=tensor)])
    writer = EventFileWriter(str(directory))
    writer.add_event(event_pb2.Event(step=1, wall_time=1.0, summary=summary))
    writer.close()


def _hostile(case: str, job_dir: Path) -> None:
    if case == "state-is-a-list":
        (job_dir / LAYOUT.job_status).write_text(json.dumps({"state": ["SUCCEEDED"], "time": "x"}))
    elif case == "odd-scalar-payload":
        (job_dir / "hypertune" / "chief.metrics").unlink()
        _odd_event_file(job_dir / "train")
    else:  # more objects than a job directory is read whole
        many = job_dir / "many"
        many.mkdir()
        for n in range(5001):
            (many / str(n)).touch()


@pytest.mark.parametrize("case", ["state-is-a-list", "odd-scalar-payload", "too-many-objects"])
def test_whatever_a_trial_writes_it_fails_alone_in_one_line_and_the_study_goes_on(bucket: Path, case: str) -> None:
    start(bucket, spec(maxTrials=2, maxFailedTrials=2))
    tune, nodes = services(bucket), Nodes(bucket, DirectoryBucket(bucket), score)
    injected = False
    for _ in range(50):
        study = engine.step(tune, "study")
        if study.state != "ACTIVE":
            break
        nodes.work()
        [first, *_] = read_index(DirectoryBucket(bucket)).entries
        if not injected and nodes.state(first) == "SUCCEEDED":
            # Its job has ended; what it wrote is read at the study's next step.
            _hostile(case, bucket / job_prefix(first))
            injected = True
    assert injected
    assert study.state == StudyState.SUCCEEDED
    failed, succeeded = study.trials
    assert (failed.state, succeeded.state) == ("FAILED", TrialState.SUCCEEDED)
    assert failed.problem is not None
    assert "\n" not in failed.problem
    expected = {
        "state-is-a-list": "state \"['SUCCEEDED']\" is not a job state",
        "odd-scalar-payload": f"the metric tag {TAG!r} was never written",
        "too-many-objects": "holds more than 5000 objects",
    }[case]
    assert expected in failed.problem
