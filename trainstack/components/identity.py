"""Who the training VMs act as, and the least each needs: no primitive roles, no default compute account."""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

# Project-wide roles the nodes need: write logs (Cloud Logging collects the trainer's
# journal) and metrics. Everything else is granted on the one bucket and repository.
PROJECT_ROLES = ("roles/logging.logWriter", "roles/monitoring.metricWriter")
# Read, write and delete objects, without the right to change the bucket's IAM policy.
BUCKET_ROLE = "roles/storage.objectUser"
REGISTRY_ROLE = "roles/artifactregistry.reader"
DATA_BUCKET_ROLE = "roles/storage.objectViewer"
# OAuth scope for the VM: access is governed by the IAM roles above, as Google recommends.
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


class TrainingIdentity(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        project: str,
        account_id: str,
        bucket_name: pulumi.Input[str],
        repository: gcp.artifactregistry.Repository,
        data_bucket: str | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("trainstack:index:TrainingIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.account = gcp.serviceaccount.Account(
            f"{name}-sa",
            project=project,
            account_id=account_id,
            display_name="trainstack training nodes",
            opts=child,
        )
        self.email = self.account.email
        self.member = self.account.member
        self.project_bindings = [
            gcp.projects.IAMMember(f"{name}-{role.split('/')[1].replace('.', '-')}", project=project, role=role, member=self.member, opts=child)
            for role in PROJECT_ROLES
        ]
        self.bucket_binding = gcp.storage.BucketIAMMember(f"{name}-bucket-objects", bucket=bucket_name, role=BUCKET_ROLE, member=self.member, opts=child)
        # Training data in another bucket: read-only access to that bucket alone.
        self.data_binding = (
            gcp.storage.BucketIAMMember(f"{name}-data-reader", bucket=data_bucket, role=DATA_BUCKET_ROLE, member=self.member, opts=child)
            if data_bucket
            else None
        )
        self.registry_binding = gcp.artifactregistry.RepositoryIamMember(
            f"{name}-registry-reader",
            project=project,
            location=repository.location,
            repository=repository.name,
            role=REGISTRY_ROLE,
            member=self.member,
            opts=child,
        )
        self.register_outputs({"email": self.email})


class TpuServiceAgent(pulumi.ComponentResource):
    """The Cloud TPU service agent of the project and the role seed 001 grants it."""

    def __init__(self, name: str, project: str, role: str, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("trainstack:index:TpuServiceAgent", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.identity = gcp.projects.ServiceIdentity(f"{name}-identity", project=project, service="tpu.googleapis.com", opts=child)
        self.binding = gcp.projects.IAMMember(f"{name}-role", project=project, role=role, member=self.identity.member, opts=child)
        self.member = self.identity.member
        self.register_outputs({"member": self.member, "role": role})
