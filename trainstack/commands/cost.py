"""``trainstack cost``: what a stack costs (:mod:`trainstack.stackmodel.cost`), as a table and a chart."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from trainstack.catalog import catalog_line
from trainstack.commands.charts import CHART_FORMATS, chart_path, save_chart
from trainstack.commands.parsers import number_argument
from trainstack.commands.stackargs import add_stack_arguments, load_resolved
from trainstack.stackmodel.cost import CostReport, cost_report, report_lines


def write_chart(report: CostReport, path: Path) -> None:
    """A bar chart of the three columns, in the format ``path``'s suffix names; an unknown
    column is drawn as an empty, labelled slot."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    from matplotlib import pyplot

    names = [c.name for c in report.columns]
    values = [c.usd or 0.0 for c in report.columns]
    figure, axes = pyplot.subplots(figsize=(8, 4.5), dpi=100)
    bars = axes.bar(names, values, color=["#3b7dd8", "#d8613b", "#8a8a8a"][: len(names)])
    for bar, column in zip(bars, report.columns, strict=True):
        label = "unknown" if column.usd is None else f"${column.usd:,.0f}"
        axes.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom")
    hours = "unknown length" if report.run_hours is None else f"{report.run_hours:g} h"
    axes.set_title(f"{report.stack}: one job of {hours} ({report.region} list prices)")
    axes.set_ylabel("USD")
    figure.tight_layout()
    figure.savefig(path, format=path.suffix.lower().removeprefix("."))
    pyplot.close(figure)


def cmd_cost(args: argparse.Namespace) -> int:

    report = cost_report(load_resolved(args), run_hours=args.run_hours)
    if args.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        print("\n".join(report_lines(report)))
    print(catalog_line(), file=sys.stderr if args.json else sys.stdout)
    if args.chart is not None:
        if not report.columns:
            print("trainstack: --chart: the stack has no job machines to chart", file=sys.stderr)
            return 1
        if not save_chart(lambda path: write_chart(report, path), args.chart, announce=not args.json):
            return 1
    return 0


def _hours(text: str) -> float:
    hours = number_argument(text, float, f"{text!r} is not a number of hours")
    if not 0 < hours <= 24 * 120:
        raise argparse.ArgumentTypeError(f"{text} hours: between 0 and {24 * 120} (Compute Engine's longest cap)")
    return hours


def register(subparsers: Any) -> None:
    cost = subparsers.add_parser(
        "cost", help="what the stack costs: running, one run, left running, stopped, storage, two ways to pay"
    )
    add_stack_arguments(cost)
    cost.add_argument(
        "--run-hours", type=_hours, help="the job's length for the three columns (default: the run-time cap)"
    )
    cost.add_argument(
        "--chart",
        type=chart_path,
        metavar="FILE",
        help=f"write a bar chart of the three columns, in the format the suffix names ({', '.join(CHART_FORMATS)})",
    )
    cost.add_argument("--json", action="store_true", help="print JSON")
    cost.set_defaults(func=cmd_cost)
