"""One principal's IAM grants, each on one resource: the binding shapes the components share.

Every grant the stack makes names a single resource (an instance, a bucket, a repository, a
service account, a secret) and one member; the project-wide ones are the few roles a machine
needs to write logs and metrics, and its own release role on a TPU. :class:`Grantee` writes each
kind of binding once, so a component says what it grants, on what, and to whom.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import pulumi
import pulumi_gcp as gcp


class Binding(TypedDict):
    """What every binding takes besides its resource: the role, the member, the parent."""

    role: pulumi.Input[str]
    member: pulumi.Input[str]
    opts: pulumi.ResourceOptions


@dataclass(frozen=True)
class Condition:
    """An IAM condition on a bucket grant: what Cloud Storage checks on each object's name."""

    title: str
    description: str
    expression: str


@dataclass(frozen=True)
class Zone:
    """Where a Compute Engine instance is: its project and zone."""

    project: str
    zone: str


@dataclass(frozen=True)
class Grantee:
    """A member and the component its grants are declared under (``opts``)."""

    member: pulumi.Input[str]
    opts: pulumi.ResourceOptions

    def on_instance(
        self, resource_name: str, where: Zone, instance: pulumi.Input[str], role: pulumi.Input[str]
    ) -> gcp.compute.InstanceIAMMember:
        """``role`` on one Compute Engine instance."""
        return gcp.compute.InstanceIAMMember(
            resource_name, project=where.project, zone=where.zone, instance_name=instance, **self._binding(role)
        )

    def tunnel_to(
        self, resource_name: str, where: Zone, instance: pulumi.Input[str], role: str
    ) -> gcp.iap.TunnelInstanceIAMMember:
        """``role`` on IAP's TCP tunnel to one instance."""
        return gcp.iap.TunnelInstanceIAMMember(
            resource_name, project=where.project, zone=where.zone, instance=instance, **self._binding(role)
        )

    def on_notebook(
        self, resource_name: str, where: Zone, instance: pulumi.Input[str], role: str
    ) -> gcp.workbench.InstanceIamMember:
        """``role`` on one Workbench instance (its location is its zone)."""
        return gcp.workbench.InstanceIamMember(
            resource_name, project=where.project, location=where.zone, name=instance, **self._binding(role)
        )

    def on_bucket(
        self, resource_name: str, bucket: pulumi.Input[str], role: str, condition: Condition | None = None
    ) -> gcp.storage.BucketIAMMember:
        """``role`` on one bucket, limited by ``condition`` where one is given."""
        limit = None
        if condition is not None:
            limit = gcp.storage.BucketIAMMemberConditionArgs(
                title=condition.title, description=condition.description, expression=condition.expression
            )
        return gcp.storage.BucketIAMMember(resource_name, bucket=bucket, condition=limit, **self._binding(role))

    def on_repository(
        self,
        resource_name: str,
        project: pulumi.Input[str],
        location: pulumi.Input[str],
        repository: pulumi.Input[str],
        role: str,
    ) -> gcp.artifactregistry.RepositoryIamMember:
        """``role`` on one Artifact Registry repository."""
        return gcp.artifactregistry.RepositoryIamMember(
            resource_name, project=project, location=location, repository=repository, **self._binding(role)
        )

    def on_account(self, resource_name: str, account: pulumi.Input[str], role: str) -> gcp.serviceaccount.IAMMember:
        """``role`` on one service account (``account``: projects/PROJECT/serviceAccounts/EMAIL)."""
        return gcp.serviceaccount.IAMMember(resource_name, service_account_id=account, **self._binding(role))

    def on_secret(
        self, resource_name: str, project: str, secret_id: pulumi.Input[str], role: str
    ) -> gcp.secretmanager.SecretIamMember:
        """``role`` on one Secret Manager secret."""
        return gcp.secretmanager.SecretIamMember(
            resource_name, project=project, secret_id=secret_id, **self._binding(role)
        )

    def on_crypto_key(self, resource_name: str, key: str, role: str) -> gcp.kms.CryptoKeyIAMMember:
        """``role`` on one Cloud KMS key (``key``: projects/P/locations/L/keyRings/R/cryptoKeys/K)."""
        return gcp.kms.CryptoKeyIAMMember(resource_name, crypto_key_id=key, **self._binding(role))

    def on_project(self, resource_name: str, project: str, role: pulumi.Input[str]) -> gcp.projects.IAMMember:
        """``role`` on the whole project: only where the resource has no IAM of its own."""
        return gcp.projects.IAMMember(resource_name, project=project, **self._binding(role))

    def _binding(self, role: pulumi.Input[str]) -> Binding:
        return Binding(role=role, member=self.member, opts=self.opts)
