"""AI Platform Training jobs (retired) as stacks: the job document, a ``trainingInput``
(from a file, or from the ``gcloud ai-platform jobs submit training`` command line that
submitted one: :mod:`trainstack.interop.ai_platform_command`).

Scale tiers and AI Platform's own machine types are looked up in the catalog
(``ai_platform_scale_tiers.csv``, ``ai_platform_machine_types.csv``), each row with its source
and whether its Compute Engine machine is recorded by Google or inferred; the import prints
which it used. What the old service did and a stack cannot is reported, never dropped.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainstack.base.errors import shorten
from trainstack.catalog import legacy_machine_types, load_catalog, scale_tiers
from trainstack.interop.jobfile_reading import (
    MAX_DIGITS,
    ImportProblem,
    get,
    gpu_name,
    run_hours,
    whole_number,
    without_job_dir,
)
from trainstack.jobcode.node_environment import pinned_version
from trainstack_contract import EXTERNAL_JOB_DIR
from trainstack_contract.jobaccess import READ, WRITE, bucket_uses, covers

if TYPE_CHECKING:
    # pydantic, which the spec needs, loads only when a config holds `hyperparameters`: the
    # command line builds `import`'s parser at every start (trainstack.commands.main).
    from trainstack.tuning.spec import HyperparameterSpec

TPU_WORKER = "cloud_tpu"
# "type TPU_V2 and count 8: no other number of TPU v2 cores can be attached" (seed 001); a TPU VM
# v2-8 is those 8 cores on one host.
AI_PLATFORM_TPU = ("TPU_V2", 8)
TPU_GENERATION, TPU_SIZE = "v2", 8
TPU_SLICE = f"{TPU_GENERATION}-{TPU_SIZE}"
# A retired GPU named in an acceleratorConfig, and the current one to name instead (same count on N1).
NEAREST_CURRENT_GPU = {"nvidia-tesla-k80": "nvidia-tesla-t4"}
CUSTOM_TIER = "CUSTOM"
# The trainingInput keys a predefined scale tier decides.
CLUSTER_KEYS = (
    "masterType", "masterConfig", "workerType", "workerCount", "workerConfig",
    "parameterServerType", "parameterServerCount", "parameterServerConfig",
)  # fmt: skip
ROLES = {"master": "the chief", "worker": "the workers", "parameterServer": "the parameter servers"}


@dataclass
class Node:
    machine_type: str
    accelerator: dict[str, Any] | None = None

    def as_config(self) -> dict[str, Any]:
        node: dict[str, Any] = {"machine_type": self.machine_type}
        if self.accelerator:
            node["accelerator"] = self.accelerator
        return node


@dataclass
class TrainingShape:
    """What a trainingInput asks for, in a stack's terms."""

    cluster: dict[str, Any] | None = None
    tpu: dict[str, Any] | None = None
    job: dict[str, Any] | None = None
    region: str | None = None
    # trainingInput.hyperparameters, checked: the study `trainstack tune` runs on the stack.
    tuning: HyperparameterSpec | None = None

    @property
    def gpus(self) -> set[str]:
        """The GPU types the chief and workers need (parameter servers take none)."""
        nodes = [self.cluster.get("chief") or {}, self.cluster.get("workers") or {}] if self.cluster else []
        return {node["accelerator"]["type"] for node in nodes if node.get("accelerator")}

    @property
    def machine_types(self) -> list[str]:
        """Every node's machine type: one with built-in GPUs is offered in fewer zones than its GPU."""
        if not self.cluster:
            return []
        roles = ("chief", "workers", "parameter_servers")
        return sorted(
            {node["machine_type"] for role in roles if (node := self.cluster.get(role)) and "machine_type" in node}
        )


def _scale_tier(training_input: dict[str, Any], notices: list[str]) -> dict[str, Any]:
    """The trainingInput with a predefined tier written out as the CUSTOM cluster it stands for."""
    tier = get(training_input, "scaleTier") or "BASIC"
    tier = str(tier).upper().replace("-", "_")
    if tier == CUSTOM_TIER:
        return training_input
    tiers = scale_tiers()
    if tier not in tiers:
        raise ImportProblem(
            f"scaleTier {tier}: not an AI Platform scale tier; valid: {', '.join([*tiers, CUSTOM_TIER])}"
        )
    spec = tiers[tier]
    # A tier decides the machines and their GPUs; a role's image (masterConfig.imageUri) still counts.
    unused = [key for key in CLUSTER_KEYS if not key.endswith("Config") and get(training_input, key) is not None]
    unused += [f"{key}.acceleratorConfig" for key in CLUSTER_KEYS if get(get(training_input, key), "acceleratorConfig")]
    if unused:
        notices.append(f"scaleTier {tier} fixes the cluster, so {', '.join(unused)} are not used")
    shape = f"a master ({spec.master_type})"
    if spec.worker_count:
        shape += f", {spec.worker_count} worker{'s' if spec.worker_count > 1 else ''} ({spec.worker_type})"
    if spec.parameter_server_count:
        shape += f", {spec.parameter_server_count} parameter servers ({spec.parameter_server_type})"
    caveat = f"; {spec.note}: check it" if spec.inferred else ""
    notices.append(f"scaleTier {tier} is {shape}{caveat}")
    expanded = {key: value for key, value in training_input.items() if key not in CLUSTER_KEYS}
    for key in ("masterConfig", "workerConfig", "parameterServerConfig"):
        config = get(training_input, key)
        if isinstance(config, dict) and (kept := {k: v for k, v in config.items() if k != "acceleratorConfig"}):
            expanded[key] = kept
    expanded.update(masterType=spec.master_type, workerCount=spec.worker_count)
    if spec.worker_type:
        expanded["workerType"] = spec.worker_type
    if spec.parameter_server_count:
        expanded.update(
            parameterServerType=spec.parameter_server_type, parameterServerCount=spec.parameter_server_count
        )
    return expanded


def _accelerator(config: Any, role: str) -> dict[str, Any] | None:
    accelerator = get(config, "acceleratorConfig", "accelerator_config")
    if not accelerator:
        return None
    kind, count = get(accelerator, "type"), whole_number(get(accelerator, "count"))
    if not isinstance(kind, str) or count is None:
        raise ImportProblem(f"{role}Config.acceleratorConfig needs a type and a whole-number count")
    gpu = gpu_name(kind)
    if gpu in NEAREST_CURRENT_GPU:
        raise ImportProblem(
            f"{role}Config.acceleratorConfig names {kind}, which Google has retired; the nearest current GPU is "
            f"{NEAREST_CURRENT_GPU[gpu]} (the same count fits the same N1 machine): edit the file and import again"
        )
    return {"type": gpu, "count": count}


def _node(training_input: dict[str, Any], role: str, notices: list[str]) -> Node:
    machine = get(training_input, f"{role}Type")
    if not isinstance(machine, str) or not machine:
        raise ImportProblem(f"{role}Type is missing")
    configured = _accelerator(get(training_input, f"{role}Config"), role)
    legacy = legacy_machine_types().get(machine)
    if legacy is None:
        return Node(machine, configured)
    if legacy.gpu and configured:
        raise ImportProblem(
            f"{role}Type {machine} comes with {legacy.gpu_count} GPU(s) of its own; {role}Config.acceleratorConfig "
            f"cannot add others: keep one of the two"
        )
    accelerator = {"type": legacy.gpu, "count": legacy.gpu_count} if legacy.gpu else configured
    becomes = legacy.machine_type + (f" with {legacy.gpu_count} x {legacy.gpu}" if legacy.gpu else "")
    notice = f"{role}Type {machine} (AI Platform's own type) becomes {becomes} for {ROLES[role]}"
    if legacy.retired_gpu:
        notice += f"; it carried {legacy.retired_gpu}, retired, so the nearest current GPU at the same count"
    if legacy.note:
        notice += f"; {legacy.note}"
    notices.append(notice)
    return Node(legacy.machine_type, accelerator)


def _tpu_runtime() -> str:
    """The newest current single-host TensorFlow runtime for the slice, from the catalog."""
    runtimes = [
        runtime
        for runtime in load_catalog().tpu_runtimes.values()
        if TPU_GENERATION in runtime.generations and runtime.status == "current"
        and runtime.version.startswith("tpu-vm-tf-") and not runtime.is_pod
    ]  # fmt: skip
    newest = max(runtimes, key=lambda r: (tuple(int(p) for p in r.tensorflow_version.split(".")), -len(r.version)))
    return newest.version


def _tpu(training_input: dict[str, Any], workers: int, servers: int, notices: list[str]) -> dict[str, Any]:
    if servers:
        raise ImportProblem(
            "a cloud_tpu worker with parameter servers: AI Platform rejected this, and a stack cannot have both"
        )
    if workers > 1:
        raise ImportProblem(f"workerCount {workers} with workerType cloud_tpu: a stack has one TPU VM, so 1")
    accelerator = get(get(training_input, "workerConfig"), "acceleratorConfig")
    if accelerator and (get(accelerator, "type"), whole_number(get(accelerator, "count"))) != AI_PLATFORM_TPU:
        raise ImportProblem("a cloud_tpu worker takes acceleratorConfig type TPU_V2 and count 8, nothing else")
    runtime = _tpu_runtime()
    notices.append(
        f"the cloud_tpu worker is a TPU VM {TPU_SLICE} ({runtime}); the master VM's role moves onto the TPU VM's "
        f"host, so masterType {get(training_input, 'masterType')} is not used"
    )
    return {"accelerator_type": TPU_SLICE, "runtime_version": runtime}


def strategy_for(workers: int, servers: int) -> str:
    """The strategy an imported cluster runs: AI Platform and Vertex AI jobs name none."""
    return "parameter_server" if servers else ("multi_worker_mirrored" if workers else "auto")


def _count(training_input: dict[str, Any], key: str) -> int:
    value = get(training_input, key)
    count = 0 if value is None else whole_number(value)
    if count is None:
        raise ImportProblem(f"{key} must be a whole number of at most {MAX_DIGITS} digits, not {shorten(value)}")
    return count


def _cluster(training_input: dict[str, Any], notices: list[str]) -> TrainingShape:
    shape = TrainingShape()
    workers, servers = _count(training_input, "workerCount"), _count(training_input, "parameterServerCount")
    if get(training_input, "workerType") == TPU_WORKER:
        shape.tpu = _tpu(training_input, workers, servers, notices)
        return shape
    # Every pool is read before anything is refused: one import names every problem at once.
    problems: list[str] = []

    def node(role: str) -> Node:
        try:
            return _node(training_input, role, notices)
        except ImportProblem as problem:
            problems.append(str(problem))
            return Node("", None)

    chief = node("master")
    worker = node("worker") if workers else None
    server = node("parameterServer") if servers else None
    if problems:
        raise ImportProblem("; ".join(problems))
    cluster: dict[str, Any] = {"chief": chief.as_config()}
    if worker is not None:
        cluster["workers"] = {"count": workers, **worker.as_config()}
    if server is not None:
        if server.accelerator:
            notices.append("parameter servers take no GPUs in a stack: the parameter servers' GPUs are dropped")
        cluster["parameter_servers"] = {"count": servers, "machine_type": server.machine_type}
    if _count(training_input, "evaluatorCount"):
        notices.append("evaluators are not imported: a stack has no evaluator pool")
    cluster["strategy"] = strategy_for(workers, servers)
    shape.cluster = cluster
    return shape


def _job_from_training_input(
    training_input: dict[str, Any], name: str, notices: list[str], no_code: str
) -> dict[str, Any] | None:
    image = get(get(training_input, "masterConfig"), "imageUri")
    args = get(training_input, "args")
    module = get(training_input, "pythonModule")
    if args is not None and not (isinstance(args, list) and all(isinstance(arg, str) for arg in args)):
        raise ImportProblem(f"args must be a list of strings (got {shorten(args)})")
    if isinstance(image, str) and image:
        job: dict[str, Any] = {"name": name, "image": image}
        if args and (kept := without_job_dir(args, notices)):
            job["args"] = kept
        return job
    if no_code:
        notices.append(
            f"{no_code}: set trainstack:job.package and job.module"
            + (f" (pythonModule was {module})" if module else "")
            + ", or job.image; until then the machines boot ready and run no job"
            + (f"; the job's args were {shlex.join(args)}" if args else "")
            + (
                f"; with the package, set {LEGACY_KERAS_YAML} ({legacy_keras_why()})"
                if wants_legacy_keras(training_input)
                else ""
            )
        )
    return None


# tf.keras was Keras 2 on every AI Platform runtime; under the nodes' TensorFlow (2.16 and later)
# it is Keras 3 unless TF_USE_LEGACY_KERAS is set, and tf-keras (Keras 2) is on every node.
LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"
LEGACY_KERAS_YAML = f'job.env: {{{LEGACY_KERAS_ENV}: "1"}}'


def legacy_keras_why() -> str:
    return (
        "AI Platform's TensorFlow 2.x runtimes had tf.keras as Keras 2; under the nodes' TensorFlow "
        f"{pinned_version('tensorflow')} tf.keras is Keras 3 (which refuses RMSprop(lr=...), for one) unless it is "
        "set, and tf-keras is on every node"
    )


def wants_legacy_keras(training_input: dict[str, Any]) -> bool:
    """Whether the job's code was written for tf.keras as Keras 2: it ran on a TensorFlow 2.x
    runtime (or named none). A 1.x runtime's code needs porting first; a custom container
    brings its own Keras."""
    runtime = get(training_input, "runtimeVersion", "runtime_version")
    return runtime is None or str(runtime).startswith("2.")


def _legacy_keras(training_input: dict[str, Any], job: dict[str, Any] | None, notices: list[str]) -> None:
    """A package job from a TensorFlow 2.x runtime gets tf.keras as it had it, and says so."""
    if job is None or "image" in job or not wants_legacy_keras(training_input):
        return
    job["env"] = {**job.get("env", {}), LEGACY_KERAS_ENV: "1"}
    notices.append(f"{LEGACY_KERAS_YAML} is set: {legacy_keras_why()}; remove it once the code is written for Keras 3")


def _buckets(job: dict[str, Any] | None, notices: list[str]) -> None:
    """job.buckets: the buckets of the team's own its arguments name, read or written as their
    flags say, written out so the file shows what `pulumi up` grants; any other is named, for
    `validate` asks which."""
    if job is None:
        return
    own = f"{job['job_dir']}/" if "job_dir" in job else None
    reads: list[str] = []
    writes: list[str] = []
    for use in bucket_uses(job.get("args", []), sorted(job.get("env", {}).items())):
        if own is not None and covers([own], use.folder):
            continue
        places = writes if use.kind == WRITE else reads if use.kind == READ else None
        if places is None:
            notices.append(
                f"{use.where} names {use.uri}, and no flag says whether the job reads or writes it: add it to "
                "trainstack:job.buckets (`validate` says so too)"
            )
        elif not covers(places, use.folder):
            places.append(use.folder)
    if reads or writes:
        job["buckets"] = {kind: places for kind, places in ((READ, reads), (WRITE, writes)) if places}
        shown = "; ".join(f"{kind}s {', '.join(places)}" for kind, places in job["buckets"].items())
        notices.append(
            f"job.buckets: the job {shown}, as its flags say: `pulumi up` grants the job's machines those "
            "folders alone, and the job's own token carries them"
        )


def _scheduling(training_input: dict[str, Any], shape: TrainingShape, notices: list[str]) -> None:
    """scheduling.maxRunningTime as the run-time cap of the machines (AI Platform cancelled the
    job after it; Compute Engine stops the VMs, or the TPU VM's agent stops it)."""
    scheduling = get(training_input, "scheduling")
    if scheduling is None:
        return
    if not isinstance(scheduling, dict):
        raise ImportProblem(
            f"scheduling must be a mapping such as {{maxRunningTime: 7200s}} (got {shorten(scheduling)})"
        )
    running = get(scheduling, "maxRunningTime", "max_running_time")
    target = shape.cluster if shape.cluster is not None else shape.tpu
    if running is not None and target is not None:
        key = "scheduling.maxRunningTime"
        target["max_run_hours"] = run_hours(running, key, notices)
        where = "cluster" if shape.cluster is not None else "tpu"
        notices.append(f"{key} {running} is {where}.max_run_hours {target['max_run_hours']}: the machines stop then")
    others = sorted(str(key) for key in scheduling if key not in ("maxRunningTime", "max_running_time"))
    if others:
        notices.append(f"scheduling.{', scheduling.'.join(others)} not imported: a stack's machines start at once")


def _job_dir(training_input: dict[str, Any], job: dict[str, Any] | None, notices: list[str]) -> None:
    """AI Platform's jobDir kept as job.job_dir: the job goes on writing where the team's models are."""
    job_dir = get(training_input, "jobDir", "job_dir")
    if not job_dir:
        return
    trimmed = job_dir.removesuffix("/") if isinstance(job_dir, str) else None
    if trimmed is None or EXTERNAL_JOB_DIR.fullmatch(trimmed) is None:
        notices.append(
            f"jobDir {job_dir} is not used: trainstack:job.job_dir takes a folder gs://BUCKET/PREFIX (not a "
            "bucket's root), so the job writes under jobs/<name> of the stack's own bucket"
        )
    elif job is None:
        notices.append(f"jobDir {trimmed}: set trainstack:job.job_dir to it once the stack has a job")
    else:
        job["job_dir"] = trimmed
        notices.append(
            f"jobDir {trimmed} is kept as trainstack:job.job_dir: the job writes there, and its machines may write "
            "under that folder of the bucket alone"
        )


# trainingInput fields the import reads, maps or explains; any other is named as not imported.
READ_FIELDS = frozenset(
    {
        "scaleTier", "masterType", "workerType", "parameterServerType", "evaluatorType", "workerCount",
        "parameterServerCount", "evaluatorCount", "masterConfig", "workerConfig", "parameterServerConfig",
        "evaluatorConfig", "region", "jobDir", "runtimeVersion", "pythonVersion", "hyperparameters", "args",
        "pythonModule", "packageUris", "scheduling",
    }
)  # fmt: skip


def _unported(training_input: dict[str, Any], notices: list[str]) -> None:
    runtime = get(training_input, "runtimeVersion", "runtime_version")
    if runtime:
        notices.append(f"runtimeVersion {runtime} is not used: a stack's nodes run the TensorFlow of its environment")
    python = get(training_input, "pythonVersion", "python_version")
    if python:
        notices.append(f"pythonVersion {python} is not used: a stack's nodes run the Python of their image")
    # Fields come camelCase or snake_case (as in the REST and Python clients).
    others = sorted(
        str(key) for key in training_input if re.sub(r"_([a-z])", lambda m: m[1].upper(), str(key)) not in READ_FIELDS
    )
    if others:
        notices.append(f"not imported, a stack has no key for them: {', '.join(others)}")


# Why a trainingInput file alone names no code a stack can ship.
NO_CODE_IN_FILE = "the job's code is not in a trainingInput file (its packageUris are in a bucket)"


def shape_of(
    document: Any,
    name: str,
    notices: list[str],
    job: dict[str, Any] | None = None,
    no_code: str = NO_CODE_IN_FILE,
) -> TrainingShape:
    """A trainingInput document as a stack's shape; ``job``: the job when the command line named its package."""
    training_input = get(document, "trainingInput", "training_input")
    if not isinstance(training_input, dict):
        raise ImportProblem("trainingInput must be a mapping of AI Platform's TrainingInput fields")
    training_input = _scale_tier(training_input, notices)
    shape = _cluster(training_input, notices)
    shape.job = job if job is not None else _job_from_training_input(training_input, name, notices, no_code)
    region = get(training_input, "region")
    shape.region = region if isinstance(region, str) else None
    _job_dir(training_input, shape.job, notices)
    _legacy_keras(training_input, shape.job, notices)
    _buckets(shape.job, notices)
    _scheduling(training_input, shape, notices)
    _unported(training_input, notices)
    # A spec with problems fails the import (SpecError: one line a problem): a study is not
    # half-imported. `import` writes it beside the stack file, for `trainstack tune`.
    spec = get(training_input, "hyperparameters")
    if spec is not None:
        from trainstack.tuning.spec import spec_from_mapping

        shape.tuning = spec_from_mapping(spec, "trainingInput.hyperparameters")
    return shape


# --- gcloud ai-platform jobs submit training ----------------------------------------------------
