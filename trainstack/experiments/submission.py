"""A job for a standing cluster's queue, checked as every stack is, and queued.

What the job is: with a job file the file's mapping, whole (the keys of ``trainstack:job``);
with a package or an image (and their keys) the options alone, whole; otherwise the stack's own
``trainstack:job`` with the options given in place of its values, and the arguments overriding
its own flag by flag (trainstack.jobcode.arguments). The stack file with its job replaced goes
through the checks every stack goes through (parse, catalog feasibility, resolve): every problem
is one line naming the key, before anything is written. Then the job's code and requirements go
into the bucket under their digests, its spec under its sha256, and an entry at the end of the
queue's index under a generation precondition (:func:`queue_job`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainstack.experiments.place import QueuePlace
from trainstack.jobcode.arguments import override_arguments
from trainstack_contract import METADATA_KEYS, PATH_INSTALL, TPU_NODE

if TYPE_CHECKING:
    from trainstack.jobqueue.queue import CodeObject
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


def checked_job(path: Path, name: str | None, options: argparse.Namespace) -> tuple[ResolvedStack, ResolvedStack]:
    """The stack in ``path`` as it is and with the job ``options`` describe in place of its
    own, both through the checks `validate` applies. ``name``: the stack's name where the
    command line gave it (else the file's)."""
    from trainstack.base.errors import StackConfigError
    from trainstack.stackmodel.feasibility import parse_check_and_derive
    from trainstack.stackmodel.resolved import resolve_stack
    from trainstack.stackmodel.stackfile import read_stack_config_map, stack_name_for
    from trainstack_contract.queue import QUEUED_JOB_NAME

    name = stack_name_for(path, name)
    raw = read_stack_config_map(path)
    cfg, facts = parse_check_and_derive(name, raw)
    stack = resolve_stack(cfg, facts=facts)
    job = job_settings(options, raw.get(JOB_KEY))
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


def code_objects(queued: ResolvedStack) -> list[CodeObject]:
    """What the job's nodes fetch besides its spec: its package and requirements, by digest."""
    from trainstack.jobqueue.queue import CodeObject

    job = queued.job
    assert job is not None
    code = [CodeObject(job.package.object_name, job.package.archive)] if job.package else []
    return code + ([CodeObject(job.requirements.object_name, job.requirements.data)] if job.requirements else [])


def queue_job(place: QueuePlace, queued: ResolvedStack, values: dict[str, str], one_node: bool) -> QueueEntry:
    """``queued``'s job at the end of the queue with ``values`` (:func:`spec_values`), its code
    and requirements put under their digests."""
    from trainstack.experiments.queueing import queue_entry
    from trainstack_contract.status import utc_now

    assert queued.job is not None
    return queue_entry(place, queued.job.name, values, code_objects(queued), utc_now(), one_node)
