"""Throughput of our trainer against the seed-style baseline, on this machine.

    .venv/bin/python bench/trainer_throughput.py            # defaults: 180 px, batch 32, 4 x 50 steps

Both runs train the seed's flowers CNN on the same synthetic images, with the
same image size, batch size, epochs and steps, one after the other in separate
processes (so neither inherits the other's TensorFlow state), in alternating
rounds; the best round of each is compared. Throughput is
examples per second over the epochs after the first, which also pays for graph
tracing and filling the caches; both models are then evaluated on the same
held-out synthetic images. The baseline is ``bench/seed_baseline.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY_ROOT))

from trainstack_contract import LAYOUT  # noqa: E402


def _environment() -> dict[str, str]:
    environment = dict(os.environ)
    environment.pop("TF_CONFIG", None)  # a single machine, whatever the shell says
    environment.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    environment["PYTHONPATH"] = str(REPOSITORY_ROOT)
    return environment


def run_baseline(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    output = workdir / "baseline.json"
    subprocess.run(
        [
            sys.executable,
            str(REPOSITORY_ROOT / "bench" / "seed_baseline.py"),
            "--image-size",
            str(args.image_size),
            "--batch-size",
            str(args.batch_size),
            "--steps-per-epoch",
            str(args.steps_per_epoch),
            "--epochs",
            str(args.epochs),
            "--seed",
            str(args.seed),
            "--output",
            str(output),
        ],
        cwd=REPOSITORY_ROOT,
        env=_environment(),
        check=True,
    )
    result: dict[str, Any] = json.loads(output.read_text())
    return result


def run_trainer(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    job_dir = workdir / "job"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer.task",
            "--job-dir",
            str(job_dir),
            "--data",
            "synthetic",
            "--model",
            "cnn",
            "--strategy",
            "auto",
            "--image-size",
            str(args.image_size),
            "--batch-size-per-replica",
            str(args.batch_size),
            "--steps-per-epoch",
            str(args.steps_per_epoch),
            "--epochs",
            str(args.epochs),
            "--seed",
            str(args.seed),
            *args.trainer_flags,
        ],
        cwd=REPOSITORY_ROOT,
        env=_environment(),
        check=True,
    )
    result: dict[str, Any] = json.loads((job_dir / LAYOUT.metrics).read_text())
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Seed-style baseline vs trainer.task throughput.")
    parser.add_argument("--image-size", type=int, default=180)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps-per-epoch", type=int, default=50)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--rounds", type=int, default=2, help="alternating baseline/trainer rounds; the best of each is compared"
    )
    parser.add_argument(
        "--trainer-flags",
        nargs=argparse.REMAINDER,
        default=[],
        help="extra flags for trainer.task, e.g. --trainer-flags --xla on",
    )
    args = parser.parse_args(argv)

    started = time.monotonic()
    baselines: list[dict[str, Any]] = []
    trainers: list[dict[str, Any]] = []
    # Alternating rounds, best of each: other work on a shared machine slows
    # single runs by up to half, and it slows a run, never speeds it up.
    for round_number in range(1, args.rounds + 1):
        with tempfile.TemporaryDirectory(prefix="trainer-bench-") as scratch:
            workdir = Path(scratch)
            print(f"== round {round_number}: baseline (seed 004 approach, bench/seed_baseline.py)", flush=True)
            baselines.append(run_baseline(args, workdir))
            print(f"== round {round_number}: our trainer (python -m trainer.task)", flush=True)
            trainers.append(run_trainer(args, workdir))
    elapsed = time.monotonic() - started
    baseline = max(baselines, key=lambda result: result["examples_per_second"])
    ours = max(trainers, key=lambda result: result["examples_per_second"])

    ratio = ours["examples_per_second"] / baseline["examples_per_second"]
    print()
    print(
        f"seed CNN, {args.image_size}x{args.image_size}, batch {args.batch_size}, "
        f"{args.epochs} epochs x {args.steps_per_epoch} steps, synthetic images; "
        f"{os.cpu_count()} CPUs"
    )
    print(f"{'':<22}{'examples/s':>12}{'all epochs':>12}{'train acc':>11}{'held-out acc':>14}")
    for name, result in (("seed-style baseline", baseline), ("trainer.task", ours)):
        print(
            f"{name:<22}{result['examples_per_second']:>12.1f}"
            f"{result['examples_per_second_all_epochs']:>12.1f}"
            f"{result['final_accuracy']:>11.3f}{result['eval_accuracy']:>14.3f}"
        )
    for name, results in (("baseline", baselines), ("trainer", trainers)):
        rounds = ", ".join(f"{result['examples_per_second']:.1f}" for result in results)
        print(f"examples/s per round, {name}: {rounds}")
    print(f"throughput ratio (trainer / baseline, best rounds): {ratio:.2f}x")
    print(
        f"trainer settings: strategy={ours['strategy']} precision={ours['precision']} "
        f"xla={ours['xla']} steps_per_execution={ours['steps_per_execution']}"
    )
    print(f"benchmark wall time: {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
