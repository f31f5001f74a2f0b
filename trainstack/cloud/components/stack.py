"""The whole stack: the components wired together from one resolved stack."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import pulumi

from trainstack.cloud.bootscripts import BootFiles
from trainstack.cloud.components.access import TeamAccess, TeamAccessArgs
from trainstack.cloud.components.bucket import TrainingBucket, TrainingBucketArgs
from trainstack.cloud.components.budget import BillingBudget, BillingBudgetArgs
from trainstack.cloud.components.cluster import TrainingCluster, TrainingClusterArgs
from trainstack.cloud.components.identity import NodeIdentity, NodeIdentityArgs
from trainstack.cloud.components.network import PrivateNetwork, PrivateNetworkArgs
from trainstack.cloud.components.notebook import WorkbenchNotebook, WorkbenchNotebookArgs
from trainstack.cloud.components.registry import ContainerRegistry, ContainerRegistryArgs
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
from trainstack.stackmodel.resolved import TRAINING_ACCOUNT_SUFFIX, ResolvedStack
from trainstack_contract import STACK_LABEL


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
        name, project, zone, labels = stack.name, stack.project, stack.zone, stack.labels
        super().__init__("trainstack:index:TrainingStack", name, None, opts)

        apis = list(REQUIRED_APIS)
        apis += [TPU_API] if stack.tpu else []
        apis += [WORKBENCH_API] if stack.notebook else []
        apis += [BUDGET_API] if stack.budget else []
        apis += [SECRETS_API] if stack.job is not None and stack.job.secrets else []
        services = ProjectServices(
            f"{name}-apis", ProjectServicesArgs(project, tuple(apis)), opts=pulumi.ResourceOptions(parent=self)
        )
        after_apis = pulumi.ResourceOptions(parent=self, depends_on=services.ready)

        self.bucket = TrainingBucket(
            f"{name}-storage",
            TrainingBucketArgs(
                bucket_name=stack.bucket_name,
                location=stack.region,
                storage=stack.storage,
                labels=labels,
                job=stack.job if stack.cluster is not None or stack.tpu is not None else None,
                stack_name=name,
                runs_agent=stack.cluster is not None or stack.tpu is not None,
                wheelhouse=stack.wheelhouse,
            ),
            opts=after_apis,
        )
        self.registry = ContainerRegistry(
            f"{name}-registry",
            ContainerRegistryArgs(project, stack.region, stack.repository_id, labels),
            opts=after_apis,
        )

        def identity(suffix: str, account_suffix: str, display_name: str, runs_job: bool = True) -> NodeIdentity:
            identity_args = NodeIdentityArgs(
                project=project,
                account_id=f"{name}-{account_suffix}",
                display_name=display_name,
                bucket_name=self.bucket.name,
                bucket=stack.bucket_name,
                repository_location=self.registry.repository.location,
                repository_name=self.registry.repository.name,
                data_bucket=stack.external_data_bucket,
                # Only machines that run the job pull its image, and write its own job directory.
                image=stack.external_image if runs_job else None,
                job_dir_bucket=stack.job.job_dir_bucket if runs_job and stack.job else None,
                job_dir_prefix=stack.job.job_dir_prefix if runs_job and stack.job else None,
            )
            return NodeIdentity(f"{name}-{suffix}", identity_args, opts=after_apis)

        # One account per kind of machine: the training port, the release roles and the
        # IAP firewall name them one by one.
        identities: list[NodeIdentity] = []
        if stack.cluster is not None:
            self.identity = identity("identity", TRAINING_ACCOUNT_SUFFIX, "trainstack training nodes")
            identities.append(self.identity)
        if stack.tpu is not None:
            self.tpu_identity = identity("tpu-identity", "tpu", "trainstack TPU VM")
            identities.append(self.tpu_identity)
        # The accounts that run the job (a notebook runs none): the only readers of its secrets.
        job_identities = list(identities)
        if stack.notebook is not None:
            self.notebook_identity = identity(
                "notebook-identity", "nb", "trainstack Workbench notebook", runs_job=False
            )
            identities.append(self.notebook_identity)

        secret_resources: list[pulumi.Resource] = []
        if stack.job is not None and stack.job.secrets:
            values = stack.secret_values
            job_secrets = JobSecrets(
                f"{name}-secrets",
                JobSecretsArgs(
                    project=project,
                    region=stack.region,
                    secrets=tuple((env, secret_id, values[env].value) for env, secret_id in stack.job.secrets),
                    readers=tuple(i.member for i in job_identities),
                    labels=labels,
                ),
                opts=after_apis,
            )
            secret_resources = job_secrets.ready

        port = stack.cluster.training_port if stack.cluster else None
        self.network = PrivateNetwork(
            f"{name}-net",
            PrivateNetworkArgs(
                project,
                stack.region,
                [i.email for i in identities],
                self.identity.email if port is not None else None,
                port,
            ),
            opts=after_apis,
        )

        def node_opts(
            node_identity: NodeIdentity, *extra: pulumi.Resource, alias_type: str | None = None
        ) -> pulumi.ResourceOptions:
            # Machines start training at boot: their permissions, egress and code come first.
            return pulumi.ResourceOptions(
                parent=self,
                depends_on=[*node_identity.bindings, self.network.nat, *secret_resources, *extra],
                aliases=[pulumi.Alias(type_=alias_type)] if alias_type else None,
            )

        ssh: dict[str, str] = {}
        if stack.cluster is not None and boot.cluster_script is not None:
            self.cluster = TrainingCluster(
                f"{name}-cluster",
                TrainingClusterArgs(
                    project=project,
                    zone=zone,
                    cluster=stack.cluster,
                    startup_script=boot.cluster_script,
                    node_metadata=boot.cluster_metadata,
                    service_account_email=self.identity.email,
                    subnetwork=self.network.subnetwork.id,
                    labels=labels,
                    stack_name=name,
                ),
                # The component's former type: an update keeps every VM rather than replacing it.
                opts=node_opts(self.identity, *self.bucket.ready, alias_type="trainstack:index:GpuCluster"),
            )
            ssh.update({n: ssh_command(n, zone, project) for n in self.cluster.names})
        if stack.tpu is not None and boot.tpu_script is not None:
            self.tpu = TpuVm(
                f"{name}-tpu",
                TpuVmArgs(
                    project=project,
                    zone=zone,
                    tpu=stack.tpu,
                    startup_script=boot.tpu_script,
                    metadata=boot.tpu_metadata,
                    service_account_email=self.tpu_identity.email,
                    service_account_member=self.tpu_identity.member,
                    network=self.network.network.id,
                    subnetwork=self.network.subnetwork.id,
                    labels=labels,
                    stack_name=name,
                ),
                opts=node_opts(self.tpu_identity, *self.bucket.ready),
            )
            ssh[self.tpu.name] = ssh_command(self.tpu.name, zone, project, tpu=True)
        if stack.notebook is not None and boot.notebook_script is not None:
            self.notebook = WorkbenchNotebook(
                f"{name}-notebook",
                WorkbenchNotebookArgs(
                    project=project,
                    zone=zone,
                    notebook=stack.notebook,
                    post_startup_script=boot.notebook_script,
                    bucket_name=self.bucket.name,
                    service_account_email=self.notebook_identity.email,
                    network=self.network.network.id,
                    subnetwork=self.network.subnetwork.id,
                    labels=labels,
                    stack_name=name,
                ),
                opts=node_opts(self.notebook_identity),
            )
        access = stack.access
        if access is not None and access.members and (stack.cluster is not None or stack.notebook is not None):
            TeamAccess(
                f"{name}-access",
                TeamAccessArgs(
                    project=project,
                    zone=zone,
                    members=tuple(access.members),
                    instances={n: i.name for n, i in self.cluster.instances.items()} if stack.cluster else {},
                    node_account=self.identity.account_name if stack.cluster else None,
                    notebook_instance=self.notebook.instance.name if stack.notebook else None,
                    notebook_account=self.notebook_identity.account_name if stack.notebook else None,
                ),
                opts=after_apis,
            )
        if stack.budget is not None:
            BillingBudget(
                f"{name}-budget",
                BillingBudgetArgs(project, stack.budget, (STACK_LABEL, labels[STACK_LABEL])),
                opts=after_apis,
            )

        self.bucket_url = self.bucket.url
        self.registry_url = self.registry.url
        self.vm_names = stack.vm_names
        self.ssh_commands = ssh
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
