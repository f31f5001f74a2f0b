"""The job's state after ``pulumi up``, read from its status objects (``trainstack status`` prints it).

The boot scripts write the job's state into the job directory (``trainstack_contract``,
:class:`~trainstack_contract.BucketLayout`): ``status/job.json`` (the chief's, whose ``time`` it
rewrites as a heartbeat while the job runs), ``status/<node>.json`` for every node, and
``metrics.json`` when the job has finished. This module reads them through the
bucket interface (trainstack.base.bucket): the stack's bucket, or the directory that stands in
for it in ``trainstack local``.

Every read is bounded (:data:`~trainstack.base.bucket.MAX_OBJECT_BYTES`); an object that is too large, not UTF-8 or
not a JSON object ends the command with one line saying which object and why.
"""

from __future__ import annotations

import json
import posixpath
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from trainstack.base.bucket import Bucket, read_json
from trainstack.base.records import record_json
from trainstack_contract import LAYOUT
from trainstack_contract.lifecycle import JobState
from trainstack_contract.status import CLUSTER_PORT_WARNING, MAX_REASON_CHARS, MAX_WARNINGS, TF_CONFIG_DOCS

if TYPE_CHECKING:
    from trainstack.stackmodel.resolved import ResolvedStack

# How much of metrics.json the text report shows on its line.
METRICS_CHARACTERS = 2000


def printable(value: object) -> str:
    """``value`` as text safe to print: the objects come from a bucket, not from us."""
    return "".join(ch if ch.isprintable() else "?" for ch in str(value))


# --- The report ----------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeStatus:
    name: str
    status: dict[str, Any] | None


@dataclass(frozen=True)
class StatusReport:
    stack: str
    job: str | None
    # gs://BUCKET/jobs/JOB on the cloud, the local directory with --local; None without a job.
    job_dir: str | None
    source: str  # "gcs" or "local"
    job_status: dict[str, Any] | None
    nodes: tuple[NodeStatus, ...]
    # Seconds since the chief last rewrote its RUNNING job status; None unless RUNNING.
    heartbeat_age_seconds: float | None
    heartbeat_timeout_seconds: int | None
    metrics: dict[str, Any] | None

    @property
    def state(self) -> str | None:
        state = (self.job_status or {}).get("state")
        return state if isinstance(state, str) else None

    def to_json(self) -> dict[str, Any]:
        return record_json(
            self,
            heartbeat_age_seconds=None if self.heartbeat_age_seconds is None else round(self.heartbeat_age_seconds, 3),
            nodes=[{"name": node.name, "status": node.status} for node in self.nodes],
            state=self.state,
        )


def node_names(stack: ResolvedStack) -> list[str]:
    """The nodes that write status objects: the cluster's, then the TPU VM."""
    names = [node.name for node in stack.cluster.nodes] if stack.cluster else []
    return names + ([stack.tpu.name] if stack.tpu else [])


def parse_time(value: object) -> datetime | None:
    """A status object's ``time`` (``date -u +%Y-%m-%dT%H:%M:%S.%NZ``), or None."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def heartbeat_age(job_status: dict[str, Any] | None, now: float) -> float | None:
    """Seconds since the chief's heartbeat: ``now`` minus the ``time`` of a RUNNING job status."""
    if job_status is None or job_status.get("state") != JobState.RUNNING:
        return None
    written = parse_time(job_status.get("time"))
    return None if written is None else now - written.timestamp()


def build_report(
    stack: ResolvedStack, objects: Bucket, source: str, job_dir: str | None, now: float | None = None
) -> StatusReport:
    job = stack.job
    timeout = stack.cluster.heartbeat_timeout_seconds if stack.cluster else None
    if job is None:
        return StatusReport(stack.stack, None, None, source, None, (), None, timeout, None)
    # jobs/<name> of the stack's bucket, or job.job_dir's folder in the team's own bucket.
    prefix = job.job_dir_prefix or posixpath.join(LAYOUT.jobs, job.name)
    job_status = read_json(objects, posixpath.join(prefix, LAYOUT.job_status))
    nodes = tuple(
        NodeStatus(name, read_json(objects, posixpath.join(prefix, LAYOUT.node_status(name))))
        for name in node_names(stack)
    )
    metrics = read_json(objects, posixpath.join(prefix, LAYOUT.metrics))
    age = heartbeat_age(job_status, time.time() if now is None else now)
    return StatusReport(stack.stack, job.name, job_dir, source, job_status, nodes, age, timeout, metrics)


def _duration(seconds: float) -> str:
    whole = round(seconds)
    if whole < 0:
        return f"{-whole} s in the future (clock skew?)"
    if whole < 120:
        return f"{whole} s ago"
    if whole < 7200:
        return f"{whole // 60} min {whole % 60} s ago"
    return f"{whole // 3600} h {whole % 3600 // 60} min ago"


def _status_line(status: dict[str, Any]) -> str:
    state = printable(status.get("state", "?"))
    exit_code = status.get("exit_code")
    line = f"{state:<11} exit {'-' if exit_code is None else printable(exit_code):<4} at {printable(status.get('time', '?'))}"
    reason = status.get("reason")
    return line + (f"  ({printable(reason)})" if reason else "")


# A node's history as shown: its last few states (the object keeps up to 50).
HISTORY_SHOWN = 10


def history_text(status: dict[str, Any]) -> str | None:
    """A node's way to its state, oldest first ("RUNNING -> PREEMPTED (SIGTERM) -> RUNNING"),
    or None when it has not changed state."""
    entries = [entry for entry in status.get("history") or [] if isinstance(entry, dict)]
    if len(entries) < 2:
        return None
    shown = [
        printable(entry.get("state", "?")) + (f" ({printable(entry['reason'])})" if entry.get("reason") else "")
        for entry in entries[-HISTORY_SHOWN:]
    ]
    return ("... -> " if len(entries) > HISTORY_SHOWN else "") + " -> ".join(shown)


def _warnings(status: dict[str, Any] | None) -> list[tuple[str, str]]:
    """A node's warnings, by name, as far as they are what a node writes (bounded, text)."""
    value = (status or {}).get("warnings")
    if not isinstance(value, dict):
        return []
    return [
        (name, text[:MAX_REASON_CHARS])
        for name, text in list(value.items())[:MAX_WARNINGS]
        if isinstance(name, str) and isinstance(text, str)
    ]


def warning_lines(nodes: Iterable[tuple[str, dict[str, Any] | None]]) -> list[str]:
    """What the nodes' status objects warn of, one line each: code that ignored TF_CONFIG once
    for every node it ran on, with what it means and where the docs say what to do; any other
    warning as its node wrote it."""
    ignored: list[str] = []
    lines: list[str] = []
    for node, status in nodes:
        for name, text in _warnings(status):
            if name == CLUSTER_PORT_WARNING:
                ignored.append(printable(node))
            else:
                lines.append(f"warning ({printable(node)}): {printable(text)}")
    if ignored:
        lines.insert(
            0,
            f"warning: the job's code ignored TF_CONFIG on {', '.join(ignored)} (it never listened on the "
            "node's TF_CONFIG port): each of these nodes trained a model of its own instead of one model with "
            "the others, all writing this job directory, all billed; the code must build its strategy from "
            f"TF_CONFIG (see {TF_CONFIG_DOCS})",
        )
    return lines


def print_report(report: StatusReport, out: IO[str] | None = None) -> None:
    out = out or sys.stdout
    if report.job is None:
        print(f"stack {report.stack} has no job (trainstack:job is absent or none): nothing writes status", file=out)
        return
    if report.job_status is None:
        print(f"job {report.job}: no status yet", file=out)
    else:
        print(f"job {report.job}: {_status_line(report.job_status)}", file=out)
    if report.heartbeat_age_seconds is not None:
        line = f"chief heartbeat: {_duration(report.heartbeat_age_seconds)}"
        if (
            report.heartbeat_timeout_seconds is not None
            and report.heartbeat_age_seconds > report.heartbeat_timeout_seconds
        ):
            line += (
                f"; older than the {report.heartbeat_timeout_seconds} s heartbeat timeout: "
                "the chief may be gone (`trainstack logs --node chief`)"
            )
        print(line, file=out)
    for warning in warning_lines((node.name, node.status) for node in report.nodes):
        print(warning, file=out)
    for node in report.nodes:
        text = "no status yet" if node.status is None else _status_line(node.status)
        print(f"  {node.name:<10} {text}", file=out)
        history = None if node.status is None else history_text(node.status)
        if history:
            print(f"  {'':<10} history: {history}", file=out)
    print(f"job directory: {report.job_dir}", file=out)
    if report.metrics is not None:
        shown = json.dumps(report.metrics, sort_keys=True)
        if len(shown) > METRICS_CHARACTERS:
            shown = shown[:METRICS_CHARACTERS] + " ..."
        print(f"{LAYOUT.metrics}: {printable(shown)}", file=out)


def default_workdir(stack: str) -> Path:
    """Where `trainstack local` keeps a stack's run (its --workdir default)."""
    return Path(".trainstack-local") / stack


def local_bucket(workdir: Path, stack: ResolvedStack) -> Path:
    """The stand-in bucket of a `trainstack local` run (``LocalStackRun.bucket``)."""
    return workdir / "bucket" / stack.bucket_name
