"""Bad input to `python -m trainer.task`, each case run as the real trainer process.

Every case expects the exact exit status of the contract (trainer/task.py: 2 for bad
flags, an unusable job directory, a bad TF_CONFIG or unreadable data), a message that names
the offending flag or path (and the valid choices, where there are some), and no traceback.
Flag errors are argparse's (usage, then "python -m trainer.task: error: ..."); all others
are one "trainer: error: ..." line, the last on stderr.

Most cases are answered before the TensorFlow import and take a fraction of a second; the
few that need TensorFlow (decoding, TFRecord reading, Cloud Storage) are marked slow.
"""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from trainer_test_helpers import png_bytes, run_trainer

EXIT_BAD_INPUT = 2
USAGE_PREFIX = "python -m trainer.task: error: "
TRAINER_PREFIX = "trainer: error: "
TRACEBACK = "Traceback (most recent call last)"
# The stack's cluster and a two-worker TF_CONFIG, as the boot scripts write them.
TWO_WORKERS = {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}


def assert_usage_error(result: subprocess.CompletedProcess[str], fragments: list[str]) -> None:
    """argparse's answer: exit 2, the usage, then one error line naming the flag."""
    stderr = result.stderr
    assert result.returncode == EXIT_BAD_INPUT, stderr[-3000:]
    assert TRACEBACK not in stderr, stderr[-3000:]
    lines = stderr.strip().splitlines()
    assert lines[0].startswith("usage: python -m trainer.task"), stderr
    assert lines[-1].startswith(USAGE_PREFIX), stderr
    assert sum(line.startswith(USAGE_PREFIX) for line in lines) == 1, stderr
    for fragment in fragments:
        assert fragment in lines[-1], (fragment, lines[-1])


def assert_one_line_error(result: subprocess.CompletedProcess[str], fragments: list[str]) -> None:
    """The trainer's answer: exit 2 and exactly one "trainer: error:" line, the last one."""
    stderr = result.stderr
    assert result.returncode == EXIT_BAD_INPUT, stderr[-3000:]
    assert TRACEBACK not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith(TRAINER_PREFIX)]
    assert len(errors) == 1, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == errors[0], stderr[-3000:]
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])


# ---------------------------------------------------------------- flags (argparse)

JOB = "{job}"
BASE = ["--job-dir", JOB, "--data", "synthetic"]


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        pytest.param(["--job-dir", JOB], ["the following arguments are required: --data"], id="no-data-flag"),
        pytest.param(["--data", "synthetic"], ["--job-dir is required", "$AIP_MODEL_DIR"], id="no-job-dir"),
        pytest.param(
            [*BASE, "--model", "vgg16"],
            ["argument --model", "invalid choice: 'vgg16'", "'cnn', 'resnet50'"],
            id="unknown-model",
        ),
        pytest.param(
            [*BASE, "--strategy", "horovod"],
            ["argument --strategy", "'horovod'", "'auto', 'one_device', 'mirrored', 'multi_worker_mirrored'"],
            id="unknown-strategy",
        ),
        pytest.param(
            [*BASE, "--precision", "fp8"],
            ["argument --precision", "'fp8'", "'float32', 'mixed_float16', 'mixed_bfloat16'"],
            id="unknown-precision",
        ),
        pytest.param(
            [*BASE, "--epochs", "0"], ["argument --epochs", "0 is not between 1 and 100000"], id="zero-epochs"
        ),
        pytest.param([*BASE, "--epochs", "-3"], ["argument --epochs", "-3 is not between 1 and"], id="negative-epochs"),
        pytest.param(
            [*BASE, "--epochs", "ten"], ["argument --epochs", "'ten' is not a whole number"], id="epochs-word"
        ),
        pytest.param(
            [*BASE, "--batch-size-per-replica", "0"],
            ["argument --batch-size-per-replica", "0 is not between 1 and 65536"],
            id="zero-batch",
        ),
        pytest.param(
            [*BASE, "--image-size", "8"],
            ["argument --image-size", "8 is not between 16 and 1024"],
            id="image-too-small",
        ),
        pytest.param(
            [*BASE, "--image-size", "4096"],
            ["argument --image-size", "4096 is not between 16 and 1024"],
            id="image-too-large",
        ),
        pytest.param(
            [*BASE, "--steps-per-epoch", "0"], ["argument --steps-per-epoch", "0 is not between 1"], id="zero-steps"
        ),
        pytest.param(
            [*BASE, "--learning-rate", "fast"],
            ["argument --learning-rate", "invalid float value: 'fast'"],
            id="learning-rate-word",
        ),
        pytest.param(
            [*BASE, "--learning-rate", "0"], ["--learning-rate must be in (0, 1], got 0.0"], id="zero-learning-rate"
        ),
        pytest.param(
            [*BASE, "--learning-rate", "nan"], ["--learning-rate must be in (0, 1], got nan"], id="nan-learning-rate"
        ),
        pytest.param(
            [*BASE, "--learning-rate", "5"], ["--learning-rate must be in (0, 1], got 5.0"], id="huge-learning-rate"
        ),
        pytest.param(
            [*BASE, "--validation-split", "1"],
            ["--validation-split must be in [0, 1), got 1.0"],
            id="validation-split-one",
        ),
        pytest.param(
            [*BASE, "--validation-split", "nan"],
            ["--validation-split must be in [0, 1), got nan"],
            id="validation-split-nan",
        ),
        pytest.param(
            [*BASE, "--save-every-steps", "often"],
            ["argument --save-every-steps", "'often' is not a whole number"],
            id="save-every-word",
        ),
        pytest.param(
            [*BASE, "--save-every-seconds", "86401"],
            ["argument --save-every-seconds", "86401 is more than a day (86400 s)"],
            id="save-every-seconds-beyond-a-day",
        ),
        pytest.param(
            [*BASE, "--augment", "rotate"],
            ["argument --augment", "invalid choice: 'rotate'"],
            id="augment-unknown",
        ),
        pytest.param(
            [*BASE, "--num-classes", "1"],
            ["argument --num-classes", "at least 2 classes, got 1"],
            id="one-class-flag",
        ),
        pytest.param([*BASE, "--seed", "-1"], ["argument --seed", "-1 is not between 0 and 4294967295"], id="neg-seed"),
        pytest.param(
            [*BASE, "--storage-timeout-seconds", "0"],
            ["argument --storage-timeout-seconds", "must be a positive integer, got 0"],
            id="zero-storage-timeout",
        ),
        # allow_abbrev=False: a prefix of --epochs is not --epochs.
        pytest.param([*BASE, "--epoch", "3"], ["unrecognized arguments: --epoch 3"], id="unknown-flag"),
        pytest.param([*BASE, "--strategy", "tpu"], ["--strategy tpu needs --tpu NAME"], id="tpu-without-name"),
    ],
)
def test_bad_flags_are_usage_errors(
    job_dir: Path, without_tensorflow: dict[str, str], args: list[str], fragments: list[str]
) -> None:
    result = run_trainer([arg.replace(JOB, str(job_dir)) for arg in args], env=without_tensorflow, timeout=60)
    assert_usage_error(result, fragments)
    assert not job_dir.exists()


# ---------------------------------------------------------------- data, job dir, TF_CONFIG

# A case builds its files under a temporary directory and returns the trainer's arguments.
Build = Callable[[Path], list[str]]


def write_pngs(folder: Path, count: int, seed: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, size=(count, 8, 8, 3), dtype=np.uint8)
    for index, image in enumerate(pixels):
        (folder / f"{index}.png").write_bytes(png_bytes(image))


def job(tmp: Path) -> list[str]:
    return ["--job-dir", str(tmp / "job")]


def missing_data(tmp: Path) -> list[str]:
    return [*job(tmp), "--data", str(tmp / "nowhere")]


def glob_matching_nothing(tmp: Path) -> list[str]:
    (tmp / "records").mkdir()
    return [*job(tmp), "--data", str(tmp / "records" / "*.tfrecord"), "--num-classes", "2"]


def empty_folder(tmp: Path) -> list[str]:
    (tmp / "empty").mkdir()
    return [*job(tmp), "--data", str(tmp / "empty")]


def class_folders_without_images(tmp: Path) -> list[str]:
    for name in ("cats", "dogs"):
        (tmp / "data" / name).mkdir(parents=True)
        (tmp / "data" / name / "notes.txt").write_text("not an image")
    return [*job(tmp), "--data", str(tmp / "data")]


def one_class(tmp: Path) -> list[str]:
    write_pngs(tmp / "data" / "cats", 4)
    # A second class folder without images does not make a second class.
    (tmp / "data" / "dogs").mkdir()
    return [*job(tmp), "--data", str(tmp / "data")]


def everything_held_out(tmp: Path) -> list[str]:
    # crc32("cats/0.png") and crc32("dogs/0.png") both fall in the held-out 99 %.
    write_pngs(tmp / "data" / "cats", 1)
    write_pngs(tmp / "data" / "dogs", 1, seed=1)
    return [*job(tmp), "--data", str(tmp / "data"), "--validation-split", "0.99"]


def wrong_class_count(tmp: Path) -> list[str]:
    write_pngs(tmp / "data" / "cats", 2)
    write_pngs(tmp / "data" / "dogs", 2, seed=1)
    return [*job(tmp), "--data", str(tmp / "data"), "--num-classes", "3"]


def tfrecord_without_num_classes(tmp: Path) -> list[str]:
    (tmp / "train.tfrecord").write_bytes(b"never read")
    return [*job(tmp), "--data", str(tmp / "train.tfrecord")]


def text_as_jpeg(tmp: Path) -> list[str]:
    for name in ("cats", "dogs"):
        (tmp / "data" / name).mkdir(parents=True)
        for index in range(3):
            (tmp / "data" / name / f"{index}.jpg").write_text("<html>403 Forbidden</html>")
    return [*job(tmp), "--data", str(tmp / "data"), "--image-size", "16"]


def corrupt_tfrecord(tmp: Path) -> list[str]:
    (tmp / "records").mkdir()
    (tmp / "records" / "train-0.tfrecord").write_bytes(b"\x00garbage" * 64)
    return [*job(tmp), "--data", str(tmp / "records"), "--num-classes", "2"]


def a_file(tmp: Path) -> Path:
    path = tmp / "a-file"
    path.write_text("a regular file")
    return path


def job_dir_under_a_file(tmp: Path) -> list[str]:
    return ["--job-dir", str(a_file(tmp) / "job"), "--data", "synthetic"]


def job_dir_is_a_file(tmp: Path) -> list[str]:
    return ["--job-dir", str(a_file(tmp)), "--data", "synthetic"]


def job_dir_in_proc(tmp: Path) -> list[str]:
    # The kernel refuses new entries in /proc even to root, unlike a chmod'ed directory.
    return ["--job-dir", "/proc/trainstack-job", "--data", "synthetic"]


def gs_job_dir(uri: str) -> Build:
    return lambda tmp: ["--job-dir", uri, "--data", "synthetic"]


def gs_data(uri: str) -> Build:
    return lambda tmp: [*job(tmp), "--data", uri]


def with_args(*args: str) -> Build:
    return lambda tmp: [*job(tmp), "--data", "synthetic", *args]


def tf_config(raw: object) -> dict[str, str]:
    return {"TF_CONFIG": raw if isinstance(raw, str) else json.dumps(raw)}


@pytest.mark.parametrize(
    ("build", "env", "fragments"),
    [
        pytest.param(missing_data, {}, ["--data ", "nowhere: no such file or directory"], id="missing-data"),
        pytest.param(
            glob_matching_nothing, {}, ["--data ", "*.tfrecord: nothing matches this pattern"], id="glob-no-match"
        ),
        pytest.param(
            empty_folder,
            {},
            ["--data ", "empty: empty directory", "class sub-folders of images or *.tfrecord files"],
            id="empty-data-folder",
        ),
        pytest.param(
            class_folders_without_images,
            {},
            ["--data ", "no .jpg/.jpeg/.png/.bmp/.gif images in its class folders"],
            id="no-images",
        ),
        pytest.param(
            one_class,
            {},
            ["--data ", "images in only one class folder (cats)", "at least 2 class sub-folders with images"],
            id="one-class",
        ),
        pytest.param(
            everything_held_out,
            {},
            ["--data ", "--validation-split 0.99 holds out all 2 images", "none is left to train on"],
            id="all-held-out",
        ),
        pytest.param(
            wrong_class_count,
            {},
            ["--num-classes 3 does not match the 2 class folders", "(cats, dogs)"],
            id="num-classes-mismatch",
        ),
        pytest.param(
            text_as_jpeg,
            {},
            ["--data ", "cannot decode ", "cats/0.jpg: not a JPEG, PNG, GIF, BMP, WebP or JPEG XL image", "<html>"],
            id="text-in-jpg-files",
        ),
        pytest.param(
            corrupt_tfrecord,
            {},
            ["--data ", "train-0.tfrecord: corrupted record at 0 (is it a TFRecord file?)"],
            id="corrupt-tfrecord",
        ),
        pytest.param(
            tfrecord_without_num_classes,
            {},
            ["--num-classes is required with TFRecord data", "train.tfrecord"],
            id="tfrecord-needs-num-classes",
        ),
        pytest.param(job_dir_under_a_file, {}, ["--job-dir ", "a-file is not a directory"], id="job-dir-under-file"),
        pytest.param(job_dir_is_a_file, {}, ["--job-dir ", "a-file is not a directory"], id="job-dir-is-file"),
        pytest.param(
            job_dir_in_proc,
            {},
            ["--job-dir /proc/trainstack-job: cannot create it or write to it"],
            id="job-dir-in-proc",
        ),
        pytest.param(
            gs_job_dir("gs://My_Bucket/job"),
            {},
            ["--job-dir gs://My_Bucket/job: 'My_Bucket' is not a valid Cloud Storage bucket name", "lowercase"],
            id="job-dir-bad-bucket",
        ),
        pytest.param(
            gs_job_dir("gs:///job"), {}, ["--job-dir gs:///job: no bucket name after gs://"], id="job-dir-no-bucket"
        ),
        pytest.param(
            gs_job_dir("s3://bucket/job"),
            {},
            ["--job-dir s3://bucket/job: only local paths and gs://BUCKET/PATH are supported, not s3://"],
            id="job-dir-other-scheme",
        ),
        pytest.param(
            gs_data("gs://-flowers-/photos"),
            {},
            ["--data gs://-flowers-/photos: '-flowers-' is not a valid Cloud Storage bucket name"],
            id="data-bad-bucket",
        ),
        pytest.param(
            with_args(), tf_config("{cluster: "), ["TF_CONFIG is not valid JSON: Expecting"], id="tf-config-not-json"
        ),
        pytest.param(
            with_args(),
            tf_config([TWO_WORKERS]),
            ['TF_CONFIG must be a JSON object {"cluster": ..., "task": ...}'],
            id="tf-config-not-object",
        ),
        pytest.param(
            with_args(),
            tf_config({"cluster": TWO_WORKERS, "task": {"type": "worker", "index": 2}}),
            ["TF_CONFIG task worker:2 is not in its cluster", "2 worker task(s) listed: indexes 0..1"],
            id="tf-config-index-out-of-range",
        ),
        pytest.param(
            with_args(),
            tf_config({"cluster": TWO_WORKERS, "task": {"type": "master", "index": 0}}),
            ["TF_CONFIG task type 'master' is not one of ['chief', 'evaluator', 'ps', 'worker']"],
            id="tf-config-unknown-task-type",
        ),
        pytest.param(
            with_args(),
            tf_config({"cluster": TWO_WORKERS, "task": {"type": "worker", "index": "first"}}),
            ["TF_CONFIG task index must be a whole number from 0, got 'first'"],
            id="tf-config-index-not-a-number",
        ),
        pytest.param(
            with_args(),
            tf_config({"cluster": {"worker": "127.0.0.1:2222"}, "task": {"type": "worker", "index": 0}}),
            ["TF_CONFIG cluster 'worker' must be a list of \"host:port\" strings"],
            id="tf-config-address-not-a-list",
        ),
        pytest.param(
            with_args("--strategy", "mirrored"),
            tf_config({"cluster": TWO_WORKERS, "task": {"type": "worker", "index": 0}}),
            ["mirrored is single-machine but TF_CONFIG describes a cluster", "multi_worker_mirrored"],
            id="single-machine-strategy-in-cluster",
        ),
        pytest.param(
            with_args("--strategy", "parameter_server"),
            {},
            ["parameter_server needs TF_CONFIG with a chief, workers and at least one ps"],
            id="parameter-server-without-cluster",
        ),
    ],
)
def test_bad_input_fails_before_tensorflow_with_one_line(
    tmp_path: Path, without_tensorflow: dict[str, str], build: Build, env: dict[str, str], fragments: list[str]
) -> None:
    result = run_trainer(build(tmp_path), env={**without_tensorflow, **env}, timeout=60)
    assert_one_line_error(result, fragments)
    # Bad input leaves no empty job directory behind.
    assert not (tmp_path / "job").exists()


# ---------------------------------------------------------------- cases that need TensorFlow


# One epoch of small batches in which every file trains: a bad one is read during training,
# whatever its hash.
ONE_SHORT_EPOCH = ["--image-size", "16", "--epochs", "1", "--batch-size-per-replica", "2", "--validation-split", "0"]


def one_bad_image_among_good_ones(tmp: Path) -> list[str]:
    """The sample checked before training (the first image of each class) decodes; the
    bad file sorts last, so only the pipeline meets it."""
    write_pngs(tmp / "data" / "cats", 4)
    write_pngs(tmp / "data" / "dogs", 4, seed=1)
    (tmp / "data" / "dogs" / "zz.jpg").write_text("not an image")
    return [*job(tmp), "--data", str(tmp / "data"), *ONE_SHORT_EPOCH]


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        byte, number = number & 0x7F, number >> 7
        out.append(byte | (0x80 if number else 0))
        if not number:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _masked_crc32c(data: bytes) -> bytes:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    crc ^= 0xFFFFFFFF
    return ((((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF).to_bytes(4, "little")


def write_tfrecord(path: Path, *examples: dict[str, bytes | int]) -> None:
    """A TFRecord file of tf.train.Example records, encoded by hand: importing TensorFlow
    here would cost each test worker seconds. A wrong encoding fails the tests that use it:
    the trainer would report a different error than they expect."""
    records = b""
    for features in examples:
        encoded = b""
        for name, value in features.items():
            # Feature: bytes_list = 1 or int64_list = 3, each a list in field 1.
            feature = _field(1, _field(1, value)) if isinstance(value, bytes) else _field(3, _field(1, _varint(value)))
            encoded += _field(1, _field(1, name.encode()) + _field(2, feature))  # Features.feature map entry
        example = _field(1, encoded)  # Example.features
        length = len(example).to_bytes(8, "little")
        records += length + _masked_crc32c(length) + example + _masked_crc32c(example)
    path.write_bytes(records)


BLACK_PNG = png_bytes(np.zeros((8, 8, 3), dtype=np.uint8))


def tfrecord_label_out_of_range(tmp: Path) -> list[str]:
    write_tfrecord(tmp / "train.tfrecord", {"image": BLACK_PNG, "label": 7})
    return [*job(tmp), "--data", str(tmp / "train.tfrecord"), "--num-classes", "2"]


def tfrecord_label_out_of_range_later(tmp: Path) -> list[str]:
    """The first record (checked before training) is fine; the pipeline meets the second."""
    write_tfrecord(tmp / "train.tfrecord", {"image": BLACK_PNG, "label": 1}, {"image": BLACK_PNG, "label": 7})
    return [*job(tmp), "--data", str(tmp / "train.tfrecord"), "--num-classes", "2", *ONE_SHORT_EPOCH]


def tfrecord_without_image_feature(tmp: Path) -> list[str]:
    write_tfrecord(tmp / "train.tfrecord", {"img": BLACK_PNG, "label": 1})
    return [*job(tmp), "--data", str(tmp / "train.tfrecord"), "--num-classes", "2", "--steps-per-epoch", "1"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("build", "fragments"),
    [
        pytest.param(
            one_bad_image_among_good_ones,
            ["--data ", "an example could not be read during training: Unknown image file format"],
            id="bad-image-mid-training",
        ),
        pytest.param(
            tfrecord_label_out_of_range,
            ["--data ", "train.tfrecord: label 7 is outside [0, 2) of --num-classes 2"],
            id="tfrecord-label-out-of-range",
        ),
        pytest.param(
            tfrecord_label_out_of_range_later,
            ["--data ", "during training", "a label is outside [0, 2) of --num-classes 2", "7"],
            id="tfrecord-label-out-of-range-mid-training",
        ),
        pytest.param(
            tfrecord_without_image_feature,
            ["--data ", 'does not follow the documented spec: "image" = one encoded image', "its features: img, label"],
            id="tfrecord-without-image-feature",
        ),
    ],
)
def test_unreadable_data_fails_with_one_line(tmp_path: Path, build: Build, fragments: list[str]) -> None:
    result = run_trainer(build(tmp_path), timeout=180)
    assert_one_line_error(result, fragments)
    assert not (tmp_path / "job" / "metrics.json").exists()


@pytest.fixture
def silent_https_proxy() -> Iterator[dict[str, str]]:
    """A proxy that accepts connections and never answers: Cloud Storage is unreachable the
    same way whether or not the machine has a network, as behind a firewall that drops packets."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        yield {"HTTPS_PROXY": url, "https_proxy": url, "NO_PROXY": "", "no_proxy": ""}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flag", "build"),
    [
        pytest.param("--job-dir", gs_job_dir("gs://trainstack-unreachable-test/job"), id="job-dir"),
        pytest.param("--data", gs_data("gs://trainstack-unreachable-test/flowers"), id="data"),
    ],
)
def test_unreachable_cloud_storage_fails_within_the_bound(
    tmp_path: Path, silent_https_proxy: dict[str, str], flag: str, build: Build
) -> None:
    # TensorFlow's own retries would hold the node for minutes; the trainer's bound says it fired.
    result = run_trainer([*build(tmp_path), "--storage-timeout-seconds", "2"], env=silent_https_proxy, timeout=120)
    assert_one_line_error(
        result,
        [f"{flag} gs://trainstack-unreachable-test/", "cannot reach it: no answer from Cloud Storage within 2 s"],
    )
