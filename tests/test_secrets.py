"""Job secrets: `pulumi config set --path --secret 'trainstack:secrets.NAME'`, stored in Secret
Manager by the program, readable by the training accounts alone, fetched by the node agent at
run time (tests/agent: the exact requests, and the job's environment), and never in metadata,
labels, logs, scripts or plan output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import trainstack.cloud.planning as plan_module
from stack_helpers import base_config, plan_of, write_stack
from trainstack.base.errors import StackConfigError
from trainstack.cloud.planning import Plan, run_plan
from trainstack.cloud.pulumi_internals import SECRET_SIGNATURE, SECRET_SIGNATURE_KEY
from trainstack.commands.main import main
from trainstack.stackmodel.feasibility import parse_and_check

CANARY = "canary-7f3e9d1c-token"
SECRET_KEY = "trainstack:secrets"
SECRET = "gcp:secretmanager/secret:Secret"
VERSION = "gcp:secretmanager/secretVersion:SecretVersion"
READER = "gcp:secretmanager/secretIamMember:SecretIamMember"


def config_with_secrets(tpu: bool = False) -> dict[str, Any]:
    config = base_config()
    # As `pulumi config set --path --secret` writes them: ciphertext only.
    config[SECRET_KEY] = {"WANDB_API_KEY": {"secure": "v1:AAAA"}, "HF_TOKEN": {"secure": "v1:BBBB"}}
    if tpu:
        config["trainstack:tpu"] = {"accelerator_type": "v2-8", "runtime_version": "tpu-vm-tf-2.17.0-pjrt"}
        config["trainstack:zone"] = "us-central1-b"
        del config["trainstack:cluster"]
    return config


def engine_plan(config: dict[str, Any]) -> Plan:
    """The program as `pulumi up` runs it: the engine decrypts the secret values and marks the key secret."""
    decrypted = {**config, SECRET_KEY: json.dumps({"WANDB_API_KEY": CANARY, "HF_TOKEN": CANARY + "-hf"})}
    return run_plan("sec", decrypted, frozenset({SECRET_KEY}))


def paths_holding(value: Any, needle: str, path: str = "") -> list[str]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in paths_holding(v, needle, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in paths_holding(v, needle, f"{path}[{i}]")]
    return [path] if isinstance(value, str) and needle in value else []


def test_each_secret_is_stored_in_the_region_and_readable_by_the_training_account_alone(tmp_path: Path) -> None:
    plan = plan_of(write_stack(tmp_path, config_with_secrets(), "sec"))
    secrets = {r.inputs["secretId"]: r.inputs for r in plan.of_type(SECRET)}
    assert set(secrets) == {"sec-WANDB_API_KEY", "sec-HF_TOKEN"}
    assert all(
        s["replication"] == {"userManaged": {"replicas": [{"location": "us-central1"}]}} for s in secrets.values()
    )
    assert all(s["labels"]["trainstack-stack"] == "sec" for s in secrets.values())
    readers = [(r.inputs["secretId"], r.inputs["role"], r.inputs["member"]) for r in plan.of_type(READER)]
    training = "serviceAccount:sec-train@test-project-123.iam.gserviceaccount.com"
    assert sorted(readers) == [
        ("sec-HF_TOKEN", "roles/secretmanager.secretAccessor", training),
        ("sec-WANDB_API_KEY", "roles/secretmanager.secretAccessor", training),
    ]
    # No project-wide Secret Manager role: that would read every secret of the project.
    assert not [r for r in plan.of_type("gcp:projects/iAMMember:IAMMember") if "secretmanager" in r.inputs["role"]]
    assert [r.inputs["secretData"] for r in plan.of_type(VERSION)] == ["[secret]", "[secret]"]
    assert "secretmanager.googleapis.com" in [r.inputs["service"] for r in plan.of_type("gcp:projects/service:Service")]
    for vm in plan.of_type("gcp:compute/instance:Instance"):
        assert vm.inputs["metadata"]["trainstack-secrets"] == "HF_TOKEN=sec-HF_TOKEN WANDB_API_KEY=sec-WANDB_API_KEY"


def test_a_tpu_stack_grants_its_own_account() -> None:
    plan = engine_plan(config_with_secrets(tpu=True))
    members = {r.inputs["member"] for r in plan.of_type(READER)}
    assert members == {"serviceAccount:sec-tpu@test-project-123.iam.gserviceaccount.com"}
    assert plan.of_type("gcp:tpu/v2Vm:V2Vm")[0].inputs["metadata"]["trainstack-secrets"].startswith("HF_TOKEN=")


def test_a_secret_value_reaches_secret_manager_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the provider would receive (the plan's masking off): the value is in one input of
    one resource, the secret version's data; the plan, its JSON and the scripts never show it."""
    monkeypatch.setattr(plan_module, "is_secret", lambda _value: False)
    raw = engine_plan(config_with_secrets())
    holders = [(r.type, p) for r in raw.resources for p in paths_holding(r.inputs, CANARY)]
    assert sorted(holders) == [(VERSION, ".secretData.value"), (VERSION, ".secretData.value")]
    # ... and there it travels marked secret, which the engine encrypts in the stack's state.
    for version in raw.of_type(VERSION):
        assert version.inputs["secretData"][SECRET_SIGNATURE_KEY] == SECRET_SIGNATURE
    assert not any(CANARY in script for script in raw.scripts.values())
    monkeypatch.undo()

    plan = engine_plan(config_with_secrets())
    assert CANARY not in json.dumps(plan.to_json())
    assert not any(CANARY in script for script in plan.scripts.values())
    for resource in plan.resources:
        assert not paths_holding(resource.inputs.get("metadata", {}), CANARY)
        assert not paths_holding(resource.inputs.get("labels", {}), CANARY)


@pytest.mark.slow
def test_plan_and_check_of_a_stack_with_secrets_print_no_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_stack(tmp_path, config_with_secrets(), "sec")
    assert main(["plan", "--stack-file", str(path)]) == 0
    assert main(["plan", "--stack-file", str(path), "--json"]) == 0
    assert main(["check", "--stack-file", str(path)]) == 0
    out = capsys.readouterr().out
    assert "v1:AAAA" not in out
    assert "sec-WANDB_API_KEY" in out


def problems_of(config: dict[str, Any], secret_keys: frozenset[str] = frozenset()) -> str:
    with pytest.raises(StackConfigError) as caught:
        parse_and_check("sec", config, secret_keys=secret_keys)
    return caught.value.report()


def test_a_secret_written_in_clear_text_is_refused_without_repeating_it() -> None:
    config = base_config()
    config[SECRET_KEY] = {"WANDB_API_KEY": CANARY}
    report = problems_of(config)
    assert "trainstack:secrets.WANDB_API_KEY" in report
    assert "pulumi config set --path --secret" in report
    assert CANARY not in report
    # Under the engine too, when the key is not a secret: the value is in the stack file in clear.
    assert CANARY not in problems_of({**config, SECRET_KEY: json.dumps({"WANDB_API_KEY": CANARY})})


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("wandb_key", "an environment variable name"),
        ("WANDB KEY", "an environment variable name"),
        ("X" * 65, "an environment variable name"),
        ("TF_CONFIG", "reserved"),
        ("PATH", "reserved"),
        ("LD_PRELOAD", "reserved"),
        ("AIP_MODEL_DIR", "reserved"),
    ],
)
def test_bad_secret_names_are_refused_by_name(name: str, words: str) -> None:
    config = base_config()
    config[SECRET_KEY] = {name: {"secure": "v1:AAAA"}}
    report = problems_of(config)
    assert "trainstack:secrets" in report
    assert words in report


def test_secrets_without_a_job_are_refused() -> None:
    config = config_with_secrets()
    config["trainstack:job"] = "none"
    assert "runs none" in problems_of(config)


@pytest.mark.parametrize(
    "job",
    [
        # `pulumi config set --path --secret 'trainstack:job.args[1]' TOKEN`, as the stack file keeps it.
        {"name": "j", "args": ["--token", {"secure": "v1:AAAA"}]},
        # `pulumi config set --secret trainstack:job '{...}'`: the whole value.
        {"secure": "v1:BBBB"},
    ],
)
def test_a_setting_set_as_a_secret_other_than_secrets_is_refused_naming_the_right_place(job: Any) -> None:
    """Defect: a token set with --secret in trainstack:job's args became plain text in the
    machines' metadata and in the boot log."""
    config = base_config()
    config["trainstack:job"] = job
    report = problems_of(config)
    assert "trainstack:job: is set as a secret" in report
    assert "trainstack:secrets.<NAME>" in report


def test_the_engine_marking_a_setting_secret_is_refused_too() -> None:
    """With the Pulumi CLI the program gets decrypted values and the list of secret keys."""
    config = base_config()
    config["trainstack:job"] = json.dumps({"name": "j", "args": ["--token", CANARY]})
    report = problems_of(config, secret_keys=frozenset({"trainstack:job"}))
    assert "trainstack:job: is set as a secret" in report
    assert CANARY not in report
