"""Helpers for running the real trainer as subprocesses, as the boot scripts will."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]

# Small enough to train in seconds on two cores, big enough for the loss to fall.
FAST_ARGS = [
    "--data",
    "synthetic",
    "--model",
    "cnn",
    "--image-size",
    "32",
    "--batch-size-per-replica",
    "16",
    "--learning-rate",
    "0.002",
    # Two held-out batches: enough to check evaluation runs; test_trainer_data checks its figures.
    "--eval-steps",
    "2",
]


def trainer_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    environment = dict(os.environ)
    environment.update(
        {
            "CUDA_VISIBLE_DEVICES": "",
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "PYTHONPATH": str(REPOSITORY_ROOT),
            "PYTHONUNBUFFERED": "1",
        }
    )
    for name in ("TF_CONFIG", "AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR"):
        environment.pop(name, None)
    environment.update(extra or {})
    return environment


def run_python(
    args: Sequence[str], env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`python ARGS` from the repository root in the trainer's environment; output kept for the
    assertion messages."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPOSITORY_ROOT,
        env=trainer_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_trainer(
    args: Sequence[str], env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """One `python -m trainer.task` process; output kept for the assertion messages."""
    return run_python(["-m", "trainer.task", *args], env, timeout)


def read_metrics(job_dir: Path) -> dict[str, Any]:
    return json.loads((job_dir / "metrics.json").read_text())


def png_bytes(image: np.ndarray) -> bytes:
    """A uint8 HxWx3 array as a PNG file's contents."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()
