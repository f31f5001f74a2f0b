"""The options that describe a job, which `submit` and `tune` share (the job's keys,
trainstack.experiments.submission reads them)."""

from __future__ import annotations

import argparse
from pathlib import Path

from trainstack.commands.parsers import shell_words
from trainstack_contract import BATCH_SIZE_PER_REPLICA, EPOCHS, IMAGE_SIZE, STEPS_PER_EPOCH


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's options (trainstack.experiments.submission): `submit` and `tune` take the same."""
    parser.add_argument("--job-file", type=Path, help="a YAML or JSON file of trainstack:job's keys: the job, whole")
    parser.add_argument("--name", help="the job's name (its directory is jobs/q<ID>_<NAME>)")
    built_in = parser.add_argument_group("the built-in trainer (on the stack's own job unless --job-file)")
    built_in.add_argument("--model", help="cnn, resnet50, ...")
    built_in.add_argument("--data", help="'synthetic' or gs://BUCKET/PATH")
    built_in.add_argument("--epochs", type=EPOCHS.parse)
    built_in.add_argument("--batch-size-per-replica", type=BATCH_SIZE_PER_REPLICA.parse)
    built_in.add_argument("--steps-per-epoch", type=STEPS_PER_EPOCH.parse)
    built_in.add_argument("--image-size", type=IMAGE_SIZE.parse)
    own = parser.add_argument_group("a team's code (the job is these options alone)")
    own.add_argument("--package", help="the package directory (as job.package; relative to the current directory)")
    own.add_argument("--module", help="run as `python -m MODULE`")
    own.add_argument(
        "--requirements", help="extra requirements file (as job.requirements; relative to the current directory)"
    )
    own.add_argument("--image", help="a container image (as job.image)")
    given = parser.add_mutually_exclusive_group()
    given.add_argument(
        "--args",
        type=shell_words,
        help="arguments for the job's code as one shell-quoted string, overriding job.args flag by flag: a flag "
        'given replaces the same flag and its values, the others are kept (--args "--lr 0.01")',
    )
    given.add_argument(
        "--args-replace",
        type=shell_words,
        metavar="ARGS",
        help="the job's arguments as one shell-quoted string, in place of job.args whole",
    )
    parser.add_argument(
        "--env", action="append", metavar="NAME=VALUE", help="an environment variable of the job; repeat for several"
    )
    parser.add_argument(
        "--one-node",
        action="store_true",
        help="run the job (with tune: each trial) on one node of the cluster, the first free one, as a single "
        "machine (TF_CONFIG names no peers): such jobs run side by side, one per node",
    )
