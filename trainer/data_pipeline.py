"""tf.data input pipelines: one per worker, for training or evaluation, from a resolved --data.

Every reader returns a function of ``tf.distribute.InputContext`` so the strategy
builds one pipeline per worker: each pipeline reads only its shard and batches by
the per-replica batch (the global batch is per-replica x replicas). All file
access goes through tf.io.gfile / tf.io.read_file, so gs:// paths work.

TFRecord feature spec (one tf.train.Example per image):
    "image": bytes  - an encoded JPEG, PNG, BMP or GIF
    "label": int64  - the class index, 0 <= label < --num-classes
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from trainer.config import TrainerConfig
from trainer.data_sources import DataSource, tfrecord_held_out
from trainer.synthetic_images import SYNTHETIC_EVAL_OFFSET, synthetic_example, synthetic_pool_size
from trainstack_contract import SYNTHETIC_DATA

if TYPE_CHECKING:
    import tensorflow as tf

InputFn = Callable[["tf.distribute.InputContext"], "tf.data.Dataset"]


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


def _parse_example(record: tf.Tensor, image_size: int) -> tuple[tf.Tensor, tf.Tensor]:
    """One tf.train.Example of the documented feature spec: (uint8 image, int64 label)."""
    import tensorflow as tf

    feature_spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }
    example = tf.io.parse_single_example(record, feature_spec)
    return _decode_image(example["image"], image_size), example["label"]


# Files read at once by one pipeline: enough to hide a Cloud Storage read's latency behind others.
MAX_PARALLEL_FILES = 16


def _tfrecords(
    files: tuple[str, ...],
    image_size: int,
    num_classes: int,
    validation_split: float,
    held_out: bool,
    context: tf.distribute.InputContext,
) -> tf.data.Dataset:
    """The records of ``files`` this pipeline reads, training or held out. With at least one
    file per pipeline each worker reads its own files (shards of the data as written), several
    at once; with fewer, every pipeline reads them all and keeps its share of the records."""
    import tensorflow as tf

    pipelines, mine = context.num_input_pipelines, context.input_pipeline_id
    by_file = len(files) >= pipelines
    paths = tf.data.Dataset.from_tensor_slices(list(files))
    if by_file:
        paths = paths.shard(pipelines, mine)

    def records_of(path: tf.Tensor) -> tf.data.Dataset:
        name = tf.strings.regex_replace(path, r"^.*/", "")
        return (
            tf.data.TFRecordDataset(path)
            .enumerate()
            .filter(lambda index, _: tf.equal(tfrecord_held_out(name, index, validation_split), held_out))
            .map(lambda _, record: record)
        )

    reading = min(MAX_PARALLEL_FILES, max(1, -(-len(files) // pipelines) if by_file else len(files)))
    # Training on files of its own takes records as they arrive from whichever file answers
    # first. Sharing records out needs the one order every pipeline sees (else two pipelines
    # take the same record and none another); evaluation reads in order.
    records = paths.interleave(
        records_of,
        cycle_length=reading,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=held_out or not by_file,
    )
    if not by_file:
        records = records.shard(pipelines, mine)

    def parse(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        image, label = _parse_example(record, image_size)
        # Out of range, the loss fails on the CPU with no word of the data, and on a GPU
        # it silently turns into NaN; here it is an input error that names the flag.
        in_range = tf.logical_and(label >= 0, label < num_classes)
        message = f"a label is outside [0, {num_classes}) of --num-classes {num_classes}:"
        with tf.control_dependencies([tf.debugging.Assert(in_range, [message, label])]):
            return image, tf.identity(label)

    return records.map(parse, num_parallel_calls=tf.data.AUTOTUNE)


# ---------------------------------------------------------------- pipelines


# The share of this machine's memory the decoded images a node caches may take, all its input
# pipelines together; above it the pipeline decodes every epoch again (in parallel) instead.
CACHE_MEMORY_SHARE = 0.25
BYTES_PER_PIXEL = 3  # uint8 RGB, as decoded images are cached


def physical_memory_bytes() -> int:
    import os

    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def cache_fits(examples: int | None, image_size: int, memory_bytes: int) -> bool:
    """Whether ``examples`` decoded images (what one node's pipeline reads) fit the cache's share
    of memory; an unknown count does not (a TFRecord set is not counted when --steps-per-epoch
    is given)."""
    if examples is None:
        return False
    return examples * image_size * image_size * BYTES_PER_PIXEL <= CACHE_MEMORY_SHARE * memory_bytes


def tfrecord_share(source: DataSource, training: bool, pipelines: int) -> int | None:
    """The records of TFRecord data one pipeline reads, training or held out; None when they
    were not counted (--steps-per-epoch given: num_train_examples unset, and num_eval_examples
    left at 0, which is no count)."""
    if source.num_train_examples is None:
        return None
    return (source.num_train_examples if training else source.num_eval_examples) // pipelines


def _flip(image: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    import tensorflow as tf

    return tf.image.random_flip_left_right(image), label


def _finish(
    examples: tf.data.Dataset,
    per_replica_batch: int,
    shuffle_buffer: int,
    seed: int,
    training: bool,
    cache: bool = True,
    augment: str = "none",
) -> tf.data.Dataset:
    """cache (where it fits) -> shuffle -> augment -> repeat -> batch -> float -> prefetch, tuned
    for throughput."""
    import tensorflow as tf

    dataset = examples.cache() if cache else examples
    if training:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        if augment == "flip":
            # After the cache: each epoch sees other flips, drawn in parallel.
            dataset = dataset.map(_flip, num_parallel_calls=tf.data.AUTOTUNE)
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
    memory = physical_memory_bytes()

    def input_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        import tensorflow as tf

        per_replica_batch = context.get_per_replica_batch_size(
            config.batch_size_per_replica * context.num_replicas_in_sync
        )
        seed = config.seed + context.input_pipeline_id
        cache = True
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
            cache = cache_fits(len(files) // context.num_input_pipelines, config.image_size, memory)
        else:
            examples = _tfrecords(
                source.tfrecord_files,
                config.image_size,
                source.num_classes,
                config.validation_split,
                held_out=not training,
                context=context,
            )
            buffer = 10_000
            share = tfrecord_share(source, training, context.num_input_pipelines)
            cache = cache_fits(share, config.image_size, memory)
        augment = config.augment if source.kind != SYNTHETIC_DATA else "none"
        return _finish(examples, per_replica_batch, buffer, seed, training, cache, augment)

    return input_fn
