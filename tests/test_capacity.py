"""How each node gets its machine (`capacity`): flex-start and reservations beside on demand and
Spot, checked against Google's rules in catalog/capacity_rules.csv and planned with the
scheduling Compute Engine requires (asserted on the Pulumi mocks' recorded inputs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stack_helpers import DELETE, TPU_STACK, base_config, plan_for, plan_of, with_changes, write_stack
from trainstack.cloud.planning import Plan, PlannedResource
from trainstack.commands.main import main
from trainstack_agent.settings import SettingsError, read_settings
from trainstack_contract import METADATA_KEYS

INSTANCE = "gcp:compute/instance:Instance"
TPU_VM = "gcp:tpu/v2Vm:V2Vm"
C = "trainstack:cluster"
HOURS = 48

# Two H200 machines from flex-start (a cluster is flex-start throughout or not at all).
H200: dict[str, Any] = {
    "gcp:project": "test-project-123",
    "gcp:region": "us-central1",
    "trainstack:zone": "us-central1-b",
    "trainstack:cluster": {
        "chief": {"machine_type": "a3-ultragpu-8g", "capacity": "flex_start"},
        "workers": {"count": 1, "machine_type": "a3-ultragpu-8g", "capacity": "flex_start"},
        "max_run_hours": HOURS,
        "on_finish": "delete",
    },
    "trainstack:job": {"name": "h200", "epochs": 1},
}
# The same two machines from the named reservation h200-team: A3 Ultra is reserved by future
# reservations alone, so its VMs are reservation-bound.
RESERVED: dict[str, Any] = {
    **H200,
    "trainstack:cluster": {
        "chief": {"machine_type": "a3-ultragpu-8g", "capacity": "reservation", "reservation": "h200-team"},
        "workers": {
            "count": 1,
            "machine_type": "a3-ultragpu-8g",
            "capacity": "reservation",
            "reservation": "h200-team",
        },
        "max_run_hours": HOURS,
    },
}


def instance(plan: Plan, node: str) -> PlannedResource:
    [found] = [r for r in plan.of_type(INSTANCE) if r.inputs["name"].endswith(f"-{node}")]
    return found


class Attributes:
    """A VM's instance and project attributes as the metadata server serves them to its agent,
    from what the plan sets."""

    def __init__(self, plan: Plan, node: str, **changes: str | None) -> None:
        self.values = {**instance(plan, node).inputs["metadata"], **changes}
        items = plan.of_type("gcp:compute/projectMetadataItem:ProjectMetadataItem")
        self.project = {item.inputs["key"]: item.inputs["value"] for item in items}

    def attribute(self, key: str) -> str | None:
        return self.values.get(key)

    def project_attribute(self, key: str) -> str | None:
        return self.project.get(key)


@pytest.fixture(scope="module")
def h200_plan(tmp_path_factory: pytest.TempPathFactory) -> Plan:
    return plan_of(write_stack(tmp_path_factory.mktemp("h200"), H200))


@pytest.fixture(scope="module")
def reserved_plan(tmp_path_factory: pytest.TempPathFactory) -> Plan:
    return plan_of(write_stack(tmp_path_factory.mktemp("reserved"), RESERVED))


def test_a_flex_start_node_is_planned_with_the_scheduling_google_requires(h200_plan: Plan) -> None:
    scheduling = instance(h200_plan, "worker-0").inputs["scheduling"]
    assert scheduling["provisioningModel"] == "FLEX_START"
    assert scheduling["automaticRestart"] is False
    assert scheduling["instanceTerminationAction"] == "DELETE"
    assert scheduling["maxRunDuration"]["seconds"] == HOURS * 3600
    assert "preemptible" not in scheduling
    # Dynamic Workload Scheduler's capacity, never a reservation's.
    assert instance(h200_plan, "worker-0").inputs["reservationAffinity"] == {"type": "NO_RESERVATION"}


@pytest.mark.parametrize(("on_finish", "action"), [("stop", "STOP"), ("keep", "STOP"), ("delete", "DELETE")])
def test_a_flex_start_run_ends_stopped_or_deleted_as_on_finish_says(
    tmp_path: Path, on_finish: str, action: str
) -> None:
    """Google stops or deletes a flex-start VM at the end of its run by its termination action:
    on_finish: stop was refused as if Compute Engine always deleted it."""
    plan = plan_of(write_stack(tmp_path, with_changes(H200, {f"{C}.on_finish": on_finish})))
    for node in ("chief", "worker-0"):
        scheduling = instance(plan, node).inputs["scheduling"]
        assert scheduling["provisioningModel"] == "FLEX_START"
        assert scheduling["instanceTerminationAction"] == action


# Two A3 High machines (8 x H100) from an ordinary reservation.
A3_HIGH_RESERVED: dict[str, Any] = {
    **H200,
    "trainstack:cluster": {
        "chief": {"machine_type": "a3-highgpu-8g", "capacity": "reservation", "reservation": "h100-team"},
        "workers": {"count": 1, "machine_type": "a3-highgpu-8g", "capacity": "reservation", "reservation": "h100-team"},
        "max_run_hours": HOURS,
    },
}
H200_TEAM = {
    "type": "SPECIFIC_RESERVATION",
    "specificReservation": {"key": "compute.googleapis.com/reservation-name", "values": ["h200-team"]},
}


def test_a_reserved_a3_ultra_is_reservation_bound_to_the_reservation_it_names(reserved_plan: Plan) -> None:
    """A3 Ultra's reserved capacity comes from future reservations, whose VMs Google creates
    RESERVATION_BOUND: sent as STANDARD, `pulumi up` would fail."""
    for node in ("chief", "worker-0"):
        vm = instance(reserved_plan, node).inputs
        assert vm["scheduling"]["provisioningModel"] == "RESERVATION_BOUND"
        assert vm["scheduling"]["instanceTerminationAction"] == "STOP"
        assert vm["reservationAffinity"] == H200_TEAM


def test_a_reserved_a3_high_is_a_standard_vm_targeting_its_reservation_unless_calendar_mode(tmp_path: Path) -> None:
    plan = plan_of(write_stack(tmp_path, A3_HIGH_RESERVED))
    chief = instance(plan, "chief").inputs
    assert chief["scheduling"]["provisioningModel"] == "STANDARD"
    assert chief["reservationAffinity"]["specificReservation"]["values"] == ["h100-team"]
    calendar = with_changes(
        A3_HIGH_RESERVED, {f"{C}.chief.reservation_bound": True, f"{C}.workers.reservation_bound": True}
    )
    chief = instance(plan_of(write_stack(tmp_path, calendar, stack="calendar")), "chief").inputs
    assert chief["scheduling"]["provisioningModel"] == "RESERVATION_BOUND"
    assert chief["reservationAffinity"]["type"] == "SPECIFIC_RESERVATION"


def test_plan_and_cost_say_which_kind_of_reservation_a_node_consumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cost", "--stack-file", str(write_stack(tmp_path, A3_HIGH_RESERVED)), "--json"]) == 0
    described = {node["description"] for node in json.loads(capsys.readouterr().out)["nodes"]}
    assert described == {"a3-highgpu-8g + 8 x nvidia-h100-80gb (reservation h100-team)"}


def test_a_reservation_node_without_a_name_consumes_any_matching_reservation(tmp_path: Path) -> None:
    plan = plan_of(write_stack(tmp_path, with_changes(A3_HIGH_RESERVED, {f"{C}.chief.reservation": DELETE})))
    assert instance(plan, "chief").inputs["reservationAffinity"] == {"type": "ANY_RESERVATION"}


def test_the_agent_reads_each_nodes_capacity_from_its_metadata(h200_plan: Plan, reserved_plan: Plan) -> None:
    worker = read_settings(Attributes(h200_plan, "worker-0"))  # type: ignore[arg-type]
    chief = read_settings(Attributes(reserved_plan, "chief"))  # type: ignore[arg-type]
    assert (worker.capacity, chief.capacity) == ("flex_start", "reservation")
    # The flex-start node knows its run duration (cluster.max_run_hours), to end its job before
    # Compute Engine deletes it; the reserved one, whose machine stays, has none.
    assert (worker.max_run_seconds, chief.max_run_seconds) == (HOURS * 3600, None)
    wrong = Attributes(reserved_plan, "chief", **{METADATA_KEYS.capacity: "preemptible"})
    with pytest.raises(SettingsError, match=METADATA_KEYS.capacity):
        read_settings(wrong)  # type: ignore[arg-type]
    # A flex-start node that cannot tell when its run ends does not start (its boot stops it).
    unknown_end = Attributes(h200_plan, "worker-0", **{METADATA_KEYS.max_run_seconds: None})
    with pytest.raises(SettingsError, match="flex-start node must know when its run ends"):
        read_settings(unknown_end)  # type: ignore[arg-type]


def test_on_demand_and_spot_nodes_keep_their_arguments_and_metadata() -> None:
    plan = plan_for("multiworker")
    for resource in plan.of_type(INSTANCE):
        assert "reservationAffinity" not in resource.inputs
        assert METADATA_KEYS.capacity not in resource.inputs["metadata"]
        assert resource.inputs["scheduling"]["provisioningModel"] in ("STANDARD", "SPOT")
    assert read_settings(Attributes(plan, "worker-0")).capacity is None  # type: ignore[arg-type]


def test_capacity_spot_is_planned_as_spot_true_was(tmp_path: Path) -> None:
    spot_true = {f"{C}.workers.capacity": DELETE, f"{C}.workers.reservation": DELETE, f"{C}.workers.spot": True}
    old = plan_of(write_stack(tmp_path, with_changes(RESERVED, spot_true)))
    spot = {f"{C}.workers.capacity": "spot", f"{C}.workers.reservation": DELETE}
    new = plan_of(write_stack(tmp_path, with_changes(RESERVED, spot), stack="new"))
    assert instance(old, "worker-0").inputs["scheduling"] == instance(new, "worker-0").inputs["scheduling"]
    assert instance(new, "worker-0").inputs["scheduling"]["provisioningModel"] == "SPOT"


def test_a_reserved_tpu_vm_is_created_under_a_reservation(tmp_path: Path) -> None:
    plan = plan_of(write_stack(tmp_path, with_changes(TPU_STACK, {"trainstack:tpu.capacity": "reservation"})))
    [tpu] = plan.of_type(TPU_VM)
    assert tpu.inputs["schedulingConfig"] == {"reserved": True}


def test_cost_says_how_flex_start_and_reserved_machines_are_priced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cost", "--stack-file", str(write_stack(tmp_path, H200)), "--json"]) == 0
    flex = json.loads(capsys.readouterr().out)
    assert main(["cost", "--stack-file", str(write_stack(tmp_path, RESERVED, stack="reserved")), "--json"]) == 0
    reserved = json.loads(capsys.readouterr().out)
    assert {node["description"] for node in flex["nodes"]} == {"a3-ultragpu-8g + 8 x nvidia-h200-141gb (flex-start)"}
    assert {node["description"] for node in reserved["nodes"]} == {
        "a3-ultragpu-8g + 8 x nvidia-h200-141gb (reservation-bound to future reservation h200-team)"
    }
    # No flex-start price is known for A3 Ultra: unpriced, never shown at the list price.
    assert {node["usd_per_hour"] for node in flex["nodes"]} == {None}
    assert (
        "no flex-start price is known for a3-ultragpu-8g in us-central1 (flex_start_prices.csv), so test-chief, "
        "test-worker-0 are left unpriced rather than shown at the on-demand list price"
    ) in " ".join(flex["notes"])
    assert "bills at on-demand rates for as long as it exists, whether these machines run" in " ".join(
        reserved["notes"]
    )


INVALID: list[tuple[str, dict[str, Any], dict[str, Any], str, str]] = [
    # (case id, base, changes, key the message must name, words it must contain)
    (
        "reservation_bound_without_a_name",
        RESERVED,
        {f"{C}.chief.reservation": DELETE},
        f"{C}.chief.reservation",
        "not set, but the node is reservation-bound (a3-ultragpu-8g): a reservation-bound VM targets its future "
        "reservation by name",
    ),
    (
        "a3_ultra_from_an_ordinary_reservation",
        RESERVED,
        {f"{C}.chief.reservation_bound": False},
        f"{C}.chief.reservation_bound",
        "false, but a3-ultragpu-8g's reserved capacity comes from future reservations alone",
    ),
    (
        "reservation_bound_on_a_machine_never_so_reserved",
        RESERVED,
        {f"{C}.chief.machine_type": "a2-highgpu-1g", f"{C}.chief.reservation_bound": True},
        f"{C}.chief.reservation_bound",
        "true, but a2-highgpu-1g is not reserved by future reservations",
    ),
    (
        "reservation_bound_without_a_reservation",
        H200,
        {f"{C}.chief.reservation_bound": True},
        f"{C}.chief",
        "reservation_bound: true says how a reservation binds the VM, which only capacity: reservation has",
    ),
    (
        "h200_on_demand",
        RESERVED,
        {f"{C}.chief.capacity": DELETE, f"{C}.chief.reservation": DELETE},
        f"{C}.chief.capacity",
        "a3-ultragpu-8g cannot be created on demand; get it with capacity: spot, flex_start or reservation",
    ),
    (
        "flex_start_on_n1",
        H200,
        {f"{C}.chief": {"machine_type": "n1-standard-8", "capacity": "flex_start"}, f"{C}.workers": DELETE},
        f"{C}.chief.capacity",
        "n1-standard-8 (N1) cannot be created with flex-start; machine series that can: A2, A3, A4, G2",
    ),
    (
        "flex_start_over_7_days",
        H200,
        {f"{C}.max_run_hours": 200},
        f"{C}.max_run_hours",
        "over flex-start's bound of 168",
    ),
    (
        "flex_start_uncapped",
        H200,
        {f"{C}.max_run_hours": None, f"{C}.acknowledge_bills_until_stopped": True},
        f"{C}.max_run_hours",
        "a flex-start VM needs a run duration",
    ),
    (
        "flex_start_six_minutes",
        H200,
        {f"{C}.max_run_hours": 0.1},
        f"{C}.max_run_hours",
        "0.1 (6 minutes) is under flex-start's shortest run of 10 minutes",
    ),
    (
        "spot_and_reservation",
        RESERVED,
        {f"{C}.chief.spot": True},
        f"{C}.chief",
        "spot: true and capacity: reservation name two ways",
    ),
    (
        "reservation_with_capacity_spot",
        RESERVED,
        {f"{C}.chief.capacity": "spot"},
        f"{C}.chief",
        "reservation: h200-team names a reservation to consume, which only capacity: reservation does",
    ),
    (
        "reservation_without_capacity",
        RESERVED,
        {f"{C}.workers.capacity": DELETE},
        f"{C}.workers",
        "only capacity: reservation does (capacity is on_demand)",
    ),
    (
        "reservation_name",
        RESERVED,
        {f"{C}.chief.reservation": "H200_team"},
        f"{C}.chief.reservation",
        "a reservation name",
    ),
    (
        "flex_start_beside_spot",
        H200,
        {f"{C}.workers.capacity": "spot"},
        f"{C}.workers.capacity",
        "spot, but cluster.chief is flex-start: Compute Engine ends a flex-start VM's run after max_run_hours (stopped "
        "or deleted), and the cluster's other machines would wait for it; make every node of the cluster flex_start, "
        "or none",
    ),
    (
        "flex_start_beside_reservation",
        RESERVED,
        {f"{C}.workers.capacity": "flex_start", f"{C}.workers.reservation": DELETE, f"{C}.on_finish": "delete"},
        f"{C}.chief.capacity",
        "reservation, but cluster.workers is flex-start",
    ),
    (
        "unknown_capacity",
        H200,
        {f"{C}.workers.capacity": "preemptible"},
        f"{C}.workers.capacity",
        "'on_demand', 'spot', 'flex_start' or 'reservation'",
    ),
    (
        "tpu_flex_start",
        TPU_STACK,
        {"trainstack:tpu.capacity": "flex_start"},
        "trainstack:tpu.capacity",
        "flex_start: not for a TPU VM: TPU flex-start is requested through queued resources",
    ),
    (
        "tpu_named_reservation",
        TPU_STACK,
        {"trainstack:tpu.capacity": "reservation", "trainstack:tpu.reservation": "tpu-res"},
        "trainstack:tpu.reservation",
        "a TPU VM cannot name its reservation",
    ),
    (
        "g4_flex_start",
        H200,
        {f"{C}.chief.machine_type": "g4-standard-96", f"{C}.workers": DELETE},
        f"{C}.chief.capacity",
        "flex_start: g4-standard-96 (G4) cannot be created with flex-start",
    ),
    (
        "a4x_on_arm",
        RESERVED,
        {f"{C}.chief.machine_type": "a4x-highgpu-4g", f"{C}.workers": DELETE},
        f"{C}.chief.machine_type",
        "a4x-highgpu-4g (nvidia-gb200) is not supported: its hosts are Arm (NVIDIA Grace), and TensorFlow publishes "
        "no CUDA build for Linux on Arm",
    ),
    (
        "a3_high_in_an_a3_edge_only_zone",
        A3_HIGH_RESERVED,
        {"gcp:region": "asia-northeast3", "trainstack:zone": "asia-northeast3-a", f"{C}.workers": DELETE},
        f"{C}.chief.machine_type",
        "not offered in zone asia-northeast3-a",
    ),
    (
        "tpu_on_demand_in_a_single_tenant_zone",
        TPU_STACK,
        {
            "gcp:region": "us-east4",
            "trainstack:zone": "us-east4-a",
            "trainstack:tpu.accelerator_type": "v6e-4",
            "trainstack:tpu.runtime_version": "tpu-vm-tf-2.18.0-pjrt-v5e-and-v6",
        },
        "trainstack:tpu.capacity",
        "on_demand: v6e in us-east4-a: Google's TPU zones page marks the zone single-tenant",
    ),
]


@pytest.mark.parametrize(
    ("base", "changes", "key", "words"), [case[1:] for case in INVALID], ids=[case[0] for case in INVALID]
)
def test_invalid_capacity_is_refused_in_one_line_naming_the_key(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    base: dict[str, Any],
    changes: dict[str, Any],
    key: str,
    words: str,
) -> None:
    code = main(["validate", "--stack-file", str(write_stack(tmp_path, with_changes(base, changes)))])
    output = capsys.readouterr()
    text = output.out + output.err
    assert code == 1
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith(f"{key}:")]
    assert any(words in line for line in lines), f"{words!r} under {key} not in:\n{text}"
    assert "Traceback" not in text


@pytest.mark.parametrize(
    ("base", "changes"),
    [
        (H200, {}),
        (RESERVED, {}),
        (RESERVED, {f"{C}.workers.capacity": "spot", f"{C}.workers.reservation": DELETE}),
        (RESERVED, {f"{C}.workers.capacity": DELETE, f"{C}.workers.reservation": DELETE, f"{C}.workers.spot": True}),
        (H200, {f"{C}.max_run_hours": 168}),
        (H200, {f"{C}.chief": {"machine_type": "g4-standard-48"}, f"{C}.workers": DELETE}),
        (
            H200,
            {
                "gcp:region": "asia-northeast3",
                "trainstack:zone": "asia-northeast3-a",
                f"{C}.chief": {"machine_type": "a3-edgegpu-8g", "capacity": "spot"},
                f"{C}.workers": DELETE,
            },
        ),
        (
            TPU_STACK,
            {
                "gcp:region": "us-west1",
                "trainstack:zone": "us-west1-c",
                "trainstack:tpu.accelerator_type": "v6e-4",
                "trainstack:tpu.runtime_version": "tpu-vm-tf-2.18.0-pjrt-v5e-and-v6",
                "trainstack:tpu.capacity": "spot",
                "trainstack:tpu.on_finish": "delete",
            },
        ),
    ],
    ids=[
        "flex-start",
        "reservation",
        "reservation-and-capacity-spot",
        "reservation-and-spot-true",
        "flex-at-its-bound",
        "g4-on-demand",
        "a3-edge-in-its-own-zone",
        "tpu-spot-in-a-single-tenant-zone-that-keeps-spot",
    ],
)
def test_capacities_google_allows_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], base: dict[str, Any], changes: dict[str, Any]
) -> None:
    code = main(["validate", "--stack-file", str(write_stack(tmp_path, with_changes(base, changes)))])
    assert code == 0, capsys.readouterr()


def test_every_capacity_rule_carries_its_source() -> None:
    from trainstack.catalog import load_catalog

    rules = load_catalog().capacity
    assert rules.rows
    assert all(r.source and r.as_of[:4].isdigit() for r in rules.rows)
    assert rules.flex_start_max_run_hours == 168
    assert rules.flex_start_termination_actions == ("STOP", "DELETE")
    assert rules.flex_start_min_run_minutes == 10
    assert not rules.reservation_with_spot


@pytest.mark.parametrize("example", sorted((Path(__file__).parents[1] / "examples" / "capacity").glob("Pulumi.*.yaml")))
def test_the_capacity_examples_validate_and_plan_their_capacity(
    example: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", "--stack-file", str(example)]) == 0, capsys.readouterr()
    for vm in plan_of(example).of_type(INSTANCE):
        assert vm.inputs["scheduling"]["provisioningModel"] == "FLEX_START" or "reservationAffinity" in vm.inputs


@pytest.mark.parametrize(
    ("config", "words"),
    [
        (H200, "every machine flex-start (Dynamic Workload Scheduler), released when the job ends (48 h)"),
        (RESERVED, "every machine from a reservation, released when the job ends (48 h)"),
    ],
)
def test_the_cost_tables_first_column_names_the_capacity_it_prices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: dict[str, Any], words: str
) -> None:
    """Defect: a flex-start stack's column said "Spot where the stack sets it"."""
    assert main(["cost", "--stack-file", str(write_stack(tmp_path, config))]) == 0
    out = capsys.readouterr().out
    assert words in out
    assert "Spot" not in out.split("as configured", 1)[1].splitlines()[0]


def _validate_notes(tmp_path: Path, config: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> str:
    tmp_path.mkdir(exist_ok=True)
    assert main(["validate", "--stack-file", str(write_stack(tmp_path, config))]) == 0
    return capsys.readouterr().err


def test_validate_names_the_unconfirmed_rules_a_stack_rests_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whether a stopped flex-start VM can be started again is unconfirmed
    (capacity_rules.csv flex_start_stoppable): a stack that stops its flex-start VMs is told so
    in one line; one that deletes them, and a stack on confirmed rows alone, are not."""
    stopped = _validate_notes(tmp_path / "stop", with_changes(H200, {f"{C}.on_finish": "stop"}), capsys)
    [line] = [line for line in stopped.splitlines() if "no primary source confirms" in line]
    assert "capacity_rules.csv flex_start_stoppable" in line
    assert "trainstack catalog show --unverified" in line
    deleted = _validate_notes(tmp_path / "delete", H200, capsys)
    assert "flex_start_stoppable" not in deleted
    assert "no primary source confirms" not in _validate_notes(tmp_path / "base", base_config(), capsys)


def test_a_row_marked_unverified_is_named_only_for_the_stacks_that_use_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainstack.catalog import UnverifiedRow
    from trainstack.stackmodel import provenance

    def marked(filename: str, *key: str) -> UnverifiedRow:
        return UnverifiedRow(filename, " ".join(key), "unverified", "", "2026-11", key)

    rows = [
        marked("machine_types.csv", "n1-standard-8", "n1"),
        marked("gpu_zones.csv", "nvidia-tesla-t4", "us-central1-a"),
        marked("gpu_zones.csv", "nvidia-tesla-t4", "us-central1-b"),
        marked("machine_types.csv", "a2-highgpu-1g", "a2"),
    ]
    monkeypatch.setattr(provenance, "unverified_rows", lambda: rows)
    line = _validate_notes(tmp_path, base_config(), capsys)
    assert "rests on 2 catalog row(s)" in line
    assert "machine_types.csv n1-standard-8," in line
    assert "gpu_zones.csv nvidia-tesla-t4 us-central1-a)" in line
    assert "a2-highgpu-1g" not in line
    assert "us-central1-b" not in line


def _cost(tmp_path: Path, config: dict[str, Any], capsys: pytest.CaptureFixture[str], stack: str) -> dict[str, Any]:
    assert main(["cost", "--stack-file", str(write_stack(tmp_path, config, stack=stack)), "--json"]) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


def test_a_flex_start_a3_high_stack_is_priced_at_the_dws_skus_well_under_on_demand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two a3-highgpu-8g machines: 208 vCPUs, 1872 GiB and 8 H100 each, at the DWS Defined
    Duration SKUs of flex_start_prices.csv, against the same machines on demand."""
    flex_config = with_changes(
        H200,
        {
            f"{C}.chief.machine_type": "a3-highgpu-8g",
            f"{C}.workers.machine_type": "a3-highgpu-8g",
            f"{C}.chief.disk_gb": 200,
            f"{C}.workers.disk_gb": 200,
        },
    )
    on_demand_config = with_changes(
        flex_config, {f"{C}.chief.capacity": "on_demand", f"{C}.workers.capacity": "on_demand"}
    )
    flex = _cost(tmp_path, flex_config, capsys, "flex")
    on_demand = _cost(tmp_path, on_demand_config, capsys, "ondemand")
    disk = 200 * 0.10 / 730  # the 200 GB pd-balanced boot disk at disks.csv's price
    host = 208 * 0.010934 + 1872 * 0.000952
    assert [node["usd_per_hour"] for node in flex["nodes"]] == pytest.approx([host + 8 * 4.200761 + disk] * 2)
    assert flex["hourly_usd"] < 0.5 * on_demand["hourly_usd"]
    [note] = [n for n in flex["notes"] if n.startswith("flex-start:")]
    for sku in (
        "DWS Defined Duration A3 Core running in Americas",
        "DWS Defined Duration A3 Ram running in Americas",
        "Nvidia H100 80GB GPU attached to DWS Defined Duration VMs running in Americas",
    ):
        assert sku in note


def test_flex_start_in_a_region_without_a_known_dws_price_is_left_unpriced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = with_changes(
        H200,
        {
            "gcp:region": "us-east4",
            "trainstack:zone": "us-east4-a",
            f"{C}.chief.machine_type": "a3-highgpu-8g",
            f"{C}.workers.machine_type": "a3-highgpu-8g",
        },
    )
    report = _cost(tmp_path, config, capsys, "east")
    assert {node["usd_per_hour"] for node in report["nodes"]} == {None}
    assert any("no flex-start price is known for a3-highgpu-8g in us-east4" in n for n in report["notes"])


def test_a_g4_machine_is_planned_with_its_built_in_gpus_on_hyperdisk(tmp_path: Path) -> None:
    """G4 boots from hyperdisk-balanced alone (Google: no Persistent Disk) and its RTX PRO 6000
    GPUs come with the machine type, never as guest accelerators."""
    config = with_changes(H200, {f"{C}.chief": {"machine_type": "g4-standard-96"}, f"{C}.workers": DELETE})
    vm = instance(plan_of(write_stack(tmp_path, config)), "chief").inputs
    assert vm["machineType"] == "g4-standard-96"
    assert vm["bootDisk"]["initializeParams"]["type"] == "hyperdisk-balanced"
    assert not vm.get("guestAccelerators")
    assert vm["scheduling"]["provisioningModel"] == "STANDARD"


def test_a3_mega_hosts_bill_at_their_own_rates_above_a3_high() -> None:
    from trainstack.catalog import load_catalog

    catalog = load_catalog()
    high = catalog.machine_usd_hr("a3-highgpu-8g", "us-central1", False)
    mega = catalog.machine_usd_hr("a3-megagpu-8g", "us-central1", False)
    assert (high, mega) == (9.46006, 9.98816)
    assert mega / high == pytest.approx(1.0558, abs=1e-4)


def test_cost_names_the_parts_it_has_no_price_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A G4 boots from hyperdisk-balanced, whose price the catalog lacks, and its GPU has no
    Spot price: the total is unknown, and the note says which parts make it so."""
    config = with_changes(
        H200, {f"{C}.chief": {"machine_type": "g4-standard-48", "capacity": "spot"}, f"{C}.workers": DELETE}
    )
    report = _cost(tmp_path, config, capsys, "g4")
    assert report["hourly_usd"] is None
    [note] = [n for n in report["notes"] if n.startswith("some part has no")]
    assert "(Spot nvidia-rtx-pro-6000, hyperdisk-balanced disks)" in note
