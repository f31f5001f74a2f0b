"""`trainstack jobs`: each job of a standing cluster as its status objects tell it: the stack's
own job (job 0) and every queued one, with when it ran, on which nodes, what it cost at
catalog prices and its final metric."""

from __future__ import annotations

import json
import math
import posixpath
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from trainstack.base.bucket import Bucket, BucketError, read_json
from trainstack.base.records import record_json
from trainstack.jobqueue.queue import job_prefix, job_state
from trainstack.jobstate.report import parse_time, printable
from trainstack.stackmodel.cost import hourly_together
from trainstack_contract import LAYOUT
from trainstack_contract.jobenv import HYPERTUNE_RECORD_KEYS
from trainstack_contract.lifecycle import ENDED_JOB_STATES, JobState
from trainstack_contract.queue import QueueEntry

# The stack's own job (job 0) before its first status: it is not queued, its machines have not run it.
NO_STATUS = "NO STATUS"
SECONDS_PER_HOUR = 3600
# metrics.json keys shown as the job's final metric, the first one present.
METRIC_KEYS = ("eval_accuracy", "final_accuracy", "eval_loss", "final_loss")


@dataclass(frozen=True)
class JobSource:
    """Where one job's status objects are: the bucket and the job directory's prefix in it."""

    id: int
    name: str
    objects: Bucket
    prefix: str
    entry: QueueEntry | None = None  # None for job 0, the stack's own


@dataclass(frozen=True)
class JobRow:
    id: int
    name: str
    state: str
    job_dir: str
    submitted: str | None = None
    started: str | None = None
    ended: str | None = None
    duration_seconds: float | None = None
    nodes: dict[str, str] = field(default_factory=dict)
    cost_usd: float | None = None
    metric: tuple[str, float] | None = None
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return record_json(
            self,
            duration_seconds=None if self.duration_seconds is None else round(self.duration_seconds, 1),
            cost_usd=None if self.cost_usd is None else round(self.cost_usd, 4),
            metric=None if self.metric is None else {"name": self.metric[0], "value": self.metric[1]},
        )


def _history_time(status: dict[str, Any], state: str) -> str | None:
    """When the status first entered ``state``, from its history (oldest first)."""
    for entry in status.get("history") or []:
        if isinstance(entry, dict) and entry.get("state") == state and isinstance(entry.get("time"), str):
            return str(entry["time"])
    return None


def _metric(metrics: dict[str, Any] | None) -> tuple[str, float] | None:
    for key in METRIC_KEYS:
        value = (metrics or {}).get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return key, float(value)
    return None


def reported_metric(data: bytes | None) -> tuple[str, float] | None:
    """The last metric a cloudml-hypertune report holds (its name, its value), or None: the
    job's own final metric, as AI Platform took the last one reported."""
    for line in reversed((data or b"").decode("utf-8", errors="replace").splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        names = [key for key in record if key not in HYPERTUNE_RECORD_KEYS] if isinstance(record, dict) else []
        if len(names) != 1 or isinstance(record[names[0]], bool):
            continue
        try:
            value = float(record[names[0]])
        except (TypeError, ValueError):
            continue
        if math.isfinite(value):
            return str(names[0])[:60], value
    return None


def _seconds(start: str | None, end: str | None, now: float) -> float | None:
    began = parse_time(start)
    if began is None:
        return None
    finished = parse_time(end)
    return max(0.0, (finished.timestamp() if finished is not None else now) - began.timestamp())


def job_row(source: JobSource, node_hourly: Mapping[str, float | None], now: float) -> JobRow:
    """One job's row; a status object that cannot be read is the row's problem, not the listing's.
    ``node_hourly``: each node's price an hour. A job costs its nodes' prices: all of them, or,
    queued one_node, the one that recorded a status."""
    entry = source.entry
    submitted = entry.submitted if entry else None
    where = source.objects.location(source.prefix)
    try:
        status = read_json(source.objects, posixpath.join(source.prefix, LAYOUT.job_status))
        node_states = {}
        for node in node_hourly:
            node_status = read_json(source.objects, posixpath.join(source.prefix, LAYOUT.node_status(node)))
            if node_status is not None:
                node_states[node] = str(node_status.get("state", "?"))[:20]
        metrics = read_json(source.objects, posixpath.join(source.prefix, LAYOUT.metrics)) if status else None
        # The job's own report first (the chief's, else the one node's that ran it alone).
        reported = None
        for node in node_states if status else ():
            reported = reported_metric(
                source.objects.read(posixpath.join(source.prefix, LAYOUT.hypertune_metrics(node)))
            )
            if reported is not None:
                break
    except BucketError as error:
        return JobRow(source.id, source.name, "UNREADABLE", where, submitted, problem=str(error))
    state = str((status or {}).get("state") or (JobState.QUEUED if entry else NO_STATUS))[:20]
    ended = str(status.get("time")) if status is not None and state in ENDED_JOB_STATES else None
    if entry is not None and entry.cancelled is not None and state not in ENDED_JOB_STATES:
        # Cancelled: a queued job never starts; a running one's nodes are ending it.
        state, ended = JobState.CANCELLED, entry.cancelled
    started = _history_time(status, JobState.RUNNING) if status is not None else None
    duration = _seconds(started, ended, now) if started else None
    hourly = hourly_together([node_hourly[node] for node in (node_states if entry and entry.one_node else node_hourly)])
    cost = None if duration is None or hourly is None else hourly * duration / SECONDS_PER_HOUR
    return JobRow(
        source.id,
        source.name,
        state,
        where,
        submitted,
        started,
        ended,
        duration,
        node_states,
        cost,
        reported or _metric(metrics),
    )


def _short_time(value: str | None) -> str:
    """2026-11-25T21:40:00.123000Z as 2026-11-25 21:40:00."""
    return "-" if value is None else value[:19].replace("T", " ")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = round(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


COLUMNS = ("ID", "NAME", "STATE", "SUBMITTED", "STARTED", "ENDED", "DURATION", "NODES", "COST", "METRIC")


def print_rows(rows: Sequence[JobRow], out: IO[str] | None = None) -> None:
    out = out or sys.stdout
    table = [COLUMNS]
    for row in rows:
        table.append(
            (
                str(row.id),
                printable(row.name),
                printable(row.state),
                _short_time(row.submitted),
                _short_time(row.started),
                _short_time(row.ended),
                _duration(row.duration_seconds),
                str(len(row.nodes)),
                "-" if row.cost_usd is None else f"${row.cost_usd:.2f}",
                "-" if row.metric is None else f"{row.metric[0]}={row.metric[1]:.4g}",
            )
        )
    widths = [max(len(line[column]) for line in table) for column in range(len(COLUMNS))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip(), file=out)
    for row in rows:
        if row.problem:
            print(f"warning: job {row.id}: {printable(row.problem)}", file=sys.stderr)


def print_json(rows: Sequence[JobRow], out: IO[str] | None = None) -> None:
    json.dump({"jobs": [row.to_json() for row in rows]}, out or sys.stdout, indent=2, sort_keys=True)
    print(file=out or sys.stdout)


def outstanding(entries: Sequence[QueueEntry], objects: Bucket) -> list[QueueEntry]:
    """The queue's jobs still to end: neither cancelled nor ended (a job with no status yet is
    one a node has still to take)."""
    return [e for e in entries if e.cancelled is None and job_state(objects, job_prefix(e)) not in ENDED_JOB_STATES]
