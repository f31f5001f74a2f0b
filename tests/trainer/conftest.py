"""Fixtures for the trainer tests; the helpers live in trainer_test_helpers.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The tests start `python -m trainer.task` and import `trainer`: the repository
# root must be importable however pytest is invoked.
REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
if str(REPOSITORY_ROOT) not in sys.path:
    sys.path.insert(0, str(REPOSITORY_ROOT))


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    return tmp_path / "job"
