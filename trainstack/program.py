"""The Pulumi program: read the stack's config, validate it, build the stack, export outputs."""

from __future__ import annotations

import pulumi
from pulumi.runtime.config import CONFIG

from trainstack.components.stack import TrainingStack
from trainstack.config import StackConfig, parse_stack_config
from trainstack.rules import validate_stack


def stack_config_from_pulumi() -> StackConfig:
    """The running stack's whole config map (every namespace), parsed and checked once."""
    return validate_stack(parse_stack_config(pulumi.get_stack(), dict(CONFIG.get())))


def build(cfg: StackConfig) -> TrainingStack:
    stack = TrainingStack(cfg)
    pulumi.export("bucket_url", stack.bucket_url)
    pulumi.export("registry_url", stack.registry_url)
    pulumi.export("vm_names", stack.vm_names)
    pulumi.export("ssh_commands", stack.ssh_commands)
    pulumi.export("job_dir", stack.job_dir)
    pulumi.export("hourly_usd", stack.hourly_usd)
    return stack
