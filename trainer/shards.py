"""Writes an image folder as TFRecord shards, the layout the trainer's --data reads from Cloud Storage.

    python -m trainer.shards --images flower_photos --out gs://BUCKET/flowers --shards 16

``--images`` holds one sub-folder per class (the seed's ``flower_photos``); each image becomes
one ``tf.train.Example`` of the trainer's feature spec (``image``: the file's encoded bytes as
they are, ``label``: its class's index in the sorted folder names), dealt round-robin into
``train-NNNNN-of-MMMMM.tfrecord`` files, and the class names go to ``labels.txt`` beside them,
one per line in label order. Then train with ``--data gs://BUCKET/flowers/*.tfrecord
--num-classes <lines of labels.txt>``. Local paths and gs:// both work (tf.io.gfile).

Shards already at ``--out`` are not overwritten unless ``--overwrite`` says so: they may be a
data set someone trains on.
"""

from __future__ import annotations

import argparse
import dataclasses
import posixpath
import re
import sys
from collections.abc import Sequence

from trainer.data_sources import IMAGE_EXTENSIONS

SHARD_PATTERN = "train-{index:05d}-of-{count:05d}.tfrecord"
# Shards this module wrote, of any count: what --overwrite replaces, and nothing else.
WRITTEN_SHARD = re.compile(r"train-[0-9]{5}-of-[0-9]{5}\.tfrecord")
LABELS_FILE = "labels.txt"
MAX_SHARDS = 4096
# An image file bigger than this is not a training image (and would hold a reader up).
MAX_IMAGE_BYTES = 64 * 1024 * 1024


class ShardError(ValueError):
    """The image folder or the output cannot be used; the message says why."""


@dataclasses.dataclass(frozen=True)
class ImageFolder:
    class_names: tuple[str, ...]
    # (path, label) in a stable order: classes sorted, then file names sorted.
    images: tuple[tuple[str, int], ...]


def read_folder(root: str) -> ImageFolder:
    import tensorflow as tf

    if not tf.io.gfile.isdir(root):
        raise ShardError(f"--images {root}: not a directory of class sub-folders")
    entries = sorted(entry.rstrip("/") for entry in tf.io.gfile.listdir(root))
    classes = [entry for entry in entries if tf.io.gfile.isdir(posixpath.join(root, entry))]
    images: list[tuple[str, int]] = []
    for label, name in enumerate(classes):
        folder = posixpath.join(root, name)
        files = sorted(entry for entry in tf.io.gfile.listdir(folder) if entry.lower().endswith(IMAGE_EXTENSIONS))
        images += [(posixpath.join(folder, file), label) for file in files]
    if len(classes) < 2 or not images:
        raise ShardError(
            f"--images {root}: {len(classes)} class sub-folder(s) and {len(images)} image(s); a classifier "
            f"needs at least 2 class folders of {'/'.join(IMAGE_EXTENSIONS)} images"
        )
    return ImageFolder(tuple(classes), tuple(images))


def shard_names(out: str, count: int) -> list[str]:
    return [posixpath.join(out, SHARD_PATTERN.format(index=index, count=count)) for index in range(count)]


def example_bytes(image: bytes, label: int) -> bytes:
    import tensorflow as tf

    feature = {
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    }
    return bytes(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


def write_shards(folder: ImageFolder, out: str, count: int, overwrite: bool = False) -> list[str]:
    """Writes the shards and ``labels.txt``; returns the shards' paths."""
    import tensorflow as tf

    names = shard_names(out, count)
    # Every shard a previous write left, of any count: a glob over --out would read them too.
    present = [
        posixpath.join(out, entry)
        for entry in (sorted(tf.io.gfile.listdir(out)) if tf.io.gfile.isdir(out) else [])
        if WRITTEN_SHARD.fullmatch(entry) or entry == LABELS_FILE
    ]
    if present and not overwrite:
        raise ShardError(
            f"--out {out} already holds {present[0]} (and {len(present) - 1} more): pass --overwrite to replace them"
        )
    for stale in sorted(set(present) - set(names) - {posixpath.join(out, LABELS_FILE)}):
        tf.io.gfile.remove(stale)
    tf.io.gfile.makedirs(out)
    writers = [tf.io.TFRecordWriter(name) for name in names]
    try:
        for position, (path, label) in enumerate(folder.images):
            size = tf.io.gfile.stat(path).length
            if size > MAX_IMAGE_BYTES:
                raise ShardError(f"{path}: {size} bytes, more than the {MAX_IMAGE_BYTES} an image may have")
            with tf.io.gfile.GFile(path, "rb") as handle:
                writers[position % count].write(example_bytes(handle.read(), label))
    finally:
        for writer in writers:
            writer.close()
    with tf.io.gfile.GFile(posixpath.join(out, LABELS_FILE), "w") as handle:
        handle.write("".join(f"{name}\n" for name in folder.class_names))
    return names


# A path with a control character (a newline pasted in) names a file nobody meant.
CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f]")
MAX_PATH_CHARS = 4096


def _path(text: str) -> str:
    if CONTROL_CHARACTER.search(text) or not text.strip() or len(text) > MAX_PATH_CHARS:
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r} is not a path: empty, longer than {MAX_PATH_CHARS} characters, or with a control character"
        )
    return text


def _shard_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MAX_SHARDS:
        raise argparse.ArgumentTypeError(f"{value} is not between 1 and {MAX_SHARDS}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.shards", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--images", required=True, type=_path, help="a folder of class sub-folders of images (local or gs://)"
    )
    parser.add_argument("--out", required=True, type=_path, help="where the shards go (local or gs://)")
    parser.add_argument(
        "--shards", type=_shard_count, default=16, help="how many files: at least one per worker that will read them"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace shards already at --out")
    args = parser.parse_args(argv)
    import tensorflow as tf

    try:
        folder = read_folder(args.images.rstrip("/"))
        count = min(args.shards, len(folder.images))
        names = write_shards(folder, args.out.rstrip("/"), count, args.overwrite)
    except ShardError as error:
        print(f"trainer.shards: {error}", file=sys.stderr)
        return 2
    except (tf.errors.OpError, OSError) as error:
        # An unreachable bucket, a refused write: TensorFlow's first line says which.
        reason = str(getattr(error, "message", None) or error).strip().splitlines()
        print(f"trainer.shards: {reason[0] if reason else type(error).__name__}", file=sys.stderr)
        return 1
    print(
        f"wrote {len(folder.images)} images of {len(folder.class_names)} classes into {len(names)} shards at "
        f"{args.out.rstrip('/')}; train with --data {args.out.rstrip('/')}/*.tfrecord "
        f"--num-classes {len(folder.class_names)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
