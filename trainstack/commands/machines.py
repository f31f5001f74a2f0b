"""``trainstack start`` and ``trainstack stop``: the stack's machines, started or stopped in place.

How each kind of machine is acted on is trainstack.cloud.machines'; this module reads the
command line and prints what was done.

A started cluster node runs its boot script, which resumes an unfinished job or, after
``trainstack:job.name`` changed and ``pulumi up`` updated its metadata, trains the new job.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from trainstack.cloud.machines import (
    ACTIONS,
    DEFAULT_TIMEOUT,
    Action,
    ComputeClients,
    Machine,
    NodeSelectionError,
    Outcome,
    act_on_machines,
    dry_run_lines,
    select_machines,
    spot_tpu_refusal,
    stack_machines,
)
from trainstack.commands.parsers import number_argument
from trainstack.commands.stackargs import add_stack_arguments, load_resolved

if TYPE_CHECKING:
    from trainstack.stackmodel.resolved import ResolvedStack


def run_machines(
    stack: ResolvedStack,
    action: Action,
    *,
    nodes: Sequence[str] | None = None,
    dry_run: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    factory: Callable[[], ComputeClients] | None = None,
    wait: bool = True,
) -> int:
    """Start or stop the stack's machines (or those named in ``nodes``); returns the exit status.
    ``wait=False`` (`submit`): the VMs' requests are sent and reported as requested, their
    operations not awaited (awaiting needs compute.zoneOperations.get, which only a project-wide
    grant gives: a teammate who queues jobs holds get and start on each VM alone)."""
    try:
        machines = select_machines(stack_machines(stack), nodes)
    except NodeSelectionError as error:
        print(f"trainstack: {action}: {error}", file=sys.stderr)
        return 2
    if dry_run:
        refused = [
            Outcome(m, False, spot_tpu_refusal(stack, m))
            for m in machines
            if action == "start" and m.kind == "tpu" and m.spot
        ]
        allowed = [m for m in machines if m not in {o.machine for o in refused}]
        for line in dry_run_lines(action, stack, allowed):
            print(line)
        if any(m.kind == "vm" for m in allowed):
            print(f"(each VM is read first with compute.instances.get; {action} is sent only to a VM {_needs(action)})")
        _report(action, refused)
        return 1 if refused else 0
    print(f"trainstack {action}: stack {stack.stack}, project {stack.project}, zone {stack.zone}")
    outcomes = act_on_machines(action, stack, machines, timeout, wait, factory)
    _report(action, outcomes)
    failed = any(not o.ok for o in outcomes)
    afterword = _afterword(action, stack, [o.machine for o in outcomes])
    if not failed and afterword:
        print(afterword)
    return 1 if failed else 0


def _needs(action: Action) -> str:
    return "that is TERMINATED (stopped)" if action == "start" else "that is not already TERMINATED or STOPPING"


def _report(action: Action, outcomes: Sequence[Outcome]) -> None:
    for outcome in outcomes:
        machine = outcome.machine
        if outcome.ok:
            print(f"  {machine.node:<10} {machine.name:<32} {outcome.text}")
        else:
            print(f"trainstack: {action}: {machine.node} ({machine.name}): {outcome.text}", file=sys.stderr)


def _afterword(action: Action, stack: ResolvedStack, machines: Sequence[Machine]) -> str | None:
    kinds = {m.kind for m in machines}
    if action == "stop":
        tpu = " (what a stopped TPU VM still bills is not confirmed here)" if "tpu" in kinds else ""
        return (
            "Stopped machines no longer bill for vCPUs, memory or GPUs; their disks and the bucket still bill "
            f"until `pulumi destroy --exclude-protected`{tpu}."
        )
    if not kinds & {"vm", "tpu"}:
        return None
    if stack.job is None:
        return "The stack has no job: the machines boot ready, with no trainer started."
    return (
        f"Each started node's boot script runs job {stack.job.name} ({stack.job.job_dir}): it resumes the job when "
        "unfinished; a job that already succeeded is not trained again (set a new trainstack:job.name and "
        "`pulumi up` to train another)."
    )


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
