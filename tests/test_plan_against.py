"""`plan --against PREVIOUS.json`: what `pulumi up` would delete or replace, before it does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stack_helpers import base_config, write_stack
from trainstack.commands.main import main


def plan_json(path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert main(["plan", "--stack-file", str(path), "--json"]) == 0
    out = path.with_suffix(".plan.json")
    out.write_text(capsys.readouterr().out)
    return out


def against(path: Path, previous: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict, str]:  # type: ignore[type-arg]
    assert main(["plan", "--stack-file", str(path), "--json", "--against", str(previous)]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


def test_two_plans_of_the_same_stack_are_identical_and_change_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Plans could not be diffed: unknowns and archives printed as object addresses."""
    stack = write_stack(tmp_path, base_config())
    first = plan_json(stack, capsys)
    second = plan_json(stack, capsys)
    assert first.read_text() == second.read_text()
    assert "object at 0x" not in first.read_text()
    document, err = against(stack, first, capsys)
    assert document["changes"] == []
    assert err == ""


def test_renaming_the_stack_warns_that_the_bucket_and_every_vm_would_go(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defect: a new trainstack:name silently changed every logical name: `pulumi up` would
    delete and recreate every VM and start a new empty bucket."""
    previous = plan_json(write_stack(tmp_path, base_config()), capsys)
    renamed = base_config()
    renamed["trainstack:name"] = "vision-dev"
    document, err = against(write_stack(tmp_path, renamed, stack="renamed"), previous, capsys)
    lost = {(c["action"], c["name"]) for c in document["changes"] if c["loses_work"]}
    assert ("delete", "test-storage-bucket") in lost
    assert {("delete", f"test-cluster-{n}") for n in ("chief", "worker-0", "worker-1")} <= lost
    assert err.startswith("WARNING: against")
    assert "test-storage-bucket" in err


def test_a_zone_change_replaces_the_vms_in_place_of_their_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    previous = plan_json(write_stack(tmp_path, base_config()), capsys)
    moved = base_config()
    moved["trainstack:zone"] = "us-central1-b"
    document, _ = against(write_stack(tmp_path, moved), previous, capsys)
    replaced = {c["name"]: c["keys"] for c in document["changes"] if c["action"] == "replace"}
    assert replaced["test-cluster-chief"] == ["zone"]
    assert not any(c["type"] == "gcp:storage/bucket:Bucket" for c in document["changes"])


def test_text_output_lists_the_changes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    previous = plan_json(write_stack(tmp_path, base_config()), capsys)
    changed = base_config()
    changed["trainstack:cluster"]["max_run_hours"] = 12
    assert main(["plan", "--stack-file", str(write_stack(tmp_path, changed)), "--against", str(previous)]) == 0
    out = capsys.readouterr().out
    assert "Changes against" in out
    assert "update  gcp:compute/instance:Instance  test-cluster-chief (scheduling changed)" in out


@pytest.mark.parametrize("content", ["not json", "[]", '{"resources": [1]}'])
def test_a_file_that_is_not_a_plan_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    bad = tmp_path / "previous.json"
    bad.write_text(content)
    assert main(["plan", "--stack", "dev", "--against", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "--against" in err
    assert "Traceback" not in err


def test_a_label_added_updates_the_vms_in_place_and_replaces_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adding one labels entry planned a replacement of the chief VM (and its job): the Google
    provider cannot change a boot disk's initialize_params.labels, so `pulumi up` is told to
    leave them as created, and the VM's own labels change in place."""
    import pulumi_gcp as gcp

    ignored: list[list[str]] = []
    original = gcp.compute.Instance.__init__

    def recording(self: object, resource_name: str, *args: object, **kwargs: object) -> None:
        opts = kwargs.get("opts")
        ignored.append(list(getattr(opts, "ignore_changes", None) or []))
        original(self, resource_name, *args, **kwargs)  # type: ignore[arg-type]

    previous = plan_json(write_stack(tmp_path, base_config()), capsys)
    labelled = base_config()
    labelled["trainstack:labels"] = {"team": "vision", "cost-center": "cc-42"}
    monkeypatch.setattr(gcp.compute.Instance, "__init__", recording)
    document, _ = against(write_stack(tmp_path, labelled), previous, capsys)
    assert ignored
    assert all("bootDisk.initializeParams.labels" in each for each in ignored)
    assert not [c for c in document["changes"] if c["action"] in ("replace", "delete")]
    updated = {c["name"]: c["keys"] for c in document["changes"] if c["action"] == "update"}
    assert updated["test-cluster-chief"] == ["labels"]
