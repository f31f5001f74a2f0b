"""Teammates' access: exactly what IAP SSH through OS Login and the notebook need, per resource."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stack_helpers import DELETE, TPU_STACK, admits, base_config, plan_of, with_changes, write_stack
from trainstack.cloud.planning import Plan
from trainstack.commands.main import main

MEMBERS = ["user:ana@example.com", "group:ml-team@example.com"]
PROJECT_BINDING = "gcp:projects/iAMMember:IAMMember"
BUCKET_GRANT = "gcp:storage/bucketIAMMember:BucketIAMMember"
INSTANCE_GRANT = "gcp:compute/instanceIAMMember:InstanceIAMMember"
LOGIN = "roles/compute.osLogin"


def with_access(config: dict[str, Any], members: list[str] = MEMBERS) -> dict[str, Any]:
    config["trainstack:access"] = {"members": members}
    return config


def test_each_member_gets_tunnel_and_login_on_each_cluster_vm_and_act_as_on_its_account(tmp_path: Path) -> None:
    plan = plan_of(write_stack(tmp_path, with_access(base_config())))
    vms = {vm.inputs["name"] for vm in plan.of_type("gcp:compute/instance:Instance")}
    assert len(vms) == 3
    tunnels = plan.of_type("gcp:iap/tunnelInstanceIAMMember:TunnelInstanceIAMMember")
    instance_grants = plan.of_type("gcp:compute/instanceIAMMember:InstanceIAMMember")
    logins = [b for b in instance_grants if b.inputs["member"] in MEMBERS and b.inputs["role"] == LOGIN]
    # The rest are the members' start grants (a queued job: test_queue_*) and the machines' own
    # (the chief starting a preempted Spot worker again).
    assert {b.inputs["member"] for b in instance_grants if b.inputs["member"] not in MEMBERS} == {
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


@pytest.fixture
def tpu_plan(tmp_path: Path) -> Plan:
    """The base stack with teammates' access, on a TPU VM instead of its cluster."""
    tpu = {key: TPU_STACK[key] for key in ("trainstack:zone", "trainstack:tpu")}
    return plan_of(
        write_stack(tmp_path, with_access(with_changes(base_config(), {**tpu, "trainstack:cluster": DELETE})))
    )


def test_a_tpu_stack_grants_no_project_wide_login_and_says_so(tpu_plan: Plan) -> None:
    plan = tpu_plan
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
        # The accounts the stack's own machines run as (the base stack is named "test"), and
        # Compute Engine's default one: a machine that could queue jobs could run code on all.
        (
            ["serviceAccount:test-train@test-project-123.iam.gserviceaccount.com"],
            "is an account the stack's machines run as",
        ),
        (["serviceAccount:test-nb@test-project-123.iam.gserviceaccount.com"], "an account the stack's machines run as"),
        (["serviceAccount:123456789012-compute@developer.gserviceaccount.com"], "an account the stack's machines"),
    ],
)
def test_access_members_must_be_named_principals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], members: list[str], words: str
) -> None:
    path = write_stack(tmp_path, with_access(base_config(), members))
    assert main(["validate", "--stack-file", str(path)]) == 1
    err = capsys.readouterr().err
    assert "trainstack:access.members" in err, err
    assert words in err, err


def _member_bucket_grants(plan: Any) -> dict[str, list[dict[str, Any]]]:
    grants: dict[str, list[dict[str, Any]]] = {}
    for grant in plan.of_type(BUCKET_GRANT):
        grants.setdefault(grant.inputs["member"], []).append(grant.inputs)
    return grants


def test_queue_each_member_may_submit_list_and_cancel_and_nothing_more_in_the_bucket(tmp_path: Path) -> None:
    """`submit` creates code and a spec and replaces the index; `jobs` reads; `cancel` replaces
    the index; `tune` creates and replaces its study: per member, create-only under
    trainstack/code/ and trainstack/queue/specs/, replace of trainstack/queue/index.json alone
    and under trainstack/tune/, read of the bucket."""
    plan = plan_of(write_stack(tmp_path, with_access(base_config())))
    bucket = "test-project-123_test"
    grants = _member_bucket_grants(plan)
    for member in MEMBERS:
        mine = grants[member]
        assert sorted((g["role"], bool(g.get("condition"))) for g in mine) == [
            ("roles/storage.objectCreator", True),
            ("roles/storage.objectCreator", True),
            ("roles/storage.objectUser", True),
            ("roles/storage.objectUser", True),
            ("roles/storage.objectViewer", False),
        ]
        for name, writes in [
            ("trainstack/code/trainer-0123abcd.zip", {"roles/storage.objectCreator"}),
            ("trainstack/queue/specs/" + "a" * 64 + ".json", {"roles/storage.objectCreator"}),
            ("trainstack/queue/index.json", {"roles/storage.objectUser"}),
            ("trainstack/queue/index.json.bak", set()),
            ("trainstack/agent/trainstack-agent-0123456789abcdef.pyz", set()),
            ("trainstack/python/node.txt", set()),
            ("trainstack/queue/other.json", set()),
            ("trainstack/tune/lr_study/study.json", {"roles/storage.objectUser"}),
            ("trainstack/tunes/x.json", set()),
            ("jobs/q1_a/status/job.json", set()),
        ]:
            assert {
                g["role"] for g in mine if g.get("condition") and admits(g["condition"]["expression"], bucket, name)
            } == writes, name


def test_queue_each_member_may_start_each_cluster_vm_with_get_and_start_alone(tmp_path: Path) -> None:
    plan = plan_of(write_stack(tmp_path, with_access(base_config())))
    vms = {vm.inputs["name"] for vm in plan.of_type("gcp:compute/instance:Instance")}
    [role] = [
        r for r in plan.of_type("gcp:projects/iAMCustomRole:IAMCustomRole") if "queue_start" in r.inputs["roleId"]
    ]
    assert sorted(role.inputs["permissions"]) == ["compute.instances.get", "compute.instances.start"]
    starts = [g for g in plan.of_type(INSTANCE_GRANT) if g.inputs["role"].endswith(role.inputs["roleId"])]
    assert {(g.inputs["instanceName"], g.inputs["member"]) for g in starts} == {(vm, m) for vm in vms for m in MEMBERS}


def test_queue_machine_accounts_get_nothing_new(tmp_path: Path) -> None:
    """The machines' grants are the same with or without teammates who queue jobs."""

    def machine_grants(config: dict[str, Any]) -> list[tuple[str, str, str, str]]:
        plan = plan_of(write_stack(tmp_path, config))
        return sorted(
            (r.type, r.inputs["member"], r.inputs["role"], str(r.inputs.get("condition")))
            for r in plan.resources
            if isinstance(r.inputs.get("member"), str) and r.inputs["member"] not in MEMBERS
        )

    assert machine_grants(with_access(base_config())) == machine_grants(base_config())


def test_queue_no_grants_where_the_machines_run_no_queue(tmp_path: Path) -> None:
    config = with_access(base_config())
    config["trainstack:job"] = "none"
    plan = plan_of(write_stack(tmp_path, config))
    assert all(g.inputs["member"] not in MEMBERS for g in plan.of_type(BUCKET_GRANT))
    assert not [r for r in plan.of_type("gcp:projects/iAMCustomRole:IAMCustomRole") if "queue" in r.inputs["roleId"]]
    config["trainstack:cluster"]["idle_minutes"] = 5
    assert set(_member_bucket_grants(plan_of(write_stack(tmp_path, config)))) >= set(MEMBERS)


def test_queue_a_tpu_stack_grants_the_bucket_but_no_start(tpu_plan: Plan) -> None:
    """A TPU VM has no per-node IAM: its start is left to a deployer, never granted project-wide."""
    plan = tpu_plan
    assert set(_member_bucket_grants(plan)) >= set(MEMBERS)
    assert not [g for g in plan.of_type(INSTANCE_GRANT) if g.inputs["member"] in MEMBERS]
    assert not [b for b in plan.of_type(PROJECT_BINDING) if b.inputs["member"] in MEMBERS]
