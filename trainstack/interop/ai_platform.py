"""AI Platform Training jobs (retired) as stacks: a ``trainingInput`` file, or the
``gcloud ai-platform jobs submit training`` command line that submitted one.

Scale tiers and AI Platform's own machine types are looked up in the catalog
(``ai_platform_scale_tiers.csv``, ``ai_platform_machine_types.csv``), each row with its source
and whether its Compute Engine machine is recorded by Google or inferred; the import prints
which it used. What the old service did and a stack cannot is reported, never dropped.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainstack.base.errors import shorten
from trainstack.catalog import legacy_machine_types, load_catalog, scale_tiers
from trainstack.interop.jobfile_reading import (
    MAX_DIGITS,
    ImportProblem,
    credential_problem,
    get,
    gpu_name,
    job_name_of_stack,
    run_hours,
    whole_number,
    without_job_dir,
)
from trainstack.jobcode.node_environment import pinned_version
from trainstack_contract import EXTERNAL_JOB_DIR
from trainstack_contract.names import JOB_NAME

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
COMMAND = ("gcloud", "ai-platform", "jobs", "submit", "training")
# Flags that set a trainingInput field directly (gcloud's flag -> the field).
FIELD_FLAGS = {
    "--scale-tier": "scaleTier",
    "--master-machine-type": "masterType",
    "--worker-machine-type": "workerType",
    "--worker-count": "workerCount",
    "--parameter-server-machine-type": "parameterServerType",
    "--parameter-server-count": "parameterServerCount",
    "--region": "region",
    "--job-dir": "jobDir",
    "--runtime-version": "runtimeVersion",
    "--module-name": "pythonModule",
}
ACCELERATOR_FLAGS = {
    "--master-accelerator": "masterConfig",
    "--worker-accelerator": "workerConfig",
    "--parameter-server-accelerator": "parameterServerConfig",
}
IMAGE_FLAGS = {"--master-image-uri": "masterConfig", "--worker-image-uri": "workerConfig"}
OTHER_FLAGS = {"--config", "--package-path", "--packages", "--staging-bucket", "--python-version", "--labels"}
SWITCHES = {"--stream-logs", "--async", "--use-chief-in-tf-config", "--enable-web-access"}
VALUE_FLAGS = {*FIELD_FLAGS, *ACCELERATOR_FLAGS, *IMAGE_FLAGS, *OTHER_FLAGS}
# What a shell would expand in a word: $NAME, ${...}, $1, $@ and the other special parameters.
SHELL_VARIABLE = re.compile(r"\$(?:\{[^}]*\}?|[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])")


@dataclass
class CommandLine:
    job_name: str | None
    flags: dict[str, str]
    switches: set[str]
    args: list[str]


def is_command_line(text: str) -> bool:
    """True when the first line that is not a comment starts the gcloud command."""
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            return tuple(line.split()[: len(COMMAND)]) == COMMAND
    return False


def parse_command_line(text: str) -> CommandLine:
    """The words of a saved ``gcloud ai-platform jobs submit training`` command, as a shell reads them."""
    # A submit command is a few hundred characters; shlex reads about 50 KB a second.
    if len(text) > MAX_COMMAND_LINE_CHARS:
        raise ImportProblem(f"a saved command line of {len(text)} characters (at most {MAX_COMMAND_LINE_CHARS})")
    # An import reads the command; it never runs any part of it.
    if "$(" in text or "`" in text:
        raise ImportProblem("the command holds a command substitution ($(...) or `...`): an import runs nothing; "
                            "write the value it gave")  # fmt: skip
    # A command saved from a script continues its lines with a backslash; comments start with #.
    try:
        words = shlex.split(re.sub(r"\\\r?\n", " ", text), comments=True)
    except ValueError as error:
        raise ImportProblem(f"the command line does not parse as a shell would read it: {error}") from None
    if tuple(words[: len(COMMAND)]) != COMMAND:
        raise ImportProblem(f"expected a `{' '.join(COMMAND)}` command")
    words = words[len(COMMAND) :]
    if "--" in words:
        split = words.index("--")
        words, args = words[:split], words[split + 1 :]
    else:
        args = []
    job_name: str | None = None
    flags: dict[str, str] = {}
    switches: set[str] = set()
    position = 0
    while position < len(words):
        word = words[position]
        flag, equals, value = word.partition("=")
        if flag in SWITCHES:
            switches.add(flag)
        elif flag in VALUE_FLAGS:
            if not equals:
                position += 1
                if position == len(words):
                    raise ImportProblem(f"{flag} needs a value")
                value = words[position]
            flags[flag] = value
        elif word.startswith("-"):
            raise ImportProblem(
                f"{flag}: not a flag of `gcloud ai-platform jobs submit training` that an import understands; "
                f"known: {', '.join(sorted(VALUE_FLAGS | SWITCHES))}"
            )
        elif job_name is None:
            job_name = word
        else:
            raise ImportProblem(f"{word!r}: a second job name; the job's own arguments go after --")
        position += 1
    return CommandLine(job_name, flags, switches, args)


def _accelerator_flag(flag: str, value: str) -> dict[str, Any]:
    """``count=4,type=nvidia-tesla-t4`` as an acceleratorConfig."""
    parts = dict(part.partition("=")[::2] for part in value.split(","))
    if set(parts) != {"count", "type"} or whole_number(parts["count"]) is None:
        raise ImportProblem(f"{flag} {value!r}: expected count=N,type=GPU (e.g. count=4,type=nvidia-tesla-t4)")
    return {"acceleratorConfig": {"count": int(parts["count"]), "type": parts["type"]}}


# Variable names that hold secrets (WANDB_API_KEY, HF_TOKEN, PULUMI_CONFIG_PASSPHRASE, ...): named
# in the refusal, with the command that sets each as a secret.
SECRET_VARIABLE = re.compile(
    r"(?i).*(PASS|SECRET|TOKEN|CREDENTIAL|PRIVATE|APIKEY|(^|_)(API_)?KEYS?(_|$)|(^|_)(AUTH|PAT|PWD|CERT)(_|$)).*"
)
# The most characters a saved command line may hold.
MAX_COMMAND_LINE_CHARS = 64 * 1024


def _words(command: CommandLine) -> list[tuple[str, str]]:
    """(where, value) of every word of the command an import could copy into the stack."""
    words = [("the job name", command.job_name)] if command.job_name else []
    words += [(flag, value) for flag, value in command.flags.items()]
    words += [(f"the job's argument {index} (after --)", arg) for index, arg in enumerate(command.args, start=1)]
    return words


def refuse_variables_and_credentials(command: CommandLine) -> None:
    """ImportProblem naming every shell variable and every credential-bearing value of the command.

    An import takes no value from the environment it runs in: whatever a variable held (a
    database URL with its password, a proxy's) would be written into the stack file and the
    machines' metadata, whatever its name. Each value is written into the command, or the stack,
    by hand; a secret goes into trainstack:secrets. Every problem is reported at once."""
    named = sorted({match.group(0) for _, value in _words(command) for match in SHELL_VARIABLE.finditer(value)})
    problems: list[str] = []
    if named:
        problems.append(
            f"the command uses shell variables ({', '.join(named)}): an import takes no value from this environment "
            "(one could hold a password); write each value into the command, or into the stack file after the "
            "import, and a secret with `pulumi config set --path --secret 'trainstack:secrets.NAME' VALUE`"
        )
    for variable in named:
        name = variable.strip("${}")
        if SECRET_VARIABLE.fullmatch(name):
            problems.append(
                f"{variable} looks like a secret: pass it with `pulumi config set --path --secret "
                f"'trainstack:secrets.{name}' \"${name}\"` (the job's code then reads ${name} from its environment) "
                "and drop it from the command"
            )
    problems += [
        problem
        for where, value in _words(command)
        if (problem := credential_problem(where, value, "the command")) is not None
    ]
    if problems:
        raise ImportProblem("; ".join(problems))


def training_input_of(command: CommandLine, base: Path, notices: list[str]) -> dict[str, Any]:
    """The trainingInput a command line submitted: its --config file, then its flags over it (as gcloud does)."""
    training_input: dict[str, Any] = {}
    if "--config" in command.flags:
        from trainstack.interop.jobfile_reading import read_document

        config_path = base / command.flags["--config"]
        document = read_document(config_path)
        inner = get(document, "trainingInput", "training_input")
        if not isinstance(inner, dict):
            raise ImportProblem(f"--config {command.flags['--config']}: no trainingInput mapping in it")
        training_input.update(inner)
    for flag, key in FIELD_FLAGS.items():
        if flag in command.flags:
            value: Any = command.flags[flag]
            count = whole_number(value) if key.endswith("Count") else None
            training_input[key] = value if count is None else count
    for flag, key in ACCELERATOR_FLAGS.items():
        if flag in command.flags:
            training_input[key] = {**(training_input.get(key) or {}), **_accelerator_flag(flag, command.flags[flag])}
    for flag, key in IMAGE_FLAGS.items():
        if flag in command.flags:
            training_input[key] = {**(training_input.get(key) or {}), "imageUri": command.flags[flag]}
    if command.args:
        training_input["args"] = command.args
    return training_input


def _package_job(command: CommandLine, base: Path, name: str, notices: list[str]) -> dict[str, Any] | None:
    package_path, module = command.flags.get("--package-path"), command.flags.get("--module-name")
    if package_path is None:
        return None
    if module is None:
        raise ImportProblem("--package-path without --module-name: name the module to run (e.g. trainer.task)")
    from trainstack.base.project import PROJECT_ROOT

    directory = (base / package_path).resolve()
    try:
        package = str(directory.relative_to(PROJECT_ROOT))
    except ValueError:
        package = str(directory)
    job: dict[str, Any] = {"name": name, "package": package, "module": module}
    if command.args and (kept := without_job_dir(command.args, notices)):
        job["args"] = kept
    if "--packages" in command.flags:
        notices.append(
            f"--packages {command.flags['--packages']} is not imported: list a package's own requirements in "
            "trainstack:job.requirements"
        )
    return job


def shape_of_command_line(text: str, base: Path, stack: str, notices: list[str]) -> TrainingShape:
    command = parse_command_line(text)
    refuse_variables_and_credentials(command)
    job_name = command.job_name if command.job_name and JOB_NAME.fullmatch(command.job_name) else None
    if command.job_name and job_name is None:
        notices.append(
            f"the job name {command.job_name!r} is not a valid job name here; the job is named after the stack"
        )
    name = job_name or job_name_of_stack(stack)
    training_input = training_input_of(command, base, notices)
    package_job = _package_job(command, base, name, notices)
    if package_job is not None:
        if get(get(training_input, "masterConfig"), "imageUri"):
            raise ImportProblem("--package-path and --master-image-uri together: a job runs a package or an image")
        training_input.pop("args", None)  # they travel with the package job
    # Without a package or an image the command named no code: the notice above said why.
    shape = shape_of({"trainingInput": training_input}, name, notices, job=package_job, no_code="")
    if shape.job is None and command.args:
        notices.append(f"the job's arguments wait for its code: {shlex.join(command.args)}")
    for flag in ("--python-version", "--staging-bucket", "--labels"):
        if flag in command.flags:
            notices.append(f"{flag} {command.flags[flag]} is not imported: a stack sets its own")
    return shape
