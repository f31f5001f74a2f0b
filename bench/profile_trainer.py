"""Where the trainer's training steps spend their time on this CPU, by TensorFlow op, from TensorFlow's profiler.

    .venv/bin/python bench/profile_trainer.py                       # the benchmark's job: seed CNN, 180 px, batch 32
    .venv/bin/python bench/profile_trainer.py --trainer-flags --precision mixed_bfloat16
    TF_ENABLE_ONEDNN_OPTS=0 .venv/bin/python bench/profile_trainer.py   # TensorFlow's own kernels

It builds the model and the input pipeline with the trainer's own code
(``trainer.config``, ``trainer.data_sources``, ``trainer.data_pipeline``, ``trainer.training``), trains one
warm-up epoch, then records ``--steps`` steps with
``tf.profiler.experimental`` and sums the time of every op the profiler saw on
the host, by op type and by the part of the step that ran it (each layer's forward
and backward pass, the optimizer). The trace stays in ``--logdir`` for TensorBoard's
profile plugin, which this project does not install. Op times overlap when ops
run in parallel, so the shares are of the summed op time, not of wall time;
the wall time per step is printed beside them.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def op_times(logdir: Path, owners: frozenset[str]) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """Microseconds per op type, and per part of the model that ran the op, summed over the host
    plane of the newest profile in ``logdir``.

    A part is one of ``owners`` (the model's layers, forward or backward, and the optimizer) named
    in the op's scope. By type alone, an update split into many small element-wise ops hides
    behind the ops that share its types: Keras' unfused Adam was 11.5 % of the CNN's op time in ten
    types of under 2 % each."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    newest = max(logdir.rglob("*.xplane.pb"), key=lambda path: path.stat().st_mtime)
    space = xplane_pb2.XSpace()
    space.ParseFromString(newest.read_bytes())
    by_type: collections.Counter[str] = collections.Counter()
    by_part: collections.Counter[str] = collections.Counter()
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                # A TensorFlow op inside the training function is named "scope/.../name:OpType";
                # the rest (the function call itself, the executor, tf.data) wraps those ops.
                scope, _, op_type = name.rpartition(":")
                if "/" in scope and op_type.isidentifier():
                    microseconds = event.duration_ps // 1_000_000
                    by_type[op_type] += microseconds
                    by_part[part_of(scope, owners)] += microseconds
    return by_type, by_part


def part_of(scope: str, owners: frozenset[str]) -> str:
    """The layer (its forward or backward pass) or the optimizer an op's scope names; "other"
    for the loss, the metrics and the step's bookkeeping."""
    components = scope.split("/")
    owner = next((component for component in components if component in owners), None)
    if owner is None:
        return "other"
    if "gradient_tape" in components:
        return f"{owner} (backward)"
    return owner


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-size", type=int, default=180)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=16, help="steps recorded, after a warm-up epoch of as many")
    parser.add_argument("--top", type=int, default=20, help="op types listed")
    parser.add_argument("--logdir", type=Path, default=None, help="where the trace is kept (default: a temporary one)")
    parser.add_argument("--trainer-flags", nargs=argparse.REMAINDER, default=[], help="extra flags for the trainer")
    args = parser.parse_args(argv)

    from trainer import kernels

    kernels.prefer_onednn(os.environ)  # as trainer.task does, before TensorFlow loads
    import tensorflow as tf
    import tf_keras as keras

    from trainer import data_pipeline, data_sources, precision, training
    from trainer.config import parse_args
    from trainstack_contract import ONE_DEVICE

    with tempfile.TemporaryDirectory(prefix="trainer-profile-") as scratch:
        config = parse_args(
            [
                "--job-dir",
                scratch,
                "--data",
                "synthetic",
                "--image-size",
                str(args.image_size),
                "--batch-size-per-replica",
                str(args.batch_size),
                "--steps-per-epoch",
                str(args.steps),
                *args.trainer_flags,
            ],
            environ={},
        )
        chosen = precision.auto_precision(ONE_DEVICE, 0) if config.precision == "auto" else config.precision
        keras.mixed_precision.set_global_policy(chosen)
        source = data_sources.count_records(config, data_sources.describe_data(config))
        steps_per_execution = training.largest_divisor_at_most(args.steps, config.steps_per_execution)
        model = training.build_and_compile(config, source, steps_per_execution, use_xla=config.xla == "on")
        dataset: Any = data_pipeline.make_input_fn(config, source, args.steps, training=True)(
            tf.distribute.InputContext()
        )
        model.fit(dataset, epochs=1, steps_per_epoch=args.steps, verbose=0)  # traces, fills the cache

        logdir = args.logdir or Path(scratch) / "profile"
        tf.profiler.experimental.start(str(logdir))
        started = time.perf_counter()
        model.fit(dataset, epochs=1, steps_per_epoch=args.steps, verbose=0)
        seconds = time.perf_counter() - started
        tf.profiler.experimental.stop()
        owners = frozenset([layer.name for layer in model.layers] + [model.optimizer.name])
        totals, parts = op_times(logdir, owners)

    summed = sum(totals.values())
    print(
        f"{args.steps} steps of batch {args.batch_size} at {args.image_size} px, precision {chosen}, "
        f"steps_per_execution {steps_per_execution}: {seconds / args.steps * 1000:.0f} ms per step wall, "
        f"{args.steps * args.batch_size / seconds:.1f} examples/s (profiled)"
    )
    print(f"{'op type':<36}{'ms per step':>12}{'share':>8}")
    for name, microseconds in totals.most_common(args.top):
        print(f"{name:<36}{microseconds / 1000 / args.steps:>12.1f}{microseconds / summed:>8.1%}")
    print(f"{'(all ops)':<36}{summed / 1000 / args.steps:>12.1f}")
    print(f"{'part of the step':<36}{'ms per step':>12}{'share':>8}")
    for name, microseconds in parts.most_common():
        print(f"{name:<36}{microseconds / 1000 / args.steps:>12.1f}{microseconds / summed:>8.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
