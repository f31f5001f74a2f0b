"""``trainstack local``: the stack's cluster or TPU VM run on this machine by its own boot scripts."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainstack.commands.parsers import shell_words
from trainstack.commands.stackargs import add_stack_arguments, load_resolved, stack_option
from trainstack.localrun.outcome import EXIT_CODES_HELP, LocalExit
from trainstack_contract import BATCH_SIZE_PER_REPLICA, EPOCHS, FLAGS, IMAGE_SIZE, STEPS_PER_EPOCH
from trainstack_contract.names import NODE_NAME
from trainstack_contract.timescale import MIN_TIME_SCALE, TIME_SCALE_VARIABLE

if TYPE_CHECKING:
    from trainstack.localrun.nodes import TrainerOverrides
    from trainstack.localrun.outcome import LocalStackRunInterrupted, LocalStackRunResult
    from trainstack.stackmodel.resolved import ResolvedStack

# The jobs a standing run lists at its end, the latest first cut.
MAX_STANDING_REPORT = 200
# `docker info` asks the engine itself: a docker client without a running engine cannot run a job.
DOCKER_INFO_SECONDS = 20


def docker_engine_answers() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        return (
            subprocess.run([docker, "info"], capture_output=True, timeout=DOCKER_INFO_SECONDS, check=False).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


# Options whose value is a command line for the job's code, often starting with "--": the
# command line binds the word after one to it (main.bind_command_line_values).
COMMAND_LINE_OPTIONS = ("--args", "--args-replace")


# `local --preempt`: node names as the cluster names them (NODE_NAME), a few at a time.
MAX_PREEMPTED_NODES = 16


# `local --preempt-after`: within a day, like every other bounded wait.
MAX_PREEMPT_AFTER_SECONDS = 24 * 3600


def _node_names(text: str) -> tuple[str, ...]:
    """argparse type for `local --preempt NODE[,NODE...]`."""
    names = tuple(text.split(","))
    if len(names) > MAX_PREEMPTED_NODES or not all(NODE_NAME.fullmatch(name) for name in names):
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r}: node names as the cluster has them (worker-0, ps-0, ...), separated by commas, "
            f"at most {MAX_PREEMPTED_NODES}"
        )
    return names


def _preempt_after(text: str) -> float:
    """argparse type for `local --preempt-after SECONDS`."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_PREEMPT_AFTER_SECONDS:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: seconds, more than 0 and at most {MAX_PREEMPT_AFTER_SECONDS}")
    return seconds


class LocalRefused(Exception):
    """A `local` command line that cannot run: what to say, and the exit code (USAGE, or
    NOT_RUN for what this machine lacks)."""

    def __init__(self, message: str, code: int = LocalExit.USAGE) -> None:
        super().__init__(message)
        self.code = code


def trainer_overrides(args: argparse.Namespace, stack: ResolvedStack) -> TrainerOverrides:
    """The built-in trainer's flags `local` changes (--epochs ...) and the --args for the job's code."""
    from trainstack.localrun.nodes import TrainerOverrides

    values = {
        flag: str(value)
        for flag, value in (
            (FLAGS.epochs, args.epochs),
            (FLAGS.steps_per_epoch, args.steps_per_epoch),
            (FLAGS.image_size, args.image_size),
            (FLAGS.batch_size_per_replica, args.batch_size_per_replica),
            (FLAGS.data, args.data),
        )
        if value is not None
    }
    job = stack.job
    if values and (job is None or not job.builtin):
        what = "has no job" if job is None else f"runs its own code ({job.mode})"
        raise LocalRefused(
            f"{', '.join(values)} override the built-in trainer's settings; stack {stack.name} {what}. "
            "Set your code's flags in trainstack:job.args"
        )
    extra: list[str] = args.args or []
    replaced: list[str] | None = args.args_replace
    option = "--args-replace" if replaced is not None else "--args"
    if (extra or replaced is not None) and job is None:
        raise LocalRefused(f"{option}: stack {stack.name} has no job to pass them to")
    for arg in [*extra, *(replaced or [])]:
        flag = arg.split("=", 1)[0]
        if job is not None and flag in job.reserved_flags:
            hint = (
                "the --epochs, --steps-per-epoch, ... options of `local`"
                if job.builtin
                else "nothing: it is the stack's"
            )
            raise LocalRefused(f"{option}: {flag} is set by the stack ({job.reserved_flags[flag]}); use {hint}")
    return TrainerOverrides(values, tuple(extra), None if replaced is None else tuple(replaced))


def preempted_nodes(args: argparse.Namespace, stack: ResolvedStack) -> tuple[str, ...]:
    """The Spot nodes --preempt names, each checked against the stack's cluster."""
    from trainstack.localrun.nodes import PreemptError, check_preemptible

    if (args.preempt is None) != (args.preempt_after is None):
        raise LocalRefused("--preempt and --preempt-after go together: which nodes, and when")
    preempt: tuple[str, ...] = args.preempt or ()
    if not preempt:
        return preempt
    if stack.job is None:
        raise LocalRefused(f"--preempt: stack {stack.name} has no job to interrupt")
    if stack.cluster is None:
        raise LocalRefused(f"--preempt: stack {stack.name} is a TPU VM; `local` preempts the Spot VMs of a cluster")
    try:
        return check_preemptible(stack.cluster, preempt)
    except PreemptError as error:
        raise LocalRefused(str(error)) from None


def check_runnable_here(stack: ResolvedStack) -> None:
    """What this machine needs for the stack: a cluster or TPU VM to run, a Docker engine for
    an image, a valid time scale for the agents' waits."""
    from trainstack_contract.timescale import TimeScaleError, parse_time_scale

    if stack.cluster is None and stack.tpu is None:
        raise LocalRefused(
            f"stack {stack.name} has neither trainstack:cluster nor trainstack:tpu; `local` runs a "
            "training cluster or a TPU VM (a notebook runs on Workbench alone)",
            code=LocalExit.NOT_RUN,
        )
    job = stack.job
    if job is not None and job.image is not None and not docker_engine_answers():
        raise LocalRefused(
            f"stack {stack.name} runs the image {job.image.uri}; `local` runs it with this machine's Docker "
            "engine, and `docker info` finds none running here. Start or install Docker (and `gcloud auth "
            "configure-docker` for its registry), or try the job as a package (job.package and job.module)",
            code=LocalExit.NOT_RUN,
        )
    try:
        parse_time_scale(os.environ.get(TIME_SCALE_VARIABLE))
    except TimeScaleError as error:
        raise LocalRefused(str(error)) from None


def standing_note(args: argparse.Namespace, stack: ResolvedStack) -> str:
    """What a user of `local --standing` needs: how many nodes are up, how to queue a job, when
    they stop; refused (LocalRefused) where the stack's nodes run no queue."""
    from trainstack_contract.timescale import parse_time_scale

    if not stack.runs_queue or stack.idle_seconds is None:
        raise LocalRefused(
            f"--standing: the nodes of stack {stack.name} run no job queue: give the stack a trainstack:job, or set "
            f"{'tpu' if stack.tpu is not None else 'cluster'}.idle_minutes (how long they wait for a submitted job)"
        )
    nodes = 1 if stack.cluster is None else len(stack.cluster.nodes)
    where = f" --workdir {shlex.quote(str(args.workdir))}" if args.workdir is not None else ""
    minutes = f"{stack.idle_seconds / 60:g}"
    scale = parse_time_scale(os.environ.get(TIME_SCALE_VARIABLE))
    scaled = f" ({TIME_SCALE_VARIABLE}={scale:g}: {stack.idle_seconds * scale:g} s here)" if scale != 1 else ""
    return (
        f"standing: {nodes} node{'s' if nodes != 1 else ''} up; submit jobs with "
        f"`trainstack submit {stack_option(args)} --local{where} ...`; they stop after {minutes} idle minutes{scaled}"
    )


def cmd_local(args: argparse.Namespace) -> int:
    from trainstack.jobstate.report import default_workdir
    from trainstack.localrun.outcome import LocalStackRunInterrupted, exit_code, report
    from trainstack.localrun.run import SharedNetworkRefused, run_local
    from trainstack.localrun.run_settings import SettingsDiffer, command_line, forget, settings_for_this_run
    from trainstack.localrun.wheels import FetchError
    from trainstack.localrun.workdir import JobUserUnreachable, WorkdirError

    stack = load_resolved(args)
    try:
        check_runnable_here(stack)
        overrides = trainer_overrides(args, stack)
        preempt = preempted_nodes(args, stack)
        note = standing_note(args, stack) if args.standing else ""
    except LocalRefused as refused:
        print(f"trainstack: {refused}", file=sys.stderr)
        return refused.code
    workdir = args.workdir or default_workdir(stack.stack)
    if stack.job is not None and not args.fresh:
        try:
            overrides, resuming = settings_for_this_run(
                workdir, stack.stack, stack.job.name, overrides, custom_workdir=args.workdir is not None
            )
        except SettingsDiffer as differ:
            print(f"trainstack: {differ}", file=sys.stderr)
            return LocalExit.USAGE
        if resuming:
            print(f"trainstack local: {resuming}")
    nodes = "1 TPU VM" if stack.cluster is None else f"{len(stack.cluster.nodes)} nodes"
    print(f"trainstack local: stack {stack.name}, {nodes}, work directory {workdir}")
    try:
        result = run_local(
            stack,
            workdir,
            overrides,
            fresh=args.fresh,
            timeout=args.timeout,
            verbose=args.verbose,
            preempt=preempt,
            preempt_after=args.preempt_after or 0.0,
            allow_shared_network=args.allow_shared_network,
            standing=args.standing,
            standing_note=note,
        )
    except SharedNetworkRefused as refused:
        print(f"trainstack: {refused}", file=sys.stderr)
        return LocalExit.NOT_RUN
    except WorkdirError as error:
        print(f"trainstack: {'--fresh' if args.fresh else '--workdir'}: {error}", file=sys.stderr)
        return LocalExit.NOT_RUN
    except JobUserUnreachable as refused:
        print(f"trainstack: {refused}", file=sys.stderr)
        return LocalExit.NOT_RUN
    except FetchError as error:
        print(f"trainstack: {error}; the nodes of `local` install from what this machine fetches", file=sys.stderr)
        return LocalExit.NOT_RUN
    except LocalStackRunInterrupted as interrupted:
        again = command_line(stack.stack, overrides, workdir if args.workdir else None)
        try:
            if args.standing:
                return standing_interrupted(args, stack, interrupted)
            report(interrupted.result)
            print(
                f"trainstack: interrupted ({interrupted.signal_name}): every node was stopped and recorded "
                f"INTERRUPTED; {resumes(stack)}, with the settings this run had, with `{again}` "
                "(--fresh starts it over)",
                file=sys.stderr,
            )
        except OSError:
            # SIGHUP: the terminal is gone and every write to it fails (EIO), as the flush at exit
            # would; the exit code still says what happened, the status objects the rest.
            sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - open until the process ends
        return LocalExit.INTERRUPTED
    if args.standing:
        return standing_report(args, stack, result)
    report(result)
    if result.succeeded:
        forget(workdir)
    return exit_code(result)


def resumes(stack: ResolvedStack) -> str:
    """What an interrupted job resumes from: the built-in trainer keeps a backup; a team's code
    only what it saved itself."""
    if stack.job is not None and stack.job.builtin:
        return "the job resumes from its backup"
    return "the job starts again, and resumes from what its code saved in its job directory, if anything"


def standing_interrupted(args: argparse.Namespace, stack: ResolvedStack, interrupted: LocalStackRunInterrupted) -> int:
    """A standing run stopped by a signal: every job as `jobs --local` lists it, and how the
    job that was running resumes (queued ones wait for the same)."""
    print_standing_jobs(args, stack)
    where = f" --workdir {shlex.quote(str(args.workdir))}" if args.workdir is not None else ""
    print(
        f"trainstack: interrupted ({interrupted.signal_name}): every node was stopped and recorded INTERRUPTED; "
        f"the job that was running starts again ({resumes(stack)}), and the queued ones follow, with "
        f"`trainstack local {stack_option(args)} --standing{where}`",
        file=sys.stderr,
    )
    return LocalExit.INTERRUPTED


def print_standing_jobs(args: argparse.Namespace, stack: ResolvedStack) -> bool:
    """The table `trainstack jobs --local` prints; False (and a line why) when it cannot."""
    from trainstack.base.bucket import BucketError
    from trainstack.experiments.listing import job_rows
    from trainstack.experiments.place import QueueUsageError, place_of
    from trainstack.jobqueue.history import print_rows

    try:
        rows = job_rows(place_of(stack, True, args.workdir), stack, MAX_STANDING_REPORT)
    except (QueueUsageError, BucketError) as error:
        print(f"trainstack: the jobs cannot be listed: {error}", file=sys.stderr)
        return False
    if rows:
        print_rows(rows)
    else:
        print("standing: no job has run on this cluster yet")
    return True


def standing_report(args: argparse.Namespace, stack: ResolvedStack, result: LocalStackRunResult) -> int:
    """The end of a standing run whose nodes idled out: the self-stops, and every job it ran
    (the table `trainstack jobs --local` prints). 0: the cluster ran its queue and stopped;
    each job's own end is in the table."""
    print(f"standing: every node idled out and applied on_finish; self-stop calls recorded: {len(result.self_stops)}")
    return 0 if print_standing_jobs(args, stack) else 1


def register(subparsers: Any) -> None:
    local = subparsers.add_parser(
        "local",
        help="run the stack's cluster or TPU VM on this machine with its own boot scripts (CPU only)",
        epilog=(
            "The node agent waits as it would on Compute Engine (its polls, the settle window after a failed "
            f"step, the back-off between start calls). {TIME_SCALE_VARIABLE}=0.25 in the environment "
            f"shortens every one of those waits to a quarter for a quicker rehearsal ({MIN_TIME_SCALE} to 1). "
            + EXIT_CODES_HELP
        ),
    )
    add_stack_arguments(local)
    local.add_argument(
        "--workdir", type=Path, help="where the stand-in bucket and node state live (default .trainstack-local/<stack>)"
    )
    local.add_argument(
        "--fresh",
        action="store_true",
        help="delete the work directory first (its checkpoints and models too); only a directory trainstack local made",
    )
    local.add_argument(FLAGS.epochs, type=EPOCHS.parse, help="override the job's epochs")
    local.add_argument(FLAGS.steps_per_epoch, type=STEPS_PER_EPOCH.parse, help="override the job's steps per epoch")
    local.add_argument(FLAGS.image_size, type=IMAGE_SIZE.parse, help="override the job's image size")
    local.add_argument(
        FLAGS.batch_size_per_replica,
        type=BATCH_SIZE_PER_REPLICA.parse,
        help="override the job's per-replica batch",
    )
    local.add_argument("--data", help="a local data path instead of the job's data")
    local.add_argument("--timeout", type=float, help="seconds to wait for the chief before stopping every node")
    given = local.add_mutually_exclusive_group()
    given.add_argument(
        "--args",
        type=shell_words,
        metavar='"ARGS"',
        help="arguments for the job's code overriding job.args flag by flag: a flag given replaces the same flag "
        'and its values, the others are kept, e.g. --args "--learning-rate 0.01"',
    )
    given.add_argument(
        "--args-replace",
        type=shell_words,
        metavar='"ARGS"',
        help="the job's arguments in place of job.args whole",
    )
    local.add_argument(
        "--verbose", action="store_true", help="show TensorFlow's native start-up messages too (boot.log keeps them)"
    )
    local.add_argument(
        "--preempt",
        type=_node_names,
        metavar="NODE[,NODE...]",
        help="preempt these Spot nodes as Compute Engine would (SIGTERM, SIGKILL 30 s later); the chief starts "
        "them again through the local Compute Engine API stand-in (calls in <workdir>/compute-api.log)",
    )
    local.add_argument(
        "--preempt-after",
        type=_preempt_after,
        metavar="SECONDS",
        help="when to preempt: this many seconds after the node's boot script starts the job",
    )
    local.add_argument(
        "--allow-shared-network",
        action="store_true",
        help="where the nodes cannot have a network namespace of their own (not root, an image job), run them in "
        "this machine's network: TensorFlow's gRPC servers then listen on every interface (refused without it)",
    )
    local.add_argument(
        "--standing",
        action="store_true",
        help="keep the nodes up for jobs `trainstack submit --local` queues, until each has waited idle_minutes "
        "with an empty queue (time-scaled as the agent's other waits) or a signal stops the run",
    )
    local.set_defaults(func=cmd_local)
