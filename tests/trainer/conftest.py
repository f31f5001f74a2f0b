"""Fixtures for the trainer tests; the helpers live in trainer_test_helpers.py."""

from __future__ import annotations

import os
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


@pytest.fixture(scope="session")
def without_tensorflow(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment in which `import tensorflow` fails: what runs in it proves it is answered
    before the multi-second import (a late import would show as a traceback)."""
    shadow = tmp_path_factory.mktemp("no-tensorflow")
    (shadow / "tensorflow").mkdir()
    (shadow / "tensorflow" / "__init__.py").write_text(
        'raise ImportError("this must be answered without TensorFlow")\n'
    )
    return {"PYTHONPATH": os.pathsep.join([str(shadow), str(REPOSITORY_ROOT)])}
