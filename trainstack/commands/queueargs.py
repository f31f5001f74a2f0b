"""What `submit`, `jobs`, `cancel` and `tune` share on the command line: --local and --workdir,
read into the queue's place (trainstack.experiments.place)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from trainstack.experiments.place import QueuePlace, place_of

if TYPE_CHECKING:
    from trainstack.stackmodel.resolved import ResolvedStack


def add_queue_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--local", action="store_true", help="the standing cluster of `trainstack local --standing`, not the cloud's"
    )
    parser.add_argument(
        "--workdir", type=Path, help="with --local: the run's work directory (default .trainstack-local/<stack>)"
    )


def queue_place(args: argparse.Namespace, stack: ResolvedStack) -> QueuePlace:
    return place_of(stack, args.local, args.workdir)
