"""The stack's cluster as a Vertex AI custom job (``trainstack export vertex``).

The same machines, GPUs, replica counts, code and arguments, as the ``CustomJobSpec`` that
``gcloud ai custom-jobs create --config`` reads (REST field names), or as a Vertex AI SDK
``CustomJob`` snippet. Pool 0 is the chief, pool 1 the workers, pool 2 the parameter servers
(https://cloud.google.com/vertex-ai/docs/training/distributed-training); Vertex AI writes each
replica's TF_CONFIG from them, which the built-in trainer and a team's code already read.
"""

from __future__ import annotations

import json
import pprint
import re
from datetime import date
from typing import TYPE_CHECKING, Any

from trainstack.jobcode.sdist import sdist_filename
from trainstack_contract import MULTI_WORKER_MIRRORED, ROLES

if TYPE_CHECKING:
    from trainstack.catalog import TrainingContainer
    from trainstack.stackmodel.resolved import ClusterNode, ResolvedStack
    from trainstack.tuning.spec import HyperparameterSpec, ParameterSpec

FORMATS = ("gcloud", "python", "json")
# Vertex AI's pool order: the chief, the workers, the parameter servers (the contract's order).
POOL_ROLES = ROLES
# The boot disk types a Vertex AI training replica takes (DiskSpec.boot_disk_type: "Valid values:
# pd-ssd, pd-standard or hyperdisk-balanced", the default for A3 Ultra machines; aiplatform v1
# discovery document, revision 20261106, shipped with google-api-python-client 2.202.0).
VERTEX_BOOT_DISKS = ("pd-ssd", "pd-standard", "hyperdisk-balanced")


class ExportProblem(ValueError):
    """The stack cannot be sent to Vertex AI as it is; the message says why."""


def _machine_spec(node: ClusterNode) -> dict[str, Any]:
    from trainstack.catalog import workbench_enum as accelerator_enum

    spec: dict[str, Any] = {"machineType": node.machine_type}
    if node.accelerator is not None:
        spec.update(acceleratorType=accelerator_enum(node.accelerator.type), acceleratorCount=node.accelerator.count)
    return spec


def _disk_spec(node: ClusterNode, notes: list[str]) -> dict[str, Any]:
    disk_type = node.boot_disk_type if node.boot_disk_type in VERTEX_BOOT_DISKS else "pd-ssd"
    if disk_type != node.boot_disk_type:
        note = (
            f"Vertex AI boots replicas from pd-ssd, pd-standard or hyperdisk-balanced: {node.boot_disk_type} "
            "becomes pd-ssd"
        )
        if note not in notes:
            notes.append(note)
    return {"bootDiskType": disk_type, "bootDiskSizeGb": node.disk_gb}


def _pools_by_role(stack: ResolvedStack) -> dict[str, list[ClusterNode]]:
    assert stack.cluster is not None
    pools: dict[str, list[ClusterNode]] = {role: [] for role in POOL_ROLES}
    for node in stack.cluster.nodes:
        pools[node.role].append(node)
    return pools


def _check_same_gpus(stack: ResolvedStack, pools: dict[str, list[ClusterNode]]) -> None:
    """MultiWorkerMirroredStrategy runs one replica per GPU on every machine alike (seed 004's warning)."""
    assert stack.cluster is not None
    if stack.cluster.strategy != MULTI_WORKER_MIRRORED:
        return
    shapes = {
        role: None if nodes[0].accelerator is None else (nodes[0].accelerator.type, nodes[0].accelerator.count)
        for role, nodes in pools.items()
        if nodes and role != "ps"
    }
    if len(set(shapes.values())) > 1:
        raise ExportProblem(
            f"{MULTI_WORKER_MIRRORED} needs the same GPUs in every pool, and the chief and workers differ ({shapes}): "
            "give trainstack:cluster.chief and .workers the same accelerator"
        )


# Run from the stack's own image: pip installs the package's source distribution, which
# Vertex AI's Cloud Storage mount shows under /gcs/BUCKET/OBJECT, then the module runs. Both
# from an empty directory of their own, not the image's working directory: `python -m` puts
# the working directory first on the import path, and the image's holds the built-in
# `trainer/`, which would shadow a team's package of that name (every AI Platform sample's).
# A ContainerSpec names no working directory, so the command changes to it. The values come
# as positional parameters ("$1", "$@"), never as part of the script's text.
PACKAGE_RUNNER = (
    'set -eu; run_dir=$(mktemp -d); cd "$run_dir"; '
    'python -m pip install --quiet --user "$1"; shift; exec python -m "$@"'
)
PACKAGE_RUNNER_NAME = "trainstack-package"
GCS_MOUNT = "/gcs"


def gcs_mount_path(uri: str) -> str:
    """gs://BUCKET/OBJECT as a Vertex AI training replica sees it through Cloud Storage FUSE
    (https://cloud.google.com/vertex-ai/docs/training/cloud-storage-file-system)."""
    bucket_and_object = uri.removeprefix("gs://")
    return f"{GCS_MOUNT}/{bucket_and_object}"


def code_spec(
    stack: ResolvedStack, package_uri: str | None, notes: list[str], today: date | None = None
) -> tuple[str, dict[str, Any]]:
    """The pools' code: ("containerSpec", ...) on the stack's own image (`trainstack build`) for
    the built-in trainer and a team's package, the job's image otherwise; ("pythonPackageSpec",
    ...) on Google's prebuilt TensorFlow container only while one is still available."""
    from trainstack.jobcode.image import IMAGE_NAME, content_tag, image_uri
    from trainstack.jobcode.package import PROJECT_LAYOUT
    from trainstack_contract import FLAGS

    assert stack.job is not None
    assert stack.cluster is not None
    args = [*stack.cluster.trainer_args, FLAGS.job_dir, stack.job.job_dir]
    if stack.job.image is not None:
        if stack.job.image.tag is not None:
            notes.append(
                f"imageUri {stack.job.image.uri} is named by tag, which Vertex AI pulls as it is when the job "
                "starts; `export` reaches no registry to pin it (`pulumi up` does for the stack's own machines): "
                "for a pinned job, name trainstack:job.image NAME@sha256:... (`gcloud artifacts docker images "
                "describe URI` shows its digest)"
            )
        return "containerSpec", {"imageUri": stack.job.image.uri, "args": args}
    own_image = image_uri(stack.registry_url, content_tag())
    build = f"`.venv/bin/trainstack build --stack {stack.name}` builds and pushes it"
    if stack.job.builtin:
        notes.append(f"the built-in trainer runs from {IMAGE_NAME} in the stack's registry: {build}")
        return "containerSpec", {"imageUri": own_image, "args": args}
    package = stack.job.package
    assert package is not None
    uri = package_uri or f"gs://{stack.bucket_name}/{sdist_object(package.name, package.digest)}"
    if package_uri is None and package.layout == PROJECT_LAYOUT:
        from trainstack.jobcode.sdist import project_build_hint

        uri = f"gs://{stack.bucket_name}/{sdist_object(package.name, 'VERSION').replace('0.0.0+VERSION', 'VERSION')}"
        notes.append(f"{uri}: {project_build_hint(package)}")
    elif package_uri is None:
        notes.append(
            f"{uri} is the package as a Python source distribution: build it with --sdist-dir DIR and copy it there "
            "(gcloud storage cp)"
        )
    executor = prebuilt_container(any(node.accelerator for node in stack.cluster.nodes), today or date.today())
    if executor is not None:
        notes.append(f"Google's prebuilt container runs TensorFlow {executor.version} ({executor.note})")
        return "pythonPackageSpec", {
            "executorImageUri": executor.uri,
            "packageUris": [uri],
            "pythonModule": package.module,
            "args": args,
        }
    notes.append(
        "Google's prebuilt TensorFlow training containers are past their end of availability, so the package "
        f"runs on the stack's own image {own_image} (the project's Dockerfile, the TensorFlow of the stack's "
        f"nodes), installed with pip when each replica starts: {build}"
    )
    return "containerSpec", {
        "imageUri": own_image,
        "command": ["sh", "-c", PACKAGE_RUNNER, PACKAGE_RUNNER_NAME],
        "args": [gcs_mount_path(uri), package.module, *args],
    }


def prebuilt_container(gpu: bool, today: date) -> TrainingContainer | None:
    """The newest of Google's prebuilt TensorFlow training containers still available on
    ``today`` (catalog: vertex_training_containers.csv), or None."""
    from trainstack.catalog import vertex_training_containers

    wanted = "gpu" if gpu else "cpu"
    containers = [
        c
        for c in vertex_training_containers()
        if c.framework == "tensorflow" and c.accelerator == wanted and today <= c.available_until
    ]
    if not containers:
        return None
    return max(containers, key=lambda c: tuple(int(part) for part in c.version.split(".")))


def sdist_object(package: str, digest: str) -> str:
    from trainstack_contract import LAYOUT

    return f"{LAYOUT.code_dir}/vertex/{sdist_filename(package, digest)}"


def custom_job_spec(stack: ResolvedStack, package_uri: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """The stack's cluster and job as a CustomJobSpec in Vertex AI's REST (JSON) field names."""
    if stack.cluster is None:
        what = "a TPU VM" if stack.tpu else "no cluster"
        raise ExportProblem(f"stack {stack.name} has {what}: `export vertex` sends a cluster (trainstack:cluster)")
    if stack.job is None:
        raise ExportProblem(f"stack {stack.name} has no job: a Vertex AI custom job runs one (trainstack:job)")
    notes: list[str] = []
    pools = _pools_by_role(stack)
    _check_same_gpus(stack, pools)
    code_key, code = code_spec(stack, package_uri, notes)
    if stack.job.env:
        # ContainerSpec.env and PythonPackageSpec.env: the same variables on every replica.
        code["env"] = [{"name": name, "value": value} for name, value in stack.job.env]
    specs = []
    for role in POOL_ROLES:
        nodes = pools[role]
        if not nodes:
            if role == "worker" and pools["ps"]:
                raise ExportProblem("parameter servers without workers: Vertex AI's pool 2 needs a pool 1")
            continue
        specs.append(
            {
                "replicaCount": len(nodes),
                "machineSpec": _machine_spec(nodes[0]),
                "diskSpec": _disk_spec(nodes[0], notes),
                code_key: code,
            }
        )
    spec: dict[str, Any] = {
        "workerPoolSpecs": specs,
        "baseOutputDirectory": {"outputUriPrefix": stack.job.job_dir},
        "serviceAccount": stack.training_account_email,
    }
    scheduling: dict[str, Any] = {}
    if stack.cluster.max_run_seconds is not None:
        scheduling["timeout"] = f"{stack.cluster.max_run_seconds}s"
    spot = [node.spot for node in stack.cluster.nodes]
    if all(spot):
        scheduling["strategy"] = "SPOT"
    elif any(spot):
        notes.append("Vertex AI runs a whole job on Spot or none of it: some nodes are Spot, so the job is on demand")
    if scheduling:
        spec["scheduling"] = scheduling
    notes.append(
        f"the job runs as {spec['serviceAccount']} (created by `pulumi up`); whoever submits it needs "
        "iam.serviceAccounts.actAs on it"
    )
    if stack.job.secrets:
        # A CustomJobSpec has no field that reads Secret Manager: the job's code must do it.
        names = ", ".join(env for env, _ in stack.job.secrets)
        ids = ", ".join(secret for _, secret in stack.job.secrets)
        notes.append(
            f"trainstack:secrets ({names}) are not in this job: Vertex AI does not put Secret Manager secrets into "
            f"a custom job's environment. Have the job's code read them with the Secret Manager client "
            f"(secrets {ids} in project {stack.project}: `pulumi up` creates them and lets "
            f"{spec['serviceAccount']} read them)"
        )
    return spec, notes


def display_name(stack: ResolvedStack) -> str:
    return f"{stack.name}-{stack.job.name}" if stack.job else stack.name


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def snake_case(value: Any) -> Any:
    """REST field names (replicaCount) as the client library's (replica_count)."""
    if isinstance(value, dict):
        return {_snake(key): snake_case(item) for key, item in value.items()}
    if isinstance(value, list):
        return [snake_case(item) for item in value]
    return value


def python_snippet(stack: ResolvedStack, spec: dict[str, Any]) -> str:
    """A Vertex AI SDK program that submits the job (google-cloud-aiplatform)."""
    pools = pprint.pformat(snake_case(spec["workerPoolSpecs"]), indent=1, width=110, sort_dicts=False)
    timeout = spec.get("scheduling", {}).get("timeout")
    run_args = [f"service_account={spec['serviceAccount']!r}"]
    if timeout:
        run_args.append(f"timeout={int(timeout.removesuffix('s'))}")
    if spec.get("scheduling", {}).get("strategy") == "SPOT":
        run_args.append("scheduling_strategy=aiplatform.compat.types.custom_job.Scheduling.Strategy.SPOT")
    return "\n".join(
        [
            f'"""Vertex AI custom job for stack {stack.name}, written by `trainstack export vertex --format python`."""',
            "",
            "from google.cloud import aiplatform",
            "",
            f"WORKER_POOL_SPECS = {pools}",
            "",
            f"aiplatform.init(project={stack.project!r}, location={stack.region!r})",
            "job = aiplatform.CustomJob(",
            f"    display_name={display_name(stack)!r},",
            "    worker_pool_specs=WORKER_POOL_SPECS,",
            f"    base_output_dir={spec['baseOutputDirectory']['outputUriPrefix']!r},",
            ")",
            f"job.run({', '.join(run_args)})",
            "",
        ]
    )


def render(stack: ResolvedStack, spec: dict[str, Any], output: str) -> str:
    if output == "json":
        return json.dumps(spec, indent=2) + "\n"
    if output == "python":
        return python_snippet(stack, spec)
    import yaml

    header = (
        f"# Vertex AI CustomJobSpec for stack {stack.name}:\n"
        f"#   gcloud ai custom-jobs create --project {stack.project} --region {stack.region} "
        f"--display-name {display_name(stack)} --config FILE\n"
    )

    class PlainDumper(yaml.SafeDumper):
        """Every pool spelled out: YAML anchors and aliases read badly in a job file."""

        def ignore_aliases(self, data: Any) -> bool:
            return True

    return header + yaml.dump(spec, Dumper=PlainDumper, sort_keys=False)


# --- A study as a Vertex AI HyperparameterTuningJob (`export vertex --tune-spec FILE`) ----------
# AI Platform's scaleType NONE is Vertex AI's SCALE_TYPE_UNSPECIFIED ("by default, no scaling is
# applied"): the enum's default, which the REST API's JSON leaves out, so it is not written.
NO_SCALE = "NONE"
# AI Platform's finalMetric was "the final objective metric seen for this trial": the last one.
MEASUREMENT_SELECTION = "LAST_MEASUREMENT"
# enableTrialEarlyStopping named no rule. Vertex AI's median rule stops a trial whose best value
# is below the median of the completed trials' at the same step: a rule that needs only the
# measurements cloudml-hypertune reports (by step, not by elapsed time).
EARLY_STOPPING = ("medianAutomatedStoppingSpec", {"useElapsedDuration": False})


def _value_spec(param: ParameterSpec) -> tuple[str, dict[str, Any]]:
    if param.type == "DOUBLE":
        return "doubleValueSpec", {"minValue": param.min_value, "maxValue": param.max_value}
    if param.type == "INTEGER":
        assert param.min_value is not None
        assert param.max_value is not None
        # int64 fields are JSON strings in Vertex AI's REST API (proto3's JSON mapping).
        return "integerValueSpec", {"minValue": str(int(param.min_value)), "maxValue": str(int(param.max_value))}
    if param.type == "CATEGORICAL":
        return "categoricalValueSpec", {"values": list(param.categorical_values or ())}
    return "discreteValueSpec", {"values": list(param.discrete_values or ())}


def study_spec(spec: HyperparameterSpec) -> dict[str, Any]:
    """AI Platform's HyperparameterSpec as Vertex AI's StudySpec (REST field names)."""
    parameters = []
    for param in spec.params:
        key, value = _value_spec(param)
        parameter: dict[str, Any] = {"parameterId": param.parameter_name, key: value}
        if param.scale_type != NO_SCALE:
            parameter["scaleType"] = param.scale_type
        parameters.append(parameter)
    study: dict[str, Any] = {
        "metrics": [{"metricId": spec.hyperparameter_metric_tag, "goal": spec.goal}],
        "parameters": parameters,
        # Both services' ALGORITHM_UNSPECIFIED is their default, Bayesian optimization (Vizier).
        "algorithm": spec.algorithm,
        "measurementSelectionType": MEASUREMENT_SELECTION,
    }
    if spec.enable_trial_early_stopping:
        key, value = EARLY_STOPPING
        study[key] = dict(value)
    return study


def one_machine_trials(stack: ResolvedStack, job_spec: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """``job_spec`` on one machine, as `tune --one-node` runs a trial: the chief's pool alone,
    one replica, and the built-in trainer's strategy chosen for that machine."""
    from trainstack.stackmodel.resolved import single_machine_args

    chief = dict(job_spec["workerPoolSpecs"][0], replicaCount=1)
    if stack.job is not None and stack.job.builtin:
        # The built-in trainer always runs from the stack's own image (code_spec).
        chief["containerSpec"] = dict(
            chief["containerSpec"], args=list(single_machine_args(chief["containerSpec"]["args"]))
        )
    if len(job_spec["workerPoolSpecs"]) > 1 or job_spec["workerPoolSpecs"][0]["replicaCount"] > 1:
        notes.append("each trial runs on one machine, the chief's (as `tune --one-node`): its pool alone, one replica")
    return dict(job_spec, workerPoolSpecs=[chief])


def tuning_job(
    stack: ResolvedStack, spec: HyperparameterSpec, trial_job_spec: dict[str, Any], notes: list[str]
) -> dict[str, Any]:
    """The study as a Vertex AI HyperparameterTuningJob whose trials run ``trial_job_spec``."""
    notes.append(
        f"each trial reports its metric with cloudml-hypertune under the tag {spec.hyperparameter_metric_tag} "
        "(Vertex AI's documented way); its parameters come as --NAME=VALUE arguments after the job's own"
    )
    job_dir = trial_job_spec.get("baseOutputDirectory", {}).get("outputUriPrefix")
    notes.append(
        f"every trial gets the same --job-dir {job_dir}; Vertex AI gives trial N its own AIP_MODEL_DIR, "
        "AIP_CHECKPOINT_DIR and AIP_TENSORBOARD_LOG_DIR under <baseOutputDirectory>/N/: code that writes to "
        "--job-dir alone has every trial write there"
    )
    if spec.max_failed_trials == 0:
        notes.append("maxFailedTrials 0 is maxFailedTrialCount 0: Vertex AI decides when failed trials end the study")
    if spec.resume_previous_job_id:
        notes.append(
            f"resumePreviousJobId {spec.resume_previous_job_id} is not carried: a Vertex AI tuning job starts "
            "a study of its own"
        )
    return {
        "displayName": display_name(stack),
        "studySpec": study_spec(spec),
        "maxTrialCount": spec.max_trials,
        "parallelTrialCount": spec.max_parallel_trials,
        "maxFailedTrialCount": spec.max_failed_trials,
        "trialJobSpec": trial_job_spec,
    }


def render_tuning(stack: ResolvedStack, job: dict[str, Any], output: str) -> str:
    if output == "json":
        return json.dumps(job, indent=2) + "\n"
    import yaml

    header = (
        f"# Vertex AI HyperparameterTuningJob for stack {stack.name}:\n"
        f"#   gcloud ai hp-tuning-jobs create --project {stack.project} --region {stack.region} "
        f"--display-name {display_name(stack)} --max-trial-count {job['maxTrialCount']} "
        f"--parallel-trial-count {job['parallelTrialCount']} --config FILE\n"
    )
    body = {key: value for key, value in job.items() if key != "displayName"}

    class PlainDumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return header + yaml.dump(body, Dumper=PlainDumper, sort_keys=False)
