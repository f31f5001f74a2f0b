"""What `pulumi up` would delete or replace, from two offline plans (``plan --against``).

Pulumi identifies a resource by its logical name; trainstack derives every logical name
from the stack's name (``trainstack:name``, or the stack name). Renaming a stack, or
editing a value the provider cannot change in place (a VM's zone, a bucket's location),
makes ``pulumi up`` delete a resource and create another: for a running VM that ends its
job, for the bucket that is a new, empty bucket. Comparing a new plan with an earlier
``plan --json`` names those resources before anything happens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainstack.base.errors import Problem, StackConfigError
from trainstack.cloud.components.cluster import INSTANCE_IGNORED_CHANGES

# Arguments the gcp provider cannot update in place, for the resources and arguments
# trainstack sets: a change to one means delete and create. A subset of the provider's
# schema (its ForceNew arguments); other changes may still replace a resource.
REPLACED_WHEN_CHANGED: dict[str, tuple[str, ...]] = {
    "gcp:compute/instance:Instance": ("name", "zone", "project", "bootDisk"),
    "gcp:storage/bucket:Bucket": ("name", "location", "project"),
    "gcp:tpu/v2Vm:V2Vm": (
        "name",
        "zone",
        "project",
        "acceleratorType",
        "runtimeVersion",
        "networkConfig",
        "serviceAccount",
        "schedulingConfig",
    ),
    "gcp:workbench/instance:Instance": ("name", "location", "project"),
    "gcp:serviceaccount/account:Account": ("accountId", "project"),
    "gcp:artifactregistry/repository:Repository": ("repositoryId", "location", "project", "format"),
    "gcp:projects/iAMCustomRole:IAMCustomRole": ("roleId", "project"),
    "gcp:compute/network:Network": ("name", "project", "autoCreateSubnetworks"),
    "gcp:compute/subnetwork:Subnetwork": ("name", "project", "region", "network", "ipCidrRange"),
}
# The inputs the program sets ignore_changes on, by type: a change to them changes nothing.
IGNORED_CHANGES: dict[str, tuple[str, ...]] = {"gcp:compute/instance:Instance": INSTANCE_IGNORED_CHANGES}
DEFAULT_REPLACED_WHEN_CHANGED = ("name", "project", "zone", "region", "location")
BUCKET = "gcp:storage/bucket:Bucket"
MACHINES = frozenset({"gcp:compute/instance:Instance", "gcp:tpu/v2Vm:V2Vm", "gcp:workbench/instance:Instance"})
# A plan of thousands of workers is a few megabytes.
MAX_PLAN_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Change:
    action: str  # "delete", "replace", "update" or "create"
    type: str
    name: str
    keys: tuple[str, ...] = ()

    @property
    def loud(self) -> bool:
        """Deleting or replacing the bucket or a machine is what loses a user's work."""
        return self.action in ("delete", "replace") and (self.type == BUCKET or self.type in MACHINES)

    def describe(self) -> str:
        keys = f" ({', '.join(self.keys)} changed)" if self.keys else ""
        line = f"{self.action:<7} {self.type}  {self.name}{keys}"
        if self.loud and self.type == BUCKET:
            line += (
                "\n          the bucket holds the data, checkpoints and models: `pulumi up` refuses this while"
                " it is protected (storage.delete_on_destroy: false); a new bucket would start empty"
            )
        elif self.loud:
            line += "\n          a running machine is deleted and its job interrupted; a new one starts from the bucket's backups"
        return line


def read_plan_json(path: Path) -> dict[str, Any]:
    """An earlier ``plan --json``; problems with the file are one StackConfigError."""
    from trainstack.base.files import FileProblem, load_json, read_bounded

    where = f"--against {path}"
    try:
        document: Any = load_json(read_bounded(path, MAX_PLAN_BYTES))
    except FileNotFoundError:
        raise StackConfigError([Problem(where, "no such file; give the output of an earlier `plan --json`")]) from None
    except FileProblem as problem:
        raise StackConfigError([Problem(where, f"not a trainstack plan: {str(problem)[:200]}")]) from None
    resources = document.get("resources") if isinstance(document, dict) else None
    if not isinstance(resources, list) or not all(
        isinstance(r, dict) and {"type", "name", "inputs"} <= set(r) for r in resources
    ):
        raise StackConfigError(
            [Problem(where, "not a trainstack plan: expected the output of `python -m trainstack plan --json`")]
        )
    return dict(document)


def _without(inputs: dict[str, Any], path: str) -> dict[str, Any]:
    """``inputs`` without the value at the dotted ``path`` (a copy where it was there)."""
    head, _, rest = path.partition(".")
    if head not in inputs:
        return inputs
    if not rest:
        return {key: value for key, value in inputs.items() if key != head}
    inner = inputs[head]
    return {**inputs, head: _without(inner, rest)} if isinstance(inner, dict) else inputs


def compared_inputs(resource: dict[str, Any]) -> dict[str, Any]:
    """A resource's inputs as `pulumi up` compares them: without what the program tells it to
    leave as created (ignore_changes)."""
    inputs: dict[str, Any] = resource["inputs"]
    for path in IGNORED_CHANGES.get(resource["type"], ()):
        inputs = _without(inputs, path)
    return inputs


def compare(previous: dict[str, Any], current: dict[str, Any]) -> list[Change]:
    """The changes from ``previous`` to ``current`` (both ``plan --json`` documents), the
    ones that lose work first."""
    before = {(r["type"], r["name"]): compared_inputs(r) for r in previous["resources"]}
    after = {(r["type"], r["name"]): compared_inputs(r) for r in current["resources"]}
    changes: list[Change] = []
    for key in sorted(before.keys() - after.keys()):
        changes.append(Change("delete", *key))
    for key in sorted(before.keys() & after.keys()):
        old, new = before[key], after[key]
        changed = tuple(sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k)))
        if not changed:
            continue
        forcing = REPLACED_WHEN_CHANGED.get(key[0], DEFAULT_REPLACED_WHEN_CHANGED)
        replacing = tuple(k for k in changed if k in forcing)
        changes.append(Change("replace", *key, replacing) if replacing else Change("update", *key, changed))
    for key in sorted(after.keys() - before.keys()):
        changes.append(Change("create", *key))
    order = {"delete": 0, "replace": 1, "update": 2, "create": 3}
    return sorted(changes, key=lambda c: (not c.loud, order[c.action], c.type, c.name))
