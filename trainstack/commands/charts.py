"""The --chart option of `cost` and `tune status`: its file and format, and the chart saved."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from trainstack.base.errors import shorten

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
