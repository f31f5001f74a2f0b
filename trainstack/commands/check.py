"""`trainstack check`: the CrossGuard policy pack in policies/, run offline on a stack's plan.

The plan is the real program under Pulumi's mock runtime (as `plan`); the rules are the pack's
own policy objects, called through their ``validate`` entry point by
``trainstack_policies.offline`` in the pack's environment. pulumi-policy pins a protobuf that
TensorFlow refuses, so the two halves run in two interpreters and talk JSON over a pipe.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainstack.base.project import PROJECT_ROOT
from trainstack.commands.stackargs import add_stack_arguments, read_stack
from trainstack_contract.policy import PolicyFinding

if TYPE_CHECKING:
    from trainstack.cloud.planning import Plan

POLICY_PACK = PROJECT_ROOT / "policies"
# Where the project's bootstrap (and Pulumi itself, per PulumiPolicy.yaml) puts the pack's environment.
POLICY_PYTHON = POLICY_PACK / ".venv" / "bin" / "python"
# Evaluating a few thousand resources takes well under a second; a stuck interpreter is not a result.
EVALUATION_TIMEOUT_SECONDS = 300
MAX_CONFIG_BYTES = 1024 * 1024


class CheckProblem(Exception):
    """The check could not be run; the message says why and what to do."""


def policy_python() -> Path:
    override = os.environ.get("TRAINSTACK_POLICY_PYTHON")
    python = Path(override) if override else POLICY_PYTHON
    if not python.is_file():
        where = "TRAINSTACK_POLICY_PYTHON" if override else "the policy pack's environment"
        raise CheckProblem(
            f"{where} {python} is missing: run `bash scripts/bootstrap`, which creates it from "
            "policies/requirements.txt (pulumi-policy cannot share .venv with TensorFlow)"
        )
    return python


def read_policy_config(path: Path | None) -> dict[str, Any]:
    """A `pulumi preview --policy-pack-config` document: {policy: level | {enforcementLevel, ...}}."""
    if path is None:
        return {}
    from trainstack.base.files import OptionFileProblem, load_option_mapping

    try:
        return load_option_mapping(
            "--policy-config", path, MAX_CONFIG_BYTES, json_only=True, not_a_mapping="a JSON object of policy names"
        )
    except OptionFileProblem as problem:
        raise CheckProblem(str(problem)) from None


def evaluate(
    stack: str, resources: list[dict[str, Any]], config: dict[str, Any]
) -> tuple[list[str], list[PolicyFinding]]:
    """The pack's policy names and every violation, from the pack's own interpreter."""
    request = json.dumps({"stack": stack, "resources": resources, "config": config})
    try:
        run = subprocess.run(
            [str(policy_python()), "-m", "trainstack_policies.offline"],
            input=request,
            capture_output=True,
            text=True,
            cwd=POLICY_PACK,
            timeout=EVALUATION_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise CheckProblem(f"the policy pack gave no answer within {EVALUATION_TIMEOUT_SECONDS} s") from None
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or [f"exit status {run.returncode}"])[-1]
        raise CheckProblem(f"the policy pack failed: {last.removeprefix('trainstack_policies: ')}")
    result = json.loads(run.stdout)
    return list(result["policies"]), [PolicyFinding(**v) for v in result["violations"]]


def check_plan(plan: Plan, config: dict[str, Any]) -> tuple[list[str], list[PolicyFinding]]:
    return evaluate(plan.stack, plan.resource_documents(), config)


def cmd_check(args: argparse.Namespace) -> int:
    from trainstack.base.errors import ProgramExit
    from trainstack.cloud.planning import run_plan

    try:
        config = read_policy_config(args.policy_config)
        policy_python()  # before the plan: a missing environment is known at once
        stack, raw = read_stack(args)
        try:
            plan = run_plan(stack, raw)
        except ProgramExit as exit_:
            return exit_.code
        policies, findings = check_plan(plan, config)
    except CheckProblem as problem:
        print(f"trainstack check: {problem}", file=sys.stderr)
        return 1
    mandatory = [f for f in findings if f.enforcement == "mandatory"]
    if args.json:
        document = {"stack": stack, "policies": policies, "violations": [f.__dict__ for f in findings]}
        json.dump(document, sys.stdout, indent=2, sort_keys=True)
        print()
    else:
        for finding in findings:
            print(
                f"{finding.enforcement:<9}  {finding.policy}  {finding.resource_name} ({finding.resource_type}): "
                f"{finding.message}"
            )
        advisory = len(findings) - len(mandatory)
        print(
            f"{stack}: {len(policies)} policies over {len(plan.resources)} planned resources: "
            f"{len(mandatory)} mandatory, {advisory} advisory violation(s)"
        )
    return 1 if mandatory else 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check",
        help="run the policy pack (policies/) on the stack's plan; exit 1 on a mandatory violation",
        description="Plan the stack under Pulumi's mock runtime, as `plan` does, and evaluate the CrossGuard "
        "policy pack in policies/ against every planned resource: the pack's own rules, the ones "
        "`pulumi preview --policy-pack policies` runs. Prints each violation with its policy and resource; "
        "exit 1 if any is mandatory.",
    )
    add_stack_arguments(parser)
    parser.add_argument(
        "--policy-config",
        type=Path,
        metavar="FILE",
        help="JSON as for `pulumi preview --policy-pack-config`, e.g. "
        '{"cost-labels": {"required_labels": ["trainstack-stack", "team"]}, "bucket-versioning": "mandatory"}',
    )
    parser.add_argument("--json", action="store_true", help="the policies and violations as JSON")
    parser.set_defaults(func=cmd_check)
