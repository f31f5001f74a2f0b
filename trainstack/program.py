"""The Pulumi program: read the stack's config, validate and resolve it, build, export."""

from __future__ import annotations

import pulumi

from trainstack.components.stack import TrainingStack, TrainingStackArgs
from trainstack.config import StackConfig, parse_stack_config
from trainstack.pulumi_internals import program_config
from trainstack.resolved import ResolvedStack, resolve_stack
from trainstack.rules import validate_stack
from trainstack.scripts import BootFiles, boot_files


def prepare(cfg: StackConfig) -> tuple[ResolvedStack, BootFiles]:
    """Validate a parsed stack, resolve it once and render its boot files; raises
    StackConfigError listing every problem (the catalog's rules, then Compute Engine's
    metadata limits on what would be set)."""
    resolved = resolve_stack(validate_stack(cfg))
    return resolved, boot_files(resolved)


def stack_from_pulumi() -> tuple[ResolvedStack, BootFiles]:
    """The running stack's whole config map (every namespace), parsed and prepared once."""
    return prepare(parse_stack_config(pulumi.get_stack(), program_config()))


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
