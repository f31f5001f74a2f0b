"""``trainstack validate``: a stack file checked against the catalog, every problem listed."""

from __future__ import annotations

import argparse
from typing import Any

from trainstack.commands.stackargs import add_stack_arguments, load_checked
from trainstack.commands.validation import validate


def cmd_validate(args: argparse.Namespace) -> int:
    return validate(*load_checked(args))


def register(subparsers: Any) -> None:
    validate = subparsers.add_parser(
        "validate", help="check a stack file against the catalog; exit 1 listing every problem"
    )
    add_stack_arguments(validate)
    validate.set_defaults(func=cmd_validate)
