"""Where the checkout's own files are: every path below is relative to the project root."""

from __future__ import annotations

from pathlib import Path

# trainstack/base/project.py: two folders below the root.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
