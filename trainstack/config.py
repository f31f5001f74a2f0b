"""Typed stack configuration: the one place raw stack-file values are read.

A stack file (``stacks/Pulumi.<stack>.yaml``) is parsed once into :class:`StackConfig`.
Structure and value ranges are checked here by pydantic (unknown keys are errors, so a
typo never falls back to a default); cloud facts (which GPU fits which machine, which zone
offers what) are checked afterwards by :mod:`trainstack.rules` against the catalog.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trainstack.errors import Problem, StackConfigError

NAMESPACE = "trainstack"

Strategy = Literal["auto", "one_device", "mirrored", "multi_worker_mirrored", "parameter_server"]
OnFinish = Literal["stop", "delete", "keep"]
Model = Literal["cnn", "resnet50"]

# Seeds 003: job names are letters, digits and underscores, start with a letter, at most 128 characters.
JOB_NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,127}$")
# Resource names derive from the stack name (VMs, bucket, service account id "<name>-train"),
# so it must be a lowercase RFC 1035 label short enough that the longest derived name fits:
# service account ids are limited to 30 characters.
RESOURCE_NAME_PATTERN = re.compile(r"^[a-z]([-a-z0-9]{0,22}[a-z0-9])?$")
LABEL_KEY_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE_PATTERN = re.compile(r"^[a-z0-9_-]{0,63}$")
PROJECT_ID_PATTERN = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
BILLING_ACCOUNT_PATTERN = re.compile(r"^[0-9A-F]{6}-[0-9A-F]{6}-[0-9A-F]{6}$")
PRIMITIVE_ROLES = frozenset({"roles/owner", "roles/editor", "roles/viewer"})

PositiveInt = Annotated[int, Field(gt=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Accelerator(_Strict):
    type: str
    count: PositiveInt


class NodeSpec(_Strict):
    """One VM shape: the chief, or each VM of a pool."""

    machine_type: str
    accelerator: Accelerator | None = None
    spot: bool = False
    disk_gb: Annotated[int, Field(ge=50, le=65536)] = 200


class WorkerPool(NodeSpec):
    # Every node takes an address of the stack's /20 subnet (4092 usable).
    count: Annotated[int, Field(ge=0, le=3790)]


class ParameterServerPool(_Strict):
    """Parameter servers hold variables on CPU and RAM; they take no accelerator."""

    count: Annotated[int, Field(ge=0, le=200)]
    machine_type: str
    spot: bool = False
    disk_gb: Annotated[int, Field(ge=50, le=65536)] = 100


class Cluster(_Strict):
    chief: NodeSpec
    workers: WorkerPool | None = None
    parameter_servers: ParameterServerPool | None = None
    strategy: Strategy = "auto"
    # A hard cap on billing if a job hangs: Compute Engine stops (or deletes) the VM after this long.
    # Compute Engine accepts run-time limits from 30 seconds up to 120 days.
    max_run_hours: Annotated[float, Field(ge=0.01, le=24 * 120)] = 24
    on_finish: OnFinish = "stop"
    # TF_CONFIG port on every node; the firewall opens exactly this port between cluster nodes.
    port: Annotated[int, Field(ge=1024, le=65535)] = 2222

    @property
    def worker_count(self) -> int:
        return self.workers.count if self.workers else 0

    @property
    def ps_count(self) -> int:
        return self.parameter_servers.count if self.parameter_servers else 0


class Tpu(_Strict):
    accelerator_type: str
    runtime_version: str
    spot: bool = False
    on_finish: OnFinish = "stop"
    # Seed 001 grants the Cloud TPU service agent this role; on TPU VMs data access goes
    # through the VM's own service account, so a user may choose roles/tpu.serviceAgent instead.
    service_agent_role: str = "roles/ml.serviceAgent"

    @field_validator("service_agent_role")
    @classmethod
    def _no_primitive_role(cls, role: str) -> str:
        if role in PRIMITIVE_ROLES:
            raise ValueError(f"primitive role {role} is not allowed; use a predefined role such as roles/ml.serviceAgent")
        if not role.startswith("roles/"):
            raise ValueError(f"{role!r} is not a role name; it should start with 'roles/'")
        return role


class Notebook(_Strict):
    machine_type: str
    accelerator: Accelerator | None = None
    idle_timeout_minutes: Annotated[int, Field(ge=10, le=10080)] = 180
    disk_gb: Annotated[int, Field(ge=150, le=65536)] = 150


class Job(_Strict):
    name: str = "train"
    model: Model = "cnn"
    data: str = "synthetic"
    epochs: PositiveInt = 10
    batch_size_per_replica: PositiveInt = 32
    steps_per_epoch: PositiveInt | None = None
    image_size: Annotated[int, Field(ge=16, le=1024)] = 180
    args: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _job_name_rules(cls, name: str) -> str:
        if not JOB_NAME_PATTERN.match(name):
            raise ValueError(
                f"{name!r} is not a valid job name: use letters, digits and underscores, "
                "start with a letter, at most 128 characters"
            )
        return name

    @field_validator("data")
    @classmethod
    def _data_source(cls, data: str) -> str:
        if data != "synthetic" and not data.startswith("gs://"):
            raise ValueError(f"{data!r} is not a data source: use 'synthetic' or a gs:// path readable by the training service account")
        return data


class Budget(_Strict):
    billing_account: str
    monthly_usd: Annotated[float, Field(gt=0)]
    thresholds: list[Annotated[float, Field(gt=0, le=2)]] = Field(default_factory=lambda: [0.5, 0.9, 1.0])

    @field_validator("billing_account")
    @classmethod
    def _billing_account_format(cls, account: str) -> str:
        if not BILLING_ACCOUNT_PATTERN.match(account):
            raise ValueError(f"{account!r} is not a billing account id: expected the form 012345-6789AB-CDEF01")
        return account


class Storage(_Strict):
    # The bucket holds a user's data, checkpoints and models. By default `pulumi destroy`
    # leaves it (and its contents) in place and only forgets it; set this to true to delete it.
    delete_on_destroy: bool = False
    # Noncurrent object versions (overwritten checkpoints) are removed after this many days.
    noncurrent_version_days: Annotated[int, Field(ge=1, le=3650)] = 30


class Settings(_Strict):
    """The ``trainstack:`` namespace of a stack file."""

    zone: str
    name: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    cluster: Cluster | None = None
    tpu: Tpu | None = None
    notebook: Notebook | None = None
    job: Job = Field(default_factory=Job)
    budget: Budget | None = None
    storage: Storage = Field(default_factory=Storage)

    @field_validator("name")
    @classmethod
    def _resource_name(cls, name: str | None) -> str | None:
        if name is not None and not RESOURCE_NAME_PATTERN.match(name):
            raise ValueError(
                f"{name!r} is not a valid name: lowercase letters, digits and hyphens, "
                "starting with a letter, at most 24 characters"
            )
        return name

    @field_validator("labels")
    @classmethod
    def _label_rules(cls, labels: dict[str, str]) -> dict[str, str]:
        for key, value in labels.items():
            if not LABEL_KEY_PATTERN.match(key):
                raise ValueError(f"label key {key!r}: lowercase letters, digits, '_' and '-', starting with a letter, at most 63 characters")
            if not LABEL_VALUE_PATTERN.match(value):
                raise ValueError(f"label {key}={value!r}: values are lowercase letters, digits, '_' and '-', at most 63 characters")
        return labels


class StackConfig(BaseModel):
    """Everything the Pulumi program needs, validated."""

    model_config = ConfigDict(frozen=True)

    stack: str
    project: str
    region: str
    settings: Settings

    @property
    def name(self) -> str:
        """Prefix of every cloud resource name of this stack."""
        return self.settings.name or default_resource_name(self.stack)

    @property
    def labels(self) -> dict[str, str]:
        return {**self.settings.labels, "trainstack-stack": default_resource_name(self.stack)}


def default_resource_name(stack: str) -> str:
    """Lowercase the stack name into a valid resource-name prefix ("Team_A" -> "team-a")."""
    name = re.sub(r"[^a-z0-9-]+", "-", stack.lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"ts-{name}".rstrip("-")
    return name[:24].rstrip("-")


def decode_config_value(value: Any) -> Any:
    """Pulumi hands config values to the program as strings; objects and numbers arrive as JSON text."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _key_for(loc: tuple[int | str, ...]) -> str:
    if not loc:
        return f"{NAMESPACE}:"
    head, *rest = loc
    path = f"{NAMESPACE}:{head}"
    for part in rest:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _valid_keys(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The field names allowed at ``loc`` (for the 'unknown key' message)."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part) if isinstance(current, type) and issubclass(current, BaseModel) else None
        if field is None:
            return []
        annotation = field.annotation
        candidates = getattr(annotation, "__args__", (annotation,))
        current = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if current is None:
            return []
    if isinstance(current, type) and issubclass(current, BaseModel):
        return sorted(current.model_fields)
    return []


def problems_from_validation_error(error: ValidationError) -> list[Problem]:
    problems = []
    for detail in error.errors():
        loc = tuple(detail["loc"])
        kind = detail["type"]
        if kind == "extra_forbidden":
            valid = _valid_keys(Settings, loc)
            message = f"unknown key; valid keys here: {', '.join(valid)}" if valid else "unknown key"
        elif kind == "missing":
            message = "required key is missing"
        else:
            message = str(detail["msg"]).removeprefix("Value error, ")
            if "input" in detail and kind not in {"model_type", "dict_type"}:
                message = f"{message} (got {detail['input']!r})"
        problems.append(Problem(_key_for(loc), message))
    return problems


STACK_FILE_TOP_LEVEL_KEYS = frozenset({"config", "secretsprovider", "encryptedkey", "encryptionsalt", "environment"})


def parse_stack_config(stack: str, config: Mapping[str, Any]) -> StackConfig:
    """Turn the ``config:`` mapping of a stack file into a :class:`StackConfig`.

    ``config`` keys are namespaced (``gcp:project``, ``trainstack:cluster``); values may be
    already-decoded YAML or the JSON strings Pulumi passes to a running program.
    Raises :class:`StackConfigError` listing every problem found.
    """
    problems: list[Problem] = []
    settings_raw: dict[str, Any] = {}
    for key, value in config.items():
        if not isinstance(key, str) or ":" not in key:
            problems.append(Problem(str(key), "config keys are namespaced, e.g. 'trainstack:zone' or 'gcp:project'"))
            continue
        namespace, _, name = key.partition(":")
        if namespace == NAMESPACE:
            settings_raw[name] = decode_config_value(value)

    project = config.get("gcp:project")
    region = config.get("gcp:region")
    if not isinstance(project, str) or not PROJECT_ID_PATTERN.match(project):
        problems.append(Problem("gcp:project", f"a Google Cloud project id is required (6-30 lowercase letters, digits, hyphens), got {project!r}"))
    if not isinstance(region, str) or not re.match(r"^[a-z]+-[a-z]+[0-9]+$", region):
        problems.append(Problem("gcp:region", f"a region such as us-central1 is required, got {region!r}"))

    settings: Settings | None = None
    try:
        settings = Settings.model_validate(settings_raw)
    except ValidationError as error:
        problems.extend(problems_from_validation_error(error))

    if settings is not None and not (settings.cluster or settings.tpu or settings.notebook):
        problems.append(Problem(f"{NAMESPACE}:cluster", "a stack needs at least one of trainstack:cluster, trainstack:tpu, trainstack:notebook"))
    if problems or settings is None:
        raise StackConfigError(problems)
    assert isinstance(project, str) and isinstance(region, str)
    return StackConfig(stack=stack, project=project, region=region, settings=settings)
