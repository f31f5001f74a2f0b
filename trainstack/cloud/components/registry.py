"""The Artifact Registry Docker repository for training images."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from trainstack.base.errors import shorten
from trainstack.cloud.components import waits_with
from trainstack.jobcode.package import ImageRef

# Untagged images pile up with every push of a moving tag; keep the recent ones for rollback.
UNTAGGED_MAX_AGE = "30d"
KEEP_RECENT_VERSIONS = 10
# What Artifact Registry's getDockerImage gives as an image's selfLink: its URI by digest
# (LOCATION-docker.pkg.dev/PROJECT/REPOSITORY/IMAGE@sha256:HEX).
_SELF_LINK_DIGEST = re.compile(r"(?P<image>[^@]+)@(?P<digest>sha256:[0-9a-f]{64})")


@dataclass(frozen=True)
class ContainerRegistryArgs:
    project: str
    location: str
    repository_id: str
    labels: dict[str, str]
    # The repository's key (trainstack:encryption); None: Google's. Set only at creation.
    kms_key: str | None = None


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
            kms_key_name=args.kms_key,
            labels=args.labels,
            opts=waits_with(self, opts),
        )
        self.url = pulumi.Output.concat(location, "-docker.pkg.dev/", project, "/", self.repository.repository_id)
        self.register_outputs({"url": self.url, "repository_id": self.repository.repository_id})


def pinned_image(image: ImageRef, opts: pulumi.InvokeOutputOptions | None = None) -> pulumi.Input[str]:
    """What nodes pull: ``image`` by digest. An image named by tag is looked up in its Artifact
    Registry repository when the stack is deployed (`pulumi up` fails where the tag names no
    image), so a tag moved after `pulumi up` changes nothing the machines run."""
    if image.tag is None:
        return image.uri
    found = gcp.artifactregistry.get_docker_image_output(
        project=image.project,
        location=image.location,
        repository_id=image.repository,
        image_name=f"{image.name}:{image.tag}",
        opts=opts,
    )
    return found.self_link.apply(lambda link: image_by_digest(image, link))


def image_by_digest(image: ImageRef, self_link: str) -> str:
    """``image`` at the digest of the ``self_link`` Artifact Registry gave for its tag; raises
    where that link is not this image's by digest (the machines must not pull by tag)."""
    found = _SELF_LINK_DIGEST.fullmatch(self_link or "")
    if found is None or found["image"] != f"{image.repository_url}/{image.name}":
        raise ValueError(
            f"Artifact Registry gave {shorten(self_link)} for the image {image.uri}, not that image by digest "
            f"({image.repository_url}/{image.name}@sha256:...): name trainstack:job.image by digest instead"
        )
    return image.by_digest(found["digest"])
