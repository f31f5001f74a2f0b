"""``trainstack submit``: a job queued on a standing cluster (or TPU VM) without ``pulumi up``.

What the job is: with ``--job-file`` the file's mapping, whole (the keys of ``trainstack:job``);
with ``--package`` or ``--image`` (and their keys) the options alone, whole; otherwise the
stack's own ``trainstack:job`` with the options given (the built-in trainer's settings, --env,
--name) in place of its values, and --args overriding its arguments flag by flag
(trainstack.jobcode.arguments; --args-replace replaces them whole). Options given beside
--job-file apply to the file's values the same way.

The stack file with its job replaced goes through the checks every stack goes through (parse,
catalog feasibility, resolve): every problem is one line naming the key, exit 1, before
anything is written. Then the job's code and requirements go into the bucket under their
digests (the objects ``pulumi up`` uploads), its spec under its sha256, and an entry at the end
of the queue's index under a generation precondition; stopped nodes are started, and the
job's id is printed. No Pulumi and no TensorFlow is imported on the way.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any

from trainstack.base.bucket import BucketError
from trainstack.commands.jobargs import add_job_arguments
from trainstack.commands.parsers import add_documented_command
from trainstack.commands.queueargs import add_queue_arguments, queue_place
from trainstack.commands.stackargs import add_stack_arguments, stack_option, stack_path
from trainstack.experiments.place import QueueUsageError
from trainstack.experiments.submission import SubmitRefused
from trainstack_contract import METADATA_KEYS


def cmd_submit(args: argparse.Namespace) -> int:
    from trainstack.experiments import waking
    from trainstack.experiments.submission import checked_job, fetch_for_local_nodes, queue_job, spec_values
    from trainstack.jobqueue.queue import job_prefix
    from trainstack.localrun.wheels import FetchError
    from trainstack.localrun.workdir import WorkdirError, claim_workdir
    from trainstack.stackmodel.resolved import one_node_refusal

    try:
        stack, queued = checked_job(stack_path(args), None if args.stack_file else args.stack, args)
        if not stack.runs_queue:
            raise SubmitRefused(
                f"stack {stack.stack} runs no queue: its nodes boot with no job and no idle_minutes; set "
                "trainstack:cluster.idle_minutes (or tpu.idle_minutes) and `pulumi up` first"
            )
        refusal = one_node_refusal(stack) if args.one_node else None
        if refusal is not None:
            raise SubmitRefused(refusal)
        place = queue_place(args, stack)
        if place.workdir is not None:
            # The work directory `local --standing` will run in, whichever of the two comes first.
            claim_workdir(place.workdir, stack.stack)
            fetch_for_local_nodes(queued, place.workdir)
        values = spec_values(queued, args.local, args.one_node)
        entry = queue_job(place, queued, values, args.one_node)
    except WorkdirError as error:
        print(f"trainstack: submit: --workdir: {error}", file=sys.stderr)
        return 1
    except FetchError as error:
        print(
            f"trainstack: submit: {error}; the nodes of `local` install from what this machine fetches", file=sys.stderr
        )
        return 1
    except (SubmitRefused, QueueUsageError, BucketError) as error:
        for line in str(error).splitlines():
            print(f"trainstack: submit: {line}", file=sys.stderr)
        return 1
    where = " to run on one node" if entry.one_node else ""
    print(
        f"job {entry.id} ({entry.job_dir_name}) queued{where} on stack {stack.stack}: "
        f"{place.bucket.location(job_prefix(entry))}"
    )
    print(f"its code's arguments (after --job-dir): {shlex.join(json.loads(values[METADATA_KEYS.trainer_args]))}")
    if args.no_start:
        return 0
    if args.local:
        print(waking.wake_standing(place, stack, stack_option(args)))
        return 0
    if waking.up_and_idle(stack, place, entry):
        return waking.watch_until_taken(stack, place, entry)
    return waking.start_machines(stack)


def register(subparsers: Any) -> None:
    parser = add_documented_command(
        subparsers,
        "submit",
        __doc__,
        "queue a job on the stack's standing cluster or TPU VM (no `pulumi up`); prints its id",
    )
    add_stack_arguments(parser)
    add_job_arguments(parser)
    add_queue_arguments(parser)
    parser.add_argument("--no-start", action="store_true", help="queue only: do not start stopped machines")
    parser.set_defaults(func=cmd_submit)
