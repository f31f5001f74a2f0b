"""Real images from class folders and TFRecord files, and fast failures on bad paths."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from trainer_test_helpers import REPOSITORY_ROOT, png_bytes, read_metrics, run_trainer, trainer_env

from trainstack.localrun.bare_trainers import run_local_cluster

DIGIT_CLASSES = 10


def digit_images(count: int = 1800) -> tuple[np.ndarray, np.ndarray]:
    """The digits 0-9 as 16x16 RGB uint8 pictures, each drawn by Pillow in its built-in font
    at a random size, place, ink and background shade, under noise: the class is in the
    glyph's shape alone. (scikit-learn's handwritten digits served here before; installed
    beside TensorFlow, scikit-learn made every trainer process of the suite import it through
    Keras, about 1.4 s of CPU each: docs/benchmarks.md.)"""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(0)
    fonts = [ImageFont.load_default(size=size) for size in (10, 11, 12, 13, 14)]
    images = np.empty((count, 16, 16, 3), dtype=np.uint8)
    labels = np.arange(count) % DIGIT_CLASSES
    for index, label in enumerate(labels):
        canvas = Image.new("L", (16, 16), color=int(rng.integers(0, 80)))
        draw = ImageDraw.Draw(canvas)
        font = fonts[int(rng.integers(len(fonts)))]
        left, top, right, bottom = draw.textbbox((0, 0), str(label), font=font)
        x = int(rng.integers(0, 16 - (right - left) + 1)) - left
        y = int(rng.integers(0, 16 - (bottom - top) + 1)) - top
        draw.text((x, y), str(label), fill=int(rng.integers(170, 256)), font=font)
        pixels = np.asarray(canvas, dtype=np.float32) + rng.normal(0.0, 24.0, (16, 16))
        images[index] = np.clip(pixels, 0, 255).astype(np.uint8)[..., None]
    return images, labels


@pytest.fixture(scope="module")
def digits_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("digits")
    images, labels = digit_images()
    for index, (image, label) in enumerate(zip(images, labels, strict=True)):
        class_dir = root / f"digit_{label}"
        class_dir.mkdir(exist_ok=True)
        (class_dir / f"{index:04d}.png").write_bytes(png_bytes(image))
    return root


@pytest.mark.slow
def test_image_folders_train_well_above_chance(digits_folder: Path, job_dir: Path) -> None:
    result = run_trainer(
        [
            "--job-dir",
            str(job_dir),
            "--data",
            str(digits_folder),
            "--image-size",
            "32",
            "--epochs",
            "6",
            "--batch-size-per-replica",
            "32",
            "--learning-rate",
            "0.002",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = read_metrics(job_dir)
    assert metrics["data"] == "images"
    assert metrics["num_classes"] == DIGIT_CLASSES
    # One pass over the ~80 % training share per epoch.
    assert 40 <= metrics["steps_per_epoch"] <= 50
    # Chance is 10 %; held-out images the network never saw.
    assert metrics["eval_accuracy"] > 0.6, metrics
    assert metrics["loss_history"][-1] < metrics["loss_history"][0]


@pytest.mark.slow
# With 2 logical CPUs (MirroredStrategy), counting the records before the strategy was built ran
# TensorFlow ops too early, and every node failed: "Collective ops must be configured at program
# startup". The same held for two or more workers.
@pytest.mark.parametrize("logical_cpus", [1, 2])
def test_tfrecord_files_with_the_documented_feature_spec(tmp_path: Path, job_dir: Path, logical_cpus: int) -> None:
    records = tmp_path / "records"
    records.mkdir()
    writer_script = (
        "import sys, numpy as np, tensorflow as tf\n"
        "from test_trainer_data import digit_images, png_bytes\n"
        "images, labels = digit_images()\n"
        "for shard in range(2):\n"
        "    path = f'{sys.argv[1]}/digits-{shard}.tfrecord'\n"
        "    with tf.io.TFRecordWriter(path) as writer:\n"
        "        for image, label in list(zip(images, labels))[shard::2][:300]:\n"
        "            feature = {\n"
        "                'image': tf.train.Feature(bytes_list=tf.train.BytesList(value=[png_bytes(image)])),\n"
        "                'label': tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),\n"
        "            }\n"
        "            example = tf.train.Example(features=tf.train.Features(feature=feature))\n"
        "            writer.write(example.SerializeToString())\n"
    )
    written = subprocess.run(
        [sys.executable, "-c", writer_script, str(records)],
        cwd=Path(__file__).parent,
        env=trainer_env({"PYTHONPATH": f"{REPOSITORY_ROOT}:{Path(__file__).parent}"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert written.returncode == 0, written.stderr[-3000:]
    result = run_trainer(
        [
            "--job-dir",
            str(job_dir),
            "--data",
            str(records),
            "--num-classes",
            "10",
            "--image-size",
            "32",
            "--epochs",
            "2",
            "--batch-size-per-replica",
            "32",
            "--logical-cpus",
            str(logical_cpus),
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = read_metrics(job_dir)
    assert metrics["data"] == "tfrecord"
    assert metrics["steps_per_epoch"] == pytest.approx(480 // (32 * logical_cpus), abs=3)  # ~80 % of 600
    assert metrics["loss_history"][-1] < metrics["loss_history"][0]


def test_missing_data_path_fails_fast_with_one_line(job_dir: Path, without_tensorflow: dict[str, str]) -> None:
    # Answered before TensorFlow is imported: there is none to import here.
    result = run_trainer(["--job-dir", str(job_dir), "--data", str(job_dir / "nowhere")], env=without_tensorflow)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("trainer: error: --data ")
    assert "no such file or directory" in result.stderr
    assert not job_dir.exists()


@pytest.mark.slow
def test_empty_image_folder_fails_on_every_node_without_hanging(tmp_path: Path, job_dir: Path) -> None:
    empty = tmp_path / "empty"
    (empty / "class_a").mkdir(parents=True)
    result = run_local_cluster(
        workers=2, args=["--data", str(empty)], job_dir=job_dir, env=trainer_env(), timeout=120, echo=False
    )
    assert not result.timed_out
    assert result.exit_codes == {"worker-0": 2, "worker-1": 2}, result.log_text()[-3000:]
    assert "no .jpg/.jpeg/.png/.bmp/.gif images" in result.log_text("worker-1")


@pytest.mark.slow
def test_shards_written_from_an_image_folder_train_and_are_never_overwritten_unasked(
    digits_folder: Path, tmp_path: Path, job_dir: Path
) -> None:
    shards = tmp_path / "shards"
    command = [sys.executable, "-m", "trainer.shards", "--images", str(digits_folder), "--out", str(shards)]
    written = subprocess.run(
        [*command, "--shards", "4"], cwd=REPOSITORY_ROOT, env=trainer_env(), capture_output=True, text=True, timeout=300
    )
    assert written.returncode == 0, written.stderr[-3000:]
    assert sorted(p.name for p in shards.glob("*.tfrecord")) == [f"train-0000{i}-of-00004.tfrecord" for i in range(4)]
    assert (shards / "labels.txt").read_text().splitlines() == [f"digit_{d}" for d in range(DIGIT_CLASSES)]
    assert f"--data {shards}/*.tfrecord --num-classes {DIGIT_CLASSES}" in written.stdout

    before = {path.name: path.read_bytes() for path in shards.iterdir()}
    again = subprocess.run(
        [*command, "--shards", "2"], cwd=REPOSITORY_ROOT, env=trainer_env(), capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 2
    assert "pass --overwrite to replace them" in again.stderr
    assert "Traceback" not in again.stderr
    assert {path.name: path.read_bytes() for path in shards.iterdir()} == before
    # Asked to, a new write replaces every shard of the old one (a glob would read stale ones).
    replaced = subprocess.run(
        [*command, "--shards", "2", "--overwrite"],
        cwd=REPOSITORY_ROOT,
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert replaced.returncode == 0, replaced.stderr[-3000:]
    assert sorted(p.name for p in shards.glob("*.tfrecord")) == [f"train-0000{i}-of-00002.tfrecord" for i in range(2)]

    # Two workers, each reading its own two files, several at once.
    result = run_local_cluster(
        workers=2,
        args=[
            "--data",
            f"{shards}/*.tfrecord",
            "--num-classes",
            str(DIGIT_CLASSES),
            "--image-size",
            "16",
            "--epochs",
            "2",
            "--batch-size-per-replica",
            "32",
            "--augment",
            "flip",
        ],
        job_dir=job_dir,
        env=trainer_env(),
        timeout=300,
        threads_per_node=1,
        echo=False,
    )
    assert result.chief_exit_code == 0, result.log_text()[-5000:]
    metrics = read_metrics(job_dir)
    assert metrics["data"] == "tfrecord"
    assert metrics["loss_history"][-1] < metrics["loss_history"][0]


@pytest.mark.parametrize("out", ["shards\n", "a\x00b", "", "x" * 5000])
def test_shards_refuse_an_output_path_that_is_no_path_naming_the_flag(tmp_path: Path, out: str) -> None:
    from trainer.shards import main

    with pytest.raises(SystemExit) as exited:
        main(["--images", str(tmp_path), "--out", out])
    assert exited.value.code == 2
    assert not list(tmp_path.iterdir())


def test_each_record_is_read_by_one_pipeline_and_held_out_alike_however_files_are_shared(tmp_path: Path) -> None:
    """Files shared out among pipelines (one per worker) or records among them: every training
    record reaches exactly one pipeline, and the held-out set is the same either way."""
    import tensorflow as tf

    from trainer.data_pipeline import _tfrecords
    from trainer.shards import example_bytes

    files = []
    for shard in range(3):
        path = tmp_path / f"part-{shard}.tfrecord"
        with tf.io.TFRecordWriter(str(path)) as writer:
            for index in range(40):
                writer.write(example_bytes(png_bytes(np.full((4, 4, 3), index, np.uint8)), shard))
        files.append(str(path))

    def read(pipelines: int, held_out: bool) -> list[tuple[int, int]]:
        seen = []
        for pipeline in range(pipelines):
            context = tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=pipeline)
            dataset = _tfrecords(tuple(files), 4, 3, 0.2, held_out, context)
            seen += [(int(label), int(image[0, 0, 0])) for image, label in dataset.as_numpy_iterator()]
        return seen

    for pipelines in (1, 2, 3, 4):  # 4 pipelines > 3 files: records, not files, are shared out
        training, held_out = read(pipelines, False), read(pipelines, True)
        assert len(training) == len(set(training)), pipelines
        assert set(training) | set(held_out) == {(shard, index) for shard in range(3) for index in range(40)}
        assert not set(training) & set(held_out)
        if pipelines == 1:
            first_held_out = set(held_out)
        assert set(held_out) == first_held_out, pipelines
    assert 0 < len(first_held_out) < 60


def test_decoded_images_are_cached_only_where_they_fit() -> None:
    from trainer.data_pipeline import cache_fits, tfrecord_share
    from trainer.data_sources import DataSource

    gib = 1024**3
    # 10 000 images of 224 x 224 x 3 bytes: 1.4 GiB, within a quarter of 16 GiB, not of 4 GiB.
    assert cache_fits(10_000, 224, 16 * gib)
    assert not cache_fits(10_000, 224, 4 * gib)
    assert not cache_fits(None, 224, 16 * gib)
    # Records not counted (--steps-per-epoch given): the held-out share is unknown too, not 0.
    uncounted = DataSource(kind="tfrecord", num_classes=5, num_train_examples=None, num_eval_examples=0)
    assert tfrecord_share(uncounted, training=False, pipelines=2) is None
    counted = DataSource(kind="tfrecord", num_classes=5, num_train_examples=800, num_eval_examples=200)
    assert tfrecord_share(counted, training=True, pipelines=2) == 400
    assert tfrecord_share(counted, training=False, pipelines=2) == 100
