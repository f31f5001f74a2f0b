"""Who the stack's machines act as, and the least each needs.

Three service accounts, one per kind of machine, so that none can act on another's:
the cluster nodes share the training account, the TPU VM has its own, and so does the
Workbench notebook. Each gets log and metric writing, read access to the stack's bucket and
write access to its own part of it alone (the job's machines their job's directory, the
notebook its notebooks/ area), read access on its registry (and on an external data bucket).
Releasing a machine at the end of a job uses custom roles that hold only get/stop/delete: on
each cluster instance,
and project-wide for TPU nodes, which have no per-node IAM. Starting a preempted Spot node
again uses one that holds only get/start, on each Spot node other than the chief. No
primitive roles, never the default compute service account.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from trainstack.cloud.components import with_former_type
from trainstack.cloud.components.grants import Condition, Grantee
from trainstack.jobcode.package import ImageRef
from trainstack_contract import LAYOUT
from trainstack_contract.grants import spares_executed
from trainstack_contract.jobaccess import objects_under

# Project-wide roles every machine needs: write logs (Cloud Logging collects the trainer's
# journal) and metrics. Everything else is granted on the one bucket and repository.
PROJECT_ROLES = ("roles/logging.logWriter", "roles/monitoring.metricWriter")
# Every object of the stack's bucket may be read (and listed: TensorFlow lists job
# directories); each machine writes only where it must: the job's machines their job's
# directory (jobs/<name>/: status, backups, checkpoints), the notebook its own area
# (notebooks/), never the other's. What nodes run (the agent, the code, requirements, wheels,
# the notebook's script) lives under trainstack/, which only `pulumi up` writes: a node or a
# notebook that could rewrite it could run code as root on every other machine, so every write
# grant excludes it by name as well, in any bucket. A condition on the object name is how
# Cloud Storage limits a role to a prefix (IAM Conditions, resource.name
# "projects/_/buckets/B/objects/NAME"; CEL's &&, || and ! combine them).
BUCKET_READ_ROLE = "roles/storage.objectViewer"
BUCKET_WRITE_ROLE = "roles/storage.objectUser"
# What the machines of a stack without a job write: job directories of their own choosing.
WRITABLE_PREFIX = f"{LAYOUT.jobs}/"
# The notebook's own area: its runs, its files; never a cluster's job directory.
NOTEBOOK_PREFIX = f"{LAYOUT.notebooks}/"


def writable_objects_condition(bucket: str, prefix: str = WRITABLE_PREFIX) -> str:
    """The CEL expression that limits a grant on ``bucket`` to objects under ``prefix``, never
    under what machines run (trainstack/), whatever ``prefix`` is."""
    return f"{objects_under(bucket, prefix)} {spares_executed(bucket)}"


def folder_read_condition(bucket: str, prefix: str) -> str:
    """The CEL expression that limits a read grant on ``bucket`` to the objects under folder
    ``prefix`` (and listing the bucket, which Cloud Storage checks on the bucket itself)."""
    return f'resource.type == "storage.googleapis.com/Bucket" || ({objects_under(bucket, f"{prefix}/")})'


def job_dir_condition(bucket: str, prefix: str) -> str:
    """The CEL expression that limits a grant on a team's own ``bucket`` to its job directory
    ``prefix`` (never what machines run), and to listing the bucket: Cloud Storage checks
    objects.list on the bucket itself, and TensorFlow lists the job directory (checkpoints, backups)."""
    return f'resource.type == "storage.googleapis.com/Bucket" || ({writable_objects_condition(bucket, f"{prefix}/")})'


REGISTRY_ROLE = "roles/artifactregistry.reader"
DATA_BUCKET_ROLE = "roles/storage.objectViewer"

# What a cluster node may do to an instance it is granted on: its own at the end of a job.
# Stop is a guest shutdown and needs none of these; delete is one API call (get is what
# any client reads first).
INSTANCE_RELEASE_PERMISSIONS = ("compute.instances.get", "compute.instances.stop", "compute.instances.delete")
# What the chief may do to a Spot peer it is granted on: see that it was preempted (get:
# status TERMINATED) and start it again (start). Nothing that changes the instance (no
# setMetadata, no stop or delete, no setServiceAccount): a chief that could rewrite a peer's
# startup script or account could run anything as it.
INSTANCE_RECOVER_PERMISSIONS = ("compute.instances.get", "compute.instances.start")
# The TPU VM stops or deletes itself through the TPU API (a guest shutdown keeps the TPU
# billing); gcloud's --async keeps tpu.operations.get out of it.
TPU_RELEASE_PERMISSIONS = ("tpu.nodes.get", "tpu.nodes.stop", "tpu.nodes.delete")


def custom_role_id(stack_name: str, purpose: str) -> str:
    """Custom role ids are letters, digits, "_" and "." (3-64); unique per stack and purpose."""
    return f"trainstack_{stack_name.replace('-', '_')}_{purpose}"


@dataclass(frozen=True)
class NodeIdentityArgs:
    project: str
    account_id: str
    display_name: str
    bucket_name: pulumi.Input[str]
    # The bucket's name as the program chose it: the write grant's condition names it.
    bucket: str
    repository_location: pulumi.Input[str]
    repository_name: pulumi.Input[str]
    data_bucket: str | None = None
    # The job's image when it lives in another Artifact Registry repository.
    image: ImageRef | None = None
    # job.job_dir: the team's own bucket and the folder the job writes in.
    job_dir_bucket: str | None = None
    job_dir_prefix: str | None = None
    # What the account may write in the stack's bucket (jobs/<name>/, notebooks/), and what
    # that is; None: nothing (a job that writes in job.job_dir alone).
    writable_prefix: str | None = WRITABLE_PREFIX
    writable_title: str = "job directories only"
    # job.buckets: the places the job reads and writes in buckets of the team's own
    # (gs://BUCKET or gs://BUCKET/FOLDER/; trainstack.stackmodel.places).
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()


class NodeIdentity(pulumi.ComponentResource):
    """One service account and the bindings a machine of the stack needs to do its job."""

    email: pulumi.Output[str]
    member: pulumi.Output[str]

    def __init__(self, name: str, args: NodeIdentityArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("trainstack:index:NodeIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.account = gcp.serviceaccount.Account(
            f"{name}-sa", project=args.project, account_id=args.account_id, display_name=args.display_name, opts=child
        )
        self.email = self.account.email
        self.member = self.account.member
        # projects/PROJECT/serviceAccounts/EMAIL: what IAM bindings on the account take.
        self.account_name = self.account.name
        grantee = Grantee(self.member, child)
        self.bindings: list[pulumi.Resource] = [
            grantee.on_project(f"{name}-{role.split('/')[1].replace('.', '-')}", args.project, role)
            for role in PROJECT_ROLES
        ]
        self.bindings.append(grantee.on_bucket(f"{name}-bucket-reader", args.bucket_name, BUCKET_READ_ROLE))
        if args.writable_prefix is not None:
            self.bindings.append(
                grantee.on_bucket(
                    f"{name}-bucket-{'notebook' if args.writable_prefix == NOTEBOOK_PREFIX else 'jobs'}-writer",
                    args.bucket_name,
                    BUCKET_WRITE_ROLE,
                    Condition(
                        args.writable_title,
                        f"write objects under {args.writable_prefix} only; what nodes run is written by pulumi up",
                        writable_objects_condition(args.bucket, args.writable_prefix),
                    ),
                )
            )
        if args.data_bucket:
            # Training data in another bucket: read-only access to that bucket alone.
            self.bindings.append(grantee.on_bucket(f"{name}-data-reader", args.data_bucket, DATA_BUCKET_ROLE))
        if args.job_dir_bucket and args.job_dir_prefix:
            # The job's directory in a bucket of the team's own: read and write under it alone.
            self.bindings.append(
                grantee.on_bucket(
                    f"{name}-job-dir-writer",
                    args.job_dir_bucket,
                    BUCKET_WRITE_ROLE,
                    Condition(
                        "the job directory only",
                        f"read and write objects under {args.job_dir_prefix}/ only",
                        job_dir_condition(args.job_dir_bucket, args.job_dir_prefix),
                    ),
                )
            )
        self.bindings += team_places(name, grantee, args)
        self.bindings.append(
            grantee.on_repository(
                f"{name}-registry-reader", args.project, args.repository_location, args.repository_name, REGISTRY_ROLE
            )
        )
        if args.image is not None:
            # Read access to the one other repository the job's image comes from.
            image = args.image
            self.bindings.append(
                grantee.on_repository(
                    f"{name}-image-reader", image.project, image.location, image.repository, REGISTRY_ROLE
                )
            )
        self.register_outputs({"email": self.email})


def _place_slug(place: str) -> str:
    return hashlib.sha256(place.encode()).hexdigest()[:8]


def team_places(name: str, grantee: Grantee, args: NodeIdentityArgs) -> list[pulumi.Resource]:
    """Read and write grants on the places job.buckets names in buckets of the team's own, each
    limited to its folder: what the stack's own bucket and job.data's bucket grant already is
    not granted twice."""
    grants: list[pulumi.Resource] = []
    for place in args.reads:
        bucket, _, folder = place.removeprefix("gs://").partition("/")
        if bucket in (args.bucket, args.data_bucket):
            continue
        condition = None
        if folder:
            folder = folder.rstrip("/")
            condition = Condition(
                "what the job reads", f"read objects under {folder}/ only", folder_read_condition(bucket, folder)
            )
        grants.append(grantee.on_bucket(f"{name}-reads-{_place_slug(place)}", bucket, DATA_BUCKET_ROLE, condition))
    for place in args.writes:
        bucket, _, folder = place.removeprefix("gs://").partition("/")
        folder = folder.rstrip("/")
        what = f"read and write objects under {folder}/ only" if folder else "read and write objects"
        expression = job_dir_condition(bucket, folder) if folder else writable_objects_condition(bucket, "")
        grants.append(
            grantee.on_bucket(
                f"{name}-writes-{_place_slug(place)}",
                bucket,
                BUCKET_WRITE_ROLE,
                Condition("where the job writes", what, expression),
            )
        )
    return grants


# NodeActionRole's type before it served more than releases.
FORMER_ROLE_TYPE = "trainstack:index:ReleaseRole"


# The description of the roles a machine uses to stop or delete itself.
RELEASE_DESCRIPTION = "trainstack: a machine stops or deletes itself when its job is over"


@dataclass(frozen=True)
class NodeActionRoleArgs:
    project: str
    stack_name: str
    # What the role is for, part of its id: node_release, tpu_release, node_recover.
    purpose: str
    # The end of its title: "cluster node releases itself".
    what: str
    permissions: tuple[str, ...]
    # The role's description in IAM: what a machine does with it.
    description: str


class NodeActionRole(pulumi.ComponentResource):
    """A custom role holding only the permissions a machine needs for one action on a
    machine of the stack: release itself, or start a preempted peer again."""

    role_name: pulumi.Output[str]

    def __init__(self, name: str, args: NodeActionRoleArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("trainstack:index:NodeActionRole", name, None, with_former_type(opts, FORMER_ROLE_TYPE))
        self.role = gcp.projects.IAMCustomRole(
            f"{name}-role",
            project=args.project,
            role_id=custom_role_id(args.stack_name, args.purpose),
            title=f"trainstack {args.stack_name}: {args.what}",
            description=args.description,
            permissions=list(args.permissions),
            opts=pulumi.ResourceOptions(parent=self),
        )
        # projects/<project>/roles/<role_id>, the name bindings take.
        self.role_name = self.role.name
        self.register_outputs({"role_name": self.role_name, "permissions": list(args.permissions)})


# The Cloud TPU API, whose service agent the TPU VM needs (its domain: the catalog's service_agents.csv).
TPU_SERVICE = "tpu.googleapis.com"


@dataclass(frozen=True)
class TpuServiceAgentArgs:
    project: str
    role: str


class TpuServiceAgent(pulumi.ComponentResource):
    """The project's Cloud TPU service agent and its service-agent role."""

    member: pulumi.Output[str]

    def __init__(self, name: str, args: TpuServiceAgentArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("trainstack:index:TpuServiceAgent", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.identity = gcp.projects.ServiceIdentity(
            f"{name}-identity", project=args.project, service=TPU_SERVICE, opts=child
        )
        self.binding = Grantee(self.identity.member, child).on_project(f"{name}-role", args.project, args.role)
        self.member = self.identity.member
        self.register_outputs({"member": self.member, "role": args.role})
