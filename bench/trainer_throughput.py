"""Throughput of our trainer against the seed-style baseline and against this CPU's ceiling.

    .venv/bin/python bench/trainer_throughput.py            # defaults: 180 px, batch 32, 4 x 50 steps

Three runs train the seed's flowers CNN on the same synthetic images, with the
same image size, batch size, epochs and steps: the baseline
(``bench/seed_baseline.py``), the trainer with ``--precision auto`` and the
trainer with ``--precision float32``. Each runs in its own process (so none
inherits another's TensorFlow state), in alternating rounds; the best round of
each is compared. Throughput is examples per second over the epochs after the
first, which also pays for graph tracing and filling the caches; all models are
then evaluated on the same held-out synthetic images.

The ceiling is measured in the same run: a 2048 x 2048 matmul in float32 and in
bfloat16 gives this CPU's best GFLOP/s (on a machine with a GPU, where the runs train,
an 8192 x 8192 one gives the GPU's: a smaller one leaves it waiting on launches), and the network's multiply-adds per
training example (``seed_cnn_training_flops``) turn that into examples/s. A
training step also pools, adds biases and moves activations through memory, so
no run reaches 100 % of it; the share says how much headroom is left. Beside the
ceiling stands the CPU's physical peak (``bench/cpu_peak.py``: cores x clock x
FLOP per cycle of its widest float32 and bfloat16 instructions), and every figure
is printed with the CPU it was measured on and whether each process ran oneDNN's
kernels.

TensorFlow runs oneDNN's kernels by default only on CPUs with AVX512_VNNI,
AVX512_BF16 or AMX; the trainer asks for them everywhere (``trainer/kernels.py``),
the baseline runs with whatever TensorFlow chooses. ``--baseline-onednn`` gives the
baseline oneDNN too, which is what a CPU with those instructions does by default:
the ratios then compare the trainer with the seed on the same kernels.
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

import cpu_peak  # noqa: E402  # bench/, the directory of this script

from trainer.kernels import ONEDNN_SWITCH, prefer_onednn  # noqa: E402
from trainstack_contract import LAYOUT  # noqa: E402

CPU = "CPU"


def _environment() -> dict[str, str]:
    environment = dict(os.environ)
    environment.pop("TF_CONFIG", None)  # a single machine, whatever the shell says
    environment.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # the repository first, then whatever the caller's interpreter was given (packages installed with --target)
    inherited = environment.get("PYTHONPATH", "")
    environment["PYTHONPATH"] = os.pathsep.join([str(REPOSITORY_ROOT), *([inherited] if inherited else [])])
    return environment


def baseline_environment(onednn: bool) -> dict[str, str]:
    """The baseline's environment: the user's, or with oneDNN's kernels asked for."""
    environment = _environment()
    if onednn:
        environment[ONEDNN_SWITCH] = "1"
    return environment


def _run_length(args: argparse.Namespace, batch_size_flag: str) -> list[str]:
    """The flags both programs take alike: what each step holds, how many steps, which seed
    (the baseline names its batch size as the seed trainer did)."""
    return [
        "--image-size",
        str(args.image_size),
        batch_size_flag,
        str(args.batch_size),
        "--steps-per-epoch",
        str(args.steps_per_epoch),
        "--epochs",
        str(args.epochs),
        "--seed",
        str(args.seed),
    ]


def run_baseline(args: argparse.Namespace, workdir: Path, model: str = "cnn") -> dict[str, Any]:
    """bench/seed_baseline.py in its own process: seed 004's CNN, or seed 002's ResNet50."""
    output = workdir / "baseline.json"
    subprocess.run(
        [
            sys.executable,
            str(REPOSITORY_ROOT / "bench" / "seed_baseline.py"),
            "--model",
            model,
            *_run_length(args, batch_size_flag="--batch-size"),
            "--output",
            str(output),
        ],
        cwd=REPOSITORY_ROOT,
        env=baseline_environment(args.baseline_onednn),
        check=True,
    )
    result: dict[str, Any] = json.loads(output.read_text())
    return result


def trainer_run(job_dir: Path, flags: list[str], environment: dict[str, str]) -> dict[str, Any]:
    """``python -m trainer.task`` in its own process into ``job_dir``; its metrics.json."""
    subprocess.run(
        [sys.executable, "-m", "trainer.task", "--job-dir", str(job_dir), *flags],
        cwd=REPOSITORY_ROOT,
        env=environment,
        check=True,
    )
    result: dict[str, Any] = json.loads((job_dir / LAYOUT.metrics).read_text())
    return result


def run_trainer(args: argparse.Namespace, workdir: Path, flags: list[str]) -> dict[str, Any]:
    return trainer_run(
        workdir / "job",
        [
            "--data",
            "synthetic",
            "--model",
            "cnn",
            "--strategy",
            "auto",
            *_run_length(args, batch_size_flag="--batch-size-per-replica"),
            *flags,
            *args.trainer_flags,
        ],
        _environment(),
    )


def seed_cnn_training_flops(image_size: int, num_classes: int = 5) -> int:
    """Floating-point operations of one training example of the seed CNN: its convolutions and
    dense layers, counted as 2 per multiply-add. Backpropagation costs two more passes of the
    same size (gradients of the weights and of the inputs), except that nothing needs the
    gradient of the input images."""
    forward: list[int] = []
    size, channels = image_size, 3
    for filters in (16, 32, 64):  # 3x3 "same" convolutions, each followed by a 2x2 max-pool
        forward.append(2 * size * size * channels * filters * 3 * 3)
        size, channels = size // 2, filters
    flattened = size * size * channels
    forward.append(2 * flattened * 128)
    forward.append(2 * 128 * num_classes)
    weight_gradients = sum(forward)
    input_gradients = sum(forward) - forward[0]
    return sum(forward) + weight_gradients + input_gradients


def matmul_gflops(dtype_name: str, size: int = 2048, runs: int = 5) -> float:
    """Best GFLOP/s of a size x size matmul in ``dtype_name`` where TensorFlow places it, after one warm-up."""
    import tensorflow as tf

    dtype = tf.as_dtype(dtype_name)
    generator = tf.random.Generator.from_seed(0)
    left = tf.cast(generator.normal((size, size)), dtype)
    right = tf.cast(generator.normal((size, size)), dtype)

    # The largest element, not the product, comes back: copying an 8192 x 8192 product off a GPU
    # took longer than computing it (an H200 read 13 TFLOP/s in float32 so, 354 with one element).
    @tf.function(jit_compile=False)
    def multiply() -> tf.Tensor:
        return tf.reduce_max(tf.linalg.matmul(left, right))

    multiply().numpy()
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        multiply().numpy()
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best / 1e9


def matmul_device() -> str:
    """Where TensorFlow places the probe's matmul, and the runs' training: its first GPU, by name,
    where it sees one, else the CPU."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return CPU
    return str(tf.config.experimental.get_device_details(gpus[0]).get("device_name", gpus[0].name))


# A 2048 x 2048 matmul fills a CPU's cores; a GPU finishes one before its launch is paid back
# (an H200 read 3.6 TFLOP/s at 2048, product copied back; 354 at 8192, one element back).
CPU_PROBE_SIZE = 2048
GPU_PROBE_SIZE = 8192


def ceiling_probe() -> dict[str, Any]:
    """The matmul ceiling in both precisions on the device the runs train on, with its name and size."""
    device = matmul_device()
    size = CPU_PROBE_SIZE if device == CPU else GPU_PROBE_SIZE
    return {
        "float32": matmul_gflops("float32", size),
        "bfloat16": matmul_gflops("bfloat16", size),
        "device": device,
        "size": size,
    }


def measure_ceiling(workdir: Path) -> dict[str, Any]:
    """The matmul probe in its own process, with oneDNN's kernels asked for as the trainer asks
    (the faster kernels give the ceiling), while this process's environment, which the baseline
    inherits, stays as the user left it."""
    output = workdir / "ceiling.json"
    environment = _environment()
    prefer_onednn(environment)
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys; sys.path.insert(0, 'bench'); import trainer_throughput as bench; "
            "from trainer.kernels import onednn_enabled; "
            f"json.dump({{**bench.ceiling_probe(), 'onednn': onednn_enabled()}}, open({str(output)!r}, 'w'))",
        ],
        cwd=REPOSITORY_ROOT,
        env=environment,
        check=True,
    )
    ceiling: dict[str, Any] = json.loads(output.read_text())
    return ceiling


# Each run by name, with the trainer's flags; None is the baseline.
RUNS: dict[str, list[str] | None] = {
    "baseline": None,
    "trainer, auto precision": ["--precision", "auto"],
    "trainer, float32": ["--precision", "float32"],
}


def _at_least_one(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a whole number of at least 1, not {text!r}")
    return int(text)


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Seed-style baseline vs trainer.task throughput, against the CPU's ceiling and physical peak."
    )
    parser.add_argument("--image-size", type=_at_least_one, default=180)
    parser.add_argument("--batch-size", type=_at_least_one, default=32)
    parser.add_argument("--steps-per-epoch", type=_at_least_one, default=50)
    parser.add_argument("--epochs", type=_at_least_one, default=4)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--rounds",
        type=_at_least_one,
        default=2,
        help="alternating rounds of the three runs; the best of each is compared",
    )
    parser.add_argument(
        "--baseline-onednn",
        action="store_true",
        help=f"run the baseline with {ONEDNN_SWITCH}=1, as TensorFlow does by default on CPUs with "
        "AVX512_VNNI, AVX512_BF16 or AMX: the trainer and the baseline then run the same kernels",
    )
    parser.add_argument(
        "--trainer-flags",
        nargs=argparse.REMAINDER,
        default=[],
        help="extra flags for both trainer runs, e.g. --trainer-flags --steps-per-execution 8",
    )
    return parser.parse_args(argv)


def _share(measured: float, peak: float | None) -> str:
    return f" = {measured / peak:.0%} of the physical peak" if peak else ""


def best_ceiling(ceilings: list[dict[str, Any]]) -> dict[str, Any]:
    """The best GFLOP/s of each precision over the rounds, and whether every probe ran oneDNN."""
    return {
        "float32": max(ceiling["float32"] for ceiling in ceilings),
        "bfloat16": max(ceiling["bfloat16"] for ceiling in ceilings),
        "onednn": all(ceiling.get("onednn") for ceiling in ceilings),
        "device": ceilings[0].get("device", CPU),
        "size": ceilings[0].get("size", CPU_PROBE_SIZE),
    }


def ceiling_lines(ceiling: dict[str, Any], peak: cpu_peak.PhysicalPeak, flops: int) -> list[str]:
    """The measured matmul beside the physical peak, for both precisions, and what it allows.

    On a machine with a GPU the probe and the runs train there, so the CPU's peak bounds neither:
    the ceiling then names the GPU and stands alone."""
    device = ceiling.get("device", CPU)
    size = ceiling.get("size", CPU_PROBE_SIZE)
    if device != CPU:
        return [
            f"matmul ceiling on the GPU ({device}, {size} x {size}): float32 {ceiling['float32']:.0f} GFLOP/s, "
            f"bfloat16 {ceiling['bfloat16']:.0f} GFLOP/s; the runs train on that GPU, so the CPU's peak above bounds none of them",
            f"{flops / 1e9:.3f} GFLOP per training example, so at most "
            f"{max(ceiling['float32'], ceiling['bfloat16']) * 1e9 / flops:.0f} examples/s at the matmul ceiling",
        ]
    lines = [
        f"matmul ceiling ({size} x {size}, oneDNN {'on' if ceiling.get('onednn') else 'off'}): "
        f"float32 {ceiling['float32']:.0f} GFLOP/s{_share(ceiling['float32'], peak.float32.gflops)}, "
        f"bfloat16 {ceiling['bfloat16']:.0f} GFLOP/s{_share(ceiling['bfloat16'], peak.bfloat16.gflops)}"
    ]
    best = max(ceiling["float32"], ceiling["bfloat16"])
    lines.append(
        f"{flops / 1e9:.3f} GFLOP per training example, so at most {best * 1e9 / flops:.0f} examples/s "
        "at the matmul ceiling"
    )
    for name, physical in (("float32", peak.float32), ("bfloat16", peak.bfloat16)):
        if physical.gflops is not None:
            lines.append(f"at the {name} physical peak: at most {physical.gflops * 1e9 / flops:.0f} examples/s")
    return lines


def kernels_line(best: dict[str, dict[str, Any]], baseline_onednn: bool, info: cpu_peak.CpuInfo) -> str:
    """Which kernels the baseline ran and why, and whether the ratios compare like with like."""
    baseline = bool(best["baseline"].get("onednn"))
    trainers = {bool(result.get("onednn")) for name, result in best.items() if name != "baseline"}
    if baseline_onednn:
        why = f"{ONEDNN_SWITCH}=1 from --baseline-onednn"
    elif ONEDNN_SWITCH in os.environ:
        why = f"{ONEDNN_SWITCH}={os.environ[ONEDNN_SWITCH]} in the environment"
    else:
        why = f"TensorFlow's default on this CPU ({'on' if cpu_peak.onednn_by_default(info) else 'off'})"
    line = f"kernels: baseline oneDNN {'on' if baseline else 'off'} ({why})"
    if trainers != {baseline}:
        line += (
            "; the trainer ran other kernels than the baseline, so the ratios include oneDNN's own gain "
            "(--baseline-onednn compares the same kernels)"
        )
    return line


# What saves may cost a run at the trainer's defaults (backups and checkpoints by time,
# written in the background where the strategy allows): at most this share of its training.
TARGET_SAVE_SHARE = 0.05


def saves_line(name: str, result: dict[str, Any]) -> str | None:
    """What a trainer run's backups and epoch checkpoints held it up, against its training time."""
    saves = result.get("epoch_save_seconds")
    train_seconds = result.get("train_seconds")
    if saves is None or not train_seconds:
        return None
    share = sum(saves) / train_seconds
    return (
        f"{name}: its backups and epoch checkpoints held training up {sum(saves):.2f} s of {train_seconds:.1f} s, "
        f"{share:.1%} (target <= {TARGET_SAVE_SHARE:.0%} at the defaults: "
        f"{'met' if share <= TARGET_SAVE_SHARE else 'NOT met'}; included above)"
    )


def report(
    args: argparse.Namespace,
    results: dict[str, list[dict[str, Any]]],
    ceiling: dict[str, Any],
    peak: cpu_peak.PhysicalPeak,
) -> None:
    best = {name: max(runs, key=lambda result: result["examples_per_second"]) for name, runs in results.items()}
    flops = seed_cnn_training_flops(args.image_size)
    ceiling_examples = max(ceiling["float32"], ceiling["bfloat16"]) * 1e9 / flops
    baseline_rate = best["baseline"]["examples_per_second"]
    print()
    print(
        f"seed CNN, {args.image_size}x{args.image_size}, batch {args.batch_size}, "
        f"{args.epochs} epochs x {args.steps_per_epoch} steps, synthetic images; "
        f"{len(cpu_peak.usable_cpus())} of the machine's {os.cpu_count()} CPUs usable; load average {os.getloadavg()[0]:.2f} at the end"
    )
    for line in cpu_peak.describe(peak):
        print(line)
    for line in ceiling_lines(ceiling, peak, flops):
        print(line)
    print(kernels_line(best, args.baseline_onednn, peak.cpu))
    print(
        f"{'':<26}{'examples/s':>11}{'vs baseline':>13}{'of ceiling':>12}{'precision':>16}{'oneDNN':>8}"
        f"{'train acc':>11}{'held-out acc':>14}"
    )
    for name in RUNS:
        result = best[name]
        rate = result["examples_per_second"]
        print(
            f"{name:<26}{rate:>11.1f}{rate / baseline_rate:>12.2f}x{rate / ceiling_examples:>11.0%}"
            f"{result.get('precision', 'float32'):>16}{'on' if result.get('onednn') else 'off':>8}"
            f"{result['final_accuracy']:>11.3f}{result['eval_accuracy']:>14.3f}"
        )
    for name in RUNS:
        line = saves_line(name, best[name])
        if line:
            print(line)
    for name, runs in results.items():
        rounds = ", ".join(f"{result['examples_per_second']:.1f}" for result in runs)
        print(f"examples/s per round, {name}: {rounds}")
    ours = best["trainer, auto precision"]
    print(
        f"trainer settings: strategy={ours['strategy']} xla={ours['xla']} "
        f"steps_per_execution={ours['steps_per_execution']}"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    peak = cpu_peak.physical_peak(cpu_peak.read_cpuinfo())
    for line in cpu_peak.describe(peak):
        print(line, flush=True)

    started = time.monotonic()
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in RUNS}
    ceilings: list[dict[str, Any]] = []
    # Alternating rounds, best of each: other work on a shared machine slows
    # single runs by up to half, and it slows a run, never speeds it up. The
    # ceiling too: a few tenths of a second of matmul, measured in every round.
    for round_number in range(1, args.rounds + 1):
        with tempfile.TemporaryDirectory(prefix="trainer-bench-") as scratch:
            print(f"== round {round_number}: the ceiling, a matmul in float32 and in bfloat16", flush=True)
            ceilings.append(measure_ceiling(Path(scratch)))
        for name, flags in RUNS.items():
            with tempfile.TemporaryDirectory(prefix="trainer-bench-") as scratch:
                workdir = Path(scratch)
                print(f"== round {round_number}: {name}", flush=True)
                run = run_baseline(args, workdir) if flags is None else run_trainer(args, workdir, flags)
                results[name].append(run)
    elapsed = time.monotonic() - started
    report(args, results, best_ceiling(ceilings), peak)
    rounds = "; ".join(f"float32 {c['float32']:.0f}, bfloat16 {c['bfloat16']:.0f}" for c in ceilings)
    print(f"matmul GFLOP/s per round: {rounds}")
    print(f"benchmark wall time: {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
