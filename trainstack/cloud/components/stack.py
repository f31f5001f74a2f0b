"""The whole stack: the components wired together from one resolved stack."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import pulumi

from trainstack.cloud import bootscripts
from trainstack.cloud.bootscripts import BootFiles
from trainstack.cloud.components import Placement
from trainstack.cloud.components.access import QueueAccess, QueueAccessArgs, TeamAccess, TeamAccessArgs
from trainstack.cloud.components.bucket import TrainingBucket, TrainingBucketArgs
from trainstack.cloud.components.budget import BillingBudget, BillingBudgetArgs
from trainstack.cloud.components.cluster import TrainingCluster, TrainingClusterArgs
from trainstack.cloud.components.encryption import KeyGrants, KeyGrantsArgs, key_users
from trainstack.cloud.components.identity import NOTEBOOK_PREFIX, WRITABLE_PREFIX, NodeIdentity, NodeIdentityArgs
from trainstack.cloud.components.network import JoinedNetwork, PrivateNetwork, PrivateNetworkArgs
from trainstack.cloud.components.notebook import WorkbenchNotebook, WorkbenchNotebookArgs
from trainstack.cloud.components.registry import ContainerRegistry, ContainerRegistryArgs, pinned_image
from trainstack.cloud.components.secrets import JobSecrets, JobSecretsArgs
from trainstack.cloud.components.services import (
    BUDGET_API,
    REQUIRED_APIS,
    SECRETS_API,
    TPU_API,
    WORKBENCH_API,
    ProjectServices,
    ProjectServicesArgs,
)
from trainstack.cloud.components.tpu_vm import TpuVm, TpuVmArgs
from trainstack.stackmodel.naming import NOTEBOOK_ACCOUNT_SUFFIX, TPU_ACCOUNT_SUFFIX, TRAINING_ACCOUNT_SUFFIX
from trainstack.stackmodel.resolved import ResolvedStack
from trainstack_contract import METADATA_KEYS, STACK_LABEL


def ssh_command(vm_name: str, zone: str, project: str, tpu: bool = False) -> str:
    if tpu:
        # GA `gcloud compute tpus tpu-vm ssh` has no --tunnel-through-iap; the alpha track has
        # (https://cloud.google.com/sdk/gcloud/reference/alpha/compute/tpus/tpu-vm/ssh). A TPU
        # VM without a public IP is reached through IAP only this way.
        return f"gcloud alpha compute tpus tpu-vm ssh {vm_name} --zone {zone} --project {project} --tunnel-through-iap"
    return f"gcloud compute ssh {vm_name} --zone {zone} --project {project} --tunnel-through-iap"


@dataclass(frozen=True)
class TrainingStackArgs:
    stack: ResolvedStack
    boot: BootFiles


@dataclass
class Identities:
    """One account per kind of machine: the training port, the release roles and the IAP
    firewall name them one by one."""

    training: NodeIdentity | None = None
    tpu: NodeIdentity | None = None
    notebook: NodeIdentity | None = None

    @property
    def every(self) -> list[NodeIdentity]:
        return [i for i in (self.training, self.tpu, self.notebook) if i is not None]

    @property
    def job_runners(self) -> list[NodeIdentity]:
        """The accounts that run the job (a notebook runs none): the only readers of its secrets."""
        return [i for i in (self.training, self.tpu) if i is not None]


@dataclass
class Machines:
    cluster: TrainingCluster | None = None
    tpu: TpuVm | None = None
    notebook: WorkbenchNotebook | None = None
    # An ssh command per VM.
    ssh: dict[str, str] = field(default_factory=dict)


class TrainingStack(pulumi.ComponentResource):
    """Network, bucket, registry, identities, and the cluster / TPU VM / notebook the stack asks for."""

    bucket_url: pulumi.Output[str]
    registry_url: pulumi.Output[str]
    vm_names: list[str]
    ssh_commands: dict[str, str]
    job_dir: str | None
    hourly_usd: float | None
    costs: list[dict[str, Any]]

    def __init__(self, args: TrainingStackArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        stack, boot = args.stack, args.boot
        super().__init__("trainstack:index:TrainingStack", stack.name, None, opts)
        # Declared in this order: the plan lists resources as they are declared.
        after_apis = enable_services(stack, self)
        keys = declare_key_grants(stack, after_apis)
        bucket, registry = declare_storage(stack, after_apis, keys)
        identities = declare_identities(stack, bucket, registry, after_apis)
        secret_resources = declare_secrets(stack, identities.job_runners, after_apis)
        port = stack.cluster.training_port if stack.cluster else None
        network_args = PrivateNetworkArgs(
            stack.project,
            stack.region,
            [i.email for i in identities.every],
            identities.training.email if port is not None and identities.training else None,
            port,
        )
        network: PrivateNetwork | JoinedNetwork
        if stack.network is not None:
            network = JoinedNetwork(f"{stack.name}-net", network_args, stack.network, opts=after_apis)
        else:
            network = PrivateNetwork(f"{stack.name}-net", network_args, opts=after_apis)
        options = MachineOptions(self, network, secret_resources, bucket.ready, keys)
        machines = declare_machines(stack, boot, identities, bucket, options)
        declare_access_and_budget(stack, identities, machines, bucket, after_apis)
        self.bucket_url = bucket.url
        self.registry_url = registry.url
        self.vm_names = stack.vm_names
        self.ssh_commands = machines.ssh
        self.job_dir = stack.job_dir
        self.hourly_usd = stack.hourly_usd
        self.costs = [asdict(cost) for cost in stack.costs]
        self.register_outputs(
            {
                "bucket_url": self.bucket_url,
                "registry_url": self.registry_url,
                "vm_names": self.vm_names,
                "ssh_commands": self.ssh_commands,
                "job_dir": self.job_dir,
                "hourly_usd": self.hourly_usd,
                "costs": self.costs,
            }
        )


def enable_services(stack: ResolvedStack, parent: pulumi.Resource) -> pulumi.ResourceOptions:
    """The project's APIs the stack uses; returns the options of everything that waits for them."""
    apis = list(REQUIRED_APIS)
    apis += [TPU_API] if stack.tpu else []
    apis += [WORKBENCH_API] if stack.notebook else []
    apis += [BUDGET_API] if stack.budget else []
    apis += [SECRETS_API] if stack.job is not None and stack.job.secrets else []
    services = ProjectServices(
        f"{stack.name}-apis",
        ProjectServicesArgs(stack.project, tuple(apis)),
        opts=pulumi.ResourceOptions(parent=parent),
    )
    return pulumi.ResourceOptions(parent=parent, depends_on=services.ready)


def declare_key_grants(stack: ResolvedStack, after_apis: pulumi.ResourceOptions) -> list[pulumi.Resource]:
    """With trainstack:encryption, the key's grants to the service agents that use it; returns
    what everything encrypted with the key waits for."""
    if stack.encryption is None:
        return []
    grants = KeyGrants(
        f"{stack.name}-key-grants",
        KeyGrantsArgs(stack.project, stack.encryption, tuple(key_users(stack))),
        opts=after_apis,
    )
    return grants.ready


def declare_storage(
    stack: ResolvedStack, after_apis: pulumi.ResourceOptions, keys: list[pulumi.Resource]
) -> tuple[TrainingBucket, ContainerRegistry]:
    """The bucket (with what the machines fetch at boot) and the container registry, each
    encrypted with the stack's key where it has one (after the grants that let Google use it)."""
    kms_key = stack.encryption.kms_key if stack.encryption is not None else None
    after_keys = (
        pulumi.ResourceOptions.merge(after_apis, pulumi.ResourceOptions(depends_on=keys)) if keys else after_apis
    )
    runs_agent = stack.cluster is not None or stack.tpu is not None
    bucket = TrainingBucket(
        f"{stack.name}-storage",
        TrainingBucketArgs(
            bucket_name=stack.bucket_name,
            location=stack.region,
            storage=stack.storage,
            labels=stack.labels,
            job=stack.job if runs_agent else None,
            stack_name=stack.name,
            runs_agent=runs_agent,
            wheelhouse=stack.wheelhouse,
            locks=tuple(kind.lock_artifact for kind in bootscripts.node_kinds(stack)),
            kms_key=kms_key,
        ),
        opts=after_keys,
    )
    registry = ContainerRegistry(
        f"{stack.name}-registry",
        ContainerRegistryArgs(stack.project, stack.region, stack.repository_id, stack.labels, kms_key),
        opts=after_keys,
    )
    return bucket, registry


def declare_identities(
    stack: ResolvedStack, bucket: TrainingBucket, registry: ContainerRegistry, after_apis: pulumi.ResourceOptions
) -> Identities:
    def identity(suffix: str, account_suffix: str, display_name: str, runs_job: bool = True) -> NodeIdentity:
        job = stack.job if runs_job else None
        writable, title = writable_area(runs_job)
        identity_args = NodeIdentityArgs(
            project=stack.project,
            account_id=f"{stack.name}-{account_suffix}",
            display_name=display_name,
            bucket_name=bucket.name,
            bucket=stack.bucket_name,
            repository_location=registry.repository.location,
            repository_name=registry.repository.name,
            data_bucket=stack.external_data_bucket,
            # Only machines that run the job pull its image, and write its own job directory.
            image=stack.external_image if runs_job else None,
            job_dir_bucket=job.job_dir_bucket if job else None,
            job_dir_prefix=job.job_dir_prefix if job else None,
            writable_prefix=writable,
            writable_title=title,
            reads=job.places.reads if job else (),
            writes=job.places.writes if job else (),
        )
        return NodeIdentity(f"{stack.name}-{suffix}", identity_args, opts=after_apis)

    identities = Identities()
    if stack.cluster is not None:
        identities.training = identity("identity", TRAINING_ACCOUNT_SUFFIX, "trainstack training nodes")
    if stack.tpu is not None:
        identities.tpu = identity("tpu-identity", TPU_ACCOUNT_SUFFIX, "trainstack TPU VM")
    if stack.notebook is not None:
        identities.notebook = identity(
            "notebook-identity", NOTEBOOK_ACCOUNT_SUFFIX, "trainstack Workbench notebook", runs_job=False
        )
    return identities


def writable_area(runs_job: bool) -> tuple[str | None, str]:
    """What an account may write in the stack's bucket, and its grant's title: the notebook its
    own area; the job's machines every job directory (jobs/), which the notebook must not
    touch. Not the stack's own job's alone: the queue puts queued jobs and tuning trials in
    jobs/q<ID>_<NAME>/, beside job 0, also where job 0 writes in job.job_dir. Each job's own
    code gets a token for its own directory alone (trainstack_agent.jobtoken)."""
    if not runs_job:
        return NOTEBOOK_PREFIX, "the notebook's own area only"
    return WRITABLE_PREFIX, "job directories only"


def declare_secrets(
    stack: ResolvedStack, readers: list[NodeIdentity], after_apis: pulumi.ResourceOptions
) -> list[pulumi.Resource]:
    """The job's secrets, readable by ``readers`` alone; returns what the machines wait for."""
    if stack.job is None or not stack.job.secrets:
        return []
    values = stack.secret_values
    job_secrets = JobSecrets(
        f"{stack.name}-secrets",
        JobSecretsArgs(
            project=stack.project,
            region=stack.region,
            secrets=tuple((env, secret_id, values[env].value) for env, secret_id in stack.job.secrets),
            readers=tuple(i.member for i in readers),
            labels=stack.labels,
        ),
        opts=after_apis,
    )
    return job_secrets.ready


@dataclass(frozen=True)
class MachineOptions:
    """What every machine is declared with: its parent, and what it waits for."""

    parent: pulumi.Resource
    network: PrivateNetwork | JoinedNetwork
    secrets: list[pulumi.Resource]
    code: list[pulumi.Resource]
    # The key's grants, where the stack has a key: its disks are created with it.
    keys: list[pulumi.Resource]

    def waiting(
        self, identity: NodeIdentity, fetches_code: bool = True, alias_type: str | None = None
    ) -> pulumi.ResourceOptions:
        # Machines start training at boot: their permissions, egress, secrets and code come first.
        return pulumi.ResourceOptions(
            parent=self.parent,
            depends_on=[
                *identity.bindings,
                *self.network.egress,
                *self.secrets,
                *(self.code if fetches_code else []),
                *self.keys,
            ],
            aliases=[pulumi.Alias(type_=alias_type)] if alias_type else None,
        )


def declare_machines(
    stack: ResolvedStack, boot: BootFiles, identities: Identities, bucket: TrainingBucket, options: MachineOptions
) -> Machines:
    """The cluster, the TPU VM and the notebook the stack asks for."""
    name, project, zone = stack.name, stack.project, stack.zone
    network = options.network
    place = Placement(project, zone, network.network_id, network.subnetwork_id, stack.labels, name)
    machines = Machines()
    pin = image_pin(stack, options.parent)
    disk_key = stack.encryption.kms_key if stack.encryption is not None else None
    if stack.cluster is not None and boot.cluster_script is not None and identities.training is not None:
        machines.cluster = TrainingCluster(
            f"{name}-cluster",
            TrainingClusterArgs(
                place=place,
                cluster=stack.cluster,
                startup_script=boot.cluster_script,
                node_metadata={node: pin(metadata) for node, metadata in boot.cluster_metadata.items()},
                service_account_email=identities.training.email,
                disk_key=disk_key,
            ),
            # The component's former type: an update keeps every VM rather than replacing it.
            opts=options.waiting(identities.training, alias_type="trainstack:index:GpuCluster"),
        )
        machines.ssh.update({n: ssh_command(n, zone, project) for n in machines.cluster.names})
    if stack.tpu is not None and boot.tpu_script is not None and identities.tpu is not None:
        machines.tpu = TpuVm(
            f"{name}-tpu",
            TpuVmArgs(
                place=place,
                tpu=stack.tpu,
                startup_script=boot.tpu_script,
                metadata=pin(boot.tpu_metadata),
                service_account_email=identities.tpu.email,
                service_account_member=identities.tpu.member,
            ),
            opts=options.waiting(identities.tpu),
        )
        machines.ssh[machines.tpu.name] = ssh_command(machines.tpu.name, zone, project, tpu=True)
    if (
        stack.notebook is not None
        and boot.notebook_script is not None
        and boot.notebook_startup_script is not None
        and identities.notebook is not None
    ):
        machines.notebook = WorkbenchNotebook(
            f"{name}-notebook",
            WorkbenchNotebookArgs(
                place=place,
                notebook=stack.notebook,
                post_startup_script=boot.notebook_script,
                startup_script=boot.notebook_startup_script,
                bucket_name=bucket.name,
                service_account_email=identities.notebook.email,
                disk_key=disk_key,
            ),
            opts=options.waiting(identities.notebook, fetches_code=False),
        )
    return machines


MachineMetadata = Mapping[str, pulumi.Input[str]]


def image_pin(stack: ResolvedStack, parent: pulumi.Resource) -> Callable[[Mapping[str, str]], MachineMetadata]:
    """What gives a machine's metadata the job's image by digest: an image named by tag is
    resolved once, when the stack is deployed, and every machine pulls that digest."""
    image = stack.job.image if stack.job is not None else None
    if image is None:
        return lambda metadata: metadata
    pinned = pinned_image(image, pulumi.InvokeOutputOptions(parent=parent))

    def pin(metadata: Mapping[str, str]) -> MachineMetadata:
        return {**metadata, METADATA_KEYS.image: pinned} if METADATA_KEYS.image in metadata else metadata

    return pin


def declare_access_and_budget(
    stack: ResolvedStack,
    identities: Identities,
    machines: Machines,
    bucket: TrainingBucket,
    after_apis: pulumi.ResourceOptions,
) -> None:
    """The team's access to its machines and its job queue, and the billing budget."""
    access = stack.access
    if access is not None and access.members and (machines.cluster is not None or machines.notebook is not None):
        TeamAccess(
            f"{stack.name}-access",
            TeamAccessArgs(
                project=stack.project,
                zone=stack.zone,
                members=tuple(access.members),
                instances={n: i.name for n, i in machines.cluster.instances.items()} if machines.cluster else {},
                node_account=identities.training.account_name if identities.training else None,
                notebook_instance=machines.notebook.instance.name if machines.notebook else None,
                notebook_account=identities.notebook.account_name if identities.notebook else None,
            ),
            opts=after_apis,
        )
    if access is not None and access.members and stack.runs_queue:
        QueueAccess(
            f"{stack.name}-queue-access",
            QueueAccessArgs(
                project=stack.project,
                zone=stack.zone,
                stack_name=stack.name,
                members=tuple(access.members),
                bucket_name=bucket.name,
                bucket=stack.bucket_name,
                instances={n: i.name for n, i in machines.cluster.instances.items()} if machines.cluster else {},
            ),
            opts=after_apis,
        )
    if stack.budget is not None:
        BillingBudget(
            f"{stack.name}-budget",
            BillingBudgetArgs(stack.project, stack.budget, (STACK_LABEL, stack.labels[STACK_LABEL])),
            opts=after_apis,
        )
