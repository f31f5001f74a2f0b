"""The resolved stack: node names, effective GPUs, TF_CONFIG, strategy and prices, each
checked against figures written out by hand."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest

import trainstack_contract as contract
from stack_helpers import base_config, with_changes
from trainer.strategy import ClusterInfo, choose_strategy
from trainstack.base.errors import StackConfigError
from trainstack.stackmodel.configmap import parse_stack_config
from trainstack.stackmodel.feasibility import parse_and_check
from trainstack.stackmodel.resolved import ResolvedStack, resolve_stack


def resolved(changes: dict[str, Any] | None = None, stack: str = "test") -> ResolvedStack:
    config = base_config()
    for key, value in (changes or {}).items():
        config[key] = value
    return resolve_stack(parse_and_check(stack, config))


# The chief's shape, and each worker's in these tests.
T4_NODE = {"machine_type": "n1-standard-8", "accelerator": {"type": "nvidia-tesla-t4", "count": 2}}


def cluster(**pools: Any) -> dict[str, Any]:
    return {"chief": T4_NODE, **pools}


def test_nodes_are_named_once_for_status_objects_logs_and_vms() -> None:
    stack = resolved({"trainstack:cluster": cluster(workers={"count": 2, **T4_NODE})})
    assert stack.cluster is not None
    assert [(n.role, n.index, n.name, n.vm_name) for n in stack.cluster.nodes] == [
        ("chief", 0, "chief", "test-chief"),
        ("worker", 0, "worker-0", "test-worker-0"),
        ("worker", 1, "worker-1", "test-worker-1"),
    ]
    assert stack.bucket_name == "test-project-123_test"
    assert stack.job_dir == "gs://test-project-123_test/jobs/flowers_mwms"
    assert stack.vm_names == ["test-chief", "test-worker-0", "test-worker-1"]


def test_the_tf_config_cluster_lists_internal_names_by_role_in_task_order() -> None:
    stack = resolved(
        {
            "trainstack:cluster": cluster(
                workers={"count": 2, **T4_NODE},
                parameter_servers={"count": 1, "machine_type": "n1-highmem-8"},
            )
        }
    )
    assert stack.cluster is not None
    suffix = "us-central1-a.c.test-project-123.internal:2222"
    assert stack.cluster.strategy == "parameter_server"
    assert stack.cluster.tf_cluster == {
        "chief": [f"test-chief.{suffix}"],
        "worker": [f"test-worker-0.{suffix}", f"test-worker-1.{suffix}"],
        "ps": [f"test-ps-0.{suffix}"],
    }
    assert stack.cluster.training_port == 2222
    # A parameter server takes no GPU and boots the CPU image.
    ps = stack.cluster.nodes[-1]
    assert ps.accelerator is None
    assert ps.image.purpose == "cpu"


def test_one_machine_needs_no_cluster_and_no_port() -> None:
    stack = resolved({"trainstack:cluster": cluster()})
    assert stack.cluster is not None
    assert stack.cluster.strategy == "mirrored"
    assert stack.cluster.tf_cluster == {}
    assert stack.cluster.training_port is None


def test_built_in_gpus_are_the_nodes_gpus_and_are_priced() -> None:
    """a2-highgpu-1g brings one A100 (machine_types.csv): not attached, but there, and paid for:
    0.73948 for the host + 2.933908 for the A100 (gpus.csv) + 200 GB pd-balanced at 0.10/730."""
    stack = resolved({"trainstack:cluster": {"chief": {"machine_type": "a2-highgpu-1g"}}})
    assert stack.cluster is not None
    [chief] = stack.cluster.nodes
    assert chief.accelerator is not None
    assert (chief.accelerator.type, chief.accelerator.count) == (
        "nvidia-tesla-a100",
        1,
    )
    assert chief.attach_accelerator is False
    assert chief.image.purpose == "gpu"
    assert chief.cost.usd_per_hour == pytest.approx(0.73948 + 2.933908 + 200 * 0.10 / 730, abs=1e-9)
    assert stack.cluster.strategy == "one_device"


def test_a_notebook_on_a_gpu_machine_type_gets_and_pays_for_its_gpu() -> None:
    stack = resolved({"trainstack:cluster": None, "trainstack:notebook": {"machine_type": "a2-highgpu-1g"}})
    assert stack.notebook is not None
    assert stack.notebook.workbench_accelerator_type == "NVIDIA_TESLA_A100"
    assert stack.notebook.cost.usd_per_hour == pytest.approx(0.73948 + 2.933908 + 150 * 0.10 / 730, abs=1e-9)
    assert stack.vm_names == ["test-notebook"]


def test_a_tpu_slice_is_priced_per_chip() -> None:
    """v2-8 is 4 chips (8 cores, 2 per chip) at 1.125 per chip-hour (tpu_generations.csv)."""
    stack = resolved(
        {
            "trainstack:cluster": None,
            "trainstack:tpu": {"accelerator_type": "v2-8", "runtime_version": "tpu-vm-tf-2.18.0-pjrt"},
            "trainstack:zone": "us-central1-b",
        }
    )
    assert stack.tpu is not None
    assert stack.tpu.cost.usd_per_hour == pytest.approx(4 * 1.125)
    assert (stack.tpu.name, stack.tpu.vm_name, stack.tpu.tensorflow_minor) == ("tpu", "test-tpu", "2.18")
    assert stack.tpu.trainer_args[-2:] == ("--tpu", "local")


def test_a_part_without_a_price_makes_the_total_unknown_not_lower() -> None:
    # a3-ultragpu-8g boots from hyperdisk-balanced, which disks.csv has no price for.
    stack = resolved(
        {
            "trainstack:cluster": {"chief": {"machine_type": "a3-ultragpu-8g", "spot": True}},
            "trainstack:zone": "us-central1-b",
        }
    )
    assert stack.costs[0].usd_per_hour is None
    assert stack.hourly_usd is None


# Every valid shape: parameter servers need workers.
SHAPES = [(w, p, g) for w, p, g in itertools.product([0, 1, 3], [0, 2], [0, 1, 2, 4]) if w or not p]


@pytest.mark.parametrize(("workers", "parameter_servers", "gpus"), SHAPES)
def test_auto_means_the_same_strategy_to_the_stack_and_to_the_trainer(
    workers: int, parameter_servers: int, gpus: int
) -> None:
    """One rule, two readers: the stack resolves `auto` from its shape, the trainer from
    TF_CONFIG and the GPUs it sees. For every shape both must choose alike."""
    accelerator = {"accelerator": {"type": "nvidia-tesla-t4", "count": gpus}} if gpus else {}
    pools: dict[str, Any] = {"chief": {"machine_type": "n1-standard-8", **accelerator}}
    if workers:
        pools["workers"] = {"count": workers, "machine_type": "n1-standard-8", **accelerator}
    if parameter_servers:
        pools["parameter_servers"] = {"count": parameter_servers, "machine_type": "n1-highmem-8"}
    stack = resolved({"trainstack:cluster": pools})
    assert stack.cluster is not None
    tf_config = {"cluster": stack.cluster.tf_cluster or {}, "task": {"type": "chief", "index": 0}}
    info = ClusterInfo(cluster=tf_config["cluster"], task_type="chief" if stack.cluster.tf_cluster else None, task_id=0)
    assert choose_strategy(contract.AUTO, info, num_gpus=gpus, tpu=None) == stack.cluster.strategy
    assert json.loads(contract.tf_config(stack.cluster.tf_cluster, "chief", 0))["task"] == {"type": "chief", "index": 0}


def test_bucket_names_are_unique_per_project_and_stack() -> None:
    """Defect: project team-a-project + stack prod and project team-a + stack project-prod
    both made the global bucket name team-a-project-prod."""
    from trainstack.stackmodel.naming import default_bucket_name

    assert default_bucket_name("team-a-project", "prod") != default_bucket_name("team-a", "project-prod")
    for project, name in (("team-a-project", "prod"), ("team-a", "project-prod")):
        config = base_config()
        config["gcp:project"] = project
        stack = resolve_stack(parse_stack_config(name, config))
        assert stack.bucket_name == f"{project}_{name}"


def test_an_existing_stack_keeps_its_bucket_by_naming_it() -> None:
    config = base_config()
    config["trainstack:storage"] = {"bucket": "test-project-123-test"}
    stack = resolve_stack(parse_stack_config("test", config))
    assert stack.bucket_name == "test-project-123-test"
    assert stack.bucket_uri == "gs://test-project-123-test"


@pytest.mark.parametrize("bucket", ["ab", "Upper-case", "has.dots.in.it", "goog-thing", "my-google-bucket", "a" * 64])
def test_a_bucket_name_cloud_storage_refuses_is_refused(bucket: str) -> None:
    config = base_config()
    config["trainstack:storage"] = {"bucket": bucket}
    with pytest.raises(StackConfigError, match=re.escape("trainstack:storage.bucket")):
        parse_stack_config("test", config)


TPU = {"accelerator_type": "v2-8", "runtime_version": "tpu-vm-tf-2.18.0-pjrt"}


def test_a_stack_with_a_job_runs_the_queue_and_idles_ten_minutes_by_default() -> None:
    stack = resolved()
    assert stack.cluster is not None
    assert stack.runs_queue
    assert stack.cluster.idle_seconds == 600
    assert stack.idle_seconds == 600


def test_idle_minutes_set_makes_a_stack_without_a_job_run_the_queue() -> None:
    """A stack of machines that boot ready waits for submitted jobs only where it says how long."""
    without = resolved({"trainstack:job": None})
    assert not without.runs_queue
    assert without.idle_seconds is None
    assert without.cluster is not None
    assert without.cluster.idle_seconds is None
    standing = resolved({"trainstack:job": None, "trainstack:cluster": cluster(idle_minutes=30)})
    assert standing.runs_queue
    assert standing.idle_seconds == 30 * 60
    assert resolved({"trainstack:cluster": cluster(idle_minutes=0)}).idle_seconds == 0


def test_a_tpu_vm_takes_its_own_idle_minutes() -> None:
    stack = resolved(
        {
            "trainstack:cluster": None,
            "trainstack:job": None,
            "trainstack:tpu": {**TPU, "idle_minutes": 45},
            "trainstack:zone": "us-central1-b",
        }
    )
    assert stack.tpu is not None
    assert stack.runs_queue
    assert stack.tpu.idle_seconds == stack.idle_seconds == 45 * 60


def test_a_notebook_alone_runs_no_queue_even_with_a_job() -> None:
    stack = resolved({"trainstack:cluster": None, "trainstack:notebook": {"machine_type": "n1-standard-8"}})
    assert not stack.runs_queue
    assert stack.idle_seconds is None


def test_the_backup_interval_key_reaches_the_trainer_in_seconds_and_job_args_may_not_set_it() -> None:
    def dotted(changes: dict[str, Any]) -> ResolvedStack:
        return resolve_stack(parse_and_check("test", with_changes(base_config(), changes)))

    stack = dotted({"trainstack:job.save_every_minutes": 2})
    assert stack.cluster is not None
    args = list(stack.cluster.trainer_args)
    assert args[args.index("--save-every-seconds") + 1] == "120"
    default = resolved()
    assert default.cluster is not None
    assert "--save-every-seconds" not in default.cluster.trainer_args
    with pytest.raises(StackConfigError, match=r"trainstack:job\.save_every_minutes"):
        dotted({"trainstack:job.args": ["--save-every-seconds", "5"]})
