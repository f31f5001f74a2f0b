"""``trainstack plan``: the real Pulumi program run under mocks, listed, priced, and compared with an earlier plan."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainstack.base.errors import ProgramExit
from trainstack.commands.stackargs import add_stack_arguments, read_stack
from trainstack.stackmodel.cost import report_lines
from trainstack_contract import EXECUTED_PREFIX
from trainstack_contract.grants import CREATE_ONLY_ROLE, REPLACE_ROLE

if TYPE_CHECKING:
    from trainstack.cloud.plandiff import Change
    from trainstack.cloud.planning import Plan


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
        "reservationAffinity",
        "role",
        "service",
    ):
        if key in resource_inputs and resource_inputs[key] not in (None, [], {}):
            value = resource_inputs[key]
            if isinstance(value, list) and value and isinstance(value[0], dict):
                value = ", ".join(f"{v.get('count')} x {v.get('type')}" for v in value)
            elif isinstance(value, dict):
                # Sorted: the mocks hand nested inputs over in an order that varies between runs.
                value = ",".join(f"{k}={v}" for k, v in sorted(value.items()) if k != "maxRunDuration") + (
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
    for line in report_lines(plan.cost):
        print(line)


# What each of a teammate's grants to queue jobs does, by role (trainstack_contract.grants).
QUEUE_WRITES = {CREATE_ONLY_ROLE: "creates new objects, replaces none", REPLACE_ROLE: "replaces this one object"}
# A replace grant on a folder: `tune`'s studies.
QUEUE_FOLDER_REPLACE = "creates and replaces tuning studies"


def _print_bucket_access(access: dict[str, Any]) -> None:
    writers = [g for g in access["grants"] if g["writes"]]
    print(f"Who can write gs://{access['bucket']} (besides `pulumi up`; every machine reads it all):")
    for grant in writers:
        what = QUEUE_WRITES.get(grant["role"], grant["role"])
        if grant["role"] == REPLACE_ROLE and grant["objects"].endswith("*"):
            what = QUEUE_FOLDER_REPLACE
        queues = f" (queues jobs: {what})" if grant.get("queues_jobs") else ""
        print(f"  {grant['member']}: {grant['objects']}{queues}")
    if access["writable_executed_objects"]:
        print(f"  WARNING: a machine can rewrite what nodes run: {', '.join(access['writable_executed_objects'])}")
    elif access["executed_objects"]:
        print(
            f"  what nodes run ({', '.join(access['executed_objects'])}) is written by `pulumi up` alone: "
            f"no grant of this stack lets a machine write under {EXECUTED_PREFIX}, in any bucket"
        )
    if "job_dir" in access:
        writers = access["job_dir"]["writers"]
        print(f"Who can write the job's status and backups in {access['job_dir']['uri']}/:")
        for member in writers:
            print(f"  {member}")
        if not writers:
            print("  no machine")
        places = access["job_dir"]
        print(
            "What the job's code reaches with its own token: its directory (but status/ and hypertune/, the "
            "agents'), and"
        )
        print(f"  reads: {', '.join(places['reads']) or 'nothing else'}")
        print(f"  writes: {', '.join(places['writes']) or 'nothing else'}")


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


def register(subparsers: Any) -> None:
    plan = subparsers.add_parser("plan", help="run the Pulumi program under mocks and list what it would create")
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
