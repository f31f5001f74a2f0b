"""Invalid stack files are rejected before any cloud call, with the key and the valid choices named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from stack_helpers import DELETE, SHIPPED_STACKS, TPU_STACK, base_config, with_changes, write_stack
from trainstack.commands.main import main
from trainstack.stackmodel.stackfile import STACKS_DIR, load_checked_stack


def mutated(changes: dict[str, Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Apply ``{"trainstack:cluster.chief.disk_gb": 0}``-style changes to a copy of the base stack."""
    return with_changes(base_config() if base is None else base, changes)


C = "trainstack:cluster"
INVALID: list[tuple[str, dict[str, Any], str, str]] = [
    # (case id, changes, key the message must name, words it must contain)
    (
        "three_t4",
        {f"{C}.chief.accelerator.count": 3, f"{C}.workers.accelerator.count": 3},
        f"{C}.chief.accelerator.count",
        "valid counts: 1, 2, 4",
    ),
    (
        "v100_x2_on_n1_standard_32",
        {
            f"{C}.chief": {"machine_type": "n1-standard-32", "accelerator": {"type": "nvidia-tesla-v100", "count": 2}},
            f"{C}.workers": DELETE,
        },
        f"{C}.chief.accelerator.count",
        "valid counts for n1-standard-32: 4, 8",
    ),
    (
        "a100_on_n1",
        {f"{C}.chief.accelerator.type": "nvidia-tesla-a100", f"{C}.chief.accelerator.count": 1, f"{C}.workers": DELETE},
        f"{C}.chief.accelerator",
        "a2-highgpu-1g",
    ),
    (
        "l4_on_n1",
        {f"{C}.chief.accelerator.type": "nvidia-l4", f"{C}.chief.accelerator.count": 1, f"{C}.workers": DELETE},
        f"{C}.chief.accelerator",
        "g2-standard-4",
    ),
    (
        "h100_on_a2",
        {
            f"{C}.chief": {"machine_type": "a2-highgpu-8g", "accelerator": {"type": "nvidia-h100-80gb", "count": 8}},
            f"{C}.workers": DELETE,
        },
        f"{C}.chief.accelerator",
        "a3-highgpu-8g",
    ),
    (
        "a100_count_not_of_machine",
        {
            f"{C}.chief": {"machine_type": "a2-highgpu-2g", "accelerator": {"type": "nvidia-tesla-a100", "count": 4}},
            f"{C}.workers": DELETE,
        },
        f"{C}.chief.accelerator",
        "a2-highgpu-4g (4)",
    ),
    (
        "a3_highgpu_1g_on_demand",
        {f"{C}.chief": {"machine_type": "a3-highgpu-1g"}, f"{C}.workers": DELETE},
        f"{C}.chief.capacity",
        "cannot be created on demand; get it with capacity: spot, flex_start or reservation",
    ),
    (
        "t4_on_a2",
        {f"{C}.chief.machine_type": "e2-standard-8", f"{C}.workers": DELETE},
        f"{C}.chief.machine_type",
        "attaches only to N1",
    ),
    ("unknown_gpu", {f"{C}.chief.accelerator.type": "nvidia-tesla-t5"}, f"{C}.chief.accelerator.type", "valid types:"),
    # The workers' GPUs are checked as the chief's are, under their own key (machine types of
    # every role: test_each_machine_of_a_cluster_reports_its_own_problem_at_once).
    (
        "unknown_gpu_on_the_workers_only",
        {f"{C}.workers.accelerator.type": "nvidia-tesla-t5"},
        f"{C}.workers.accelerator.type",
        "valid types:",
    ),
    (
        "mwms_built_in_gpu_count_mismatch",
        {
            f"{C}.chief": {"machine_type": "a2-highgpu-1g"},
            f"{C}.workers": {"count": 1, "machine_type": "a2-highgpu-2g"},
            f"{C}.strategy": "multi_worker_mirrored",
        },
        f"{C}.workers.accelerator.count",
        "chief has 1, workers have 2",
    ),
    (
        "job_arg_that_argparse_expands_to_a_stack_flag",
        {"trainstack:job.args": ["--e", "5"]},
        "trainstack:job.args[0]",
        "--e (a prefix of --epochs, which argparse expands) is set by the stack",
    ),
    (
        "job_dir_given_with_an_equals_sign",
        {"trainstack:job.args": ["--job-dir=gs://b/x=y"]},
        "trainstack:job.args[0]",
        "--job-dir is set by the stack",
    ),
    (
        "retired_k80",
        {f"{C}.chief.accelerator.type": "nvidia-tesla-k80", f"{C}.workers.accelerator.type": "nvidia-tesla-k80"},
        f"{C}.chief.accelerator.type",
        "retired",
    ),
    (
        "gpu_not_in_zone",
        {f"{C}.chief.accelerator.type": "nvidia-tesla-p100", f"{C}.workers.accelerator.type": "nvidia-tesla-p100"},
        f"{C}.chief.accelerator.type",
        # The zones suggested are the region's own that offer it, not any zone.
        "not offered in zone us-central1-a; zones in us-central1 that offer it: us-central1-c, us-central1-f",
    ),
    (
        "unknown_region_suggests_the_close_ones",
        {"gcp:region": "us-centrl1"},
        "gcp:region",
        "unknown region us-centrl1; did you mean: us-central1",
    ),
    ("zone_outside_region", {"trainstack:zone": "europe-west4-a"}, "trainstack:zone", "not in gcp:region us-central1"),
    (
        "gpu_types_not_in_one_zone",
        {
            f"{C}.chief.accelerator": {"type": "nvidia-tesla-p4", "count": 2},
            f"{C}.workers.accelerator": {"type": "nvidia-tesla-p100", "count": 2},
        },
        "trainstack:zone",
        "must be offered in its zone",
    ),
    (
        "mwms_gpu_count_mismatch",
        {f"{C}.workers.accelerator.count": 4},
        f"{C}.workers.accelerator.count",
        "same GPU count",
    ),
    (
        "ps_strategy_without_ps",
        {f"{C}.strategy": "parameter_server"},
        f"{C}.parameter_servers.count",
        "at least 1 parameter server",
    ),
    (
        "ps_strategy_without_workers",
        {
            f"{C}.strategy": "parameter_server",
            f"{C}.workers": DELETE,
            f"{C}.parameter_servers": {"count": 1, "machine_type": "n1-highmem-8"},
        },
        f"{C}.workers.count",
        "at least 1 worker",
    ),
    (
        "ps_unused_by_mwms",
        {
            f"{C}.strategy": "multi_worker_mirrored",
            f"{C}.parameter_servers": {"count": 1, "machine_type": "n1-highmem-8"},
        },
        f"{C}.parameter_servers.count",
        "does not use parameter servers",
    ),
    ("mirrored_with_workers", {f"{C}.strategy": "mirrored"}, f"{C}.strategy", "trains on one machine"),
    (
        "one_device_with_two_gpus",
        {f"{C}.strategy": "one_device", f"{C}.workers": DELETE},
        f"{C}.strategy",
        "use mirrored or auto",
    ),
    ("unknown_strategy", {f"{C}.strategy": "horovod"}, f"{C}.strategy", "'multi_worker_mirrored'"),
    ("unknown_on_finish", {f"{C}.on_finish": "hibernate"}, f"{C}.on_finish", "'delete'"),
    ("negative_workers", {f"{C}.workers.count": -1}, f"{C}.workers.count", "greater than or equal to 0"),
    ("zero_disk", {f"{C}.chief.disk_gb": 0}, f"{C}.chief.disk_gb", "greater than or equal to 50"),
    ("zero_max_run_hours", {f"{C}.max_run_hours": 0}, f"{C}.max_run_hours", "greater than or equal to 0.01"),
    (
        "too_many_workers_for_the_subnet",
        {f"{C}.workers.count": 5000},
        f"{C}.workers.count",
        "less than or equal to 3790",
    ),
    (
        "tf_config_larger_than_a_metadata_value",
        {f"{C}.workers.count": 3790, "trainstack:name": "a-twenty-four-char-name1"},
        f"{C}.workers.count",
        "more than a metadata value holds",
    ),
    ("negative_max_restarts", {f"{C}.max_restarts": -1}, f"{C}.max_restarts", "greater than or equal to 0 (got -1)"),
    ("too_many_max_restarts", {f"{C}.max_restarts": 101}, f"{C}.max_restarts", "less than or equal to 100 (got 101)"),
    ("max_restarts_as_word", {f"{C}.max_restarts": "ten"}, f"{C}.max_restarts", "valid integer (got 'ten')"),
    ("fractional_max_restarts", {f"{C}.max_restarts": 1.5}, f"{C}.max_restarts", "valid integer (got 1.5)"),
    ("negative_idle_minutes", {f"{C}.idle_minutes": -1}, f"{C}.idle_minutes", "greater than or equal to 0 (got -1)"),
    (
        "idle_minutes_over_a_week",
        {f"{C}.idle_minutes": 10081},
        f"{C}.idle_minutes",
        "less than or equal to 10080 (got 10081)",
    ),
    ("fractional_idle_minutes", {f"{C}.idle_minutes": 2.5}, f"{C}.idle_minutes", "valid integer (got 2.5)"),
    ("idle_minutes_as_word", {f"{C}.idle_minutes": "ten"}, f"{C}.idle_minutes", "valid integer (got 'ten')"),
    ("zero_gpus", {f"{C}.chief.accelerator.count": 0}, f"{C}.chief.accelerator.count", "greater than 0"),
    ("count_as_string", {f"{C}.workers.count": "2"}, f"{C}.workers.count", "valid integer"),
    ("spot_as_string", {f"{C}.workers.spot": "yes"}, f"{C}.workers.spot", "valid boolean"),
    (
        "typo_top_level_key",
        {"trainstack:clustr": {"chief": {}}},
        "trainstack:clustr",
        "unknown key; valid keys here: access, budget, cluster",
    ),
    (
        "typo_nested_key",
        {f"{C}.workers.machine": "n1-standard-8"},
        f"{C}.workers.machine",
        "valid keys here: accelerator, capacity, count, disk_gb, machine_type, reservation, reservation_bound, spot",
    ),
    (
        # The chief's annotation is a model, not an Optional: the valid keys are found through it too.
        "typo_in_a_required_section",
        {f"{C}.chief.machine": "n1-standard-8"},
        f"{C}.chief.machine",
        "valid keys here: accelerator, capacity, disk_gb, machine_type, reservation, reservation_bound, spot",
    ),
    (
        "accelerator_on_parameter_server",
        {
            f"{C}.strategy": "parameter_server",
            f"{C}.parameter_servers": {
                "count": 1,
                "machine_type": "n1-highmem-8",
                "accelerator": {"type": "nvidia-tesla-t4", "count": 1},
            },
        },
        f"{C}.parameter_servers.accelerator",
        "unknown key",
    ),
    ("unknown_machine_type", {f"{C}.chief.machine_type": "n1-standard-7"}, f"{C}.chief.machine_type", "did you mean"),
    (
        "parameter_servers_on_a_machine_with_built_in_gpus",
        {
            f"{C}.strategy": "parameter_server",
            f"{C}.parameter_servers": {"count": 1, "machine_type": "a2-highgpu-1g"},
        },
        f"{C}.parameter_servers.machine_type",
        "a2-highgpu-1g carries GPUs that parameter servers do not use",
    ),
    ("chief_missing", {f"{C}.chief": DELETE}, f"{C}.chief", "required key is missing"),
    ("missing_project", {"gcp:project": DELETE}, "gcp:project", "project id is required"),
    ("missing_zone", {"trainstack:zone": DELETE}, "trainstack:zone", "required key is missing"),
    ("nothing_to_provision", {C: DELETE}, C, "at least one of"),
    (
        "job_name_with_hyphen",
        {"trainstack:job.name": "flowers-mwms"},
        "trainstack:job.name",
        "letters, digits and underscores",
    ),
    ("job_name_starts_with_digit", {"trainstack:job.name": "1flowers"}, "trainstack:job.name", "start with a letter"),
    ("job_name_too_long", {"trainstack:job.name": "j" * 129}, "trainstack:job.name", "at most 128"),
    ("unknown_model", {"trainstack:job.model": "vgg16"}, "trainstack:job.model", "'resnet50'"),
    ("zero_epochs", {"trainstack:job.epochs": 0}, "trainstack:job.epochs", "greater than or equal to 1"),
    (
        "negative_batch",
        {"trainstack:job.batch_size_per_replica": -32},
        "trainstack:job.batch_size_per_replica",
        "greater than or equal to 1",
    ),
    ("data_not_gcs", {"trainstack:job.data": "/home/me/flowers"}, "trainstack:job.data", "gs://"),
    ("label_uppercase", {"trainstack:labels": {"Team": "vision"}}, "trainstack:labels", "lowercase"),
    (
        "bad_billing_account",
        {"trainstack:budget": {"billing_account": "not-an-account", "monthly_usd": 100}},
        "trainstack:budget.billing_account",
        "012345-6789AB-CDEF01",
    ),
    (
        "zero_budget",
        {"trainstack:budget": {"billing_account": "012345-6789AB-CDEF01", "monthly_usd": 0}},
        "trainstack:budget.monthly_usd",
        "greater than 0",
    ),
    ("bad_resource_name", {"trainstack:name": "Team_A"}, "trainstack:name", "lowercase letters, digits and hyphens"),
    (
        "notebook_three_t4",
        {
            C: DELETE,
            "trainstack:notebook": {
                "machine_type": "n1-standard-8",
                "accelerator": {"type": "nvidia-tesla-t4", "count": 3},
            },
        },
        "trainstack:notebook.accelerator.count",
        "valid counts: 1, 2, 4",
    ),
    (
        "notebook_idle_timeout_too_short",
        {C: DELETE, "trainstack:notebook": {"machine_type": "n1-standard-8", "idle_timeout_minutes": 1}},
        "trainstack:notebook.idle_timeout_minutes",
        "greater than or equal to 10",
    ),
]

INVALID_TPU: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "unknown_tpu_type",
        {"trainstack:tpu.accelerator_type": "v9-8"},
        "trainstack:tpu.accelerator_type",
        "types look like",
    ),
    ("invalid_tpu_size", {"trainstack:tpu.accelerator_type": "v2-12"}, "trainstack:tpu.accelerator_type", "v2-8"),
    (
        "tpu_not_in_zone",
        {"trainstack:tpu.accelerator_type": "v4-8"},
        "trainstack:tpu.accelerator_type",
        "us-central2-b",
    ),
    (
        "unknown_tpu_runtime",
        {"trainstack:tpu.runtime_version": "tpu-vm-tf-9.9"},
        "trainstack:tpu.runtime_version",
        "TensorFlow runtimes for v2",
    ),
    (
        "tpu_runtime_for_another_generation",
        {"trainstack:tpu.runtime_version": "tpu-vm-tf-2.18.0-pjrt-v5e-and-v6"},
        "trainstack:tpu.runtime_version",
        "tpu-vm-tf-2.18.0-pjrt-v5e-and-v6 does not support TPU v2; TensorFlow runtimes for v2:",
    ),
    (
        "multi_host_slice",
        {"trainstack:tpu.accelerator_type": "v2-32", "trainstack:tpu.runtime_version": "tpu-vm-tf-2.17.0-pod-pjrt"},
        "trainstack:tpu.accelerator_type",
        "single-host TPU VMs: v2-8",
    ),
    (
        "spot_tpu_stopped",
        {"trainstack:tpu.spot": True, "trainstack:tpu.on_finish": "stop"},
        "trainstack:tpu.on_finish",
        "cannot be started again",
    ),
    (
        "tpu_with_parameter_servers",
        {
            C: {
                "chief": {"machine_type": "n1-highcpu-16"},
                "workers": {"count": 1, "machine_type": "n1-highcpu-16"},
                "parameter_servers": {"count": 1, "machine_type": "n1-highmem-8"},
            }
        },
        f"{C}.parameter_servers.count",
        "cannot be combined with a TPU",
    ),
    (
        "tpu_idle_minutes_over_a_week",
        {"trainstack:tpu.idle_minutes": 20000},
        "trainstack:tpu.idle_minutes",
        "less than or equal to 10080 (got 20000)",
    ),
    ("tpu_negative_idle_minutes", {"trainstack:tpu.idle_minutes": -5}, "trainstack:tpu.idle_minutes", "(got -5)"),
    (
        "tpu_agent_primitive_role",
        {"trainstack:tpu.service_agent_role": "roles/editor"},
        "trainstack:tpu.service_agent_role",
        "only a service-agent role: roles/tpu.serviceAgent",
    ),
]


def run_validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["validate", "--stack-file", str(path)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize(("changes", "key", "words"), [case[1:] for case in INVALID], ids=[case[0] for case in INVALID])
def test_invalid_cluster_stack_is_rejected_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, Any], key: str, words: str
) -> None:
    code, output = run_validate(write_stack(tmp_path, mutated(changes)), capsys)
    assert code == 1
    lines = [line.strip() for line in output.splitlines() if line.strip().startswith(f"{key}:")]
    assert lines, f"no problem names {key}:\n{output}"
    assert any(words in line for line in lines), f"{words!r} not in:\n{output}"
    assert "Traceback" not in output


@pytest.mark.parametrize(
    ("changes", "key", "words"), [case[1:] for case in INVALID_TPU], ids=[case[0] for case in INVALID_TPU]
)
def test_invalid_tpu_stack_is_rejected_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, Any], key: str, words: str
) -> None:
    code, output = run_validate(write_stack(tmp_path, mutated(changes, TPU_STACK)), capsys)
    assert code == 1
    assert any(line.strip().startswith(f"{key}:") and words in line for line in output.splitlines()), output


def test_a_gpu_that_attaches_only_to_n1_suggests_exactly_the_n1_types_that_take_that_many(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    changes = {f"{C}.chief.machine_type": "e2-standard-8", f"{C}.workers": DELETE}
    code, output = run_validate(write_stack(tmp_path, mutated(changes)), capsys)
    assert code == 1
    [line] = [line for line in output.splitlines() if "N1 types that take 2 of it: " in line]
    suggested = line.split("N1 types that take 2 of it: ")[1].split(", ")
    assert all(name.startswith("n1-") for name in suggested), suggested
    # Two T4s take an N1 machine of at most 48 vCPUs and 312 GB (Compute Engine's GPU table).
    assert {"n1-standard-1", "n1-standard-32", "n1-highmem-32"} <= set(suggested)
    assert not {"n1-standard-64", "n1-highmem-64", "n1-standard-96"} & set(suggested)


@pytest.mark.parametrize(
    ("changes", "strategy"),
    [
        ({f"{C}.workers": DELETE, f"{C}.chief.accelerator.count": 1}, "one_device"),
        (
            {f"{C}.workers": DELETE, f"{C}.chief.accelerator.count": 4, f"{C}.chief.machine_type": "n1-standard-16"},
            "mirrored",
        ),
        ({f"{C}.workers": DELETE, f"{C}.chief.accelerator": DELETE}, "one_device"),
        # Built-in GPUs count as the machine's: four A100s make one machine of four devices.
        ({f"{C}.workers": DELETE, f"{C}.chief": {"machine_type": "a2-highgpu-4g"}}, "mirrored"),
        ({}, "multi_worker_mirrored"),
    ],
    ids=["one-gpu", "four-gpus", "cpu", "built-in-gpus", "workers"],
)
def test_auto_resolves_to_the_strategy_the_machines_call_for(
    tmp_path: Path, changes: dict[str, Any], strategy: str
) -> None:
    _, facts = load_checked_stack(write_stack(tmp_path, mutated(changes)))
    assert facts.strategy == strategy


def test_limits_are_inclusive_a_machine_exactly_at_a_gpu_counts_limit_is_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Four T4s take at most 96 vCPUs and 624 GB: n1-highmem-96 is both, exactly.
    changes = {
        f"{C}.workers": DELETE,
        f"{C}.chief": {"machine_type": "n1-highmem-96", "accelerator": {"type": "nvidia-tesla-t4", "count": 4}},
    }
    code, output = run_validate(write_stack(tmp_path, mutated(changes)), capsys)
    assert code == 0, output


def test_multi_worker_mirrored_takes_a_single_worker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    changes = {f"{C}.strategy": "multi_worker_mirrored", f"{C}.workers.count": 1}
    code, output = run_validate(write_stack(tmp_path, mutated(changes)), capsys)
    assert code == 0, output


@pytest.mark.parametrize(
    "changes",
    [
        # Two GPU types that the zone both offers.
        {f"{C}.workers.accelerator.type": "nvidia-tesla-v100"},
        # a3-highgpu-1g is offered only as Spot: Spot nodes of it are valid.
        {
            f"{C}.chief": {"machine_type": "a3-highgpu-1g", "spot": True},
            f"{C}.workers": {"count": 1, "machine_type": "a3-highgpu-1g", "spot": True},
        },
    ],
    ids=["two-gpu-types-in-the-zone", "spot-only-machines-as-spot"],
)
def test_valid_clusters_the_checks_must_not_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, Any]
) -> None:
    code, output = run_validate(write_stack(tmp_path, mutated(changes)), capsys)
    assert code == 0, output


def test_every_problem_is_reported_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    changes = {f"{C}.strategy": "horovod", "trainstack:job.name": "bad-name", f"{C}.chief.disk_gb": 1}
    code, output = run_validate(write_stack(tmp_path, mutated(changes)), capsys)
    assert code == 1
    for key in (f"{C}.strategy", "trainstack:job.name", f"{C}.chief.disk_gb"):
        assert f"{key}:" in output


def test_each_machine_of_a_cluster_reports_its_own_problem_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unknown = "n1-standard-7"
    changes = {
        f"{C}.strategy": "parameter_server",
        f"{C}.chief.machine_type": unknown,
        f"{C}.workers.machine_type": unknown,
        f"{C}.parameter_servers": {"count": 1, "machine_type": unknown},
    }
    code, output = run_validate(write_stack(tmp_path, mutated(changes)), capsys)
    assert code == 1
    for role in ("chief", "workers", "parameter_servers"):
        assert f"{C}.{role}.machine_type: unknown machine type '{unknown}'" in output, output


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("config: [1, 2", ["not valid YAML"]),
        ("- just\n- a list\n", ["a stack file is a mapping"]),
        ("confg:\n  gcp:project: x\n", ["unknown top-level key"]),
        ("config: 5\n", ["must be a mapping"]),
        ("config:\n  zone: us-central1-a\n", ["namespaced"]),
        # YAML syntax errors give the line and column.
        ("config:\n  gcp:project: x\n  trainstack:zone: [a, b\n", ["not valid YAML", "line 4, column 1"]),
        ('config:\n  gcp:project: "x\n', ["not valid YAML", "while scanning a quoted scalar at line 2, column 16"]),
        ("config:\n  gcp:project: x\n   bad: indent\n", ["not valid YAML", "line 3, column"]),
    ],
)
def test_malformed_stack_file_is_rejected_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, words: list[str]
) -> None:
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["validate", "--stack-file", str(path)]) == 1
    err = capsys.readouterr().err
    for word in words:
        assert word in err, err
    assert "Traceback" not in err


def test_missing_stack_lists_the_shipped_stacks(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", "--stack", "no-such-stack"])
    output = capsys.readouterr().err
    assert code == 1
    assert "no such stack file" in output
    assert "multiworker" in output


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_shipped_stacks_are_valid(stack: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--stack", stack]) == 0
    assert f"stack {stack} is valid" in capsys.readouterr().out


def test_base_stack_of_these_tests_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Guards the mutations above: each must fail for its own reason, not a broken base."""
    assert run_validate(write_stack(tmp_path, base_config()), capsys)[0] == 0
    assert run_validate(write_stack(tmp_path, mutated({}, TPU_STACK)), capsys)[0] == 0


@pytest.mark.parametrize(("value", "expected"), [(DELETE, 10), (0, 0), (100, 100)])
def test_max_restarts_defaults_to_ten_and_takes_0_to_100(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: Any, expected: int
) -> None:
    from trainstack.stackmodel.stackfile import load_stack

    path = write_stack(tmp_path, mutated({f"{C}.max_restarts": value}))
    assert run_validate(path, capsys)[0] == 0
    cluster = load_stack(path)[0].settings.cluster
    assert cluster is not None
    assert cluster.max_restarts == expected


def test_the_tf_2_18_tpu_runtime_google_documents_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defect: tpu-vm-tf-2.18.0-pjrt, named in Google's TPU docs, was rejected."""
    assert (
        run_validate(
            write_stack(tmp_path, mutated({"trainstack:tpu.runtime_version": "tpu-vm-tf-2.18.0-pjrt"}, TPU_STACK)),
            capsys,
        )[0]
        == 0
    )


def test_a_spot_tpu_without_on_finish_is_valid_and_deletes_itself(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defect: a default the user did not write (on_finish: stop) made a Spot TPU stack invalid."""
    from trainstack.cloud.prepare import prepare
    from trainstack.stackmodel.stackfile import load_stack
    from trainstack_contract import METADATA_KEYS

    path = write_stack(tmp_path, mutated({"trainstack:tpu.spot": True}, TPU_STACK))
    assert run_validate(path, capsys)[0] == 0
    _, boot = prepare(load_stack(path)[0])
    assert boot.tpu_metadata[METADATA_KEYS.on_finish] == "delete"


def test_stack_names_that_share_their_first_24_characters_get_different_resource_names() -> None:
    """Defect: two stacks whose names shared their first 24 characters got the same VM,
    service-account and bucket names, and both validated."""
    from trainstack.stackmodel.naming import RESOURCE_NAME_PATTERN, default_resource_name

    names = {
        stack: default_resource_name(stack)
        for stack in ("vision-team-experiments-2026-a", "vision-team-experiments-2026-b", "Team_A", "team-a", "dev")
    }
    assert len(set(names.values())) == len(names)
    assert names["dev"] == "dev"
    assert names["team-a"] == "team-a"
    for name in names.values():
        assert RESOURCE_NAME_PATTERN.fullmatch(name)
        assert len(f"{name}-train") <= 30


def test_one_pass_reports_a_bad_section_and_the_catalog_problems_of_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad job name used to stop parsing before the GPU rules ran: the user fixed one
    problem only to meet the next."""
    config = mutated({f"{C}.chief.accelerator.count": 3, "trainstack:job.name": "bad name!"})
    assert main(["validate", "--stack-file", str(write_stack(tmp_path, config))]) == 1
    err = capsys.readouterr().err
    assert "trainstack:job.name" in err
    assert "trainstack:cluster.chief.accelerator.count" in err
    assert "valid counts: 1, 2, 4" in err


def test_a_failing_section_is_not_also_reported_by_rules_on_its_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = mutated({"trainstack:cluster.strategy": "bogus"})
    assert main(["validate", "--stack-file", str(write_stack(tmp_path, config))]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("  ")]
    assert len(lines) == 1
    assert "trainstack:cluster.strategy" in lines[0]


def test_plan_names_placeholder_values_to_replace_before_pulumi_up(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", "multiworker", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    placeholders = [note for note in notes if note.startswith("placeholder:")]
    assert len(placeholders) == 2
    assert any("gcp:project is your-gcp-project" in note for note in placeholders)
    assert any("billing_account" in note for note in placeholders)


def test_plan_names_no_placeholder_in_a_real_stack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack-file", str(write_stack(tmp_path, base_config())), "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert not [note for note in notes if note.startswith("placeholder:")]


def test_a_value_left_empty_is_named_as_yaml_spells_it_never_as_python_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defect: "got None" reached the user for a key left empty in the stack file."""
    document = yaml.safe_load((STACKS_DIR / "Pulumi.multiworker.yaml").read_text())
    document["config"]["trainstack:cluster"]["workers"]["count"] = None
    document["config"]["gcp:project"] = None
    path = tmp_path / "Pulumi.nulls.yaml"
    path.write_text(yaml.safe_dump(document))
    assert main(["validate", "--stack-file", str(path)]) == 1
    err = capsys.readouterr().err
    assert "got null" in err, err
    assert "None" not in err, err
