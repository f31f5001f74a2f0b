"""Instance metadata read once into typed settings; every value matched whole.

The Pulumi program writes these values (``bootscripts.cluster_node_metadata``), but a node
treats them as input: :meth:`~trainstack_contract.metadata.NodeMetadata.from_metadata` matches
each against a full pattern and a bound before any of it reaches a path, a process or an API
call. A value that does not match ends the boot (:class:`SettingsError` names the key): a node
that cannot tell what to do must stop billing, not guess.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from trainstack_agent.metadata import Metadata
from trainstack_contract import (
    CHIEF,
    IMAGE_JOB,
    METADATA_KEYS,
    NO_JOB,
    PACKAGE_JOB,
    PATH_INSTALL,
    PS,
    TPU_NODE,
    TPU_NODE_KIND,
)
from trainstack_contract.metadata import (
    BUCKET,
    MAX_HEARTBEAT_SECONDS,
    JobMetadata,
    NodeMetadata,
    NodeMetadataError,
    PinnedObject,
    is_stack_job_dir,
)
from trainstack_contract.metadata import is_job_dir as is_job_dir
from trainstack_contract.names import NODE_NAME
from trainstack_contract.tf_config import TfConfigError, check_task, read_cluster, tf_config

KEYS: Final = METADATA_KEYS
# A single TPU VM has no peers: its heartbeat only tells a reader it is alive.
TPU_HEARTBEAT_SECONDS: Final = MAX_HEARTBEAT_SECONDS

# A metadata value that is missing or does not match; the message names the key (``.key``).
SettingsError = NodeMetadataError


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
    # Where it reads and writes in Cloud Storage besides its directory (its token carries them).
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()

    @property
    def builtin(self) -> bool:
        """The built-in trainer's job, as warm_start marks it: its module's name says nothing
        (AI Platform's samples run trainer.task too)."""
        return self.warm_start


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


class _Attributes(Protocol):
    """Where a node's values come from: the metadata server, or a test's stand-in."""

    def attribute(self, key: str) -> str | None: ...

    def project_attribute(self, key: str) -> str | None: ...


class _InstanceAttributes:
    """The instance attributes as the model reads them: each one asked for when the model needs
    it; a server that does not answer raises (never read as absent)."""

    def __init__(self, metadata: _Attributes) -> None:
        self.metadata = metadata

    def get(self, key: str, /) -> str | None:
        return self.metadata.attribute(key)


def _artifact(bucket: str, pinned: PinnedObject | None) -> Artifact | None:
    return None if pinned is None else Artifact(f"{bucket}/{pinned.path}", pinned.sha256)


def _job(job: JobMetadata, bucket: str) -> JobSettings | None:
    if job.mode == NO_JOB:
        return None
    assert job.job_dir is not None
    if job.mode == PACKAGE_JOB:
        requirements = _artifact(bucket, job.requirements)
        return JobSettings(
            job.mode,
            job.job_dir,
            job.trainer_args,
            code=_artifact(bucket, job.code),
            module=job.module,
            requirements=requirements,
            install=job.code_install,
            secrets=job.secrets,
            env=job.env,
            warm_start=job.warm_start and requirements is None and job.code_install == PATH_INSTALL,
            reads=job.reads,
            writes=job.writes,
        )
    assert job.mode == IMAGE_JOB
    return JobSettings(
        job.mode,
        job.job_dir,
        job.trainer_args,
        image=job.image,
        secrets=job.secrets,
        env=job.env,
        reads=job.reads,
        writes=job.writes,
    )


def job_from_spec(values: Mapping[str, str], bucket: str, job_dir: str) -> JobSettings:
    """A queued job's settings from its spec's values (``trainstack_contract.queue.read_spec``),
    checked by the same code as the stack's own job in instance metadata, with the job
    directory the queue gives it; SettingsError names the first bad key."""
    job = _job(JobMetadata.from_metadata({**values, KEYS.job_dir: job_dir}, bucket), bucket)
    if job is None:
        raise SettingsError(KEYS.job_mode, f"metadata {KEYS.job_mode} of a queued job must name a job, not {NO_JOB}")
    return job


def _tf_config(metadata: _Attributes, key: str | None, role: str, index: int) -> str | None:
    """TF_CONFIG for this node from the project attribute ``key`` names (checked by the model)."""
    if key is None:
        return None
    text = metadata.project_attribute(key)
    if not text:
        raise SettingsError(key, f"project metadata {key} (the TF_CONFIG cluster) is missing")
    try:
        document = json.loads(text)
    except ValueError:
        raise SettingsError(key, f"project metadata {key} is not a TF_CONFIG cluster") from None
    try:
        cluster = read_cluster(document)
        check_task(cluster, role, index)
    except TfConfigError as error:
        raise SettingsError(
            key, f"project metadata {key} is not a TF_CONFIG cluster with task {role} {index}: {error}"
        ) from None
    # One function builds TF_CONFIG for the Pulumi side, the local runs and this agent.
    return tf_config(cluster, role, index)


def read_settings(metadata: Metadata) -> NodeSettings:
    """Every setting of this node, checked; SettingsError names the first bad key."""
    node = NodeMetadata.from_metadata(_InstanceAttributes(metadata))
    bucket = node.bucket
    python = PythonSettings(
        _artifact(bucket, node.python.lock), node.python.system_site_packages, _artifact(bucket, node.python.wheelhouse)
    )
    member = node.member
    if member is None:
        assert node.kind == TPU_NODE_KIND
        return NodeSettings(
            kind=node.kind,
            node=TPU_NODE,
            role=CHIEF,
            index=0,
            bucket=bucket,
            on_finish=node.on_finish,
            heartbeat_seconds=TPU_HEARTBEAT_SECONDS,
            peer_timeout_seconds=0,
            gpu_count=node.gpu_count or 0,
            python=python,
            job=_job(node.job, bucket),
            tpu_name=node.tpu_name,
            max_run_seconds=node.max_run_seconds,
            idle_seconds=node.idle_seconds,
            capacity=node.capacity,
        )
    return NodeSettings(
        kind=node.kind,
        node=member.node_name,
        role=member.role,
        index=member.index,
        bucket=bucket,
        on_finish=node.on_finish,
        heartbeat_seconds=member.heartbeat_seconds,
        peer_timeout_seconds=member.peer_timeout_seconds,
        gpu_count=node.gpu_count or 0,
        python=python,
        job=_job(node.job, bucket),
        tf_config=_tf_config(metadata, member.cluster_key, member.role, member.index),
        peers=member.peers,
        max_restarts=member.max_restarts or 0,
        recover=member.recover,
        idle_seconds=node.idle_seconds,
        capacity=node.capacity,
        max_run_seconds=node.max_run_seconds,
    )


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
    if not (node and NODE_NAME.fullmatch(node) and bucket and BUCKET.fullmatch(bucket) and job_dir):
        return None, None
    if not is_stack_job_dir(job_dir, bucket):
        return None, None
    return node, job_dir
