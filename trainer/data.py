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

import contextlib
import dataclasses
import glob
import math
import os
import posixpath
import sys
import zlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from trainer import locations
from trainer.config import TrainerConfig
from trainstack_contract import SYNTHETIC_DATA

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


# Local paths are listed with the standard library, so a bad local --data is answered
# before the multi-second TensorFlow import; gs:// goes through tf.io.gfile.


def _exists(path: str) -> bool:
    if locations.is_remote(path):
        import tensorflow as tf

        return bool(tf.io.gfile.exists(path))
    return os.path.exists(path)


def _isdir(path: str) -> bool:
    if locations.is_remote(path):
        import tensorflow as tf

        return bool(tf.io.gfile.isdir(path))
    return os.path.isdir(path)


def _listdir(path: str) -> list[str]:
    if locations.is_remote(path):
        import tensorflow as tf

        # gfile marks sub-directories of gs:// with a trailing "/".
        return [entry.rstrip("/") for entry in tf.io.gfile.listdir(path)]
    return os.listdir(path)


def _glob(pattern: str) -> list[str]:
    if locations.is_remote(pattern):
        import tensorflow as tf

        return list(tf.io.gfile.glob(pattern))
    return glob.glob(pattern)


def _is_glob(path: str) -> bool:
    return any(character in path for character in "*?[")


def _describe_image_folders(path: str, config: TrainerConfig) -> DataSource:
    entries = _listdir(path)
    if not entries:
        raise DataError(f"--data {path}: empty directory; expected class sub-folders of images or *.tfrecord files")
    class_names = sorted(entry for entry in entries if _isdir(posixpath.join(path, entry)))
    if not class_names:
        raise DataError(
            f"--data {path}: no class sub-folders found; expected {path}/<class>/<image> or *.tfrecord files"
        )
    train_files: list[str] = []
    train_labels: list[int] = []
    eval_files: list[str] = []
    eval_labels: list[int] = []
    classes_with_images: list[str] = []
    for label, class_name in enumerate(class_names):
        class_dir = posixpath.join(path, class_name)
        images = [name for name in sorted(_listdir(class_dir)) if name.lower().endswith(IMAGE_EXTENSIONS)]
        if images:
            classes_with_images.append(class_name)
        for name in images:
            file_path = posixpath.join(class_dir, name)
            if _is_held_out(f"{class_name}/{name}", config.validation_split):
                eval_files.append(file_path)
                eval_labels.append(label)
            else:
                train_files.append(file_path)
                train_labels.append(label)
    total = len(train_files) + len(eval_files)
    if not total:
        raise DataError(f"--data {path}: no {'/'.join(IMAGE_EXTENSIONS)} images in its class folders")
    if len(classes_with_images) < 2:
        raise DataError(
            f"--data {path}: images in only one class folder ({classes_with_images[0]}); "
            "a classifier needs at least 2 class sub-folders with images"
        )
    if not train_files:
        raise DataError(
            f"--data {path}: --validation-split {config.validation_split} holds out all {total} images; "
            "none is left to train on"
        )
    if config.num_classes is not None and config.num_classes != len(class_names):
        raise DataError(
            f"--num-classes {config.num_classes} does not match the {len(class_names)} class folders "
            f"of --data {path} ({', '.join(class_names)})"
        )
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
    if _is_glob(path):
        return sorted(_glob(path))
    if _isdir(path):
        return sorted(
            posixpath.join(path, name) for name in _listdir(path) if name.lower().endswith(TFRECORD_EXTENSIONS)
        )
    return [path] if _exists(path) else []


def _first_contact(config: TrainerConfig, path: str) -> bool:
    """Whether --data exists (a glob: matches anything); gs:// within --storage-timeout-seconds."""

    def look() -> bool:
        return bool(_glob(path)) if _is_glob(path) else _exists(path)

    if not locations.is_remote(path):
        return look()
    try:
        return locations.bounded(look, config.storage_timeout_seconds, path)
    except locations.StorageError as error:
        raise DataError(f"--data {config.data}: cannot reach it: {error}") from None


def describe_data(config: TrainerConfig) -> DataSource:
    """Resolves --data, failing fast with one clear message if it cannot be read.

    Local paths are resolved without TensorFlow, except for counting TFRecord records."""
    if config.data == SYNTHETIC_DATA:
        return DataSource(
            kind=SYNTHETIC_DATA,
            num_classes=config.num_classes or SYNTHETIC_CLASSES,
            num_train_examples=None,
            num_eval_examples=SYNTHETIC_EVAL_EXAMPLES,
        )
    problem = locations.remote_problem(config.data)
    if problem:
        raise DataError(f"--data {config.data}: {problem}")
    path = config.data.rstrip("/")
    if not _first_contact(config, path):
        what = "nothing matches this pattern" if _is_glob(path) else "no such file or directory"
        raise DataError(f"--data {config.data}: {what}")
    with _reading(config):
        return _describe_files(config, path)


@contextlib.contextmanager
def _reading(config: TrainerConfig) -> Iterator[None]:
    """File-system errors while looking at --data, as DataError."""
    try:
        yield
    except OSError as error:
        raise DataError(f"--data {config.data}: cannot read {error.filename or 'it'}: {error.strerror}") from None
    except Exception as error:
        if not _is_tensorflow_error(error):
            raise
        raise DataError(f"--data {config.data}: cannot read it: {locations.summarize(error)}") from None


def _naming(config: TrainerConfig, file: str) -> str:
    """--data, and the file when --data is a directory or a pattern."""
    return f"--data {config.data}" if file == config.data.rstrip("/") else f"--data {config.data}: {file}"


def _is_tensorflow_error(error: BaseException) -> bool:
    """Whether ``error`` is a tf.errors.OpError, without importing TensorFlow to ask."""
    tensorflow = sys.modules.get("tensorflow")
    return tensorflow is not None and isinstance(error, tensorflow.errors.OpError)


def _describe_files(config: TrainerConfig, path: str) -> DataSource:
    if not _is_glob(path) and _isdir(path):
        entries = _listdir(path)
        if not any(entry.lower().endswith(TFRECORD_EXTENSIONS) for entry in entries):
            return _describe_image_folders(path, config)
    files = _tfrecord_files(path)
    if not files:
        raise DataError(f"--data {config.data}: no TFRecord files ({'/'.join(TFRECORD_EXTENSIONS)}) found")
    if config.num_classes is None:
        raise DataError(f"--num-classes is required with TFRecord data (--data {config.data})")
    # The records are counted by ``count_records``, after the strategy exists.
    return DataSource(
        kind="tfrecord",
        num_classes=config.num_classes,
        num_train_examples=None,
        num_eval_examples=0,
        tfrecord_files=tuple(files),
    )


def count_records(config: TrainerConfig, source: DataSource) -> DataSource:
    """TFRecord data with its training and held-out record counts, which set the epoch
    length and the evaluation steps when --steps-per-epoch does not.

    Counting runs TensorFlow ops, so it must come after the strategy is built:
    MultiWorkerMirroredStrategy configures collective ops, and --logical-cpus splits the
    CPU, only before the first op. It costs one read of the data and is skipped when the
    caller states the epoch length."""
    if source.kind != "tfrecord" or config.steps_per_epoch is not None:
        return source
    import tensorflow as tf

    total = 0
    for file in source.tfrecord_files:
        # One file at a time, so a corrupt one is named.
        try:
            total += sum(1 for _ in tf.data.TFRecordDataset(file))
        except tf.errors.OpError as error:
            raise DataError(f"{_naming(config, file)}: {locations.summarize(error)}") from None
    if total == 0:
        raise DataError(f"--data {config.data}: its TFRecord files hold no records")
    num_eval = int(
        tf.reduce_sum(tf.cast(_tfrecord_held_out(tf.range(total, dtype=tf.int64), config.validation_split), tf.int32))
    )
    return dataclasses.replace(source, num_train_examples=total - num_eval, num_eval_examples=num_eval)


# ---------------------------------------------------------------- checks before training
#
# On every node, before any node waits for its peers, and without running a TensorFlow op
# (see count_records): the file headers are read in Python. A folder of files that are not
# images (an HTML error page saved as .jpg, a text file) fails here; a file that is damaged
# further in is reported by ``input_errors`` when training reaches it.

# The first image of each class is looked at, up to this many: a few reads even from gs://.
MAX_CHECKED_IMAGES = 16
# What tf.io.decode_image recognises, by the first bytes of a file.
IMAGE_SIGNATURES = (
    b"\xff\xd8\xff",  # JPEG
    b"\x89PNG\r\n\x1a\n",  # PNG
    b"GIF8",  # GIF87a, GIF89a
    b"BM",  # BMP
    b"\xff\x0a",  # JPEG XL codestream
    b"\x00\x00\x00\x0cJXL ",  # JPEG XL container
)
IMAGE_FORMATS = "JPEG, PNG, GIF, BMP, WebP or JPEG XL"
TFRECORD_SPEC = 'the documented spec: "image" = one encoded image (bytes), "label" = one class index (int64)'


def _open(path: str) -> Any:
    if locations.is_remote(path):
        import tensorflow as tf

        return tf.io.gfile.GFile(path, "rb")
    return open(path, "rb")


def _is_image(header: bytes) -> bool:
    is_webp = header[:4] == b"RIFF" and header[8:12] == b"WEBP"
    return is_webp or header.startswith(IMAGE_SIGNATURES)


def _image_problem(contents: bytes) -> str | None:
    if _is_image(contents[:16]):
        return None
    shown = contents[:16]
    return f"not a {IMAGE_FORMATS} image (it starts with {shown!r})" if shown else "an empty file"


_CRC32C_TABLE: list[int] = []


def _masked_crc32c(data: bytes) -> bytes:
    """The checksum of TFRecord framing: CRC-32C, rotated and offset ("masked")."""
    if not _CRC32C_TABLE:
        for byte in range(256):
            crc = byte
            for _ in range(8):
                crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
            _CRC32C_TABLE.append(crc)
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return ((((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF).to_bytes(4, "little")


def _first_record(path: str) -> bytes | None:
    """The first record of a TFRecord file (None: the file is empty), its framing checked:
    8-byte length, its checksum, the data, the data's checksum."""
    corrupted = DataError("corrupted record at 0 (is it a TFRecord file?)")
    with _open(path) as handle:
        header = handle.read(12)
        if not header:
            return None
        # The length's own checksum first: any other file's first bytes read as a length
        # of up to 2**64 bytes.
        if len(header) < 12 or _masked_crc32c(header[:8]) != header[8:]:
            raise corrupted
        length = int.from_bytes(header[:8], "little")
        data = handle.read(length)
        if len(data) != length or _masked_crc32c(data) != handle.read(4):
            raise corrupted
    return bytes(data)


def _check_first_example(record: bytes, num_classes: int) -> None:
    """The first tf.train.Example against the feature spec, its image header and label."""
    import tensorflow as tf
    from google.protobuf.message import DecodeError

    try:
        features = tf.train.Example.FromString(record).features.feature
    except DecodeError:
        raise DataError(f"the first record is not a tf.train.Example ({TFRECORD_SPEC})") from None
    image = features["image"].bytes_list.value if "image" in features else []
    label = features["label"].int64_list.value if "label" in features else []
    if len(image) != 1 or len(label) != 1:
        present = ", ".join(sorted(features)) or "none"
        raise DataError(f"the first record does not follow {TFRECORD_SPEC}; its features: {present}")
    problem = _image_problem(image[0])
    if problem:
        raise DataError(f'the first record\'s "image" is {problem}')
    if not 0 <= label[0] < num_classes:
        raise DataError(f"label {label[0]} is outside [0, {num_classes}) of --num-classes {num_classes}")


def check_examples(config: TrainerConfig, source: DataSource) -> None:
    """Looks at a sample of --data the way the pipeline will read it; DataError names the file."""
    with _reading(config):
        _check_examples(config, source)


def _check_examples(config: TrainerConfig, source: DataSource) -> None:
    if source.kind == "images":
        first_of_class: dict[int, str] = {}
        for path, label in zip(
            source.train_files + source.eval_files, source.train_labels + source.eval_labels, strict=True
        ):
            first_of_class.setdefault(label, path)
        for path in sorted(first_of_class.values())[:MAX_CHECKED_IMAGES]:
            with _open(path) as handle:
                problem = _image_problem(handle.read(16))
            if problem:
                raise DataError(f"--data {config.data}: cannot decode {path}: {problem}")
    elif source.kind == "tfrecord":
        for file in source.tfrecord_files:
            try:
                record = _first_record(file)
                if record is None:
                    continue
                _check_first_example(record, source.num_classes)
            except DataError as error:
                raise DataError(f"{_naming(config, file)}: {error}") from None
            return
        raise DataError(f"--data {config.data}: its TFRecord files hold no records")


@contextlib.contextmanager
def input_errors(config: TrainerConfig, stage: str) -> Iterator[None]:
    """Turns a failure inside the input pipeline into DataError (exit 2, one line).

    tf.data reports a file that does not decode, a corrupt record or a label out of range
    only when the step that reads it runs, as an error of the IteratorGetNext op; any other
    TensorFlow error is not about the data and passes unchanged."""
    import tensorflow as tf

    try:
        yield
    except tf.errors.OpError as error:
        message = str(error.message)
        if "IteratorGetNext" not in message and "Iterator::" not in message:
            raise
        raise DataError(
            f"--data {config.data}: an example could not be read during {stage}: {locations.summarize(error)}"
        ) from None


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


def _parse_example(record: tf.Tensor, image_size: int) -> tuple[tf.Tensor, tf.Tensor]:
    """One tf.train.Example of the documented feature spec: (uint8 image, int64 label)."""
    import tensorflow as tf

    feature_spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }
    example = tf.io.parse_single_example(record, feature_spec)
    return _decode_image(example["image"], image_size), example["label"]


def _tfrecords(
    files: tuple[str, ...],
    image_size: int,
    num_classes: int,
    validation_split: float,
    held_out: bool,
    context: tf.distribute.InputContext,
) -> tf.data.Dataset:
    import tensorflow as tf

    records = tf.data.TFRecordDataset(list(files), num_parallel_reads=tf.data.AUTOTUNE if len(files) > 1 else None)
    records = records.enumerate().filter(
        lambda index, _: tf.equal(_tfrecord_held_out(index, validation_split), held_out)
    )
    records = records.shard(context.num_input_pipelines, context.input_pipeline_id)

    def parse(_: tf.Tensor, record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        image, label = _parse_example(record, image_size)
        # Out of range, the loss fails on the CPU with no word of the data, and on a GPU
        # it silently turns into NaN; here it is an input error that names the flag.
        in_range = tf.logical_and(label >= 0, label < num_classes)
        message = f"a label is outside [0, {num_classes}) of --num-classes {num_classes}:"
        with tf.control_dependencies([tf.debugging.Assert(in_range, [message, label])]):
            return image, tf.identity(label)

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
                source.num_classes,
                config.validation_split,
                held_out=not training,
                context=context,
            )
            buffer = 10_000
        return _finish(examples, per_replica_batch, buffer, seed, training)

    return input_fn
