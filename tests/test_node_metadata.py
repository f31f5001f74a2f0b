"""A node's metadata is one typed model: what the program writes reads back as the same model,
and a value that does not match is refused with its key named."""

from __future__ import annotations

import dataclasses

import pytest

from trainstack.cloud import bootscripts
from trainstack.stackmodel.resolved import ResolvedStack, resolve_stack
from trainstack.stackmodel.stackfile import STACKS_DIR, load_stack
from trainstack_contract import METADATA_KEYS
from trainstack_contract.metadata import NodeMetadata, NodeMetadataError

KEYS = METADATA_KEYS
SHIPPED = sorted(path.name.removeprefix("Pulumi.").removesuffix(".yaml") for path in STACKS_DIR.glob("Pulumi.*.yaml"))


def resolved(name: str) -> ResolvedStack:
    return resolve_stack(load_stack(STACKS_DIR / f"Pulumi.{name}.yaml")[0])


def shipped_models(name: str) -> dict[str, NodeMetadata]:
    """Every node of a shipped stack, by node name, as the program builds its metadata."""
    stack = resolved(name)
    models = {}
    if stack.cluster is not None:
        for node in stack.cluster.nodes:
            models[node.name] = bootscripts.cluster_node_metadata(
                stack.cluster, node, stack.bucket_uri, stack.job, wheelhouse=stack.wheelhouse
            )
    if stack.tpu is not None:
        models["tpu"] = bootscripts.tpu_node_metadata(stack, stack.tpu)
    return models


def test_every_shipped_stack_with_machines_has_nodes_to_read() -> None:
    assert {name for name in SHIPPED if shipped_models(name)} == set(SHIPPED) - {"notebook"}


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_nodes_metadata_reads_back_as_the_model_the_program_wrote(name: str) -> None:
    boot = bootscripts.boot_files(resolved(name))
    written = {**boot.cluster_metadata, **({"tpu": boot.tpu_metadata} if boot.tpu_metadata else {})}
    models = shipped_models(name)
    assert set(written) == set(models)
    for node, metadata in written.items():
        read = NodeMetadata.from_metadata(metadata)
        assert read == models[node], node
        assert read.to_metadata() == metadata, node


def chief() -> dict[str, str]:
    """The multiworker chief's metadata: a package job, peers, a recover list and a queue."""
    return bootscripts.boot_files(resolved("multiworker")).cluster_metadata["chief"]


def tpu() -> dict[str, str]:
    return bootscripts.boot_files(resolved("tpu")).tpu_metadata


def image_job() -> dict[str, str]:
    metadata = {**chief(), KEYS.job_mode: "image", KEYS.image: "us-docker.pkg.dev/p/r/trainer@sha256:" + "a" * 64}
    NodeMetadata.from_metadata(metadata)
    return metadata


def with_objects() -> dict[str, str]:
    """The chief with extra requirements and a wheelhouse: their digests are read too."""
    metadata = {
        **chief(),
        KEYS.requirements: "trainstack/code/requirements-0123456789abcdef.txt",
        KEYS.requirements_sha256: "b" * 64,
        KEYS.wheelhouse: "trainstack/wheelhouse/manifest-0123456789abcdef.json",
        KEYS.wheelhouse_sha256: "c" * 64,
    }
    NodeMetadata.from_metadata(metadata)
    return metadata


# (base metadata, key, a value the key must refuse). Every key the model reads has one.
HOSTILE = [
    (chief, KEYS.node_kind, "gke"),
    (chief, KEYS.bucket, "gs://x"),
    (chief, KEYS.bucket, "relative/path"),
    (chief, KEYS.on_finish, "hibernate"),
    (chief, KEYS.gpu_count, "65"),
    (chief, KEYS.gpu_count, "1e3"),
    (chief, KEYS.agent, "https://example.com/trainstack/agent/trainstack-agent-0123456789abcdef.pyz"),
    (chief, KEYS.agent, "gs://your-gcp-project_multiworker/jobs/x/trainstack-agent-0123456789abcdef.pyz"),
    (chief, KEYS.agent_sha256, "deadbeef"),
    (chief, KEYS.python_lock, "trainstack/python/../../lock-0123456789abcdef.txt"),
    (chief, KEYS.python_lock_sha256, "A" * 64),
    (chief, KEYS.system_site_packages, "yes"),
    (chief, KEYS.wheelhouse, "trainstack/wheelhouse/../manifest-0123456789abcdef.json"),
    (with_objects, KEYS.wheelhouse_sha256, "0" * 63),
    (chief, KEYS.job_mode, "shell"),
    (chief, KEYS.job_dir, "gs://your-gcp-project_multiworker/jobs/../x"),
    (chief, KEYS.trainer_args, '["--a", 1]'),
    (chief, KEYS.trainer_args, '["\\u0000"]'),
    (chief, KEYS.code_archive, "jobs/x/code.zip"),
    (chief, KEYS.code_archive_sha256, "deadbeef"),
    (chief, KEYS.module, "os; rm -rf /"),
    (chief, KEYS.code_install, "editable"),
    (chief, KEYS.requirements, "trainstack/code/requirements.txt"),
    (with_objects, KEYS.requirements_sha256, "z" * 64),
    (chief, KEYS.warm_start, "yes"),
    (image_job, KEYS.image, "evil image; rm -rf /"),
    (chief, KEYS.secrets, "A=$(id)"),
    (chief, KEYS.job_env, '{"LD_PRELOAD": "/tmp/x.so"}'),
    (chief, KEYS.job_buckets, '{"read": ["gs://team-data/../other/"]}'),
    (chief, KEYS.job_buckets, '{"write": ["gs://team-out/x/"], "admin": ["gs://a-b-c"]}'),
    (chief, KEYS.job_buckets, "[1]"),
    (chief, KEYS.idle_seconds, "604801"),
    (chief, KEYS.capacity, "preemptible"),
    (chief, KEYS.max_run_seconds, "3600"),
    (chief, KEYS.role, "admin"),
    (chief, KEYS.index, "0\n"),
    (chief, KEYS.node_name, "../etc"),
    (chief, KEYS.peers, "chief worker-0 Worker"),
    (chief, KEYS.peers, "worker-0 worker-1"),
    (chief, KEYS.recover, "worker-0=a b"),
    (chief, KEYS.recover, "someone=multiworker-someone"),
    (chief, KEYS.heartbeat_seconds, "0"),
    (chief, KEYS.peer_timeout_seconds, "86401"),
    (chief, KEYS.cluster_key, "key with spaces"),
    (chief, KEYS.max_restarts, "101"),
    (tpu, KEYS.tpu_name, "TPU"),
    (tpu, KEYS.max_run_seconds, "0"),
    (tpu, KEYS.max_run_seconds, str(120 * 86400 + 1)),
]


@pytest.mark.parametrize(("base", "key", "value"), HOSTILE, ids=[f"{key}={value[:20]!r}" for _, key, value in HOSTILE])
def test_a_hostile_value_is_refused_naming_its_key(base, key: str, value: str) -> None:  # type: ignore[no-untyped-def]
    metadata = base()
    metadata[key] = value
    with pytest.raises(NodeMetadataError) as refused:
        NodeMetadata.from_metadata(metadata)
    assert refused.value.key == key
    assert key in str(refused.value)


def test_the_hostile_values_reach_every_key_a_node_reads() -> None:
    """The notebook's post-startup script is read by its own startup script, not a node agent."""
    every = {getattr(KEYS, field.name) for field in dataclasses.fields(KEYS)}
    assert {key for _, key, _ in HOSTILE} == every - {KEYS.notebook_script, KEYS.notebook_script_sha256}


@pytest.mark.parametrize("key", [KEYS.node_kind, KEYS.bucket, KEYS.on_finish, KEYS.job_mode, KEYS.role, KEYS.index])
def test_a_required_key_that_is_missing_is_refused_by_name(key: str) -> None:
    metadata = chief()
    del metadata[key]
    with pytest.raises(NodeMetadataError, match=f"required metadata {key} is missing") as refused:
        NodeMetadata.from_metadata(metadata)
    assert refused.value.key == key
