"""The Pulumi program: read the stack's config, validate and resolve it, build, export."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pulumi

from trainstack.base.errors import StackConfigError
from trainstack.cloud.bootscripts import BootFiles
from trainstack.cloud.components.stack import TrainingStack, TrainingStackArgs
from trainstack.cloud.prepare import prepare
from trainstack.cloud.pulumi_internals import program_config, program_secret_keys
from trainstack.stackmodel.feasibility import parse_check_and_derive
from trainstack.stackmodel.resolved import ResolvedStack


@dataclass(frozen=True)
class ProgramRun:
    """What one run of the program built from: the resolved stack and its rendered boot files."""

    stack: ResolvedStack
    boot: BootFiles
    training: TrainingStack


# Who is told of each run: `plan` listens while it runs the program under mocks.
_listeners: list[Callable[[ProgramRun], None]] = []


@contextmanager
def runs_observed() -> Iterator[list[ProgramRun]]:
    """Collects every :class:`ProgramRun` that :func:`main` completes inside the block."""
    runs: list[ProgramRun] = []
    _listeners.append(runs.append)
    try:
        yield runs
    finally:
        _listeners.remove(runs.append)


def stack_from_pulumi() -> tuple[ResolvedStack, BootFiles]:
    """The running stack's whole config map (every namespace), parsed and prepared once."""
    return prepare(*parse_check_and_derive(pulumi.get_stack(), program_config(), secret_keys=program_secret_keys()))


def declare_stack(stack: ResolvedStack, boot: BootFiles) -> TrainingStack:
    training = TrainingStack(TrainingStackArgs(stack, boot))
    pulumi.export("bucket_url", training.bucket_url)
    pulumi.export("registry_url", training.registry_url)
    pulumi.export("vm_names", training.vm_names)
    pulumi.export("ssh_commands", training.ssh_commands)
    pulumi.export("job_dir", training.job_dir)
    pulumi.export("hourly_usd", training.hourly_usd)
    pulumi.export("costs", training.costs)
    return training


def main() -> ProgramRun:
    """`pulumi up`'s entry: invalid config ends the program before any resource is registered,
    one line per problem and no traceback."""
    try:
        stack, boot = stack_from_pulumi()
    except StackConfigError as error:
        print(error.report(), file=sys.stderr)
        sys.exit(1)
    run = ProgramRun(stack, boot, declare_stack(stack, boot))
    for listener in list(_listeners):
        listener(run)
    return run
