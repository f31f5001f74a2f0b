"""A stack inside a company's landing zone: its machines join a subnetwork of the organisation's
Shared VPC (trainstack:network) instead of a network of its own, asserted on the Pulumi mocks'
recorded inputs; bad network paths and a subnetwork in another region are refused naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stack_helpers import DELETE, TPU_STACK, base_config, plan_of, with_changes, write_stack
from trainstack.cloud.planning import Plan
from trainstack.commands.main import main

NETWORK = "projects/acme-net-host/global/networks/shared-vpc"
SUBNETWORK = "projects/acme-net-host/regions/us-central1/subnetworks/ml-vision"
OWN_NETWORK_TYPES = (
    "gcp:compute/network:Network",
    "gcp:compute/subnetwork:Subnetwork",
    "gcp:compute/router:Router",
    "gcp:compute/routerNat:RouterNat",
)
FIREWALL = "gcp:compute/firewall:Firewall"


def joined(firewall: str) -> dict[str, Any]:
    return {"trainstack:network": {"network": NETWORK, "subnetwork": SUBNETWORK, "firewall": firewall}}


def plan_with(tmp_path: Path, config: dict[str, Any]) -> Plan:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return plan_of(write_stack(tmp_path, config))


def test_a_cluster_on_a_shared_vpc_creates_no_network_and_with_firewall_host_no_rule(tmp_path: Path) -> None:
    plan = plan_with(tmp_path, with_changes(base_config(), joined("host")))
    for kind in (*OWN_NETWORK_TYPES, FIREWALL):
        assert not plan.of_type(kind), kind
    instances = plan.of_type("gcp:compute/instance:Instance")
    assert len(instances) == 3
    for vm in instances:
        assert [nic["subnetwork"] for nic in vm.inputs["networkInterfaces"]] == [SUBNETWORK]
    [rules] = [note for note in plan.notes if note.startswith("network: firewall: host")]
    assert f"{NETWORK} must have: allow tcp:22 from 35.235.240.0/20 (IAP)" in rules
    assert f"allow tcp:{plan.resolved.cluster.port} from test-train@" in rules  # type: ignore[union-attr]
    assert any("roles/compute.networkUser" in note for note in plan.notes)


def test_with_firewall_stack_its_rules_go_in_the_host_projects_network(tmp_path: Path) -> None:
    plan = plan_with(tmp_path, with_changes(base_config(), joined("stack")))
    for kind in OWN_NETWORK_TYPES:
        assert not plan.of_type(kind), kind
    rules = {rule.name: rule.inputs for rule in plan.of_type(FIREWALL)}
    assert len(rules) == 2
    for rule in rules.values():
        assert (rule["project"], rule["network"]) == ("acme-net-host", NETWORK)
    ports = sorted(rule["allows"][0]["ports"][0] for rule in rules.values())
    assert ports == sorted(["22", str(plan.resolved.cluster.port)])  # type: ignore[union-attr]


def test_a_stack_without_the_key_still_makes_its_own_network(tmp_path: Path) -> None:
    plan = plan_with(tmp_path, base_config())
    for kind in OWN_NETWORK_TYPES:
        assert len(plan.of_type(kind)) == 1, kind
    assert not [note for note in plan.notes if note.startswith("network:")]


def test_a_tpu_vm_and_a_notebook_join_the_subnetwork_too(tmp_path: Path) -> None:
    tpu = plan_with(tmp_path / "tpu", with_changes(TPU_STACK, joined("host")))
    [vm] = tpu.of_type("gcp:tpu/v2Vm:V2Vm")
    config = vm.inputs["networkConfig"]
    assert (config["network"], config["subnetwork"]) == (NETWORK, SUBNETWORK)
    notebook_config = with_changes(
        base_config(),
        {
            **joined("host"),
            "trainstack:cluster": DELETE,
            "trainstack:job": DELETE,
            "trainstack:notebook": {"machine_type": "n1-standard-4"},
        },
    )
    notebook = plan_with(tmp_path / "notebook", notebook_config)
    [instance] = notebook.of_type("gcp:workbench/instance:Instance")
    [nic] = instance.inputs["gceSetup"]["networkInterfaces"]
    assert (nic["network"], nic["subnet"]) == (NETWORK, SUBNETWORK)


@pytest.mark.parametrize(
    ("network", "key", "words"),
    [
        (
            {"network": NETWORK, "subnetwork": SUBNETWORK.replace("us-central1", "europe-west4")},
            "trainstack:network.subnetwork",
            "is in europe-west4, not in gcp:region us-central1",
        ),
        ({"network": NETWORK, "subnetwork": SUBNETWORK + "\n"}, "trainstack:network.subnetwork", "is not a subnetwork"),
        ({"network": "shared-vpc", "subnetwork": SUBNETWORK}, "trainstack:network.network", "is not a VPC network"),
        (
            {"network": NETWORK.replace("acme-net-host", "other-host"), "subnetwork": SUBNETWORK},
            "trainstack:network",
            "a subnetwork belongs to its network's project",
        ),
        ({"subnetwork": SUBNETWORK, "firewall": "host"}, "trainstack:network.network", ""),
        ({"network": NETWORK, "subnetwork": SUBNETWORK, "firewall": "both"}, "trainstack:network.firewall", ""),
    ],
    ids=["other-region", "trailing-newline", "not-a-path", "two-projects", "no-network", "bad-firewall"],
)
def test_a_network_that_is_not_one_to_join_is_refused_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], network: dict[str, Any], key: str, words: str
) -> None:
    path = write_stack(tmp_path, with_changes(base_config(), {"trainstack:network": network}))
    assert main(["validate", "--stack-file", str(path)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line.strip() for line in err.splitlines() if line.strip().startswith(key)]
    assert lines, err
    assert any(words in line for line in lines), err
