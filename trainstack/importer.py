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


# --- AI Platform Training: trainingInput ---------------------------------------------------------
# AI Platform's own machine types (https://cloud.google.com/ai-platform/training/docs/machine-types,
# legacy machine types); their Compute Engine equivalents are not confirmed from Google's page here,
# so they are named and refused rather than guessed.
LEGACY_MACHINE_TYPES = frozenset(
    {
        "standard", "large_model", "complex_model_s", "complex_model_m", "complex_model_l",
        "standard_gpu", "complex_model_m_gpu", "complex_model_l_gpu", "standard_p100", "complex_model_m_p100",
        "standard_v100", "large_model_v100", "complex_model_m_v100", "complex_model_l_v100",
    }
)  # fmt: skip
TPU_WORKER = "cloud_tpu"
# "type TPU_V2 and count 8: no other number of TPU v2 cores can be attached" (seed 001); a TPU VM
# v2-8 is those 8 cores on one host.
AI_PLATFORM_TPU = ("TPU_V2", 8)
TPU_SLICE = "v2-8"
# A retired GPU and the current one a stack names instead (same count on N1).
NEAREST_CURRENT_GPU = {"nvidia-tesla-k80": "nvidia-tesla-t4"}


def _accelerator(config: Any, role: str) -> dict[str, Any] | None:
    accelerator = _get(config, "acceleratorConfig", "accelerator_config")
    if not accelerator:
        return None
    kind, count = _get(accelerator, "type"), _get(accelerator, "count")
    if isinstance(count, str) and count.isdigit():
        count = int(count)
    if not isinstance(kind, str) or not isinstance(count, int) or isinstance(count, bool):
        raise ImportProblem(f"{role}Config.acceleratorConfig needs a type and a whole-number count")
    gpu = gpu_name(kind)
    if gpu in NEAREST_CURRENT_GPU:
        raise ImportProblem(
            f"{role}Config.acceleratorConfig names {kind}, which Google has retired; the nearest current GPU is "
            f"{NEAREST_CURRENT_GPU[gpu]} (the same count fits the same N1 machine): edit the file and import again"
        )
    return {"type": gpu, "count": count}


def _machine(training_input: Any, role: str) -> str:
    machine = _get(training_input, f"{role}Type")
    if not isinstance(machine, str):
        raise ImportProblem(f"{role}Type is missing")
    if machine in LEGACY_MACHINE_TYPES:
        raise ImportProblem(
            f"{role}Type {machine} is an AI Platform machine type; its Compute Engine equivalent is not imported yet: "
            f"name a Compute Engine machine type with an acceleratorConfig (see `python -m trainstack gpus`)"
        )
    return machine


def _count(training_input: Any, key: str) -> int:
    count = _get(training_input, key)
    count = 0 if count is None else count
    if isinstance(count, str) and count.isdigit():
        count = int(count)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ImportProblem(f"{key} must be a whole number")
    return count


def _tpu_runtime() -> str:
    """The newest current single-host TensorFlow runtime for v2 in the catalog."""
    from trainstack.catalog import load_catalog

    runtimes = [
        r
        for r in load_catalog().tpu_runtimes.values()
        if "v2" in r.generations and r.status == "current" and r.version.startswith("tpu-vm-tf-")
        and "-pod-" not in r.version
    ]  # fmt: skip
    newest = max(runtimes, key=lambda r: (tuple(int(p) for p in r.tensorflow_version.split(".")), -len(r.version)))
    return newest.version


def import_training_input(document: Any, zone: str, project: str, name: str) -> Imported:
    training_input = _get(document, "trainingInput", "training_input")
    tier = _get(training_input, "scaleTier") or "BASIC"
    if tier != "CUSTOM":
        raise ImportProblem(
            f"scaleTier {tier}: only CUSTOM is imported yet (predefined tiers map to legacy machine types); "
            "write masterType and acceleratorConfig as Compute Engine names"
        )
    notices: list[str] = []
    settings: dict[str, Any] = {"gcp:project": project, "gcp:region": zone.rsplit("-", 1)[0], "trainstack:zone": zone}
    workers, servers = _count(training_input, "workerCount"), _count(training_input, "parameterServerCount")
    if _get(training_input, "workerType") == TPU_WORKER:
        if servers:
            raise ImportProblem(
                "a cloud_tpu worker with parameter servers: AI Platform rejected this, and a stack cannot have both"
            )
        accelerator = _get(_get(training_input, "workerConfig"), "acceleratorConfig")
        if accelerator and (_get(accelerator, "type"), _get(accelerator, "count")) != AI_PLATFORM_TPU:
            raise ImportProblem("a cloud_tpu worker takes acceleratorConfig type TPU_V2 and count 8, nothing else")
        runtime = _tpu_runtime()
        settings["trainstack:tpu"] = {"accelerator_type": TPU_SLICE, "runtime_version": runtime}
        notices.append(
            f"the cloud_tpu worker is a TPU VM {TPU_SLICE} ({runtime}); the master VM's role moves onto the TPU VM's "
            f"host, so masterType {_get(training_input, 'masterType')} is not used"
        )
    else:
        cluster: dict[str, Any] = {"chief": {"machine_type": _machine(training_input, "master")}}
        if accelerator := _accelerator(_get(training_input, "masterConfig"), "master"):
            cluster["chief"]["accelerator"] = accelerator
        if workers:
            cluster["workers"] = {"count": workers, "machine_type": _machine(training_input, "worker")}
            if accelerator := _accelerator(_get(training_input, "workerConfig"), "worker"):
                cluster["workers"]["accelerator"] = accelerator
        if servers:
            cluster["parameter_servers"] = {
                "count": servers,
                "machine_type": _machine(training_input, "parameterServer"),
            }
            if _accelerator(_get(training_input, "parameterServerConfig"), "parameterServer"):
                notices.append(
                    "parameter servers take no GPUs in a stack: parameterServerConfig.acceleratorConfig is dropped"
                )
        if _count(training_input, "evaluatorCount"):
            notices.append("evaluators are not imported: a stack has no evaluator pool")
        cluster["strategy"] = "parameter_server" if servers else ("multi_worker_mirrored" if workers else "auto")
        settings["trainstack:cluster"] = cluster
    module = _get(training_input, "pythonModule")
    notices.append(
        "the job's code is not in a trainingInput file: set trainstack:job.package and job.module"
        + (f" (pythonModule was {module})" if module else "")
        + ", or job.image; until then the machines boot ready and run no job"
    )
    return Imported(settings, notices)


def import_document(document: Any, zone: str, project: str, name: str) -> Imported:
    """Either kind of file: an AI Platform trainingInput, or Vertex AI worker pools."""
    if isinstance(document, dict) and _get(document, "trainingInput", "training_input") is not None:
        return import_training_input(document, zone, project, name)
    return import_worker_pools(document, zone, project, name)


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
        imported = import_document(read_document(args.file), args.zone, args.project, args.name)
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
    parser = subparsers.add_parser(
        "import", help="write a stack from an AI Platform trainingInput or Vertex AI worker_pool_specs (YAML or JSON)"
    )
    parser.add_argument(
        "file", type=Path, help="an AI Platform config.yaml (trainingInput), or Vertex AI worker_pool_specs"
    )
    parser.add_argument("--name", type=_name, required=True, help="the stack to write: stacks/Pulumi.<NAME>.yaml")
    parser.add_argument("--zone", type=zone_argument, default="us-central1-a", help="the zone of the machines")
    parser.add_argument("--project", default=PLACEHOLDER_PROJECT, help="the Google Cloud project")
    parser.add_argument("--out", type=Path, help="write here instead of stacks/Pulumi.<NAME>.yaml")
    parser.add_argument("--force", action="store_true", help="replace an existing stack file")
    parser.set_defaults(func=cmd_import)
