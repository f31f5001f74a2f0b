"""The agent reads what the Pulumi program writes, and refuses anything else by key."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from trainstack.cloud import bootscripts
from trainstack.stackmodel.resolved import ResolvedStack, resolve_stack
from trainstack.stackmodel.stackfile import STACKS_DIR, load_stack
from trainstack_agent.cloud import Unavailable
from trainstack_agent.settings import SettingsError, job_from_spec, read_settings
from trainstack_contract import METADATA_KEYS
from trainstack_contract.queue import SPEC_KEYS, queued_job_dir, read_spec, spec_bytes, spec_sha256

KEYS = METADATA_KEYS


class DictMetadata:
    """Instance and project attributes from dicts; a key in ``unavailable`` fails as a 503 does."""

    def __init__(self, instance: dict[str, str], project: dict[str, str] | None = None) -> None:
        self.instance = dict(instance)
        self.project = dict(project or {})
        self.unavailable: set[str] = set()

    def attribute(self, key: str) -> str | None:
        if key in self.unavailable:
            raise Unavailable(f"GET instance/attributes/{key}: no answer after 6 attempts (HTTP 503)")
        return self.instance.get(key)

    def project_attribute(self, key: str) -> str | None:
        return self.project.get(key)


def resolved(name: str) -> ResolvedStack:
    return resolve_stack(load_stack(STACKS_DIR / f"Pulumi.{name}.yaml")[0])


def cluster_metadata(name: str = "multiworker", node: str = "chief") -> DictMetadata:
    stack = resolved(name)
    assert stack.cluster is not None
    [cluster_node] = [n for n in stack.cluster.nodes if n.name == node]
    instance = bootscripts.cluster_node_metadata(stack.cluster, cluster_node, stack.bucket_uri, stack.job).to_metadata()
    project = (
        {stack.cluster.tf_cluster_metadata_key: json.dumps(stack.cluster.tf_cluster)}
        if stack.cluster.tf_cluster
        else {}
    )
    return DictMetadata(instance, project)


@pytest.mark.parametrize("name", ["dev", "multiworker", "paramserver", "ownpackage"])
def test_every_shipped_cluster_nodes_metadata_reads_back_as_the_program_meant(name: str) -> None:
    stack = resolved(name)
    assert stack.cluster is not None
    for node in stack.cluster.nodes:
        metadata = cluster_metadata(name, node.name)
        settings = read_settings(metadata)  # type: ignore[arg-type]
        assert (settings.node, settings.role, settings.index) == (node.name, node.role, node.index)
        assert settings.job is not None
        assert settings.job.job_dir == stack.job_dir
        assert settings.job.code is not None
        assert settings.job.code.sha256 == stack.job.package.sha256
        if stack.cluster.tf_cluster:
            assert json.loads(settings.tf_config or "")["task"] == {"type": node.role, "index": node.index}
        else:
            assert settings.tf_config is None
        assert settings.is_chief == (node.role == "chief")
        assert bool(settings.recover) == (node.role == "chief" and bool(stack.cluster.recoverable_nodes))


def test_the_tpu_vms_metadata_reads_back() -> None:
    stack = resolved("tpu")
    assert stack.tpu is not None
    settings = read_settings(DictMetadata(bootscripts.tpu_node_metadata(stack, stack.tpu).to_metadata()))  # type: ignore[arg-type]
    assert (settings.kind, settings.node, settings.tpu_name) == ("tpu", "tpu", stack.tpu.vm_name)
    assert settings.max_run_seconds == stack.tpu.max_run_seconds
    assert settings.python.system_site_packages
    assert settings.python.lock is not None
    # The TPU runtime's TensorFlow line of tf-keras, hash-locked (locks/tpu-tf-X.Y.txt).
    lock = bootscripts.tpu_node_kind(stack.tpu, stack.zone).lock_artifact
    assert (settings.python.lock.uri, settings.python.lock.sha256) == (lock.uri(stack.bucket_uri), lock.sha256)
    assert lock.data.decode().count("--hash=sha256:") >= 1
    assert f"tf-keras=={stack.tpu.tensorflow_minor}." in lock.data.decode()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (KEYS.role, "admin"),
        (KEYS.index, "-1"),
        (KEYS.index, "0\n"),
        (KEYS.node_name, "../etc"),
        (KEYS.on_finish, "never"),
        (KEYS.heartbeat_seconds, "0"),
        (KEYS.job_dir, "gs://other-teams-bucket"),
        (KEYS.job_dir, "gs://other-teams-bucket/runs/../../x"),
        (KEYS.job_dir, "jobs/x"),
        (KEYS.code_install, "editable"),
        (KEYS.job_dir, "gs://your-gcp-project_multiworker/jobs/../x"),
        (KEYS.trainer_args, '["--a", 1]'),
        (KEYS.trainer_args, '{"a": 1}'),
        (KEYS.code_archive, "trainstack/code/../../etc/passwd.zip"),
        (KEYS.code_archive, "jobs/x/code.zip"),
        (KEYS.code_archive_sha256, "deadbeef"),
        (KEYS.module, "os; rm -rf /"),
        (KEYS.secrets, "A=$(id)"),
        (KEYS.peers, "chief worker-0 Worker"),
        (KEYS.max_restarts, "1000"),
        (KEYS.python_lock, "jobs/x/lock-0123456789abcdef.txt"),
        (KEYS.python_lock, "trainstack/python/../../lock-0123456789abcdef.txt"),
        (KEYS.python_lock_sha256, "deadbeef"),
        (KEYS.system_site_packages, "yes"),
        (KEYS.recover, "worker-0=a b"),
        (KEYS.node_kind, "gke"),
        (KEYS.job_env, '{"TF_CONFIG": "{}"}'),
        (KEYS.job_env, '{"LD_PRELOAD": "/tmp/x.so"}'),
        (KEYS.job_env, '{"CLOUD_ML_HP_METRIC_FILE": "/tmp/other.metrics"}'),
        (KEYS.job_env, '{"A": 1}'),
        (KEYS.job_env, '{"A": "line\\nbreak"}'),
        (KEYS.job_env, '{"A B": "x"}'),
        (KEYS.job_env, '["A=1"]'),
        (KEYS.job_env, "A=1"),
        (KEYS.job_env, "{" + ",".join(f'"V{i}": ""' for i in range(65)) + "}"),
    ],
)
def test_a_value_that_does_not_match_is_refused_naming_its_key(key: str, value: str) -> None:
    metadata = cluster_metadata()
    metadata.instance[key] = value
    with pytest.raises(SettingsError, match=key):
        read_settings(metadata)  # type: ignore[arg-type]


@pytest.mark.parametrize("key", [KEYS.role, KEYS.bucket, KEYS.job_mode, KEYS.code_archive_sha256, KEYS.on_finish])
def test_a_required_key_that_is_missing_is_refused(key: str) -> None:
    metadata = cluster_metadata()
    del metadata.instance[key]
    with pytest.raises(SettingsError, match=f"required metadata {key} is missing"):
        read_settings(metadata)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "key", [KEYS.secrets, KEYS.job_env, KEYS.requirements, KEYS.wheelhouse, KEYS.cluster_key, KEYS.recover]
)
def test_an_optional_key_that_is_unreachable_is_never_taken_as_absent(key: str) -> None:
    """A 503 on an optional key once ran a job without its secret, and started a worker's
    trainer with no TF_CONFIG."""
    metadata = cluster_metadata()
    metadata.unavailable.add(key)
    with pytest.raises(Unavailable):
        read_settings(metadata)  # type: ignore[arg-type]


def test_a_missing_tf_config_cluster_is_refused() -> None:
    metadata = cluster_metadata()
    metadata.project.clear()
    with pytest.raises(SettingsError, match="the TF_CONFIG cluster"):
        read_settings(metadata)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cluster", "said"),
    [
        ("{not json", "is not a TF_CONFIG cluster"),
        ('{"chief": "h:1"}', "is not a TF_CONFIG cluster with task chief 0: "),
        ('{"worker": ["h:1"]}', "is not a TF_CONFIG cluster with task chief 0: "),
    ],
)
def test_a_tf_config_cluster_that_does_not_hold_this_node_is_refused_saying_why(cluster: str, said: str) -> None:
    metadata = cluster_metadata()
    [key] = metadata.project
    metadata.project[key] = cluster
    with pytest.raises(SettingsError, match=re.escape(said)) as refused:
        read_settings(metadata)  # type: ignore[arg-type]
    assert refused.value.key == key


def test_the_recover_list_belongs_to_the_chief_alone() -> None:
    metadata = cluster_metadata(node="worker-0")
    metadata.instance[KEYS.recover] = "worker-1=multiworker-worker-1"
    with pytest.raises(SettingsError, match="not the chief"):
        read_settings(metadata)  # type: ignore[arg-type]


@pytest.mark.parametrize("job_dir", ["gs://acme-ml-models/vision/run1", "gs://your-gcp-project_multiworker/jobs/x"])
def test_a_job_dir_of_the_stacks_bucket_or_a_folder_of_a_teams_own_is_read_as_given(job_dir: str) -> None:
    metadata = cluster_metadata()
    metadata.instance[KEYS.job_dir] = job_dir
    job = read_settings(metadata).job  # type: ignore[arg-type]
    assert job is not None
    assert job.job_dir == job_dir


def test_job_env_reads_back_as_the_program_wrote_it() -> None:
    metadata = cluster_metadata()
    metadata.instance[KEYS.job_env] = '{"TF_USE_LEGACY_KERAS":"1","TEAM":"a b $(c)"}'
    job = read_settings(metadata).job  # type: ignore[arg-type]
    assert job is not None
    assert job.env == (("TF_USE_LEGACY_KERAS", "1"), ("TEAM", "a b $(c)"))
    del metadata.instance[KEYS.job_env]
    job = read_settings(metadata).job  # type: ignore[arg-type]
    assert job is not None
    assert job.env == ()


@pytest.mark.parametrize("name", ["multiworker", "ownpackage"])
def test_a_queued_jobs_spec_reads_as_the_stacks_own_job_in_metadata_does(name: str) -> None:
    """A spec holds the job's metadata values (what `submit` writes): the same code checks them."""
    metadata = cluster_metadata(name)
    own = read_settings(metadata)  # type: ignore[arg-type]
    assert own.job is not None
    spec = {key: value for key, value in metadata.instance.items() if key in SPEC_KEYS}
    job_dir = queued_job_dir(own.bucket, 7, "tuned")
    assert job_from_spec(read_spec(spec_bytes(spec), spec_sha256(spec_bytes(spec))), own.bucket, job_dir) == replace(
        own.job, job_dir=job_dir
    )
    with pytest.raises(SettingsError, match=f"metadata {KEYS.trainer_args} is not a JSON list"):
        job_from_spec({**spec, KEYS.trainer_args: "--epochs 2"}, own.bucket, job_dir)
    with pytest.raises(SettingsError, match=f"metadata {KEYS.job_mode} of a queued job must name a job"):
        job_from_spec({KEYS.job_mode: "none"}, own.bucket, job_dir)


def test_idle_seconds_is_read_whole_and_bounded() -> None:
    metadata = cluster_metadata("multiworker")
    # A stack that runs a queue says how long its nodes idle; without the key, no queue.
    assert read_settings(metadata).idle_seconds == 600  # type: ignore[arg-type]
    del metadata.instance[KEYS.idle_seconds]
    assert read_settings(metadata).idle_seconds is None  # type: ignore[arg-type]
    metadata.instance[KEYS.idle_seconds] = "600"
    assert read_settings(metadata).idle_seconds == 600  # type: ignore[arg-type]
    for bad in ("-1", "1e3", "604801", "60 "):
        metadata.instance[KEYS.idle_seconds] = bad
        with pytest.raises(SettingsError, match=KEYS.idle_seconds):
            read_settings(metadata)  # type: ignore[arg-type]
