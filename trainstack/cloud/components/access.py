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
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

TUNNEL_ROLE = "roles/iap.tunnelResourceAccessor"
LOGIN_ROLE = "roles/compute.osLogin"
ACT_AS_ROLE = "roles/iam.serviceAccountUser"
NOTEBOOK_VIEWER_ROLE = "roles/notebooks.viewer"


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
        for member in args.members:
            who = f"{name}-{member_slug(member)}"
            for node, instance in args.instances.items():
                gcp.iap.TunnelInstanceIAMMember(
                    f"{who}-{node}-tunnel",
                    project=args.project,
                    zone=args.zone,
                    instance=instance,
                    role=TUNNEL_ROLE,
                    member=member,
                    opts=child,
                )
                gcp.compute.InstanceIAMMember(
                    f"{who}-{node}-login",
                    project=args.project,
                    zone=args.zone,
                    instance_name=instance,
                    role=LOGIN_ROLE,
                    member=member,
                    opts=child,
                )
            if args.node_account is not None and args.instances:
                gcp.serviceaccount.IAMMember(
                    f"{who}-nodes-act-as",
                    service_account_id=args.node_account,
                    role=ACT_AS_ROLE,
                    member=member,
                    opts=child,
                )
            if args.notebook_instance is not None and args.notebook_account is not None:
                gcp.serviceaccount.IAMMember(
                    f"{who}-notebook-act-as",
                    service_account_id=args.notebook_account,
                    role=ACT_AS_ROLE,
                    member=member,
                    opts=child,
                )
                gcp.workbench.InstanceIamMember(
                    f"{who}-notebook-viewer",
                    project=args.project,
                    location=args.zone,
                    name=args.notebook_instance,
                    role=NOTEBOOK_VIEWER_ROLE,
                    member=member,
                    opts=child,
                )
        self.register_outputs({"members": list(args.members)})
