"""Command-line flags of ``python -m trainer.task``, parsed once into a typed config.

This module must not import TensorFlow: ``--help`` and flag errors should answer
in well under a second, before the multi-second TensorFlow import.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Mapping, Sequence

from trainstack_contract import (
    AUTO,
    BATCH_SIZE_PER_REPLICA,
    CNN,
    EPOCHS,
    FLAGS,
    IMAGE_SIZE,
    MODELS,
    STEPS_PER_EPOCH,
    STRATEGIES,
    SYNTHETIC_DATA,
    TPU,
    VERTEX_CHECKPOINT_DIR_ENV,
    VERTEX_MODEL_DIR_ENV,
    VERTEX_TENSORBOARD_DIR_ENV,
)

# Backups and epoch checkpoints every this many seconds of training: a lost node costs at most
# this much training, and saves stay a small share of it however short the epochs are.
SAVE_EVERY_SECONDS = 300
# A day: beyond it a run would keep no backup worth the name (the stack's key stops there too).
MAX_SAVE_EVERY_SECONDS = 24 * 3600

PRECISIONS = ("auto", "float32", "mixed_float16", "mixed_bfloat16")
SWITCHES = ("auto", "on", "off")
AUGMENTATIONS = ("none", "flip")
# Adam moves every weight by up to the learning rate per step; above 1 that is more than
# the scale of the weights themselves, so training can only diverge.
MAX_LEARNING_RATE = 1.0
# NumPy's seeds are unsigned 32-bit (tf_keras.utils.set_random_seed seeds NumPy too).
MAX_SEED = 2**32 - 1
# The first contact with Cloud Storage (job dir, data) answers in well under a second on
# Google Cloud; without this bound a blocked network would hold the node in retries.
STORAGE_TIMEOUT_SECONDS = 60


class ConfigError(ValueError):
    """A flag value that cannot work; the message names the flag."""


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """Everything the trainer needs from the command line, validated."""

    job_dir: str
    model: str
    data: str
    image_size: int
    epochs: int
    steps_per_epoch: int | None
    batch_size_per_replica: int
    strategy: str
    tpu: str | None
    learning_rate: float
    save_every_steps: int | None
    steps_per_execution: int
    precision: str
    xla: str
    num_classes: int | None
    validation_split: float
    eval_steps: int | None
    seed: int
    overwrite: bool
    logical_cpus: int
    # Directories Vertex AI asks us to use instead of the job-dir defaults.
    model_dir_override: str | None = None
    checkpoint_dir_override: str | None = None
    tensorboard_dir_override: str | None = None
    storage_timeout_seconds: int = STORAGE_TIMEOUT_SECONDS
    save_every_seconds: int = SAVE_EVERY_SECONDS
    augment: str = "none"


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _positive_int(text: str) -> int:
    value = _whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _save_interval(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_SAVE_EVERY_SECONDS:
        raise argparse.ArgumentTypeError(f"{value} is more than a day ({MAX_SAVE_EVERY_SECONDS} s)")
    return value


def _class_count(text: str) -> int:
    value = _whole_number(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"a classifier needs at least 2 classes, got {text}")
    return value


def _seed(text: str) -> int:
    value = _whole_number(text)
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"{value} is not between 0 and {MAX_SEED}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.task",
        # No prefixes: "--job" must not silently mean --job-dir, a flag the stack sets.
        allow_abbrev=False,
        description=(
            "Train an image classifier with tf.distribute. The strategy comes from "
            "TF_CONFIG, the visible GPUs and --tpu; the job directory receives "
            "backups, checkpoints, TensorBoard logs, the exported model and "
            "metrics.json. Re-running a finished job exits 0 without training."
        ),
    )
    _add_what_to_train(parser)
    _add_how_to_train(parser)
    return parser


def _add_what_to_train(parser: argparse.ArgumentParser) -> None:
    """Where the job writes, the model and data, how long, and the strategy."""
    parser.add_argument(
        FLAGS.job_dir,
        default=None,
        help=(
            "Output directory, local or gs://. Defaults to the parent of "
            f"${VERTEX_MODEL_DIR_ENV} when Vertex AI sets it."
        ),
    )
    parser.add_argument(
        FLAGS.model,
        choices=MODELS,
        default=CNN,
        help="cnn: the flowers network of TensorFlow's image classification tutorial; resnet50: Keras ResNet50, random init.",
    )
    parser.add_argument(
        FLAGS.data,
        required=True,
        help=(
            f"'{SYNTHETIC_DATA}', a directory of class sub-folders of images, or TFRecord "
            "files (a file, a glob, or a directory of *.tfrecord)."
        ),
    )
    parser.add_argument(
        FLAGS.image_size,
        type=IMAGE_SIZE.parse,
        default=IMAGE_SIZE.default,
        help="Images are resized to this square size.",
    )
    parser.add_argument(FLAGS.epochs, type=EPOCHS.parse, default=EPOCHS.default)
    parser.add_argument(
        FLAGS.steps_per_epoch,
        type=STEPS_PER_EPOCH.parse,
        default=STEPS_PER_EPOCH.default,
        help="Default: one pass over the training files (synthetic data: 100).",
    )
    parser.add_argument(
        FLAGS.batch_size_per_replica,
        type=BATCH_SIZE_PER_REPLICA.parse,
        default=BATCH_SIZE_PER_REPLICA.default,
        help="The global batch is this times the number of replicas.",
    )
    parser.add_argument(FLAGS.strategy, choices=STRATEGIES, default=AUTO)
    parser.add_argument(
        FLAGS.tpu, default=None, help="TPU name, or 'local' on a TPU VM. Implies the TPU strategy under auto."
    )


def _add_how_to_train(parser: argparse.ArgumentParser) -> None:
    """Optimisation, backups, speed, evaluation and the storage bound."""
    parser.add_argument(
        "--learning-rate", type=float, default=1e-3, help=f"Adam's learning rate, in (0, {MAX_LEARNING_RATE:g}]."
    )
    parser.add_argument(
        "--save-every-seconds",
        type=_save_interval,
        default=SAVE_EVERY_SECONDS,
        help=(
            "Back up the training state (and keep an epoch checkpoint) once this many seconds of "
            "training have passed since the last save, and at the end, so a restart after a lost node "
            "trains again about this long at most (parameter servers: at the first epoch's end after it)."
        ),
    )
    parser.add_argument(
        "--save-every-steps",
        type=_positive_int,
        default=None,
        help=(
            "Also back up every N steps and at every epoch's end (and keep every epoch's checkpoint): "
            "a bound in steps for jobs that want one."
        ),
    )
    parser.add_argument(
        "--steps-per-execution",
        type=_positive_int,
        default=16,
        help=(
            "Training steps per tf.function call; fewer Python round trips. Lowered "
            "to a divisor of --steps-per-epoch so backups land on epoch ends."
        ),
    )
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="auto: mixed_float16 on GPU, mixed_bfloat16 on TPU; on a CPU, mixed_bfloat16 only "
        "where a short probe at start-up measures it clearly faster than float32 (the choice and "
        "the figures are logged), float32 otherwise. A cluster trains with the chief's choice, and "
        "a resumed job with the precision recorded beside its backup.",
    )
    parser.add_argument(
        "--xla", choices=SWITCHES, default="auto", help="XLA-compile the training step. auto: on for a single GPU only."
    )
    parser.add_argument(
        "--augment",
        choices=AUGMENTATIONS,
        default="none",
        help="Training images only (not synthetic data): flip: a random horizontal flip each epoch, "
        "drawn in parallel after the cache (not for data where left and right differ, such as text).",
    )
    parser.add_argument(
        "--num-classes",
        type=_class_count,
        default=None,
        help="Required for TFRecord data; for class folders it must match their number.",
    )
    parser.add_argument(
        "--validation-split",
        type=float,
        default=0.2,
        help="Share of image files / TFRecord records held out for evaluation.",
    )
    parser.add_argument(
        "--eval-steps",
        type=_positive_int,
        default=None,
        help="Batches evaluated after training (default: the whole held-out set).",
    )
    parser.add_argument("--seed", type=_seed, default=42)
    parser.add_argument(
        "--overwrite", action="store_true", help="Train again even if the job directory holds a finished job."
    )
    parser.add_argument(
        FLAGS.logical_cpus,
        type=_positive_int,
        default=1,
        help=(
            "Split the host CPU into this many logical devices so MirroredStrategy "
            "can be exercised without GPUs (tests); leave at 1 for real runs."
        ),
    )
    parser.add_argument(
        "--storage-timeout-seconds",
        type=_positive_int,
        default=STORAGE_TIMEOUT_SECONDS,
        help="How long the first look at a gs:// job dir or data may take before the trainer gives up.",
    )


def _default_job_dir(environ: Mapping[str, str]) -> str | None:
    model_dir = environ.get(VERTEX_MODEL_DIR_ENV)
    if model_dir:
        # Vertex AI: AIP_MODEL_DIR is <base_output_dir>/model.
        return model_dir.rstrip("/").rsplit("/", 1)[0]
    return None


def parse_args(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> TrainerConfig:
    """Parses and validates flags; exits with status 2 and one message on bad input."""
    environ = os.environ if environ is None else environ
    parser = build_parser()
    args = parser.parse_args(argv)
    job_dir = args.job_dir or _default_job_dir(environ)
    if not job_dir:
        parser.error(f"--job-dir is required (or set ${VERTEX_MODEL_DIR_ENV})")
    if not 0.0 <= args.validation_split < 1.0:
        parser.error(f"--validation-split must be in [0, 1), got {args.validation_split}")
    # NaN compares false with everything: test for the range, not against it.
    if not (math.isfinite(args.learning_rate) and 0 < args.learning_rate <= MAX_LEARNING_RATE):
        parser.error(f"--learning-rate must be in (0, {MAX_LEARNING_RATE:g}], got {args.learning_rate}")
    if args.strategy == TPU and not args.tpu:
        parser.error("--strategy tpu needs --tpu NAME (or --tpu local on a TPU VM)")
    return TrainerConfig(
        job_dir=job_dir.rstrip("/") if job_dir != "/" else job_dir,
        model=args.model,
        data=args.data,
        image_size=args.image_size,
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        batch_size_per_replica=args.batch_size_per_replica,
        strategy=args.strategy,
        tpu=args.tpu,
        learning_rate=args.learning_rate,
        save_every_steps=args.save_every_steps,
        steps_per_execution=args.steps_per_execution,
        precision=args.precision,
        xla=args.xla,
        num_classes=args.num_classes,
        validation_split=args.validation_split,
        eval_steps=args.eval_steps,
        seed=args.seed,
        overwrite=args.overwrite,
        logical_cpus=args.logical_cpus,
        model_dir_override=environ.get(VERTEX_MODEL_DIR_ENV) or None,
        checkpoint_dir_override=environ.get(VERTEX_CHECKPOINT_DIR_ENV) or None,
        tensorboard_dir_override=environ.get(VERTEX_TENSORBOARD_DIR_ENV) or None,
        storage_timeout_seconds=args.storage_timeout_seconds,
        save_every_seconds=args.save_every_seconds,
        augment=args.augment,
    )
