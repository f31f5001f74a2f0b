"""``trainstack jobs`` and ``trainstack cancel``: a standing cluster's jobs, listed from the
queue's index and their status objects, and a queued or running job ended.

`jobs` lists the stack's own ``trainstack:job`` as job 0, then the queue's jobs in submit order
(the latest ``--limit``): state, when each was submitted, started and ended, its duration, the
nodes that recorded a status, its cost at catalog prices (the hourly price of the machines it ran
on, as `trainstack cost` has them: all of the stack's, or the one node of a one-node job; times the
duration) and its final metric, by name: the last its code reported with cloudml-hypertune, else
the built-in trainer's metrics.json, else, for a tuning trial, what its study read from its
summaries.

`cancel` marks the job's entry cancelled under a generation precondition: a queued job never
starts; the nodes running it end its code within a poll, record CANCELLED and go on with the
queue. A job that has ended (SUCCEEDED, FAILED, CANCELLED) is reported, exit 1, nothing changed.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import TYPE_CHECKING, Any

from trainstack.commands.parsers import add_documented_command
from trainstack.commands.queueargs import QueueUsageError, add_queue_arguments, queue_place, stack_job_objects
from trainstack.commands.stackargs import add_stack_arguments, load_resolved
from trainstack.jobstate.report import StatusReadError

if TYPE_CHECKING:
    from trainstack.jobqueue.history import JobRow
    from trainstack.stackmodel.resolved import ResolvedStack

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000


def _limit(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"{text[:20]!r}: a whole number from 1 to {MAX_LIMIT}")
    return int(text)


def job_rows(args: argparse.Namespace, stack: ResolvedStack, limit: int) -> list[JobRow]:
    """One row per job: the stack's own (job 0), then the latest ``limit`` of the queue;
    QueueUsageError or StoreError when the queue cannot be read."""
    from trainstack.jobqueue.history import JobSource, job_row
    from trainstack.jobqueue.queue import job_prefix, read_index
    from trainstack.stackmodel.cost import node_hourly

    place = queue_place(args, stack)
    index = read_index(place.store)
    sources = []
    own = stack_job_objects(stack, place.bucket)
    if own is not None and stack.job is not None:
        sources.append(JobSource(0, stack.job.name, *own))
    sources += [
        JobSource(entry.id, entry.name, place.objects, job_prefix(entry), entry) for entry in index.entries[-limit:]
    ]
    prices, now = node_hourly(stack), time.time()
    return with_trial_metrics([job_row(source, prices, now) for source in sources], place.store)


def with_trial_metrics(rows: list[JobRow], store: Any) -> list[JobRow]:
    """``rows``, where a tuning trial's job reported no metric of its own (no hypertune report,
    no metrics.json) with the one its study read for it from its summaries."""
    from trainstack.jobqueue.store import StoreError
    from trainstack.tuning.engine import read_study
    from trainstack.tuning.study import StudyFormatError, study_of_trial_job

    studies: dict[str, Any] = {}
    result = []
    for row in rows:
        name = study_of_trial_job(row.name)
        if row.metric is None and name is not None and row.id > 0:
            if name not in studies:
                try:
                    studies[name] = read_study(store, name)
                except (StudyFormatError, StoreError):
                    # A study that cannot be read leaves the row as it is: `tune status` says why.
                    studies[name] = None
            study = studies[name]
            trial = next((t for t in study.trials if t.job_id == row.id), None) if study is not None else None
            if trial is not None and trial.metric is not None:
                row = dataclasses.replace(row, metric=(study.spec.hyperparameter_metric_tag, trial.metric))
        result.append(row)
    return result


def cmd_jobs(args: argparse.Namespace) -> int:
    from trainstack.jobqueue.history import print_json, print_rows
    from trainstack.jobqueue.store import StoreError

    stack = load_resolved(args)
    try:
        rows = job_rows(args, stack, args.limit)
    except (QueueUsageError, StoreError) as error:
        print(f"trainstack: jobs: {error}", file=sys.stderr)
        return 1
    if args.json:
        print_json(rows)
    elif rows:
        print_rows(rows)
    else:
        print(f"stack {stack.stack} has no job yet: `trainstack submit --stack {stack.stack} ...` queues one")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from trainstack.jobqueue.history import job_state
    from trainstack.jobqueue.queue import CancelRefused, cancel, job_prefix
    from trainstack.jobqueue.store import StoreError
    from trainstack_contract.lifecycle import ENDED_JOB_STATES
    from trainstack_contract.status import utc_now

    stack = load_resolved(args)
    if args.id == 0:
        print(
            "trainstack: cancel: job 0 is the stack's own trainstack:job, not a queued one: "
            f"`trainstack stop --stack {stack.stack}` stops its machines",
            file=sys.stderr,
        )
        return 1
    try:
        place = queue_place(args, stack)

        def ended_state(entry: Any) -> str | None:
            state = job_state(place.objects, job_prefix(entry))
            return state if state in ENDED_JOB_STATES else None

        entry = cancel(place.store, args.id, utc_now(), ended_state)
    except (QueueUsageError, StoreError, StatusReadError, CancelRefused) as error:
        print(f"trainstack: cancel: {error}", file=sys.stderr)
        return 1
    print(
        f"job {entry.id} ({entry.job_dir_name}) cancelled: if queued it will not run; if running, its nodes end it "
        "and go on with the queue"
    )
    return 0


def _job_id(text: str) -> int:
    if not text.isdigit() or len(text) > 10:
        raise argparse.ArgumentTypeError(f"{text[:20]!r}: a job id, a whole number (`trainstack jobs` lists them)")
    return int(text)


def register(subparsers: Any) -> None:
    """Adds `jobs` and `cancel` to the trainstack command line."""
    jobs = add_documented_command(
        subparsers, "jobs", __doc__, "the standing cluster's jobs: state, times, duration, nodes, cost and final metric"
    )
    add_stack_arguments(jobs)
    add_queue_arguments(jobs)
    jobs.add_argument("--json", action="store_true", help="print one JSON document")
    jobs.add_argument(
        "--limit",
        type=_limit,
        default=DEFAULT_LIMIT,
        help=f"the latest this many queued jobs (default {DEFAULT_LIMIT})",
    )
    jobs.set_defaults(func=cmd_jobs)
    cancel = add_documented_command(
        subparsers, "cancel", __doc__, "end a queued or running job of the standing cluster; the next one starts"
    )
    add_stack_arguments(cancel)
    cancel.add_argument("id", type=_job_id, help="the job's id, as `trainstack submit` printed it")
    add_queue_arguments(cancel)
    cancel.set_defaults(func=cmd_cancel)
