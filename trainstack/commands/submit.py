"""``trainstack submit``: a job queued on a standing cluster (or TPU VM) without ``pulumi up``.

What the job is: with ``--job-file`` the file's mapping, whole (the keys of ``trainstack:job``);
with ``--package`` or ``--image`` (and their keys) the options alone, whole; otherwise the
stack's own ``trainstack:job`` with the options given (the built-in trainer's settings, --env,
--name) in place of its values, and --args overriding its arguments flag by flag
(trainstack.jobcode.arguments; --args-replace replaces them whole). Options given beside
--job-file apply to the file's values the same way.

The stack file with its job replaced goes through the checks every stack goes through (parse,
catalog feasibility, resolve): every problem is one line naming the key, exit 1, before
anything is written. Then the job's code and requirements go into the bucket under their
digests (the objects ``pulumi up`` uploads), its spec under its sha256, and an entry at the end
of the queue's index under a generation precondition; stopped nodes are started, and the
job's id is printed. No Pulumi and no TensorFlow is imported on the way.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainstack.commands.local import _job_arguments
from trainstack.commands.parsers import add_documented_command
from trainstack.commands.queueargs import QueuePlace, QueueUsageError, add_queue_arguments, queue_place
from trainstack.commands.stackargs import add_stack_arguments, stack_option, stack_path
from trainstack.jobcode.arguments import override_arguments
from trainstack.jobstate.report import StatusReadError
from trainstack_contract import (
    BATCH_SIZE_PER_REPLICA,
    EPOCHS,
    IMAGE_SIZE,
    METADATA_KEYS,
    PATH_INSTALL,
    STEPS_PER_EPOCH,
    TPU_NODE,
)

if TYPE_CHECKING:
    from trainstack.stackmodel.resolved import ResolvedStack
    from trainstack_contract.queue import QueueEntry

JOB_KEY = "trainstack:job"
# A job file is a job's settings: a few kilobytes. Its spec may be at most MAX_SPEC_BYTES.
MAX_JOB_FILE_BYTES = 64 * 1024
# Options that set one key of the job, by key.
BUILTIN_OPTIONS = ("model", "data", "epochs", "batch_size_per_replica", "steps_per_epoch", "image_size")
CODE_OPTIONS = ("package", "module", "requirements", "image")
PATH_OPTIONS = ("package", "requirements")


class SubmitRefused(Exception):
    """The job cannot be queued; each line of the message names one problem. Nothing was written."""


def _job_file(path: Path) -> dict[str, Any]:
    from trainstack.base.files import OptionFileProblem, load_option_mapping

    try:
        return load_option_mapping(
            "--job-file",
            path,
            MAX_JOB_FILE_BYTES,
            json_only=False,
            not_a_mapping="a job file is a mapping of trainstack:job's keys (name, model, ...)",
        )
    except OptionFileProblem as problem:
        raise SubmitRefused(str(problem)) from None


def _env(values: list[str]) -> dict[str, str]:
    env = {}
    for text in values:
        name, equals, value = text.partition("=")
        if not equals or not name:
            raise SubmitRefused(f"--env {text[:80]!r}: give NAME=VALUE (the value may be empty)")
        env[name] = value
    return env


def job_settings(args: argparse.Namespace, stack_job: object) -> dict[str, Any]:
    """The job's keys from the command line, on the base its options choose (module docstring)."""
    if args.job_file is not None:
        job = _job_file(args.job_file)
    elif any(getattr(args, key) is not None for key in CODE_OPTIONS) or not isinstance(stack_job, dict):
        job = {}
    else:
        job = dict(stack_job)
        if job.pop("job_dir", None) is not None:
            print(
                "trainstack: submit: note: the stack's job.job_dir is not used: a queued job writes to "
                "jobs/q<ID>_<name> in the stack's bucket",
                file=sys.stderr,
            )
    for key in (*BUILTIN_OPTIONS, *CODE_OPTIONS, "name"):
        if getattr(args, key) is not None:
            job[key] = getattr(args, key)
    for key in PATH_OPTIONS:
        if getattr(args, key) is not None:
            # A path typed on the command line is the shell's: from the current directory (a
            # stack file's paths start at the project root).
            job[key] = str(Path(getattr(args, key)).absolute())
    if args.args_replace is not None:
        job["args"] = args.args_replace
    elif args.args is not None:
        given = job.get("args")
        base = [str(word) for word in given] if isinstance(given, list) else []
        job["args"] = override_arguments(base, args.args)
    if args.env:
        given = job.get("env")
        job["env"] = {**(given if isinstance(given, dict) else {}), **_env(args.env)}
    return job


def checked_job(args: argparse.Namespace) -> tuple[ResolvedStack, ResolvedStack]:
    """The stack as it is and the stack with the submitted job in place of its own, both
    through the checks `validate` applies."""
    from trainstack.base.errors import StackConfigError
    from trainstack.stackmodel.feasibility import parse_check_and_derive
    from trainstack.stackmodel.resolved import resolve_stack
    from trainstack.stackmodel.stackfile import read_stack_config_map, stack_name_for
    from trainstack_contract.queue import QUEUED_JOB_NAME

    path = stack_path(args)
    name = stack_name_for(path, None if args.stack_file else args.stack)
    raw = read_stack_config_map(path)
    cfg, facts = parse_check_and_derive(name, raw)
    stack = resolve_stack(cfg, facts=facts)
    job = job_settings(args, raw.get(JOB_KEY))
    if "job_dir" in job:
        raise SubmitRefused(
            f"{JOB_KEY}.job_dir: a queued job writes to jobs/q<ID>_<name> in the stack's bucket; leave job_dir out"
        )
    try:
        queued_cfg, queued_facts = parse_check_and_derive(name, {**raw, JOB_KEY: job})
        queued = resolve_stack(queued_cfg, facts=queued_facts)
    except StackConfigError as error:
        raise SubmitRefused("\n".join(str(problem) for problem in error.problems)) from None
    assert queued.job is not None
    ungranted = ungranted_places(stack, queued)
    if ungranted:
        raise SubmitRefused(
            f"{JOB_KEY}.buckets: the queued job reaches {', '.join(ungranted)}, which the stack's machines are not "
            f"granted (`pulumi up` grants what the stack file's {JOB_KEY}.buckets and job.args name): add it there "
            "and run `pulumi up` first"
        )
    if QUEUED_JOB_NAME.fullmatch(queued.job.name) is None:
        raise SubmitRefused(
            f"{JOB_KEY}.name: {queued.job.name[:40]!r} is longer than the 100 characters a queued job's name may have"
        )
    return stack, queued


def ungranted_places(stack: ResolvedStack, queued: ResolvedStack) -> list[str]:
    """The places the queued job reads or writes that the deployed stack grants its machines
    nothing on (its own bucket is read whole; job.data's bucket too)."""
    from trainstack_contract.jobaccess import covers

    granted = stack.job.places if stack.job is not None else None
    read_anyway = [
        f"gs://{stack.bucket_name}",
        *([f"gs://{stack.external_data_bucket}"] if stack.external_data_bucket else []),
    ]
    assert queued.job is not None
    missing = [
        place
        for place in queued.job.places.reads
        if not covers([*read_anyway, *(granted.reads if granted else ()), *(granted.writes if granted else ())], place)
    ]
    # The stack's own job directory in a team's bucket is granted for writing too: a queued
    # job's arguments that name it (AI Platform's --output_dir = --job-dir) write a granted place.
    own_dir = [stack.job.job_dir.rstrip("/") + "/"] if stack.job is not None and stack.job.job_dir_bucket else []
    writable = [*(granted.writes if granted else ()), *own_dir]
    missing += [place for place in queued.job.places.writes if not covers(writable, place)]
    return missing


def spec_values(stack: ResolvedStack, local: bool, one_node: bool = False) -> dict[str, str]:
    """The job's metadata values, as a node of the stack would have them in instance metadata
    (`trainstack local`'s stand-in for the TPU VM on --local), its job directory aside;
    ``one_node``: as one node of the cluster runs it alone."""
    from trainstack.cloud.bootscripts import job_metadata
    from trainstack.stackmodel.resolved import single_machine_args

    assert stack.job is not None
    if stack.cluster is not None:
        args = stack.cluster.trainer_args
        if one_node and stack.job.builtin:
            args = single_machine_args(args)
    else:
        assert stack.tpu is not None
        args = stack.tpu.trainer_args
        if local:
            from trainstack.localrun.nodes import TrainerOverrides, tpu_stand_in

            args = tuple(tpu_stand_in(list(args), TrainerOverrides(), stack.job.builtin, stack.tpu.accelerator_type)[0])
    values = job_metadata(stack.job, args)
    values.pop(METADATA_KEYS.job_dir, None)
    return values


def fetch_for_local_nodes(queued: ResolvedStack, workdir: Path) -> None:
    """--local: what the job's nodes install with pip (its requirements, its project), fetched
    here into the work directory's find-links, as `trainstack local` fetches its own job's: the
    local nodes reach no package index."""
    job = queued.job
    if job is None or job.package is None or (job.requirements is None and job.package.install == PATH_INSTALL):
        return
    import sys

    from trainstack.localrun import staging
    from trainstack.localrun.workdir import FIND_LINKS_DIR

    node = queued.cluster.nodes[0].name if queued.cluster else TPU_NODE
    venv_python = workdir / "nodes" / node / "state" / "venv" / "bin" / "python"
    python = venv_python if venv_python.exists() else Path(sys.executable)
    staging.fetch_for_pip(job, python, workdir / FIND_LINKS_DIR, echo=False)


def wake_standing(place: QueuePlace, stack: ResolvedStack, args: argparse.Namespace) -> str:
    """--local: wakes the stack's standing `trainstack local` run, which boots its nodes that
    have exited; what happened, in words."""
    from trainstack.localrun.standing import wake

    assert place.workdir is not None
    return wake(place.workdir, stack.stack, stack_option(args))


# How long `submit` watches a cluster that was up when its job came, for a node that stops at
# the end of its idle wait without having seen the job (seconds; Compute Engine stops a VM in
# about a minute), and how often it looks.
STOPPING_WATCH_SECONDS = 240.0
STOPPING_WATCH_POLL = 5.0


def _start_machines(stack: ResolvedStack) -> int:
    from trainstack.commands.machines import run_machines

    nodes = [node.name for node in stack.cluster.nodes] if stack.cluster else []
    nodes += [stack.tpu.name] if stack.tpu else []
    return run_machines(stack, "start", nodes=nodes, wait=False)


def _up_and_idle(stack: ResolvedStack, place: QueuePlace, entry: QueueEntry) -> bool:
    """Every VM of the cluster up, and no job before this one still to end: its nodes are in
    their idle wait, and one may end it as the job comes."""
    from trainstack.cloud.machines import UP, vm_statuses
    from trainstack.jobqueue.history import outstanding
    from trainstack.jobqueue.queue import read_index

    if stack.cluster is None:
        return False
    statuses = vm_statuses(stack)
    if len(statuses) != len(stack.cluster.nodes) or not all(status in UP for status in statuses.values()):
        return False
    earlier = [e for e in read_index(place.store).entries if e.id < entry.id]
    return not outstanding(earlier, place.objects)


def watch_until_taken(
    stack: ResolvedStack,
    place: QueuePlace,
    entry: QueueEntry,
    seconds: float = STOPPING_WATCH_SECONDS,
    poll: float = STOPPING_WATCH_POLL,
) -> int:
    """The job came to a cluster whose nodes were all in their idle wait: until a node takes it,
    a node that stops anyway (its wait ended as the job came) is started again once stopped,
    and the submitter is told so. Exit status of the starts, or 0."""
    from trainstack.cloud.machines import STOPPED, STOPPING, vm_statuses
    from trainstack.commands.machines import run_machines
    from trainstack.jobqueue.history import job_state
    from trainstack.jobqueue.queue import job_prefix

    deadline, told = time.monotonic() + seconds, False
    while time.monotonic() < deadline:
        if job_state(place.objects, job_prefix(entry)) is not None:
            return 0  # a node has taken it (RUNNING, or ended already)
        statuses = vm_statuses(stack)
        stopped = [node for node, status in statuses.items() if status in STOPPED]
        stopping = [node for node, status in statuses.items() if status in STOPPING]
        if stopped and not stopping:
            print(f"{', '.join(stopped)} stopped at the end of its idle wait as job {entry.id} came: starting it again")
            return run_machines(stack, "start", nodes=stopped, wait=False)
        if stopping and not told:
            print(
                f"{', '.join(stopping)} is stopping (its idle wait ended as job {entry.id} came); "
                "it is started again once stopped"
            )
            told = True
        time.sleep(poll)
    print(f"no node has taken job {entry.id} within {seconds:.0f} s; `trainstack jobs` says when one does")
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    from trainstack.jobqueue.history import job_state
    from trainstack.jobqueue.queue import CodeObject, job_prefix, submit
    from trainstack.jobqueue.store import StoreError
    from trainstack.localrun.wheels import FetchError
    from trainstack.localrun.workdir import WorkdirError, claim_workdir
    from trainstack.stackmodel.resolved import one_node_refusal
    from trainstack_contract.lifecycle import ENDED_JOB_STATES
    from trainstack_contract.status import utc_now

    try:
        stack, queued = checked_job(args)
        if not stack.runs_queue:
            raise SubmitRefused(
                f"stack {stack.stack} runs no queue: its nodes boot with no job and no idle_minutes; set "
                "trainstack:cluster.idle_minutes (or tpu.idle_minutes) and `pulumi up` first"
            )
        refusal = one_node_refusal(stack) if args.one_node else None
        if refusal is not None:
            raise SubmitRefused(refusal)
        place = queue_place(args, stack)
        if place.workdir is not None:
            # The work directory `local --standing` will run in, whichever of the two comes first.
            claim_workdir(place.workdir, stack.stack)
            fetch_for_local_nodes(queued, place.workdir)
        job = queued.job
        assert job is not None
        code = [CodeObject(job.package.object_name, job.package.archive)] if job.package else []
        code += [CodeObject(job.requirements.object_name, job.requirements.data)] if job.requirements else []
        values = spec_values(queued, args.local, args.one_node)
        entry = submit(
            place.store,
            job.name,
            values,
            code,
            utc_now(),
            lambda queued_entry: job_state(place.objects, job_prefix(queued_entry)) in ENDED_JOB_STATES,
            args.one_node,
        )
    except WorkdirError as error:
        print(f"trainstack: submit: --workdir: {error}", file=sys.stderr)
        return 1
    except FetchError as error:
        print(
            f"trainstack: submit: {error}; the nodes of `local` install from what this machine fetches", file=sys.stderr
        )
        return 1
    except (SubmitRefused, QueueUsageError, StoreError, StatusReadError) as error:
        for line in str(error).splitlines():
            print(f"trainstack: submit: {line}", file=sys.stderr)
        return 1
    where = " to run on one node" if entry.one_node else ""
    print(
        f"job {entry.id} ({entry.job_dir_name}) queued{where} on stack {stack.stack}: "
        f"{place.objects.location(job_prefix(entry))}"
    )
    print(f"its code's arguments (after --job-dir): {shlex.join(json.loads(values[METADATA_KEYS.trainer_args]))}")
    if args.no_start:
        return 0
    if args.local:
        print(wake_standing(place, stack, args))
        return 0
    if _up_and_idle(stack, place, entry):
        return watch_until_taken(stack, place, entry)
    return _start_machines(stack)


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's options (module docstring): `submit` and `tune` take the same."""
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
        type=_job_arguments,
        help="arguments for the job's code as one shell-quoted string, overriding job.args flag by flag: a flag "
        'given replaces the same flag and its values, the others are kept (--args "--lr 0.01")',
    )
    given.add_argument(
        "--args-replace",
        type=_job_arguments,
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


def register(subparsers: Any) -> None:
    parser = add_documented_command(
        subparsers,
        "submit",
        __doc__,
        "queue a job on the stack's standing cluster or TPU VM (no `pulumi up`); prints its id",
    )
    add_stack_arguments(parser)
    add_job_arguments(parser)
    add_queue_arguments(parser)
    parser.add_argument("--no-start", action="store_true", help="queue only: do not start stopped machines")
    parser.set_defaults(func=cmd_submit)
