"""Instance metadata: what the program writes into a node's metadata and the node reads back.

One typed model, :class:`NodeMetadata`, holds a node's metadata: the program builds one and
writes its :meth:`~NodeMetadata.to_metadata`; the node agent reads
:meth:`~NodeMetadata.from_metadata`, which matches every value whole against its pattern and
bound before any of it reaches a path, a process or an API call, and raises
:class:`NodeMetadataError` naming the first key that is missing or does not match. The key
names are written here and nowhere else.

Standard library only, Python 3.10.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Final, Literal, Protocol, get_args

from trainstack_contract.jobaccess import places_from_json, places_json
from trainstack_contract.jobenv import MAX_JOB_ENV, MAX_JOB_ENV_CHARS, job_env_problem
from trainstack_contract.layout import EXTERNAL_JOB_DIR, LAYOUT
from trainstack_contract.names import (
    CHIEF,
    GCS_BUCKET_NAME,
    JOB_NAME,
    MAX_NODES,
    MODULE_NAME,
    NODE_INSTANCE_LIST,
    NODE_LIST,
    NODE_NAME,
    ROLES,
    SHA256,
)


@dataclass(frozen=True)
class MetadataKeys:
    """The instance metadata keys the boot scripts and the node agent read."""

    # The node agent's archive (a gs:// URI, or a path in `trainstack local`) and its sha256:
    # all a boot script reads.
    agent: str = "trainstack-agent"
    agent_sha256: str = "trainstack-agent-sha256"
    # What kind of machine the agent runs on (NODE_KINDS): how it releases itself.
    node_kind: str = "trainstack-node-kind"
    # The TPU node's own name (a TPU VM's host name is not the node's).
    tpu_name: str = "trainstack-tpu-name"
    role: str = "trainstack-role"
    index: str = "trainstack-index"
    node_name: str = "trainstack-node-name"
    # Names the project attribute that holds the TF_CONFIG cluster.
    cluster_key: str = "trainstack-cluster-key"
    job_dir: str = "trainstack-job-dir"
    bucket: str = "trainstack-bucket"
    trainer_args: str = "trainstack-trainer-args"
    on_finish: str = "trainstack-on-finish"
    # How often the chief refreshes its heartbeat, and the others look at it.
    heartbeat_seconds: str = "trainstack-heartbeat-seconds"
    # How long the others wait for a new heartbeat before taking the chief for dead.
    peer_timeout_seconds: str = "trainstack-peer-timeout-seconds"
    # The TPU VM's run-time cap (Compute Engine's max_run_duration has no TPU equivalent).
    max_run_seconds: str = "trainstack-max-run-seconds"
    # What the node runs (JOB_MODES), and with what: a package's archive object and module
    # (with its extra requirements object, if any), or a container image.
    job_mode: str = "trainstack-job-mode"
    code_archive: str = "trainstack-code-archive"
    code_archive_sha256: str = "trainstack-code-archive-sha256"
    module: str = "trainstack-module"
    # CODE_INSTALLS; absent means on PYTHONPATH.
    code_install: str = "trainstack-code-install"
    requirements: str = "trainstack-requirements"
    requirements_sha256: str = "trainstack-requirements-sha256"
    image: str = "trainstack-image"
    # The Python environment the agent installs for the job's code: a hash-locked requirements
    # object (locks/ in the repository) and its sha256, installed with --require-hashes
    # --no-deps; whether it sees the image's own packages (a TPU runtime's TensorFlow), and an
    # optional wheelhouse manifest to install from (with its sha256).
    python_lock: str = "trainstack-python-lock"
    python_lock_sha256: str = "trainstack-python-lock-sha256"
    system_site_packages: str = "trainstack-system-site-packages"
    wheelhouse: str = "trainstack-wheelhouse"
    wheelhouse_sha256: str = "trainstack-wheelhouse-sha256"
    # A Workbench instance's post-startup script (a gs:// URI, or a path in tests) and its
    # sha256: the instance's startup script fetches it, checks it and runs it.
    notebook_script: str = "trainstack-post-startup"
    notebook_script_sha256: str = "trainstack-post-startup-sha256"
    # GPUs on the node: a container gets them passed through (docker run --gpus all).
    gpu_count: str = "trainstack-gpu-count"
    # The job's secrets by name only, "ENV_NAME=SECRET_ID ...": the values stay in Secret
    # Manager until the boot script fetches them into the job's environment.
    secrets: str = "trainstack-secrets"
    # The job's own environment variables (job.env), a JSON object of names and text values.
    job_env: str = "trainstack-job-env"
    # Where the job reads and writes in Cloud Storage besides its directory, {"read": [...],
    # "write": [...]} (trainstack_contract.jobaccess): what its own token carries.
    job_buckets: str = "trainstack-job-buckets"
    # Every node of the cluster by name, "chief worker-0 ...": a node whose trainer lost a
    # peer waits until none of them is down before it starts the trainer again.
    peers: str = "trainstack-peers"
    # The chief's only: the Spot peers it starts again when Compute Engine has preempted
    # them, "NODE=INSTANCE ...", and how often it does so for one node before the job FAILS.
    recover: str = "trainstack-recover"
    max_restarts: str = "trainstack-max-restarts"
    # How long a node waits with an empty job queue before it applies on_finish (seconds; 0:
    # at once, as a node without a queue did). `submit` starts stopped nodes again.
    idle_seconds: str = "trainstack-idle-seconds"
    # "true" for the built-in trainer's job: a standing node may start it in a warm interpreter
    # that loaded TensorFlow before the job came (trainstack_agent.warm); a team's code never.
    warm_start: str = "trainstack-warm-start"
    # How the node got its machine (CAPACITIES): written for flex_start and reservation nodes;
    # absent on an on-demand or Spot node, whose metadata stays as before the key existed.
    capacity: str = "trainstack-capacity"


METADATA_KEYS: Final = MetadataKeys()
KEYS: Final = METADATA_KEYS

# The label naming the stack on every resource the program creates: what the billing budget
# filters on and what the policy pack's cost-labels rule requires by default.
STACK_LABEL: Final = "trainstack-stack"

# What kind of machine a node is: a Compute Engine VM of a training cluster, or a TPU VM.
NodeKind = Literal["cluster", "tpu"]
CLUSTER_NODE_KIND: Final = "cluster"
TPU_NODE_KIND: Final = "tpu"
NODE_KINDS: Final[tuple[str, ...]] = get_args(NodeKind)

# How a node gets its machine (the stack's `capacity` key; Compute Engine's provisioning
# models): on demand, Spot, Dynamic Workload Scheduler flex-start, or from a reservation.
# The program writes it into a node's metadata (METADATA_KEYS.capacity) where it is not one of
# the two every stack had before the key existed (on demand, Spot).
Capacity = Literal["on_demand", "spot", "flex_start", "reservation"]
ON_DEMAND: Final = "on_demand"
SPOT: Final = "spot"
FLEX_START: Final = "flex_start"
RESERVATION: Final = "reservation"
CAPACITIES: Final[tuple[str, ...]] = get_args(Capacity)

# What a node does when its work ends (the stack's on_finish; the metadata's on_finish key):
# stop its machine, delete it, or keep it running.
OnFinish = Literal["stop", "delete", "keep"]
ON_FINISH_CHOICES: Final[tuple[str, ...]] = get_args(OnFinish)

# What a node runs (the metadata's job_mode), and how a package job's code is installed
# (code_install).
# A Python package run as `python -m MODULE` (the built-in trainer is one: BUILTIN_MODULE),
# a container image, or nothing at all (a dev box that boots ready and starts no trainer).
JobMode = Literal["package", "image", "none"]
PACKAGE_JOB: Final = "package"
IMAGE_JOB: Final = "image"
NO_JOB: Final = "none"
JOB_MODES: Final[tuple[JobMode, ...]] = (PACKAGE_JOB, IMAGE_JOB, NO_JOB)
# How a package job's archive becomes importable on a node: unpacked and put on PYTHONPATH
# (a package directory, or a directory holding one), or unpacked and installed with pip with
# its dependencies (a project root with pyproject.toml or setup.py).
CodeInstall = Literal["path", "project"]
PATH_INSTALL: Final = "path"
PROJECT_INSTALL: Final = "project"
CODE_INSTALLS: Final[tuple[CodeInstall, ...]] = (PATH_INSTALL, PROJECT_INSTALL)

# Bounds the stack file's keys take and a node checks again in its metadata.
# Compute Engine's longest run-time limit, 120 days: the stack's max_run_hours, a TPU VM's cap
# (max_run_seconds) and a flex-start node's run.
MAX_RUN_SECONDS: Final = 120 * 86400
# How long a node waits with an empty job queue before on_finish: whole minutes, at most a week
# (the stack's idle_minutes; idle_seconds in metadata).
MAX_IDLE_MINUTES: Final = 7 * 24 * 60
# How often the chief starts one preempted Spot peer again before the job fails (max_restarts).
MAX_RESTARTS: Final = 100
# The job's arguments (job.args; trainer_args in metadata): at most this many.
MAX_JOB_ARGS: Final = 256

# The job's arguments as metadata (a JSON list) at most this long.
MAX_TRAINER_ARGS_CHARS: Final = 64 * 1024
# How long a node with an empty job queue waits before on_finish: at most a week, as the
# stack file's idle_minutes.
MAX_IDLE_SECONDS: Final = MAX_IDLE_MINUTES * 60
# A cluster's bounds: a node's index, its GPUs, the chief's heartbeat and how long the others
# wait for it (seconds).
MAX_INDEX: Final = MAX_NODES - 1
MAX_GPUS: Final = 64
MAX_NODE_HEARTBEAT_SECONDS: Final = 3600
MAX_PEER_TIMEOUT_SECONDS: Final = 86400
# How often a node writes its heartbeat: a few chances to be seen within its peers' timeout, at
# most one object write a minute (Cloud Storage allows one write per second to one object),
# at least one every second locally. A TPU VM, which has no peers, beats at the longest.
HEARTBEATS_PER_TIMEOUT: Final = 5
MAX_HEARTBEAT_SECONDS: Final = 60


def heartbeat_seconds(peer_timeout_seconds: int) -> int:
    """A cluster node's heartbeat interval for its peers' timeout."""
    return max(1, min(MAX_HEARTBEAT_SECONDS, peer_timeout_seconds // HEARTBEATS_PER_TIMEOUT))


# How a metadata value says yes or no.
TRUE: Final = "true"
FALSE: Final = "false"
_BOOLEANS: Final = (TRUE, FALSE)

# --- The patterns of the values, each matched whole -------------------------------------------
_WHOLE: Final = re.compile(r"[0-9]{1,9}")
# gs://BUCKET (Cloud Storage's bucket names), or an absolute local path in `trainstack local`
# (any printable path: it is only ever used as a path, never by a shell).
BUCKET: Final = re.compile(rf"gs://{GCS_BUCKET_NAME}|/[^\x00-\x1f\x7f]{{1,4000}}")
_LOCAL_PATH: Final = re.compile(r"(/[^\x00-\x1f\x7f/]{1,255}){1,64}")
# The node agent's archive in the bucket (what the boot script fetches; it checks the same
# shape in bash, bootscripts.AGENT_PATTERN).
AGENT_ARCHIVE: Final = re.compile(
    rf"(?:{BUCKET.pattern})/{re.escape(LAYOUT.agent_dir)}/trainstack-agent-[0-9a-f]{{16}}\.pyz"
)
CODE_ARCHIVE: Final = re.compile(re.escape(LAYOUT.code_dir) + r"/[A-Za-z0-9_][A-Za-z0-9_.-]{0,150}\.zip")
REQUIREMENTS_OBJECT: Final = re.compile(re.escape(LAYOUT.code_dir) + r"/requirements-[0-9a-f]{16}\.txt")
WHEELHOUSE_MANIFEST: Final = re.compile(re.escape(LAYOUT.wheelhouse) + r"/manifest-[0-9a-f]{16}\.json")
PYTHON_LOCK: Final = re.compile(re.escape(LAYOUT.python_dir) + r"/lock-[0-9a-f]{16}\.txt")
IMAGE: Final = re.compile(r"[a-z0-9.-]{1,253}/[A-Za-z0-9._/:@-]{1,1000}")
SECRET_LIST: Final = re.compile(
    r"[A-Z][A-Z0-9_]{0,99}=[A-Za-z0-9_-]{1,255}( [A-Z][A-Z0-9_]{0,99}=[A-Za-z0-9_-]{1,255}){0,19}"
)
# The project attribute that holds the TF_CONFIG cluster.
PROJECT_KEY: Final = re.compile(r"[A-Za-z0-9_-]{1,128}")


class NodeMetadataError(ValueError):
    """A metadata value that is missing or does not match; the message names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class MetadataSource(Protocol):
    """Where metadata values come from: a dict, a queued job's spec, or the metadata server
    (a value read only when asked for; a server that does not answer raises, never None)."""

    def get(self, key: str, /) -> str | None: ...


def is_stack_job_dir(job_dir: str, bucket: str) -> bool:
    """jobs/<name> of the stack's own bucket."""
    prefix = f"{bucket}/{LAYOUT.jobs}/"
    return job_dir.startswith(prefix) and JOB_NAME.fullmatch(job_dir[len(prefix) :]) is not None


def is_job_dir(job_dir: str, bucket: str) -> bool:
    """jobs/<name> of the stack's bucket, or a folder of a team's own bucket (job.job_dir);
    in `trainstack local` (a bucket that is a directory), the directory standing in for it."""
    if is_stack_job_dir(job_dir, bucket):
        return True
    if EXTERNAL_JOB_DIR.fullmatch(job_dir) is not None:
        return True
    return (
        bucket.startswith("/")
        and _LOCAL_PATH.fullmatch(job_dir) is not None
        and not ({".", ".."} & set(job_dir.split("/")))
    )


class _Reader:
    """Values by key, each checked whole; NodeMetadataError names the key that fails."""

    def __init__(self, source: MetadataSource) -> None:
        self.source = source

    def optional(self, key: str) -> str | None:
        value = self.source.get(key)
        return value if value else None

    def required(self, key: str) -> str:
        value = self.source.get(key)
        if not value:
            raise NodeMetadataError(key, f"required metadata {key} is missing")
        return value

    @staticmethod
    def match(key: str, value: str, pattern: re.Pattern[str], what: str) -> str:
        if pattern.fullmatch(value) is None:
            raise NodeMetadataError(key, f"metadata {key} is not {what}")
        return value

    def whole(self, key: str, value: str, low: int, high: int) -> int:
        number = int(self.match(key, value, _WHOLE, "a whole number"))
        if not low <= number <= high:
            raise NodeMetadataError(key, f"metadata {key} must be from {low} to {high}")
        return number

    def optional_whole(self, key: str, low: int, high: int) -> int | None:
        text = self.optional(key)
        return None if text is None else self.whole(key, text, low, high)

    @staticmethod
    def choice(key: str, value: str, choices: tuple[str, ...]) -> str:
        if value not in choices:
            raise NodeMetadataError(key, f"metadata {key} must be one of {', '.join(choices)}")
        return value

    def flag(self, key: str) -> bool:
        """ "true" or "false"; absent is false."""
        return self.choice(key, self.optional(key) or FALSE, _BOOLEANS) == TRUE

    def pinned(self, key: str, digest_key: str, pattern: re.Pattern[str], what: str) -> PinnedObject | None:
        """An object and its sha256 where ``key`` is set; None where it is not."""
        path = self.optional(key)
        if path is None:
            return None
        self.match(key, path, pattern, what)
        return PinnedObject(path, self.match(digest_key, self.required(digest_key), SHA256, "a sha256 in hex"))

    def pairs(self, key: str, text: str | None, pattern: re.Pattern[str], what: str) -> tuple[tuple[str, str], ...]:
        """ "A=B C=D" read from ``key``: (A, B), (C, D); none where it is not set."""
        if text is None:
            return ()
        self.match(key, text, pattern, what)
        return tuple((pair.split("=", 1)[0], pair.split("=", 1)[1]) for pair in text.split(" "))


@dataclass(frozen=True)
class PinnedObject:
    """An object a node runs or installs, and the sha256 it checks it against: an object name
    of the stack's bucket, or, for the agent, its full location."""

    path: str
    sha256: str


def _trainer_args(key: str, text: str) -> tuple[str, ...]:
    if len(text) > MAX_TRAINER_ARGS_CHARS:
        raise NodeMetadataError(key, f"metadata {key} is longer than {MAX_TRAINER_ARGS_CHARS} characters")
    try:
        args = json.loads(text)
    except ValueError:
        raise NodeMetadataError(key, f"metadata {key} is not a JSON list of strings") from None
    if (
        not isinstance(args, list)
        or len(args) > MAX_JOB_ARGS
        or not all(isinstance(arg, str) and "\0" not in arg for arg in args)
    ):
        raise NodeMetadataError(key, f"metadata {key} is not a JSON list of at most {MAX_JOB_ARGS} strings")
    return tuple(args)


def _job_env(key: str, text: str | None) -> tuple[tuple[str, str], ...]:
    """job.env: a JSON object of names and text values, each one a job may have."""
    if text is None:
        return ()
    if len(text) > MAX_JOB_ENV_CHARS:
        raise NodeMetadataError(key, f"metadata {key} is longer than {MAX_JOB_ENV_CHARS} characters")
    try:
        env = json.loads(text)
    except ValueError:
        env = None
    if not isinstance(env, dict) or len(env) > MAX_JOB_ENV:
        raise NodeMetadataError(
            key, f"metadata {key} is not a JSON object of at most {MAX_JOB_ENV} names and text values"
        )
    for name, value in env.items():
        problem = job_env_problem(name, value)
        if problem is not None:
            raise NodeMetadataError(key, f"metadata {key}: {problem}")
    return tuple(env.items())


def _job_places(key: str, text: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if text is None:
        return (), ()
    try:
        return places_from_json(text)
    except ValueError as error:
        raise NodeMetadataError(key, f"metadata {key}: {error}") from None


def _put(metadata: dict[str, str], key: str, value: str | int | None) -> None:
    if value is not None:
        metadata[key] = str(value)


def _put_pinned(metadata: dict[str, str], key: str, digest_key: str, pinned: PinnedObject | None) -> None:
    if pinned is not None:
        metadata[key] = pinned.path
        metadata[digest_key] = pinned.sha256


def _pairs_text(pairs: tuple[tuple[str, str], ...]) -> str | None:
    return " ".join(f"{a}={b}" for a, b in pairs) if pairs else None


@dataclass(frozen=True)
class JobMetadata:
    """What a node runs: the part of its metadata a queued job's spec also holds (with the job
    directory, which the queue gives a queued job)."""

    mode: str
    # jobs/<name> of the stack's bucket, or a folder of a team's own (job.job_dir); None
    # without a job.
    job_dir: str | None = None
    trainer_args: tuple[str, ...] = ()
    # A package job: its archive, module and extra requirements, and how it is installed
    # (CODE_INSTALLS; absent in metadata means on PYTHONPATH).
    code: PinnedObject | None = None
    module: str | None = None
    requirements: PinnedObject | None = None
    code_install: str = PATH_INSTALL
    # The built-in trainer's job: a standing node may start it in a warm interpreter.
    warm_start: bool = False
    # An image job.
    image: str | None = None
    # (ENV_NAME, SECRET_ID) pairs, and job.env's (NAME, VALUE) pairs.
    secrets: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    # Where it reads and writes in Cloud Storage besides its directory: gs://BUCKET[/FOLDER/].
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()

    def to_metadata(self) -> dict[str, str]:
        metadata = {KEYS.job_mode: self.mode}
        if self.mode == NO_JOB:
            return metadata
        _put(metadata, KEYS.job_dir, self.job_dir)
        metadata[KEYS.trainer_args] = json.dumps(list(self.trainer_args))
        if self.warm_start:
            metadata[KEYS.warm_start] = TRUE
        _put_pinned(metadata, KEYS.code_archive, KEYS.code_archive_sha256, self.code)
        _put(metadata, KEYS.module, self.module)
        if self.code is not None and self.code_install != PATH_INSTALL:
            metadata[KEYS.code_install] = self.code_install
        _put_pinned(metadata, KEYS.requirements, KEYS.requirements_sha256, self.requirements)
        _put(metadata, KEYS.image, self.image)
        _put(metadata, KEYS.secrets, _pairs_text(self.secrets))
        if self.env:
            metadata[KEYS.job_env] = json.dumps(dict(self.env), separators=(",", ":"))
        if self.reads or self.writes:
            metadata[KEYS.job_buckets] = places_json(self.reads, self.writes)
        return metadata

    @classmethod
    def from_metadata(cls, source: MetadataSource, bucket: str) -> JobMetadata:
        """The job in ``source``, each value checked; its directory must be one of ``bucket``'s
        job directories or a folder of a team's own bucket."""
        read = _Reader(source)
        mode = read.choice(KEYS.job_mode, read.required(KEYS.job_mode), JOB_MODES)
        if mode == NO_JOB:
            return cls(mode)
        job_dir = read.required(KEYS.job_dir)
        if not is_job_dir(job_dir, bucket):
            raise NodeMetadataError(
                KEYS.job_dir,
                f"metadata {KEYS.job_dir} is neither a job directory of the bucket {bucket} nor gs://BUCKET/PREFIX",
            )
        args = _trainer_args(KEYS.trainer_args, read.required(KEYS.trainer_args))
        secrets = read.pairs(KEYS.secrets, read.optional(KEYS.secrets), SECRET_LIST, "a list of NAME=SECRET_ID")
        env = _job_env(KEYS.job_env, read.optional(KEYS.job_env))
        reads, writes = _job_places(KEYS.job_buckets, read.optional(KEYS.job_buckets))
        if mode == PACKAGE_JOB:
            code = read.pinned(KEYS.code_archive, KEYS.code_archive_sha256, CODE_ARCHIVE, "a code archive")
            if code is None:
                read.required(KEYS.code_archive)
            return cls(
                mode,
                job_dir,
                args,
                code=code,
                module=read.match(KEYS.module, read.required(KEYS.module), MODULE_NAME, "a Python module name"),
                requirements=read.pinned(
                    KEYS.requirements, KEYS.requirements_sha256, REQUIREMENTS_OBJECT, "a requirements object"
                ),
                code_install=read.choice(
                    KEYS.code_install, read.optional(KEYS.code_install) or PATH_INSTALL, CODE_INSTALLS
                ),
                warm_start=read.flag(KEYS.warm_start),
                secrets=secrets,
                env=env,
                reads=reads,
                writes=writes,
            )
        image = read.match(KEYS.image, read.required(KEYS.image), IMAGE, "an image name")
        return cls(mode, job_dir, args, image=image, secrets=secrets, env=env, reads=reads, writes=writes)


@dataclass(frozen=True)
class PythonMetadata:
    """The environment the agent installs for the job's code: a hash-locked requirements object,
    whether it sees the image's own packages, and an optional wheelhouse to install from."""

    lock: PinnedObject | None
    system_site_packages: bool
    wheelhouse: PinnedObject | None = None

    def to_metadata(self) -> dict[str, str]:
        metadata: dict[str, str] = {}
        _put_pinned(metadata, KEYS.python_lock, KEYS.python_lock_sha256, self.lock)
        metadata[KEYS.system_site_packages] = TRUE if self.system_site_packages else FALSE
        _put_pinned(metadata, KEYS.wheelhouse, KEYS.wheelhouse_sha256, self.wheelhouse)
        return metadata

    @classmethod
    def from_metadata(cls, source: MetadataSource) -> PythonMetadata:
        read = _Reader(source)
        lock = read.pinned(KEYS.python_lock, KEYS.python_lock_sha256, PYTHON_LOCK, "a lock object")
        system = read.flag(KEYS.system_site_packages)
        wheelhouse = read.pinned(
            KEYS.wheelhouse, KEYS.wheelhouse_sha256, WHEELHOUSE_MANIFEST, "a wheelhouse manifest object"
        )
        return cls(lock, system, wheelhouse)


@dataclass(frozen=True)
class ClusterMember:
    """A Compute Engine node's place in its cluster (a TPU VM has none)."""

    role: str
    index: int
    node_name: str
    heartbeat_seconds: int
    peer_timeout_seconds: int
    # Names the project attribute that holds the TF_CONFIG cluster; None for a single machine.
    cluster_key: str | None = None
    # Every node of the cluster, this one included (empty for a single machine), and how often
    # the chief starts one preempted peer again (None: unset, read as 0).
    peers: tuple[str, ...] = ()
    max_restarts: int | None = None
    # The chief's only: (node, instance) of the Spot peers it starts again after a preemption.
    recover: tuple[tuple[str, str], ...] = ()

    def to_metadata(self) -> dict[str, str]:
        metadata = {
            KEYS.role: self.role,
            KEYS.index: str(self.index),
            KEYS.node_name: self.node_name,
            KEYS.heartbeat_seconds: str(self.heartbeat_seconds),
            KEYS.peer_timeout_seconds: str(self.peer_timeout_seconds),
        }
        _put(metadata, KEYS.cluster_key, self.cluster_key)
        _put(metadata, KEYS.peers, " ".join(self.peers) if self.peers else None)
        _put(metadata, KEYS.max_restarts, self.max_restarts)
        _put(metadata, KEYS.recover, _pairs_text(self.recover))
        return metadata

    @classmethod
    def from_metadata(cls, source: MetadataSource) -> ClusterMember:
        read = _Reader(source)
        role = read.choice(KEYS.role, read.required(KEYS.role), ROLES)
        index = read.whole(KEYS.index, read.required(KEYS.index), 0, MAX_INDEX)
        node = read.match(KEYS.node_name, read.required(KEYS.node_name), NODE_NAME, "a node name")
        peers_text = read.optional(KEYS.peers)
        peers = (
            tuple(read.match(KEYS.peers, peers_text, NODE_LIST, "a list of node names").split(" "))
            if peers_text
            else ()
        )
        if peers and node not in peers:
            raise NodeMetadataError(KEYS.peers, f"metadata {KEYS.peers} does not name this node ({node})")
        recover_text = read.optional(KEYS.recover)
        if recover_text is not None and role != CHIEF:
            raise NodeMetadataError(KEYS.recover, f"metadata {KEYS.recover} is set on a node that is not the chief")
        recover = read.pairs(KEYS.recover, recover_text, NODE_INSTANCE_LIST, "a list of NODE=INSTANCE")
        if not all(name in peers and name != node for name, _ in recover):
            raise NodeMetadataError(KEYS.recover, f"metadata {KEYS.recover} names a node that is not a peer")
        heartbeat = read.whole(
            KEYS.heartbeat_seconds, read.required(KEYS.heartbeat_seconds), 1, MAX_NODE_HEARTBEAT_SECONDS
        )
        timeout = read.whole(
            KEYS.peer_timeout_seconds, read.required(KEYS.peer_timeout_seconds), 1, MAX_PEER_TIMEOUT_SECONDS
        )
        cluster_key = read.optional(KEYS.cluster_key)
        if cluster_key is not None:
            read.match(KEYS.cluster_key, cluster_key, PROJECT_KEY, "a project metadata key")
        max_restarts = read.optional_whole(KEYS.max_restarts, 0, MAX_RESTARTS)
        return cls(role, index, node, heartbeat, timeout, cluster_key, peers, max_restarts, recover)


@dataclass(frozen=True)
class NodeMetadata:
    """Everything a node's instance metadata says, typed: what the program writes
    (:meth:`to_metadata`) and the node agent reads (:meth:`from_metadata`)."""

    # NODE_KINDS: a Compute Engine node of a cluster (``member`` set) or a TPU VM (``tpu_name``).
    kind: str
    # gs://BUCKET, or a directory in `trainstack local`.
    bucket: str
    on_finish: str
    python: PythonMetadata
    job: JobMetadata
    # The node agent's archive (what the boot script fetches and checks) and its sha256.
    agent: PinnedObject | None = None
    member: ClusterMember | None = None
    tpu_name: str | None = None
    # GPUs on the node (None: unset, read as none).
    gpu_count: int | None = None
    # Seconds with an empty job queue before on_finish; None: the node runs no queue.
    idle_seconds: int | None = None
    # CAPACITIES where the node's metadata names one (flex_start, reservation); None on an
    # on-demand or Spot node.
    capacity: str | None = None
    # A TPU VM's run-time cap, or a flex-start cluster node's run duration.
    max_run_seconds: int | None = None

    def to_metadata(self) -> dict[str, str]:
        """The instance metadata items, each value as text."""
        metadata = {KEYS.node_kind: self.kind}
        _put(metadata, KEYS.tpu_name, self.tpu_name)
        metadata.update(self.member.to_metadata() if self.member is not None else {})
        metadata[KEYS.bucket] = self.bucket
        metadata[KEYS.on_finish] = self.on_finish
        _put(metadata, KEYS.gpu_count, self.gpu_count)
        _put_pinned(metadata, KEYS.agent, KEYS.agent_sha256, self.agent)
        metadata.update(self.python.to_metadata())
        metadata.update(self.job.to_metadata())
        _put(metadata, KEYS.idle_seconds, self.idle_seconds)
        _put(metadata, KEYS.capacity, self.capacity)
        _put(metadata, KEYS.max_run_seconds, self.max_run_seconds)
        return metadata

    @classmethod
    def from_metadata(cls, source: MetadataSource) -> NodeMetadata:
        """A node's metadata, every value checked; NodeMetadataError names the first bad key."""
        read = _Reader(source)
        kind = read.choice(KEYS.node_kind, read.required(KEYS.node_kind), NODE_KINDS)
        bucket = read.match(KEYS.bucket, read.required(KEYS.bucket), BUCKET, "a gs:// bucket")
        on_finish = read.choice(KEYS.on_finish, read.required(KEYS.on_finish), ON_FINISH_CHOICES)
        gpu_count = read.optional_whole(KEYS.gpu_count, 0, MAX_GPUS)
        python = PythonMetadata.from_metadata(source)
        job = JobMetadata.from_metadata(source, bucket)
        idle_seconds = read.optional_whole(KEYS.idle_seconds, 0, MAX_IDLE_SECONDS)
        capacity_text = read.optional(KEYS.capacity)
        capacity = None if capacity_text is None else read.choice(KEYS.capacity, capacity_text, CAPACITIES)
        run: int | None
        tpu_name: str | None = None
        member: ClusterMember | None = None
        if kind == TPU_NODE_KIND:
            tpu_name = read.match(KEYS.tpu_name, read.required(KEYS.tpu_name), NODE_NAME, "a TPU node name")
            run = read.whole(KEYS.max_run_seconds, read.required(KEYS.max_run_seconds), 1, MAX_RUN_SECONDS)
        else:
            member = ClusterMember.from_metadata(source)
            run = _flex_start_run(read, capacity)
        agent = read.pinned(KEYS.agent, KEYS.agent_sha256, AGENT_ARCHIVE, "a node agent archive")
        return cls(
            kind, bucket, on_finish, python, job, agent, member, tpu_name, gpu_count, idle_seconds, capacity, run
        )


def _flex_start_run(read: _Reader, capacity: str | None) -> int | None:
    """A flex-start cluster node's run duration (its agent ends its work before the machine is
    deleted); None on any other cluster node, whose run-time cap is Compute Engine's alone."""
    key = KEYS.max_run_seconds
    text = read.optional(key)
    if capacity != FLEX_START:
        if text is not None:
            raise NodeMetadataError(key, f"metadata {key} is set on a cluster node that is not flex-start")
        return None
    if text is None:
        raise NodeMetadataError(key, f"metadata {key} is missing: a flex-start node must know when its run ends")
    return read.whole(key, text, 1, MAX_RUN_SECONDS)
