"""IAM roles the program grants or refuses, the plan reads and the policy pack checks.

Standard library only, Python 3.10: the policy pack reads it from the checkout.
"""

from __future__ import annotations

from typing import Final

# Google Cloud's basic (primitive) roles: each spans every service of the project, so no
# binding the program makes, and none the policy pack lets through, names one
# (https://cloud.google.com/iam/docs/roles-overview#basic).
PRIMITIVE_ROLES: Final = frozenset({"roles/owner", "roles/editor", "roles/viewer"})

# Cloud Storage roles that can create, replace or delete objects
# (https://cloud.google.com/storage/docs/access-control/iam-roles).
STORAGE_WRITE_ROLES: Final = frozenset(
    {
        "roles/storage.admin",
        "roles/storage.objectAdmin",
        "roles/storage.objectCreator",
        "roles/storage.objectUser",
        "roles/storage.legacyBucketOwner",
        "roles/storage.legacyBucketWriter",
        "roles/storage.legacyObjectOwner",
    }
)

# The one OAuth scope the stack's machines carry: access is governed by IAM roles, as Google
# recommends (https://cloud.google.com/compute/docs/access/service-accounts#scopes_best_practice).
# The program sets it on every VM; the node agent reports it to a job's code as its token's scope.
CLOUD_PLATFORM_SCOPE: Final = "https://www.googleapis.com/auth/cloud-platform"
