"""A trial's metric, read the two ways AI Platform read it, from the trial's job directory.

1. The report of Google's ``cloudml-hypertune`` package. It rewrites, at each report, the file
   named by ``CLOUD_ML_HP_METRIC_FILE`` with its last 100 records, one JSON object per line:
   the tag's value and ``global_step`` as strings, ``timestamp`` a number, ``trial`` and
   ``checkpoint_path`` (cloudml-hypertune 0.1.0.dev6, hypertune/hypertune.py). The node agent
   points that variable at a node-local file and copies it to ``hypertune/<node>.metrics`` in
   the job directory; the chief's (the first node's) is the trial's.
2. The TensorFlow summaries under the job directory with the spec's tag (a scalar written by
   ``tf.summary.scalar``, Keras's TensorBoard callback or TF1's ``simple_value``). The final
   value is the last one written (by the event's wall time) anywhere under the directory: for
   Keras's callback, which writes ``epoch_accuracy`` in both ``train/`` and ``validation/``,
   that is the held-out value of the last epoch. Its intermediate values (for early stopping)
   are those of the same event directory, by step.

Event files are read with TensorBoard's own record reader and protos (the stub reader that
needs no TensorFlow: the tune command does not import TensorFlow).
"""

from __future__ import annotations

import json
import math
import posixpath
from dataclasses import dataclass, field

from trainstack.base.bucket import Bucket, BucketError
from trainstack_contract import LAYOUT, MAX_HYPERTUNE_METRICS_BYTES
from trainstack_contract.jobenv import HYPERTUNE_RECORD_KEYS

# cloudml-hypertune's keys beside the tag's.
HYPERTUNE_KEYS = HYPERTUNE_RECORD_KEYS
# A trial's job directory: its summaries, checkpoints, model. Bounded listing and reads.
MAX_JOB_OBJECTS = 5000
MAX_EVENT_FILE_BYTES = 64 << 20
MAX_EVENT_FILES = 64
# Intermediate values kept per trial (the last ones): what early stopping compares.
MAX_STEPS = 200
# Tags named in a message about a missing one.
MAX_TAGS_SHOWN = 12


@dataclass
class MetricReading:
    """What a trial's job directory says of the tag: its final value (None: not written), the
    values by step, where they came from, and the tags seen (for the message when it is not)."""

    final: float | None = None
    steps: list[tuple[int, float]] = field(default_factory=list)
    source: str | None = None
    tags_seen: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)

    def missing(self, tag: str) -> str:
        """The trial's failure when the tag was never written."""
        seen = sorted(self.tags_seen)
        shown = ", ".join(seen[:MAX_TAGS_SHOWN]) + (
            f" and {len(seen) - MAX_TAGS_SHOWN} more" if len(seen) > MAX_TAGS_SHOWN else ""
        )
        found = f"the tags written were: {shown}" if seen else "it wrote no summary and no cloudml-hypertune report"
        return f"the metric tag {tag!r} was never written; {found}"


def _number(value: object) -> float | None:
    """A finite number from a report's value (cloudml-hypertune writes strings)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def read_hypertune(data: bytes, tag: str, reading: MetricReading, where: str) -> bool:
    """The records of a cloudml-hypertune report that carry ``tag``, into ``reading``; whether
    there was one. Lines that are not such records are skipped (and counted as a problem)."""
    steps: list[tuple[int, float]] = []
    bad = 0
    for line in data.decode("utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if not isinstance(record, dict):
            bad += 1
            continue
        reading.tags_seen.update(str(key)[:100] for key in record if key not in HYPERTUNE_KEYS)
        if tag not in record:
            continue
        value, step = _number(record[tag]), _number(record.get("global_step", 0))
        if value is None:
            bad += 1
            continue
        steps.append((int(step or 0), value))
    if bad:
        reading.problems.append(f"{where}: {bad} line(s) are not cloudml-hypertune records with a number")
    if not steps:
        return False
    # The last record reported is the final one (AI Platform's finalMetric: the last seen).
    reading.final = steps[-1][1]
    reading.steps = sorted(dict(steps).items())[-MAX_STEPS:]
    reading.source = where
    return True


def _scalars(data: bytes, tag: str, tags_seen: set[str]) -> list[tuple[float, int, float]]:
    """(wall time, step, value) of every scalar with ``tag`` in one event file's bytes."""
    import tempfile

    from tensorboard.compat.proto import event_pb2  # type: ignore[import-untyped]
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow  # type: ignore[import-untyped]
    from tensorboard.util import tensor_util  # type: ignore[import-untyped]

    found = []
    # The stub reader takes a path: the bytes go through a temporary file.
    with tempfile.NamedTemporaryFile(suffix=".tfevents") as handle:
        handle.write(data)
        handle.flush()
        reader = pywrap_tensorflow.PyRecordReader_New(handle.name)
        while True:
            try:
                reader.GetNext()
            except Exception:  # noqa: BLE001 - the stub's end of file (and a torn last record) ends the file
                break
            event = event_pb2.Event.FromString(reader.record())
            for value in event.summary.value:
                tags_seen.add(value.tag[:100])
                if value.tag != tag:
                    continue
                kind = value.WhichOneof("value")
                number: float | None = None
                if kind == "simple_value":
                    number = value.simple_value
                elif kind == "tensor" and value.tensor.tensor_shape.dim == []:
                    number = _number(tensor_util.make_ndarray(value.tensor).item())
                if number is not None and math.isfinite(number):
                    found.append((event.wall_time, int(event.step), float(number)))
    return found


def read_summaries(objects: Bucket, names: list[str], tag: str, reading: MetricReading) -> None:
    """The tag's scalars in the event files among ``names``, into ``reading``."""
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    by_directory: dict[str, list[tuple[float, int, float]]] = {}
    event_files = [name for name in names if "tfevents" in posixpath.basename(name)]
    if len(event_files) > MAX_EVENT_FILES:
        reading.problems.append(f"{len(event_files)} event files; the newest {MAX_EVENT_FILES} were read")
        event_files = event_files[-MAX_EVENT_FILES:]
    for name in event_files:
        try:
            data = objects.read_upto(name, MAX_EVENT_FILE_BYTES)
        except BucketError as error:
            reading.problems.append(str(error))
            continue
        if not data:
            continue
        try:
            scalars = _scalars(data, tag, reading.tags_seen)
        except (DecodeError, ValueError, TypeError, KeyError, IndexError, OverflowError, AttributeError):
            # Whatever a trial's code wrote there: a file that is not an event file, or a
            # summary value whose payload is not a number tensor_util can read.
            reading.problems.append(f"{objects.location(name)} is not a TensorFlow event file trainstack can read")
            continue
        if scalars:
            by_directory.setdefault(posixpath.dirname(name), []).extend(scalars)
    if not by_directory:
        return
    directory, values = max(by_directory.items(), key=lambda item: max(item[1]))
    values.sort()
    reading.final = values[-1][2]
    reading.steps = sorted({step: value for _, step, value in values}.items())[-MAX_STEPS:]
    reading.source = objects.location(directory)


def read_metric(objects: Bucket, job_prefix: str, tag: str, chief: str) -> MetricReading:
    """The tag's value in the trial's job directory: the chief's cloudml-hypertune report when
    it carries the tag, else the TensorFlow summaries. :class:`BucketError` when the
    directory cannot be listed."""
    reading = MetricReading()
    names = objects.names(job_prefix.rstrip("/") + "/", MAX_JOB_OBJECTS)
    report = posixpath.join(job_prefix, LAYOUT.hypertune_metrics(chief))
    if report in names:
        try:
            data = objects.read_upto(report, MAX_HYPERTUNE_METRICS_BYTES)
        except BucketError as error:
            reading.problems.append(str(error))
            data = None
        if data and read_hypertune(data, tag, reading, objects.location(report)):
            return reading
    read_summaries(objects, names, tag, reading)
    return reading
