"""The stack's bucket: training data, checkpoints, the job directory and exported models."""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from trainstack.config import Storage


class TrainingBucket(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        bucket_name: str,
        location: str,
        settings: Storage,
        labels: dict[str, str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("trainstack:index:TrainingBucket", name, None, opts)
        # A user's checkpoints and models must survive `pulumi destroy` unless they asked
        # otherwise: by default the bucket is only dropped from the stack, never deleted, and
        # even when deletion is asked for, a bucket that still holds objects is not emptied.
        self.bucket = gcp.storage.Bucket(
            f"{name}-bucket",
            name=bucket_name,
            location=location.upper(),
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
            labels=labels,
            # protect: a `pulumi up` that would delete or replace the bucket (a renamed stack, a
            # changed name) fails instead; `pulumi destroy --exclude-protected` leaves it.
            opts=pulumi.ResourceOptions(parent=self, protect=not settings.delete_on_destroy, retain_on_delete=not settings.delete_on_destroy),
        )
        self.name = self.bucket.name
        self.url = self.bucket.url
        self.register_outputs({"name": self.name, "url": self.url})
