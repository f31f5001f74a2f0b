"""`trainstack tune status`: a study's trials (parameters, metric, state) and its best, as a
table, as JSON, and as a chart of the metric per trial against each parameter."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO, Any

from trainstack.jobstate.report import printable
from trainstack.tuning import optimizer
from trainstack.tuning.study import Study, Trial
from trainstack_contract.lifecycle import TrialState


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return printable(value)[:40]


def summary_line(study: Study) -> str:
    spec = study.spec
    counts = ", ".join(f"{count} {state}" for state, count in study.counts().items() if count)
    line = (
        f"study {study.name}: {study.state}; {len(study.trials)} of {spec.max_trials} trials"
        f"{' (' + counts + ')' if counts else ''}; goal {spec.goal} {spec.hyperparameter_metric_tag}"
    )
    return line + (f"; {printable(study.problem)}" if study.problem else "")


def best_line(study: Study) -> str:
    best = study.best()
    if best is None:
        return "best: none yet (no trial has succeeded)"
    return (
        f"best: trial {best.number} (job {best.job_id}): {study.spec.hyperparameter_metric_tag}={best.metric:.6g} "
        f"with {' '.join(optimizer.arguments(study.spec, best.params))}"
    )


def print_study(study: Study, out: IO[str] | None = None) -> None:
    out = out or sys.stdout
    names = study.spec.parameter_names
    header = ("TRIAL", "JOB", "STATE", *names, study.spec.hyperparameter_metric_tag, "ENDED")
    rows = [header]
    for trial in study.trials:
        rows.append(
            (
                str(trial.number),
                "-" if trial.job_id is None else str(trial.job_id),
                trial.state,
                *(_value(trial.params[name]) for name in names),
                "-" if trial.metric is None else f"{trial.metric:.6g}",
                "-" if trial.ended is None else trial.ended[:19].replace("T", " "),
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    print(summary_line(study), file=out)
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(), file=out)
    for trial in study.trials:
        if trial.problem:
            print(f"trial {trial.number}: {printable(trial.problem)}", file=out)
    print(best_line(study), file=out)


def study_json(study: Study) -> dict[str, Any]:
    document = json.loads(study.to_json())
    best = study.best()
    document["best_trial"] = None if best is None else best.number
    return dict(document)


def _axis_values(study: Study, name: str, trials: list[Trial]) -> tuple[list[Any], list[str] | None]:
    """The parameter's values of ``trials`` for the x axis, and category labels for CATEGORICAL."""
    param = next(param for param in study.spec.params if param.parameter_name == name)
    if param.type == "CATEGORICAL":
        assert param.categorical_values is not None
        labels = list(param.categorical_values)
        return [labels.index(trial.params[name]) for trial in trials], labels
    return [float(trial.params[name]) for trial in trials], None


def write_chart(study: Study, path: Path) -> None:
    """One panel per parameter: the metric of each trial that has one, against the parameter's
    value (log axis for log-scaled ones); succeeded trials filled, early-stopped ones hollow,
    the best ringed. The format follows ``path``'s suffix."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    from matplotlib import pyplot

    spec = study.spec
    names = spec.parameter_names
    columns = min(3, len(names))
    rows = -(-len(names) // columns)
    figure, axes_grid = pyplot.subplots(
        rows, columns, figsize=(max(7.0, 4.5 * columns), 3.8 * rows), dpi=100, squeeze=False
    )
    measured = [trial for trial in study.trials if trial.metric is not None]
    best = study.best()
    for index, name in enumerate(names):
        axes = axes_grid[index // columns][index % columns]
        param = spec.params[index]
        for state, style in (
            (TrialState.SUCCEEDED, {"color": "#3b7dd8"}),
            (TrialState.STOPPED, {"facecolors": "none", "edgecolors": "#d8613b"}),
        ):
            trials = [trial for trial in measured if trial.state == state]
            if trials:
                xs, labels = _axis_values(study, name, trials)
                axes.scatter(xs, [trial.metric for trial in trials], label=state.lower(), **style)
        if best is not None:
            xs, _ = _axis_values(study, name, [best])
            axes.scatter(xs, [best.metric], s=160, facecolors="none", edgecolors="black", label="best")
        _, labels = _axis_values(study, name, [])
        if labels is not None:
            axes.set_xticks(range(len(labels)), [label[:12] for label in labels], rotation=30)
        elif param.scale_type == "UNIT_LOG_SCALE":
            from matplotlib.ticker import NullFormatter

            axes.set_xscale("log")
            # Labels on the decades only: minor ones overlap on a narrow panel.
            axes.xaxis.set_minor_formatter(NullFormatter())
        axes.set_xlabel(name)
        axes.set_ylabel(spec.hyperparameter_metric_tag[:30])
        axes.grid(alpha=0.3)
    for index in range(len(names), rows * columns):
        axes_grid[index // columns][index % columns].axis("off")
    axes_grid[0][0].legend(fontsize="small")
    states = ", ".join(f"{count} {state.lower()}" for state, count in study.counts().items() if count)
    figure.suptitle(
        f"study {study.name}: {spec.goal.lower()} {spec.hyperparameter_metric_tag} ({states or 'no trials'})"
    )
    figure.tight_layout()
    figure.savefig(path, format=path.suffix.lower().removeprefix("."))
    pyplot.close(figure)
