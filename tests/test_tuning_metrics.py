"""A trial's metric read from its job directory the two ways AI Platform read it: the report
cloudml-hypertune writes (as the node agent copies it into the job directory) and the
TensorFlow summaries TensorFlow itself writes there, in a local directory and in Cloud Storage
(an emulator, through the real client library)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from test_status import BUCKET, emulator_server  # noqa: F401 (a fixture)
from trainstack.base.bucket import BucketError, DirectoryBucket, GcsBucket
from trainstack.tuning.metrics import read_metric
from trainstack_contract import LAYOUT

JOB = "jobs/q3_study_t3"
# Lines as cloudml-hypertune 0.1.0.dev6 writes them (sorted keys; values but the timestamp as text).
REPORT = (
    '{"accuracy": "0.5", "checkpoint_path": "", "global_step": "100", "timestamp": 1795653191.81, "trial": "3"}\n'
    '{"accuracy": "0.875", "checkpoint_path": "", "global_step": "200", "timestamp": 1795653192.81, "trial": "3"}\n'
    '{"accuracy": "0.75", "checkpoint_path": "", "global_step": "300", "timestamp": 1795653193.81, "trial": "3"}\n'
)


def write_keras_like_summaries(job_dir: Path) -> None:
    """What Keras's TensorBoard callback writes: epoch_accuracy in train/ and, after it each
    epoch, in validation/ (TensorFlow's own summary writer, tensors with the scalars plugin)."""
    import tensorflow as tf

    train = tf.summary.create_file_writer(str(job_dir / "logs" / "train"))
    validation = tf.summary.create_file_writer(str(job_dir / "logs" / "validation"))
    for epoch, (fit, held_out) in enumerate([(0.5, 0.4), (0.7, 0.6), (0.9, 0.65)]):
        with train.as_default():
            tf.summary.scalar("epoch_accuracy", fit, step=epoch)
            tf.summary.scalar("epoch_loss", 1 - fit, step=epoch)
        train.flush()
        with validation.as_default():
            tf.summary.scalar("epoch_accuracy", held_out, step=epoch)
        validation.flush()
    train.close()
    validation.close()


def write_simple_values(directory: Path, tag: str, values: list[float]) -> None:
    """TF1's summaries (simple_value), as Estimators wrote them, through TensorBoard's own writer."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(directory))
    for step, value in enumerate(values, start=1):
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
        writer.add_event(event_pb2.Event(step=step * 100, wall_time=1000.0 + step, summary=summary))
    writer.close()


@pytest.fixture
def bucket(tmp_path: Path) -> Path:
    return tmp_path / "bucket"


def test_the_hypertune_report_gives_the_last_value_reported_and_each_step(bucket: Path) -> None:
    report = bucket / JOB / LAYOUT.hypertune_metrics("chief")
    report.parent.mkdir(parents=True)
    report.write_text(REPORT)
    reading = read_metric(DirectoryBucket(bucket), JOB, "accuracy", "chief")
    assert reading.final == 0.75
    assert reading.steps == [(100, 0.5), (200, 0.875), (300, 0.75)]
    assert reading.source == str(report)


def test_a_workers_report_is_not_the_trials_metric(bucket: Path) -> None:
    report = bucket / JOB / LAYOUT.hypertune_metrics("worker-0")
    report.parent.mkdir(parents=True)
    report.write_text(REPORT)
    reading = read_metric(DirectoryBucket(bucket), JOB, "accuracy", "chief")
    assert reading.final is None


def test_lines_that_are_not_records_are_skipped_and_said(bucket: Path) -> None:
    report = bucket / JOB / LAYOUT.hypertune_metrics("chief")
    report.parent.mkdir(parents=True)
    report.write_text('not json\n{"accuracy": "NaN", "global_step": "1"}\n[1]\n' + REPORT.splitlines()[0] + "\n")
    reading = read_metric(DirectoryBucket(bucket), JOB, "accuracy", "chief")
    assert reading.final == 0.5
    assert reading.problems == [f"{report}: 3 line(s) are not cloudml-hypertune records with a number"]


@pytest.mark.slow
def test_keras_summaries_give_the_held_out_value_of_the_last_epoch(bucket: Path) -> None:
    write_keras_like_summaries(bucket / JOB)
    reading = read_metric(DirectoryBucket(bucket), JOB, "epoch_accuracy", "chief")
    assert reading.final == pytest.approx(0.65)
    assert reading.steps == [(0, pytest.approx(0.4)), (1, pytest.approx(0.6)), (2, pytest.approx(0.65))]
    assert reading.source == str(bucket / JOB / "logs" / "validation")


def test_tf1_simple_values_are_read_too_and_a_report_with_the_tag_comes_first(bucket: Path) -> None:
    write_simple_values(bucket / JOB / "eval", "accuracy", [0.1, 0.2])
    assert read_metric(DirectoryBucket(bucket), JOB, "accuracy", "chief").final == pytest.approx(0.2)
    report = bucket / JOB / LAYOUT.hypertune_metrics("chief")
    report.parent.mkdir(parents=True)
    report.write_text(REPORT)
    assert read_metric(DirectoryBucket(bucket), JOB, "accuracy", "chief").final == 0.75
    # A report without the tag leaves the summaries to say it.
    report.write_text(REPORT.replace('"accuracy"', '"loss"'))
    assert read_metric(DirectoryBucket(bucket), JOB, "accuracy", "chief").final == pytest.approx(0.2)


def test_a_tag_never_written_names_the_tags_that_were(bucket: Path) -> None:
    write_keras_like_summaries(bucket / JOB)
    reading = read_metric(DirectoryBucket(bucket), JOB, "val_acc", "chief")
    assert reading.final is None
    assert reading.missing("val_acc") == (
        "the metric tag 'val_acc' was never written; the tags written were: epoch_accuracy, epoch_loss"
    )
    empty = read_metric(DirectoryBucket(bucket), "jobs/nothing", "val_acc", "chief")
    assert empty.missing("val_acc").endswith("it wrote no summary and no cloudml-hypertune report")


def test_a_corrupt_event_file_is_said_and_the_others_still_read(bucket: Path) -> None:
    write_simple_values(bucket / JOB / "eval", "accuracy", [0.3])
    bad = bucket / JOB / "other" / "events.out.tfevents.1.host"
    bad.parent.mkdir(parents=True)
    # A record frame whose payload is no Event.
    bad.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00" + b"\x00" * 4 + b"\xff" * 5 + b"\x00" * 4)
    reading = read_metric(DirectoryBucket(bucket), JOB, "accuracy", "chief")
    assert reading.final == pytest.approx(0.3)


def test_a_job_directory_with_too_many_objects_is_refused_not_read_whole(bucket: Path) -> None:
    many = bucket / JOB / "shards"
    many.mkdir(parents=True)
    for index in range(5001):
        (many / f"{index}").write_bytes(b"")
    with pytest.raises(BucketError, match="holds more than 5000 objects"):
        read_metric(DirectoryBucket(bucket), JOB, "accuracy", "chief")


@pytest.fixture
def gcs_bucket(emulator_server: Any, monkeypatch: pytest.MonkeyPatch) -> Any:  # noqa: F811
    from google.cloud import storage

    emulator_server.wipe()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator_server.url)
    return storage.Client(project="test-project-123").create_bucket(BUCKET)


def test_the_same_reading_from_cloud_storage(gcs_bucket: Any, tmp_path: Path) -> None:
    local = tmp_path / "bucket"
    write_keras_like_summaries(local / JOB)
    report = local / JOB / LAYOUT.hypertune_metrics("chief")
    report.parent.mkdir(parents=True)
    report.write_text(REPORT.replace('"accuracy"', '"other"'))
    for path in sorted(local.rglob("*")):
        if path.is_file():
            gcs_bucket.blob(path.relative_to(local).as_posix()).upload_from_filename(str(path))
    objects = GcsBucket("test-project-123", BUCKET)
    reading = read_metric(objects, JOB, "epoch_accuracy", "chief")
    assert reading.final == pytest.approx(0.65)
    assert reading.source == f"gs://{BUCKET}/{JOB}/logs/validation"
    assert reading.tags_seen == {"epoch_accuracy", "epoch_loss", "other"}
    assert json.loads(json.dumps(reading.steps))[-1][0] == 2
    with pytest.raises(BucketError, match="holds more than 2 objects"):
        objects.names(JOB + "/", 2)
