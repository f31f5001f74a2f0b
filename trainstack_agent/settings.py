"""Instance metadata read once into typed settings; every value matched whole.

The Pulumi program writes these values (``trainstack.cloud.bootscripts.node_metadata``), but a node
treats them as input: each is matched against a full pattern and a bound before any of it
reaches a path, a process or an API call. A value that does not match ends the boot
(:class:`SettingsError` names the key): a node that cannot tell what to do must stop billing,
not guess.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from trainstack_agent.metadata import Metadata
from trainstack_contract import (
    CAPACITIES,
    CLUSTER_NODE_KIND,
    CODE_INSTALLS,
    EXTERNAL_JOB_DIR,
    FLEX_START,
    IMAGE_JOB,
    JOB_MODES,
    LAYOUT,
    MAX_JOB_ENV,
    MAX_JOB_ENV_CHARS,
    METADATA_KEYS,
    NO_JOB,
    NODE_KINDS,
    PACKAGE_JOB,
    PATH_INSTALL,
    PS,
    ROLES,
    TPU_NODE,
    TPU_NODE_KIND,
    job_env_problem,
)
from trainstack_contract.metadata import (
    MAX_IDLE_MINUTES,
    MAX_JOB_ARGS,
    MAX_RESTARTS,
    MAX_RUN_SECONDS,
    ON_FINISH_CHOICES,
)
from trainstack_contract.names import JOB_NAME, MODULE_NAME, NODE_INSTANCE_LIST, NODE_LIST, NODE_NAME, SHA256
from trainstack_contract.tf_config import TfConfigError, check_task, read_cluster, tf_config

KEYS: Final = METADATA_KEYS
_WHOLE: Final = re.compile(r"[0-9]{1,9}")
# gs://BUCKET (Cloud Storage's bucket names), or an absolute local path in `trainstack local`
# (any printable path: it is only ever used as a path, never by a shell).
_BUCKET: Final = re.compile(r"gs://[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]|/[^\x00-\x1f\x7f]{1,4000}")
_LOCAL_PATH: Final = re.compile(r"(/[^\x00-\x1f\x7f/]{1,255}){1,64}")
_CODE_ARCHIVE: Final = re.compile(re.escape(LAYOUT.code_dir) + r"/[A-Za-z0-9_][A-Za-z0-9_.-]{0,150}\.zip")
_REQUIREMENTS: Final = re.compile(re.escape(LAYOUT.code_dir) + r"/requirements-[0-9a-f]{16}\.txt")
_WHEELHOUSE: Final = re.compile(re.escape(LAYOUT.wheelhouse) + r"/manifest-[0-9a-f]{16}\.json")
_PYTHON_LOCK: Final = re.compile(re.escape(LAYOUT.python_dir) + r"/lock-[0-9a-f]{16}\.txt")
_IMAGE: Final = re.compile(r"[a-z0-9.-]{1,253}/[A-Za-z0-9._/:@-]{1,1000}")
_SECRETS: Final = re.compile(
    r"[A-Z][A-Z0-9_]{0,99}=[A-Za-z0-9_-]{1,255}( [A-Z][A-Z0-9_]{0,99}=[A-Za-z0-9_-]{1,255}){0,19}"
)
_PROJECT_KEY: Final = re.compile(r"[A-Za-z0-9_-]{1,128}")
MAX_TRAINER_ARGS: Final = MAX_JOB_ARGS
MAX_TRAINER_ARGS_CHARS: Final = 64 * 1024
# How long a node with an empty job queue waits before on_finish: at most a week, as the
# stack file's idle_minutes.
MAX_IDLE_SECONDS: Final = MAX_IDLE_MINUTES * 60


class SettingsError(ValueError):
    """A metadata value that is missing or does not match; the message names the key."""


@dataclass(frozen=True)
class Artifact:
    """An object in the stack's bucket that the node runs or installs, and its pinned sha256."""

    uri: str
    sha256: str

    @property
    def name(self) -> str:
        return self.uri.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class JobSettings:
    mode: str
    job_dir: str
    trainer_args: tuple[str, ...]
    # A package job: its archive, module and extra requirements.
    code: Artifact | None = None
    module: str | None = None
    requirements: Artifact | None = None
    # CODE_INSTALLS: on PYTHONPATH, or installed with pip as a project.
    install: str = PATH_INSTALL
    # An image job.
    image: str | None = None
    # (ENV_NAME, SECRET_ID) pairs.
    secrets: tuple[tuple[str, str], ...] = ()
    # (NAME, VALUE) pairs of job.env: the job's code runs with them.
    env: tuple[tuple[str, str], ...] = ()
    # The built-in trainer's job (metadata trainstack-warm-start): on a standing node it may
    # start in a warm interpreter (trainstack_agent.warm).
    warm_start: bool = False


@dataclass(frozen=True)
class PythonSettings:
    """The environment the job's code runs in: its hash-locked requirements, and where from."""

    lock: Artifact | None
    system_site_packages: bool
    wheelhouse: Artifact | None = None


@dataclass(frozen=True)
class NodeSettings:
    kind: str
    node: str
    role: str
    index: int
    bucket: str
    on_finish: str
    heartbeat_seconds: int
    peer_timeout_seconds: int
    gpu_count: int
    python: PythonSettings
    # None: a node without a job (it boots ready and starts nothing).
    job: JobSettings | None
    # TF_CONFIG for this node, when it is part of a multi-machine cluster.
    tf_config: str | None = None
    # Every node of the cluster, this one included (empty for a single machine).
    peers: tuple[str, ...] = ()
    max_restarts: int = 0
    # The chief's only: (node, instance) of the Spot peers it starts again after a preemption.
    recover: tuple[tuple[str, str], ...] = ()
    # A TPU VM's only: its node name for the TPU API. Its run-time cap, which a flex-start
    # cluster node also has (its run duration).
    tpu_name: str | None = None
    max_run_seconds: int | None = None
    # Seconds with an empty job queue before on_finish; None: this node runs no queue (its own
    # job, if any, then on_finish, as before the queue).
    idle_seconds: int | None = None
    # How the node got its machine (CAPACITIES) where its metadata says: flex_start or
    # reservation; None on an on-demand or Spot node, whose metadata names none. A flex-start
    # node also reads max_run_seconds, its run duration (trainstack_agent.runend).
    capacity: str | None = None

    @property
    def is_chief(self) -> bool:
        return self.role == "chief"

    @property
    def other_nodes(self) -> tuple[str, ...]:
        return tuple(peer for peer in self.peers if peer != self.node)

    @property
    def synchronous(self) -> bool:
        """A cluster without parameter servers trains in lockstep (MultiWorkerMirroredStrategy
        is TensorFlow's only multi-machine strategy without them): every step needs every node."""
        return len(self.peers) > 1 and not any(peer.startswith(f"{PS}-") for peer in self.peers)


def _match(key: str, value: str, pattern: re.Pattern[str], what: str) -> str:
    if pattern.fullmatch(value) is None:
        raise SettingsError(f"metadata {key} is not {what}")
    return value


def _whole(key: str, value: str, low: int, high: int) -> int:
    _match(key, value, _WHOLE, "a whole number")
    number = int(value)
    if not low <= number <= high:
        raise SettingsError(f"metadata {key} must be from {low} to {high}")
    return number


def _choice(key: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise SettingsError(f"metadata {key} must be one of {', '.join(choices)}")
    return value


class _Attributes(Protocol):
    """Where a node's values come from: instance metadata, or a queued job's spec."""

    def attribute(self, key: str) -> str | None: ...

    def project_attribute(self, key: str) -> str | None: ...


class _SpecValues:
    """A queued job's spec read as instance attributes are (it has no project attributes)."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self.values = values

    def attribute(self, key: str) -> str | None:
        return self.values.get(key)

    def project_attribute(self, key: str) -> str | None:
        return None


class _Reader:
    """Instance attributes by key: required ones raise when absent or empty."""

    def __init__(self, metadata: _Attributes) -> None:
        self.metadata = metadata

    def optional(self, key: str) -> str | None:
        value = self.metadata.attribute(key)
        return value if value else None

    def required(self, key: str) -> str:
        value = self.metadata.attribute(key)
        if not value:
            raise SettingsError(f"required metadata {key} is missing")
        return value

    def artifact(self, key: str, digest_key: str, bucket: str, pattern: re.Pattern[str], what: str) -> Artifact:
        name = _match(key, self.required(key), pattern, what)
        digest = _match(digest_key, self.required(digest_key), SHA256, "a sha256 in hex")
        return Artifact(f"{bucket}/{name}", digest)


def _trainer_args(text: str) -> tuple[str, ...]:
    key = KEYS.trainer_args
    if len(text) > MAX_TRAINER_ARGS_CHARS:
        raise SettingsError(f"metadata {key} is longer than {MAX_TRAINER_ARGS_CHARS} characters")
    try:
        args = json.loads(text)
    except ValueError:
        raise SettingsError(f"metadata {key} is not a JSON list of strings") from None
    if (
        not isinstance(args, list)
        or len(args) > MAX_TRAINER_ARGS
        or not all(isinstance(arg, str) and "\0" not in arg for arg in args)
    ):
        raise SettingsError(f"metadata {key} is not a JSON list of at most {MAX_TRAINER_ARGS} strings")
    return tuple(args)


def _python(reader: _Reader, bucket: str) -> PythonSettings:
    lock = None
    if reader.optional(KEYS.python_lock) is not None:
        lock = reader.artifact(KEYS.python_lock, KEYS.python_lock_sha256, bucket, _PYTHON_LOCK, "a lock object")
    system = _choice(
        KEYS.system_site_packages, reader.optional(KEYS.system_site_packages) or "false", ("true", "false")
    )
    wheelhouse = None
    if reader.optional(KEYS.wheelhouse) is not None:
        wheelhouse = reader.artifact(
            KEYS.wheelhouse, KEYS.wheelhouse_sha256, bucket, _WHEELHOUSE, "a wheelhouse manifest object"
        )
    return PythonSettings(lock, system == "true", wheelhouse)


def _job_env(reader: _Reader) -> tuple[tuple[str, str], ...]:
    """job.env: a JSON object of names and text values, each one a job may have."""
    key = KEYS.job_env
    text = reader.optional(key)
    if text is None:
        return ()
    if len(text) > MAX_JOB_ENV_CHARS:
        raise SettingsError(f"metadata {key} is longer than {MAX_JOB_ENV_CHARS} characters")
    try:
        env = json.loads(text)
    except ValueError:
        env = None
    if not isinstance(env, dict) or len(env) > MAX_JOB_ENV:
        raise SettingsError(f"metadata {key} is not a JSON object of at most {MAX_JOB_ENV} names and text values")
    for name, value in env.items():
        problem = job_env_problem(name, value)
        if problem is not None:
            raise SettingsError(f"metadata {key}: {problem}")
    return tuple(env.items())


def is_job_dir(job_dir: str, bucket: str) -> bool:
    """jobs/<name> of the stack's bucket, or a folder of a team's own bucket (job.job_dir);
    in `trainstack local` (a bucket that is a directory), the directory standing in for it."""
    prefix = f"{bucket}/{LAYOUT.jobs}/"
    if job_dir.startswith(prefix) and JOB_NAME.fullmatch(job_dir[len(prefix) :]) is not None:
        return True
    if EXTERNAL_JOB_DIR.fullmatch(job_dir) is not None:
        return True
    return (
        bucket.startswith("/")
        and _LOCAL_PATH.fullmatch(job_dir) is not None
        and not ({".", ".."} & set(job_dir.split("/")))
    )


def _job(reader: _Reader, bucket: str) -> JobSettings | None:
    mode = _choice(KEYS.job_mode, reader.required(KEYS.job_mode), JOB_MODES)
    if mode == NO_JOB:
        return None
    job_dir = reader.required(KEYS.job_dir)
    if not is_job_dir(job_dir, bucket):
        raise SettingsError(
            f"metadata {KEYS.job_dir} is neither a job directory of the bucket {bucket} nor gs://BUCKET/PREFIX"
        )
    args = _trainer_args(reader.required(KEYS.trainer_args))
    secrets_text = reader.optional(KEYS.secrets)
    secrets: tuple[tuple[str, str], ...] = ()
    if secrets_text is not None:
        _match(KEYS.secrets, secrets_text, _SECRETS, "a list of NAME=SECRET_ID")
        secrets = tuple((pair.split("=", 1)[0], pair.split("=", 1)[1]) for pair in secrets_text.split(" "))
    env = _job_env(reader)
    if mode == PACKAGE_JOB:
        code = reader.artifact(KEYS.code_archive, KEYS.code_archive_sha256, bucket, _CODE_ARCHIVE, "a code archive")
        module = _match(KEYS.module, reader.required(KEYS.module), MODULE_NAME, "a Python module name")
        requirements = None
        if reader.optional(KEYS.requirements) is not None:
            requirements = reader.artifact(
                KEYS.requirements, KEYS.requirements_sha256, bucket, _REQUIREMENTS, "a requirements object"
            )
        install = _choice(KEYS.code_install, reader.optional(KEYS.code_install) or PATH_INSTALL, CODE_INSTALLS)
        warm = _choice(KEYS.warm_start, reader.optional(KEYS.warm_start) or "false", ("true", "false"))
        return JobSettings(
            mode,
            job_dir,
            args,
            code=code,
            module=module,
            requirements=requirements,
            install=install,
            secrets=secrets,
            env=env,
            warm_start=warm == "true" and requirements is None and install == PATH_INSTALL,
        )
    assert mode == IMAGE_JOB
    image = _match(KEYS.image, reader.required(KEYS.image), _IMAGE, "an image name")
    return JobSettings(mode, job_dir, args, image=image, secrets=secrets, env=env)


def job_from_spec(values: Mapping[str, str], bucket: str, job_dir: str) -> JobSettings:
    """A queued job's settings from its spec's values (``trainstack_contract.queue.read_spec``),
    checked by the same code as the stack's own job in instance metadata, with the job
    directory the queue gives it; SettingsError names the first bad key."""
    job = _job(_Reader(_SpecValues({**values, KEYS.job_dir: job_dir})), bucket)
    if job is None:
        raise SettingsError(f"metadata {KEYS.job_mode} of a queued job must name a job, not {NO_JOB}")
    return job


def _idle_seconds(reader: _Reader) -> int | None:
    text = reader.optional(KEYS.idle_seconds)
    return None if text is None else _whole(KEYS.idle_seconds, text, 0, MAX_IDLE_SECONDS)


def _tf_config(reader: _Reader, role: str, index: int) -> str | None:
    key = reader.optional(KEYS.cluster_key)
    if key is None:
        return None
    _match(KEYS.cluster_key, key, _PROJECT_KEY, "a project metadata key")
    text = reader.metadata.project_attribute(key)
    if not text:
        raise SettingsError(f"project metadata {key} (the TF_CONFIG cluster) is missing")
    try:
        cluster = read_cluster(json.loads(text))
    except ValueError:
        raise SettingsError(f"project metadata {key} is not a TF_CONFIG cluster") from None
    try:
        check_task(cluster, role, index)
    except TfConfigError:
        raise SettingsError(f"project metadata {key} is not a TF_CONFIG cluster with task {role} {index}") from None
    # One function builds TF_CONFIG for the Pulumi side, the local runs and this agent.
    return tf_config(cluster, role, index)


def read_settings(metadata: Metadata) -> NodeSettings:
    """Every setting of this node, checked; SettingsError names the first bad key."""
    reader = _Reader(metadata)
    kind = _choice(KEYS.node_kind, reader.required(KEYS.node_kind), NODE_KINDS)
    bucket = _match(KEYS.bucket, reader.required(KEYS.bucket), _BUCKET, "a gs:// bucket")
    on_finish = _choice(KEYS.on_finish, reader.required(KEYS.on_finish), ON_FINISH_CHOICES)
    gpu_count = _whole(KEYS.gpu_count, reader.optional(KEYS.gpu_count) or "0", 0, 64)
    python = _python(reader, bucket)
    job = _job(reader, bucket)
    idle_seconds = _idle_seconds(reader)
    capacity_text = reader.optional(KEYS.capacity)
    capacity = None if capacity_text is None else _choice(KEYS.capacity, capacity_text, CAPACITIES)
    if kind == TPU_NODE_KIND:
        return NodeSettings(
            kind=kind,
            node=TPU_NODE,
            role="chief",
            index=0,
            bucket=bucket,
            on_finish=on_finish,
            # A single TPU VM has no peers: its heartbeat only tells a reader it is alive.
            heartbeat_seconds=60,
            peer_timeout_seconds=0,
            gpu_count=gpu_count,
            python=python,
            job=job,
            tpu_name=_match(KEYS.tpu_name, reader.required(KEYS.tpu_name), NODE_NAME, "a TPU node name"),
            max_run_seconds=_whole(KEYS.max_run_seconds, reader.required(KEYS.max_run_seconds), 1, MAX_RUN_SECONDS),
            idle_seconds=idle_seconds,
            capacity=capacity,
        )
    assert kind == CLUSTER_NODE_KIND
    role = _choice(KEYS.role, reader.required(KEYS.role), ROLES)
    index = _whole(KEYS.index, reader.required(KEYS.index), 0, 4095)
    node = _match(KEYS.node_name, reader.required(KEYS.node_name), NODE_NAME, "a node name")
    peers_text = reader.optional(KEYS.peers)
    peers = tuple(_match(KEYS.peers, peers_text, NODE_LIST, "a list of node names").split(" ")) if peers_text else ()
    if peers and node not in peers:
        raise SettingsError(f"metadata {KEYS.peers} does not name this node ({node})")
    recover_text = reader.optional(KEYS.recover)
    recover: tuple[tuple[str, str], ...] = ()
    if recover_text is not None:
        if role != "chief":
            raise SettingsError(f"metadata {KEYS.recover} is set on a node that is not the chief")
        _match(KEYS.recover, recover_text, NODE_INSTANCE_LIST, "a list of NODE=INSTANCE")
        recover = tuple((pair.split("=")[0], pair.split("=")[1]) for pair in recover_text.split(" "))
        if not all(name in peers and name != node for name, _ in recover):
            raise SettingsError(f"metadata {KEYS.recover} names a node that is not a peer")
    return NodeSettings(
        kind=kind,
        node=node,
        role=role,
        index=index,
        bucket=bucket,
        on_finish=on_finish,
        heartbeat_seconds=_whole(KEYS.heartbeat_seconds, reader.required(KEYS.heartbeat_seconds), 1, 3600),
        peer_timeout_seconds=_whole(KEYS.peer_timeout_seconds, reader.required(KEYS.peer_timeout_seconds), 1, 86400),
        gpu_count=gpu_count,
        python=python,
        job=job,
        tf_config=_tf_config(reader, role, index),
        peers=peers,
        max_restarts=_whole(KEYS.max_restarts, reader.optional(KEYS.max_restarts) or "0", 0, MAX_RESTARTS),
        recover=recover,
        idle_seconds=idle_seconds,
        capacity=capacity,
        max_run_seconds=_flex_start_run(reader, capacity),
    )


def _flex_start_run(reader: _Reader, capacity: str | None) -> int | None:
    """A flex-start cluster node's run duration (the agent ends its work before it is deleted);
    None on any other cluster node, whose run-time cap is Compute Engine's alone."""
    text = reader.optional(KEYS.max_run_seconds)
    if capacity != FLEX_START:
        if text is not None:
            raise SettingsError(f"metadata {KEYS.max_run_seconds} is set on a cluster node that is not flex-start")
        return None
    if text is None:
        raise SettingsError(
            f"metadata {KEYS.max_run_seconds} is missing: a flex-start node must know when its run ends"
        )
    return _whole(KEYS.max_run_seconds, text, 1, MAX_RUN_SECONDS)


def known_identity(metadata: Metadata) -> tuple[str | None, str | None]:
    """The node name and job directory, read without checking anything else: what a boot that
    failed on its settings can still use to record FAILED. (None, None) when unreadable."""
    try:
        kind = metadata.attribute(KEYS.node_kind)
        node = TPU_NODE if kind == TPU_NODE_KIND else metadata.attribute(KEYS.node_name)
        bucket = metadata.attribute(KEYS.bucket)
        job_dir = metadata.attribute(KEYS.job_dir)
    except Exception:  # noqa: BLE001 - any failure here only means "unknown"
        return None, None
    if not (node and NODE_NAME.fullmatch(node) and bucket and _BUCKET.fullmatch(bucket) and job_dir):
        return None, None
    prefix = f"{bucket}/{LAYOUT.jobs}/"
    if not job_dir.startswith(prefix) or JOB_NAME.fullmatch(job_dir[len(prefix) :]) is None:
        return None, None
    return node, job_dir
