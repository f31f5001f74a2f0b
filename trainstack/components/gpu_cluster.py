"""The VMs of one training job: chief, workers and parameter servers, GPUs attached."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from trainstack.catalog import Image, load_catalog
from trainstack.components.identity import CLOUD_PLATFORM_SCOPE
from trainstack.config import Cluster
from trainstack.topology import Node

SECONDS_PER_HOUR = 3600


def scheduling_for(node: Node, cluster: Cluster) -> gcp.compute.InstanceSchedulingArgs:
    """Maintenance, spot and the run-time cap for one node."""
    # At the run-time cap (and on spot preemption) the VM stops, or is deleted when the stack
    # asks for on_finish: delete; either way it no longer bills for its CPUs and GPUs.
    termination = "DELETE" if cluster.on_finish == "delete" else "STOP"
    has_gpu = node.accelerator is not None
    max_run = gcp.compute.InstanceSchedulingMaxRunDurationArgs(seconds=int(cluster.max_run_hours * SECONDS_PER_HOUR))
    if node.spot:
        return gcp.compute.InstanceSchedulingArgs(
            provisioning_model="SPOT",
            preemptible=True,
            automatic_restart=False,
            on_host_maintenance="TERMINATE",
            instance_termination_action=termination,
            max_run_duration=max_run,
        )
    return gcp.compute.InstanceSchedulingArgs(
        provisioning_model="STANDARD",
        automatic_restart=True,
        # GPUs cannot live-migrate: a GPU VM must stop for host maintenance (seed 000), and
        # the trainer resumes from its backup when the VM restarts.
        on_host_maintenance="TERMINATE" if has_gpu else "MIGRATE",
        instance_termination_action=termination,
        max_run_duration=max_run,
    )


def _image_for(node: Node) -> Image:
    images = load_catalog().images
    return images["gpu"] if node.accelerator is not None else images["cpu"]


@dataclass(frozen=True)
class GpuClusterArgs:
    project: str
    zone: str
    cluster: Cluster
    nodes: list[Node]
    tf_cluster: dict[str, list[str]]
    cluster_metadata_key: str
    node_metadata: dict[str, dict[str, str]]
    startup_script: str
    service_account_email: pulumi.Input[str]
    subnetwork: pulumi.Input[str]
    labels: dict[str, str]
    # The custom role granted on each instance when on_finish is delete (see identity.py).
    release_role: pulumi.Input[str] | None = None


class GpuCluster(pulumi.ComponentResource):
    """Chief, workers and parameter servers of one job (CPU nodes included), GPUs attached."""

    def __init__(self, name: str, args: GpuClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("trainstack:index:GpuCluster", name, None, opts)
        catalog = load_catalog()
        project, zone, cluster, labels = args.project, args.zone, args.cluster, args.labels
        tf_cluster, service_account_email = args.tf_cluster, args.service_account_email
        # Every node needs every address: stored once as project metadata (the metadata
        # server serves it to each VM) rather than copied into each of N VMs, which would
        # grow as N squared. Single-machine strategies need no cluster at all.
        depends_on: list[pulumi.Resource] = []
        if tf_cluster:
            self.tf_cluster = gcp.compute.ProjectMetadataItem(
                f"{name}-tf-cluster",
                project=project,
                key=args.cluster_metadata_key,
                value=json.dumps(tf_cluster, separators=(",", ":")),
                opts=pulumi.ResourceOptions(parent=self),
            )
            depends_on.append(self.tf_cluster)
        self.instances: dict[str, gcp.compute.Instance] = {}
        for node in args.nodes:
            machine = catalog.machine_types[node.machine_type]
            # A2/A3/G2 machine types bring their GPUs; only N1 takes attached ones.
            attach = node.accelerator is not None and not machine.builtin_gpu
            self.instances[node.key] = gcp.compute.Instance(
                f"{name}-{node.key}",
                project=project,
                name=node.vm_name,
                zone=zone,
                machine_type=node.machine_type,
                guest_accelerators=(
                    [gcp.compute.InstanceGuestAcceleratorArgs(type=node.accelerator.type, count=node.accelerator.count)]
                    if attach and node.accelerator is not None
                    else []
                ),
                scheduling=scheduling_for(node, cluster),
                boot_disk=gcp.compute.InstanceBootDiskArgs(
                    auto_delete=True,
                    initialize_params=gcp.compute.InstanceBootDiskInitializeParamsArgs(
                        image=_image_for(node).uri, size=node.disk_gb, type=machine.boot_disk_type, labels=labels
                    ),
                ),
                # No access_configs: the node has no public IP; it reaches Google APIs through
                # Private Google Access and the internet through Cloud NAT.
                network_interfaces=[gcp.compute.InstanceNetworkInterfaceArgs(subnetwork=args.subnetwork, nic_type=machine.nic_type)],
                service_account=gcp.compute.InstanceServiceAccountArgs(
                    email=service_account_email, scopes=[CLOUD_PLATFORM_SCOPE]
                ),
                shielded_instance_config=gcp.compute.InstanceShieldedInstanceConfigArgs(
                    enable_secure_boot=True, enable_vtpm=True, enable_integrity_monitoring=True
                ),
                metadata={
                    "enable-oslogin": "TRUE",
                    "block-project-ssh-keys": "TRUE",
                    # Updated in place on change (metadata_startup_script would replace the VM).
                    "startup-script": args.startup_script,
                    **args.node_metadata[node.key],
                },
                labels={**labels, "trainstack-role": node.role},
                allow_stopping_for_update=True,
                opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on),
            )
            if args.release_role is not None:
                # On this instance alone. The nodes share one account, so each node may
                # get, stop or delete any node of this cluster, and nothing else.
                gcp.compute.InstanceIAMMember(
                    f"{name}-{node.key}-self-delete",
                    project=project,
                    zone=zone,
                    instance_name=self.instances[node.key].name,
                    role=args.release_role,
                    member=pulumi.Output.concat("serviceAccount:", service_account_email),
                    opts=pulumi.ResourceOptions(parent=self),
                )
        self.names = [node.vm_name for node in args.nodes]
        self.register_outputs({"names": self.names})
