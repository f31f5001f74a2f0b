"""The command line's shared arguments: which stack a command acts on, and loading it.

Light on purpose: every command's parser is built at start-up, so nothing here imports the
stack schema (pydantic) until a command loads a stack.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainstack.stackmodel.derived import CheckedFacts
    from trainstack.stackmodel.resolved import ResolvedStack
    from trainstack.stackmodel.schema import StackConfig


def add_stack_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--stack", help="stack name: reads stacks/Pulumi.<NAME>.yaml")
    which.add_argument("--stack-file", type=Path, help="path to a stack file")


def stack_option(args: argparse.Namespace) -> str:
    """The stack as the user named it, for a command line a message suggests."""
    import shlex

    stack_file = getattr(args, "stack_file", None)
    return f"--stack-file {shlex.quote(str(stack_file))}" if stack_file else f"--stack {args.stack}"


def stack_path(args: argparse.Namespace) -> Path:
    from trainstack.stackmodel.stackfile import stack_file_path

    return Path(args.stack_file) if args.stack_file else stack_file_path(args.stack)


def read_stack(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The stack's name and its file's config map, as the Pulumi program receives it: read
    here (bounded, strict YAML); parsing, validation and prices happen inside the program."""
    from trainstack.stackmodel.stackfile import read_stack_config_map, stack_name_for

    path = stack_path(args)
    return stack_name_for(path, None if args.stack_file else args.stack), read_stack_config_map(path)


def load_resolved(args: argparse.Namespace) -> ResolvedStack:
    """The stack the arguments name, checked (as `validate`) and resolved once, with what the
    checks derived (the team's package is read and hashed once)."""
    from trainstack.stackmodel.resolved import resolve_stack

    cfg, facts = load_checked(args)
    return resolve_stack(cfg, facts=facts)


def load_checked(args: argparse.Namespace) -> tuple[StackConfig, CheckedFacts]:
    """The stack the arguments name, checked (as `validate`), with what the checks derived."""
    from trainstack.stackmodel.stackfile import load_checked_stack

    return load_checked_stack(stack_path(args), None if args.stack_file else args.stack)
