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
import sys
from typing import TYPE_CHECKING, Any

from trainstack.base.bucket import BucketError
from trainstack.commands.parsers import add_documented_command
from trainstack.commands.queueargs import add_queue_arguments, queue_place
from trainstack.commands.stackargs import add_stack_arguments, load_resolved
from trainstack.experiments.listing import job_rows
from trainstack.experiments.place import QueueUsageError

if TYPE_CHECKING:
    pass

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000


def _limit(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"{text[:20]!r}: a whole number from 1 to {MAX_LIMIT}")
    return int(text)


def cmd_jobs(args: argparse.Namespace) -> int:
    from trainstack.jobqueue.history import print_json, print_rows

    stack = load_resolved(args)
    try:
        rows = job_rows(queue_place(args, stack), stack, args.limit)
    except (QueueUsageError, BucketError) as error:
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
    from trainstack.experiments.queueing import cancel_job
    from trainstack.jobqueue.queue import CancelRefused

    stack = load_resolved(args)
    if args.id == 0:
        print(
            "trainstack: cancel: job 0 is the stack's own trainstack:job, not a queued one: "
            f"`trainstack stop --stack {stack.stack}` stops its machines",
            file=sys.stderr,
        )
        return 1
    try:
        entry = cancel_job(queue_place(args, stack), args.id)
    except (QueueUsageError, BucketError, CancelRefused) as error:
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
