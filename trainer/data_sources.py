"""What --data is: synthetic images, a directory of class folders, or TFRecord files, resolved
and checked before any strategy or server starts, and which examples are held out for evaluation.

Local paths are listed with the standard library, so a bad local --data is answered before the
multi-second TensorFlow import; gs:// goes through tf.io.gfile.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import posixpath
import sys
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from trainer import locations
from trainer.config import TrainerConfig
from trainer.synthetic_images import SYNTHETIC_CLASSES, SYNTHETIC_EVAL_EXAMPLES, SYNTHETIC_STEPS_PER_EPOCH
from trainstack_contract import SYNTHETIC_DATA

if TYPE_CHECKING:
    import tensorflow as tf

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


def _is_held_out(key: str, validation_split: float) -> bool:
    """A stable split: the same file is held out on every worker and every restart."""
    return (zlib.crc32(key.encode("utf-8")) % 10_000) < validation_split * 10_000


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
    with reading_errors(config):
        return _describe_files(config, path)


@contextlib.contextmanager
def reading_errors(config: TrainerConfig) -> Iterator[None]:
    """File-system errors while looking at --data, as DataError."""
    try:
        yield
    except OSError as error:
        raise DataError(f"--data {config.data}: cannot read {error.filename or 'it'}: {error.strerror}") from None
    except Exception as error:
        if not _is_tensorflow_error(error):
            raise
        raise DataError(f"--data {config.data}: cannot read it: {locations.summarize(error)}") from None


def data_and_file(config: TrainerConfig, file: str) -> str:
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

    total = num_eval = 0
    for file in source.tfrecord_files:
        # One file at a time, so a corrupt one is named.
        try:
            count = sum(1 for _ in tf.data.TFRecordDataset(file))
        except tf.errors.OpError as error:
            raise DataError(f"{data_and_file(config, file)}: {locations.summarize(error)}") from None
        total += count
        held_out = tfrecord_held_out(posixpath.basename(file), tf.range(count, dtype=tf.int64), config.validation_split)
        num_eval += int(tf.reduce_sum(tf.cast(held_out, tf.int32)))
    if total == 0:
        raise DataError(f"--data {config.data}: its TFRecord files hold no records")
    return dataclasses.replace(source, num_train_examples=total - num_eval, num_eval_examples=num_eval)


def steps_per_epoch(config: TrainerConfig, source: DataSource, global_batch: int) -> int:
    """--steps-per-epoch, or one pass over the training examples."""
    if config.steps_per_epoch is not None:
        return config.steps_per_epoch
    if source.num_train_examples is None:
        return SYNTHETIC_STEPS_PER_EPOCH
    return max(1, source.num_train_examples // global_batch)


def tfrecord_held_out(file_name: str | tf.Tensor, index: tf.Tensor, validation_split: float) -> tf.Tensor:
    """The held-out test for a record, keyed by its file's name and its position in that file:
    the same records are held out on every worker, however the files are shared out among them,
    and wherever the files are copied."""
    import tensorflow as tf

    key = tf.strings.join([file_name, tf.strings.as_string(index)], separator=":")
    bucket = tf.strings.to_hash_bucket_fast(key, 10_000)
    return bucket < int(validation_split * 10_000)
