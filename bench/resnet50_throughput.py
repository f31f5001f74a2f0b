"""ResNet-50 training throughput: the trainer against seed 002's way, beside its input pipeline.

    .venv/bin/python bench/resnet50_throughput.py            # this machine's defaults (a CPU: 64 px, batch 16)
    .venv/bin/python bench/resnet50_throughput.py --image-size 224 --batch-size 256   # a GPU, NVIDIA's setting

Each run is its own process, on the same synthetic images:

1. the seed-style baseline (``bench/seed_baseline.py --model resnet50``): Keras' ResNet50 in
   ``MirroredStrategy().scope()``, float32, a plain ``model.fit`` (seed 002);
2. the trainer (``--model resnet50``) with the precision and XLA it picks (``auto``), on
   synthetic images in memory: what the model consumes when input costs nothing;
3. the trainer on the same images as JPEG TFRecord shards (``trainer.shards``' layout): what it
   trains at when it reads, decodes and batches real files;
4. the trainer's input pipeline alone on those shards (``trainer.data_pipeline``, one worker):
   the images/s it can feed. Below run 2's rate the run is input-bound, and this says so.

Throughput is images/s over the epochs after the first (which traces and compiles). Beside them
stands the ceiling: on a CPU its physical peak (``bench/cpu_peak.py``) and the share of it the
trainer reaches, from ResNet-50's multiply-adds per training image; on a GPU, NVIDIA's published
TensorFlow ResNet-50 figure for that GPU where ``bench/nvidia_resnet50.csv`` has one (with its
source and date), and MirroredStrategy on two GPUs against one where the machine has two.
"""

from __future__ import annotations

import argparse
import csv
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

import cpu_peak  # noqa: E402  # bench/, the directory of this script
import trainer_throughput  # noqa: E402

NVIDIA_FIGURES = Path(__file__).resolve().parent / "nvidia_resnet50.csv"
# ResNet-50 v1.5 at 224 x 224: 4.1 G multiply-adds forward (Keras' ResNet50 has the same
# layers); a training image costs about three forward passes (the backward pass is two), at 2
# FLOP per multiply-add. Other sizes scale with the pixels.
RESNET50_FORWARD_MACS_224 = 4.1e9
SHARD_COUNT = 8


def training_flops_per_image(image_size: int) -> float:
    return 3 * 2 * RESNET50_FORWARD_MACS_224 * (image_size / 224) ** 2


def _environment(gpus: str | None = None) -> dict[str, str]:
    environment = trainer_throughput._environment()
    if gpus is not None:
        environment["CUDA_VISIBLE_DEVICES"] = gpus
    return environment


def run_length(args: argparse.Namespace) -> list[str]:
    """What the trainer's runs share with the baseline's (trainer_throughput's flags)."""
    return trainer_throughput._run_length(args, batch_size_flag="--batch-size-per-replica")


def run_trainer(
    args: argparse.Namespace, workdir: Path, name: str, data: str, gpus: str | None = None
) -> dict[str, Any]:
    extra = ["--num-classes", "5"] if data != "synthetic" else []
    flags = ["--model", "resnet50", "--data", data, *extra, "--validation-split", "0", *run_length(args)]
    return trainer_throughput.trainer_run(workdir / name, flags, _environment(gpus))


def write_shards(args: argparse.Namespace, directory: Path) -> tuple[str, int]:
    """The synthetic images the runs train on, as JPEG files in trainer.shards' TFRecord layout."""
    script = (
        "import sys, tensorflow as tf\n"
        "from trainer.shards import example_bytes, SHARD_PATTERN\n"
        "from trainer.synthetic_images import synthetic_examples\n"
        "out, size, count, shards = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])\n"
        "writers = [tf.io.TFRecordWriter(f'{out}/' + SHARD_PATTERN.format(index=i, count=shards)) for i in range(shards)]\n"
        "for index, (image, label) in enumerate(synthetic_examples(0, count, size, 5, 42)):\n"
        "    writers[index % shards].write(example_bytes(tf.io.encode_jpeg(image).numpy(), int(label)))\n"
        "for writer in writers:\n"
        "    writer.close()\n"
    )
    count = max(MIN_SHARD_IMAGES, args.steps_per_epoch * args.batch_size)
    subprocess.run(
        [sys.executable, "-c", script, str(directory), str(args.image_size), str(count), str(SHARD_COUNT)],
        cwd=REPOSITORY_ROOT,
        env=_environment(),
        check=True,
    )
    return f"{directory}/*.tfrecord", count


# Images written as shards, at least: enough for the pipeline's first pass (reading and
# decoding every file) to be timed apart from the passes it serves from its cache.
MIN_SHARD_IMAGES = 1024

PIPELINE_SCRIPT = """
import json, sys, time, tensorflow as tf
from trainer.config import parse_args
from trainer.data_sources import describe_data, count_records
from trainer.data_pipeline import make_input_fn
data, size, batch, first_pass = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
config = parse_args(['--job-dir', '/unused', '--data', data, '--num-classes', '5', '--model', 'resnet50',
                     '--image-size', size, '--batch-size-per-replica', str(batch), '--validation-split', '0'], environ={})
source = count_records(config, describe_data(config))
iterator = iter(make_input_fn(config, source, 1, training=True)(tf.distribute.InputContext()))
next(iterator)[0].numpy()  # the pipeline's own start

def timed(batches):
    started = time.perf_counter()
    for _ in range(batches):
        next(iterator)[0].numpy()
    return batches * batch / (time.perf_counter() - started)

decoding = timed(first_pass - 1)
print(json.dumps([decoding, timed(first_pass)]))
"""


def pipeline_rate(args: argparse.Namespace, data: str, images: int) -> tuple[float, float]:
    """Images/s the trainer's own input pipeline delivers from the shards on one worker: in its
    first pass (reading and decoding every image) and from its cache after."""
    first_pass = max(2, images // args.batch_size)
    done = subprocess.run(
        [sys.executable, "-c", PIPELINE_SCRIPT, data, str(args.image_size), str(args.batch_size), str(first_pass)],
        cwd=REPOSITORY_ROOT,
        env=_environment(),
        check=True,
        capture_output=True,
        text=True,
    )
    decoding, cached = json.loads(done.stdout.strip().splitlines()[-1])
    return float(decoding), float(cached)


def nvidia_figure(device: str) -> dict[str, str] | None:
    """NVIDIA's published TensorFlow ResNet-50 training figure for ``device`` (a GPU's name)."""
    with NVIDIA_FIGURES.open(newline="") as handle:
        rows = [row for row in csv.DictReader(line for line in handle if not line.startswith("#"))]
    matches = [row for row in rows if row["gpu_name_contains"].lower() in device.lower()]
    return max(matches, key=lambda row: len(row["gpu_name_contains"])) if matches else None


def gpu_count() -> int:
    script = "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))"
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPOSITORY_ROOT,
        env=_environment(),
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout.strip().splitlines()[-1])


def report(
    args: argparse.Namespace, results: dict[str, dict[str, Any]], feed: tuple[float, float], device: str, workdir: Path
) -> None:
    baseline = results["baseline (seed 002)"]["examples_per_second"]
    consumed = results["trainer, synthetic"]["examples_per_second"]
    flops = training_flops_per_image(args.image_size)
    print()
    print(
        f"ResNet-50, {args.image_size}x{args.image_size}, batch {args.batch_size} per replica, {args.epochs} epochs x "
        f"{args.steps_per_epoch} steps, on {device}; {len(cpu_peak.usable_cpus())} of {os.cpu_count()} CPUs usable"
    )
    print(f"{'':<28}{'images/s':>10}{'vs baseline':>13}{'precision':>16}{'xla':>6}")
    for name, result in results.items():
        rate = result["examples_per_second"]
        print(
            f"{name:<28}{rate:>10.1f}{rate / baseline:>12.2f}x{result.get('precision', 'float32'):>16}"
            f"{result.get('xla', False)!s:>6}"
        )
    decoding, cached = feed
    for what, rate in (("reading and decoding (its first pass)", decoding), ("from its cache (later epochs)", cached)):
        bound = "INPUT-BOUND: it feeds less than the model takes" if rate < consumed else "it keeps up"
        print(f"input pipeline alone, {what}: {rate:.1f} images/s against the model's {consumed:.1f}: {bound}")
    for name in ("trainer, synthetic", "trainer, TFRecord shards"):
        line = trainer_throughput.saves_line(name, results[name])
        if line:
            print(line)
    if device == trainer_throughput.CPU:
        peak = cpu_peak.physical_peak(cpu_peak.read_cpuinfo())
        for line in cpu_peak.describe(peak):
            print(line)
        best = max(
            (p.gflops for p in (peak.float32, peak.bfloat16) if p.gflops is not None),
            default=None,
        )
        if best:
            share = consumed * flops / (best * 1e9)
            print(
                f"the trainer's {consumed:.1f} images/s are {consumed * flops / 1e9:.0f} GFLOP/s "
                f"({flops / 1e9:.1f} GFLOP a training image): {share:.0%} of the CPU's physical peak"
            )
    else:
        figure = nvidia_figure(device)
        if figure is None:
            print(f"NVIDIA's published figure: none in {NVIDIA_FIGURES.name} for {device}")
        else:
            published = float(figure["images_per_second"])
            print(
                f"NVIDIA's published figure for {figure['gpu']}: {published:.0f} images/s ({figure['precision']}, batch "
                f"{figure['batch_size']}, {figure['framework']}; {figure['source']}, {figure['date']}): the trainer "
                f"reaches {consumed / published:.0%} (target >= 80 % at NVIDIA's batch and image size)"
            )
        if args.scaling and gpu_count() >= 2:
            one = run_trainer(args, workdir, "one-gpu", "synthetic", gpus="0")["examples_per_second"]
            two = run_trainer(args, workdir, "two-gpus", "synthetic", gpus="0,1")["examples_per_second"]
            print(f"MirroredStrategy: 2 GPUs {two:.1f} images/s, 1 GPU {one:.1f}: {two / one:.2f}x (target >= 1.8x)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-size", type=trainer_throughput._at_least_one, default=64)
    parser.add_argument("--batch-size", type=trainer_throughput._at_least_one, default=16)
    parser.add_argument("--steps-per-epoch", type=trainer_throughput._at_least_one, default=6)
    parser.add_argument("--epochs", type=trainer_throughput._at_least_one, default=3)
    parser.add_argument("--scaling", action="store_true", help="on a machine with 2 GPUs, also 2 against 1")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--baseline-onednn", action="store_true", help="give the baseline oneDNN's kernels (as trainer_throughput.py)"
    )
    args = parser.parse_args(argv)
    if args.epochs < 2:
        parser.error("--epochs must be at least 2: the first epoch traces and is not counted")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trainstack-bench-resnet50-") as scratch:
        workdir = Path(scratch)
        device = trainer_throughput.measure_ceiling(workdir)["device"]
        shards = workdir / "shards"
        shards.mkdir()
        data, images = write_shards(args, shards)
        results = {
            "baseline (seed 002)": trainer_throughput.run_baseline(args, workdir, model="resnet50"),
            "trainer, synthetic": run_trainer(args, workdir, "synthetic", "synthetic"),
            "trainer, TFRecord shards": run_trainer(args, workdir, "shards", data),
        }
        feed = pipeline_rate(args, data, images)
        report(args, results, feed, device, workdir)
    print(f"({time.perf_counter() - started:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
