"""The job's secrets: one Secret Manager secret each, readable by the accounts that run the job.

The values come from the stack's config (`pulumi config set --path --secret
'trainstack:secrets.NAME'`), stay secret Outputs (encrypted in Pulumi's state) and reach the
machines only through Secret Manager: the boot script fetches them at run time by id, and
metadata, labels and scripts hold nothing but the ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from trainstack.cloud.components.grants import Grantee

# Read a secret's versions and nothing else: not list other secrets, not add versions.
ACCESSOR_ROLE = "roles/secretmanager.secretAccessor"
# What an offline plan stores for a value it cannot decrypt (never applied: `pulumi up` decrypts).
OFFLINE_STAND_IN = "<encrypted in the stack file>"


@dataclass(frozen=True)
class JobSecretsArgs:
    project: str
    region: str
    # (environment variable, secret id, value): the value is None offline, where only
    # Pulumi's ciphertext is at hand; the plan's version then holds a stand-in.
    secrets: tuple[tuple[str, str, str | None], ...]
    readers: tuple[pulumi.Input[str], ...]
    labels: dict[str, str]


class JobSecrets(pulumi.ComponentResource):
    def __init__(self, name: str, args: JobSecretsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("trainstack:index:JobSecrets", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.ready: list[pulumi.Resource] = []
        for env, secret_id, value in args.secrets:
            key = env.lower().replace("_", "-")
            secret = gcp.secretmanager.Secret(
                f"{name}-{key}",
                project=args.project,
                secret_id=secret_id,
                # Stored in the stack's region only, like its bucket.
                replication=gcp.secretmanager.SecretReplicationArgs(
                    user_managed=gcp.secretmanager.SecretReplicationUserManagedArgs(
                        replicas=[gcp.secretmanager.SecretReplicationUserManagedReplicaArgs(location=args.region)]
                    )
                ),
                labels=args.labels,
                opts=child,
            )
            self.ready.append(secret)
            self.ready.append(
                gcp.secretmanager.SecretVersion(
                    f"{name}-{key}-value",
                    secret=secret.id,
                    secret_data=pulumi.Output.secret(OFFLINE_STAND_IN if value is None else value),
                    opts=child,
                )
            )
            self.ready.extend(
                Grantee(reader, child).on_secret(
                    f"{name}-{key}-reader-{index}", args.project, secret.secret_id, ACCESSOR_ROLE
                )
                for index, reader in enumerate(args.readers)
            )
        self.register_outputs({"secret_ids": [secret_id for _, secret_id, _ in args.secrets]})
