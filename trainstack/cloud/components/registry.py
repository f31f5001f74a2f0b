"""The Artifact Registry Docker repository for training images."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

# Untagged images pile up with every push of a moving tag; keep the recent ones for rollback.
UNTAGGED_MAX_AGE = "30d"
KEEP_RECENT_VERSIONS = 10


@dataclass(frozen=True)
class ContainerRegistryArgs:
    project: str
    location: str
    repository_id: str
    labels: dict[str, str]


class ContainerRegistry(pulumi.ComponentResource):
    url: pulumi.Output[str]

    def __init__(self, name: str, args: ContainerRegistryArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("trainstack:index:ContainerRegistry", name, None, opts)
        project, location = args.project, args.location
        self.repository = gcp.artifactregistry.Repository(
            f"{name}-repo",
            project=project,
            location=location,
            repository_id=args.repository_id,
            format="DOCKER",
            description="Training images for trainstack",
            cleanup_policy_dry_run=False,
            cleanup_policies=[
                gcp.artifactregistry.RepositoryCleanupPolicyArgs(
                    id="delete-old-untagged",
                    action="DELETE",
                    condition=gcp.artifactregistry.RepositoryCleanupPolicyConditionArgs(
                        tag_state="UNTAGGED", older_than=UNTAGGED_MAX_AGE
                    ),
                ),
                gcp.artifactregistry.RepositoryCleanupPolicyArgs(
                    id="keep-recent",
                    action="KEEP",
                    most_recent_versions=gcp.artifactregistry.RepositoryCleanupPolicyMostRecentVersionsArgs(
                        keep_count=KEEP_RECENT_VERSIONS
                    ),
                ),
            ],
            labels=args.labels,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.url = pulumi.Output.concat(location, "-docker.pkg.dev/", project, "/", self.repository.repository_id)
        self.register_outputs({"url": self.url, "repository_id": self.repository.repository_id})
