"""The stack's bucket: training data, checkpoints, the job directory and exported models."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_gcp as gcp

from trainstack.cloud.components import waits_with
from trainstack.jobcode import artifacts
from trainstack.jobcode.package import Wheelhouse
from trainstack.stackmodel.resolved import ResolvedJob
from trainstack.stackmodel.schema import Storage
from trainstack_contract import LAYOUT


@dataclass(frozen=True)
class TrainingBucketArgs:
    bucket_name: str
    location: str
    storage: Storage
    labels: dict[str, str]
    # The job whose code the machines fetch at boot (stacks with training machines).
    job: ResolvedJob | None
    stack_name: str
    # Whether machines boot the node agent from this bucket (a cluster or a TPU VM).
    runs_agent: bool = False
    # Wheels those machines install from (storage.wheelhouse).
    wheelhouse: Wheelhouse | None = None
    # The hash-locked requirements those machines install (one per kind of machine).
    locks: tuple[artifacts.BuiltArtifact, ...] = ()
    # The bucket's default key (trainstack:encryption); None: Google's.
    kms_key: str | None = None


class TrainingBucket(pulumi.ComponentResource):
    """The bucket, and what machines run from it: the node agent and the job's code, each
    uploaded as the exact bytes whose sha256 the nodes' metadata pins."""

    name: pulumi.Output[str]
    url: pulumi.Output[str]
    # What training machines must wait for: the code they fetch at boot.
    ready: list[pulumi.Resource]

    def __init__(self, name: str, args: TrainingBucketArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("trainstack:index:TrainingBucket", name, None, opts)
        storage = args.storage
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
                        days_since_noncurrent_time=storage.noncurrent_version_days,
                        with_state="ARCHIVED",
                    ),
                )
            ],
            force_destroy=False,
            # Every object written without a key of its own (the uploads here, the nodes' and the
            # queue's writes) is encrypted with the stack's key.
            encryption=gcp.storage.BucketEncryptionArgs(default_kms_key_name=args.kms_key) if args.kms_key else None,
            labels=args.labels,
            # protect: a `pulumi up` that would delete or replace the bucket (a renamed stack, a
            # changed name) fails instead; `pulumi destroy --exclude-protected` leaves it.
            opts=pulumi.ResourceOptions.merge(
                waits_with(self, opts),
                pulumi.ResourceOptions(
                    protect=not storage.delete_on_destroy, retain_on_delete=not storage.delete_on_destroy
                ),
            ),
        )
        self.name = self.bucket.name
        self.url = self.bucket.url
        self.ready = []
        if args.runs_agent:
            self.agent = self._upload(f"{args.stack_name}-agent", artifacts.agent_archive())
            self.ready.append(self.agent)
            self.ready.extend(
                self._upload(f"{args.stack_name}-python-lock-{lock.sha256[:16]}", lock) for lock in args.locks
            )
        if args.runs_agent and args.wheelhouse is not None:
            manifest = artifacts.wheelhouse_manifest(args.wheelhouse)
            self.ready.append(self._upload(f"{args.stack_name}-wheelhouse", manifest))
            self.ready.extend(
                self._upload_file(f"{args.stack_name}-wheel-{filename}", LAYOUT.wheel(filename), path)
                for filename, path in args.wheelhouse.wheels.items()
            )
        job = args.job
        if job is not None and job.package is not None:
            # Named by content: a code change uploads a new object (and the nodes' metadata
            # names it), so no node runs the code of an earlier `pulumi up`.
            code = artifacts.BuiltArtifact(job.package.object_name, job.package.archive)
            self.code = self._upload(f"{args.stack_name}-code", code)
            self.ready.append(self.code)
        if job is not None and job.requirements is not None:
            # The bytes `validate` checked, staged by content: not the file as it is by now.
            requirements = artifacts.BuiltArtifact(job.requirements.object_name, job.requirements.data)
            self.requirements = self._upload(f"{args.stack_name}-code-requirements", requirements)
            self.ready.append(self.requirements)
        self.register_outputs({"name": self.name, "url": self.url})

    def _upload(self, resource_name: str, artifact: artifacts.BuiltArtifact) -> gcp.storage.BucketObject:
        """``artifact``'s exact bytes, staged by content, under its object name."""
        return self._upload_file(resource_name, artifact.object_name, artifact.staged())

    def _upload_file(self, resource_name: str, object_name: str, path: Path) -> gcp.storage.BucketObject:
        return gcp.storage.BucketObject(
            resource_name,
            bucket=self.bucket.name,
            name=object_name,
            source=pulumi.FileAsset(str(path)),
            opts=pulumi.ResourceOptions(parent=self),
        )
