"""``trainstack catalog refresh|show|diff``: the catalog rebuilt from Google's APIs with the
user's credentials into a local overlay (:mod:`trainstack.catalog.refresh`), and what it changes."""

from __future__ import annotations

import argparse
import os
import re
import sys
from datetime import date
from pathlib import Path
from typing import Any

from trainstack.base.names import PROJECT_ID_PATTERN, REGION_PATTERN

# How many changes `refresh` prints; `catalog diff` prints them all.
SHOWN_CHANGES = 30


def _regions(text: str) -> tuple[str, ...] | None:
    """``--regions``: None for every region the catalog knows."""
    if text == "all":
        return None
    regions = tuple(r.strip() for r in text.split(",") if r.strip())
    bad = [r for r in regions if not REGION_PATTERN.fullmatch(r)]
    if bad or not regions:
        raise argparse.ArgumentTypeError(
            f"{text[:60]!r}: regions separated by commas (us-central1,europe-west4) or all"
        )
    return regions


def _day(text: str) -> str:
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text):
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: a date, YYYY-MM-DD")
    return text


def _project(args: argparse.Namespace) -> str | None:
    project = args.project or os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("CLOUDSDK_CORE_PROJECT")
    if not project:
        print(
            "trainstack: catalog refresh: --project: which project's view to read (or set GOOGLE_CLOUD_PROJECT)",
            file=sys.stderr,
        )
        return None
    if not PROJECT_ID_PATTERN.fullmatch(project):
        print(
            f"trainstack: catalog refresh: --project {project[:60]!r} is not a project id "
            "(6-30 lowercase letters, digits and hyphens, starting with a letter)",
            file=sys.stderr,
        )
        return None
    return project


def _print_changes(lines: list[str], limit: int | None) -> None:
    if not lines:
        print("no change against the shipped catalog")
        return
    print(f"{len(lines)} change(s) against the shipped catalog:")
    for line in lines if limit is None else lines[:limit]:
        print(f"  {line}")
    if limit is not None and len(lines) > limit:
        print(f"  ... and {len(lines) - limit} more (`trainstack catalog diff` lists them all)")


def refresh(args: argparse.Namespace, services: Any = None) -> int:
    """`catalog refresh`; ``services`` builds the API clients (the tests hand in fakes)."""
    from trainstack.base.googleapis import GoogleApiError, build_service
    from trainstack.catalog import build_catalog
    from trainstack.catalog.overlay import DEFAULT_OVERLAY, shown_path
    from trainstack.catalog.refresh import changes, refresh_catalog, write_overlay

    if (project := _project(args)) is None:
        return 1
    shipped = build_catalog(None)
    regions = args.regions or tuple(sorted(shipped.regions))
    unknown = sorted(set(regions) - shipped.regions)
    if unknown:
        print(
            f"trainstack: catalog refresh: --regions: unknown region(s) {', '.join(unknown)}; "
            f"regions: {', '.join(sorted(shipped.regions))}",
            file=sys.stderr,
        )
        return 1
    try:
        result = refresh_catalog(services or build_service, project, regions, args.today or date.today().isoformat())
    except GoogleApiError as error:  # no credentials: nothing can be read
        print(f"trainstack: catalog refresh: {error}", file=sys.stderr)
        return 1
    for problem in result.problems:
        print(f"trainstack: catalog refresh: {problem}", file=sys.stderr)
    if not result.read_anything:
        print("trainstack: catalog refresh: nothing read; the catalog is unchanged", file=sys.stderr)
        return 1
    directory: Path = args.out or DEFAULT_OVERLAY
    overlay = write_overlay(result, directory)
    print(
        f"catalog refreshed from project {project} into {shown_path(directory)} ({sum(map(len, result.rows.values()))} rows)"
    )
    _print_changes(changes(shipped, build_catalog(overlay), overlay), SHOWN_CHANGES)
    for note in result.notes:
        print(f"note: {note}")
    return 0


def show(args: argparse.Namespace) -> int:
    from trainstack.catalog import catalog_line, unverified_rows
    from trainstack.catalog.overlay import current_overlay

    if args.unverified:
        rows = unverified_rows()
        for row in rows:
            print(f"{row.filename}: {row.subject}: {row.note} [source: {row.source or 'none'}; as of {row.as_of}]")
        print(f"{len(rows)} row(s) of the shipped catalog rest on no confirmed source")
        return 0
    print(catalog_line())
    overlay = current_overlay()
    if overlay is not None:
        print(f"regions read: {', '.join(overlay.regions)}")
        for name, zones in sorted(overlay.zones_read.items()):
            print(f"{name}: {len(zones)} zone(s) read completely")
        for note in overlay.notes:
            print(f"note: {note}")
    return 0


def diff(args: argparse.Namespace) -> int:
    from trainstack.catalog import build_catalog
    from trainstack.catalog.overlay import current_overlay
    from trainstack.catalog.refresh import changes

    overlay = current_overlay()
    if overlay is None:
        print("catalog: shipped; no overlay to compare (run `trainstack catalog refresh`)")
        return 0
    _print_changes(changes(build_catalog(None), build_catalog(overlay), overlay), None)
    return 0


def register(subparsers: Any) -> None:
    catalog = subparsers.add_parser(
        "catalog",
        help="refresh the catalog from Google's APIs; show or diff the overlay",
        description=(
            "The shipped catalog (trainstack/catalog/*.csv, each row with its source and date) is the offline "
            "default. `refresh` reads GPU and TPU offerings per zone (Compute Engine, Cloud TPU) and GPU, TPU and "
            "machine prices (Cloud Billing Catalog) with your application default credentials into .trainstack/catalog, "
            "which every command and the Pulumi program then read over the shipped rows; TRAINSTACK_CATALOG=shipped "
            "ignores it. Details: docs/catalog.md."
        ),
    )
    verbs = catalog.add_subparsers(dest="catalog_command", required=True)
    refresh_parser = verbs.add_parser(
        "refresh",
        help="read offerings and prices with your credentials into .trainstack/catalog",
        description=(
            "Exit 0 when some part was read (each part that failed is one line on stderr), 1 when nothing was "
            "and the catalog is unchanged. A3 and A4 machine prices, machine shapes and rules are not rebuilt: "
            "they stay the shipped ones."
        ),
    )
    refresh_parser.add_argument("--project", help="the project whose view of Google Cloud to read")
    refresh_parser.add_argument(
        "--regions", type=_regions, default=None, help="regions to read, comma-separated, or all (default: all)"
    )
    refresh_parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    refresh_parser.add_argument("--today", type=_day, help=argparse.SUPPRESS)
    refresh_parser.set_defaults(func=refresh)
    show_parser = verbs.add_parser("show", help="which catalog the commands use")
    show_parser.add_argument(
        "--unverified",
        action="store_true",
        help="list the shipped catalog's rows that rest on no confirmed source, each with its note and source",
    )
    show_parser.set_defaults(func=show)
    verbs.add_parser("diff", help="every change the overlay makes to the shipped catalog").set_defaults(func=diff)
