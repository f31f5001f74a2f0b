"""The real Pulumi program under mocks: assertions on what `pulumi up` would create."""

from __future__ import annotations

import copy
import inspect
import json
import re
from pathlib import Path
from typing import Any

import pulumi_gcp as gcp
import pytest

from stack_helpers import SHIPPED_STACKS, base_config, plan_for, plan_of, write_stack
from trainstack.cloud.planning import Plan, PlannedResource
from trainstack.commands.main import main
from trainstack.stackmodel.stackfile import STACKS_DIR, read_stack_config_map
from trainstack_contract.iam import PRIMITIVE_ROLES

INSTANCE = "gcp:compute/instance:Instance"
TPU_VM = "gcp:tpu/v2Vm:V2Vm"
WORKBENCH = "gcp:workbench/instance:Instance"
ACCOUNT = "gcp:serviceaccount/account:Account"
BUCKET = "gcp:storage/bucket:Bucket"


def account_email(plan: Plan, suffix: str) -> str:
    """The e-mail of the stack's service account whose id ends in ``-<suffix>`` (train, tpu, nb)."""
    [account] = [a for a in plan.of_type(ACCOUNT) if a.inputs["accountId"].endswith(f"-{suffix}")]
    return f"{account.inputs['accountId']}@{account.inputs['project']}.iam.gserviceaccount.com"


def training_account_email(plan: Plan) -> str:
    return account_email(plan, "train")


def vms(plan: Plan) -> list[PlannedResource]:
    return plan.of_type(INSTANCE) + plan.of_type(TPU_VM) + plan.of_type(WORKBENCH)


def gpus_of(instance: PlannedResource) -> list[tuple[str, int]]:
    return [(a["type"], int(a["count"])) for a in instance.inputs.get("guestAccelerators", [])]


@pytest.mark.parametrize(
    ("stack", "expected"),
    [
        ("dev", {"dev-chief": [("nvidia-tesla-t4", 1)]}),
        (
            "multiworker",
            {
                "multiworker-chief": [("nvidia-tesla-t4", 2)],
                "multiworker-worker-0": [("nvidia-tesla-t4", 2)],
                "multiworker-worker-1": [("nvidia-tesla-t4", 2)],
            },
        ),
        (
            "paramserver",
            {
                "paramserver-chief": [],
                "paramserver-worker-0": [("nvidia-tesla-t4", 4)],
                "paramserver-worker-1": [("nvidia-tesla-t4", 4)],
                "paramserver-ps-0": [],
            },
        ),
    ],
)
def test_each_vm_gets_the_gpus_the_stack_asks_for(stack: str, expected: dict[str, list[tuple[str, int]]]) -> None:
    got = {vm.inputs["name"]: gpus_of(vm) for vm in plan_for(stack).of_type(INSTANCE)}
    assert got == expected


def test_notebook_gets_two_t4_in_us_west1() -> None:
    [notebook] = plan_for("notebook").of_type(WORKBENCH)
    assert notebook.inputs["location"] == "us-west1-b"
    assert notebook.inputs["gceSetup"]["acceleratorConfigs"] == [{"type": "NVIDIA_TESLA_T4", "coreCount": "2"}]
    assert notebook.inputs["gceSetup"]["metadata"]["idle-timeout-seconds"] == "3600"


def test_gpu_vms_terminate_on_host_maintenance(shipped_plan: Plan) -> None:
    for vm in shipped_plan.of_type(INSTANCE):
        if gpus_of(vm):
            assert vm.inputs["scheduling"]["onHostMaintenance"] == "TERMINATE", vm.name


def test_spot_vms_are_spot_and_do_not_restart_by_themselves() -> None:
    workers = [vm for vm in plan_for("multiworker").of_type(INSTANCE) if "-worker-" in vm.inputs["name"]]
    assert workers
    for vm in workers:
        scheduling = vm.inputs["scheduling"]
        assert (scheduling["provisioningModel"], scheduling["preemptible"], scheduling["automaticRestart"]) == (
            "SPOT",
            True,
            False,
        )
    [chief] = [vm for vm in plan_for("multiworker").of_type(INSTANCE) if vm.inputs["name"].endswith("chief")]
    assert chief.inputs["scheduling"]["provisioningModel"] == "STANDARD"


@pytest.mark.parametrize("on_finish", ["stop", "delete", "keep"])
def test_a_preempted_spot_vm_stops_so_it_can_be_started_again(tmp_path: Path, on_finish: str) -> None:
    """A Spot VM deleted on preemption loses its disk and its place in the cluster until the
    next `pulumi up`; stopped, it keeps both and `trainstack start` brings it back."""
    config = base_config()
    config["trainstack:cluster"]["on_finish"] = on_finish
    plan = plan_of(write_stack(tmp_path, config))
    spot = [vm for vm in plan.of_type(INSTANCE) if vm.inputs["scheduling"]["provisioningModel"] == "SPOT"]
    assert len(spot) == 2
    assert {vm.inputs["scheduling"]["instanceTerminationAction"] for vm in spot} == {"STOP"}
    assert all(vm.inputs["metadata"]["trainstack-on-finish"] == on_finish for vm in spot)


def test_a_spot_chief_is_valid_but_warned_about(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = base_config()
    assert main(["validate", "--stack-file", str(write_stack(tmp_path, config))]) == 0
    assert "warning" not in capsys.readouterr().err
    config["trainstack:cluster"]["chief"]["spot"] = True
    path = write_stack(tmp_path, config)
    assert main(["validate", "--stack-file", str(path)]) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: cluster.chief.spot is true: when the chief is preempted the whole job ends")
    assert any(note.startswith("warning: cluster.chief.spot") for note in plan_of(path).notes)


def test_every_vm_has_a_run_time_cap_that_stops_billing(shipped_plan: Plan) -> None:
    for vm in shipped_plan.of_type(INSTANCE):
        scheduling = vm.inputs["scheduling"]
        assert int(scheduling["maxRunDuration"]["seconds"]) > 0
        assert scheduling["instanceTerminationAction"] in {"STOP", "DELETE"}


def test_no_vm_has_a_public_ip(shipped_plan: Plan) -> None:
    for vm in shipped_plan.of_type(INSTANCE):
        for nic in vm.inputs["networkInterfaces"]:
            assert not nic.get("accessConfigs"), vm.name
    for tpu in shipped_plan.of_type(TPU_VM):
        assert tpu.inputs["networkConfig"]["enableExternalIps"] is False
    for notebook in shipped_plan.of_type(WORKBENCH):
        assert notebook.inputs["gceSetup"]["disablePublicIp"] is True


def test_each_kind_of_machine_runs_as_its_own_service_account(shipped_plan: Plan) -> None:
    """Cluster nodes, the TPU VM and the notebook never share an account, so none can act
    on another (the TPU's release role is project-wide, the notebook is outside the training port)."""
    for vm in vms(shipped_plan):
        if vm.type == WORKBENCH:
            assert [sa["email"] for sa in vm.inputs["gceSetup"]["serviceAccounts"]] == [
                account_email(shipped_plan, "nb")
            ]
        elif vm.type == TPU_VM:
            assert vm.inputs["serviceAccount"]["email"] == account_email(shipped_plan, "tpu")
        else:
            assert vm.inputs["serviceAccount"]["email"] == training_account_email(shipped_plan), vm.name
        assert "-compute@developer.gserviceaccount.com" not in json.dumps(vm.inputs)


def test_no_primitive_role_anywhere(shipped_plan: Plan) -> None:
    roles = [r.inputs["role"] for r in shipped_plan.resources if "role" in r.inputs]
    assert roles, "the plan binds no role at all"
    assert not PRIMITIVE_ROLES & set(roles)


def test_training_account_bindings_are_scoped_to_the_stack_bucket_and_repository(shipped_plan: Plan) -> None:
    [bucket] = shipped_plan.of_type(BUCKET)
    writer, reader = sorted(
        shipped_plan.of_type("gcp:storage/bucketIAMMember:BucketIAMMember"), key=lambda r: r.inputs["role"]
    )
    assert reader.inputs["bucket"] == writer.inputs["bucket"] == bucket.inputs["name"]
    assert (reader.inputs["role"], writer.inputs["role"]) == ("roles/storage.objectViewer", "roles/storage.objectUser")
    [repo] = shipped_plan.of_type("gcp:artifactregistry/repository:Repository")
    [repo_binding] = shipped_plan.of_type("gcp:artifactregistry/repositoryIamMember:RepositoryIamMember")
    assert repo_binding.inputs["repository"] == repo.inputs["repositoryId"]
    assert repo_binding.inputs["role"] == "roles/artifactregistry.reader"


def test_bucket_is_private_versioned_and_never_emptied_by_destroy(shipped_plan: Plan) -> None:
    [bucket] = shipped_plan.of_type(BUCKET)
    assert bucket.inputs["publicAccessPrevention"] == "enforced"
    assert bucket.inputs["uniformBucketLevelAccess"] is True
    assert bucket.inputs["versioning"]["enabled"] is True
    assert bucket.inputs["forceDestroy"] is False


def test_tpu_stack_binds_the_tpu_service_agent() -> None:
    """Google grants the Cloud TPU agent roles/tpu.serviceAgent; AI Platform Training's roles/ml.serviceAgent
    belongs to AI Platform's agent and is no longer the default."""
    plan = plan_for("tpu")
    [identity] = plan.of_type("gcp:projects/serviceIdentity:ServiceIdentity")
    assert identity.inputs["service"] == "tpu.googleapis.com"
    agent_bindings = [
        r
        for r in plan.of_type("gcp:projects/iAMMember:IAMMember")
        if "cloud-tpu.iam.gserviceaccount.com" in r.inputs["member"]
    ]
    assert [b.inputs["role"] for b in agent_bindings] == ["roles/tpu.serviceAgent"]


def is_labelable(type_token: str) -> bool:
    """Whether the pulumi-gcp resource behind ``gcp:compute/instance:Instance`` takes ``labels``."""
    package, module_path, class_name = type_token.split(":")
    if package != "gcp":
        return False  # the provider resource itself (pulumi:providers:gcp)
    module = getattr(gcp, module_path.split("/")[0])
    args = getattr(module, f"{class_name}Args", None)
    return args is not None and "labels" in inspect.signature(args.__init__).parameters


def test_the_labelable_set_is_derived_from_the_sdk() -> None:
    assert all(is_labelable(t) for t in (INSTANCE, BUCKET, TPU_VM, WORKBENCH))
    assert not is_labelable("gcp:compute/firewall:Firewall")


def test_labels_on_every_labelable_resource(shipped_plan: Plan) -> None:
    labelled = [r for r in shipped_plan.resources if is_labelable(r.type)]
    assert labelled
    for resource in labelled:
        labels: dict[str, Any] = resource.inputs.get("labels") or {}
        assert labels.get("trainstack-stack") == shipped_plan.stack, resource.name
    team_labels = {r.inputs["labels"].get("team") for r in labelled}
    assert None not in team_labels


def test_training_port_is_open_only_between_training_nodes() -> None:
    plan = plan_for("multiworker")
    email = training_account_email(plan)
    firewalls = {r.name: r.inputs for r in plan.of_type("gcp:compute/firewall:Firewall")}
    training = firewalls["multiworker-net-training"]
    assert training["allows"] == [{"protocol": "tcp", "ports": ["2222"]}]
    assert training["sourceServiceAccounts"] == [email]
    assert "sourceRanges" not in training
    ssh = firewalls["multiworker-net-iap-ssh"]
    assert ssh["sourceRanges"] == ["35.235.240.0/20"]


def test_tf_config_cluster_names_every_node_by_internal_dns() -> None:
    plan = plan_for("paramserver")
    [item] = plan.of_type("gcp:compute/projectMetadataItem:ProjectMetadataItem")
    for vm in plan.of_type(INSTANCE):
        assert vm.inputs["metadata"]["trainstack-cluster-key"] == item.inputs["key"]
    cluster = json.loads(item.inputs["value"])
    host = re.compile(r"^paramserver-(chief|worker-\d|ps-\d)\.us-central1-b\.c\.your-gcp-project\.internal:2222$")
    assert {role: len(addresses) for role, addresses in cluster.items()} == {"chief": 1, "worker": 2, "ps": 1}
    assert all(host.match(a) for addresses in cluster.values() for a in addresses)


def test_single_machine_stack_needs_no_tf_config_cluster() -> None:
    plan = plan_for("dev")
    [chief] = plan.of_type(INSTANCE)
    assert "trainstack-cluster-key" not in chief.inputs["metadata"]
    assert not plan.of_type("gcp:compute/projectMetadataItem:ProjectMetadataItem")


def test_the_plan_prices_every_node_from_the_catalog_rows() -> None:
    """Figures by hand from the catalog rows (machine_types.csv n1-standard-8: 0.38 on demand,
    0.12765 spot; gpus.csv nvidia-tesla-t4: 0.35, 0.1915; disks.csv pd-balanced: 0.10 per
    GB-month of 730 hours), not recomputed with the code's own sum."""
    plan = plan_for("multiworker")
    disk = 200 * 0.10 / 730
    chief = 0.38 + 2 * 0.35 + disk
    worker = 0.12765 + 2 * 0.1915 + disk
    by_node = {c.name: c.usd_per_hour for c in plan.costs}
    assert by_node == pytest.approx(
        {"multiworker-chief": chief, "multiworker-worker-0": worker, "multiworker-worker-1": worker}, abs=1e-9
    )
    assert plan.hourly_usd == pytest.approx(2.1835, abs=1e-9)  # 1.10740 + 2 x 0.53805, rounded
    # `pulumi stack output` shows the same figures: the plan read them from the program.
    assert plan.outputs["hourly_usd"] == plan.hourly_usd
    assert [c["usd_per_hour"] for c in plan.outputs["costs"]] == pytest.approx([chief, worker, worker], abs=1e-9)


def test_outputs_give_a_user_what_they_need(shipped_plan: Plan) -> None:
    outputs = shipped_plan.outputs
    assert outputs["bucket_url"].startswith("gs://your-gcp-project_")
    assert outputs["registry_url"].endswith(f"-docker.pkg.dev/your-gcp-project/{shipped_plan.stack}-images")
    assert outputs["vm_names"]
    for vm_name in outputs["vm_names"]:
        if "notebook" not in vm_name:
            assert "--tunnel-through-iap" in outputs["ssh_commands"][vm_name]


def test_nodes_get_job_settings_in_metadata_not_baked_into_the_script() -> None:
    plan = plan_for("multiworker")
    scripts_seen = set()
    for vm in plan.of_type(INSTANCE):
        metadata = vm.inputs["metadata"]
        scripts_seen.add(metadata["startup-script"])
        assert metadata["trainstack-job-dir"] == "gs://your-gcp-project_multiworker/jobs/flowers_mwms"
        assert metadata["trainstack-on-finish"] == "stop"
        args = json.loads(metadata["trainstack-trainer-args"])
        assert args[args.index("--strategy") + 1] == "multi_worker_mirrored"
        assert args[args.index("--epochs") + 1] == "10"
    assert len(scripts_seen) == 1, "one script serves every node; metadata tells them apart"
    [package] = [o for o in plan.of_type("gcp:storage/bucketObject:BucketObject") if o.name.endswith("-code")]
    # The built-in trainer ships as a package named by its content, and every node names it.
    assert re.fullmatch(r"trainstack/code/trainer-[0-9a-f]{16}\.zip", package.inputs["name"])
    for vm in plan.of_type(INSTANCE):
        assert vm.inputs["metadata"]["trainstack-code-archive"] == package.inputs["name"]
        assert vm.inputs["metadata"]["trainstack-module"] == "trainer.task"
        assert vm.inputs["metadata"]["trainstack-job-mode"] == "package"


CUSTOM_ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
INSTANCE_GRANT = "gcp:compute/instanceIAMMember:InstanceIAMMember"


def custom_roles(plan: Plan, purpose: str) -> list[PlannedResource]:
    """The plan's custom roles for one purpose (node_release, node_recover, tpu_release)."""
    return [r for r in plan.of_type(CUSTOM_ROLE) if r.inputs["roleId"].endswith(f"_{purpose}")]


def role_grants(plan: Plan, purpose: str) -> list[PlannedResource]:
    """Every IAM member resource of the plan, of any type, that grants a role of ``purpose``."""
    return [
        r
        for r in plan.resources
        if "iam" in r.type.split(":")[-1].lower() and str(r.inputs.get("role", "")).endswith(f"_{purpose}")
    ]


def test_self_delete_is_a_custom_role_granted_per_instance_only_when_on_finish_is_delete() -> None:
    """Defect: on_finish: delete granted roles/compute.instanceAdmin.v1 on each VM to the one
    training account: every node (and a TPU VM or notebook on that account) could administer
    every node, including rewriting another node's startup script."""
    multiworker = plan_for("multiworker")
    assert not custom_roles(multiworker, "node_release")
    assert not role_grants(multiworker, "node_release")
    plan = plan_for("paramserver")
    [role] = custom_roles(plan, "node_release")
    assert sorted(role.inputs["permissions"]) == [
        "compute.instances.delete",
        "compute.instances.get",
        "compute.instances.stop",
    ]
    grants = role_grants(plan, "node_release")
    assert {g.type for g in grants} == {INSTANCE_GRANT}
    assert sorted(g.inputs["instanceName"] for g in grants) == sorted(
        vm.inputs["name"] for vm in plan.of_type(INSTANCE)
    )
    assert {g.inputs["member"] for g in grants} == {f"serviceAccount:{training_account_email(plan)}"}
    assert {g.inputs["role"] for g in grants} == {f"projects/your-gcp-project/roles/{role.inputs['roleId']}"}


def test_the_chief_may_only_get_and_start_its_spot_peers_each_granted_on_its_own_instance() -> None:
    """The chief starts a preempted Spot worker again: the training account gets a custom role
    of get and start, on each Spot worker's instance alone (the nodes share that account)."""
    plan = plan_for("multiworker")
    [role] = custom_roles(plan, "node_recover")
    assert sorted(role.inputs["permissions"]) == ["compute.instances.get", "compute.instances.start"]
    assert role.inputs["title"].endswith(": cluster chief starts its preempted Spot peers")
    assert role.inputs["roleId"] == "trainstack_multiworker_node_recover"
    spot = sorted(
        vm.inputs["name"] for vm in plan.of_type(INSTANCE) if vm.inputs["scheduling"]["provisioningModel"] == "SPOT"
    )
    assert spot == ["multiworker-worker-0", "multiworker-worker-1"]
    grants = role_grants(plan, "node_recover")
    assert {g.type for g in grants} == {INSTANCE_GRANT}
    # One grant per Spot worker, on that worker's instance; none on the chief.
    assert sorted(g.inputs["instanceName"] for g in grants) == spot
    assert {(g.inputs["role"], g.inputs["member"], g.inputs["project"], g.inputs["zone"]) for g in grants} == {
        (
            f"projects/your-gcp-project/roles/{role.inputs['roleId']}",
            f"serviceAccount:{training_account_email(plan)}",
            "your-gcp-project",
            "us-central1-a",
        )
    }
    assert not [g for g in plan.of_type(INSTANCE_GRANT) if g.inputs["instanceName"] == "multiworker-chief"]


@pytest.mark.parametrize(
    ("stack", "recoverable"),
    [
        ("multiworker", ["multiworker-worker-0", "multiworker-worker-1"]),
        # Spot workers, an on-demand chief and parameter server, and the release role too.
        ("paramserver", ["paramserver-worker-0", "paramserver-worker-1"]),
        ("ownpackage", ["ownpackage-worker-0"]),
        ("dev", []),
        ("tpu", []),
        ("notebook", []),
    ],
)
def test_each_shipped_stack_grants_recovery_on_its_spot_peers_alone(stack: str, recoverable: list[str]) -> None:
    plan = plan_for(stack)
    assert sorted(g.inputs["instanceName"] for g in role_grants(plan, "node_recover")) == recoverable
    assert len(custom_roles(plan, "node_recover")) == (1 if recoverable else 0)


def multiworker_with(tmp_path: Path, chief_spot: bool, workers_spot: bool) -> Plan:
    config = copy.deepcopy(read_stack_config_map(STACKS_DIR / "Pulumi.multiworker.yaml"))
    config["trainstack:cluster"]["chief"]["spot"] = chief_spot
    config["trainstack:cluster"]["workers"]["spot"] = workers_spot
    return plan_of(write_stack(tmp_path, config, stack="multiworker"))


@pytest.mark.parametrize(
    ("chief_spot", "workers_spot"),
    [(False, False), (True, False)],
    ids=["nothing_spot", "only_the_chief_spot"],
)
def test_no_recover_role_or_grant_when_no_peer_of_the_chief_is_spot(
    tmp_path: Path, chief_spot: bool, workers_spot: bool
) -> None:
    """The chief watches its peers only: a Spot chief with on-demand workers has none to watch."""
    plan = multiworker_with(tmp_path, chief_spot, workers_spot)
    models = {vm.inputs["name"]: vm.inputs["scheduling"]["provisioningModel"] for vm in plan.of_type(INSTANCE)}
    assert models["multiworker-chief"] == ("SPOT" if chief_spot else "STANDARD")
    assert models["multiworker-worker-0"] == models["multiworker-worker-1"] == "STANDARD"
    assert custom_roles(plan, "node_recover") == []
    assert role_grants(plan, "node_recover") == []
    assert plan.of_type(INSTANCE_GRANT) == []


def test_a_spot_chief_is_not_granted_recovery_on_itself(tmp_path: Path) -> None:
    plan = multiworker_with(tmp_path, chief_spot=True, workers_spot=True)
    assert sorted(g.inputs["instanceName"] for g in role_grants(plan, "node_recover")) == [
        "multiworker-worker-0",
        "multiworker-worker-1",
    ]


def test_the_tpu_vm_releases_itself_with_a_custom_role_held_by_its_own_account() -> None:
    """Defect: the TPU VM's account got roles/tpu.admin on the project."""
    plan = plan_for("tpu")
    [role] = plan.of_type(CUSTOM_ROLE)
    assert sorted(role.inputs["permissions"]) == ["tpu.nodes.delete", "tpu.nodes.get", "tpu.nodes.stop"]
    [grant] = [
        r for r in plan.of_type("gcp:projects/iAMMember:IAMMember") if r.inputs["role"].endswith(role.inputs["roleId"])
    ]
    assert grant.inputs["member"] == f"serviceAccount:{account_email(plan, 'tpu')}"


# Every role a plan may grant, and why each is the narrowest for its one action. A role not
# listed here (roles/editor, roles/compute.instanceAdmin, roles/tpu.admin, roles/storage.admin,
# ...) fails the test below until it is argued for here.
ALLOWED_ROLES = {
    "roles/logging.logWriter": "nodes write their journal to Cloud Logging",
    "roles/monitoring.metricWriter": "nodes write the Ops Agent's metrics",
    "roles/storage.objectViewer": "reading the bucket's code and a team's data bucket",
    "roles/storage.objectUser": "writing checkpoints, status and models under the job's prefixes",
    "roles/artifactregistry.reader": "pulling the job's image",
    "roles/tpu.serviceAgent": "the TPU service agent's own role, as Google documents it",
    "roles/secretmanager.secretAccessor": "reading one secret, granted on that secret",
    "roles/iap.tunnelResourceAccessor": "a teammate's IAP tunnel to one VM",
    "roles/compute.osLogin": "a teammate's login without sudo, on one VM",
    "roles/iam.serviceAccountUser": "OS Login and Workbench need a teammate to act as the VM's account",
    "roles/notebooks.viewer": "a teammate opening the notebook",
    "roles/storage.objectCreator": "a teammate queueing a job: new code and specs, under trainstack/ by name",
}
# Custom roles: what a node may do to its own cluster's VMs and TPU, and nothing else.
ALLOWED_PERMISSIONS = {
    "compute.instances.get",
    "compute.instances.start",
    "compute.instances.stop",
    "compute.instances.delete",
    "tpu.nodes.get",
    "tpu.nodes.stop",
    "tpu.nodes.delete",
}


def granted(value: Any) -> tuple[list[str], list[str]]:
    """Every role and every custom role permission anywhere in a plan's JSON."""
    if isinstance(value, list):
        found = [granted(item) for item in value]
        return [r for f in found for r in f[0]], [p for f in found for p in f[1]]
    if not isinstance(value, dict):
        return [], []
    roles = [value["role"]] if isinstance(value.get("role"), str) else []
    permissions = list(value.get("permissions", [])) if isinstance(value.get("permissions"), list) else []
    for item in value.values():
        more_roles, more_permissions = granted(item)
        roles += more_roles
        permissions += more_permissions
    return roles, permissions


def every_feature_config() -> dict[str, Any]:
    """A stack with each part that grants something: cluster, notebook, teammates, secrets, data bucket."""
    config = base_config()
    config["trainstack:notebook"] = {"machine_type": "n1-standard-8"}
    config["trainstack:access"] = {"members": ["user:a@example.com"]}
    config["trainstack:secrets"] = {"WANDB_API_KEY": {"secure": "v1:AAAA"}}
    config["trainstack:job"]["data"] = "gs://a-teams-data/flowers"
    return config


@pytest.mark.parametrize("stack", [*SHIPPED_STACKS, "every-feature"])
def test_plan_json_grants_only_allow_listed_roles_and_permissions(
    stack: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if stack == "every-feature":
        path = write_stack(tmp_path, every_feature_config(), "every")
        assert main(["plan", "--stack-file", str(path), "--json"]) == 0
    else:
        assert main(["plan", "--stack", stack, "--json"]) == 0
    roles, permissions = granted(json.loads(capsys.readouterr().out))
    assert roles, "the plan grants nothing: the walk found no roles"
    predefined = {r for r in roles if r.startswith("roles/")}
    custom = set(roles) - predefined
    assert predefined <= set(ALLOWED_ROLES), sorted(predefined - set(ALLOWED_ROLES))
    assert all(re.fullmatch(r"projects/[a-z0-9-]+/roles/trainstack_[a-z0-9_]+", r) for r in custom), custom
    assert set(permissions) <= ALLOWED_PERMISSIONS, sorted(set(permissions) - ALLOWED_PERMISSIONS)
    if stack == "every-feature":
        assert {"roles/secretmanager.secretAccessor", "roles/compute.osLogin", "roles/notebooks.viewer"} <= predefined


def test_the_notebook_is_outside_the_training_port(tmp_path: Path) -> None:
    """Defect: the notebook ran as the training account, so it could reach the training port."""
    from stack_helpers import base_config, plan_of, write_stack

    config = base_config()
    config["trainstack:notebook"] = {"machine_type": "n1-standard-8"}
    plan = plan_of(write_stack(tmp_path, config))
    training_account, notebook_account = training_account_email(plan), account_email(plan, "nb")
    assert training_account != notebook_account
    firewalls = {r.name.rsplit("-", 1)[-1]: r.inputs for r in plan.of_type("gcp:compute/firewall:Firewall")}
    assert firewalls["training"]["sourceServiceAccounts"] == [training_account]
    assert firewalls["training"]["targetServiceAccounts"] == [training_account]
    assert sorted(firewalls["ssh"]["targetServiceAccounts"]) == sorted([training_account, notebook_account])


def test_hardening_metadata_on_the_tpu_vm_and_the_notebook() -> None:
    """Defect: the TPU VM did not block project-wide SSH keys; Workbench had no OS Login."""
    for vm in plan_for("multiworker").of_type(INSTANCE):
        assert vm.inputs["metadata"]["block-project-ssh-keys"] == "TRUE"
        assert vm.inputs["metadata"]["enable-oslogin"] == "TRUE"
    [tpu] = plan_for("tpu").of_type(TPU_VM)
    assert tpu.inputs["metadata"]["block-project-ssh-keys"] == "TRUE"
    assert tpu.inputs["metadata"]["enable-oslogin"] == "TRUE"
    [notebook] = plan_for("notebook").of_type(WORKBENCH)
    assert notebook.inputs["gceSetup"]["metadata"]["enable-oslogin"] == "TRUE"
    assert notebook.inputs["gceSetup"]["metadata"]["block-project-ssh-keys"] == "TRUE"
    # Priced as pd-balanced (disks.csv); Workbench takes the same type as its enum.
    assert notebook.inputs["gceSetup"]["bootDisk"]["diskType"] == "PD_BALANCED"


def test_stacks_without_a_multi_node_cluster_open_no_training_port() -> None:
    """Defect: the single-node dev stack got the training-port firewall it does not need."""
    for stack in ("tpu", "notebook", "dev"):
        names = {r.name for r in plan_for(stack).of_type("gcp:compute/firewall:Firewall")}
        assert names == {f"{stack}-net-iap-ssh"}


def test_data_in_another_bucket_is_granted_read_only(tmp_path: Path) -> None:
    from stack_helpers import BASE_CONFIG, plan_of, write_stack

    config = json.loads(json.dumps(BASE_CONFIG))
    config["trainstack:job"]["data"] = "gs://shared-datasets/flowers/"
    plan = plan_of(write_stack(tmp_path, config))
    grants = sorted(
        (r.inputs["bucket"], r.inputs["role"], bool(r.inputs.get("condition")))
        for r in plan.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
    )
    assert grants == [
        ("shared-datasets", "roles/storage.objectViewer", False),
        ("test-project-123_test", "roles/storage.objectUser", True),
        ("test-project-123_test", "roles/storage.objectViewer", False),
    ]


def test_budget_amount_and_its_quota_project() -> None:
    [budget] = plan_for("multiworker").of_type("gcp:billing/budget:Budget")
    # No currency: a budget in USD fails for a billing account in another currency.
    assert budget.inputs["amount"]["specifiedAmount"] == {"units": "500", "nanos": 0}
    [provider] = plan_for("multiworker").of_type("pulumi:providers:gcp")
    assert provider.inputs["userProjectOverride"] in (True, "true")
    assert provider.inputs["billingProject"] == "your-gcp-project"


def test_the_bucket_is_protected_unless_the_stack_lets_destroy_delete_it() -> None:
    """A renamed stack or a changed name would make `pulumi up` delete the bucket and start a
    new empty one; protect makes that fail instead."""
    import pulumi

    from trainstack.cloud.components.bucket import TrainingBucket, TrainingBucketArgs
    from trainstack.cloud.planning import PlanMocks
    from trainstack.stackmodel.schema import Storage

    pulumi.runtime.set_mocks(PlanMocks("test-project-123"), preview=True)
    kept = TrainingBucket(
        "kept", TrainingBucketArgs("test-project-123-kept", "us-central1", Storage(), {}, None, "kept")
    )
    deletable = TrainingBucket(
        "gone",
        TrainingBucketArgs("test-project-123-gone", "us-central1", Storage(delete_on_destroy=True), {}, None, "gone"),
    )
    assert kept.bucket._protect is True
    assert deletable.bucket._protect is False


def test_the_renamed_role_component_keeps_aliases_to_its_former_type() -> None:
    """ReleaseRole became NodeActionRole. The type is part of the URN of the component and its
    custom role: without aliases an update would replace the role, whose id a delete blocks
    for 7 days. A former parent the caller gives (moved_here) is kept, also under the old type."""
    import pulumi

    from trainstack.cloud.components import moved_here, with_former_type
    from trainstack.cloud.components.identity import FORMER_ROLE_TYPE
    from trainstack.cloud.planning import PlanMocks

    assert FORMER_ROLE_TYPE == "trainstack:index:ReleaseRole"
    pulumi.runtime.set_mocks(PlanMocks("test-project-123"), preview=True)
    stack = pulumi.ComponentResource("trainstack:index:TrainingStack", "s")
    component = pulumi.ComponentResource("trainstack:index:TpuVm", "c", opts=pulumi.ResourceOptions(parent=stack))
    options = with_former_type(moved_here(component, pulumi.ResourceOptions(parent=stack)), FORMER_ROLE_TYPE)
    assert options.parent is component
    aliases = [(a.type_, a.parent) for a in options.aliases or [] if isinstance(a, pulumi.Alias)]
    assert aliases == [(..., stack), (FORMER_ROLE_TYPE, ...), (FORMER_ROLE_TYPE, stack)]
    # A caller that gives no alias: the former type alone.
    options = with_former_type(pulumi.ResourceOptions(parent=component), FORMER_ROLE_TYPE)
    assert [(a.type_, a.parent) for a in options.aliases or [] if isinstance(a, pulumi.Alias)] == [
        (FORMER_ROLE_TYPE, ...)
    ]


def test_a3_ultra_boots_from_hyperdisk_and_tpu_ssh_uses_the_track_with_iap(tmp_path: Path) -> None:
    """Cloud facts: A3 Ultra needs a Hyperdisk boot disk (not pd-balanced); GA `tpu-vm ssh`
    has no --tunnel-through-iap, the alpha track has."""
    from stack_helpers import base_config, plan_of, write_stack

    config = base_config()
    config["trainstack:zone"] = "us-central1-b"
    config["trainstack:cluster"] = {"chief": {"machine_type": "a3-ultragpu-8g", "spot": True}}
    [vm] = plan_of(write_stack(tmp_path, config)).of_type(INSTANCE)
    assert vm.inputs["bootDisk"]["initializeParams"]["type"] == "hyperdisk-balanced"
    [ssh] = plan_for("tpu").outputs["ssh_commands"].values()
    assert ssh.startswith("gcloud alpha compute tpus tpu-vm ssh ")
    assert ssh.endswith("--tunnel-through-iap")


def test_children_moved_under_a_component_keep_an_alias_to_their_old_parent() -> None:
    """Release roles, the TPU agent and bucket objects moved from the stack component into
    their own: without the alias an update would delete and recreate them."""
    import pulumi

    from trainstack.cloud.components import moved_here
    from trainstack.cloud.planning import PlanMocks

    pulumi.runtime.set_mocks(PlanMocks("test-project-123"), preview=True)
    stack = pulumi.ComponentResource("trainstack:index:TrainingStack", "s")
    component = pulumi.ComponentResource("trainstack:index:TpuVm", "c", opts=pulumi.ResourceOptions(parent=stack))
    options = moved_here(component, pulumi.ResourceOptions(parent=stack))
    assert options.parent is component
    assert options.aliases is not None
    assert [a.parent for a in options.aliases] == [stack]
    assert moved_here(component, None).aliases is None


def test_plan_says_why_the_tpu_release_grant_cannot_be_narrowed_to_the_stacks_node() -> None:
    """The TPU release role is bound on the project (no per-node IAM, no IAM Conditions on
    tpu.googleapis.com): a stack may stop another stack's TPU, and the plan says so."""
    plan = plan_for("tpu")
    [note] = [n for n in plan.notes if "every TPU node of the project" in n]
    assert "cannot be narrowed" in note
    assert "conditions-resource-attributes" in note
    release = [r for r in plan.of_type("gcp:projects/iAMMember:IAMMember") if "tpu_release" in str(r.inputs["role"])]
    assert len(release) == 1
    assert "condition" not in release[0].inputs
    assert all("every TPU node" not in n for n in plan_for("multiworker").notes)


def test_every_machine_waits_for_its_grants_its_code_and_its_egress(shipped_plan: Plan) -> None:
    """A machine trains from boot: the engine creates it only after the bindings its account
    needs, the objects it fetches and the network's NAT, not merely after its component."""
    machines = [
        *vms(shipped_plan),
        *shipped_plan.of_type("gcp:tpu/v2Vm:V2Vm"),
        *shipped_plan.of_type("gcp:workbench/instance:Instance"),
    ]
    nat = {r.name for r in shipped_plan.of_type("gcp:compute/routerNat:RouterNat")}
    for machine in machines:
        waits = shipped_plan.waits_for[machine.name]
        grants = {r.name for r in shipped_plan.resources if r.type.endswith("IAMMember") and r.name in waits}
        assert grants, machine.name
        assert nat <= waits, machine.name
        if machine.type != "gcp:workbench/instance:Instance":
            code = {r.name for r in shipped_plan.of_type("gcp:storage/bucketObject:BucketObject")}
            assert code & waits, machine.name
