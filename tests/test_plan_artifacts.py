"""`plan --json` lists everything a stack's machines execute or install, with how it is pinned."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from stack_helpers import SHIPPED_STACKS, base_config, plan_for, plan_of, write_stack
from trainstack.cloud.bootscripts import node_kinds
from trainstack_contract import METADATA_KEYS


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_shipped_stack_lists_what_its_machines_execute_each_pinned(stack: str) -> None:
    plan = plan_for(stack)
    artifacts = plan.to_json()["executed_artifacts"]
    assert artifacts, stack
    assert [a for a in artifacts if a["unpinned"]] == []
    kinds = {a["artifact"] for a in artifacts}
    if plan.resolved.cluster or plan.resolved.tpu:
        assert {"boot script", "node agent archive", "node environment lock"} <= kinds
        # The lock each kind of machine installs, by the digest of the file in locks/.
        locks = {a["sha256"] for a in artifacts if a["artifact"] == "node environment lock"}
        assert locks == {kind.lock_artifact.sha256 for kind in node_kinds(plan.resolved)}
        assert all(a["pin"] == "hash-locked" for a in artifacts if a["artifact"] == "node environment lock")
    if (
        plan.resolved.job is not None
        and plan.resolved.job.package is not None
        and (plan.resolved.cluster or plan.resolved.tpu)
    ):
        [code] = [a for a in artifacts if a["artifact"] == "job code archive"]
        assert (code["object"], code["sha256"]) == (
            plan.resolved.job.package.object_name,
            plan.resolved.job.package.sha256,
        )
    if plan.resolved.notebook is not None:
        assert "notebook post-startup script" in kinds
    # Every machine's boot script is listed by the digest of the script it is given.
    for resource in plan.resources:
        script = resource.inputs.get("metadata", {}).get("startup-script")
        if script is not None:
            digest = hashlib.sha256(script.encode()).hexdigest()
            assert any(a["sha256"] == digest and resource.name in a["machines"] for a in artifacts)


def test_an_image_named_by_tag_is_listed_by_the_digest_it_is_resolved_to(tmp_path: Path) -> None:
    """Defect: a NAME:TAG image was pulled at every boot, listed with pin none."""
    config = base_config()
    config["trainstack:cluster"] = {"chief": {"machine_type": "n1-standard-4"}, "strategy": "one_device"}
    config["trainstack:job"] = {"name": "j", "image": "trainer:v1"}
    plan = plan_of(write_stack(tmp_path, config))
    [image] = [a for a in plan.to_json()["executed_artifacts"] if a["artifact"] == "job image"]
    assert (image["pin"], image["unpinned"]) == ("image-digest", False)
    assert (
        image["object"] == f"us-central1-docker.pkg.dev/test-project-123/test-images/trainer@sha256:{image['sha256']}"
    )
    # Offline, the digest is the plan's stand-in, and the entry says which tag `pulumi up` resolves.
    assert image["resolved_from"].endswith("/test-images/trainer:v1")
    assert image["stand_in_digest"] is True
    assert any("stand-in" in note and "trainer:v1" in note for note in plan.notes)


def test_an_image_named_by_digest_is_pinned(tmp_path: Path) -> None:
    digest = "a" * 64
    config = base_config()
    config["trainstack:cluster"] = {"chief": {"machine_type": "n1-standard-4"}, "strategy": "one_device"}
    config["trainstack:job"] = {"name": "j", "image": f"trainer@sha256:{digest}"}
    plan = plan_of(write_stack(tmp_path, config))
    [image] = [a for a in plan.to_json()["executed_artifacts"] if a["artifact"] == "job image"]
    assert (image["pin"], image["sha256"], image["unpinned"]) == ("image-digest", digest, False)
    [instance] = [r for r in plan.resources if r.type == "gcp:compute/instance:Instance"]
    assert instance.inputs["metadata"][METADATA_KEYS.image].endswith(f"/trainer@sha256:{digest}")
