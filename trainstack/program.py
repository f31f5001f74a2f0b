"""The Pulumi program: read the stack's config, validate and resolve it, build, export."""

from __future__ import annotations

import pulumi

from trainstack.components.stack import TrainingStack, TrainingStackArgs
from trainstack.prepare import prepare
from trainstack.pulumi_internals import program_config, program_secret_keys
from trainstack.resolved import ResolvedStack
from trainstack.rules import parse_and_check
from trainstack.scripts import BootFiles


def stack_from_pulumi() -> tuple[ResolvedStack, BootFiles]:
    """The running stack's whole config map (every namespace), parsed and prepared once."""
    return prepare(parse_and_check(pulumi.get_stack(), program_config(), secret_keys=program_secret_keys()))


def build(stack: ResolvedStack, boot: BootFiles) -> TrainingStack:
    training = TrainingStack(TrainingStackArgs(stack, boot))
    pulumi.export("bucket_url", training.bucket_url)
    pulumi.export("registry_url", training.registry_url)
    pulumi.export("vm_names", training.vm_names)
    pulumi.export("ssh_commands", training.ssh_commands)
    pulumi.export("job_dir", training.job_dir)
    pulumi.export("hourly_usd", training.hourly_usd)
    pulumi.export("costs", training.costs)
    return training
