"""Reading a resource's inputs the way the policies need them.

CrossGuard hands a policy the engine's input names (camelCase: ``networkInterfaces``,
``serviceAccount``), wrapped in read-only Mapping and Sequence proxies that raise when a value
is not known yet; `trainstack check` hands the same names as plain dicts and lists. So nothing
here tests for ``dict`` or ``list``: only for Mapping and Sequence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

VM = "gcp:compute/instance:Instance"
TPU_VM = "gcp:tpu/v2Vm:V2Vm"
NOTEBOOK = "gcp:workbench/instance:Instance"
BUCKET = "gcp:storage/bucket:Bucket"
# Bucket-level IAM resources: BucketIAMMember, BucketIAMBinding (BucketIAMPolicy has no condition field).
BUCKET_GRANTS = ("gcp:storage/bucketIAMMember:BucketIAMMember", "gcp:storage/bucketIAMBinding:BucketIAMBinding")
FIREWALL = "gcp:compute/firewall:Firewall"
ACCOUNT = "gcp:serviceaccount/account:Account"
CUSTOM_ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
# Project-level IAM resources: IAMMember, IAMBinding, IAMPolicy.
PROJECT_IAM_PREFIX = "gcp:projects/iAM"
MACHINES = (VM, TPU_VM, NOTEBOOK)
REPOSITORY = "gcp:artifactregistry/repository:Repository"
# What a stack that makes its own network creates; a service project of a Shared VPC may not.
OWN_NETWORK = (
    "gcp:compute/network:Network",
    "gcp:compute/subnetwork:Subnetwork",
    "gcp:compute/router:Router",
    "gcp:compute/routerNat:RouterNat",
)

CLOUD_PLATFORM_SCOPES = frozenset({"cloud-platform", "https://www.googleapis.com/auth/cloud-platform"})
# Compute Engine's default account is <project number>-compute@developer.gserviceaccount.com;
# "default" is what the API and gcloud accept for it.
DEFAULT_ACCOUNT_SUFFIX = "-compute@developer.gserviceaccount.com"


def mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def sequence(value: Any) -> Sequence[Any]:
    return value if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) else ()


def is_true(value: Any) -> bool:
    """Metadata flags are strings ("TRUE", "true"); typed inputs are booleans."""
    if isinstance(value, bool):
        return value
    return isinstance(value, str) and value.strip().lower() in ("true", "1", "yes")


def metadata(resource_type: str, props: Mapping[str, Any]) -> Mapping[str, Any]:
    if resource_type == NOTEBOOK:
        return mapping(mapping(props.get("gceSetup")).get("metadata"))
    return mapping(props.get("metadata"))


def accounts(resource_type: str, props: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The service accounts a machine runs as (a notebook may list several)."""
    if resource_type == NOTEBOOK:
        return [mapping(a) for a in sequence(mapping(props.get("gceSetup")).get("serviceAccounts"))]
    account = props.get("serviceAccount")
    return [mapping(account)] if account is not None else []


def is_default_account(email: Any) -> bool:
    return isinstance(email, str) and (email == "default" or email.endswith(DEFAULT_ACCOUNT_SUFFIX))


def has_broad_scope(account: Mapping[str, Any]) -> bool:
    return any(scope in CLOUD_PLATFORM_SCOPES for scope in sequence(account.get("scopes")))
