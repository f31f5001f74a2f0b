"""``trainstack zones``: the other zones and regions that offer every machine of a stack, cheapest
first, with the line of the stack file to change (:mod:`trainstack.stackmodel.zones`).

For when `pulumi up` fails in the stack's zone: ``ZONE_RESOURCE_POOL_EXHAUSTED`` (the zone has
none of the machines free now) or a quota error (the region's quota is spent).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainstack.commands.parsers import add_documented_command
from trainstack.commands.stackargs import add_stack_arguments, load_resolved, stack_option, stack_path

if TYPE_CHECKING:
    from trainstack.stackmodel.zones import ZoneChoice, ZonesReport

MAX_LIMIT = 1000


def _limit(text: str) -> int:
    if re.fullmatch(r"[1-9][0-9]{0,3}", text) is None or int(text) > MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"{text[:20]!r}: a whole number from 1 to {MAX_LIMIT}")
    return int(text)


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}"


def shown_choices(report: ZonesReport, limit: int | None) -> list[ZoneChoice]:
    """The stack's own zone and the ``limit`` cheapest others, in the report's order."""
    others = 0
    shown = []
    for choice in report.choices:
        if not choice.current:
            others += 1
            if limit is not None and others > limit:
                continue
        shown.append(choice)
    return shown


def format_report(report: ZonesReport, choices: list[ZoneChoice], stack_file: str, option: str) -> list[str]:
    lines = [
        f"Zones that offer every machine of stack {report.stack} ({'; '.join(report.machines)}), cheapest first",
        "(USD per running hour at each region's list prices, Spot where the stack's nodes are; "
        "unknown where the catalog has no price there):",
    ]
    width = max((len(c.zone) for c in choices), default=0)
    region_width = max((len(c.region) for c in choices), default=0)
    for choice in choices:
        mark, what = ("*", "(the stack's zone)") if choice.current else (" ", choice.change_line)
        lines.append(
            f"  {mark} {choice.zone:<{width}}  {choice.region:<{region_width}}  {_usd(choice.usd_per_hour):>10}  {what}"
        )
    if not any(not c.current for c in report.choices):
        lines.append("  no other zone offers every machine of the stack")
    else:
        lines.append(
            f"To move: set the line(s) in {stack_file}, then `trainstack validate {option}` and `pulumi up` again."
        )
    lines += [f"  note: {note}" for note in report.notes]
    return lines


def _shown_path(path: Path) -> str:
    """The stack file as the user would type it: relative to the working directory when under it."""
    absolute = path.absolute()
    return str(absolute.relative_to(Path.cwd())) if absolute.is_relative_to(Path.cwd()) else str(path)


def cmd_zones(args: argparse.Namespace) -> int:
    from trainstack.stackmodel.zones import zone_choices

    report = zone_choices(load_resolved(args))
    choices = shown_choices(report, args.limit)
    stack_file = _shown_path(stack_path(args))
    if args.json:
        print(json.dumps({**report.to_json(choices), "stack_file": stack_file}, indent=2, sort_keys=True))
    else:
        print("\n".join(format_report(report, choices, stack_file, stack_option(args))))
    return 0


def register(subparsers: Any) -> None:
    zones = add_documented_command(
        subparsers,
        "zones",
        __doc__,
        "other zones and regions that offer the stack's machines, cheapest first, with the line to change",
    )
    add_stack_arguments(zones)
    zones.add_argument(
        "--limit", type=_limit, help="the cheapest this many other zones (default: every one); the stack's own is kept"
    )
    zones.add_argument("--json", action="store_true", help="print JSON")
    zones.set_defaults(func=cmd_zones)
