"""Each rule of the pack, fed one compliant and one broken resource, in the pack's environment.

Resources are written as the engine sends them (camelCase inputs) and wrapped in CrossGuard's
own unknown-checking proxies, so the rules are exercised on the types `pulumi preview` gives
them. `tests/test_check.py` in the project's environment runs the same rules against the
shipped stacks' real plans.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pulumi.runtime.rpc import UNKNOWN
from pulumi_policy import EnforcementLevel, ResourceValidationArgs, ResourceValidationPolicy, StackValidationPolicy
from pulumi_policy.proxy import UnknownValueError, unknown_checking_proxy

from trainstack_policies import POLICIES
from trainstack_policies.contract import PRIMITIVE_ROLES, PolicyFinding
from trainstack_policies.offline import InputError, _options, evaluate, settings

PACK = Path(__file__).resolve().parent.parent
EMAIL = "team-train@my-project.iam.gserviceaccount.com"
LABELS = {"trainstack-stack": "team", "team": "vision"}


def gpu_vm() -> dict[str, Any]:
    return {
        "machineType": "n1-standard-8",
        "guestAccelerators": [{"type": "nvidia-tesla-t4", "count": 2}],
        "networkInterfaces": [{"subnetwork": "subnet-id"}],
        "serviceAccount": {"email": EMAIL, "scopes": ["https://www.googleapis.com/auth/cloud-platform"]},
        "shieldedInstanceConfig": {"enableSecureBoot": True, "enableVtpm": True, "enableIntegrityMonitoring": True},
        "metadata": {"enable-oslogin": "TRUE", "block-project-ssh-keys": "TRUE", "startup-script": "#!/bin/bash"},
        "scheduling": {
            "provisioningModel": "STANDARD",
            "automaticRestart": True,
            "onHostMaintenance": "TERMINATE",
            "maxRunDuration": {"seconds": 86400},
        },
        "labels": dict(LABELS),
        "bootDisk": {"initializeParams": {"labels": dict(LABELS)}},
    }


def tpu_vm() -> dict[str, Any]:
    return {
        "acceleratorType": "v5litepod-8",
        "networkConfig": {"enableExternalIps": False},
        "serviceAccount": {"email": EMAIL, "scopes": ["https://www.googleapis.com/auth/cloud-platform"]},
        "metadata": {"enable-oslogin": "TRUE", "block-project-ssh-keys": "TRUE", "trainstack-max-run-seconds": "86400"},
        "labels": dict(LABELS),
    }


def notebook() -> dict[str, Any]:
    return {
        "gceSetup": {
            "disablePublicIp": True,
            "serviceAccounts": [{"email": EMAIL}],
            "shieldedInstanceConfig": {
                "enableSecureBoot": True,
                "enableVtpm": True,
                "enableIntegrityMonitoring": True,
            },
            "metadata": {"enable-oslogin": "TRUE", "block-project-ssh-keys": "TRUE", "idle-timeout-seconds": "3600"},
        },
        "labels": dict(LABELS),
    }


def bucket() -> dict[str, Any]:
    return {"uniformBucketLevelAccess": True, "publicAccessPrevention": "enforced", "versioning": {"enabled": True}}


def iap_ssh() -> dict[str, Any]:
    return {
        "direction": "INGRESS",
        "allows": [{"protocol": "tcp", "ports": ["22"]}],
        "sourceRanges": ["35.235.240.0/20"],
    }


def member(role: str, who: str = f"serviceAccount:{EMAIL}") -> dict[str, Any]:
    return {"project": "my-project", "role": role, "member": who}


def account() -> dict[str, Any]:
    return {"accountId": "team-train", "project": "my-project"}


VM, TPU, NB = "gcp:compute/instance:Instance", "gcp:tpu/v2Vm:V2Vm", "gcp:workbench/instance:Instance"
BUCKET, FW = "gcp:storage/bucket:Bucket", "gcp:compute/firewall:Firewall"
PROJECT_MEMBER, ACCOUNT = "gcp:projects/iAMMember:IAMMember", "gcp:serviceaccount/account:Account"


def compliant_stack() -> list[dict[str, Any]]:
    return [
        {"type": VM, "name": "team-cluster-chief", "inputs": gpu_vm()},
        {"type": TPU, "name": "team-tpu-vm", "inputs": tpu_vm()},
        {"type": NB, "name": "team-notebook", "inputs": notebook()},
        {"type": BUCKET, "name": "team-bucket", "inputs": bucket()},
        {"type": FW, "name": "team-iap-ssh", "inputs": iap_ssh()},
        {"type": ACCOUNT, "name": "team-sa", "inputs": account()},
        {"type": PROJECT_MEMBER, "name": "team-logwriter", "inputs": member("roles/logging.logWriter")},
    ]


def violations(resources: list[dict[str, Any]], config: dict[str, Any] | None = None) -> list[PolicyFinding]:
    return evaluate("team", resources, config or {})


def test_the_compliant_stack_has_no_violation() -> None:
    assert violations(compliant_stack()) == []


def test_numbers_as_the_engine_sends_them_are_numbers() -> None:
    """The engine carries every number as a double: a run-time cap of 86400 arrives as 86400.0."""
    resources = compliant_stack()
    resources[0]["inputs"]["scheduling"]["maxRunDuration"]["seconds"] = 86400.0
    assert violations(resources) == []


Breakage = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Breakage:
    """Set a dotted path (list indexes as numbers) in a resource's inputs."""

    def apply(inputs: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        target: Any = inputs
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[int(leaf) if isinstance(target, list) else leaf] = value

    return apply


def _drop(path: str) -> Breakage:
    def apply(inputs: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        target: Any = inputs
        for part in parents:
            target = target[part]
        del target[leaf]

    return apply


# (rule, resource type, what breaks it, the words the message must hold)
BROKEN: list[tuple[str, str, Breakage, str]] = [
    ("no-public-ip", VM, _set("networkInterfaces.0.accessConfigs", [{"natIp": ""}]), "accessConfigs"),
    ("no-public-ip", VM, _set("networkInterfaces.0.ipv6AccessConfigs", [{"networkTier": "PREMIUM"}]), "ipv6"),
    ("no-public-ip", TPU, _set("networkConfig.enableExternalIps", True), "enableExternalIps"),
    ("no-public-ip", NB, _set("gceSetup.disablePublicIp", False), "disablePublicIp"),
    ("no-public-ip", NB, _drop("gceSetup.disablePublicIp"), "disablePublicIp"),
    ("no-default-service-account", VM, _drop("serviceAccount"), "default account"),
    (
        "no-default-service-account",
        VM,
        _set("serviceAccount.email", "123456789012-compute@developer.gserviceaccount.com"),
        "123456789012-compute@",
    ),
    ("no-default-service-account", TPU, _set("serviceAccount.email", "default"), "default"),
    ("no-default-service-account", NB, _set("gceSetup.serviceAccounts", []), "no service account"),
    ("shielded-vm", VM, _set("shieldedInstanceConfig.enableVtpm", False), "enableVtpm"),
    ("shielded-vm", VM, _drop("shieldedInstanceConfig"), "enableSecureBoot"),
    ("shielded-vm", NB, _set("gceSetup.shieldedInstanceConfig.enableIntegrityMonitoring", False), "Integrity"),
    ("os-login", VM, _set("metadata.enable-oslogin", "FALSE"), "enable-oslogin"),
    ("os-login", VM, _drop("metadata.block-project-ssh-keys"), "block-project-ssh-keys"),
    ("os-login", VM, _set("metadata.serial-port-enable", "TRUE"), "serial-port-enable"),
    ("os-login", TPU, _drop("metadata.enable-oslogin"), "enable-oslogin"),
    ("os-login", NB, _set("gceSetup.metadata.block-project-ssh-keys", "false"), "block-project-ssh-keys"),
    ("no-ip-forwarding", VM, _set("canIpForward", True), "canIpForward"),
    ("bucket-access", BUCKET, _set("uniformBucketLevelAccess", False), "uniformBucketLevelAccess"),
    ("bucket-access", BUCKET, _set("publicAccessPrevention", "inherited"), "publicAccessPrevention"),
    ("gpu-terminates-on-maintenance", VM, _set("scheduling.onHostMaintenance", "MIGRATE"), "TERMINATE"),
    ("spot-no-automatic-restart", VM, _set("scheduling.provisioningModel", "SPOT"), "automaticRestart"),
    ("spot-no-automatic-restart", VM, _set("scheduling.preemptible", True), "automaticRestart"),
    ("run-time-bound", VM, _drop("scheduling.maxRunDuration"), "maxRunDuration"),
    ("run-time-bound", VM, _set("scheduling.maxRunDuration.seconds", 0), "maxRunDuration"),
    ("run-time-bound", VM, _set("scheduling.maxRunDuration.seconds", 0.5), "maxRunDuration"),
    ("run-time-bound", TPU, _set("metadata.trainstack-max-run-seconds", "-5"), "trainstack-max-run-seconds"),
    ("run-time-bound", TPU, _drop("metadata.trainstack-max-run-seconds"), "trainstack-max-run-seconds"),
    ("run-time-bound", NB, _drop("gceSetup.metadata.idle-timeout-seconds"), "idle-timeout-seconds"),
    ("cost-labels", VM, _drop("labels.trainstack-stack"), "trainstack-stack"),
    ("cost-labels", VM, _set("bootDisk.initializeParams.labels", {}), "bootDisk"),
    ("cost-labels", TPU, _set("labels", {}), "trainstack-stack"),
    ("cost-labels", NB, _set("labels.trainstack-stack", ""), "trainstack-stack"),
    ("firewall-ingress", FW, _set("sourceRanges", ["0.0.0.0/0"]), "whole internet"),
    ("firewall-ingress", FW, _set("sourceRanges", ["::/0"]), "whole internet"),
    ("firewall-ingress", FW, _set("sourceRanges", ["203.0.113.0/24"]), "SSH from 203.0.113.0/24"),
    ("firewall-ingress", FW, _drop("sourceRanges"), "0.0.0.0/0"),
    ("firewall-ingress", FW, _set("sourceRanges", ["35.235.240.0/19"]), "SSH from 35.235.240.0/19"),
    ("firewall-ingress", FW, _set("sourceRanges", ["not-a-range"]), "not an IP range"),
    ("bucket-versioning", BUCKET, _drop("versioning"), "versioning"),
    ("notebook-idle-timeout", NB, _set("gceSetup.metadata.idle-timeout-seconds", "18000"), "4 hours"),
]


@pytest.mark.parametrize(("rule", "resource_type", "breakage", "words"), BROKEN)
def test_each_rule_fires_on_its_broken_resource_and_names_it(
    rule: str, resource_type: str, breakage: Breakage, words: str
) -> None:
    fires_alone(compliant_stack(), {}, rule, resource_type, breakage, words)


def fires_alone(
    resources: list[dict[str, Any]],
    config: dict[str, Any],
    rule: str,
    resource_type: str,
    breakage: Breakage,
    words: str,
) -> None:
    """Broken by ``breakage``, the first resource of ``resource_type`` fails ``rule`` alone,
    with ``words`` in the message."""
    target = next(r for r in resources if r["type"] == resource_type)
    breakage(target["inputs"])
    found = violations(resources, config)
    assert {(v.policy, v.resource_name) for v in found} == {(rule, target["name"])}, found
    assert any(words in v.message for v in found), found


def test_a_firewall_that_admits_all_ssh_from_iap_is_fine_but_from_anywhere_is_not() -> None:
    resources = compliant_stack()
    firewall = next(r for r in resources if r["type"] == FW)
    firewall["inputs"]["allows"] = [{"protocol": "tcp", "ports": ["20-30"]}]
    assert violations(resources) == []
    firewall["inputs"]["sourceRanges"] = ["10.0.0.0/8"]
    assert [v.policy for v in violations(resources)] == ["firewall-ingress"]
    # Traffic between the nodes is by service account, with no range at all: fine.
    del firewall["inputs"]["sourceRanges"]
    firewall["inputs"]["sourceServiceAccounts"] = [EMAIL]
    assert violations(resources) == []


def test_a_machine_type_with_built_in_gpus_must_terminate_on_maintenance() -> None:
    resources = compliant_stack()
    vm = resources[0]["inputs"]
    del vm["guestAccelerators"]
    vm["machineType"] = "a2-highgpu-1g"
    vm["scheduling"]["onHostMaintenance"] = "MIGRATE"
    assert [v.policy for v in violations(resources)] == ["gpu-terminates-on-maintenance"]
    vm["machineType"] = "n2-standard-8"
    assert violations(resources) == []


@pytest.mark.parametrize("role", sorted(PRIMITIVE_ROLES))
def test_primitive_roles_fire_on_member_binding_and_policy_resources(role: str) -> None:
    resources = [
        *compliant_stack(),
        {"type": "gcp:storage/bucketIAMMember:BucketIAMMember", "name": "b", "inputs": member(role, "user:a@b.c")},
        {
            "type": "gcp:projects/iAMBinding:IAMBinding",
            "name": "p",
            "inputs": {"role": role, "members": ["group:g@b.c"]},
        },
        {
            "type": "gcp:projects/iAMPolicy:IAMPolicy",
            "name": "whole",
            "inputs": {"policyData": json.dumps({"bindings": [{"role": role, "members": ["user:a@b.c"]}]})},
        },
    ]
    found = [(v.policy, v.resource_name) for v in violations(resources)]
    assert found == [("no-primitive-roles", "b"), ("no-primitive-roles", "p"), ("no-primitive-roles", "whole")]


@pytest.mark.parametrize("who", ["allUsers", "allAuthenticatedUsers"])
def test_public_members_fire(who: str) -> None:
    resources = [
        *compliant_stack(),
        {
            "type": "gcp:storage/bucketIAMMember:BucketIAMMember",
            "name": "public-read",
            "inputs": member("roles/storage.objectViewer", who),
        },
    ]
    found = violations(resources)
    assert [(v.policy, v.resource_name) for v in found] == [("no-public-members", "public-read")]
    assert who in found[0].message


@pytest.mark.parametrize(
    "role",
    ["roles/iam.serviceAccountUser", "roles/storage.admin", "roles/compute.instanceAdmin.v1", "roles/owner"],
)
def test_a_broad_scope_account_may_not_hold_an_admin_or_impersonation_role(role: str) -> None:
    resources = [*compliant_stack(), {"type": PROJECT_MEMBER, "name": "too-much", "inputs": member(role)}]
    found = [v for v in violations(resources) if v.policy == "broad-scope-least-privilege"]
    assert len(found) == 1
    assert found[0].resource_name == "team"
    assert "too-much" in found[0].message
    assert role in found[0].message


def test_a_broad_scope_account_the_stack_does_not_create_fires() -> None:
    resources = [r for r in compliant_stack() if r["type"] != ACCOUNT]
    found = [v for v in violations(resources) if v.policy == "broad-scope-least-privilege"]
    assert len(found) == 1
    assert EMAIL in found[0].message
    assert "does not create" in found[0].message


def test_narrow_scopes_need_no_account_of_the_stack() -> None:
    resources = [r for r in compliant_stack() if r["type"] != ACCOUNT]
    for resource in resources:
        if resource["type"] in (VM, TPU):
            resource["inputs"]["serviceAccount"]["scopes"] = ["https://www.googleapis.com/auth/devstorage.read_only"]
    resources = [r for r in resources if r["type"] != NB]
    assert violations(resources) == []


def test_policy_config_changes_labels_levels_and_thresholds() -> None:
    resources = compliant_stack()
    config = {"cost-labels": {"required_labels": ["trainstack-stack", "cost-center"]}}
    found = violations(resources, config)
    assert {v.resource_name for v in found} == {"team-cluster-chief", "team-tpu-vm", "team-notebook"}
    assert all(v.policy == "cost-labels" and "cost-center" in v.message for v in found)
    assert violations(resources, {**config, "cost-labels": "disabled"}) == []
    assert {v.enforcement for v in violations(resources, {"all": "advisory", **config})} == {"advisory"}
    resources[2]["inputs"]["gceSetup"]["metadata"]["idle-timeout-seconds"] = "10800"
    assert violations(resources) == []
    assert [v.policy for v in violations(resources, {"notebook-idle-timeout": {"max_idle_hours": 2}})] == [
        "notebook-idle-timeout"
    ]


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"cost-labels": {"required_labels": "team"}}, "cost-labels.required_labels: a list of strings"),
        ({"cost-labels": {"labels": ["team"]}}, "unknown property (known: required_labels)"),
        ({"no-public-ip": "sometimes"}, "one of advisory, mandatory, remediate, disabled"),
        ({"notebook-idle-timeout": {"max_idle_hours": -1}}, "a positive number"),
    ],
)
def test_bad_policy_config_is_named(config: dict[str, Any], words: str) -> None:
    with pytest.raises(InputError, match=words.replace("(", r"\(").replace(")", r"\)")):
        violations(compliant_stack(), config)


def test_every_mandatory_rule_of_the_issue_is_in_the_pack_and_mandatory() -> None:
    levels = {p.name: settings(p, {})[0] for p in POLICIES}
    mandatory = {
        "no-public-ip",
        "no-default-service-account",
        "broad-scope-least-privilege",
        "no-primitive-roles",
        "shielded-vm",
        "os-login",
        "bucket-access",
        "gpu-terminates-on-maintenance",
        "spot-no-automatic-restart",
        "run-time-bound",
        "cost-labels",
        "firewall-ingress",
    }
    assert {name for name, level in levels.items() if level == EnforcementLevel.MANDATORY} >= mandatory
    assert levels["bucket-versioning"] == levels["notebook-idle-timeout"] == EnforcementLevel.ADVISORY
    assert all(p.framework is not None and p.framework.reference for p in POLICIES)


def test_rules_work_on_crossguard_proxies_and_stop_at_unknown_values() -> None:
    """The engine wraps inputs in proxies and raises UnknownValueError for values not known
    during preview (it then skips the rule for that resource); a rule must not mistake either
    for a violation or crash on them."""
    rules = {p.name: p for p in POLICIES if isinstance(p, ResourceValidationPolicy)}
    found: list[str] = []

    def record(message: str, urn: str | None = None) -> None:
        found.append(message)

    proxied = unknown_checking_proxy(copy.deepcopy(gpu_vm()))
    for policy in rules.values():
        level, config = settings(policy, {})
        if level == EnforcementLevel.DISABLED:
            continue  # the engine runs no disabled policy
        args = ResourceValidationArgs(VM, proxied, "urn", "vm", _options(), None, config)
        policy.validate(args, record)
    assert found == []
    broken = gpu_vm()
    broken["networkInterfaces"][0]["accessConfigs"] = [{}]
    args = ResourceValidationArgs(VM, unknown_checking_proxy(broken), "urn", "vm", _options(), None, {})
    rules["no-public-ip"].validate(args, record)
    assert found
    assert "accessConfigs" in found[0]
    unknown = gpu_vm()
    unknown["serviceAccount"]["email"] = UNKNOWN
    args = ResourceValidationArgs(VM, unknown_checking_proxy(unknown), "urn", "vm", _options(), None, {})
    with pytest.raises(UnknownValueError):
        rules["no-default-service-account"].validate(args, record)
    assert isinstance(next(p for p in POLICIES if p.name == "broad-scope-least-privilege"), StackValidationPolicy)


def test_offline_module_reads_stdin_and_refuses_bad_requests_in_one_line() -> None:
    resources = compliant_stack()
    resources[0]["inputs"]["canIpForward"] = True
    request = {"stack": "team", "resources": resources, "config": {}}
    run = subprocess.run(
        [sys.executable, "-m", "trainstack_policies.offline"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=PACK,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["violations"] == [
        {
            "policy": "no-ip-forwarding",
            "enforcement": "mandatory",
            "resource_type": VM,
            "resource_name": "team-cluster-chief",
            "message": "canIpForward must be false (a training VM routes no one's traffic)",
        }
    ]
    for bad, words in [
        ("[]", "a JSON object"),
        ("{", "not JSON"),
        ('{"stack": "s", "resources": [1]}', "resources[0]"),
    ]:
        run = subprocess.run(
            [sys.executable, "-m", "trainstack_policies.offline"],
            input=bad,
            capture_output=True,
            text=True,
            cwd=PACK,
            check=False,
        )
        assert run.returncode == 2
        assert words in run.stderr
        assert "Traceback" not in run.stderr


def test_a_notebook_account_may_not_hold_an_impersonation_role() -> None:
    """Defect: Workbench inputs carry no scopes, so the rule skipped the notebook's account; a
    Workbench instance always runs with the cloud-platform scope."""
    notebook_email = "team-nb@my-project.iam.gserviceaccount.com"
    resources = [r for r in compliant_stack() if r["type"] not in (VM, TPU)]
    [nb] = [r for r in resources if r["type"] == NB]
    nb["inputs"]["gceSetup"]["serviceAccounts"] = [{"email": notebook_email}]
    resources.append(
        {"type": ACCOUNT, "name": "team-nb-sa", "inputs": {"accountId": "team-nb", "project": "my-project"}}
    )
    resources.append(
        {
            "type": PROJECT_MEMBER,
            "name": "nb-token-creator",
            "inputs": member("roles/iam.serviceAccountTokenCreator", f"serviceAccount:{notebook_email}"),
        }
    )
    found = [v for v in violations(resources) if v.policy == "broad-scope-least-privilege"]
    assert len(found) == 1
    assert "nb-token-creator" in found[0].message
    assert "notebook team-notebook" in found[0].message


CUSTOM_ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"


def custom_role(role_id: str, permissions: list[str]) -> dict[str, Any]:
    return {
        "type": CUSTOM_ROLE,
        "name": role_id,
        "inputs": {"project": "my-project", "roleId": role_id, "permissions": permissions, "title": role_id},
    }


@pytest.mark.parametrize("permission", ["iam.serviceAccounts.actAs", "resourcemanager.projects.setIamPolicy"])
def test_a_custom_role_that_escalates_may_not_be_bound_on_the_project(permission: str) -> None:
    resources = [
        *compliant_stack(),
        custom_role("team_helper", ["compute.instances.get", permission]),
        {
            "type": PROJECT_MEMBER,
            "name": "helper-binding",
            "inputs": member("projects/my-project/roles/team_helper", "user:someone@example.com"),
        },
    ]
    found = [v for v in violations(resources) if v.policy == "custom-role-escalation"]
    assert len(found) == 1
    assert permission in found[0].message
    assert "helper-binding" in found[0].message


def test_a_narrow_custom_role_on_the_project_and_an_unbound_escalating_one_pass() -> None:
    resources = [
        *compliant_stack(),
        custom_role("team_release", ["tpu.nodes.get", "tpu.nodes.stop", "tpu.nodes.delete"]),
        {"type": PROJECT_MEMBER, "name": "release", "inputs": member("projects/my-project/roles/team_release")},
        custom_role("team_unused", ["iam.serviceAccounts.actAs"]),
    ]
    assert [v for v in violations(resources) if v.policy == "custom-role-escalation"] == []


BUCKET_GRANT = "gcp:storage/bucketIAMMember:BucketIAMMember"
TEAMMATE = "user:ana@example.com"


def queue_grants(who: str = TEAMMATE, bucket: str = "team-bucket") -> list[dict[str, Any]]:
    """A teammate's grants to queue jobs, as the program writes them (trainstack_contract.grants)."""
    from trainstack_contract.grants import submit_grants

    return [
        {
            "type": BUCKET_GRANT,
            "name": f"queue-{grant.purpose}",
            "inputs": {
                "bucket": bucket,
                "role": grant.role,
                "member": who,
                "condition": {"title": grant.title, "expression": grant.expression},
            },
        }
        for grant in submit_grants(bucket)
    ]


def test_a_teammates_grants_to_queue_jobs_pass() -> None:
    assert violations(compliant_stack() + queue_grants()) == []
    assert violations(compliant_stack() + queue_grants("serviceAccount:ci@other-project.iam.gserviceaccount.com")) == []


@pytest.mark.parametrize(
    "who", [f"serviceAccount:{EMAIL}", "serviceAccount:team-train@elsewhere.iam.gserviceaccount.com"]
)
def test_grants_to_queue_jobs_held_by_a_machines_account_fail(who: str) -> None:
    """The account a VM runs as (or one the stack creates) may never write under trainstack/."""
    found = {(v.policy, v.resource_name) for v in violations(compliant_stack() + queue_grants(who))}
    assert found == {("queue-writers-are-teammates", "team")}
    [message] = {v.message for v in violations(compliant_stack() + queue_grants(who)[:1])}
    assert "queue-code" in message
    assert who in message


@pytest.mark.parametrize(
    ("role", "expression"),
    [
        # Replace, not create-only, where code lives.
        (
            "roles/storage.objectUser",
            'resource.name.startsWith("projects/_/buckets/team-bucket/objects/trainstack/code/")',
        ),
        # Create-only, but under what else machines run.
        (
            "roles/storage.objectCreator",
            'resource.name.startsWith("projects/_/buckets/team-bucket/objects/trainstack/")',
        ),
        # The index's prefix, not the index alone.
        (
            "roles/storage.objectUser",
            'resource.name.startsWith("projects/_/buckets/team-bucket/objects/trainstack/queue/index.json")',
        ),
        # A queue grant's condition, on another bucket's objects.
        (
            "roles/storage.objectCreator",
            'resource.name.startsWith("projects/_/buckets/other-bucket/objects/trainstack/code/")',
        ),
    ],
)
def test_a_write_under_trainstack_other_than_queueing_a_job_fails_even_for_a_teammate(
    role: str, expression: str
) -> None:
    grant = {
        "type": BUCKET_GRANT,
        "name": "wide",
        "inputs": {"bucket": "team-bucket", "role": role, "member": TEAMMATE, "condition": {"expression": expression}},
    }
    assert [(v.policy, v.resource_name) for v in violations([*compliant_stack(), grant])] == [
        ("executed-objects-spared", "wide")
    ]


def test_a_queue_grant_to_other_than_a_named_principal_fails() -> None:
    found = {(v.policy, v.resource_name) for v in violations(compliant_stack() + queue_grants("domain:example.com"))}
    assert found == {("executed-objects-spared", f"queue-{p}") for p in ("code", "specs", "index", "studies")}


def jobs_writer(prefix: str) -> dict[str, Any]:
    objects = "projects/_/buckets/team-bucket/objects"
    expression = f'resource.name.startsWith("{objects}/{prefix}") && !resource.name.startsWith("{objects}/trainstack/")'
    return {
        "type": BUCKET_GRANT,
        "name": "team-identity-bucket-jobs-writer",
        "inputs": {
            "bucket": "team-bucket",
            "role": "roles/storage.objectUser",
            "member": f"serviceAccount:{EMAIL}",
            "condition": {"title": "job directories only", "expression": expression},
        },
    }


def test_a_machines_write_grant_covers_every_job_directory_the_queue_makes() -> None:
    assert violations([*compliant_stack(), jobs_writer("jobs/")]) == []
    [found] = violations([*compliant_stack(), jobs_writer("jobs/flowers_mwms/")])
    assert (found.policy, found.resource_name) == ("queue-directories-writable", "team-identity-bucket-jobs-writer")
    assert "jobs/flowers_mwms/ alone" in found.message
    assert "jobs/q<ID>_<NAME>/" in found.message


def test_a_queue_grant_whose_member_is_unknown_fails_the_stack_rule() -> None:
    """During preview a machine's account is not known yet: such a grant to queue jobs is refused."""
    from pulumi_policy import StackValidationArgs
    from pulumi_policy.policy import PolicyResource

    [rule] = [p for p in POLICIES if p.name == "queue-writers-are-teammates"]
    assert isinstance(rule, StackValidationPolicy)
    grant = queue_grants()[2]["inputs"]
    grant["member"] = UNKNOWN
    resource = PolicyResource(BUCKET_GRANT, unknown_checking_proxy(grant), "urn", "idx", _options(), None, None, [], {})
    found: list[str] = []

    def record(message: str, urn: str | None = None) -> None:
        found.append(message)

    rule.validate(StackValidationArgs([resource], {}), record)
    assert found
    assert "not known before deployment" in found[0]


KMS_KEY = "projects/acme-kms/locations/us-central1/keyRings/ml/cryptoKeys/vision"
SUBNET = "projects/acme-net-host/regions/us-central1/subnetworks/ml-vision"
REPOSITORY = "gcp:artifactregistry/repository:Repository"
LANDING_ZONE = {
    "customer-managed-keys": {"enforcementLevel": "mandatory", "key_projects": ["acme-kms"]},
    "shared-network-only": {"enforcementLevel": "mandatory", "subnetworks": [SUBNET]},
}


def landing_zone_stack() -> list[dict[str, Any]]:
    """The compliant stack as a landing zone's stack makes it: keys everywhere, on the shared
    subnetwork, and no TPU VM (its disk cannot take a key)."""
    resources = [r for r in compliant_stack() if r["type"] != TPU]
    for resource in resources:
        inputs = resource["inputs"]
        if resource["type"] == VM:
            inputs["bootDisk"]["kmsKeySelfLink"] = KMS_KEY
            inputs["networkInterfaces"] = [{"subnetwork": SUBNET}]
        elif resource["type"] == NB:
            for disk in ("bootDisk", "dataDisks"):
                inputs["gceSetup"][disk] = {"diskEncryption": "CMEK", "kmsKey": KMS_KEY}
            inputs["gceSetup"]["networkInterfaces"] = [{"network": "n", "subnet": SUBNET}]
        elif resource["type"] == BUCKET:
            inputs["encryption"] = {"defaultKmsKeyName": KMS_KEY}
    resources.append({"type": REPOSITORY, "name": "team-registry", "inputs": {"kmsKeyName": KMS_KEY}})
    return resources


def test_the_landing_zone_rules_are_off_by_default_and_pass_a_landing_zone_stack() -> None:
    assert violations(compliant_stack()) == []
    assert {settings(p, {})[0] for p in POLICIES if p.name in LANDING_ZONE} == {EnforcementLevel.DISABLED}
    assert violations(landing_zone_stack(), LANDING_ZONE) == []


LANDING_ZONE_BROKEN: list[tuple[str, str, Breakage, str]] = [
    ("customer-managed-keys", BUCKET, _drop("encryption"), "no customer-managed key"),
    ("customer-managed-keys", REPOSITORY, _drop("kmsKeyName"), "kmsKeyName: no customer-managed key"),
    ("customer-managed-keys", VM, _drop("bootDisk.kmsKeySelfLink"), "bootDisk.kmsKeySelfLink"),
    ("customer-managed-keys", NB, _set("gceSetup.dataDisks", {}), "dataDisks.diskEncryption is not CMEK"),
    (
        "customer-managed-keys",
        BUCKET,
        _set("encryption.defaultKmsKeyName", KMS_KEY.replace("acme-kms", "elsewhere")),
        "in project elsewhere, not in acme-kms",
    ),
    ("shared-network-only", VM, _set("networkInterfaces.0.subnetwork", "<computed>"), "not a subnetwork"),
    (
        "shared-network-only",
        NB,
        _set("gceSetup.networkInterfaces.0.subnet", SUBNET.replace("ml-vision", "ml-other")),
        "is not one of the allowed subnetworks",
    ),
]


@pytest.mark.parametrize(("rule", "resource_type", "breakage", "words"), LANDING_ZONE_BROKEN)
def test_each_landing_zone_rule_fires_on_its_broken_resource(
    rule: str, resource_type: str, breakage: Breakage, words: str
) -> None:
    fires_alone(landing_zone_stack(), LANDING_ZONE, rule, resource_type, breakage, words)


def test_a_network_of_the_stacks_own_and_a_tpu_vm_fail_the_landing_zone_rules() -> None:
    resources = landing_zone_stack()
    resources.append({"type": "gcp:compute/routerNat:RouterNat", "name": "team-nat", "inputs": {}})
    resources.append(
        {"type": TPU, "name": "team-tpu-vm", "inputs": {**tpu_vm(), "networkConfig": {"subnetwork": SUBNET}}}
    )
    found = {(v.policy, v.resource_name) for v in violations(resources, LANDING_ZONE)}
    assert found == {("shared-network-only", "team-nat"), ("customer-managed-keys", "team-tpu-vm")}
