"""`export tfplan`: the planned resources as a Terraform plan, and checkov reading it.

The converter's tests run in the project's environment. The checkov tests run checkov from its
own environment, .venv-checkov (scripts/checkov creates it), on plans this file writes: a stack
broken on purpose must fail the checks that name each broken resource, and the shipped stacks
must pass every check that runs on them.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib
import inspect
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from stack_helpers import SHIPPED_STACKS, base_config, plan_for, plan_of, with_changes, write_stack
from trainstack.cloud.planning import SECRET_MASK, PlannedResource, text_digest
from trainstack.cloud.pulumi_internals import SECRET_SIGNATURE, SECRET_SIGNATURE_KEY
from trainstack.commands import main as cli_main
from trainstack.interop import tfplan
from trainstack.interop.tfplan import ConversionError, terraform_name, terraform_plan, terraform_type

REPO = Path(__file__).resolve().parent.parent
CHECKOV = REPO / ".venv-checkov" / "bin" / "checkov"
CHECKOV_CONFIG = REPO / "scanners" / "checkov" / ".checkov.yaml"
# checkov on one plan takes a few seconds; a bound that still catches a hang.
CHECKOV_SECONDS = 300

# Every resource type the program plans (the shipped stacks use most), and its Terraform type
# as pulumi-gcp's bridge metadata (provider/cmd/pulumi-resource-gcp/bridge-metadata.json) names it.
TERRAFORM_TYPES = {
    "gcp:artifactregistry/repository:Repository": "google_artifact_registry_repository",
    "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember": "google_artifact_registry_repository_iam_member",
    "gcp:billing/budget:Budget": "google_billing_budget",
    "gcp:compute/firewall:Firewall": "google_compute_firewall",
    "gcp:compute/instance:Instance": "google_compute_instance",
    "gcp:compute/instanceIAMMember:InstanceIAMMember": "google_compute_instance_iam_member",
    "gcp:compute/network:Network": "google_compute_network",
    "gcp:compute/projectMetadataItem:ProjectMetadataItem": "google_compute_project_metadata_item",
    "gcp:compute/router:Router": "google_compute_router",
    "gcp:compute/routerNat:RouterNat": "google_compute_router_nat",
    "gcp:compute/subnetwork:Subnetwork": "google_compute_subnetwork",
    "gcp:kms/cryptoKeyIAMMember:CryptoKeyIAMMember": "google_kms_crypto_key_iam_member",
    "gcp:projects/iAMCustomRole:IAMCustomRole": "google_project_iam_custom_role",
    "gcp:projects/iAMMember:IAMMember": "google_project_iam_member",
    "gcp:projects/service:Service": "google_project_service",
    "gcp:projects/serviceIdentity:ServiceIdentity": "google_project_service_identity",
    "gcp:secretmanager/secret:Secret": "google_secret_manager_secret",
    "gcp:secretmanager/secretIamMember:SecretIamMember": "google_secret_manager_secret_iam_member",
    "gcp:secretmanager/secretVersion:SecretVersion": "google_secret_manager_secret_version",
    "gcp:serviceaccount/account:Account": "google_service_account",
    "gcp:storage/bucket:Bucket": "google_storage_bucket",
    "gcp:storage/bucketIAMMember:BucketIAMMember": "google_storage_bucket_iam_member",
    "gcp:storage/bucketObject:BucketObject": "google_storage_bucket_object",
    "gcp:tpu/v2Vm:V2Vm": "google_tpu_v2_vm",
    "gcp:workbench/instance:Instance": "google_workbench_instance",
}


def document(stack: str) -> dict[str, Any]:
    return terraform_plan(plan_for(stack).resources)


def planned(doc: dict[str, Any], tf_type: str) -> list[dict[str, Any]]:
    return [r for r in doc["planned_values"]["root_module"]["resources"] if r["type"] == tf_type]


def change(doc: dict[str, Any], address: str) -> dict[str, Any]:
    return next(c["change"] for c in doc["resource_changes"] if c["address"] == address)


def expressions(doc: dict[str, Any], address: str) -> dict[str, Any]:
    configured = doc["configuration"]["root_module"]["resources"]
    return next(r["expressions"] for r in configured if r["address"] == address)


# -- types and names ---------------------------------------------------------------------------


@pytest.mark.parametrize(("token", "expected"), sorted(TERRAFORM_TYPES.items()))
def test_type_tokens_map_to_terraform_types(token: str, expected: str) -> None:
    assert terraform_type(token) == expected


def test_every_planned_resource_type_is_known(tmp_path: Path) -> None:
    """A type the program starts to use must be added to TERRAFORM_TYPES once checked: the
    shipped stacks' types, and those only a landing zone's keys add (a customer-managed key)."""
    landing_zone = {
        "trainstack:network": {
            "network": "projects/acme-net-host/global/networks/shared-vpc",
            "subnetwork": "projects/acme-net-host/regions/us-central1/subnetworks/ml-vision",
        },
        "trainstack:encryption": {"kms_key": "projects/acme-kms/locations/us-central1/keyRings/ml/cryptoKeys/vision"},
        "trainstack:notebook": {"machine_type": "n1-standard-4"},
    }
    plans = [plan_for(s) for s in SHIPPED_STACKS]
    plans.append(plan_of(write_stack(tmp_path, with_changes(base_config(), landing_zone))))
    used = {r.type for plan in plans for r in plan.resources if not r.type.startswith("pulumi:")}
    assert used <= set(TERRAFORM_TYPES), sorted(used - set(TERRAFORM_TYPES))
    assert terraform_plan(plans[-1].resources)["resource_changes"]


@pytest.mark.parametrize("token", ["gcp:bigquery/table:Table", "aws:s3/bucket:Bucket", "gcp:Instance", "nonsense"])
def test_types_of_unchecked_modules_are_refused(token: str) -> None:
    with pytest.raises(ConversionError, match="gcp"):
        terraform_type(token)


def test_names_terraform_accepts_are_kept_and_others_made_valid() -> None:
    assert terraform_name("dev-cluster-worker-0") == "dev-cluster-worker-0"
    assert terraform_name("dev-identity-logging-logWriter") == "dev-identity-logging-logWriter"
    odd = [terraform_name(n) for n in ("0day", "a.b", "a/b", "a b")]
    assert all(tfplan.TERRAFORM_NAME.fullmatch(n) for n in odd)
    assert len(set(odd)) == len(odd)


# -- values ------------------------------------------------------------------------------------


def test_document_has_the_plan_format() -> None:
    doc = document("dev")
    assert doc["format_version"] == tfplan.FORMAT_VERSION
    assert doc["terraform_version"]
    resources = doc["planned_values"]["root_module"]["resources"]
    assert len(resources) == len(plan_for("dev").resources)
    assert [r["address"] for r in resources] == [c["address"] for c in doc["resource_changes"]]
    for resource in resources:
        assert resource["address"] == f"{resource['type']}.{resource['name']}"
        assert resource["mode"] == "managed"
        assert resource["provider_name"] == "registry.terraform.io/hashicorp/google-beta"
    assert all(c["change"]["actions"] == ["create"] for c in doc["resource_changes"])
    json.dumps(doc)


def test_blocks_become_one_element_lists() -> None:
    (vm,) = planned(document("dev"), "google_compute_instance")
    values = vm["values"]
    for block in ("boot_disk", "scheduling", "service_account", "shielded_instance_config"):
        assert isinstance(values[block], list), block
        assert len(values[block]) == 1, block
    assert len(values["boot_disk"][0]["initialize_params"]) == 1
    assert values["scheduling"][0]["max_run_duration"] == [{"seconds": 28800}]
    assert values["shielded_instance_config"] == [
        {"enable_integrity_monitoring": True, "enable_secure_boot": True, "enable_vtpm": True}
    ]
    # Lists stay lists, under Terraform's singular names.
    assert values["guest_accelerator"] == [{"count": 1, "type": "nvidia-tesla-t4"}]
    assert isinstance(values["network_interface"], list)
    assert len(values["network_interface"]) == 1
    assert "networkInterfaces" not in values
    assert "guest_accelerators" not in values


def test_maps_stay_maps_with_their_keys() -> None:
    (vm,) = planned(document("dev"), "google_compute_instance")
    values = vm["values"]
    assert values["labels"]["trainstack-stack"] == "dev"
    assert values["metadata"]["block-project-ssh-keys"] == "TRUE"
    assert values["metadata"]["enable-oslogin"] == "TRUE"
    assert isinstance(values["boot_disk"][0]["initialize_params"][0]["labels"], dict)
    (tpu,) = planned(document("tpu"), "google_tpu_v2_vm")
    assert isinstance(tpu["values"]["metadata"], dict)
    assert isinstance(tpu["values"]["labels"], dict)
    (notebook,) = planned(document("notebook"), "google_workbench_instance")
    assert notebook["values"]["gce_setup"][0]["metadata"]["enable-oslogin"] == "TRUE"


def _objects_in(args_type: type, inputs: dict[str, Any], where: str) -> list[tuple[str, bool]]:
    """Every object-valued input under ``args_type`` (a pulumi-gcp input class): (path, whether
    pulumi-gcp types it as a map). Python names map to the engine's through pulumi's own table."""
    import pulumi._types

    engine_to_python = {v: k for k, v in pulumi._types.input_type_py_to_pulumi_names(args_type).items()}
    parameters = inspect.signature(args_type.__init__).parameters
    module = importlib.import_module(args_type.__module__.rsplit(".", 1)[0])
    found = []
    for key, value in inputs.items():
        objects = [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, dict)]
        annotation = str(parameters[engine_to_python[key]].annotation)
        if not objects or "Archive" in annotation or "Asset" in annotation:
            continue
        nested = re.search(r"ForwardRef\('(\w+Args)'\)", annotation)
        found.append((f"{where}.{key}", nested is None))
        if nested is not None:
            for item in objects:
                found += _objects_in(getattr(module, nested.group(1)), item, f"{where}.{key}")
    return found


def test_map_fields_are_the_maps_pulumi_gcp_types() -> None:
    """Which objects stay maps (MAP_FIELDS) agrees with pulumi-gcp's input types, for every
    object the shipped stacks plan: every other object is a block."""
    checked = 0
    for stack in SHIPPED_STACKS:
        for resource in plan_for(stack).resources:
            if resource.type.startswith("pulumi:"):
                continue
            _, module_path, name = resource.type.split(":")
            module = importlib.import_module(f"pulumi_gcp.{module_path.split('/')[0]}")
            for path, is_map in _objects_in(getattr(module, f"{name}Args"), resource.inputs, resource.type):
                assert (tfplan._snake(path.rsplit(".", 1)[1]) in tfplan.MAP_FIELDS) == is_map, path
                checked += 1
    assert checked > 50


def test_plural_list_names_become_terraform_names() -> None:
    doc = document("multiworker")
    for firewall in planned(doc, "google_compute_firewall"):
        assert "allow" in firewall["values"]
        assert "allows" not in firewall["values"]
    (bucket,) = planned(doc, "google_storage_bucket")
    (rule,) = bucket["values"]["lifecycle_rule"]
    assert rule["action"] == [{"type": "Delete"}]
    assert rule["condition"][0]["days_since_noncurrent_time"] == 30
    assert bucket["values"]["versioning"] == [{"enabled": True}]
    (tpu,) = planned(document("tpu"), "google_tpu_v2_vm")
    assert tpu["values"]["service_account"][0]["scope"] == ["https://www.googleapis.com/auth/cloud-platform"]
    (notebook,) = planned(document("notebook"), "google_workbench_instance")
    # Workbench's own Terraform names are plural already.
    assert "network_interfaces" in notebook["values"]["gce_setup"][0]


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_no_script_text_in_the_export(stack: str) -> None:
    plan = plan_for(stack)
    text = json.dumps(terraform_plan(plan.resources))
    assert "#!/" not in text
    assert "set -euo pipefail" not in text
    for script in plan.scripts.values():
        for line in script.splitlines():
            if len(line.strip()) > 40:
                assert json.dumps(line.strip())[1:-1] not in text, line
    for vm in planned(json.loads(text), "google_compute_instance"):
        digest = vm["values"]["metadata"]["startup-script"]
        assert digest in {text_digest(s) for s in plan.scripts.values()}


def test_secrets_are_masked_and_marked_sensitive() -> None:
    """The notebook's post-startup script reaches the program as a Pulumi secret."""
    doc = document("notebook")
    objects = {o["address"]: o for o in planned(doc, "google_storage_bucket_object")}
    address = "google_storage_bucket_object.notebook-notebook-post-startup"
    assert objects[address]["values"]["content"] == SECRET_MASK
    assert objects[address]["sensitive_values"] == {"content": True}
    assert change(doc, address)["after_sensitive"] == {"content": True}
    # A secret as the mock monitor hands it over (Pulumi's signature around the value).
    wrapped = {SECRET_SIGNATURE_KEY: SECRET_SIGNATURE, "value": "hunter2"}
    item = PlannedResource("gcp:compute/projectMetadataItem:ProjectMetadataItem", "m", {"key": "k", "value": wrapped})
    (resource,) = terraform_plan([item])["planned_values"]["root_module"]["resources"]
    assert resource["values"]["value"] == SECRET_MASK
    assert resource["sensitive_values"] == {"value": True}
    assert "hunter2" not in json.dumps(terraform_plan([item]))


def test_values_the_provider_computes_are_unknown_and_referenced() -> None:
    doc = document("dev")
    (firewall,) = planned(doc, "google_compute_firewall")
    address = firewall["address"]
    # The network's id exists once the network does: not a value, a reference.
    assert "network" not in firewall["values"]
    assert change(doc, address)["after_unknown"] == {"network": True}
    assert expressions(doc, address)["network"]["references"] == [
        "google_compute_network.dev-net-vpc.id",
        "google_compute_network.dev-net-vpc",
    ]
    # The service account's e-mail is Google's naming rule applied to the inputs: known.
    assert firewall["values"]["target_service_accounts"] == ["dev-train@your-gcp-project.iam.gserviceaccount.com"]
    assert expressions(doc, address)["target_service_accounts"]["references"][0] == (
        "google_service_account.dev-identity-sa.email"
    )
    (vm,) = planned(doc, "google_compute_instance")
    assert vm["values"]["network_interface"] == [{}]
    assert change(doc, vm["address"])["after_unknown"] == {"network_interface": [{"subnetwork": True}]}
    (nat,) = planned(doc, "google_compute_router_nat")
    assert "router" not in nat["values"]
    assert change(doc, nat["address"])["after_unknown"] == {"router": True}
    assert "<computed>" not in json.dumps(doc)


def test_explicit_pulumi_provider_becomes_a_provider_alias() -> None:
    doc = document("multiworker")
    providers = doc["configuration"]["provider_config"]
    assert providers["google-beta"]["full_name"] == "registry.terraform.io/hashicorp/google-beta"
    (alias,) = [p for key, p in providers.items() if key != "google-beta"]
    assert alias["expressions"]["billing_project"] == {"constant_value": "your-gcp-project"}
    assert not [r for r in doc["planned_values"]["root_module"]["resources"] if "provider" in r["type"]]


def test_flattened_single_string_lists_are_wrapped() -> None:
    vm = PlannedResource("gcp:compute/instance:Instance", "vm", {"resourcePolicies": "policy-1", "name": "vm"})
    (resource,) = terraform_plan([vm])["planned_values"]["root_module"]["resources"]
    assert resource["values"] == {"resource_policies": ["policy-1"], "name": "vm"}


def test_unknown_type_is_one_clear_error() -> None:
    with pytest.raises(ConversionError, match="gcp:bigquery/table:Table"):
        terraform_plan([PlannedResource("gcp:bigquery/table:Table", "t", {})])


# -- the command -------------------------------------------------------------------------------


def run_cli(monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    """`python -m trainstack export tfplan ...` in this process, with the target registered
    whether or not the command line registers it yet."""
    build = cli_main.build_parser

    def parser_with_tfplan() -> argparse.ArgumentParser:
        parser = build()
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        export = commands.choices["export"]
        targets = next(a for a in export._actions if isinstance(a, argparse._SubParsersAction))
        if "tfplan" not in targets.choices:
            tfplan.register(targets)
        return parser

    monkeypatch.setattr(cli_main, "build_parser", parser_with_tfplan)
    return cli_main.main(list(argv))


def test_cli_prints_the_plan_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(monkeypatch, "export", "tfplan", "--stack", "dev") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == json.loads(json.dumps(document("dev")))


def test_cli_writes_out_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    assert run_cli(monkeypatch, "export", "tfplan", "--stack", "tpu", "--out", str(out)) == 0
    assert planned(json.loads(out.read_text(encoding="utf-8")), "google_tpu_v2_vm")


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--stack", "no-such-stack"], "no such stack file"),
        (["--stack", "dev", "--out", "."], "is a directory"),
        (["--stack", "dev", "--out", "/nonexistent-dir/plan.json"], "--out"),
    ],
)
def test_cli_bad_input_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    assert run_cli(monkeypatch, "export", "tfplan", *argv) != 0
    captured = capsys.readouterr()
    assert captured.out == ""
    problem = [line for line in captured.err.splitlines() if line.strip()]
    assert words in captured.err
    assert "Traceback" not in captured.err
    assert len(problem) <= 2, captured.err


# -- checkov -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def checkov() -> Path:
    if not CHECKOV.exists():
        pytest.fail(
            f"{CHECKOV.relative_to(REPO)} is missing: run scripts/checkov once (it creates .venv-checkov "
            "from scanners/checkov/requirements.txt)",
            pytrace=False,
        )
    return CHECKOV


def scan(checkov: Path, plans: dict[str, dict[str, Any]], directory: Path) -> dict[tuple[str, str, str], str]:
    """Run checkov once over the plans (file stem -> document); (stem, check, resource) -> result."""
    for stem, doc in plans.items():
        (directory / f"{stem}.json").write_text(json.dumps(doc), encoding="utf-8")
    result = subprocess.run(
        [str(checkov), "--config-file", str(CHECKOV_CONFIG), "-d", str(directory), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=CHECKOV_SECONDS,
        env={**os.environ, "CKV_SKIP_PACKAGE_UPDATE_CHECK": "true"},
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr[-2000:]
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    assert [r["check_type"] for r in reports] == ["terraform_plan"]
    (report,) = reports
    assert report["summary"]["parsing_errors"] == 0
    outcomes = {}
    for kind, outcome in (("passed_checks", "PASSED"), ("failed_checks", "FAILED")):
        for check in report["results"][kind]:
            outcomes[(Path(check["file_path"]).stem, check["check_id"], check["resource"])] = outcome
    assert {stem for stem, _, _ in outcomes} == set(plans), "every plan was scanned"
    return outcomes


def broken(resource: PlannedResource) -> PlannedResource:
    """The resource with the weakness each check under test looks for; others unchanged.

    The stack file's schema accepts none of these (no public IP, no open firewall, ...), so the
    plan is broken after the program ran, as a hand-edited program would break it."""
    inputs = copy.deepcopy(resource.inputs)
    if resource.type == "gcp:compute/instance:Instance" and resource.name.endswith("-chief"):
        inputs["networkInterfaces"][0]["accessConfigs"] = [{}]
        inputs["metadata"]["serial-port-enable"] = "TRUE"
        inputs["shieldedInstanceConfig"]["enableVtpm"] = False
    elif resource.type == "gcp:storage/bucket:Bucket":
        inputs["uniformBucketLevelAccess"] = False
    elif resource.type == "gcp:compute/firewall:Firewall" and resource.name.endswith("-iap-ssh"):
        inputs["sourceRanges"] = ["0.0.0.0/0"]
    elif resource.type == "gcp:storage/bucketIAMMember:BucketIAMMember":
        inputs["member"] = "allUsers"
    elif resource.type == "gcp:projects/iAMMember:IAMMember" and resource.name.endswith("-logWriter"):
        inputs["role"] = "roles/editor"
    else:
        return resource
    return dataclasses.replace(resource, inputs=inputs)


@pytest.mark.slow
def test_checkov_fails_each_broken_resource_by_name(checkov: Path, tmp_path: Path) -> None:
    plan = plan_of(write_stack(tmp_path, base_config()))
    doc = terraform_plan([broken(r) for r in plan.resources])
    plans_dir = tmp_path / "plans"
    plans_dir.mkdir()
    outcomes = scan(checkov, {"broken": doc}, plans_dir)

    def outcome(check: str, resource: str) -> str | None:
        return outcomes.get(("broken", check, resource))

    chief, worker = "google_compute_instance.test-cluster-chief", "google_compute_instance.test-cluster-worker-0"
    assert outcome("CKV_GCP_40", chief) == "FAILED"  # public IP (CIS 4.9)
    assert outcome("CKV_GCP_35", chief) == "FAILED"  # serial port (CIS 4.5)
    assert outcome("CKV_GCP_39", chief) == "FAILED"  # Shielded VM (CIS 4.8)
    # The same checks on the VM left as planned: the checks look at each resource.
    assert outcome("CKV_GCP_40", worker) == outcome("CKV_GCP_35", worker) == outcome("CKV_GCP_39", worker) == "PASSED"
    assert outcome("CKV_GCP_29", "google_storage_bucket.test-storage-bucket") == "FAILED"  # CIS 5.2
    assert outcome("CKV_GCP_2", "google_compute_firewall.test-net-iap-ssh") == "FAILED"  # CIS 3.6
    assert outcome("CKV_GCP_28", "google_storage_bucket_iam_member.test-identity-bucket-reader") == "FAILED"  # 5.1
    assert outcome("CKV_GCP_28", "google_storage_bucket_iam_member.test-identity-bucket-jobs-writer") == "FAILED"
    assert outcome("CKV_GCP_42", "google_project_iam_member.test-identity-logging-logWriter") == "FAILED"  # 1.5
    assert outcome("CKV_GCP_42", "google_project_iam_member.test-identity-monitoring-metricWriter") == "PASSED"


# What must have run, and passed, on each kind of resource: a converter that lost a resource's
# blocks or type would make these checks vanish rather than fail.
EXPECTED_PASSES = {
    "google_compute_instance": {f"CKV_GCP_{n}" for n in (30, 31, 32, 34, 35, 36, 39, 40)},
    "google_compute_firewall": {"CKV_GCP_2", "CKV_GCP_3", "CKV2_GCP_12"},
    "google_compute_network": {"CKV2_GCP_18"},
    # VPC Flow Logs on the stack's subnet (CKV_GCP_26 found them off; the subnet now logs).
    "google_compute_subnetwork": {"CKV_GCP_26", "CKV_GCP_74"},
    "google_storage_bucket": {"CKV_GCP_29", "CKV_GCP_78", "CKV_GCP_114"},
    "google_storage_bucket_iam_member": {"CKV_GCP_28"},
    "google_project_iam_member": {"CKV_GCP_41", "CKV_GCP_42", "CKV_GCP_46", "CKV_GCP_49", "CKV_GCP_117"},
    "google_artifact_registry_repository_iam_member": {"CKV_GCP_101"},
    "google_tpu_v2_vm": {"CKV2_GCP_32"},
    "google_workbench_instance": {"CKV2_GCP_28"},
}


@pytest.mark.slow
def test_shipped_stacks_pass_checkov(checkov: Path, tmp_path: Path) -> None:
    docs = {stack: document(stack) for stack in SHIPPED_STACKS}
    outcomes = scan(checkov, docs, tmp_path)
    failures = sorted(key for key, outcome in outcomes.items() if outcome == "FAILED")
    assert not failures, failures
    for stack, doc in docs.items():
        for resource in doc["planned_values"]["root_module"]["resources"]:
            for check in EXPECTED_PASSES.get(resource["type"], ()):
                assert outcomes.get((stack, check, resource["address"])) == "PASSED", (stack, check, resource)
