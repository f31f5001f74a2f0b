"""``trainstack export vertex|tfplan``: the stack in another tool's format."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from trainstack.commands.stackargs import add_stack_arguments, load_resolved, read_stack
from trainstack.interop.tfplan import ConversionError, terraform_plan
from trainstack.interop.vertex import (
    FORMATS,
    ExportProblem,
    custom_job_spec,
    one_machine_trials,
    render,
    render_tuning,
    sdist_object,
    tuning_job,
)


def cmd_export_vertex(args: argparse.Namespace) -> int:
    tuning = None
    if args.one_node and args.tune_spec is None:
        print("trainstack: export vertex: --one-node is for a study's trials: give --tune-spec FILE", file=sys.stderr)
        return 2
    if args.tune_spec is not None:
        from trainstack.tuning.spec import SpecError, read_spec

        if args.format == "python":
            print("trainstack: --tune-spec: --format gcloud or json (the SDK snippet is a custom job)", file=sys.stderr)
            return 2
        try:
            tuning = read_spec(args.tune_spec)
        except SpecError as error:
            for problem in error.problems:
                print(f"trainstack: export vertex --tune-spec: {problem}", file=sys.stderr)
            return 1
    stack = load_resolved(args)
    package_uri = None
    if args.sdist_dir is not None:
        from trainstack.jobcode.sdist import SdistProblem, build_sdist

        if stack.job is None or stack.job.package is None or stack.job.builtin:
            print("trainstack: --sdist-dir: the stack's job is not a team's package", file=sys.stderr)
            return 2
        try:
            built = build_sdist(stack.job.package, stack.job.requirements, args.sdist_dir)
        except SdistProblem as problem:
            print(f"trainstack: export vertex: {problem}", file=sys.stderr)
            return 1
        package_uri = f"gs://{stack.bucket_name}/{sdist_object(stack.job.package.name, stack.job.package.digest)}"
        print(f"built {built}; copy it: gcloud storage cp {built} {package_uri}", file=sys.stderr)
    try:
        spec, notes = custom_job_spec(stack, package_uri)
    except ExportProblem as problem:
        print(f"trainstack: export vertex: {problem}", file=sys.stderr)
        return 1
    if tuning is not None:
        if args.one_node:
            from trainstack.stackmodel.resolved import one_node_refusal

            refusal = one_node_refusal(stack)
            if refusal is not None:
                print(f"trainstack: export vertex: {refusal}", file=sys.stderr)
                return 1
            spec = one_machine_trials(stack, spec, notes)
        job = tuning_job(stack, tuning, spec, notes)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    sys.stdout.write(render(stack, spec, args.format) if tuning is None else render_tuning(stack, job, args.format))
    return 0


def _register_vertex(targets: Any) -> None:
    vertex = targets.add_parser(
        "vertex",
        help="the cluster as a Vertex AI custom job (worker_pool_specs)",
        description="Print the stack's cluster and job as a Vertex AI CustomJobSpec: pool 0 the chief, pool 1 the "
        "workers, pool 2 the parameter servers, with the job's code and arguments. Notes go to stderr.",
    )
    add_stack_arguments(vertex)
    vertex.add_argument(
        "--format",
        choices=FORMATS,
        default="gcloud",
        help="gcloud: YAML for `gcloud ai custom-jobs create --config`; python: a Vertex AI SDK CustomJob; "
        "json: the REST request's jobSpec",
    )
    vertex.add_argument(
        "--sdist-dir",
        type=Path,
        help="for a team's package: build its Python source distribution here (Vertex AI installs it with pip)",
    )
    vertex.add_argument(
        "--tune-spec",
        type=Path,
        metavar="FILE",
        help="AI Platform's hyperparameter tuning spec (trainingInput.hyperparameters, as `trainstack tune --spec` "
        "reads it): print a Vertex AI HyperparameterTuningJob whose trials run the custom job",
    )
    vertex.add_argument(
        "--one-node",
        action="store_true",
        help="with --tune-spec: each trial on one machine, the chief's (as `trainstack tune --one-node`)",
    )
    vertex.set_defaults(func=cmd_export_vertex)


def cmd_export_tfplan(args: argparse.Namespace) -> int:
    from trainstack.base.errors import ProgramExit
    from trainstack.cloud.planning import run_plan

    stack, raw = read_stack(args)
    if args.out is not None and args.out.is_dir():
        print(f"trainstack: --out {args.out}: is a directory; give a file name", file=sys.stderr)
        return 1
    try:
        plan = run_plan(stack, raw)
    except ProgramExit as exit_:
        return exit_.code
    try:
        document = terraform_plan(plan.resources)
    except ConversionError as problem:
        print(f"trainstack: export tfplan: {problem}", file=sys.stderr)
        return 1
    text = json.dumps(document, indent=2, sort_keys=True) + "\n"
    if args.out is None:
        sys.stdout.write(text)
        return 0
    try:
        args.out.write_text(text, encoding="utf-8")
    except OSError as error:
        print(f"trainstack: --out {args.out}: {error.strerror or error}", file=sys.stderr)
        return 1
    return 0


def _register_tfplan(targets: Any) -> None:
    tfplan = targets.add_parser(
        "tfplan",
        help="the planned resources as a Terraform plan (terraform show -json), for scanners such as checkov",
        description="Print the stack's planned resources as the JSON `terraform show -json` prints for a plan that "
        "creates them, in the Terraform google-beta provider's names, for IaC scanners (checkov --framework "
        "terraform_plan). Boot scripts appear by digest, secrets masked.",
    )
    add_stack_arguments(tfplan)
    tfplan.add_argument("--out", type=Path, metavar="FILE", help="write the JSON to FILE instead of stdout")
    tfplan.set_defaults(func=cmd_export_tfplan)


def register(subparsers: Any) -> None:
    export = subparsers.add_parser(
        "export",
        help="the stack in another tool's format: `export vertex` (a Vertex AI custom job), "
        "`export tfplan` (a Terraform plan for IaC scanners such as checkov)",
    )
    targets = export.add_subparsers(dest="target", required=True, metavar="TARGET")
    _register_vertex(targets)
    _register_tfplan(targets)
