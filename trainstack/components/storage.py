"""The stack's bucket: training data, checkpoints, the job directory and exported models."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from trainer.contract import LAYOUT
from trainstack.components import moved_here
from trainstack.config import Storage
from trainstack.package import trainer_archive_members


@dataclass(frozen=True)
class TrainingBucketArgs:
    bucket_name: str
    location: str
    settings: Storage
    labels: dict[str, str]
    # Upload the trainer archive the boot scripts fetch (stacks with training machines).
    with_trainer: bool
    # The stack's resource-name prefix: names the trainer object as before (see aliases).
    stack_name: str


class TrainingBucket(pulumi.ComponentResource):
    """The bucket, and the trainer archive in it."""

    name: pulumi.Output[str]
    url: pulumi.Output[str]
    # What training machines must wait for: the archive they fetch at boot.
    ready: list[pulumi.Resource]

    def __init__(self, name: str, args: TrainingBucketArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("trainstack:index:TrainingBucket", name, None, opts)
        settings = args.settings
        # A user's checkpoints and models must survive `pulumi destroy` unless they asked
        # otherwise: by default the bucket is only dropped from the stack, never deleted, and
        # even when deletion is asked for, a bucket that still holds objects is not emptied.
        self.bucket = gcp.storage.Bucket(
            f"{name}-bucket",
            name=args.bucket_name,
            location=args.location.upper(),
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            versioning=gcp.storage.BucketVersioningArgs(enabled=True),
            lifecycle_rules=[
                gcp.storage.BucketLifecycleRuleArgs(
                    action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                    condition=gcp.storage.BucketLifecycleRuleConditionArgs(
                        days_since_noncurrent_time=settings.noncurrent_version_days,
                        with_state="ARCHIVED",
                    ),
                )
            ],
            force_destroy=False,
            labels=args.labels,
            # protect: a `pulumi up` that would delete or replace the bucket (a renamed stack, a
            # changed name) fails instead; `pulumi destroy --exclude-protected` leaves it.
            opts=pulumi.ResourceOptions(
                parent=self, protect=not settings.delete_on_destroy, retain_on_delete=not settings.delete_on_destroy
            ),
        )
        self.name = self.bucket.name
        self.url = self.bucket.url
        self.ready = []
        if args.with_trainer:
            moved = moved_here(self, opts)
            self.trainer = gcp.storage.BucketObject(
                f"{args.stack_name}-trainer-package",
                bucket=self.bucket.name,
                name=LAYOUT.trainer_archive,
                source=pulumi.AssetArchive(
                    {name: pulumi.FileAsset(str(path)) for name, path in trainer_archive_members().items()}
                ),
                opts=moved,
            )
            self.ready.append(self.trainer)
        self.register_outputs({"name": self.name, "url": self.url})
