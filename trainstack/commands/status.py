"""``trainstack status``: the job's state after ``pulumi up`` (or a ``local`` run), read from its status objects."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from trainstack.base.bucket import Bucket, BucketError, DirectoryBucket, GcsBucket
from trainstack.commands.stackargs import add_stack_arguments, load_resolved
from trainstack.experiments.place import stack_job_objects
from trainstack.jobstate.report import build_report, default_workdir, local_bucket, print_report


def cmd_status(args: argparse.Namespace) -> int:
    if args.workdir is not None and not args.local:
        print("trainstack: --workdir is the work directory of a local run: use it with --local", file=sys.stderr)
        return 2

    stack = load_resolved(args)
    bucket: Path | None = None
    if args.local:
        workdir = args.workdir or default_workdir(stack.stack)
        bucket = local_bucket(workdir, stack)
        if not bucket.is_dir():
            print(
                f"trainstack: no local run of stack {stack.stack} in {workdir} ({bucket} is not a directory); "
                f"run `trainstack local --stack {stack.stack}` first",
                file=sys.stderr,
            )
            return 1
    # job.job_dir: `local` stands in for the team's bucket beside the stack's.
    where = stack_job_objects(stack, bucket)
    objects: Bucket = (
        where[0] if where else (DirectoryBucket(bucket) if bucket else GcsBucket(stack.project, stack.bucket_name))
    )
    job_dir = objects.location(where[1]) if where else None
    source = "local" if args.local else "gcs"
    try:
        report = build_report(stack, objects, source, job_dir)
    except BucketError as error:
        print(f"trainstack: {error}", file=sys.stderr)
        if source == "gcs" and local_bucket(default_workdir(stack.stack), stack).is_dir():
            print(
                f"trainstack: a local run of stack {stack.stack} exists: "
                f"`.venv/bin/trainstack status --stack {stack.stack} --local` reads it",
                file=sys.stderr,
            )
        return 1
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=2, sort_keys=True)
        print()
    else:
        print_report(report)
    return 0


def register(subparsers: Any) -> None:
    """Adds ``status`` to the ``trainstack`` command line (``subparsers`` from ``add_subparsers``)."""
    parser = subparsers.add_parser(
        "status", help="the job's state after `pulumi up` (or of a `trainstack local` run), from its status objects"
    )
    add_stack_arguments(parser)
    parser.add_argument("--local", action="store_true", help="read the stand-in bucket of `trainstack local`")
    parser.add_argument(
        "--workdir", type=Path, help="with --local: the run's work directory (default .trainstack-local/<stack>)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(func=cmd_status)
