"""Checks of --data before training, and its input errors during training.

On every node, before any node waits for its peers, and without running a TensorFlow op (see
:func:`trainer.data_sources.count_records`): the file headers are read in Python. A folder of
files that are not images (an HTML error page saved as .jpg, a text file) fails here; a file
that is damaged further in is reported by :func:`input_errors` when training reaches it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from trainer import locations
from trainer.config import TrainerConfig
from trainer.data_sources import DataError, DataSource, data_and_file, reading_errors

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
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]  # protobuf ships no types

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
    with reading_errors(config):
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
                raise DataError(f"{data_and_file(config, file)}: {error}") from None
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
