"""A stack inside a company's landing zone: its machines join a subnetwork of the organisation's
Shared VPC (trainstack:network) instead of a network of its own, asserted on the Pulumi mocks'
recorded inputs; bad network paths and a subnetwork in another region are refused naming the key."""

from __future__ import annotations

import json
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
    refused_naming(tmp_path, capsys, {"trainstack:network": network}, key, words)


def refused_naming(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, Any], key: str, words: str
) -> None:
    """`validate` refuses the base stack with ``changes`` in one line that starts with ``key``."""
    path = write_stack(tmp_path, with_changes(base_config(), changes))
    assert main(["validate", "--stack-file", str(path)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line.strip() for line in err.splitlines() if line.strip().startswith(key)]
    assert lines, err
    assert any(words in line for line in lines), err


KEY = "projects/acme-kms/locations/us-central1/keyRings/ml/cryptoKeys/vision"
KEY_ROLE = "roles/cloudkms.cryptoKeyEncrypterDecrypter"
KEY_GRANT = "gcp:kms/cryptoKeyIAMMember:CryptoKeyIAMMember"
NOTEBOOK = {"trainstack:notebook": {"machine_type": "n1-standard-4"}}


def encrypted(grants: str = "stack") -> dict[str, Any]:
    return {"trainstack:encryption": {"kms_key": KEY, "grants": grants}}


def agent(domain: str, plan: Plan) -> str:
    return f"serviceAccount:service-{plan_number()}@{domain}"


def plan_number() -> str:
    from trainstack.cloud.planning import MOCK_PROJECT_NUMBER

    return MOCK_PROJECT_NUMBER


def test_a_key_encrypts_the_bucket_every_disk_the_registry_and_the_notebook(tmp_path: Path) -> None:
    plan = plan_with(tmp_path, with_changes(base_config(), {**encrypted(), **NOTEBOOK}))
    [bucket] = plan.of_type("gcp:storage/bucket:Bucket")
    assert bucket.inputs["encryption"] == {"defaultKmsKeyName": KEY}
    [repository] = plan.of_type("gcp:artifactregistry/repository:Repository")
    assert repository.inputs["kmsKeyName"] == KEY
    instances = plan.of_type("gcp:compute/instance:Instance")
    assert len(instances) == 3
    assert all(vm.inputs["bootDisk"]["kmsKeySelfLink"] == KEY for vm in instances)
    [notebook] = plan.of_type("gcp:workbench/instance:Instance")
    setup = notebook.inputs["gceSetup"]
    for disk in (setup["bootDisk"], setup["dataDisks"]):
        assert (disk["diskEncryption"], disk["kmsKey"]) == ("CMEK", KEY)


def test_the_key_is_granted_on_itself_alone_to_the_service_agents_that_use_it(tmp_path: Path) -> None:
    plan = plan_with(tmp_path, with_changes(base_config(), {**encrypted(), **NOTEBOOK}))
    grants = plan.of_type(KEY_GRANT)
    assert {(g.inputs["cryptoKeyId"], g.inputs["role"]) for g in grants} == {(KEY, KEY_ROLE)}
    assert sorted(g.inputs["member"] for g in grants) == sorted(
        agent(domain, plan)
        for domain in (
            "gs-project-accounts.iam.gserviceaccount.com",
            "compute-system.iam.gserviceaccount.com",
            "gcp-sa-artifactregistry.iam.gserviceaccount.com",
            "gcp-sa-notebooks.iam.gserviceaccount.com",
        )
    )
    # No other binding names the key, and no agent gets a role on the project for it.
    assert not [r for r in plan.resources if "kms" in r.type.lower() and r.type != KEY_GRANT]


def test_what_the_key_encrypts_waits_for_its_grants(tmp_path: Path) -> None:
    plan = plan_with(tmp_path, with_changes(base_config(), {**encrypted(), **NOTEBOOK}))
    grants = {g.name for g in plan.of_type(KEY_GRANT)}
    for kind in (
        "gcp:storage/bucket:Bucket",
        "gcp:artifactregistry/repository:Repository",
        "gcp:compute/instance:Instance",
        "gcp:workbench/instance:Instance",
    ):
        for resource in plan.of_type(kind):
            assert grants <= plan.waits_for[resource.name], (kind, resource.name, plan.waits_for[resource.name])


def test_a_cluster_only_stack_grants_no_notebooks_agent_and_a_tpu_stack_no_compute_agent(tmp_path: Path) -> None:
    cluster = plan_with(tmp_path / "cluster", with_changes(base_config(), encrypted()))
    members = {g.inputs["member"] for g in cluster.of_type(KEY_GRANT)}
    assert not any("gcp-sa-notebooks" in m for m in members)
    assert any("compute-system" in m for m in members)
    tpu = plan_with(tmp_path / "tpu", with_changes(TPU_STACK, encrypted()))
    members = {g.inputs["member"] for g in tpu.of_type(KEY_GRANT)}
    assert not any("compute-system" in m or "notebooks" in m for m in members)
    assert any("the TPU VM's boot disk keeps Google's key" in note for note in tpu.notes)


def test_with_grants_key_admins_the_stack_grants_nothing_and_plan_lists_the_grants(tmp_path: Path) -> None:
    plan = plan_with(tmp_path, with_changes(base_config(), encrypted("key_admins")))
    assert not plan.of_type(KEY_GRANT)
    [bucket] = plan.of_type("gcp:storage/bucket:Bucket")
    assert bucket.inputs["encryption"] == {"defaultKmsKeyName": KEY}
    [note] = [n for n in plan.notes if n.startswith("encryption: grants: key_admins")]
    assert f"must grant {KEY_ROLE} on it to service-PROJECT_NUMBER@" in note
    for domain in ("gs-project-accounts", "compute-system", "gcp-sa-artifactregistry"):
        assert f"service-PROJECT_NUMBER@{domain}.iam.gserviceaccount.com" in note
    assert "gcp-sa-notebooks" not in note


def test_a_stack_without_a_key_plans_as_before(tmp_path: Path) -> None:
    plan = plan_with(tmp_path, base_config())
    assert not plan.of_type(KEY_GRANT)
    [bucket] = plan.of_type("gcp:storage/bucket:Bucket")
    assert "encryption" not in bucket.inputs
    assert all("kmsKeySelfLink" not in vm.inputs["bootDisk"] for vm in plan.of_type("gcp:compute/instance:Instance"))


@pytest.mark.parametrize(
    ("encryption", "key", "words"),
    [
        (
            {"kms_key": KEY.replace("us-central1", "europe-west4")},
            "trainstack:encryption.kms_key",
            "the key is in location europe-west4, not in gcp:region us-central1",
        ),
        ({"kms_key": KEY.replace("us-central1", "global")}, "trainstack:encryption.kms_key", "the key is in global"),
        ({"kms_key": KEY + "\n"}, "trainstack:encryption.kms_key", "is not a Cloud KMS key"),
        ({"kms_key": KEY + "/cryptoKeyVersions/1"}, "trainstack:encryption.kms_key", "is not a Cloud KMS key"),
        ({"kms_key": "vision"}, "trainstack:encryption.kms_key", "is not a Cloud KMS key"),
        ({"kms_key": KEY, "grants": "nobody"}, "trainstack:encryption.grants", ""),
    ],
    ids=["other-region", "global", "trailing-newline", "key-version", "bare-name", "bad-grants"],
)
def test_a_key_that_is_not_one_to_use_is_refused_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], encryption: dict[str, Any], key: str, words: str
) -> None:
    refused_naming(tmp_path, capsys, {"trainstack:encryption": encryption}, key, words)


def test_the_policy_packs_landing_zone_rules_pass_a_landing_zone_stack_and_fail_a_default_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "policy.json"
    config.write_text(
        json.dumps(
            {
                "customer-managed-keys": {"enforcementLevel": "mandatory", "key_projects": ["acme-kms"]},
                "shared-network-only": {"enforcementLevel": "mandatory", "subnetworks": [SUBNETWORK]},
            }
        )
    )
    (tmp_path / "landing").mkdir()
    (tmp_path / "default").mkdir()
    landing = write_stack(
        tmp_path / "landing", with_changes(base_config(), {**joined("stack"), **encrypted(), **NOTEBOOK})
    )
    assert main(["check", "--stack-file", str(landing), "--policy-config", str(config), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {"customer-managed-keys", "shared-network-only"} <= set(document["policies"])
    assert document["violations"] == []
    default = write_stack(tmp_path / "default", base_config())
    assert main(["check", "--stack-file", str(default), "--policy-config", str(config), "--json"]) == 1
    found = {
        (v["policy"], v["resource_type"].rsplit(":", 1)[-1]) for v in json.loads(capsys.readouterr().out)["violations"]
    }
    assert ("shared-network-only", "RouterNat") in found
    assert ("shared-network-only", "Instance") in found
    assert ("customer-managed-keys", "Bucket") in found
    assert ("customer-managed-keys", "Repository") in found


def test_two_teams_stacks_join_one_network_each_with_rules_of_its_own(tmp_path: Path) -> None:
    plans = [
        plan_with(tmp_path / team, with_changes(base_config(), {**joined("stack"), "trainstack:name": team}))
        for team in ("vision", "speech")
    ]
    names = [{rule.name for rule in plan.of_type(FIREWALL)} for plan in plans]
    assert all(len(rules) == 2 for rules in names)
    assert not names[0] & names[1]
    for plan in plans:
        for kind in OWN_NETWORK_TYPES:
            assert not plan.of_type(kind), kind
        accounts = {a for rule in plan.of_type(FIREWALL) for a in rule.inputs["targetServiceAccounts"]}
        assert all(a.startswith(f"{plan.resolved.name}-") for a in accounts), accounts
