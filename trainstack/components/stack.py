"""The whole stack: every component wired together from one validated StackConfig."""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from trainstack import scripts
from trainstack.components.budget import BillingBudget
from trainstack.components.gpu_cluster import GpuCluster, GpuClusterArgs
from trainstack.components.identity import (
    INSTANCE_RELEASE_PERMISSIONS,
    TPU_RELEASE_PERMISSIONS,
    NodeIdentity,
    NodeIdentityArgs,
    ReleaseRole,
    TpuServiceAgent,
    custom_role_id,
)
from trainstack.components.network import PrivateNetwork
from trainstack.components.notebook import WorkbenchNotebook
from trainstack.components.registry import ContainerRegistry
from trainstack.components.services import BUDGET_API, REQUIRED_APIS, TPU_API, WORKBENCH_API, ProjectServices
from trainstack.components.storage import TrainingBucket
from trainstack.components.tpu_vm import TpuVm
from trainstack.config import StackConfig
from trainstack.cost import stack_costs, total_hourly_usd
from trainstack.topology import cluster_nodes, tf_cluster_spec


def external_data_bucket(cfg: StackConfig) -> str | None:
    """The bucket of ``job.data`` when it is not the stack's own bucket."""
    data = cfg.settings.job.data
    if not data.startswith("gs://"):
        return None
    bucket = data.removeprefix("gs://").split("/", 1)[0]
    return None if bucket == scripts.bucket_name(cfg) else bucket


def ssh_command(vm_name: str, zone: str, project: str, tpu: bool = False) -> str:
    if tpu:
        # GA `gcloud compute tpus tpu-vm ssh` has no --tunnel-through-iap; the alpha track has
        # (gcloud reference, and the GA command's source sets IAP off). A TPU VM without a
        # public IP is reached through IAP only this way.
        return f"gcloud alpha compute tpus tpu-vm ssh {vm_name} --zone {zone} --project {project} --tunnel-through-iap"
    return f"gcloud compute ssh {vm_name} --zone {zone} --project {project} --tunnel-through-iap"


class TrainingStack(pulumi.ComponentResource):
    """Network, bucket, registry, identities, and the cluster / TPU VM / notebook the stack asks for."""

    def __init__(self, cfg: StackConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        name = cfg.name
        super().__init__("trainstack:index:TrainingStack", name, None, opts)
        settings = cfg.settings
        project, region, zone, labels = cfg.project, cfg.region, settings.zone, cfg.labels
        child = pulumi.ResourceOptions(parent=self)

        apis = list(REQUIRED_APIS)
        apis += [TPU_API] if settings.tpu else []
        apis += [WORKBENCH_API] if settings.notebook else []
        apis += [BUDGET_API] if settings.budget else []
        services = ProjectServices(f"{name}-apis", project, apis, opts=child)
        after_apis = pulumi.ResourceOptions(parent=self, depends_on=services.ready)

        self.bucket = TrainingBucket(f"{name}-storage", scripts.bucket_name(cfg), region, settings.storage, labels, opts=after_apis)
        self.registry = ContainerRegistry(f"{name}-registry", project, region, f"{name}-images", labels, opts=after_apis)

        def identity(suffix: str, account_suffix: str, display_name: str) -> NodeIdentity:
            args = NodeIdentityArgs(project, f"{name}-{account_suffix}", display_name, self.bucket.name, self.registry.repository, external_data_bucket(cfg))
            return NodeIdentity(f"{name}-{suffix}", args, opts=after_apis)

        # One account per kind of machine: the training port, the release roles and the
        # IAP firewall name them one by one.
        identities: list[NodeIdentity] = []
        if settings.cluster is not None:
            self.identity = identity("identity", "train", "trainstack training nodes")
            identities.append(self.identity)
        if settings.tpu is not None:
            self.tpu_identity = identity("tpu-identity", "tpu", "trainstack TPU VM")
            identities.append(self.tpu_identity)
        if settings.notebook is not None:
            self.notebook_identity = identity("notebook-identity", "nb", "trainstack Workbench notebook")
            identities.append(self.notebook_identity)

        nodes = cluster_nodes(cfg)
        tf_cluster = tf_cluster_spec(cfg, nodes)
        # The training port only where nodes talk to each other (a TF_CONFIG cluster).
        port = settings.cluster.port if settings.cluster is not None and tf_cluster else None
        self.network = PrivateNetwork(
            f"{name}-net", project, region, [i.email for i in identities], self.identity.email if port is not None else None, port, opts=after_apis
        )

        def node_opts(node_identity: NodeIdentity, *extra: pulumi.Resource) -> pulumi.ResourceOptions:
            # Nodes start training at boot: their permissions and egress must exist first.
            return pulumi.ResourceOptions(parent=self, depends_on=[*node_identity.bindings, self.network.nat, *extra])

        bucket_uri = f"gs://{scripts.bucket_name(cfg)}"
        trainer_package: list[pulumi.Resource] = []
        if settings.cluster is not None or settings.tpu is not None:
            # The boot scripts fetch the trainer from here at every boot.
            self.trainer_package = gcp.storage.BucketObject(
                f"{name}-trainer-package",
                bucket=self.bucket.name,
                name=scripts.TRAINER_OBJECT,
                source=pulumi.AssetArchive({"trainer": pulumi.FileArchive(str(scripts.TRAINER_SOURCE))}),
                opts=child,
            )
            trainer_package.append(self.trainer_package)

        vm_names: list[str] = []
        ssh: dict[str, str] = {}
        if settings.cluster is not None:
            release_role = None
            if settings.cluster.on_finish == "delete":
                release_role = ReleaseRole(
                    f"{name}-node-release",
                    project,
                    custom_role_id(name, "node_release"),
                    f"trainstack {name}: cluster node releases itself",
                    INSTANCE_RELEASE_PERMISSIONS,
                    opts=after_apis,
                ).role_name
            self.cluster = GpuCluster(
                f"{name}-cluster",
                GpuClusterArgs(
                    project=project,
                    zone=zone,
                    cluster=settings.cluster,
                    nodes=nodes,
                    tf_cluster=tf_cluster,
                    cluster_metadata_key=scripts.cluster_metadata_key(cfg),
                    node_metadata={node.key: scripts.node_metadata(cfg, node, bucket_uri, with_cluster=bool(tf_cluster)) for node in nodes},
                    startup_script=scripts.render(scripts.CLUSTER_NODE, cfg),
                    service_account_email=self.identity.email,
                    subnetwork=self.network.subnetwork.id,
                    labels=labels,
                    release_role=release_role,
                ),
                opts=node_opts(self.identity, *trainer_package),
            )
            vm_names += self.cluster.names
            ssh.update({n: ssh_command(n, zone, project) for n in self.cluster.names})
        if settings.tpu is not None:
            self.tpu_agent = TpuServiceAgent(f"{name}-tpu-agent", project, settings.tpu.service_agent_role, opts=after_apis)
            # TPU nodes have no per-node IAM: the TPU VM's own account holds this role on the
            # project, which is why no other machine of the stack runs as that account. It is
            # granted even with on_finish: keep, because the run-time cap stops the TPU too.
            tpu_release = ReleaseRole(
                f"{name}-tpu-release",
                project,
                custom_role_id(name, "tpu_release"),
                f"trainstack {name}: TPU VM releases itself",
                TPU_RELEASE_PERMISSIONS,
                opts=after_apis,
            )
            tpu_release_binding = gcp.projects.IAMMember(
                f"{name}-tpu-identity-release", project=project, role=tpu_release.role_name, member=self.tpu_identity.member, opts=child
            )
            self.tpu = TpuVm(
                f"{name}-tpu",
                project,
                zone,
                scripts.tpu_vm_name(cfg),
                settings.tpu,
                scripts.tpu_metadata(cfg, bucket_uri),
                scripts.render(scripts.TPU_VM, cfg),
                self.tpu_identity.email,
                self.network.network.id,
                self.network.subnetwork.id,
                labels,
                opts=node_opts(self.tpu_identity, self.tpu_agent.binding, tpu_release_binding, *trainer_package),
            )
            vm_names.append(self.tpu.name)
            ssh[self.tpu.name] = ssh_command(self.tpu.name, zone, project, tpu=True)
        if settings.notebook is not None:
            script_object = gcp.storage.BucketObject(
                f"{name}-notebook-post-startup",
                bucket=self.bucket.name,
                name="trainstack/workbench-post-startup.sh",
                content=scripts.render(scripts.WORKBENCH, cfg),
                opts=child,
            )
            self.notebook = WorkbenchNotebook(
                f"{name}-notebook",
                project,
                zone,
                f"{name}-notebook",
                settings.notebook,
                pulumi.Output.concat("gs://", script_object.bucket, "/", script_object.name),
                self.notebook_identity.email,
                self.network.network.id,
                self.network.subnetwork.id,
                labels,
                opts=node_opts(self.notebook_identity),
            )
            vm_names.append(self.notebook.name)
        if settings.budget is not None:
            BillingBudget(f"{name}-budget", project, settings.budget, opts=after_apis)

        costs = stack_costs(cfg)
        self.bucket_url = self.bucket.url
        self.registry_url = self.registry.url
        self.vm_names = vm_names
        self.ssh_commands = ssh
        self.job_dir = scripts.job_dir(cfg)
        self.hourly_usd = total_hourly_usd(costs)
        self.register_outputs(
            {
                "bucket_url": self.bucket_url,
                "registry_url": self.registry_url,
                "vm_names": self.vm_names,
                "ssh_commands": self.ssh_commands,
                "job_dir": self.job_dir,
                "hourly_usd": self.hourly_usd,
            }
        )
