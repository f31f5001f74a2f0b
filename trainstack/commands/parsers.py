"""How the commands build their parsers: a command whose --help is its module's docstring, and
an option that takes a number or text of a given form.

Light on purpose, as stackargs: every command's parser is built at start-up."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Callable
from typing import Any, TypeVar

Number = TypeVar("Number", int, float)


def add_documented_command(subparsers: Any, name: str, doc: str | None, summary: str) -> argparse.ArgumentParser:
    """The parser of command ``name``: its --help shows ``doc`` (the command module's docstring)
    as written, line breaks kept; ``summary`` is its line in `trainstack --help`."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=summary, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    return parser


def number_argument(text: str, convert: Callable[[str], Number], not_a_number: str) -> Number:
    """``convert(text)`` for an option's argparse type; text it cannot convert is refused with
    ``not_a_number``, the whole line argparse prints after the option's name."""
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(not_a_number) from None


def pattern_argument(text: str, pattern: re.Pattern[str], refusal: str) -> str:
    """``text`` for an option's argparse type when ``pattern`` matches it whole (a trailing
    newline is refused); else ``refusal``, the whole line argparse prints after the option's name."""
    if pattern.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(refusal)
    return text


# A job's arguments given on the command line, as job.args in a stack file: printable, bounded.
MAX_JOB_ARGS_CHARS = 32 * 1024


def shell_words(text: str) -> list[str]:
    """argparse type for a job's --args (`local`, `submit`, `tune`): split as a POSIX shell would,
    never run by one."""
    if len(text) > MAX_JOB_ARGS_CHARS or any(not c.isprintable() for c in text):
        raise argparse.ArgumentTypeError(f"printable text of at most {MAX_JOB_ARGS_CHARS} characters")
    try:
        return shlex.split(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error} (quote as in a shell)") from None
