"""``trainstack export tfplan``: the planned resources as a Terraform plan, for IaC scanners.

pulumi-gcp is a bridge of Terraform's google-beta provider: each Pulumi resource is a
Terraform resource under a Pulumi name, with the same arguments spelled in camelCase. Written
back in Terraform's spelling, as the JSON that ``terraform show -json PLAN`` prints, the plan
can be read by scanners that know Terraform's Google resources but not Pulumi, such as checkov
(``checkov -f plan.json --framework terraform_plan``; see scripts/checkov).

Three differences between the two spellings, undone here:

* Terraform nests a block that holds at most one item (``boot_disk``, ``shielded_instance_config``)
  as a one-element list; Pulumi flattens it to an object. Maps (``labels``, ``metadata``) are
  objects in both.
* Pulumi names a list field in the plural where Terraform's name is singular (``allows`` for a
  firewall's ``allow`` blocks): :data:`SINGULAR_LIST_FIELDS`.
* Pulumi's type tokens (``gcp:compute/instance:Instance``) name Terraform's types
  (``google_compute_instance``) by a rule with a few exceptions: :func:`terraform_type`.

What a plan does not know yet is marked as Terraform marks it: a value the provider computes on
create (an id, shown by the offline plan as a stand-in) is left out of ``values`` and set in the
change's ``after_unknown``, and the configuration names the resource it comes from, as an HCL
reference would. Boot scripts are shown by digest and secrets masked, as ``plan --json`` shows them.
This module imports nothing heavy: the CLI builds every parser at start-up.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainstack.cloud.planning import PlannedResource

# The JSON plan format (Terraform's "format_version" 1.2 has every key written here).
FORMAT_VERSION = "1.2"
# No Terraform ran: scanners require the key (checkov reads a file as a plan only when it is
# there) and none reads its value; a version no Terraform release has says where it came from.
TERRAFORM_VERSION = "0.0.0-trainstack"
# pulumi-gcp bridges google-beta (its provider/go.mod requires terraform-provider-google-beta).
PROVIDER = "google-beta"
PROVIDER_NAME = f"registry.terraform.io/hashicorp/{PROVIDER}"
PULUMI_PROVIDER_PREFIX = "pulumi:providers:"

# Pulumi module -> the Terraform name prefix of its resources, as pulumi-gcp's bridge metadata
# (provider/cmd/pulumi-resource-gcp/bridge-metadata.json) maps them for the modules checked
# there. Any other module is refused: a guessed type would be scanned as the wrong resource.
MODULE_PREFIXES = {
    "artifactregistry": "artifact_registry",
    "billing": "billing",
    "compute": "compute",
    "kms": "kms",
    "projects": "project",
    "secretmanager": "secret_manager",
    "serviceaccount": "service_account",
    "storage": "storage",
    "tpu": "tpu",
    "workbench": "workbench",
}
# Where the resource's own name repeats its module's prefix, the bridge drops it.
TYPE_EXCEPTIONS = {"gcp:serviceaccount/account:Account": "google_service_account"}

# Map-typed arguments (Terraform TypeMap): their keys are data, kept as written, and their value
# stays an object. Every other object in a Pulumi input is a flattened block.
MAP_FIELDS = frozenset({"annotations", "labels", "metadata", "resource_labels", "resource_manager_tags", "user_labels"})

# Lists Pulumi names in the plural where Terraform's field is singular, by Terraform type and
# the field's Terraform path (the bridge metadata lists each resource's list fields).
SINGULAR_LIST_FIELDS: dict[str, dict[str, str]] = {
    "google_compute_instance": {
        "attached_disks": "attached_disk",
        "guest_accelerators": "guest_accelerator",
        "network_interfaces": "network_interface",
        "network_interface.access_configs": "access_config",
        "network_interface.alias_ip_ranges": "alias_ip_range",
        "network_interface.ipv6_access_configs": "ipv6_access_config",
        "scratch_disks": "scratch_disk",
    },
    "google_compute_firewall": {"allows": "allow", "denies": "deny"},
    "google_compute_router_nat": {"subnetworks": "subnetwork"},
    "google_compute_subnetwork": {"secondary_ip_ranges": "secondary_ip_range"},
    "google_storage_bucket": {
        "cors.methods": "method",
        "cors.origins": "origin",
        "cors.response_headers": "response_header",
        "lifecycle_rules": "lifecycle_rule",
        "lifecycle_rule.condition.matches_prefixes": "matches_prefix",
        "lifecycle_rule.condition.matches_storage_classes": "matches_storage_class",
        "lifecycle_rule.condition.matches_suffixes": "matches_suffix",
    },
    "google_tpu_v2_vm": {"service_account.scopes": "scope"},
}
# Lists of at most one string that Pulumi flattens to the string.
SINGLE_ITEM_LISTS: dict[str, frozenset[str]] = {"google_compute_instance": frozenset({"resource_policies"})}

# The offline plan's mocks answer a resource's id as "<name>-id" (plan.PlanMocks.new_resource).
MOCK_ID_SUFFIX = "-id"

# A Terraform resource name: a letter or underscore, then letters, digits, underscores, dashes.
TERRAFORM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


class ConversionError(ValueError):
    """A planned resource has no Terraform counterpart known here; the message says which."""


def _snake(name: str) -> str:
    """camelCase or PascalCase to snake_case; a run of capitals is one word (IAMMember: iam_member)."""
    words = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", words)
    return words.lower()


def terraform_type(token: str) -> str:
    """``gcp:compute/instance:Instance`` -> ``google_compute_instance``."""
    if token in TYPE_EXCEPTIONS:
        return TYPE_EXCEPTIONS[token]
    parts = token.split(":")
    if len(parts) != 3 or parts[0] != "gcp" or "/" not in parts[1]:
        raise ConversionError(f"{token}: not a pulumi-gcp resource type")
    module = parts[1].split("/", 1)[0]
    if module not in MODULE_PREFIXES:
        raise ConversionError(
            f"{token}: no Terraform type known for pulumi-gcp module {module!r} "
            "(add it to tfplan.MODULE_PREFIXES once checked against pulumi-gcp's bridge metadata)"
        )
    return f"google_{MODULE_PREFIXES[module]}_{_snake(parts[2])}"


def terraform_name(pulumi_name: str) -> str:
    """The Pulumi name when Terraform accepts it; otherwise a valid name with a hash of the original."""
    if TERRAFORM_NAME.fullmatch(pulumi_name):
        return pulumi_name
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "_", pulumi_name)
    digest = hashlib.sha256(pulumi_name.encode()).hexdigest()[:8]
    return f"_{cleaned}_{digest}"


@dataclass(frozen=True)
class _Marked:
    """A value a plain JSON value cannot describe: unknown until apply, taken from another
    resource (``references``, as Terraform's configuration lists them), or sensitive."""

    value: Any
    references: tuple[str, ...] = ()
    sensitive: bool = False


_UNKNOWN = object()


def _archive_summary(description: Any) -> str:
    """An uploaded archive as ``plan --json`` describes it (paths and hashes), cut to one digest:
    Terraform's ``source`` is a path, and the list of files says nothing a scanner reads."""
    canonical = json.dumps(description, sort_keys=True).encode()
    return f"<archive, description sha256 {hashlib.sha256(canonical).hexdigest()[:16]}>"


def _referable(resources: list[tuple[PlannedResource, str]]) -> dict[str, tuple[str, str, bool]]:
    """Strings that stand for another resource's attribute: value -> (address, attribute, unknown).

    Ids are the mocks' stand-ins, unknown until the resource exists. A service account's e-mail
    and member, and a bucket's name, are what the provider will report (Google derives them
    from the inputs), so they stay known; the reference still ties the two resources together."""
    referable: dict[str, tuple[str, str, bool]] = {}
    for resource, address in resources:
        referable[f"{resource.name}{MOCK_ID_SUFFIX}"] = (address, "id", True)
        inputs = resource.inputs
        if resource.type == "gcp:serviceaccount/account:Account":
            account, project = inputs.get("accountId"), inputs.get("project")
            if isinstance(account, str) and isinstance(project, str):
                email = f"{account}@{project}.iam.gserviceaccount.com"
                referable[email] = (address, "email", False)
                referable[f"serviceAccount:{email}"] = (address, "member", False)
        elif resource.type == "gcp:storage/bucket:Bucket" and isinstance(inputs.get("name"), str):
            referable[inputs["name"]] = (address, "name", False)
    return referable


class _Converter:
    def __init__(self, tf_type: str, referable: Mapping[str, tuple[str, str, bool]]) -> None:
        # The plan's own markers and digest, imported here: importing the module loads pulumi.
        from trainstack.cloud import planning as plan

        self.tf_type = tf_type
        self.referable = referable
        self.plan = plan

    def field_name(self, path: tuple[str, ...], pulumi_key: str) -> str:
        snake = _snake(pulumi_key)
        return SINGULAR_LIST_FIELDS.get(self.tf_type, {}).get(".".join((*path, snake)), snake)

    def block(self, inputs: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
        converted = {}
        for key, value in inputs.items():
            name = self.field_name(path, key)
            converted[name] = self.value(value, (*path, name), key)
        return converted

    def value(self, value: Any, path: tuple[str, ...], key: str) -> Any:
        name = path[-1]
        if self.plan.is_secret(value) or value == self.plan.SECRET_MASK:
            # A secret input: the plan masks it (and never holds its value); Terraform marks it.
            return _Marked(self.plan.SECRET_MASK, sensitive=True)
        if key in self.plan.SCRIPT_INPUTS and isinstance(value, str):
            return self.plan.text_digest(value)
        if isinstance(value, str):
            return self.string(value, name)
        if isinstance(value, dict):
            if self.tf_type == "google_storage_bucket_object" and path == ("source",):
                return _archive_summary(value)
            if name in MAP_FIELDS:
                # Keys are data (metadata keys such as startup-script), not argument names.
                return {k: self.value(v, (*path, k), k) for k, v in value.items()}
            return [self.block(value, path)]
        if isinstance(value, list):
            return [self.block(v, path) if isinstance(v, dict) else self.value(v, path, key) for v in value]
        if name in SINGLE_ITEM_LISTS.get(self.tf_type, frozenset()) and value is not None:
            return [value]
        return value

    def string(self, value: str, name: str) -> Any:
        if value == self.plan.COMPUTED:
            return _Marked(_UNKNOWN)
        target = self.referable.get(value)
        if target is None:
            return [value] if name in SINGLE_ITEM_LISTS.get(self.tf_type, frozenset()) else value
        address, attribute, unknown = target
        if attribute == "name" and name != "bucket":
            # A bucket's name is only taken for a reference where an argument names a bucket.
            return value
        return _Marked(_UNKNOWN if unknown else value, (f"{address}.{attribute}", address))


def _values(tree: Any) -> Any:
    """What ``values`` shows: unknown attributes left out, unknown list items null (as Terraform)."""
    if isinstance(tree, _Marked):
        return None if tree.value is _UNKNOWN else tree.value
    if isinstance(tree, dict):
        return {k: _values(v) for k, v in tree.items() if not (isinstance(v, _Marked) and v.value is _UNKNOWN)}
    if isinstance(tree, list):
        return [_values(v) for v in tree]
    return tree


def _flags(tree: Any, flag: str) -> Any:
    """``after_unknown`` / ``sensitive_values``: true where the flag holds, objects and lists
    only where something under them does."""
    if isinstance(tree, _Marked):
        return tree.value is _UNKNOWN if flag == "unknown" else tree.sensitive
    if isinstance(tree, dict):
        marked = {k: _flags(v, flag) for k, v in tree.items()}
        return {k: v for k, v in marked.items() if v}
    if isinstance(tree, list):
        items = [_flags(v, flag) for v in tree]
        return items if any(items) else False
    return False


def _expressions(tree: dict[str, Any]) -> dict[str, Any]:
    """The configuration's expressions: constants, references, nested blocks as lists of them."""
    expressions: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            expressions[key] = [_expressions(v) for v in value]
            continue
        references = _references(value)
        if references:
            expressions[key] = {"references": references}
        elif not _has_unknown(value):
            expressions[key] = {"constant_value": _values(value)}
    return expressions


def _references(tree: Any) -> list[str]:
    if isinstance(tree, _Marked):
        return list(tree.references)
    if isinstance(tree, dict):
        return [r for v in tree.values() for r in _references(v)]
    if isinstance(tree, list):
        return [r for v in tree for r in _references(v)]
    return []


def _has_unknown(tree: Any) -> bool:
    return bool(_flags(tree, "unknown"))


def _provider_config(resources: Iterable[PlannedResource]) -> dict[str, Any]:
    """The default provider, and each explicit Pulumi provider as an alias of it."""
    config: dict[str, Any] = {PROVIDER: {"name": PROVIDER, "full_name": PROVIDER_NAME}}
    for resource in resources:
        if resource.type != f"{PULUMI_PROVIDER_PREFIX}gcp":
            continue
        alias = terraform_name(resource.name)
        config[f"{PROVIDER}.{alias}"] = {
            "name": PROVIDER,
            "full_name": PROVIDER_NAME,
            "alias": alias,
            "expressions": {
                _snake(k): {"constant_value": v}
                for k, v in resource.inputs.items()
                if isinstance(v, (str, int, float, bool))
            },
        }
    return config


def terraform_plan(resources: Iterable[PlannedResource]) -> dict[str, Any]:
    """The planned resources as ``terraform show -json`` prints a plan that creates them all."""
    resources = list(resources)
    managed: list[tuple[PlannedResource, str]] = []
    for resource in resources:
        if resource.type.startswith(PULUMI_PROVIDER_PREFIX):
            continue
        managed.append((resource, f"{terraform_type(resource.type)}.{terraform_name(resource.name)}"))
    addresses = [address for _, address in managed]
    if len(set(addresses)) != len(addresses):
        twice = sorted({a for a in addresses if addresses.count(a) > 1})
        raise ConversionError(f"two resources have the Terraform address {twice[0]}")
    referable = _referable(managed)
    planned, changes, configured = [], [], []
    for resource, address in sorted(managed, key=lambda pair: pair[1]):
        tf_type, name = address.split(".", 1)
        tree = _Converter(tf_type, referable).block(resource.inputs, ())
        values = _values(tree)
        sensitive = _flags(tree, "sensitive") or {}
        common = {"address": address, "mode": "managed", "type": tf_type, "name": name, "provider_name": PROVIDER_NAME}
        planned.append({**common, "schema_version": 0, "values": values, "sensitive_values": sensitive})
        changes.append(
            {
                **common,
                "change": {
                    "actions": ["create"],
                    "before": None,
                    "after": values,
                    "after_unknown": _flags(tree, "unknown") or {},
                    "before_sensitive": False,
                    "after_sensitive": sensitive,
                },
            }
        )
        configured.append(
            {
                "address": address,
                "mode": "managed",
                "type": tf_type,
                "name": name,
                "provider_config_key": PROVIDER,
                "expressions": _expressions(tree),
                "schema_version": 0,
            }
        )
    return {
        "format_version": FORMAT_VERSION,
        "terraform_version": TERRAFORM_VERSION,
        "planned_values": {"root_module": {"resources": planned}},
        "resource_changes": changes,
        "configuration": {"provider_config": _provider_config(resources), "root_module": {"resources": configured}},
    }
