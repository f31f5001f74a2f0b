"""Typed stack configuration: the models a stack file's ``trainstack:`` keys are read into.

A stack file (``stacks/Pulumi.<stack>.yaml``) is parsed once into :class:`StackConfig`
(:func:`trainstack.stackmodel.configmap.parse_stack_config` reads its ``config:`` map).
Structure and value ranges are checked here by pydantic (unknown keys are errors, so a
typo never falls back to a default); cloud facts (which GPU fits which machine, which zone
offers what) are checked afterwards by :mod:`trainstack.stackmodel.feasibility` against the catalog.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trainstack.base.errors import shorten
from trainstack.base.names import ZONE_PATTERN
from trainstack.jobcode.package import check_image_syntax
from trainstack.stackmodel.naming import (
    BILLING_ACCOUNT_PATTERN,
    BUCKET_NAME_PATTERN,
    GCS_URI_PATTERN,
    KMS_KEY_PATTERN,
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    MAX_ACCESS_MEMBERS,
    MAX_USER_LABELS,
    MEMBER_PATTERN,
    NETWORK_PATH_PATTERN,
    RESERVATION_NAME_PATTERN,
    RESERVED_LABEL_PREFIX,
    RESOURCE_NAME_MAX,
    RESOURCE_NAME_PATTERN,
    SUBNETWORK_PATH_PATTERN,
    default_bucket_name,
    default_resource_name,
    full_match,
    part_of,
)
from trainstack.stackmodel.secrets import SECRET_COMMAND, SECRET_LIKE_ENV_NAME, JobSecret, check_secret_names
from trainstack_contract import (
    AUTO,
    BATCH_SIZE_PER_REPLICA,
    CAPACITIES,
    CNN,
    EPOCHS,
    EXECUTED_PREFIX,
    EXTERNAL_JOB_DIR,
    FLAGS,
    IMAGE_JOB,
    IMAGE_SIZE,
    JOB_ENV_NAME,
    LAYOUT,
    MAX_JOB_ENV,
    MAX_JOB_ENV_CHARS,
    NO_JOB,
    ON_DEMAND,
    PACKAGE_JOB,
    RESERVATION,
    SAVE_EVERY_MINUTES,
    SPOT,
    STACK_LABEL,
    STEPS_PER_EPOCH,
    SYNTHETIC_DATA,
    Capacity,
    ClusterStrategy,
    JobMode,
    Model,
    job_env_problem,
    under_prefix,
)
from trainstack_contract.jobaccess import MAX_PLACES, PLACE
from trainstack_contract.metadata import (
    MAX_IDLE_MINUTES,
    MAX_JOB_ARGS,
    MAX_PEER_TIMEOUT_SECONDS,
    MAX_RESTARTS,
    MAX_RUN_SECONDS,
    OnFinish,
)
from trainstack_contract.names import JOB_NAME, MODULE_NAME

# The Cloud TPU service agent (service-PROJECT_NUMBER@cloud-tpu.iam.gserviceaccount.com)
# holds roles/tpu.serviceAgent (https://cloud.google.com/iam/docs/service-agents).
# AI Platform Training had it granted roles/ml.serviceAgent
# (https://cloud.google.com/ai-platform/training/docs/using-tpus); that service shut down on
# 2025-01-31 (https://cloud.google.com/ai-platform/training/docs/deprecations). The role stays
# accepted for stacks that still need it, but is no longer the default.
TPU_SERVICE_AGENT_ROLES = ("roles/tpu.serviceAgent", "roles/ml.serviceAgent")

# Trainer flags that the stack sets through its own keys (job.*, cluster.strategy, the job
# directory); `job.args` may not set them again, or they would bypass validation and IAM.
STACK_SET_FLAGS = {
    FLAGS.job_dir: (
        f"trainstack:job.name (the job directory is {LAYOUT.job_dir('gs://<bucket>', '<name>')}) or "
        "trainstack:job.job_dir (gs://BUCKET/PREFIX, a bucket of the team's own)"
    ),
    FLAGS.model: "trainstack:job.model",
    FLAGS.data: "trainstack:job.data",
    FLAGS.epochs: "trainstack:job.epochs",
    FLAGS.batch_size_per_replica: "trainstack:job.batch_size_per_replica",
    FLAGS.image_size: "trainstack:job.image_size",
    FLAGS.steps_per_epoch: "trainstack:job.steps_per_epoch",
    FLAGS.save_every_seconds: "trainstack:job.save_every_minutes",
    FLAGS.strategy: "trainstack:cluster.strategy",
    FLAGS.tpu: "trainstack:tpu",
}
# The job settings only the built-in trainer reads; a team's package or image takes its
# own flags through job.args.
BUILTIN_TRAINER_KEYS = (
    "model",
    "data",
    "epochs",
    "batch_size_per_replica",
    "steps_per_epoch",
    "image_size",
    "save_every_minutes",
)
# Trainer flags every job's code receives from the stack: job.args may not set them.
ALWAYS_STACK_SET_FLAGS = (FLAGS.job_dir,)
MAX_PATH_CHARS = 4096
# Bounds on job.args: they travel in instance metadata (Compute Engine: 256 KB per value,
# 512 KB per instance, startup script included).
MAX_ARGS = MAX_JOB_ARGS
MAX_ARG_CHARS = 4096
MAX_ARGS_TOTAL_CHARS = 32 * 1024

PositiveInt = Annotated[int, Field(gt=0)]
# The job settings take the contract's ranges, the ones the trainer's flags enforce.
Epochs = Annotated[int, Field(ge=EPOCHS.low, le=EPOCHS.high)]
BatchSize = Annotated[int, Field(ge=BATCH_SIZE_PER_REPLICA.low, le=BATCH_SIZE_PER_REPLICA.high)]
Steps = Annotated[int, Field(ge=STEPS_PER_EPOCH.low, le=STEPS_PER_EPOCH.high)]
ImageSize = Annotated[int, Field(ge=IMAGE_SIZE.low, le=IMAGE_SIZE.high)]
SaveMinutes = Annotated[int, Field(ge=SAVE_EVERY_MINUTES.low, le=SAVE_EVERY_MINUTES.high)]
# Compute Engine accepts run-time limits from 30 seconds up to 120 days.
MIN_RUN_HOURS = 0.01
MAX_RUN_HOURS = MAX_RUN_SECONDS // 3600
MaxRunHours = Annotated[float, Field(ge=MIN_RUN_HOURS, le=MAX_RUN_HOURS)]
# How long the cluster's nodes or the TPU VM wait with an empty job queue before they apply
# on_finish: whole minutes, at most a week; 0 = as soon as the queue is empty.
DEFAULT_IDLE_MINUTES = 10
IdleMinutes = Annotated[int, Field(ge=0, le=MAX_IDLE_MINUTES)]


class _Strict(BaseModel):
    # allow_inf_nan=False: ".inf" or ".nan" in YAML is a float too, and passes ge/le checks.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


def check_job_env(env: Any) -> Any:
    """job.env as the stack file gives it, when every name and value is one a job may get;
    each problem names the variable (never quotes its value)."""
    if not isinstance(env, Mapping):
        raise ValueError(f'a mapping of NAME: "value" (got {shorten(env)})')
    if len(env) > MAX_JOB_ENV:
        raise ValueError(f"{len(env)} variables: at most {MAX_JOB_ENV}")
    for name, value in env.items():
        scalar = isinstance(value, (bool, int, float))
        problem = job_env_problem(name, "" if scalar else value)
        if problem is not None:
            named = isinstance(name, str) and JOB_ENV_NAME.fullmatch(name) is not None
            raise ValueError(problem if named else f"{shorten(name)}: {problem}")
        if scalar:
            written = json.dumps(value)
            raise ValueError(f'{name}: {written} is not text to YAML; environment values are text: write "{written}"')
        if SECRET_LIKE_ENV_NAME.fullmatch(name):
            raise ValueError(
                f"{name} looks like a secret's name, and job.env is written in clear text into the machines' metadata "
                f"and the plan; keep it a secret: {SECRET_COMMAND.format(name=name)} (the job reads ${name} the same way)"
            )
    if len(json.dumps(dict(env))) > MAX_JOB_ENV_CHARS:
        raise ValueError(f"the variables add up to more than {MAX_JOB_ENV_CHARS} characters")
    return env


# The rules the validators below apply, as plain functions: a validator only hands its field (or
# its model) over. mutmut 3.8.1 mutates no decorated function, so the rules are mutated here.


def check_one_capacity(choice: CapacityChoice) -> None:
    """One way to get the machine: ``spot: true`` agrees with ``capacity``, and a reservation name
    comes with ``capacity: reservation`` alone."""
    if choice.spot and choice.capacity not in (None, SPOT):
        raise ValueError(
            f"spot: true and capacity: {choice.capacity} name two ways to get the machine; keep one "
            f"(capacity: one of {', '.join(CAPACITIES)})"
        )
    if choice.reservation is not None and choice.effective_capacity != RESERVATION:
        raise ValueError(
            f"reservation: {choice.reservation} names a reservation to consume, which only capacity: "
            f"{RESERVATION} does (capacity is {choice.effective_capacity})"
        )
    if choice.reservation_bound is not None and choice.effective_capacity != RESERVATION:
        raise ValueError(
            f"reservation_bound: {str(choice.reservation_bound).lower()} says how a reservation binds the VM, which "
            f"only capacity: {RESERVATION} has (capacity is {choice.effective_capacity})"
        )


def check_run_time_cap(max_run_hours: float | None, acknowledged: bool) -> None:
    """No run-time cap only with the acknowledgement that the machines bill until stopped, and
    the acknowledgement only without a cap."""
    if max_run_hours is None and not acknowledged:
        raise ValueError(
            "max_run_hours: null turns off the run-time cap, and the machines then bill until someone stops "
            "them (pulumi destroy); say so with acknowledge_bills_until_stopped: true, or set max_run_hours"
        )
    if max_run_hours is not None and acknowledged:
        raise ValueError(
            f"acknowledge_bills_until_stopped: true, but max_run_hours is {max_run_hours}: the cap stays on; "
            "remove the acknowledgement, or set max_run_hours: null"
        )


def check_service_agent_role(role: str) -> str:
    if role not in TPU_SERVICE_AGENT_ROLES:
        raise ValueError(
            f"the Cloud TPU service agent may be granted only a service-agent role: {', '.join(TPU_SERVICE_AGENT_ROLES)}"
        )
    return role


def check_data_source(data: str) -> str:
    if data != SYNTHETIC_DATA and not GCS_URI_PATTERN.fullmatch(data):
        raise ValueError(
            f"{shorten(data)} is not a data source: use '{SYNTHETIC_DATA}' or a gs://BUCKET/PATH readable by the training service account"
        )
    return data


def check_job_dir(job_dir: str) -> str:
    """A job directory of the team's own bucket, without its trailing slash."""
    trimmed = job_dir.removesuffix("/")
    if (match := EXTERNAL_JOB_DIR.fullmatch(trimmed)) is None:
        raise ValueError(
            f"{shorten(job_dir)} is not a job directory: use gs://BUCKET/PREFIX, a folder (not the bucket's root: "
            "the nodes may write under it alone) of folder names of letters, digits and '._=-'; or leave it out "
            "for jobs/<name> in the stack's own bucket"
        )
    if under_prefix(match["prefix"], EXECUTED_PREFIX):
        raise ValueError(
            f"{shorten(job_dir)} lies under {EXECUTED_PREFIX}, where trainstack keeps what machines run (in "
            f"any bucket: only `pulumi up` may write there); use a folder outside {EXECUTED_PREFIX} of a "
            "bucket of the team's own"
        )
    return trimmed


def check_path_text(path: str) -> str:
    if not path or len(path) > MAX_PATH_CHARS or any(not c.isprintable() for c in path):
        raise ValueError(f"{shorten(path)} is not a path: printable text of at most {MAX_PATH_CHARS} characters")
    return path


def check_args(args: list[str]) -> list[str]:
    for arg in args:
        if len(arg) > MAX_ARG_CHARS or any(not c.isprintable() for c in arg):
            raise ValueError(f"{shorten(arg)}: each argument is printable text of at most {MAX_ARG_CHARS} characters")
    if sum(len(arg) for arg in args) > MAX_ARGS_TOTAL_CHARS:
        raise ValueError(f"the arguments add up to more than {MAX_ARGS_TOTAL_CHARS} characters")
    return args


def check_bucket_name(bucket: str) -> str:
    full_match(BUCKET_NAME_PATTERN, bucket, "a bucket name: 3-63 lowercase letters, digits, '-' and '_'")
    if bucket.startswith("goog") or "google" in bucket:
        raise ValueError(f"{bucket} is not a bucket name Cloud Storage allows: none begins with goog or holds google")
    return bucket


def check_principals(members: list[str]) -> list[str]:
    for member in members:
        full_match(MEMBER_PATTERN, member, "an IAM principal: user:EMAIL, group:EMAIL or serviceAccount:EMAIL")
    duplicates = sorted({m for m in members if members.count(m) > 1})
    if duplicates:
        raise ValueError(f"listed more than once: {', '.join(duplicates)}")
    return members


def check_secrets_have_a_job(settings: Settings) -> None:
    if settings.secrets and (settings.job is None or (settings.cluster is None and settings.tpu is None)):
        raise ValueError("trainstack:secrets are handed to a job on the cluster or TPU VM, and this stack runs none")


def check_env_apart_from_secrets(settings: Settings) -> None:
    both = sorted(set(settings.job.env) & set(settings.secrets)) if settings.job is not None else []
    if both:
        raise ValueError(
            f"job.env sets {', '.join(both)}, which trainstack:secrets sets too; a secret stays in "
            "trainstack:secrets alone"
        )


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    if len(labels) > MAX_USER_LABELS:
        raise ValueError(
            f"{len(labels)} labels: Google Cloud allows 64 per resource and trainstack sets 2, so at most {MAX_USER_LABELS}"
        )
    for key, value in labels.items():
        if not LABEL_KEY_PATTERN.fullmatch(key):
            raise ValueError(
                f"label key {shorten(key)}: lowercase letters, digits, '_' and '-', starting with a letter, at most 63 characters"
            )
        if key.startswith(RESERVED_LABEL_PREFIX):
            raise ValueError(f"label key {key}: keys starting with {RESERVED_LABEL_PREFIX!r} are set by trainstack")
        if not LABEL_VALUE_PATTERN.fullmatch(value):
            raise ValueError(
                f"label {key}={shorten(value)}: values are lowercase letters, digits, '_' and '-', at most 63 characters"
            )
    return labels


class Accelerator(_Strict):
    type: str = Field(description="the GPU type as Compute Engine names it (`nvidia-tesla-t4`)")
    count: PositiveInt = Field(description="how many GPUs of that type")


class CapacityChoice(_Strict):
    """How a node (a pool's VMs, the TPU VM) gets its machine: ``capacity`` (CAPACITIES), with
    ``reservation`` naming the reservation to consume (absent: any matching one). ``spot: true``
    is the older spelling of ``capacity: spot``."""

    spot: bool = Field(default=False, description="`true` is the older spelling of `capacity: spot`")
    capacity: Capacity | None = Field(
        default=None,
        description="how the node gets its machine ([below](#how-each-node-gets-its-machine)); a TPU VM takes "
        "`on_demand`, `spot` or `reservation`. Not set: `spot` with `spot: true`, else `on_demand`",
    )
    reservation: str | None = Field(
        default=None,
        description="with `capacity: reservation` only: the name of the Compute Engine reservation to consume. "
        "Not set: any matching reservation",
    )
    reservation_bound: bool | None = Field(
        default=None,
        description="with `capacity: reservation` only: `true` for a future reservation's capacity (calendar mode, "
        "AI Hypercomputer), whose VMs are reservation-bound: stopped or deleted at the reservation's end; `false` "
        "for an ordinary reservation. Not set: `true` where the machine type is reserved no other way (A3 Ultra, "
        "A4), else `false`",
    )

    @field_validator("reservation")
    @classmethod
    def _reservation_name(cls, name: str | None) -> str | None:
        what = (
            "a reservation name: lowercase letters, digits and hyphens, starting with a letter, at most 63 characters"
        )
        return None if name is None else full_match(RESERVATION_NAME_PATTERN, name, what)

    @model_validator(mode="after")
    def _one_capacity(self) -> CapacityChoice:
        check_one_capacity(self)
        return self

    @property
    def effective_capacity(self) -> Capacity:
        """The capacity asked for: ``capacity``, else spot when ``spot: true``, else on demand."""
        if self.capacity is not None:
            return self.capacity
        return SPOT if self.spot else ON_DEMAND

    @property
    def is_spot(self) -> bool:
        return self.effective_capacity == SPOT


class NodeSpec(CapacityChoice):
    """One VM shape: the chief, or each VM of a pool."""

    machine_type: str = Field(description="the Compute Engine machine type (`n1-standard-8`)")
    accelerator: Accelerator | None = Field(default=None, description="the GPUs the VM gets: `{type, count}`")
    disk_gb: Annotated[int, Field(ge=50, le=65536)] = Field(default=200, description="the boot disk's size in GB")


class WorkerPool(NodeSpec):
    # Every node takes an address of the stack's /20 subnet (4092 usable).
    count: Annotated[int, Field(ge=0, le=3790)] = Field(description="how many workers")


class ParameterServerPool(CapacityChoice):
    """Parameter servers hold variables on CPU and RAM; they take no accelerator."""

    count: Annotated[int, Field(ge=0, le=200)] = Field(description="how many parameter servers")
    machine_type: str = Field(description="the Compute Engine machine type (`n1-highmem-8`)")
    disk_gb: Annotated[int, Field(ge=50, le=65536)] = Field(default=100, description="the boot disk's size in GB")


class Cluster(_Strict):
    chief: NodeSpec = Field(description="the chief's VM (TF_CONFIG's `chief`)")
    workers: WorkerPool | None = Field(
        default=None, description="the workers' VMs: each as the chief, and their `count`"
    )
    parameter_servers: ParameterServerPool | None = Field(
        default=None, description="the parameter servers' VMs: CPU and RAM, no accelerator"
    )
    strategy: ClusterStrategy = Field(
        default=AUTO,
        description="the built-in trainer's distribution strategy; `auto`: chosen from the cluster's parameter "
        "servers, machines and GPUs per machine",
    )
    # A hard cap on billing if a job hangs: Compute Engine stops (or deletes) the VM after this long.
    # null turns it off, and only together with acknowledge_bills_until_stopped: true.
    max_run_hours: MaxRunHours | None = Field(
        default=24,
        description=f"Compute Engine stops (or deletes) each VM after this many hours (at most {MAX_RUN_HOURS}, "
        "120 days, Compute Engine's limit): a hard cap on billing if a job hangs; `null` only with "
        "`acknowledge_bills_until_stopped: true`",
    )
    acknowledge_bills_until_stopped: bool = Field(
        default=False,
        description="`true` with `max_run_hours: null` only: no run-time cap, the machines bill until someone "
        "stops them",
    )
    on_finish: OnFinish = Field(default="stop", description="what the VMs do when the job ends")
    # TF_CONFIG port on every node; the firewall opens exactly this port between cluster nodes.
    port: Annotated[int, Field(ge=1024, le=65535)] = Field(
        default=2222, description="the TF_CONFIG port; the firewall opens exactly this port between the cluster's nodes"
    )
    # The chief's boot script refreshes a heartbeat in the job status while the job runs; any
    # other node that sees no new heartbeat for this long takes the chief for dead, ends its
    # trainer, records FAILED and applies on_finish instead of billing until max_run_hours.
    # The chief likewise gives up on a peer that has recorded no status for this long.
    heartbeat_timeout_seconds: Annotated[int, Field(ge=10, le=MAX_PEER_TIMEOUT_SECONDS)] = Field(
        default=600,
        description="10 s to a day: a node that sees no new heartbeat of the chief for this long takes it for "
        "dead, ends its trainer, records FAILED and applies `on_finish`; the chief does the same when a peer "
        "has recorded no status for this job for this long",
    )
    # The chief starts a preempted Spot peer again at most this many times (per node) before
    # it ends the job FAILED; 0 never restarts one.
    max_restarts: Annotated[int, Field(ge=0, le=MAX_RESTARTS)] = Field(
        default=10,
        description="how many times (per node) the chief starts a preempted Spot peer again before it ends the "
        "job FAILED; 0 never restarts one",
    )
    # Minutes the nodes wait for a queued job (`trainstack submit`) after their last one before
    # they apply on_finish; None: not set (DEFAULT_IDLE_MINUTES where the nodes run a queue).
    idle_minutes: IdleMinutes | None = Field(
        default=None,
        description=f"whole minutes: how long the nodes wait for a job `trainstack submit` queues, after their "
        "last one (or boot), before they apply `on_finish`; 0 = at once. The nodes run the queue where the "
        "stack has a job or sets `idle_minutes` ([below](#a-cluster-without-a-job)). Not set: "
        f"{DEFAULT_IDLE_MINUTES} where the nodes run a queue",
    )

    @model_validator(mode="after")
    def _uncapped_only_when_acknowledged(self) -> Cluster:
        check_run_time_cap(self.max_run_hours, self.acknowledge_bills_until_stopped)
        return self

    @property
    def worker_count(self) -> int:
        return self.workers.count if self.workers else 0

    @property
    def ps_count(self) -> int:
        return self.parameter_servers.count if self.parameter_servers else 0


class Tpu(CapacityChoice):
    accelerator_type: str = Field(description="the TPU type, one host (`v2-8`)")
    runtime_version: str = Field(description="the TPU VM's software version (`tpu-vm-tf-2.17.0-pjrt`)")
    # None: not set by the user; see effective_on_finish.
    on_finish: OnFinish | None = Field(
        default=None,
        description="what the TPU VM does when the job ends. Not set: `stop`, or `delete` for a Spot TPU, which "
        "cannot be started again; `plan` says which applies",
    )
    # The TPU API has no run-time limit for TPU VMs: the boot script enforces this one.
    max_run_hours: MaxRunHours = Field(
        default=24, description="the run-time cap, in hours: the TPU API has none, the boot script enforces this one"
    )
    service_agent_role: str = Field(
        default=TPU_SERVICE_AGENT_ROLES[0],
        description=" or ".join(f"`{role}`" for role in TPU_SERVICE_AGENT_ROLES)
        + ": the role of the Cloud TPU service agent ([security.md](security.md#what-each-account-can-do))",
    )
    # As cluster.idle_minutes, for the TPU VM.
    idle_minutes: IdleMinutes | None = Field(
        default=None,
        description=f"as `cluster.idle_minutes`, for the TPU VM. Not set: {DEFAULT_IDLE_MINUTES} where the TPU VM "
        "runs a queue",
    )

    @field_validator("service_agent_role")
    @classmethod
    def _service_agent_roles_only(cls, role: str) -> str:
        return check_service_agent_role(role)

    @property
    def effective_on_finish(self) -> OnFinish:
        """What the TPU VM does when the job ends: the user's choice, else a default that fits.

        A Spot TPU cannot be started again after it stops (only recreated), so an unset
        on_finish means delete for Spot and stop otherwise."""
        if self.on_finish is not None:
            return self.on_finish
        return "delete" if self.is_spot else "stop"


class Notebook(_Strict):
    machine_type: str = Field(description="the Compute Engine machine type (`n1-standard-8`)")
    accelerator: Accelerator | None = Field(default=None, description="the GPUs the notebook gets: `{type, count}`")
    idle_timeout_minutes: Annotated[int, Field(ge=10, le=10080)] = Field(
        default=180, description="the instance stops after this many idle minutes"
    )
    disk_gb: Annotated[int, Field(ge=150, le=65536)] = Field(default=150, description="the boot disk's size in GB")


# docs/stacks.md's words for the job's keys (the key table is generated from the Field descriptions).
_OWN_CODE = "([own-code.md](own-code.md))"
_DATA_WORDS = (
    f"data: `{SYNTHETIC_DATA}` (images made in memory) or a `gs://BUCKET/PATH` the training service account can read"
)
_STEPS_WORDS = "steps per epoch. Not set: one pass over the training files (synthetic data: the trainer's own default)"
_ARGS_WORDS = f"more arguments for the job's code: each printable text of at most {MAX_ARG_CHARS} characters"
_ENV_WORDS = (
    "environment variables for the job's code (Vertex AI's container `env`) beside the ones trainstack sets, e.g. "
    '`{TF_USE_LEGACY_KERAS: "1"}` for code written for tf.keras as Keras 2: names of letters, digits and `_`; '
    f"values quoted text; at most {MAX_JOB_ENV}; not names trainstack or the loader own (`TF_CONFIG`, `AIP_*`, "
    "`PATH`, `PYTHONPATH`, `LD_*` ...) nor secrets ([own-code.md](own-code.md#environment-variables))"
)
_JOB_DIR_WORDS = (
    "`gs://BUCKET/PREFIX`: a folder of a bucket the team already has (AI Platform's `--job-dir`), never under "
    f"`{EXECUTED_PREFIX}`, in no bucket of another stack, and under `{LAYOUT.jobs}/` in the stack's own bucket; "
    "the job's machines may write under that folder alone ([security.md](security.md#what-each-account-can-do)). "
    f"Not set: `gs://<bucket>/{LAYOUT.jobs}/<job.name>`"
)


def check_places(places: list[str]) -> list[str]:
    """Places a job reads or writes: buckets, or folders of one (a trailing "/"), none under
    trainstack/, each once."""
    if len(places) > MAX_PLACES:
        raise ValueError(f"at most {MAX_PLACES} places")
    # gs://BUCKET/ is the whole bucket, as gs://BUCKET is.
    places = [place.removesuffix("/") if place.count("/") == 3 else place for place in places]
    for place in places:
        if not PLACE.fullmatch(place):
            raise ValueError(
                f"{shorten(place)} is not a place: use gs://BUCKET for a whole bucket or gs://BUCKET/FOLDER/ (folder "
                "names of letters, digits and '._=-', ending in '/') for what is under one folder"
            )
        if under_prefix(place.removeprefix("gs://").partition("/")[2], EXECUTED_PREFIX):
            raise ValueError(f"{shorten(place)} lies under {EXECUTED_PREFIX}, where trainstack keeps what machines run")
    if len(set(places)) != len(places):
        raise ValueError("a place is named twice")
    return places


class JobBuckets(_Strict):
    """Where a job reads and writes in Cloud Storage, beside its own directory: what `plan`
    grants the job's machines and what the job's own token carries."""

    read: list[str] = Field(default_factory=list, description="gs://BUCKET or gs://BUCKET/FOLDER/ the job reads")
    write: list[str] = Field(default_factory=list, description="gs://BUCKET/FOLDER/ the job writes under")

    @field_validator("read", "write")
    @classmethod
    def _places(cls, places: list[str]) -> list[str]:
        return check_places(places)


_BUCKETS_WORDS = (
    "the Cloud Storage places the job reads and writes besides its own directory, "
    "`{read: [gs://BUCKET/FOLDER/], write: [gs://BUCKET/FOLDER/]}`; what `--output_dir`, `--job-dir`, "
    "`--*_data_path` and the like in job.args name is added by itself, and `validate` names any other "
    "([security.md](security.md#what-a-jobs-code-can-reach))"
)


def _trainer_setting(default: Any, words: str) -> Any:
    """A setting of the built-in trainer, as a field with its description."""
    return Field(default=default, description=f"the built-in trainer's {words} ([trainer.md](trainer.md#flags))")


class Job(_Strict):
    """What the cluster or TPU VM runs: the built-in trainer (``model`` and the settings after
    it), a team's Python package (``package`` and ``module``), or a container ``image``."""

    name: str = Field(
        default="train", description="letters, digits and underscores, starting with a letter, at most 128 characters"
    )
    # The built-in trainer's settings.
    model: Model = _trainer_setting(CNN, "model")
    data: str = _trainer_setting(SYNTHETIC_DATA, _DATA_WORDS)
    epochs: Epochs = _trainer_setting(EPOCHS.default, "epochs")
    batch_size_per_replica: BatchSize = _trainer_setting(BATCH_SIZE_PER_REPLICA.default, "batch size per replica")
    steps_per_epoch: Steps | None = _trainer_setting(STEPS_PER_EPOCH.default, _STEPS_WORDS)
    image_size: ImageSize = _trainer_setting(IMAGE_SIZE.default, "image size, in pixels a side")
    save_every_minutes: SaveMinutes | None = _trainer_setting(
        SAVE_EVERY_MINUTES.default,
        "backup interval, in minutes of training (a preemption redoes at most about this much); not set: 5",
    )
    # A team's own code. Checked against the files by trainstack.stackmodel.job_checks.
    package: str | None = Field(default=None, description=f"a team's Python package {_OWN_CODE}")
    module: str | None = Field(default=None, description=f"the package's module the job runs (`python -m`) {_OWN_CODE}")
    requirements: str | None = Field(default=None, description=f"the extra requirements of the package {_OWN_CODE}")
    image: str | None = Field(default=None, description="a container image ([own-code.md](own-code.md#an-image))")
    args: list[str] = Field(default_factory=list, max_length=MAX_ARGS, description=_ARGS_WORDS)
    env: dict[str, str] = Field(default_factory=dict, description=_ENV_WORDS)
    # Where the job writes, when not under jobs/<name> of the stack's bucket.
    job_dir: str | None = Field(default=None, description=_JOB_DIR_WORDS)
    buckets: JobBuckets = Field(default_factory=JobBuckets, description=_BUCKETS_WORDS)

    @property
    def mode(self) -> JobMode:
        return IMAGE_JOB if self.image is not None else PACKAGE_JOB

    @property
    def builtin(self) -> bool:
        """True when the job runs the built-in trainer, not a team's package or image."""
        return self.package is None and self.image is None

    @property
    def reserved_flags(self) -> dict[str, str]:
        """Flags the stack sets for this job's code, each with the key to use instead: every
        flag a job key sets for the built-in trainer, only the job directory for a team's code."""
        if self.builtin:
            return STACK_SET_FLAGS
        return {flag: STACK_SET_FLAGS[flag] for flag in ALWAYS_STACK_SET_FLAGS}

    @property
    def builtin_settings_set(self) -> list[str]:
        """The built-in trainer's settings the stack file names (they mean nothing to a team's code)."""
        return [key for key in BUILTIN_TRAINER_KEYS if key in self.model_fields_set]

    @field_validator("name")
    @classmethod
    def _job_name_rules(cls, name: str) -> str:
        return full_match(
            JOB_NAME,
            name,
            "a valid job name: use letters, digits and underscores, start with a letter, at most 128 characters",
        )

    @field_validator("data")
    @classmethod
    def _data_source(cls, data: str) -> str:
        return check_data_source(data)

    @field_validator("job_dir")
    @classmethod
    def _job_dir(cls, job_dir: str | None) -> str | None:
        return None if job_dir is None else check_job_dir(job_dir)

    @field_validator("package", "requirements")
    @classmethod
    def _path_text(cls, path: str | None) -> str | None:
        return None if path is None else check_path_text(path)

    @field_validator("module")
    @classmethod
    def _module_name(cls, module: str | None) -> str | None:
        what = "a Python module name (dotted identifiers, as `python -m` takes: mypackage.task)"
        return None if module is None else full_match(MODULE_NAME, module, what)

    @field_validator("image")
    @classmethod
    def _image_name(cls, image: str | None) -> str | None:
        return None if image is None else check_image_syntax(image)

    @field_validator("env", mode="before")
    @classmethod
    def _env_rules(cls, env: Any) -> Any:
        return check_job_env(env)

    @field_validator("args")
    @classmethod
    def _args_bounded(cls, args: list[str]) -> list[str]:
        return check_args(args)


class Budget(_Strict):
    """A billing budget that alerts as the stack spends."""

    billing_account: str = Field(description="the billing account's id: `012345-6789AB-CDEF01`")
    # In the billing account's own currency (the budget names none, so Google uses the account's).
    monthly_usd: Annotated[float, Field(gt=0, le=100_000_000)] = Field(
        description="the budget a month, in the billing account's own currency"
    )
    thresholds: list[Annotated[float, Field(gt=0, le=2)]] = Field(
        default_factory=lambda: [0.5, 0.9, 1.0], max_length=20, description="the fractions of the budget that alert"
    )

    @field_validator("billing_account")
    @classmethod
    def _billing_account_format(cls, account: str) -> str:
        return full_match(
            BILLING_ACCOUNT_PATTERN, account, "a billing account id: expected the form 012345-6789AB-CDEF01"
        )


class Storage(_Strict):
    # The bucket holds a user's data, checkpoints and models. By default `pulumi destroy`
    # leaves it (and its contents) in place and only forgets it; set this to true to delete it.
    delete_on_destroy: bool = Field(
        default=False, description="whether `pulumi destroy` may delete the bucket and what it holds; else it stays"
    )
    # Noncurrent object versions (overwritten checkpoints) are removed after this many days.
    noncurrent_version_days: Annotated[int, Field(ge=1, le=3650)] = Field(
        default=30, description="how many days overwritten objects are kept"
    )
    # The bucket's name, when it must not be the default `<project>_<name>`: a stack made before
    # that default keeps its bucket (`<project>-<name>`) by naming it here.
    bucket: str | None = Field(
        default=None,
        description="the bucket's name ([deploying.md](deploying.md#the-bucket)). Not set: `<project>_<name>`",
    )
    # A directory of wheels (`pip download -d DIR -r requirements-node.txt`) that `pulumi up`
    # uploads; nodes install from it, each wheel checked against its digest, instead of from
    # the package index (private nodes then need no internet access to boot).
    wheelhouse: Annotated[str, Field(min_length=1, max_length=MAX_PATH_CHARS)] | None = Field(
        default=None, description="a directory of wheels the nodes install from ([own-code.md](own-code.md#a-package))"
    )

    @field_validator("bucket")
    @classmethod
    def _bucket_name(cls, bucket: str | None) -> str | None:
        return None if bucket is None else check_bucket_name(bucket)


class Access(_Strict):
    """Teammates who may reach the stack's machines: IAP SSH through OS Login on the cluster
    VMs, and the Workbench notebook."""

    members: list[str] = Field(
        max_length=MAX_ACCESS_MEMBERS,
        description="`user:EMAIL`, `group:EMAIL` or `serviceAccount:EMAIL` ([security.md](security.md#access-for-teammates))",
    )

    @field_validator("members")
    @classmethod
    def _principals(cls, members: list[str]) -> list[str]:
        return check_principals(members)


class ExistingNetwork(_Strict):
    """A network the stack's machines join instead of one of their own: a subnetwork of the
    organisation's Shared VPC (in its host project) or of the stack's own project. The stack
    then creates no network, subnetwork, router or Cloud NAT ([deploying.md](deploying.md#inside-a-landing-zone))."""

    network: str = Field(description="`projects/HOST/global/networks/NAME`: the VPC the subnetwork belongs to")
    subnetwork: str = Field(
        description="`projects/HOST/regions/REGION/subnetworks/NAME`: where every machine goes; in `gcp:region`"
    )
    firewall: Literal["stack", "host"] = Field(
        default="stack",
        description="`stack`: the stack creates its IAP and training-port rules in the network's project; "
        "`host`: it creates none, and `plan` lists the rules the host's admins must have",
    )

    @field_validator("network")
    @classmethod
    def _network_path(cls, network: str) -> str:
        return full_match(NETWORK_PATH_PATTERN, network, "a VPC network: projects/PROJECT/global/networks/NAME")

    @field_validator("subnetwork")
    @classmethod
    def _subnetwork_path(cls, subnetwork: str) -> str:
        what = "a subnetwork: projects/PROJECT/regions/REGION/subnetworks/NAME"
        return full_match(SUBNETWORK_PATH_PATTERN, subnetwork, what)

    @model_validator(mode="after")
    def _one_project(self) -> ExistingNetwork:
        if self.host_project != self.subnetwork_project:
            raise ValueError(
                f"the subnetwork is in project {self.subnetwork_project}, the network in {self.host_project}: "
                "a subnetwork belongs to its network's project"
            )
        return self

    @property
    def subnetwork_project(self) -> str:
        return part_of(SUBNETWORK_PATH_PATTERN, self.subnetwork, "project")

    @property
    def host_project(self) -> str:
        return part_of(NETWORK_PATH_PATTERN, self.network, "project")

    @property
    def region(self) -> str:
        return part_of(SUBNETWORK_PATH_PATTERN, self.subnetwork, "region")


class Encryption(_Strict):
    """A customer-managed key (CMEK) for what the stack stores: the bucket's default key, every
    disk of the cluster and the notebook, the container registry
    ([deploying.md](deploying.md#customer-managed-encryption-keys))."""

    kms_key: str = Field(
        description="`projects/P/locations/REGION/keyRings/RING/cryptoKeys/KEY`: a Cloud KMS key in `gcp:region`"
    )
    grants: Literal["stack", "key_admins"] = Field(
        default="stack",
        description="`stack`: the stack grants the key's Encrypter/Decrypter role to the service agents that use "
        "it; `key_admins`: it grants none, and `plan` lists the grants the key's admins must make",
    )

    @field_validator("kms_key")
    @classmethod
    def _key_path(cls, kms_key: str) -> str:
        what = "a Cloud KMS key: projects/PROJECT/locations/LOCATION/keyRings/RING/cryptoKeys/KEY"
        return full_match(KMS_KEY_PATTERN, kms_key, what)

    @property
    def location(self) -> str:
        return part_of(KMS_KEY_PATTERN, self.kms_key, "location")


class Settings(_Strict):
    """The ``trainstack:`` namespace of a stack file."""

    zone: str = Field(description="the zone of every machine, in `gcp:region`")
    name: str | None = Field(
        default=None,
        description=f"prefix of every resource name: lowercase letters, digits, `-`, at most {RESOURCE_NAME_MAX} "
        "characters. Not set: the stack name",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description=f"labels on every resource: at most {MAX_USER_LABELS} of a stack's own; keys starting "
        f"`{RESERVED_LABEL_PREFIX}` are trainstack's. A change updates the VMs' labels in place; a VM's boot disk "
        "keeps the labels it was created with (the provider would replace the VM to change them)",
    )
    cluster: Cluster | None = Field(default=None, description="VMs that train: a chief, workers and parameter servers")
    tpu: Tpu | None = Field(default=None, description="a TPU VM that trains")
    notebook: Notebook | None = Field(default=None, description="a Vertex AI Workbench instance")
    # None (omitted, or `job: none`): the machines boot ready and start no trainer.
    job: Job | None = Field(
        default=None,
        description="what the cluster or TPU VM runs: the built-in trainer (`model` and the settings after it), a "
        "team's Python package (`package` and `module`), or a container `image`. Not set, or `job: none`: no job, "
        "the machines boot ready ([below](#a-cluster-without-a-job))",
    )
    budget: Budget | None = Field(default=None, description="a billing budget that alerts as the stack spends")
    storage: Storage = Field(default_factory=Storage, description="the stack's bucket")
    access: Access | None = Field(default=None, description="teammates who may reach the machines")
    network: ExistingNetwork | None = Field(
        default=None,
        description="a network to join (a Shared VPC's subnetwork) instead of one the stack creates",
    )
    encryption: Encryption | None = Field(
        default=None,
        description="a customer-managed key for the bucket, the disks and the registry; not set: Google's keys",
    )
    # Tokens the job needs (an experiment-tracking key): stored in Secret Manager by the
    # program, readable by the training accounts alone, fetched by the boot script at run time.
    secrets: dict[str, JobSecret] = Field(
        default_factory=dict,
        description="values the job's code reads from its environment: set with `pulumi config set --path --secret "
        "'trainstack:secrets.NAME' VALUE`, never in clear text ([security.md](security.md#secrets-a-job-needs))",
    )

    @field_validator("secrets")
    @classmethod
    def _secret_names(cls, secrets: dict[str, JobSecret]) -> dict[str, JobSecret]:
        return check_secret_names(secrets)

    @model_validator(mode="after")
    def _secrets_need_a_job(self) -> Settings:
        check_secrets_have_a_job(self)
        return self

    @model_validator(mode="after")
    def _env_apart_from_secrets(self) -> Settings:
        check_env_apart_from_secrets(self)
        return self

    @field_validator("job", mode="before")
    @classmethod
    def _no_job(cls, job: Any) -> Any:
        return None if job == NO_JOB else job

    @field_validator("zone")
    @classmethod
    def _zone_name(cls, zone: str) -> str:
        return full_match(ZONE_PATTERN, zone, "a zone name: zones look like us-central1-a")

    @field_validator("name")
    @classmethod
    def _resource_name(cls, name: str | None) -> str | None:
        what = f"a valid name: lowercase letters, digits and hyphens, starting with a letter, at most {RESOURCE_NAME_MAX} characters"
        return None if name is None else full_match(RESOURCE_NAME_PATTERN, name, what)

    @field_validator("labels")
    @classmethod
    def _label_rules(cls, labels: dict[str, str]) -> dict[str, str]:
        return check_labels(labels)


class StackConfig(BaseModel):
    """Everything the Pulumi program needs, validated."""

    model_config = ConfigDict(frozen=True)

    stack: str
    project: str = Field(description="the Google Cloud project")
    region: str = Field(description="the region; the zone must be inside it")
    settings: Settings

    @property
    def name(self) -> str:
        """Prefix of every cloud resource name of this stack."""
        return self.settings.name or default_resource_name(self.stack)

    @property
    def labels(self) -> dict[str, str]:
        return {**self.settings.labels, STACK_LABEL: default_resource_name(self.stack)}

    @property
    def bucket_name(self) -> str:
        """The stack's bucket: storage.bucket, else ``<project>_<name>``."""
        return self.settings.storage.bucket or default_bucket_name(self.project, self.name)
