"""`trainstack check`: the policy pack in policies/, run on real plans through its own environment.

The pack's rules are unit-tested in policies/tests (in policies/.venv); here they meet what the
program really plans: every shipped stack passes, stacks a user can write wrong are caught, and
each rule fires on a real planned resource broken the way the rule forbids.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stack_helpers import SHIPPED_STACKS, base_config, plan_for, plan_of, write_stack
from trainstack.commands import check
from trainstack.commands.main import main
from trainstack.stackmodel.stackfile import load_stack, stack_file_path

VM, TPU, NB = "gcp:compute/instance:Instance", "gcp:tpu/v2Vm:V2Vm", "gcp:workbench/instance:Instance"
BUCKET, FW = "gcp:storage/bucket:Bucket", "gcp:compute/firewall:Firewall"
BUCKET_GRANT = "gcp:storage/bucketIAMMember:BucketIAMMember"
ACCOUNT = "gcp:serviceaccount/account:Account"


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_shipped_stack_passes_every_policy(stack: str) -> None:
    policies, findings = check.check_plan(plan_for(stack), {})
    assert len(policies) >= 15
    assert [f for f in findings if f.enforcement == "mandatory"] == []


def _edit(path: str, value: Any = None, delete: bool = False) -> Callable[[dict[str, Any]], None]:
    def apply(inputs: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        target: Any = inputs
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if delete:
            del target[leaf]
        else:
            target[int(leaf) if isinstance(target, list) else leaf] = value

    return apply


def _grant(role: str, member: str) -> Callable[[dict[str, Any]], None]:
    def apply(inputs: dict[str, Any]) -> None:
        inputs["role"], inputs["member"] = role, member

    return apply


# (rule, stack, resource type, how it is broken): one real planned resource per case.
BREAKAGES: list[tuple[str, str, str, Callable[[dict[str, Any]], None]]] = [
    ("no-public-ip", "multiworker", VM, _edit("networkInterfaces.0.accessConfigs", [{}])),
    ("no-public-ip", "tpu", TPU, _edit("networkConfig.enableExternalIps", True)),
    ("no-public-ip", "notebook", NB, _edit("gceSetup.disablePublicIp", False)),
    (
        "no-default-service-account",
        "multiworker",
        VM,
        _edit("serviceAccount.email", "123456789012-compute@developer.gserviceaccount.com"),
    ),
    ("no-default-service-account", "tpu", TPU, _edit("serviceAccount", delete=True)),
    (
        "no-primitive-roles",
        "multiworker",
        "gcp:projects/iAMMember:IAMMember",
        _grant("roles/editor", "group:ml@example.com"),
    ),
    ("no-public-members", "multiworker", BUCKET_GRANT, _edit("member", "allUsers")),
    ("shielded-vm", "paramserver", VM, _edit("shieldedInstanceConfig.enableSecureBoot", False)),
    ("shielded-vm", "notebook", NB, _edit("gceSetup.shieldedInstanceConfig", delete=True)),
    ("os-login", "multiworker", VM, _edit("metadata.enable-oslogin", "FALSE")),
    ("os-login", "tpu", TPU, _edit("metadata.block-project-ssh-keys", delete=True)),
    ("no-ip-forwarding", "dev", VM, _edit("canIpForward", True)),
    ("bucket-access", "multiworker", BUCKET, _edit("uniformBucketLevelAccess", False)),
    ("bucket-access", "tpu", BUCKET, _edit("publicAccessPrevention", "inherited")),
    ("executed-objects-spared", "dev", BUCKET_GRANT, _edit("condition", delete=True)),
    (
        "executed-objects-spared",
        "notebook",
        BUCKET_GRANT,
        _edit(
            "condition.expression",
            'resource.name.startsWith("projects/_/buckets/your-gcp-project_notebook/objects/")',
        ),
    ),
    ("gpu-terminates-on-maintenance", "multiworker", VM, _edit("scheduling.onHostMaintenance", "MIGRATE")),
    ("spot-no-automatic-restart", "multiworker", VM, _edit("scheduling.provisioningModel", "SPOT")),
    ("run-time-bound", "multiworker", VM, _edit("scheduling.maxRunDuration", delete=True)),
    ("run-time-bound", "tpu", TPU, _edit("metadata.trainstack-max-run-seconds", delete=True)),
    ("run-time-bound", "notebook", NB, _edit("gceSetup.metadata.idle-timeout-seconds", delete=True)),
    ("cost-labels", "paramserver", VM, _edit("labels.trainstack-stack", delete=True)),
    ("cost-labels", "notebook", NB, _edit("labels", {})),
    ("firewall-ingress", "multiworker", FW, _edit("sourceRanges", ["0.0.0.0/0"])),
    ("bucket-versioning", "multiworker", BUCKET, _edit("versioning", delete=True)),
    ("notebook-idle-timeout", "notebook", NB, _edit("gceSetup.metadata.idle-timeout-seconds", "86400")),
]


def test_each_rule_fires_on_a_real_planned_resource_broken_its_way() -> None:
    """All cases in one call of the pack (one interpreter start): each broken resource is renamed
    after its case, and must draw exactly its own rule. The stacks' service accounts come along,
    since the machines run as them."""
    resources = [r for stack in SHIPPED_STACKS for r in plan_for(stack).resource_documents() if r["type"] == ACCOUNT]
    expected: dict[str, str] = {}
    for index, (rule, stack, resource_type, breakage) in enumerate(BREAKAGES):
        original = next(r for r in plan_for(stack).resource_documents() if r["type"] == resource_type)
        broken = copy.deepcopy(original)
        broken["name"] = f"case{index}-{rule}"
        breakage(broken["inputs"])
        resources.append(broken)
        expected[broken["name"]] = rule
    _, findings = check.evaluate("cases", resources, {})
    fired = {(f.resource_name, f.policy) for f in findings}
    assert fired == set(expected.items())


def test_a_broad_scope_account_granted_an_admin_role_fails_the_stack_policy() -> None:
    resources = plan_for("multiworker").resource_documents()
    grant = copy.deepcopy(next(r for r in resources if r["type"] == "gcp:projects/iAMMember:IAMMember"))
    grant["name"], grant["inputs"]["role"] = "storage-admin-grant", "roles/storage.admin"
    _, findings = check.evaluate("multiworker", [*resources, grant], {})
    assert [(f.policy, f.resource_name) for f in findings] == [("broad-scope-least-privilege", "multiworker")]
    assert "storage-admin-grant" in findings[0].message
    assert "multiworker-train@" in findings[0].message


def test_a_stack_without_a_run_time_cap_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`cluster.max_run_hours: null` is a valid stack (acknowledged in `plan`), and exactly what
    the run-time rule exists to stop."""
    config = base_config()
    config["trainstack:cluster"]["max_run_hours"] = None
    config["trainstack:cluster"]["acknowledge_bills_until_stopped"] = True
    path = write_stack(tmp_path, config)
    assert main(["check", "--stack-file", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    refused = [line for line in out if line.startswith("mandatory")]
    assert len(refused) == 3
    assert all("run-time-bound" in line and "maxRunDuration" in line for line in refused)
    assert {line.split()[2] for line in refused} == {
        "test-cluster-chief",
        "test-cluster-worker-0",
        "test-cluster-worker-1",
    }
    assert out[-1].startswith("test: 20 policies over ")
    assert out[-1].endswith(": 3 mandatory, 0 advisory violation(s)")


def test_a_long_notebook_idle_timeout_is_advisory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = load_stack(stack_file_path("notebook"))[0].settings.model_dump(mode="json", exclude_none=True)
    raw = {
        "gcp:project": "test-project-123",
        "gcp:region": "us-west1",
        "trainstack:zone": "us-west1-b",
        "trainstack:notebook": {**config["notebook"], "idle_timeout_minutes": 600},
    }
    path = write_stack(tmp_path, raw)
    assert plan_of(path).resources  # the stack itself is valid
    assert main(["check", "--stack-file", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [(v["policy"], v["enforcement"]) for v in document["violations"]] == [("notebook-idle-timeout", "advisory")]
    assert "36000" in document["violations"][0]["message"]


def test_policy_config_makes_an_advisory_rule_mandatory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "policy.json"
    config.write_text(json.dumps({"cost-labels": {"required_labels": ["trainstack-stack", "cost-center"]}}))
    assert main(["check", "--stack", "tpu", "--policy-config", str(config)]) == 1
    out = capsys.readouterr().out
    assert "cost-labels  tpu-tpu-vm (gcp:tpu/v2Vm:V2Vm): labels lacks the cost label(s) cost-center" in out


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("{", "not JSON"),
        ("[]", "a JSON object of policy names"),
        ('{"cost-labels": {"labels": []}}', "cost-labels.labels: unknown property (known: required_labels)"),
        ('{"no-public-ip": "never"}', "no-public-ip.enforcementLevel: one of advisory, mandatory"),
    ],
)
def test_bad_policy_config_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, words: str
) -> None:
    config = tmp_path / "policy.json"
    config.write_text(content)
    assert main(["check", "--stack", "dev", "--policy-config", str(config)]) == 1
    err = capsys.readouterr().err
    assert words in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_a_missing_policy_environment_says_how_to_make_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("TRAINSTACK_POLICY_PYTHON", str(tmp_path / "no-such-python"))
    assert main(["check", "--stack", "dev"]) == 1
    err = capsys.readouterr().err
    assert "run `bash scripts/bootstrap`" in err
    assert "Traceback" not in err


def test_teammates_who_queue_jobs_pass_and_their_grants_on_a_machine_account_fail(tmp_path: Path) -> None:
    """The real planned grants to queue jobs (under trainstack/, by design) pass every policy; the
    same grant given to the training account is refused, and so is one reaching further."""
    config = base_config()
    config["trainstack:access"] = {"members": ["user:ana@example.com"]}
    resources = plan_of(write_stack(tmp_path, config)).resource_documents()
    _, findings = check.evaluate("test", resources, {})
    assert [f for f in findings if f.enforcement == "mandatory"] == []
    [index] = [r for r in resources if r["type"] == BUCKET_GRANT and r["name"].endswith("-index")]
    on_machine = copy.deepcopy(index)
    on_machine["name"] = "index-on-machine"
    on_machine["inputs"]["member"] = "serviceAccount:test-train@test-project-123.iam.gserviceaccount.com"
    wider = copy.deepcopy(index)
    wider["name"] = "index-prefix"
    wider["inputs"]["condition"]["expression"] = (
        wider["inputs"]["condition"]["expression"]
        .replace('resource.name == "', 'resource.name.startsWith("')
        .removesuffix('"')
        + '")'
    )
    _, findings = check.evaluate("test", [*resources, on_machine, wider], {})
    assert {(f.policy, f.resource_name) for f in findings} == {
        ("queue-writers-are-teammates", "test"),
        ("executed-objects-spared", "index-prefix"),
    }
    assert any("index-on-machine" in f.message for f in findings)
