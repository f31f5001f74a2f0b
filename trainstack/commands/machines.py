"""``trainstack start`` and ``trainstack stop``: the stack's machines, started or stopped in place.

How each kind of machine is acted on is trainstack.cloud.machines', the run and its report
trainstack.experiments.waking's; this module reads the command line.

A started cluster node runs its boot script, which resumes an unfinished job or, after
``trainstack:job.name`` changed and ``pulumi up`` updated its metadata, trains the new job.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from trainstack.cloud.machines import ACTIONS, DEFAULT_TIMEOUT, Action
from trainstack.commands.parsers import number_argument
from trainstack.commands.stackargs import add_stack_arguments, load_resolved
from trainstack.experiments.waking import run_machines


def _positive_seconds(text: str) -> float:
    value = number_argument(text, float, f"{text!r} is not a number of seconds")
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"{text}: give between 0 and 86400 seconds")
    return value


def _command(action: Action) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:

        return run_machines(load_resolved(args), action, nodes=args.node, dry_run=args.dry_run, timeout=args.timeout)

    return run


HELP = {
    "start": "start the stack's stopped machines (their boot scripts resume or start the job)",
    "stop": "stop the stack's machines: compute stops billing, disks and the bucket stay",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds `start` and `stop` to the trainstack command line."""
    for action in ACTIONS:
        parser = subparsers.add_parser(action, help=HELP[action])
        add_stack_arguments(parser)
        parser.add_argument(
            "--node",
            action="append",
            metavar="NODE",
            help="only this node (chief, worker-0, ps-0, tpu, notebook); repeat for several",
        )
        parser.add_argument("--dry-run", action="store_true", help="print the API calls and commands; change nothing")
        parser.add_argument(
            "--timeout",
            type=_positive_seconds,
            default=DEFAULT_TIMEOUT,
            help=f"seconds to wait for all machines together (default {DEFAULT_TIMEOUT:.0f})",
        )
        parser.set_defaults(func=_command(action))
