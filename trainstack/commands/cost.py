"""``trainstack cost``: what a stack costs (:mod:`trainstack.stackmodel.cost`), as a table and a chart."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainstack.base.errors import shorten
from trainstack.catalog import catalog_line
from trainstack.commands.parsers import number_argument
from trainstack.commands.stackargs import add_stack_arguments, load_resolved
from trainstack.stackmodel.cost import CostReport, cost_report


def _usd(value: float | None) -> str:
    if value is None:
        return "unknown"
    # Cents hide the small hourly rates (a NAT gateway for 3 VMs is $0.0042/h).
    return f"${value:,.4f}" if 0 < value < 0.1 else f"${value:,.2f}"


def format_report(report: CostReport) -> list[str]:
    lines = [f"Cost of stack {report.stack} at {report.region} list prices (USD; unknown where the catalog has none)"]
    lines.append("  while running, per hour:")
    for node in report.nodes:
        lines.append(f"    {node.name:<30} {node.description:<46} {_usd(node.usd_per_hour)}")
    lines.append(f"    {'total':<30} {'':<46} {_usd(report.hourly_usd)}")
    one_run = _usd(report.one_run_max_usd) if report.columns else "no job machines"
    lines.append(f"  one run at most (up to the run-time cap):     {one_run}")
    lines.append(f"  a month left running 24/7:                    {_usd(report.monthly_running_usd)}")
    lines.append(f"  a month stopped (persistent disks):           {_usd(report.monthly_stopped_usd)}")
    lines.append(f"  storage, per GB-month kept in the bucket:     {_usd(report.storage_usd_gb_month)}")
    lines.append(f"  first boot, Cloud NAT data processing:        {_usd(report.first_boot_network_usd)}")
    lines.append(f"  Cloud NAT gateway, per hour while running:    {_usd(report.nat_gateway_usd_hr)}")
    if report.columns:
        lines.append("  the job, two ways:")
        for column in report.columns:
            lines.append(f"    {column.name:<32} {_usd(column.usd):>12}  {column.how}")
    lines += [f"  warning: {w}" for w in report.warnings]
    lines += [f"  note: {n}" for n in report.notes]
    return lines


# The chart's format follows the file's suffix; matplotlib writes each of these itself.
CHART_FORMATS = ("png", "svg", "pdf")


def chart_path(text: str) -> Path:
    """argparse type for ``--chart``: a file whose suffix names one of CHART_FORMATS."""
    path = Path(text)
    if path.suffix.lower().removeprefix(".") not in CHART_FORMATS:
        raise argparse.ArgumentTypeError(
            f"{shorten(text)}: the file name's suffix says the format: {', '.join('.' + f for f in CHART_FORMATS)}"
        )
    return path


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
        print("\n".join(format_report(report)))
    print(catalog_line(), file=sys.stderr if args.json else sys.stdout)
    if args.chart is not None:
        if not report.columns:
            print("trainstack: --chart: the stack has no job machines to chart", file=sys.stderr)
            return 1
        if not save_chart(lambda path: write_chart(report, path), args.chart, announce=not args.json):
            return 1
    return 0


def save_chart(draw: Callable[[Path], None], path: Path, announce: bool) -> bool:
    """A chart drawn into ``path`` by ``draw`` (`cost --chart`, `tune status --chart`); False,
    with the reason on stderr, when the file cannot be written."""
    try:
        draw(path)
    except OSError as error:
        print(f"trainstack: --chart {path}: {error.strerror or error}", file=sys.stderr)
        return False
    if announce:
        print(f"chart written to {path}")
    return True


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
