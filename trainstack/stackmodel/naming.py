"""The stack's names: how a stack file's names are checked, and the cloud resource names the
stack derives from its own (the resource-name prefix, the bucket).

Every pattern here is applied with re.fullmatch: with re.match and "$", a trailing newline
passes ("j1\n"), and a value that reaches a shell or a resource name must not.
"""

from __future__ import annotations

import hashlib
import re

from trainstack.base.errors import shorten
from trainstack_contract.names import GCS_BUCKET_NAME, PROJECT_ID, UNDOTTED_BUCKET_NAME

# The stack file's namespace of trainstack's own keys (trainstack:zone, trainstack:cluster, ...).
NAMESPACE = "trainstack"

# Resource names derive from the stack name (VMs, bucket, service account id "<name>-train"),
# so it must be a lowercase RFC 1035 label short enough that the longest derived name fits:
# service account ids are limited to 30 characters.
RESOURCE_NAME_MAX = 24
RESOURCE_NAME_PATTERN = re.compile(r"[a-z]([-a-z0-9]{0,22}[a-z0-9])?")
# Pulumi's stack names: letters, digits, "-", "_" and "."; at most 100 characters.
STACK_NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,100}")
LABEL_KEY_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,62}")
LABEL_VALUE_PATTERN = re.compile(r"[a-z0-9_-]{0,63}")
# Labels the program sets itself on every resource; a stack may not set or override them.
RESERVED_LABEL_PREFIX = "trainstack-"
# Compute Engine allows 64 labels per resource; the program adds at most two of its own.
MAX_USER_LABELS = 62
BILLING_ACCOUNT_PATTERN = re.compile(r"[0-9A-F]{6}-[0-9A-F]{6}-[0-9A-F]{6}")
# gs://BUCKET[/PATH]: bucket names are 3-63 lowercase letters, digits, "-", "_" and ".";
# object paths are printable and bounded.
GCS_URI_PATTERN = re.compile(rf"gs://(?P<bucket>{GCS_BUCKET_NAME})(/[^\x00-\x1f\x7f]{{0,1000}})?")

# Cloud Storage bucket names: 3-63 lowercase letters, digits, "-" and "_", starting and ending
# with a letter or digit, no "goog" prefix; dots are left out (they make a domain-named bucket,
# which needs domain verification). https://cloud.google.com/storage/docs/buckets#naming
BUCKET_NAME_PATTERN = re.compile(UNDOTTED_BUCKET_NAME)

# A Compute Engine reservation's name: a lowercase RFC 1035 label of 1-63 characters
# (https://cloud.google.com/compute/docs/reference/rest/v1/reservations, name).
RESERVATION_NAME_PATTERN = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")

# IAM principals a stack may grant machine access to: people, groups and service accounts
# by email (https://cloud.google.com/iam/docs/principal-identifiers).
MEMBER_PATTERN = re.compile(
    r"(user|group|serviceAccount):[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(\.[A-Za-z0-9-]{1,63}){1,8}"
)
MAX_ACCESS_MEMBERS = 50


def full_match(pattern: re.Pattern[str], value: str, what: str) -> str:
    """``value`` when the whole of it matches ``pattern``; else a message quoting it (shortened)."""
    if not pattern.fullmatch(value):
        raise ValueError(f"{shorten(value)} is not {what}")
    return value


def part_of(pattern: re.Pattern[str], value: str, group: str) -> str:
    """A named group of ``value``, which a validator has already checked against ``pattern``."""
    found = pattern.fullmatch(value)
    assert found is not None, "checked by its validator"
    return found[group]


def default_bucket_name(project: str, name: str) -> str:
    """The stack's bucket: ``<project>_<name>``. Bucket names are global, and neither a project
    id nor a stack's name holds "_", so no other (project, stack) pair gives the same name
    (with "-", project team-a-project + stack prod and team-a + project-prod collided)."""
    return f"{project}_{name}"


# Characters of the stack-name hash that keep two stacks' derived names apart.
NAME_HASH_CHARS = 5


def default_resource_name(stack: str) -> str:
    """The stack name as a valid resource-name prefix ("dev" -> "dev", "Team_A" -> "team-a-3f1c2").

    When the name must change to fit (case, characters, length), a short hash of the whole
    stack name is appended, so two stacks whose names differ only in what was dropped
    ("Team_A" and "team-a", or two long names sharing their first 24 characters) still get
    different VMs, buckets and service accounts."""
    name = re.sub(r"[^a-z0-9-]+", "-", stack.lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"ts-{name}".rstrip("-")
    if name == stack and len(name) <= RESOURCE_NAME_MAX:
        return name
    digest = hashlib.sha256(stack.encode()).hexdigest()[:NAME_HASH_CHARS]
    return f"{name[: RESOURCE_NAME_MAX - NAME_HASH_CHARS - 1].rstrip('-')}-{digest}"


def stack_name_problem(stack: str) -> str | None:
    """Why ``stack`` is not a Pulumi stack name, or None when it is one."""
    if not STACK_NAME_PATTERN.fullmatch(stack) or stack in (".", ".."):
        return (
            f"{shorten(stack)} is not a stack name: letters, digits, '-', '_' and '.', "
            "at most 100 characters, not '.' or '..'"
        )
    return None


# A VPC network and a subnetwork of a Shared VPC host project (or the stack's own), as Compute
# Engine names them: projects/PROJECT/global/networks/NAME and
# projects/PROJECT/regions/REGION/subnetworks/NAME (names: RFC 1035, at most 63 characters).
_GCE_NAME = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
_PROJECT = PROJECT_ID.pattern
NETWORK_PATH_PATTERN = re.compile(rf"projects/(?P<project>{_PROJECT})/global/networks/(?P<name>{_GCE_NAME})")
SUBNETWORK_PATH_PATTERN = re.compile(
    rf"projects/(?P<project>{_PROJECT})/regions/(?P<region>[a-z]+-[a-z]+[0-9]+)/subnetworks/(?P<name>{_GCE_NAME})"
)
# A Cloud KMS key as every CMEK-taking API names it:
# projects/PROJECT/locations/LOCATION/keyRings/RING/cryptoKeys/KEY. Key ring and key ids are 1-63
# letters, digits, "_" and "-" (https://cloud.google.com/kms/docs/resource-hierarchy); a location
# is a region (us-central1), a multi-region (us, nam4) or global.
KMS_KEY_PATTERN = re.compile(
    rf"projects/(?P<project>{_PROJECT})/locations/(?P<location>[a-z][a-z0-9-]{{0,30}}[a-z0-9])"
    r"/keyRings/(?P<ring>[A-Za-z0-9_-]{1,63})/cryptoKeys/(?P<key>[A-Za-z0-9_-]{1,63})"
)

# The service accounts the stack's machines run as: <name>-train (cluster nodes), <name>-tpu,
# <name>-nb (the notebook), in the stack's project (components.stack creates them).
TRAINING_ACCOUNT_SUFFIX, TPU_ACCOUNT_SUFFIX, NOTEBOOK_ACCOUNT_SUFFIX = "train", "tpu", "nb"
