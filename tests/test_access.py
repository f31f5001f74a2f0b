"""Teammates' access: exactly what IAP SSH through OS Login and the notebook need, per resource."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stack_helpers import base_config, plan_of, write_stack
from trainstack.commands.main import main

MEMBERS = ["user:ana@example.com", "group:ml-team@example.com"]
PROJECT_BINDING = "gcp:projects/iAMMember:IAMMember"


def with_access(config: dict[str, Any], members: list[str] = MEMBERS) -> dict[str, Any]:
    config["trainstack:access"] = {"members": members}
    return config


def test_each_member_gets_tunnel_and_login_on_each_cluster_vm_and_act_as_on_its_account(tmp_path: Path) -> None:
    plan = plan_of(write_stack(tmp_path, with_access(base_config())))
    vms = {vm.inputs["name"] for vm in plan.of_type("gcp:compute/instance:Instance")}
    assert len(vms) == 3
    tunnels = plan.of_type("gcp:iap/tunnelInstanceIAMMember:TunnelInstanceIAMMember")
    instance_grants = plan.of_type("gcp:compute/instanceIAMMember:InstanceIAMMember")
    logins = [b for b in instance_grants if b.inputs["member"] in MEMBERS]
    # The rest are the machines' own (the chief starting a preempted Spot worker again).
    assert {b.inputs["member"] for b in instance_grants if b not in logins} == {
        "serviceAccount:test-train@test-project-123.iam.gserviceaccount.com"
    }
    assert {(t.inputs["instance"], t.inputs["member"], t.inputs["role"]) for t in tunnels} == {
        (vm, m, "roles/iap.tunnelResourceAccessor") for vm in vms for m in MEMBERS
    }
    assert {(b.inputs["instanceName"], b.inputs["member"], b.inputs["role"]) for b in logins} == {
        (vm, m, "roles/compute.osLogin") for vm in vms for m in MEMBERS
    }
    act_as = plan.of_type("gcp:serviceaccount/iAMMember:IAMMember")
    assert {(b.inputs["member"], b.inputs["role"]) for b in act_as} == {
        (m, "roles/iam.serviceAccountUser") for m in MEMBERS
    }
    [account] = [a for a in plan.of_type("gcp:serviceaccount/account:Account") if a.inputs["accountId"] == "test-train"]
    assert all(
        b.inputs["serviceAccountId"].endswith(account.inputs["accountId"] + "@test-project-123.iam.gserviceaccount.com")
        for b in act_as
    )
    # Nothing project-wide for a member: project bindings are the machines' own.
    assert not [b for b in plan.of_type(PROJECT_BINDING) if b.inputs["member"] in MEMBERS]


def test_no_access_block_grants_nothing_to_people(tmp_path: Path) -> None:
    plan = plan_of(write_stack(tmp_path, base_config()))
    assert plan.of_type("gcp:iap/tunnelInstanceIAMMember:TunnelInstanceIAMMember") == []
    assert plan.of_type("gcp:serviceaccount/iAMMember:IAMMember") == []


def test_notebook_access_is_act_as_on_its_account_and_viewer_on_the_instance(tmp_path: Path) -> None:
    config = base_config()
    del config["trainstack:cluster"], config["trainstack:job"]
    config["trainstack:notebook"] = {"machine_type": "n1-standard-4"}
    plan = plan_of(write_stack(tmp_path, with_access(config, MEMBERS[:1])))
    [viewer] = plan.of_type("gcp:workbench/instanceIamMember:InstanceIamMember")
    assert (viewer.inputs["member"], viewer.inputs["role"]) == (MEMBERS[0], "roles/notebooks.viewer")
    [act_as] = plan.of_type("gcp:serviceaccount/iAMMember:IAMMember")
    assert act_as.inputs["serviceAccountId"].endswith("test-nb@test-project-123.iam.gserviceaccount.com")


def test_a_tpu_stack_grants_no_project_wide_login_and_says_so(tmp_path: Path) -> None:
    config = base_config()
    del config["trainstack:cluster"]
    config["trainstack:zone"] = "us-central1-b"
    config["trainstack:tpu"] = {"accelerator_type": "v2-8", "runtime_version": "tpu-vm-tf-2.18.0-pjrt"}
    plan = plan_of(write_stack(tmp_path, with_access(config)))
    assert not [b for b in plan.of_type(PROJECT_BINDING) if b.inputs["member"] in MEMBERS]
    assert any("TPU VMs have no per-VM IAM" in note for note in plan.notes)


@pytest.mark.parametrize(
    ("members", "words"),
    [
        (["ana@example.com"], "an IAM principal"),
        (["user:ana@example.com\n"], "an IAM principal"),
        (["allUsers"], "an IAM principal"),
        (["domain:example.com"], "an IAM principal"),
        (["user:ana@example.com", "user:ana@example.com"], "listed more than once"),
    ],
)
def test_access_members_must_be_named_principals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], members: list[str], words: str
) -> None:
    path = write_stack(tmp_path, with_access(base_config(), members))
    assert main(["validate", "--stack-file", str(path)]) == 1
    err = capsys.readouterr().err
    assert "trainstack:access.members" in err and words in err, err
