# PYTHON_ARGCOMPLETE_OK (argcomplete completes the `trainstack` console command)
"""``python -m trainstack``: validate, plan and run stacks on this machine, with no cloud credentials; build the trainer image."""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainstack.base.errors import ProgramExit, StackConfigError
from trainstack.commands import browse, check, logs, machines, status
from trainstack.commands import cost as costreport
from trainstack.commands import import_job as importer
from trainstack.commands import init as stackinit
from trainstack.commands.build import BUILDERS, docker_tag, run_build
from trainstack.commands.stackargs import add_stack_arguments, load_config, read_stack
from trainstack.interop import tfplan
from trainstack.interop import vertex as vertex_export
from trainstack_agent.timings import MIN_TIME_SCALE, TIME_SCALE_VARIABLE
from trainstack_contract import BATCH_SIZE_PER_REPLICA, EPOCHS, FLAGS, IMAGE_SIZE, STEPS_PER_EPOCH

# The parser is built for every command, so this module and those it imports at the top load
# no pydantic, Pulumi or TensorFlow; each command imports what it needs (`gpus` answers in a
# fraction of a second; see bench/cli_latency.py).
if TYPE_CHECKING:
    from trainstack.cloud.plandiff import Change
    from trainstack.cloud.planning import Plan
    from trainstack.stackmodel.resolved import ResolvedStack


def _summary(stack: ResolvedStack) -> str:
    parts = []
    if stack.cluster is not None:
        parts.append(f"cluster of {len(stack.cluster.nodes)} VMs ({stack.cluster.strategy})")
    if stack.tpu is not None:
        parts.append(f"TPU {stack.tpu.accelerator_type}")
    if stack.notebook is not None:
        parts.append(f"notebook {stack.notebook.machine_type}")
    return f"stack {stack.config.stack} is valid: {', '.join(parts)} in {stack.zone}, project {stack.project}"


def _describe(resource_inputs: dict[str, object]) -> str:
    """The arguments a reader checks first: machine, accelerators, zone, scheduling."""
    shown = []
    for key in (
        "machineType",
        "acceleratorType",
        "guestAccelerators",
        "zone",
        "location",
        "region",
        "scheduling",
        "schedulingConfig",
        "role",
        "service",
    ):
        if key in resource_inputs and resource_inputs[key] not in (None, [], {}):
            value = resource_inputs[key]
            if isinstance(value, list) and value and isinstance(value[0], dict):
                value = ", ".join(f"{v.get('count')} x {v.get('type')}" for v in value)
            elif isinstance(value, dict):
                value = ",".join(f"{k}={v}" for k, v in value.items() if k != "maxRunDuration") + (
                    f",maxRunSeconds={value['maxRunDuration'].get('seconds')}"
                    if isinstance(value.get("maxRunDuration"), dict)
                    else ""
                )
            shown.append(f"{key}={value}")
    return " ".join(shown)


def _print_plan(plan: Plan) -> None:
    print(f"Plan for stack {plan.stack}: {len(plan.resources)} resources")
    for note in plan.notes:
        print(f"Note: {note}")
    for resource in plan.resources:
        details = _describe(resource.inputs)
        print(f"  + {resource.type}  {resource.name}{'  ' + details if details else ''}")
    _print_bucket_access(plan.bucket_access())
    for line in costreport.format_report(plan.cost):
        print(line)


def _print_bucket_access(access: dict[str, Any]) -> None:
    writers = [g for g in access["grants"] if g["writes"]]
    print(f"Who can write gs://{access['bucket']} (besides `pulumi up`):")
    for grant in writers:
        print(f"  {grant['member']}: {grant['objects']}")
    if access["writable_executed_objects"]:
        print(f"  WARNING: a machine can rewrite what nodes run: {', '.join(access['writable_executed_objects'])}")
    elif access["executed_objects"]:
        print(f"  what nodes run ({', '.join(access['executed_objects'])}) is written by `pulumi up` alone")
    if "job_dir" in access:
        print(f"Who can write the job directory {access['job_dir']['uri']}/ (job.job_dir, under it alone):")
        for member in access["job_dir"]["writers"]:
            print(f"  {member}")


def cmd_validate(args: argparse.Namespace) -> int:
    from trainstack.cloud.prepare import prepare
    from trainstack.stackmodel.resolved import stack_warnings

    resolved, _ = prepare(load_config(args))
    print(_summary(resolved))
    for warning in stack_warnings(resolved):
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from trainstack.cloud.plandiff import compare, read_plan_json
    from trainstack.cloud.planning import run_plan

    stack, raw = read_stack(args)
    previous = read_plan_json(args.against) if args.against is not None else None
    if args.out is not None and (args.out.exists() or args.out.is_symlink()) and not args.out.is_dir():
        print(f"trainstack: --out {args.out}: exists and is not a directory", file=sys.stderr)
        return 1
    try:
        plan = run_plan(stack, raw)
    except ProgramExit as exit_:
        return exit_.code
    if args.out:
        try:
            args.out.mkdir(parents=True, exist_ok=True)
            for filename, text in plan.scripts.items():
                (args.out / filename).write_text(text, encoding="utf-8")
        except OSError as error:
            print(f"trainstack: --out {args.out}: {error.strerror or error}", file=sys.stderr)
            return 1
    document = plan.to_json()
    changes = compare(previous, document) if previous is not None else None
    if args.json:
        if changes is not None:
            document["changes"] = [
                {"action": c.action, "type": c.type, "name": c.name, "keys": list(c.keys), "loses_work": c.loud}
                for c in changes
            ]
        json.dump(document, sys.stdout, indent=2, sort_keys=True)
        print()
    else:
        _print_plan(plan)
        if args.out:
            print(f"Startup scripts written to {args.out}/")
        if changes is not None:
            _print_changes(args.against, changes)
    if changes is not None and any(c.loud for c in changes):
        lost = [c for c in changes if c.loud]
        print(
            f"WARNING: against {args.against}, `pulumi up` would delete or replace {len(lost)} resource(s) that hold work:",
            file=sys.stderr,
        )
        for change in lost:
            print(f"  {change.action} {change.type} {change.name}", file=sys.stderr)
    return 0


def _print_changes(against: Path, changes: list[Change]) -> None:
    print(f"Changes against {against}: {len(changes) or 'none'}")
    for change in changes:
        print(f"  {'!' if change.loud else ' '} {change.describe()}")


# `docker info` asks the engine itself: a docker client without a running engine cannot run a job.
DOCKER_INFO_SECONDS = 20


def docker_engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return (
            subprocess.run(["docker", "info"], capture_output=True, timeout=DOCKER_INFO_SECONDS, check=False).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


# As for job.args in a stack file: printable, bounded.
MAX_LOCAL_ARGS_CHARS = 32 * 1024


def _job_arguments(text: str) -> list[str]:
    """argparse type for `local --args`: split as a POSIX shell would, never run by one."""
    if len(text) > MAX_LOCAL_ARGS_CHARS or any(not c.isprintable() for c in text):
        raise argparse.ArgumentTypeError(f"printable text of at most {MAX_LOCAL_ARGS_CHARS} characters")
    try:
        return shlex.split(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error} (quote as in a shell)") from None


# `local --preempt`: node names as the cluster names them, a few at a time.
_NODE_NAME = re.compile(r"[a-z][a-z0-9-]{0,62}")
MAX_PREEMPTED_NODES = 16
# `local --preempt-after`: within a day, like every other bounded wait.
MAX_PREEMPT_AFTER_SECONDS = 24 * 3600


def _node_names(text: str) -> tuple[str, ...]:
    """argparse type for `local --preempt NODE[,NODE...]`."""
    names = tuple(text.split(","))
    if len(names) > MAX_PREEMPTED_NODES or not all(_NODE_NAME.fullmatch(name) for name in names):
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


def cmd_local(args: argparse.Namespace) -> int:
    from trainstack.localrun.run import (
        LocalRunInterrupted,
        PreemptError,
        TrainerOverrides,
        WorkdirError,
        check_preemptible,
        exit_code,
        report,
        run_local,
    )
    from trainstack.localrun.wheels import FetchError
    from trainstack.stackmodel.resolved import resolve_stack
    from trainstack_agent.timings import TimeScaleError, parse_time_scale

    cfg = load_config(args)
    if cfg.settings.cluster is None and cfg.settings.tpu is None:
        print(
            f"trainstack: stack {cfg.stack} has neither trainstack:cluster nor trainstack:tpu; `local` runs a "
            "training cluster or a TPU VM (a notebook runs on Workbench alone)",
            file=sys.stderr,
        )
        return 1
    overrides = {
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
    job = cfg.settings.job
    if overrides and (job is None or not job.builtin):
        given = ", ".join(flag for flag in overrides)
        what = "has no job" if job is None else f"runs its own code ({job.mode})"
        print(
            f"trainstack: {given} override the built-in trainer's settings; stack {cfg.stack} {what}. "
            "Set your code's flags in trainstack:job.args",
            file=sys.stderr,
        )
        return 2
    if job is not None and job.image is not None and not docker_engine_answers():
        print(
            f"trainstack: stack {cfg.stack} runs the image {job.image}; `local` runs it with this machine's Docker "
            "engine, and `docker info` finds none running here. Start or install Docker (and `gcloud auth "
            "configure-docker` for its registry), or try the job as a package (job.package and job.module)",
            file=sys.stderr,
        )
        return 1
    extra = args.args or []
    if extra and job is None:
        print(f"trainstack: --args: stack {cfg.stack} has no job to pass them to", file=sys.stderr)
        return 2
    for arg in extra:
        flag = arg.split("=", 1)[0]
        if job is not None and flag in job.reserved_flags:
            hint = (
                "the --epochs, --steps-per-epoch, ... options of `local`"
                if job.builtin
                else "nothing: it is the stack's"
            )
            print(
                f"trainstack: --args: {flag} is set by the stack ({job.reserved_flags[flag]}); use {hint}",
                file=sys.stderr,
            )
            return 2
    if (args.preempt is None) != (args.preempt_after is None):
        print("trainstack: --preempt and --preempt-after go together: which nodes, and when", file=sys.stderr)
        return 2
    preempt: tuple[str, ...] = args.preempt or ()
    if preempt:
        if job is None:
            print(f"trainstack: --preempt: stack {cfg.stack} has no job to interrupt", file=sys.stderr)
            return 2
        resolved_cluster = resolve_stack(cfg).cluster
        if resolved_cluster is None:
            print(
                f"trainstack: --preempt: stack {cfg.stack} is a TPU VM; `local` preempts the Spot VMs of a cluster",
                file=sys.stderr,
            )
            return 2
        try:
            check_preemptible(resolved_cluster, preempt)
        except PreemptError as error:
            print(f"trainstack: {error}", file=sys.stderr)
            return 2
    try:
        parse_time_scale(os.environ.get(TIME_SCALE_VARIABLE))
    except TimeScaleError as error:
        print(f"trainstack: {error}", file=sys.stderr)
        return 2
    workdir = args.workdir or Path(".trainstack-local") / cfg.stack
    cluster = cfg.settings.cluster
    nodes = "1 TPU VM" if cluster is None else f"{1 + cluster.worker_count + cluster.ps_count} nodes"
    print(f"trainstack local: stack {cfg.stack}, {nodes}, work directory {workdir}")
    try:
        result = run_local(
            cfg,
            workdir,
            TrainerOverrides(overrides, tuple(extra)),
            fresh=args.fresh,
            timeout=args.timeout,
            verbose=args.verbose,
            preempt=preempt,
            preempt_after=args.preempt_after or 0.0,
        )
    except WorkdirError as error:
        print(f"trainstack: {'--fresh' if args.fresh else '--workdir'}: {error}", file=sys.stderr)
        return 1
    except FetchError as error:
        print(f"trainstack: {error}; the nodes of `local` install from what this machine fetches", file=sys.stderr)
        return 1
    except LocalRunInterrupted as interrupted:
        report(interrupted.result)
        again = f"trainstack local --stack {cfg.stack}" + (f" --workdir {workdir}" if args.workdir else "")
        print(
            f"trainstack: interrupted ({interrupted.signal_name}): every node was stopped and recorded INTERRUPTED; "
            f"the job resumes from its backup with `{again}` (--fresh starts it over)",
            file=sys.stderr,
        )
        return 130
    report(result)
    return exit_code(result)


def cmd_build(args: argparse.Namespace) -> int:
    from trainstack.stackmodel.resolved import resolve_stack

    # _load applies the catalog's checks, as `validate` does; the boot scripts are not needed.
    resolved = resolve_stack(load_config(args))
    return run_build(resolved, tag=args.tag, builder=args.builder, dry_run=args.dry_run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainstack", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    validate = sub.add_parser("validate", help="check a stack file against the catalog; exit 1 listing every problem")
    add_stack_arguments(validate)
    validate.set_defaults(func=cmd_validate)
    plan = sub.add_parser("plan", help="run the Pulumi program under mocks and list what it would create")
    add_stack_arguments(plan)
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument("--out", type=Path, help="write the rendered startup scripts to this directory")
    plan.add_argument(
        "--against",
        type=Path,
        metavar="PREVIOUS.json",
        help="an earlier `plan --json`: list what `pulumi up` would delete, replace, update or create, and warn for the bucket and machines",
    )
    plan.set_defaults(func=cmd_plan)
    local = sub.add_parser(
        "local",
        help="run the stack's cluster or TPU VM on this machine with its own boot scripts (CPU only)",
        epilog=(
            "The node agent waits as it would on Compute Engine (its polls, the settle window after a failed "
            f"step, the back-off between start calls). {TIME_SCALE_VARIABLE}=0.25 in the environment "
            f"shortens every one of those waits to a quarter for a quicker rehearsal ({MIN_TIME_SCALE} to 1)."
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
    local.add_argument(
        "--args",
        type=_job_arguments,
        metavar='"ARGS"',
        help="more arguments for the job's code, after the stack's job.args, e.g. --args \"--learning-rate 0.01\"",
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
    local.set_defaults(func=cmd_local)
    build = sub.add_parser("build", help="build the trainer image and push it to the stack's Artifact Registry")
    add_stack_arguments(build)
    build.add_argument("--tag", type=docker_tag, help="image tag (default: a hash of the Dockerfile and trainer/)")
    build.add_argument("--dry-run", action="store_true", help="print the commands and run nothing")
    build.add_argument(
        "--builder", choices=BUILDERS, help="default: docker when it is installed, else cloud-build (gcloud)"
    )
    build.set_defaults(func=cmd_build)
    machines.register(sub)
    browse.register(sub)
    status.register(sub)
    logs.register(sub)
    costreport.register(sub)
    importer.register(sub)
    check.register(sub)
    stackinit.register(sub)
    export = sub.add_parser(
        "export",
        help="the stack in another tool's format: `export vertex` (a Vertex AI custom job), "
        "`export tfplan` (a Terraform plan for IaC scanners such as checkov)",
    )
    targets = export.add_subparsers(dest="target", required=True, metavar="TARGET")
    vertex_export.register(targets)
    tfplan.register(targets)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # Shell completion for the `trainstack` command: eval "$(register-python-argcomplete trainstack)".
    # The shell sets _ARGCOMPLETE when it asks; other runs skip the import.
    if "_ARGCOMPLETE" in os.environ:
        import argcomplete

        argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except StackConfigError as error:
        print(error.report(), file=sys.stderr)
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
