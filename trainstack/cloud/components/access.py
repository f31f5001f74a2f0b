"""Teammates' access to the stack's machines: IAP SSH through OS Login, and the notebook.

Every grant is on one resource: the instance, or the service account the machines run as.
Nothing is granted project-wide. Roles, per member:

- on each cluster VM: ``roles/iap.tunnelResourceAccessor`` (the IAP TCP tunnel to that VM)
  and ``roles/compute.osLogin`` (log in through OS Login, without sudo);
- on the training service account: ``roles/iam.serviceAccountUser``, which OS Login
  requires of a user logging in to a VM that runs as a service account;
- on the notebook's service account: ``roles/iam.serviceAccountUser``, which is what opens
  JupyterLab on a Workbench instance in service-account mode, and ``roles/notebooks.viewer``
  on the instance, to find and open it.

TPU VMs have no per-VM IAM, so their access would be project-wide; it is not granted.

Where the stack's machines run a job queue, :class:`QueueAccess` lets the same members queue,
list and cancel jobs (`trainstack submit`, `jobs`, `cancel`), on the bucket and each cluster VM
alone (``trainstack_contract.grants``): read the bucket; create objects under
``trainstack/code/`` and ``trainstack/queue/specs/`` (``roles/storage.objectCreator``, which
replaces none); replace ``trainstack/queue/index.json`` alone (``roles/storage.objectUser`` on
that one object); and get and start each cluster VM (a custom role with
``compute.instances.get`` and ``compute.instances.start``, granted per instance). A stopped TPU
VM is not theirs to start (project-wide only): `pulumi up` or a deployer starts it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from trainstack.cloud.components.grants import Condition, Grantee, Zone
from trainstack.cloud.components.identity import INSTANCE_RECOVER_PERMISSIONS, custom_role_id
from trainstack_contract.grants import READ_ROLE, submit_grants

TUNNEL_ROLE = "roles/iap.tunnelResourceAccessor"
LOGIN_ROLE = "roles/compute.osLogin"
ACT_AS_ROLE = "roles/iam.serviceAccountUser"
NOTEBOOK_VIEWER_ROLE = "roles/notebooks.viewer"
# What a member does to a stopped cluster VM when it queues a job is what the chief does to a
# preempted Spot peer: read its status, start it; nothing that changes the instance.
QUEUE_START_PERMISSIONS = INSTANCE_RECOVER_PERMISSIONS


def member_slug(member: str) -> str:
    """A short, stable stand-in for an email in logical resource names."""
    return hashlib.sha256(member.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class TeamAccessArgs:
    project: str
    zone: str
    members: tuple[str, ...]
    # Cluster VMs by node name (chief, worker-0, ...), and the account they run as.
    instances: dict[str, pulumi.Input[str]]
    node_account: pulumi.Input[str] | None
    # The Workbench instance's name and the account it runs as.
    notebook_instance: pulumi.Input[str] | None = None
    notebook_account: pulumi.Input[str] | None = None


class TeamAccess(pulumi.ComponentResource):
    def __init__(self, name: str, args: TeamAccessArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("trainstack:index:TeamAccess", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        where = Zone(args.project, args.zone)
        for member in args.members:
            who = f"{name}-{member_slug(member)}"
            grantee = Grantee(member, child)
            for node, instance in args.instances.items():
                grantee.tunnel_to(f"{who}-{node}-tunnel", where, instance, TUNNEL_ROLE)
                grantee.on_instance(f"{who}-{node}-login", where, instance, LOGIN_ROLE)
            if args.node_account is not None and args.instances:
                grantee.on_account(f"{who}-nodes-act-as", args.node_account, ACT_AS_ROLE)
            if args.notebook_instance is not None and args.notebook_account is not None:
                grantee.on_account(f"{who}-notebook-act-as", args.notebook_account, ACT_AS_ROLE)
                grantee.on_notebook(f"{who}-notebook-viewer", where, args.notebook_instance, NOTEBOOK_VIEWER_ROLE)
        self.register_outputs({"members": list(args.members)})


@dataclass(frozen=True)
class QueueAccessArgs:
    project: str
    zone: str
    stack_name: str
    members: tuple[str, ...]
    bucket_name: pulumi.Input[str]
    # The bucket's name as the program chose it: the grants' conditions name it.
    bucket: str
    # Cluster VMs by node name (chief, worker-0, ...): what `submit` starts.
    instances: dict[str, pulumi.Input[str]]


class QueueAccess(pulumi.ComponentResource):
    """What each trainstack:access member needs to queue, list and cancel jobs: bucket grants
    limited by object name, and a start-only custom role on each cluster VM."""

    def __init__(self, name: str, args: QueueAccessArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("trainstack:index:QueueAccess", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        start_role = None
        if args.instances:
            start_role = gcp.projects.IAMCustomRole(
                f"{name}-start-role",
                project=args.project,
                role_id=custom_role_id(args.stack_name, "queue_start"),
                title=f"trainstack {args.stack_name}: a teammate starts a node for a queued job",
                description="trainstack: `trainstack submit` starts a stopped node of the cluster",
                permissions=list(QUEUE_START_PERMISSIONS),
                opts=child,
            )
        where = Zone(args.project, args.zone)
        for member in args.members:
            who = f"{name}-{member_slug(member)}"
            grantee = Grantee(member, child)
            grantee.on_bucket(f"{who}-reader", args.bucket_name, READ_ROLE)
            for grant in submit_grants(args.bucket):
                grantee.on_bucket(
                    f"{who}-{grant.purpose}",
                    args.bucket_name,
                    grant.role,
                    Condition(grant.title, f"trainstack submit: {grant.title}", grant.expression),
                )
            if start_role is None:
                continue
            for node, instance in args.instances.items():
                grantee.on_instance(f"{who}-{node}-start", where, instance, start_role.name)
        self.register_outputs({"members": list(args.members)})
