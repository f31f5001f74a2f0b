"""tf.data input: synthetic images, a directory of class folders, or TFRecord files.

Every reader returns a function of ``tf.distribute.InputContext`` so the strategy
builds one pipeline per worker: each pipeline reads only its shard and batches by
the per-replica batch (the global batch is per-replica x replicas). All file
access goes through tf.io.gfile / tf.io.read_file, so gs:// paths work.

TFRecord feature spec (one tf.train.Example per image):
    "image": bytes  - an encoded JPEG, PNG, BMP or GIF
    "label": int64  - the class index, 0 <= label < --num-classes
"""

from __future__ import annotations

import dataclasses
import math
import posixpath
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from trainer.config import TrainerConfig
from trainer.contract import SYNTHETIC_DATA

if TYPE_CHECKING:
    import tensorflow as tf

SYNTHETIC_CLASSES = 5  # as many as the flowers data set (https://www.tensorflow.org/tutorials/images/classification)
SYNTHETIC_STEPS_PER_EPOCH = 100
# Training images are drawn from a finite pool that is generated once and cached:
# regenerating noise for every step would cost as much CPU as the model itself.
SYNTHETIC_MAX_POOL = 4096
SYNTHETIC_EVAL_EXAMPLES = 512
# Evaluation indices start far from the training pool so the two never overlap.
SYNTHETIC_EVAL_OFFSET = 10_000_000
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
TFRECORD_EXTENSIONS = (".tfrecord", ".tfrecords", ".tfrec")


class DataError(ValueError):
    """The --data argument points at nothing usable."""


@dataclasses.dataclass(frozen=True)
class DataSource:
    """What --data resolved to, checked before any strategy or server starts."""

    kind: str  # "synthetic", "images" or "tfrecord"
    num_classes: int
    num_train_examples: int | None
    num_eval_examples: int
    class_names: tuple[str, ...] = ()
    train_files: tuple[str, ...] = ()
    train_labels: tuple[int, ...] = ()
    eval_files: tuple[str, ...] = ()
    eval_labels: tuple[int, ...] = ()
    tfrecord_files: tuple[str, ...] = ()


InputFn = Callable[["tf.distribute.InputContext"], "tf.data.Dataset"]


def _is_held_out(key: str, validation_split: float) -> bool:
    """A stable split: the same file is held out on every worker and every restart."""
    return (zlib.crc32(key.encode("utf-8")) % 10_000) < validation_split * 10_000


def _describe_image_folders(path: str, validation_split: float) -> DataSource:
    import tensorflow as tf

    class_names = sorted(
        entry.rstrip("/")
        for entry in tf.io.gfile.listdir(path)
        if tf.io.gfile.isdir(posixpath.join(path, entry.rstrip("/")))
    )
    if not class_names:
        raise DataError(f"--data {path}: no class sub-folders found")
    train_files: list[str] = []
    train_labels: list[int] = []
    eval_files: list[str] = []
    eval_labels: list[int] = []
    for label, class_name in enumerate(class_names):
        class_dir = posixpath.join(path, class_name)
        for name in sorted(tf.io.gfile.listdir(class_dir)):
            if not name.lower().endswith(IMAGE_EXTENSIONS):
                continue
            file_path = posixpath.join(class_dir, name)
            if _is_held_out(f"{class_name}/{name}", validation_split):
                eval_files.append(file_path)
                eval_labels.append(label)
            else:
                train_files.append(file_path)
                train_labels.append(label)
    if not train_files:
        raise DataError(f"--data {path}: no {'/'.join(IMAGE_EXTENSIONS)} images in its class folders")
    return DataSource(
        kind="images",
        num_classes=len(class_names),
        class_names=tuple(class_names),
        num_train_examples=len(train_files),
        num_eval_examples=len(eval_files),
        train_files=tuple(train_files),
        train_labels=tuple(train_labels),
        eval_files=tuple(eval_files),
        eval_labels=tuple(eval_labels),
    )


def _tfrecord_files(path: str) -> list[str]:
    import tensorflow as tf

    if any(character in path for character in "*?["):
        return sorted(tf.io.gfile.glob(path))
    if tf.io.gfile.isdir(path):
        return sorted(
            posixpath.join(path, name)
            for name in tf.io.gfile.listdir(path)
            if name.lower().endswith(TFRECORD_EXTENSIONS)
        )
    return [path] if tf.io.gfile.exists(path) else []


def describe_data(config: TrainerConfig) -> DataSource:
    """Resolves --data, failing fast with one clear message if it cannot be read."""
    if config.data == SYNTHETIC_DATA:
        return DataSource(
            kind=SYNTHETIC_DATA,
            num_classes=config.num_classes or SYNTHETIC_CLASSES,
            num_train_examples=None,
            num_eval_examples=SYNTHETIC_EVAL_EXAMPLES,
        )
    import tensorflow as tf

    path = config.data.rstrip("/")
    is_glob = any(character in path for character in "*?[")
    if not is_glob and not tf.io.gfile.exists(path):
        raise DataError(f"--data {config.data}: no such file or directory")
    if not is_glob and tf.io.gfile.isdir(path):
        entries = tf.io.gfile.listdir(path)
        if not any(entry.lower().endswith(TFRECORD_EXTENSIONS) for entry in entries):
            return _describe_image_folders(path, config.validation_split)
    files = _tfrecord_files(path)
    if not files:
        raise DataError(f"--data {config.data}: no TFRecord files found")
    if config.num_classes is None:
        raise DataError("--num-classes is required with TFRecord data")
    # Counting records costs one read of the data; it is skipped when the
    # caller states the epoch length.
    if config.steps_per_epoch is None:
        total = sum(1 for _ in tf.data.TFRecordDataset(files))
        num_eval = int(
            tf.reduce_sum(
                tf.cast(_tfrecord_held_out(tf.range(total, dtype=tf.int64), config.validation_split), tf.int32)
            )
        )
        num_train: int | None = total - num_eval
    else:
        num_train, num_eval = None, 0
    return DataSource(
        kind="tfrecord",
        num_classes=config.num_classes,
        num_train_examples=num_train,
        num_eval_examples=num_eval,
        tfrecord_files=tuple(files),
    )


def steps_per_epoch(config: TrainerConfig, source: DataSource, global_batch: int) -> int:
    """--steps-per-epoch, or one pass over the training examples."""
    if config.steps_per_epoch is not None:
        return config.steps_per_epoch
    if source.num_train_examples is None:
        return SYNTHETIC_STEPS_PER_EPOCH
    return max(1, source.num_train_examples // global_batch)


# ---------------------------------------------------------------- synthetic images


def synthetic_example(index: tf.Tensor, image_size: int, num_classes: int, seed: int) -> tuple[tf.Tensor, tf.Tensor]:
    """One deterministic, learnable image: class-specific stripes and tint under noise.

    The class sets the stripe frequency and orientation and which colour channel
    is brighter; the phase and the noise vary per image, so the network has to
    learn the pattern rather than memorise pixels.
    """
    import tensorflow as tf

    index = tf.cast(index, tf.int64)
    label = tf.random.stateless_uniform(
        [], seed=tf.stack([tf.constant(seed, tf.int64), index]), maxval=num_classes, dtype=tf.int64
    )
    noise = tf.random.stateless_uniform(
        [image_size, image_size, 3], seed=tf.stack([tf.constant(seed + 1, tf.int64), index])
    )
    phase = tf.random.stateless_uniform(
        [], seed=tf.stack([tf.constant(seed + 2, tf.int64), index]), maxval=2.0 * math.pi
    )
    frequency = tf.cast(1 + label // 2, tf.float32) * 2.0 * math.pi / float(image_size) * 3.0
    coordinates = tf.range(image_size, dtype=tf.float32)
    wave = 0.5 + 0.5 * tf.sin(coordinates * frequency + phase)
    horizontal = tf.equal(label % 2, 0)
    stripes = tf.where(horizontal, wave[:, None] * tf.ones([1, image_size]), tf.ones([image_size, 1]) * wave[None, :])
    tint = tf.one_hot(label % 3, 3)
    image = 0.55 * noise + 0.3 * stripes[:, :, None] + 0.15 * tint[None, None, :]
    pixels = tf.cast(tf.round(tf.clip_by_value(image, 0.0, 1.0) * 255.0), tf.uint8)
    return pixels, label


def synthetic_examples(start: int, count: int, image_size: int, num_classes: int, seed: int) -> tf.data.Dataset:
    """Unbatched (uint8 image, int64 label) pairs for indices start..start+count-1."""
    import tensorflow as tf

    return tf.data.Dataset.range(start, start + count).map(
        lambda index: synthetic_example(index, image_size, num_classes, seed),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )


def synthetic_pool_size(steps: int, global_batch: int) -> int:
    return min(SYNTHETIC_MAX_POOL, steps * global_batch)


# ---------------------------------------------------------------- files


def _decode_image(contents: tf.Tensor, image_size: int) -> tf.Tensor:
    import tensorflow as tf

    image = tf.io.decode_image(contents, channels=3, expand_animations=False)
    image = tf.image.resize(image, [image_size, image_size])
    # Cached as uint8: a quarter of the memory of float32, converted per batch.
    return tf.saturate_cast(tf.round(image), tf.uint8)


def _image_files(
    files: tuple[str, ...], labels: tuple[int, ...], image_size: int, context: tf.distribute.InputContext
) -> tf.data.Dataset:
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices((list(files), list(labels)))
    dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
    return dataset.map(
        lambda path, label: (_decode_image(tf.io.read_file(path), image_size), tf.cast(label, tf.int64)),
        num_parallel_calls=tf.data.AUTOTUNE,
    )


def _tfrecord_held_out(index: tf.Tensor, validation_split: float) -> tf.Tensor:
    """The held-out test for a record, keyed by its position in the file list."""
    import tensorflow as tf

    bucket = tf.strings.to_hash_bucket_fast(tf.strings.as_string(index), 10_000)
    return bucket < int(validation_split * 10_000)


def _tfrecords(
    files: tuple[str, ...],
    image_size: int,
    validation_split: float,
    held_out: bool,
    context: tf.distribute.InputContext,
) -> tf.data.Dataset:
    import tensorflow as tf

    feature_spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }
    records = tf.data.TFRecordDataset(list(files), num_parallel_reads=tf.data.AUTOTUNE if len(files) > 1 else None)
    records = records.enumerate().filter(
        lambda index, _: tf.equal(_tfrecord_held_out(index, validation_split), held_out)
    )
    records = records.shard(context.num_input_pipelines, context.input_pipeline_id)

    def parse(_: tf.Tensor, record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        example = tf.io.parse_single_example(record, feature_spec)
        return _decode_image(example["image"], image_size), example["label"]

    return records.map(parse, num_parallel_calls=tf.data.AUTOTUNE)


# ---------------------------------------------------------------- pipelines


def _finish(
    examples: tf.data.Dataset, per_replica_batch: int, shuffle_buffer: int, seed: int, training: bool
) -> tf.data.Dataset:
    """cache -> shuffle -> repeat -> batch -> float -> prefetch, tuned for throughput."""
    import tensorflow as tf

    dataset = examples.cache()
    if training:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    # Repeating forever lets the step count, not the data size, end an epoch: every
    # replica then runs the same number of steps, which synchronous training needs.
    dataset = dataset.repeat()
    dataset = dataset.batch(per_replica_batch, drop_remainder=True)
    # Converting whole batches is one vectorised op instead of one per image.
    dataset = dataset.map(
        lambda images, labels: (tf.cast(images, tf.float32), labels), num_parallel_calls=tf.data.AUTOTUNE
    )
    options = tf.data.Options()
    options.deterministic = not training
    options.experimental_optimization.map_parallelization = True
    # The input functions shard explicitly; Keras must not shard a second time.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)


def make_input_fn(config: TrainerConfig, source: DataSource, steps: int, training: bool) -> InputFn:
    """The per-worker dataset function for Keras' DatasetCreator."""

    def input_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        import tensorflow as tf

        per_replica_batch = context.get_per_replica_batch_size(
            config.batch_size_per_replica * context.num_replicas_in_sync
        )
        seed = config.seed + context.input_pipeline_id
        if source.kind == SYNTHETIC_DATA:
            if training:
                pool = synthetic_pool_size(steps, per_replica_batch * context.num_replicas_in_sync)
                start = 0
            else:
                pool, start = source.num_eval_examples, SYNTHETIC_EVAL_OFFSET
            indices = tf.data.Dataset.range(start, start + pool).shard(
                context.num_input_pipelines, context.input_pipeline_id
            )
            examples = indices.map(
                lambda index: synthetic_example(index, config.image_size, source.num_classes, config.seed),
                num_parallel_calls=tf.data.AUTOTUNE,
            )
            buffer = pool
        elif source.kind == "images":
            files, labels = (
                (source.train_files, source.train_labels) if training else (source.eval_files, source.eval_labels)
            )
            examples = _image_files(files, labels, config.image_size, context)
            buffer = max(1, len(files))
        else:
            examples = _tfrecords(
                source.tfrecord_files,
                config.image_size,
                config.validation_split,
                held_out=not training,
                context=context,
            )
            buffer = 10_000
        return _finish(examples, per_replica_batch, buffer, seed, training)

    return input_fn
