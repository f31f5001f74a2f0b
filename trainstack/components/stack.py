"""The whole stack: every component wired together from one validated StackConfig."""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from trainstack import scripts
from trainstack.components.budget import BillingBudget
from trainstack.components.gpu_cluster import GpuCluster
from trainstack.components.identity import TpuServiceAgent, TrainingIdentity
from trainstack.components.network import PrivateNetwork
from trainstack.components.notebook import WorkbenchNotebook
from trainstack.components.registry import ContainerRegistry
from trainstack.components.services import BUDGET_API, REQUIRED_APIS, TPU_API, WORKBENCH_API, ProjectServices
from trainstack.components.storage import TrainingBucket
from trainstack.components.tpu_vm import TpuVm
from trainstack.config import StackConfig
from trainstack.cost import stack_costs, total_hourly_usd
from trainstack.topology import cluster_nodes, tf_cluster_spec


TPU_SELF_STOP_ROLE = "roles/tpu.admin"


def external_data_bucket(cfg: StackConfig) -> str | None:
    """The bucket of ``job.data`` when it is not the stack's own bucket."""
    data = cfg.settings.job.data
    if not data.startswith("gs://"):
        return None
    bucket = data.removeprefix("gs://").split("/", 1)[0]
    return None if bucket == scripts.bucket_name(cfg) else bucket


def ssh_command(vm_name: str, zone: str, project: str, tpu: bool = False) -> str:
    if tpu:
        return f"gcloud compute tpus tpu-vm ssh {vm_name} --zone {zone} --project {project} --tunnel-through-iap"
    return f"gcloud compute ssh {vm_name} --zone {zone} --project {project} --tunnel-through-iap"


class TrainingStack(pulumi.ComponentResource):
    """Network, bucket, registry, identity, and the cluster / TPU VM / notebook the stack asks for."""

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
        self.identity = TrainingIdentity(
            f"{name}-identity", project, f"{name}-train", self.bucket.name, self.registry.repository, external_data_bucket(cfg), opts=after_apis
        )
        port = settings.cluster.port if settings.cluster else None
        self.network = PrivateNetwork(f"{name}-net", project, region, self.identity.email, port, opts=after_apis)
        # Nodes start training at boot: their permissions must exist before they do.
        node_dependencies: list[pulumi.Resource] = [
            self.identity.bucket_binding,
            self.identity.registry_binding,
            *self.identity.project_bindings,
            *([self.identity.data_binding] if self.identity.data_binding else []),
            self.network.nat,
        ]
        node_opts = pulumi.ResourceOptions(parent=self, depends_on=node_dependencies)

        bucket_uri = f"gs://{scripts.bucket_name(cfg)}"
        if settings.cluster is not None or settings.tpu is not None:
            # The boot scripts fetch the trainer from here at every boot.
            self.trainer_package = gcp.storage.BucketObject(
                f"{name}-trainer-package",
                bucket=self.bucket.name,
                name=scripts.TRAINER_OBJECT,
                source=pulumi.AssetArchive({"trainer": pulumi.FileArchive(str(scripts.TRAINER_SOURCE))}),
                opts=child,
            )
            node_dependencies.append(self.trainer_package)

        vm_names: list[str] = []
        ssh: dict[str, str] = {}
        if settings.cluster is not None:
            nodes = cluster_nodes(cfg)
            tf_cluster = tf_cluster_spec(cfg, nodes)
            self.cluster = GpuCluster(
                f"{name}-cluster",
                project,
                zone,
                settings.cluster,
                nodes,
                tf_cluster,
                scripts.cluster_metadata_key(cfg),
                {node.key: scripts.node_metadata(cfg, node, bucket_uri, with_cluster=bool(tf_cluster)) for node in nodes},
                scripts.render(scripts.CLUSTER_NODE, cfg),
                self.identity.email,
                self.network.subnetwork.id,
                labels,
                opts=node_opts,
            )
            vm_names += self.cluster.names
            ssh.update({n: ssh_command(n, zone, project) for n in self.cluster.names})
        if settings.tpu is not None:
            self.tpu_agent = TpuServiceAgent(f"{name}-tpu-agent", project, settings.tpu.service_agent_role, opts=after_apis)
            tpu_dependencies = [*node_dependencies, self.tpu_agent.binding]
            if settings.tpu.on_finish != "keep":
                # TPU VMs have no per-node IAM: stopping or deleting itself needs the project role.
                tpu_dependencies.append(
                    gcp.projects.IAMMember(f"{name}-identity-tpu-admin", project=project, role=TPU_SELF_STOP_ROLE, member=self.identity.member, opts=child)
                )
            self.tpu = TpuVm(
                f"{name}-tpu",
                project,
                zone,
                scripts.tpu_vm_name(cfg),
                settings.tpu,
                scripts.tpu_metadata(cfg, bucket_uri),
                scripts.render(scripts.TPU_VM, cfg),
                self.identity.email,
                self.network.network.id,
                self.network.subnetwork.id,
                labels,
                opts=pulumi.ResourceOptions(parent=self, depends_on=tpu_dependencies),
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
                self.identity.email,
                self.network.network.id,
                self.network.subnetwork.id,
                labels,
                opts=node_opts,
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
