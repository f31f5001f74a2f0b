"""``trainstack init``: a first stack file from a few choices, every key it sets explained.

The machine type follows the GPU (an N1 machine for the GPUs attached to N1, the machine type
that comes with them for A100, L4 and H100), the zone is the first of the region that offers
the GPU or TPU slice, and the TPU runtime is the catalog's current one for its generation:
the same catalog `validate` checks against, so what `init` writes validates.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from trainstack.base.errors import shorten
from trainstack.base.names import PROJECT_ID_PATTERN
from trainstack.catalog import Catalog, load_catalog
from trainstack.interop.jobfile_reading import choose_zone, job_name_of_stack

PLACEHOLDER_PROJECT = "your-gcp-project"
DEFAULT_REGION = "us-central1"
# vCPUs per attached GPU on N1 machines: enough to feed a GPU, within every N1 limit.
N1_VCPUS_PER_GPU = 8
CPU_MACHINE = "n1-standard-8"
NOTEBOOK_CPU_MACHINE = "n1-standard-4"
MAX_WORKERS = 64
# Where the comments start: values stay readable in a column.
COMMENT_COLUMN = 44


class InitProblem(ValueError):
    """A choice `init` cannot turn into a stack; the message names the option and the choices."""


@dataclass(frozen=True)
class Gpu:
    type: str
    count: int
    machine_type: str
    how: str  # why this machine type
    # True for GPUs attached to an N1 machine (the stack names them); False for the ones a
    # machine type comes with (the machine type alone says them).
    attached: bool


def parse_gpu(text: str, catalog: Catalog) -> tuple[str, int]:
    name, colon, count_text = text.partition(":")
    available = sorted(g.name for g in catalog.gpus.values() if not g.retired)
    if name not in catalog.gpus or catalog.gpus[name].retired:
        raise InitProblem(f"--gpu {shorten(text)}: no such GPU type to create; types: {', '.join(available)}")
    if not colon:
        count_text = "1"
    if not (count_text.isascii() and count_text.isdigit() and 0 < len(count_text) <= 2 and int(count_text) > 0):
        raise InitProblem(f"--gpu {shorten(text)}: the count after ':' is a whole number from 1 (e.g. {name}:2)")
    return name, int(count_text)


def gpu_machine(name: str, count: int, catalog: Catalog) -> Gpu:
    """The machine type for ``count`` GPUs of type ``name``."""
    if catalog.gpus[name].attach == "n1":
        limits = catalog.n1_gpu_limits.get(name, {})
        if count not in limits:
            raise InitProblem(f"--gpu {name}:{count}: N1 machines take {_counts(limits)} of them")
        vcpus = min(N1_VCPUS_PER_GPU * count, limits[count].max_vcpus)
        standard = sorted(
            (m for m in catalog.machine_types.values() if m.series == "n1" and m.name.startswith("n1-standard-")),
            key=lambda m: m.vcpus,
        )
        machine = next((m for m in standard if m.vcpus >= vcpus), standard[-1])
        return Gpu(
            name, count, machine.name, f"an N1 machine with {machine.vcpus} vCPUs, {count} {name} attached", True
        )
    builtin = sorted(
        (m for m in catalog.machine_types.values() if m.builtin_gpu == name and m.on_demand_allowed),
        key=lambda m: (m.builtin_gpu_count, m.vcpus),
    )
    fitting = [m for m in builtin if m.builtin_gpu_count == count]
    if not fitting:
        raise InitProblem(
            f"--gpu {name}:{count}: {name} comes with its machine type, in counts of "
            f"{_counts(m.builtin_gpu_count for m in builtin)}"
        )
    return Gpu(name, count, fitting[0].name, f"the machine type that comes with {count} {name}", False)


def _counts(by_count: Iterable[int]) -> str:
    return ", ".join(str(count) for count in sorted(set(by_count))) or "none"


class _Writer:
    """Stack file lines, each key with its comment in one column."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def key(self, indent: int, text: str, comment: str = "") -> None:
        line = " " * indent + text
        self.lines.append(f"{line:<{COMMENT_COLUMN - 1}} # {comment}" if comment else line)


def _check_shape(args: argparse.Namespace) -> None:
    """The options that cannot go together, and the worker count's bounds."""
    if args.tpu and (args.gpu or args.workers or args.notebook):
        raise InitProblem("--tpu: a TPU VM runs alone; leave out --gpu, --workers and --notebook")
    if args.notebook and args.workers:
        raise InitProblem("--notebook: a notebook is one machine; leave out --workers")
    if not 0 <= args.workers <= MAX_WORKERS:
        raise InitProblem(f"--workers {args.workers}: from 0 to {MAX_WORKERS}")


def _tpu_choice(tpu_type: str, catalog: Catalog) -> tuple[str, int]:
    """``--tpu``'s generation and slice size, from the catalog's TPU generations that run TensorFlow."""
    generations = catalog.tensorflow_tpu_generations()
    without = catalog.tpu_generation_without_tensorflow(tpu_type)
    if without is not None:
        raise InitProblem(
            f"--tpu {shorten(tpu_type)}: TPU {without.generation} runs no TensorFlow; TPU generations with "
            f"TensorFlow: {', '.join(g.generation for g in generations)}"
        )
    found = catalog.tpu_generation_for(tpu_type)
    if found is None:
        kinds = ", ".join(f"{g.prefix}-{g.valid_suffixes[0]}" for g in generations)
        raise InitProblem(f"--tpu {shorten(tpu_type)}: not a TPU type; e.g. {kinds}")
    generation, size = found
    if size not in generation.valid_suffixes:
        sizes = ", ".join(f"{generation.prefix}-{n}" for n in generation.valid_suffixes)
        raise InitProblem(f"--tpu {tpu_type}: {generation.generation} slices are {sizes}")
    return generation.generation, size


def render(args: argparse.Namespace, catalog: Catalog, named: str | None = None) -> str:
    """The stack file's text; ``named``: how later commands name it (default ``--stack NAME``)."""
    named = named or f"--stack {args.stack}"
    _check_shape(args)
    gpu = gpu_machine(*parse_gpu(args.gpu, catalog), catalog) if args.gpu else None
    tpu = _tpu_choice(args.tpu, catalog) if args.tpu else None
    if args.project is not None and PROJECT_ID_PATTERN.fullmatch(args.project) is None:
        raise InitProblem(
            f"--project {shorten(args.project)}: not a Google Cloud project id (6-30 lowercase letters, digits and "
            "hyphens, starting with a letter)"
        )
    region = args.region or DEFAULT_REGION
    if region not in catalog.regions:
        raise InitProblem(
            f"--region {shorten(region)}: not a region of the catalog (`trainstack gpus --all-regions` lists them)"
        )
    # A machine type with built-in GPUs in a zone of its own: the zone offers that machine type.
    zone = choose_zone(region, {gpu.type} if gpu else set(), tpu, [gpu.machine_type] if gpu else [])
    if zone is None:
        name = gpu.type if gpu else args.tpu if tpu else "any machine"
        what = f"{gpu.machine_type} ({gpu.count} x {gpu.type})" if gpu and not gpu.attached else name
        raise InitProblem(
            f"--region {region}: no zone of it offers {what} in the catalog; "
            f"`.venv/bin/trainstack {'tpus' if tpu else 'gpus'} {name if gpu or tpu else ''} --all-regions` "
            "lists the regions that do"
        )
    command = _command_line(args)
    w = _Writer()
    w.lines += [
        f"# Written by `{command}`.",
        f"# Check it with `.venv/bin/trainstack validate {named}`, try it with",
        f"# `.venv/bin/trainstack local {named}`; reference: docs/stacks.md.",
        "config:",
    ]
    project = args.project or PLACEHOLDER_PROJECT
    w.key(2, f"gcp:project: {project}", "your Google Cloud project" if not args.project else "the Google Cloud project")
    w.key(2, f"gcp:region: {region}", "where everything is created")
    offers = gpu.type if gpu else (f"TPU {args.tpu}" if tpu else "")
    w.key(
        2, f"trainstack:zone: {zone}", f"the first zone of {region} offering {offers}" if offers else "its first zone"
    )
    w.key(2, "trainstack:labels:", "on every resource, for billing reports")
    w.key(4, f"stack: {args.stack.lower()[:63]}")
    if tpu is not None:
        runtime = _tpu_runtime(catalog, tpu[0])
        w.key(2, "trainstack:tpu:", "one TPU VM")
        w.key(4, f"accelerator_type: {args.tpu}")
        w.key(4, f"runtime_version: {runtime}", "the catalog's current TensorFlow runtime for it")
        w.key(4, f"spot: {'true' if args.spot else 'false'}", "Spot: cheaper, may be preempted" if args.spot else "")
    elif args.notebook:
        w.key(2, "trainstack:notebook:", "a Vertex AI Workbench instance")
        w.key(4, f"machine_type: {gpu.machine_type if gpu else NOTEBOOK_CPU_MACHINE}", gpu.how if gpu else "4 vCPUs")
        if gpu and gpu.attached:
            w.key(4, f"accelerator: {{type: {gpu.type}, count: {gpu.count}}}", "its driver installs at first boot")
        w.key(4, "idle_timeout_minutes: 60", "Workbench stops it after an hour idle: it stops billing")
    else:
        machine = gpu.machine_type if gpu else CPU_MACHINE
        accelerator = f", accelerator: {{type: {gpu.type}, count: {gpu.count}}}" if gpu and gpu.attached else ""
        chief_spot = args.spot and not args.workers
        w.key(2, "trainstack:cluster:", "the training machines")
        w.key(
            4,
            f"chief: {{machine_type: {machine}{accelerator}{', spot: true' if chief_spot else ''}}}",
            gpu.how if gpu else "8 vCPUs, no GPU",
        )
        if args.workers:
            w.key(4, "workers:", "more machines like the chief")
            w.key(6, f"count: {args.workers}")
            w.key(6, f"machine_type: {machine}")
            if accelerator and gpu:
                w.key(6, f"accelerator: {{type: {gpu.type}, count: {gpu.count}}}")
            if args.spot:
                w.key(6, "spot: true", "Spot: cheaper; the chief starts a preempted one again")
        w.key(4, "strategy: auto", "MirroredStrategy on one machine, MultiWorkerMirroredStrategy across several")
        w.key(4, "max_run_hours: 4", "the run-time cap: the machines are released after it")
        w.key(4, "on_finish: stop", "when the job ends its machines stop: no more billing for them")
    if not args.notebook:
        w.key(2, "trainstack:job:", "the built-in trainer; for your own code see docs/own-code.md")
        w.key(4, f"name: {job_name_of_stack(args.stack)}", "its folder: jobs/<name> in the stack's bucket")
        w.key(4, "model: cnn", "or resnet50")
        w.key(4, "data: synthetic", "or gs://BUCKET/PATH of TFRecords")
        w.key(4, "epochs: 10")
    return "\n".join(w.lines) + "\n"


def _command_line(args: argparse.Namespace) -> str:
    """The init command as given (its choices only), for the file's first line."""
    words = ["trainstack init", f"--stack {args.stack}"]
    words += [f"--{name} {getattr(args, name)}" for name in ("gpu", "tpu", "project", "region") if getattr(args, name)]
    words += [f"--workers {args.workers}"] if args.workers else []
    words += [f"--{name}" for name in ("spot", "notebook") if getattr(args, name)]
    return " ".join(words)


def _tpu_runtime(catalog: Catalog, generation: str) -> str:
    """The newest TensorFlow runtime (never a JAX/PyTorch base image, never a name that merely sorts last)."""
    runtime = catalog.tensorflow_runtime(generation)
    if runtime is None:
        raise InitProblem(f"--tpu: the catalog has no current TensorFlow runtime for {generation}")
    return runtime.version


def cmd_init(args: argparse.Namespace) -> int:
    from trainstack.stackmodel.naming import stack_name_problem

    problem = stack_name_problem(args.stack)
    if problem is not None:
        print(f"trainstack: --stack {args.stack}: {problem}", file=sys.stderr)
        return 2
    from trainstack.stackmodel.stackfile import STACKS_DIR

    out: Path = args.out or STACKS_DIR / f"Pulumi.{args.stack}.yaml"
    if out.exists() or out.is_symlink():
        print(f"trainstack: {out} exists; init writes new stacks only (--out PATH to write elsewhere)", file=sys.stderr)
        return 1
    try:
        text = render(args, load_catalog(), None if args.out is None else f"--stack-file {args.out}")
    except InitProblem as error:
        print(f"trainstack: {error}", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("x", encoding="utf-8") as handle:
        handle.write(text)
    print(f"wrote {out}")
    from trainstack.commands.validation import validate_file

    # What `validate` says of it, as a user would run it next.
    return validate_file(out)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "init",
        help="write a first stack file from a few choices, every key it sets explained",
        description="Write stacks/Pulumi.NAME.yaml: a cluster (the default), a TPU VM (--tpu) or a Workbench "
        "notebook (--notebook), with a zone that offers the hardware and a comment on every key. "
        "It never overwrites a file.",
    )
    parser.add_argument("--stack", required=True, help="the stack's name: writes stacks/Pulumi.<NAME>.yaml")
    parser.add_argument(
        "--gpu", metavar="TYPE[:COUNT]", help="GPUs per machine, e.g. nvidia-tesla-t4:1 (`gpus` lists them)"
    )
    parser.add_argument("--workers", type=int, default=0, help="machines besides the chief (default 0)")
    parser.add_argument("--spot", action="store_true", help="Spot machines: the workers, or the only machine")
    parser.add_argument("--tpu", metavar="TYPE", help="a TPU VM of this type, e.g. v5litepod-8 (`tpus` lists them)")
    parser.add_argument("--notebook", action="store_true", help="a Vertex AI Workbench notebook")
    parser.add_argument("--project", help=f"the Google Cloud project (default: {PLACEHOLDER_PROJECT}, to replace)")
    parser.add_argument("--region", help=f"the region (default {DEFAULT_REGION})")
    parser.add_argument("--out", type=Path, help="the file to write (default stacks/Pulumi.NAME.yaml)")
    parser.set_defaults(func=cmd_init)
