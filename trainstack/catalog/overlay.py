"""The catalog overlay that `trainstack catalog refresh` writes: rows read from Google's APIs
that replace or add to the shipped CSVs' rows.

The overlay lives in the project root (``.trainstack/catalog/``, git-ignored), so the commands
and the Pulumi program that `pulumi up` runs from the same directory read the same catalog.
``TRAINSTACK_CATALOG=shipped`` reads the shipped CSVs alone; ``TRAINSTACK_CATALOG=DIR`` reads
the overlay in DIR. Each overlay file has the shipped file's columns, every row its API method
as ``source`` and the refresh date as ``as_of``. ``refresh.json`` says when and from which
project it was read, and which zones were read completely: in those zones the shipped rows of
gpu_zones.csv and tpu_zones.csv give way to the overlay's (so a zone that stopped offering a
GPU loses it); every other zone keeps its shipped rows.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from trainstack.base.project import PROJECT_ROOT

CATALOG_VARIABLE = "TRAINSTACK_CATALOG"
SHIPPED = "shipped"
DEFAULT_OVERLAY = PROJECT_ROOT / ".trainstack" / "catalog"
MANIFEST = "refresh.json"
# The columns that name a row: an overlay row replaces the shipped row with the same key.
KEYS: dict[str, tuple[str, ...]] = {
    "gpu_zones.csv": ("gpu", "zone"),
    "tpu_zones.csv": ("generation", "zone"),
    "zones.csv": ("zone",),
    "regional_prices.csv": ("kind", "name", "region"),
    "flex_start_prices.csv": ("kind", "name", "region"),
}


class OverlayError(Exception):
    """The overlay cannot be read; ``str()`` is one line."""


@dataclass(frozen=True)
class Overlay:
    directory: Path
    refreshed: str  # ISO date
    project: str
    regions: tuple[str, ...]
    # file -> the zones whose rows the overlay holds completely
    zones_read: dict[str, frozenset[str]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "refreshed": self.refreshed,
            "project": self.project,
            "regions": list(self.regions),
            "zones_read": {name: sorted(zones) for name, zones in sorted(self.zones_read.items())},
            "notes": list(self.notes),
        }

    def merge(self, filename: str, shipped: list[dict[str, str]]) -> list[dict[str, str]]:
        """The shipped rows of ``filename`` with the overlay's laid over them."""
        path = self.directory / filename
        if filename not in KEYS or not path.is_file():
            return shipped
        import csv

        key_columns = KEYS[filename]
        read = self.zones_read.get(filename, frozenset())
        merged = {tuple(row[c] for c in key_columns): row for row in shipped if row.get("zone") not in read}
        with path.open(encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle):
                merged[tuple(row[c] for c in key_columns)] = row
        return list(merged.values())


def read_overlay(directory: Path) -> Overlay:
    try:
        data = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        return Overlay(
            directory=directory,
            refreshed=str(data["refreshed"]),
            project=str(data["project"]),
            regions=tuple(str(r) for r in data["regions"]),
            zones_read={str(k): frozenset(str(z) for z in v) for k, v in dict(data["zones_read"]).items()},
            notes=tuple(str(n) for n in data.get("notes", [])),
        )
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise OverlayError(
            f"the catalog overlay {directory} cannot be read ({type(error).__name__}: {error}); "
            f"run `trainstack catalog refresh` again, or set {CATALOG_VARIABLE}={SHIPPED}"
        ) from error


def current_overlay() -> Overlay | None:
    """The overlay the commands use now: None for the shipped catalog alone."""
    setting = os.environ.get(CATALOG_VARIABLE, "").strip()
    if setting == SHIPPED:
        return None
    directory = Path(setting) if setting else DEFAULT_OVERLAY
    if not (directory / MANIFEST).is_file():
        if setting:
            raise OverlayError(
                f"{CATALOG_VARIABLE}={setting}: no catalog overlay there (no {MANIFEST}); "
                f"use {SHIPPED} or a folder `trainstack catalog refresh --out` wrote"
            )
        return None
    return read_overlay(directory)


def shown_path(directory: Path) -> str:
    try:
        return str(directory.resolve().relative_to(PROJECT_ROOT))
    except ValueError:
        return str(directory)
