"""The study's next parameters and its early stops, from Optuna (optuna.org).

Why Optuna rather than OSS Vizier (the open-source release of the service behind AI Platform's
and Vertex AI's tuning): Vizier suggests nothing without JAX (google-vizier[jax], about 870 MB
installed, against Optuna's 117 MB with its dependencies) and serves its studies from a
process of its own; Optuna is a library that suggests from a study rebuilt in memory, which is
what a study kept in a bucket needs: each suggestion rebuilds Optuna's study from the trials
recorded there (finished ones with their metric, outstanding ones as running), so a `tune`
started anywhere suggests from the whole study.

AI Platform's algorithms: ALGORITHM_UNSPECIFIED (its Bayesian optimisation) is Optuna's TPE
sampler, with the constant liar for trials still running (suggestions made while others run
stay apart); RANDOM_SEARCH is Optuna's random sampler. Each suggestion seeds its sampler with
the study's seed and the trial's number: a resumed study goes on where it was, reproducibly,
and never draws again what an earlier trial drew. GRID_SEARCH walks the grid's points in
order, each once: Optuna's grid sampler keeps the points it visited in its own trial
attributes, which a study rebuilt from the bucket does not have.

Scales: UNIT_LOG_SCALE is Optuna's log domain; UNIT_REVERSE_LOG_SCALE, which Optuna lacks, is
the log domain mirrored (x = min + max - y), dense near the maximum as AI Platform's was.
DISCRETE values are suggested by their index, so that TPE sees their order.

Early stopping (enableTrialEarlyStopping): Optuna's median pruner on the values a trial reports
by step: a trial is stopped when its latest value is worse than the median of finished
trials' values at that step, once three trials have finished and from its second step on.
"""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING, Any, Literal

from trainstack.tuning.spec import LOG_SCALES, HyperparameterSpec, ParameterSpec
from trainstack.tuning.study import Study, Trial
from trainstack_contract.lifecycle import OUTSTANDING_TRIAL_STATES, TrialState

if TYPE_CHECKING:
    import optuna

PRUNER_STARTUP_TRIALS = 3
PRUNER_WARMUP_STEPS = 1
MAX_STARTUP_TRIALS = 10


class SearchExhausted(Exception):
    """A grid search has tried every point."""


def _distribution(param: ParameterSpec) -> Any:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if param.type == "CATEGORICAL":
        assert param.categorical_values is not None
        return CategoricalDistribution(param.categorical_values)
    if param.type == "DISCRETE":
        assert param.discrete_values is not None
        return IntDistribution(0, len(param.discrete_values) - 1)
    assert param.min_value is not None
    assert param.max_value is not None
    log = param.scale_type in LOG_SCALES
    if param.type == "INTEGER":
        return IntDistribution(int(param.min_value), int(param.max_value), log=log)
    return FloatDistribution(param.min_value, param.max_value, log=log)


def _mirrored(param: ParameterSpec, value: Any) -> Any:
    """A value of a reverse log scale to Optuna's domain and back (the mirror is its own inverse)."""
    if param.scale_type != "UNIT_REVERSE_LOG_SCALE" or param.type not in ("DOUBLE", "INTEGER"):
        return value
    assert param.min_value is not None
    assert param.max_value is not None
    mirrored = param.min_value + param.max_value - value
    return round(mirrored) if param.type == "INTEGER" else min(param.max_value, max(param.min_value, mirrored))


def to_internal(param: ParameterSpec, value: Any) -> Any:
    if param.type == "DISCRETE":
        assert param.discrete_values is not None
        return param.discrete_values.index(value)
    return _mirrored(param, value)


def to_external(param: ParameterSpec, value: Any) -> Any:
    if param.type == "DISCRETE":
        assert param.discrete_values is not None
        return param.discrete_values[value]
    return _mirrored(param, value)


def _direction(spec: HyperparameterSpec) -> Literal["maximize", "minimize"]:
    return "maximize" if spec.goal == "MAXIMIZE" else "minimize"


def _frozen(spec: HyperparameterSpec, trial: Trial, running: bool = False) -> optuna.trial.FrozenTrial:
    from optuna.trial import TrialState as OptunaState
    from optuna.trial import create_trial

    distributions = {param.parameter_name: _distribution(param) for param in spec.params}
    params = {param.parameter_name: to_internal(param, trial.params[param.parameter_name]) for param in spec.params}
    intermediate = {step: value for step, value in trial.steps}
    if running or trial.state in OUTSTANDING_TRIAL_STATES:
        state, value = OptunaState.RUNNING, None
    elif trial.state == TrialState.SUCCEEDED and trial.metric is not None:
        state, value = OptunaState.COMPLETE, trial.metric
    elif trial.state == TrialState.STOPPED:
        state, value = OptunaState.PRUNED, None
    else:
        state, value = OptunaState.FAIL, None
    return create_trial(
        state=state, value=value, params=params, distributions=distributions, intermediate_values=intermediate
    )


def _quiet() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("optuna").setLevel(logging.WARNING)


def _study(spec: HyperparameterSpec, sampler: Any, trials: list[Trial], pruner: Any = None) -> optuna.Study:
    import optuna

    _quiet()
    study = optuna.create_study(direction=_direction(spec), sampler=sampler, pruner=pruner)
    for trial in trials:
        study.add_trial(_frozen(spec, trial))
    return study


def _grid_point(spec: HyperparameterSpec, trials: tuple[Trial, ...]) -> dict[str, Any]:
    names = spec.parameter_names
    tried = {tuple(trial.params[name] for name in names) for trial in trials}
    for point in itertools.product(*(param.grid() for param in spec.params)):
        if point not in tried:
            return dict(zip(names, point, strict=True))
    raise SearchExhausted(f"every one of the grid's {spec.grid_size()} points has been tried")


def suggest(study: Study) -> dict[str, Any]:
    """The next trial's parameters; :class:`SearchExhausted` when a grid has none left."""
    spec = study.spec
    if spec.algorithm == "GRID_SEARCH":
        return _grid_point(spec, study.trials)
    import optuna

    seed = (study.seed * 1_000_003 + len(study.trials) + 1) % 2**32
    if spec.algorithm == "RANDOM_SEARCH":
        sampler: Any = optuna.samplers.RandomSampler(seed=seed)
    else:
        startup = min(MAX_STARTUP_TRIALS, max(1, -(-spec.max_trials // 3)))
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=True)
    optuna_study = _study(spec, sampler, list(study.trials))
    distributions = {param.parameter_name: _distribution(param) for param in spec.params}
    asked = optuna_study.ask(distributions)
    return {param.parameter_name: to_external(param, asked.params[param.parameter_name]) for param in spec.params}


def should_stop(study: Study, trial: Trial) -> bool:
    """Whether a running trial's reported values so far say to stop it (early stopping)."""
    if not study.spec.enable_trial_early_stopping or not trial.steps:
        return False
    import optuna

    finished = [
        other
        for other in study.trials
        if other.state in (TrialState.SUCCEEDED, TrialState.STOPPED, TrialState.FAILED) and other.steps
    ]
    pruner = optuna.pruners.MedianPruner(n_startup_trials=PRUNER_STARTUP_TRIALS, n_warmup_steps=PRUNER_WARMUP_STEPS)
    optuna_study = _study(study.spec, optuna.samplers.RandomSampler(seed=0), finished, pruner)
    return bool(pruner.prune(optuna_study, _frozen(study.spec, trial, running=True)))


def arguments(spec: HyperparameterSpec, params: dict[str, Any]) -> list[str]:
    """The trial's parameters as its trainer gets them: --NAME=VALUE, in the spec's order."""
    return [f"--{param.parameter_name}={param.argument(params[param.parameter_name])}" for param in spec.params]
