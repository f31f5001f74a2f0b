"""``trainstack import``: a stack file from a job a team already has.

Reads Vertex AI ``worker_pool_specs`` (a list, or a CustomJob spec holding one, in YAML or
JSON, snake_case or camelCase): pool 0 is the chief, pool 1 the workers, pool 2 the parameter
servers (https://cloud.google.com/vertex-ai/docs/training/distributed-training); or an AI
Platform ``config.yaml`` (``trainingInput``) of the CUSTOM tier with Compute Engine machine
types, or a ``cloud_tpu`` worker. The stack it writes is checked like any other; what the old
service allowed and a stack cannot say is reported, never dropped in silence.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainstack.base.errors import one_line, shorten
from trainstack.base.names import zone_argument
from trainstack.catalog import load_catalog
from trainstack.interop.ai_platform import (
    TPU_GENERATION,
    TPU_SIZE,
    TPU_SLICE,
    TrainingShape,
    shape_of,
    strategy_for,
)
from trainstack.interop.ai_platform_command import COMMAND, is_command_line, shape_of_command_line
from trainstack.interop.jobfile_reading import (
    DEFAULT_REGION,
    MAX_DIGITS,
    Imported,
    ImportProblem,
    choose_zone,
    get,
    gpu_name,
    job_name_of_stack,
    parse_document,
    read_text,
    run_hours,
    whole_number,
    without_job_dir,
)
from trainstack.interop.notebook_cell import command_in_cell

if TYPE_CHECKING:
    from trainstack.tuning.spec import HyperparameterSpec

CHIEF_POOL, WORKER_POOL, PS_POOL, EVALUATOR_POOL = range(4)
# The project placeholder of the shipped stacks: `plan` names it as one to replace.
PLACEHOLDER_PROJECT = "your-gcp-project"
# Vertex AI's samples write the project into image URIs as {PROJECT_ID} or PROJECT_ID.
PROJECT_PLACEHOLDERS = ("{PROJECT_ID}", "PROJECT_ID")


def _pools(document: Any) -> list[Any]:
    if isinstance(document, list):
        return document
    spec = get(document, "job_spec", "jobSpec") or document
    pools = get(spec, "worker_pool_specs", "workerPoolSpecs")
    if isinstance(pools, list):
        return pools
    raise ImportProblem("no worker_pool_specs found: expected a list of worker pools or a CustomJob spec holding one")


def _node(pool: Any, index: int, notices: list[str]) -> dict[str, Any]:
    spec = get(pool, "machine_spec", "machineSpec")
    machine_type = get(spec, "machine_type", "machineType")
    if not isinstance(machine_type, str):
        raise ImportProblem(f"worker pool {index}: machine_spec.machine_type is missing")
    node: dict[str, Any] = {"machine_type": machine_type}
    accelerator = get(spec, "accelerator_type", "acceleratorType")
    count = whole_number(get(spec, "accelerator_count", "acceleratorCount"))
    if accelerator is not None:
        if not isinstance(accelerator, str) or count is None:
            raise ImportProblem(f"worker pool {index}: accelerator_type needs an accelerator_count (a whole number)")
        node["accelerator"] = {"type": gpu_name(accelerator), "count": count}
    disk = get(pool, "disk_spec", "diskSpec")
    disk_gb = get(disk, "boot_disk_size_gb", "bootDiskSizeGb")
    if isinstance(disk_gb, int) and not isinstance(disk_gb, bool):
        node["disk_gb"] = disk_gb
    disk_type = get(disk, "boot_disk_type", "bootDiskType")
    if disk_type:
        notices.append(
            f"worker pool {index}: disk_spec.boot_disk_type {disk_type} is not imported: a stack's nodes boot from "
            "pd-balanced, or the disk type their machine type requires"
        )
    return node


def _replicas(pool: Any, index: int) -> int:
    value = get(pool, "replica_count", "replicaCount")
    count = 1 if value is None else whole_number(value)
    if count is None:
        raise ImportProblem(
            f"worker pool {index}: replica_count must be a whole number of at most {MAX_DIGITS} digits, not {shorten(value)}"
        )
    return count


def _job(pools: list[Any], project: str, stack: str, notices: list[str]) -> dict[str, Any] | None:
    def code(pool: Any) -> Any:
        return get(pool, "container_spec", "containerSpec") or get(pool, "python_package_spec", "pythonPackageSpec")

    chief = pools[CHIEF_POOL]
    container = get(chief, "container_spec", "containerSpec")
    package = get(chief, "python_package_spec", "pythonPackageSpec")
    for index, pool in enumerate(pools[1:], start=1):
        if pool and code(pool) is not None and code(pool) != code(chief):
            notices.append(f"worker pool {index} runs other code than pool 0; a stack runs pool 0's on every node")
    if container is not None:
        image = get(container, "image_uri", "imageUri")
        if not isinstance(image, str):
            raise ImportProblem("worker pool 0: container_spec.image_uri is missing")
        for placeholder in PROJECT_PLACEHOLDERS:
            if placeholder in image:
                image = image.replace(placeholder, project)
                notices.append(f"the image URI named the project as {placeholder}: now {project}")
                break
        # Job names are letters, digits and underscores: the stack's name, spelled so.
        job: dict[str, Any] = {"name": job_name_of_stack(stack), "image": image}
        args = get(container, "args")
        if (
            isinstance(args, list)
            and all(isinstance(a, str) for a in args)
            and (kept := without_job_dir(args, notices))
        ):
            job["args"] = kept
        if get(container, "command"):
            notices.append("container_spec.command is not imported: a stack runs the image's own entry point")
        if (env := _env(get(container, "env"), notices)) is not None:
            job["env"] = env
        return job
    if package is not None:
        module = get(package, "python_module", "pythonModule")
        notices.append(
            "python_package_spec: the package is in a bucket (package_uris), and a stack ships a local package "
            f"directory: set trainstack:job.package to its source directory{f' (module {module})' if module else ''}"
        )
        return None
    notices.append("worker pool 0 names no code (container_spec or python_package_spec): the stack has no job")
    return None


def _env(variables: Any, notices: list[str]) -> dict[str, Any] | None:
    """container_spec.env ([{name, value}, ...]) as job.env; a variable whose name says it holds
    a secret is left out (the stack file would show its value) and named, with the way to keep it."""
    from trainstack.stackmodel.secrets import SECRET_COMMAND, SECRET_LIKE_ENV_NAME

    if not variables:
        return None
    if not isinstance(variables, list) or not all(isinstance(v, dict) for v in variables):
        raise ImportProblem(
            f"worker pool 0: container_spec.env must be a list of {{name, value}} (got {shorten(variables)})"
        )
    env: dict[str, Any] = {}
    for variable in variables:
        name, value = get(variable, "name"), get(variable, "value")
        if not isinstance(name, str):
            raise ImportProblem(f"worker pool 0: container_spec.env: each variable has a name (got {shorten(name)})")
        if SECRET_LIKE_ENV_NAME.fullmatch(name):
            notices.append(
                f"container_spec.env {shorten(name)} is not imported: its name says it holds a secret, which a stack "
                f"keeps in Secret Manager: {SECRET_COMMAND.format(name=name)}"
            )
            continue
        env[name] = "" if value is None else value
    if env:
        notices.append(f"container_spec.env is job.env: {', '.join(env)}")
    return env or None


def _run_hours(document: Any, cluster: dict[str, Any], notices: list[str]) -> None:
    """A CustomJob's scheduling.timeout as the cluster's run-time cap (Vertex AI ended the job then)."""
    spec = (get(document, "job_spec", "jobSpec") or document) if isinstance(document, dict) else None
    timeout = get(get(spec, "scheduling"), "timeout")
    if timeout is None:
        return
    cluster["max_run_hours"] = run_hours(timeout, "scheduling.timeout", notices)
    notices.append(
        f"scheduling.timeout {timeout} is cluster.max_run_hours {cluster['max_run_hours']}: the machines stop then"
    )


def worker_pools_shape(document: Any, project: str, name: str, notices: list[str]) -> TrainingShape:
    pools = _pools(document)
    if not pools or not pools[CHIEF_POOL]:
        raise ImportProblem("worker pool 0 (the chief) is missing")
    if len(pools) > EVALUATOR_POOL + 1:
        raise ImportProblem(f"{len(pools)} worker pools: Vertex AI has at most four")
    if _replicas(pools[CHIEF_POOL], CHIEF_POOL) != 1:
        raise ImportProblem("worker pool 0 is the chief: its replica_count must be 1")
    cluster: dict[str, Any] = {"chief": _node(pools[CHIEF_POOL], CHIEF_POOL, notices)}
    workers = _replicas(pools[WORKER_POOL], WORKER_POOL) if len(pools) > WORKER_POOL and pools[WORKER_POOL] else 0
    if workers:
        cluster["workers"] = {"count": workers, **_node(pools[WORKER_POOL], WORKER_POOL, notices)}
    servers = _replicas(pools[PS_POOL], PS_POOL) if len(pools) > PS_POOL and pools[PS_POOL] else 0
    if servers:
        ps = _node(pools[PS_POOL], PS_POOL, notices)
        if "accelerator" in ps:
            notices.append("parameter servers take no GPUs in a stack: pool 2's accelerator is dropped")
            del ps["accelerator"]
        cluster["parameter_servers"] = {"count": servers, **ps}
    if len(pools) > EVALUATOR_POOL and pools[EVALUATOR_POOL]:
        notices.append("worker pool 3 (evaluator) is not imported: a stack has no evaluator pool")
    cluster["strategy"] = strategy_for(workers, servers)
    _run_hours(document, cluster, notices)
    return TrainingShape(cluster=cluster, job=_job(pools, project, name, notices))


def import_file(path: Path, stack: str, project: str, zone: str | None) -> Imported:
    """Any of the three kinds of file: a saved gcloud command line, a trainingInput, or worker pools."""
    text = read_text(path)
    notices: list[str] = []
    cell = None if is_command_line(text) else command_in_cell(text, COMMAND)
    if is_command_line(text):
        shape = shape_of_command_line(text, path.parent, stack, notices)
    elif cell is not None:
        # A notebook's bash cell: its command, with the cell's own plain variables written in.
        notices += cell.notices()
        shape = shape_of_command_line(cell.command, path.parent, stack, notices)
    else:
        document = parse_document(text, path)
        if isinstance(document, dict) and get(document, "trainingInput", "training_input") is not None:
            shape = shape_of(document, job_name_of_stack(stack), notices)
        else:
            shape = worker_pools_shape(document, project, stack, notices)
    if zone is None:
        region = shape.region or DEFAULT_REGION
        tpu = (TPU_GENERATION, TPU_SIZE) if shape.tpu else None
        zone = choose_zone(region, shape.gpus, tpu, shape.machine_types)
        catalog = load_catalog()
        built_in = [
            name for name in shape.machine_types if (machine := catalog.machine_types.get(name)) and machine.builtin_gpu
        ]
        wanted = " and ".join([*sorted(shape.gpus), *built_in, *([TPU_SLICE] if tpu else [])]) or "these machines"
        if zone is None:
            # A zone that exists: the check below then names the machines it lacks, and where they are.
            zone = next(iter(catalog.zones_of(region)), f"{region}-a")
            notices.append(f"no zone of {region} in the catalog offers {wanted}: {zone} written; pass --zone")
        else:
            notices.append(f"zone {zone}: the first zone of {region} that offers {wanted} (--zone to choose)")
    elif shape.region and zone.rsplit("-", 1)[0] != shape.region:
        notices.append(f"the job ran in {shape.region}; the stack is in {zone}, as --zone says")
    settings: dict[str, Any] = {"gcp:project": project, "gcp:region": zone.rsplit("-", 1)[0], "trainstack:zone": zone}
    if shape.cluster is not None:
        settings["trainstack:cluster"] = shape.cluster
    if shape.tpu is not None:
        settings["trainstack:tpu"] = shape.tpu
    if shape.job is not None:
        settings["trainstack:job"] = shape.job
        if shape.tuning is not None and reports_with_hypertune(shape.job) and not requires_hypertune(shape.job):
            where = shape.job.get("requirements")
            notices.append(
                "the job's package imports hypertune, which no node installs: add the line cloudml-hypertune to "
                + (f"{where}" if where else "a requirements file and name it in trainstack:job.requirements")
                + " (a line that pins nothing is fine: trainstack hash-locks the file for the nodes)"
            )
    return Imported(settings, notices, tuning=shape.tuning)


# How much of a package the hypertune look reads: a sample's package is a few files.
MAX_SCANNED_FILES = 200
MAX_SCANNED_BYTES = 1 << 20
_IMPORTS_HYPERTUNE = re.compile(r"^\s*(?:import\s+hypertune\b|from\s+hypertune\s+import\b)", re.MULTILINE)


def requires_hypertune(job: dict[str, Any]) -> bool:
    """Whether the job's requirements file lists cloudml-hypertune."""
    from trainstack.jobcode.node_environment import locked_requirements
    from trainstack.jobcode.package import project_path

    requirements = job.get("requirements")
    if not isinstance(requirements, str):
        return False
    try:
        text = project_path(requirements).read_bytes()[:MAX_SCANNED_BYTES].decode("utf-8", errors="replace")
    except OSError:
        return False
    return any(entry.name == "cloudml-hypertune" for entry in locked_requirements(text))


def reports_with_hypertune(job: dict[str, Any]) -> bool:
    """Whether the job's package (a directory) imports cloudml-hypertune's ``hypertune``, in
    the first files and bytes of it."""
    package = job.get("package")
    if not isinstance(package, str):
        return False
    from trainstack.jobcode.package import project_path

    root = project_path(package)
    if not root.is_dir() or root.is_symlink():
        return False
    for number, path in enumerate(sorted(root.rglob("*.py"))):
        if number >= MAX_SCANNED_FILES:
            break
        if path.is_symlink() or not path.is_file():
            continue
        try:
            with path.open("rb") as handle:
                text = handle.read(MAX_SCANNED_BYTES).decode("utf-8", errors="replace")
        except OSError:
            continue
        if _IMPORTS_HYPERTUNE.search(text):
            return True
    return False


def cmd_import(args: argparse.Namespace) -> int:
    import yaml

    from trainstack.base.errors import StackConfigError
    from trainstack.stackmodel.feasibility import parse_and_check
    from trainstack.stackmodel.stackfile import STACKS_DIR
    from trainstack.tuning.spec import SpecError

    destination = args.out or STACKS_DIR / f"Pulumi.{args.stack}.yaml"
    if args.out is not None and args.out.name != f"Pulumi.{args.stack}.yaml":
        print(
            f"trainstack: --out: name the file Pulumi.{args.stack}.yaml (Pulumi takes the stack name from it)",
            file=sys.stderr,
        )
        return 2
    if destination.exists() and not args.force:
        print(f"trainstack: {destination} exists; not overwriting it (--force to replace it)", file=sys.stderr)
        return 1
    try:
        imported = import_file(args.file, args.stack, args.project, args.zone)
    except ImportProblem as problem:
        print(f"trainstack: import {one_line(str(args.file))}: {one_line(str(problem))}", file=sys.stderr)
        return 1
    except SpecError as error:
        for spec_problem in error.problems:
            print(f"trainstack: import {one_line(str(args.file))}: {spec_problem}", file=sys.stderr)
        return 1
    tuning = tuning_path(destination) if imported.tuning is not None else None
    if tuning is not None:
        if tuning.exists() and not args.force:
            print(f"trainstack: {tuning} exists; not overwriting it (--force to replace it)", file=sys.stderr)
            return 1
        imported.notices.append(
            f"hyperparameters (tuning) are in {tuning}: run the study with {tune_command(args, destination, tuning)}"
        )
    for notice in imported.notices:
        print(f"notice: {one_line(notice)}")
    try:
        parse_and_check(args.stack, imported.config)
    except StackConfigError as error:
        # Written anyway: the user fixes what the new machines cannot do, named key by key.
        print(error.report(), file=sys.stderr)
        checked = False
    else:
        checked = True
    destination.parent.mkdir(parents=True, exist_ok=True)
    # The notices stay with the stack: what was mapped, inferred or left behind.
    header = "".join(
        f"# {one_line(line)}\n"
        for line in [
            f"Imported from {args.file.name} by `trainstack import`; check it with `trainstack validate`.",
            *(f"notice: {notice}" for notice in imported.notices),
        ]
    )
    try:
        stack_text = header + yaml.safe_dump({"config": imported.config}, sort_keys=False)
        if tuning is None or imported.tuning is None:
            write_checked(destination, stack_text, imported.config)
        else:
            origin = f"Hyperparameter tuning spec imported from {args.file.name} by `trainstack import`"
            spec_header = f"# {one_line(f'{origin}; run it with {tune_command(args, destination, tuning)}')}\n"
            with staged_spec(tuning, spec_header, imported.tuning) as commit:
                write_checked(destination, stack_text, imported.config)
                commit()
            print(f"wrote {tuning}")
    except ImportProblem as problem:
        print(f"trainstack: import {one_line(str(args.file))}: {one_line(str(problem))}", file=sys.stderr)
        return 1
    print(f"wrote {destination}{'' if checked else ' (it does not validate yet: see above)'}")
    return 0 if checked else 1


def tuning_path(stack_file: Path) -> Path:
    """Where import writes a job's tuning spec: beside its stack file, named after it
    (stacks/Pulumi.team.yaml -> stacks/Pulumi.team.hptuning.yaml)."""
    return stack_file.with_name(f"{stack_file.stem}.hptuning.yaml")


def tune_command(args: argparse.Namespace, stack_file: Path, spec_file: Path) -> str:
    """The command that runs the imported study, naming the stack as later commands find it."""
    import shlex

    from trainstack.stackmodel.stackfile import stack_file_path

    same = stack_file.resolve() == stack_file_path(args.stack).resolve()
    stack = f"--stack {args.stack}" if same else f"--stack-file {shlex.quote(str(stack_file))}"
    return f"`trainstack tune {stack} --spec {shlex.quote(str(spec_file))}`"


@contextmanager
def staged_spec(destination: Path, header: str, spec: HyperparameterSpec) -> Iterator[Callable[[], None]]:
    """The spec written beside ``destination`` and read back (as `tune` will read it) before the
    stack file is written; the caller's commit moves it into place, else nothing is left."""
    import yaml

    from trainstack.tuning.spec import SpecError, read_spec

    text = header + yaml.safe_dump({"trainingInput": {"hyperparameters": spec.to_json()}}, sort_keys=False)
    temporary = destination.with_name(f".{destination.name}.{os.getpid()}.tmp")
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(text, encoding="utf-8")
        try:
            if read_spec(temporary) != spec:
                raise ImportProblem("the tuning spec would not read back as written; nothing was written")
        except SpecError as error:
            raise ImportProblem(f"the tuning spec would not read back ({error}); nothing was written") from None
        yield lambda: os.replace(temporary, destination)
    finally:
        temporary.unlink(missing_ok=True)


def write_checked(destination: Path, text: str, config: dict[str, Any]) -> None:
    """Writes the stack file beside ``destination`` and keeps it only when the stack-file loader
    reads back exactly ``{"config": config}``: nothing a copied value held became YAML of its own."""
    from trainstack.base.files import FileProblem, load_yaml
    from trainstack.base.files import read_text as read_bounded_text
    from trainstack.stackmodel.stackfile import MAX_STACK_FILE_BYTES

    temporary = destination.with_name(f".{destination.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        try:
            document = load_yaml(read_bounded_text(temporary, MAX_STACK_FILE_BYTES))
        except FileProblem as problem:
            raise ImportProblem(f"the stack file would not read back ({problem}); nothing was written") from None
        if document != {"config": config}:
            raise ImportProblem("the stack file would not read back as written; nothing was written")
        os.replace(temporary, destination)
    finally:
        temporary.unlink(missing_ok=True)


def _name(text: str) -> str:
    """The stack name, by the one rule every command uses (Pulumi's own)."""
    from trainstack.stackmodel.naming import stack_name_problem

    if (problem := stack_name_problem(text)) is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "import",
        help="write a stack from an AI Platform job (config.yaml or the gcloud command line) or Vertex AI worker pools",
        description="Write stacks/Pulumi.<STACK>.yaml from an AI Platform Training config.yaml (trainingInput, any "
        "scale tier, legacy machine types), a saved `gcloud ai-platform jobs submit training` command line, or "
        "Vertex AI worker_pool_specs (YAML or JSON). What cannot carry over is printed, and kept as comments.",
    )
    parser.add_argument(
        "file",
        type=Path,
        help="config.yaml (trainingInput), a file holding the gcloud command, or worker_pool_specs",
    )
    parser.add_argument(
        "--stack",
        "--name",
        dest="stack",
        type=_name,
        required=True,
        help="the stack to write: stacks/Pulumi.<STACK>.yaml",
    )
    parser.add_argument(
        "--zone",
        type=zone_argument,
        help="the zone of the machines (default: the first zone of the job's region, else us-central1, "
        "that offers its GPUs or TPU)",
    )
    parser.add_argument("--project", default=PLACEHOLDER_PROJECT, help="the Google Cloud project")
    parser.add_argument("--out", type=Path, help="write here instead of stacks/Pulumi.<STACK>.yaml")
    parser.add_argument("--force", action="store_true", help="replace an existing stack file")
    parser.set_defaults(func=cmd_import)
