# PYTHON_ARGCOMPLETE_OK (argcomplete completes the `trainstack` console command)
"""``python -m trainstack``: validate, plan and run stacks on this machine, with no cloud credentials; build the trainer image."""

from __future__ import annotations

import argparse
import gc
import os
import sys

from trainstack.base.errors import StackConfigError
from trainstack.catalog.overlay import OverlayError
from trainstack.commands import (
    browse,
    build,
    catalog,
    check,
    cost,
    export,
    import_job,
    init,
    jobs,
    local,
    logs,
    machines,
    plan,
    quota,
    status,
    submit,
    tune,
    validate,
    zones,
)

# The parser is built for every command, so this module and those it imports at the top load
# no pydantic, Pulumi or TensorFlow; each command imports what it needs (`gpus` answers in a
# fraction of a second; see bench/cli_latency.py).
# In the order `trainstack --help` lists them (machines registers `start` and `stop`, browse
# `gpus` and `tpus`, jobs `jobs` and `cancel`).
VERBS = (
    validate,
    plan,
    local,
    submit,
    jobs,
    tune,
    build,
    machines,
    browse,
    status,
    logs,
    cost,
    quota,
    zones,
    catalog,
    import_job,
    check,
    init,
    export,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainstack", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for verb in VERBS:
        verb.register(sub)
    return parser


def bind_command_line_values(argv: list[str]) -> list[str]:
    """``--args VALUE`` as ``--args=VALUE`` (local.COMMAND_LINE_OPTIONS): argparse reads a
    value that starts with ``-`` and holds no space (``--args "--num-epochs=60"``) as an
    option of its own and stops with `expected one argument`. Nothing after ``--`` is touched."""
    bound: list[str] = []
    words = iter(argv)
    for word in words:
        if word == "--":
            return [*bound, word, *words]
        value = next(words, None) if word in local.COMMAND_LINE_OPTIONS else None
        bound.append(word if value is None else f"{word}={value}")
    return bound


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # Shell completion for the `trainstack` command: eval "$(register-python-argcomplete trainstack)".
    # The shell sets _ARGCOMPLETE when it asks; other runs skip the import.
    if "_ARGCOMPLETE" in os.environ:
        import argcomplete

        argcomplete.autocomplete(parser)
    args = parser.parse_args(bind_command_line_values(sys.argv[1:] if argv is None else argv))
    try:
        return int(args.func(args))
    except StackConfigError as error:
        print(error.report(), file=sys.stderr)
        return 1
    except OverlayError as error:
        print(f"trainstack: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `plan | head` closed the pipe: not an error of ours. Silence the flush at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def run_and_exit() -> None:
    """Run one command and end the process: the `trainstack` console command and `python -m trainstack`."""
    status = main()
    # Everything the command built is garbage now. Without this, the collection at interpreter
    # shutdown walks it all once more: 0.4 s of a 1.8 s `plan`, whose every Output is an object.
    # Frozen objects are left to the process's exit; atexit handlers and stream flushes still run.
    gc.freeze()
    sys.exit(status)
