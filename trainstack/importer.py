"""``trainstack import``: a stack file from a job a team already has.

Reads Vertex AI ``worker_pool_specs`` (a list, or a CustomJob spec holding one, in YAML or
JSON, snake_case or camelCase): pool 0 is the chief, pool 1 the workers, pool 2 the parameter
servers (https://cloud.google.com/vertex-ai/docs/training/distributed-training). The stack it
writes is checked like any other; what Vertex AI allowed and a stack cannot say is reported,
never dropped in silence. AI Platform ``trainingInput`` files are recognised and refused for
now, with a message.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainstack.names import zone_argument

CHIEF_POOL, WORKER_POOL, PS_POOL, EVALUATOR_POOL = range(4)
# The project placeholder of the shipped stacks: `plan` names it as one to replace.
PLACEHOLDER_PROJECT = "your-gcp-project"
# Vertex AI's samples write the project into image URIs as {PROJECT_ID} or PROJECT_ID.
PROJECT_PLACEHOLDERS = ("{PROJECT_ID}", "PROJECT_ID")
MAX_IMPORT_BYTES = 1024 * 1024


class ImportProblem(ValueError):
    """The file cannot become a stack; the message says why."""


@dataclass
class Imported:
    config: dict[str, Any]
    notices: list[str] = field(default_factory=list)


def _get(mapping: Any, *names: str) -> Any:
    """A key in either spelling Vertex AI accepts (replica_count / replicaCount)."""
    if not isinstance(mapping, dict):
        return None
    for name in names:
        if name in mapping:
            return mapping[name]
    return None


def gpu_name(vertex_enum: str) -> str:
    """Vertex AI's accelerator enum (NVIDIA_TESLA_T4) as Compute Engine names it (nvidia-tesla-t4)."""
    return vertex_enum.strip().lower().replace("_", "-")


def _pools(document: Any) -> list[Any]:
    if isinstance(document, list):
        return document
    spec = _get(document, "job_spec", "jobSpec") or document
    pools = _get(spec, "worker_pool_specs", "workerPoolSpecs")
    if isinstance(pools, list):
        return pools
    if isinstance(document, dict) and ("trainingInput" in document or "training_input" in document):
        raise ImportProblem(
            "an AI Platform trainingInput file: not imported yet (only Vertex AI worker_pool_specs are); "
            "write the stack by hand from `python -m trainstack gpus` and the README"
        )
    raise ImportProblem("no worker_pool_specs found: expected a list of worker pools or a CustomJob spec holding one")


def _node(pool: Any, index: int, notices: list[str]) -> dict[str, Any]:
    spec = _get(pool, "machine_spec", "machineSpec")
    machine_type = _get(spec, "machine_type", "machineType")
    if not isinstance(machine_type, str):
        raise ImportProblem(f"worker pool {index}: machine_spec.machine_type is missing")
    node: dict[str, Any] = {"machine_type": machine_type}
    accelerator = _get(spec, "accelerator_type", "acceleratorType")
    count = _get(spec, "accelerator_count", "acceleratorCount")
    if accelerator is not None:
        if not isinstance(accelerator, str) or not isinstance(count, int) or isinstance(count, bool):
            raise ImportProblem(f"worker pool {index}: accelerator_type needs an accelerator_count (a whole number)")
        node["accelerator"] = {"type": gpu_name(accelerator), "count": count}
    disk = _get(pool, "disk_spec", "diskSpec")
    disk_gb = _get(disk, "boot_disk_size_gb", "bootDiskSizeGb")
    if isinstance(disk_gb, int) and not isinstance(disk_gb, bool):
        node["disk_gb"] = disk_gb
    return node


def _replicas(pool: Any, index: int) -> int:
    count = _get(pool, "replica_count", "replicaCount")
    count = 1 if count is None else count
    if isinstance(count, str) and count.isdigit():
        count = int(count)  # the REST API writes int64 counts as strings
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ImportProblem(f"worker pool {index}: replica_count must be a whole number")
    return count


def _job(pools: list[Any], project: str, stack: str, notices: list[str]) -> dict[str, Any] | None:
    def code(pool: Any) -> Any:
        return _get(pool, "container_spec", "containerSpec") or _get(pool, "python_package_spec", "pythonPackageSpec")

    chief = pools[CHIEF_POOL]
    container = _get(chief, "container_spec", "containerSpec")
    package = _get(chief, "python_package_spec", "pythonPackageSpec")
    for index, pool in enumerate(pools[1:], start=1):
        if pool and code(pool) is not None and code(pool) != code(chief):
            notices.append(f"worker pool {index} runs other code than pool 0; a stack runs pool 0's on every node")
    if container is not None:
        image = _get(container, "image_uri", "imageUri")
        if not isinstance(image, str):
            raise ImportProblem("worker pool 0: container_spec.image_uri is missing")
        for placeholder in PROJECT_PLACEHOLDERS:
            if placeholder in image:
                image = image.replace(placeholder, project)
                notices.append(f"the image URI named the project as {placeholder}: now {project}")
                break
        # Job names are letters, digits and underscores: the stack's name, spelled so.
        job: dict[str, Any] = {"name": stack.replace("-", "_"), "image": image}
        args = _get(container, "args")
        if isinstance(args, list) and all(isinstance(a, str) for a in args):
            job["args"] = args
        if _get(container, "command"):
            notices.append("container_spec.command is not imported: a stack runs the image's own entry point")
        return job
    if package is not None:
        module = _get(package, "python_module", "pythonModule")
        notices.append(
            "python_package_spec: the package is in a bucket (package_uris), and a stack ships a local package "
            f"directory: set trainstack:job.package to its source directory{f' (module {module})' if module else ''}"
        )
        return None
    notices.append("worker pool 0 names no code (container_spec or python_package_spec): the stack has no job")
    return None


def import_worker_pools(document: Any, zone: str, project: str, name: str) -> Imported:
    pools = _pools(document)
    notices: list[str] = []
    if not pools or not pools[CHIEF_POOL]:
        raise ImportProblem("worker pool 0 (the chief) is missing")
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
    if len(pools) > EVALUATOR_POOL + 1:
        raise ImportProblem(f"{len(pools)} worker pools: Vertex AI has at most four")
    cluster["strategy"] = "parameter_server" if servers else ("multi_worker_mirrored" if workers else "auto")
    settings: dict[str, Any] = {
        "gcp:project": project,
        "gcp:region": zone.rsplit("-", 1)[0],
        "trainstack:zone": zone,
        "trainstack:cluster": cluster,
    }
    job = _job(pools, project, name, notices)
    if job is not None:
        settings["trainstack:job"] = job
    return Imported(settings, notices)


def read_document(path: Path) -> Any:
    import yaml

    try:
        data = path.read_bytes()
    except OSError as error:
        raise ImportProblem(f"{path}: {error.strerror or error}") from None
    if len(data) > MAX_IMPORT_BYTES:
        raise ImportProblem(f"{path}: larger than {MAX_IMPORT_BYTES // 1024} KiB")
    try:
        # JSON is YAML; the safe loader builds no objects.
        return yaml.safe_load(data.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as error:
        raise ImportProblem(f"{path}: neither YAML nor JSON ({str(error).splitlines()[0]})") from None


STACK_NAME = re.compile(r"[a-z][-a-z0-9]{0,22}[a-z0-9]")


def cmd_import(args: argparse.Namespace) -> int:
    import yaml

    from trainstack.errors import StackConfigError
    from trainstack.rules import parse_and_check
    from trainstack.stackfile import STACKS_DIR

    destination = args.out or STACKS_DIR / f"Pulumi.{args.name}.yaml"
    if args.out is not None and args.out.name != f"Pulumi.{args.name}.yaml":
        print(
            f"trainstack: --out: name the file Pulumi.{args.name}.yaml (Pulumi takes the stack name from it)",
            file=sys.stderr,
        )
        return 2
    if destination.exists() and not args.force:
        print(f"trainstack: {destination} exists; not overwriting it (--force to replace it)", file=sys.stderr)
        return 1
    try:
        imported = import_worker_pools(read_document(args.file), args.zone, args.project, args.name)
    except ImportProblem as problem:
        print(f"trainstack: import {args.file}: {problem}", file=sys.stderr)
        return 1
    for notice in imported.notices:
        print(f"notice: {notice}")
    try:
        parse_and_check(args.name, imported.config)
    except StackConfigError as error:
        # Written anyway: the user fixes what the new machines cannot do, named key by key.
        print(error.report(), file=sys.stderr)
        checked = False
    else:
        checked = True
    destination.parent.mkdir(parents=True, exist_ok=True)
    header = f"# Imported from {args.file.name} by `trainstack import`; check it with `trainstack validate`.\n"
    destination.write_text(header + yaml.safe_dump({"config": imported.config}, sort_keys=False), encoding="utf-8")
    print(f"wrote {destination}{'' if checked else ' (it does not validate yet: see above)'}")
    return 0 if checked else 1


def _name(text: str) -> str:
    if not STACK_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: a stack name here is lowercase letters, digits and hyphens, at most 24, starting with a letter"
        )
    return text


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("import", help="write a stack from Vertex AI worker_pool_specs (YAML or JSON)")
    parser.add_argument("file", type=Path, help="a worker_pool_specs list, or a CustomJob spec holding one")
    parser.add_argument("--name", type=_name, required=True, help="the stack to write: stacks/Pulumi.<NAME>.yaml")
    parser.add_argument("--zone", type=zone_argument, default="us-central1-a", help="the zone of the machines")
    parser.add_argument("--project", default=PLACEHOLDER_PROJECT, help="the Google Cloud project")
    parser.add_argument("--out", type=Path, help="write here instead of stacks/Pulumi.<NAME>.yaml")
    parser.add_argument("--force", action="store_true", help="replace an existing stack file")
    parser.set_defaults(func=cmd_import)
