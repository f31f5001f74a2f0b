"""The VMs of one training job: chief, workers and parameter servers, with or without GPUs."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

import trainstack_contract as contract
from trainstack.cloud.components import Placement, waits_with
from trainstack.cloud.components.grants import Grantee, Zone
from trainstack.cloud.components.identity import (
    INSTANCE_RECOVER_PERMISSIONS,
    INSTANCE_RELEASE_PERMISSIONS,
    RELEASE_DESCRIPTION,
    NodeActionRole,
    NodeActionRoleArgs,
)
from trainstack.stackmodel.resolved import ClusterNode, FlexStart, ResolvedCluster
from trainstack_contract.iam import CLOUD_PLATFORM_SCOPE

# A specifically targeted reservation is named by this label key
# (https://cloud.google.com/compute/docs/reference/rest/v1/ReservationAffinity).
RESERVATION_NAME_KEY = "compute.googleapis.com/reservation-name"


def reservation_affinity_for(node: ClusterNode) -> gcp.compute.InstanceReservationAffinityArgs | None:
    """The reservation a reservation node consumes: the one it names, else any that matches;
    none for a flex-start node; None for every other node (their arguments stay as they were before capacity existed)."""
    if node.flex_start is not None:
        # A flex-start VM's capacity is the Dynamic Workload Scheduler's, never a reservation's.
        return gcp.compute.InstanceReservationAffinityArgs(type=node.flex_start.reservation_affinity)
    if node.capacity != contract.RESERVATION:
        return None
    if node.reservation is None:
        return gcp.compute.InstanceReservationAffinityArgs(type="ANY_RESERVATION")
    return gcp.compute.InstanceReservationAffinityArgs(
        type="SPECIFIC_RESERVATION",
        specific_reservation=gcp.compute.InstanceReservationAffinitySpecificReservationArgs(
            key=RESERVATION_NAME_KEY, values=[node.reservation]
        ),
    )


def flex_start_scheduling(flex: FlexStart, cluster: ResolvedCluster) -> gcp.compute.InstanceSchedulingArgs:
    """A Dynamic Workload Scheduler flex-start VM: FLEX_START, restarted by nothing, stopped or
    deleted (as on_finish says) at the end of its run duration (validate checked the duration)."""
    seconds = cluster.max_run_seconds
    assert seconds is not None, "validate refuses flex-start without max_run_hours"
    return gcp.compute.InstanceSchedulingArgs(
        provisioning_model="FLEX_START",
        automatic_restart=flex.automatic_restart,
        on_host_maintenance="TERMINATE",
        instance_termination_action=flex.termination_action,
        max_run_duration=gcp.compute.InstanceSchedulingMaxRunDurationArgs(seconds=seconds),
    )


def scheduling_for(node: ClusterNode, cluster: ResolvedCluster) -> gcp.compute.InstanceSchedulingArgs:
    """Maintenance, the provisioning model (node.capacity) and the run-time cap for one node."""
    if node.flex_start is not None:
        return flex_start_scheduling(node.flex_start, cluster)
    # At the run-time cap the VM stops, or is deleted when the stack asks for on_finish:
    # delete; either way it no longer bills for its CPUs and GPUs.
    termination = "DELETE" if cluster.on_finish == "delete" else "STOP"
    seconds = cluster.max_run_seconds
    max_run = None if seconds is None else gcp.compute.InstanceSchedulingMaxRunDurationArgs(seconds=seconds)
    if node.reservation_bound:
        # A future reservation's VM: bound to the reservation's lifetime, and stopped or deleted
        # by its termination action at the reservation's end (about-reservation-bound-vms).
        return gcp.compute.InstanceSchedulingArgs(
            provisioning_model="RESERVATION_BOUND",
            automatic_restart=True,
            on_host_maintenance="TERMINATE",
            instance_termination_action=termination,
            max_run_duration=max_run,
        )
    if node.spot:
        return gcp.compute.InstanceSchedulingArgs(
            provisioning_model="SPOT",
            preemptible=True,
            automatic_restart=False,
            on_host_maintenance="TERMINATE",
            # A preempted Spot VM stops, whatever on_finish says: it keeps its name, disk and
            # place in TF_CONFIG and can be started again (`trainstack start`, or the next
            # `pulumi up`), resuming from its backup. Compute Engine applies the same action at
            # the run-time cap, so there a Spot node stops rather than is deleted (its disk
            # bills until `pulumi destroy`). The end-of-job delete is the boot script's.
            instance_termination_action="STOP",
            max_run_duration=max_run,
        )
    # On demand, or from an ordinary reservation: a standard VM with a reservation affinity.
    return gcp.compute.InstanceSchedulingArgs(
        provisioning_model="STANDARD",
        automatic_restart=True,
        # "VMs with attached GPUs can't be live migrated"
        # (https://cloud.google.com/compute/docs/gpus/gpu-host-maintenance): a GPU VM stops
        # for host maintenance, and the trainer resumes from its backup when it restarts.
        on_host_maintenance="TERMINATE" if node.accelerator is not None else "MIGRATE",
        # The termination action is what happens at the cap; a standard VM without one has
        # nothing for it to act on (an acknowledged, uncapped cluster).
        instance_termination_action=termination if max_run is not None else None,
        max_run_duration=max_run,
    )


@dataclass(frozen=True)
class TrainingClusterArgs:
    place: Placement
    cluster: ResolvedCluster
    startup_script: str
    # Instance metadata by node name (see trainstack.cloud.bootscripts.cluster_node_metadata).
    node_metadata: Mapping[str, Mapping[str, pulumi.Input[str]]]
    service_account_email: pulumi.Input[str]
    # The boot disks' key (trainstack:encryption); None: Google's.
    disk_key: str | None = None


class TrainingCluster(pulumi.ComponentResource):
    """Chief, workers and parameter servers of one job; GPUs attached where the stack asks.

    Owns what only the cluster needs: the TF_CONFIG cluster in project metadata; with
    on_finish: delete, the custom role each node uses to delete itself, granted per node;
    and, when a node other than the chief is Spot, the custom role the chief uses to start
    such a node again after a preemption, granted on each of those nodes alone."""

    instances: dict[str, gcp.compute.Instance]
    names: list[str]
    # VM names of the Spot nodes other than the chief: the ones the chief may start again.
    recoverable_names: list[str]

    def __init__(self, name: str, args: TrainingClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("trainstack:index:TrainingCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cluster = args.cluster
        # Every node needs every address: stored once as project metadata (the metadata
        # server serves it to each VM) rather than copied into each of N VMs, which would
        # grow as N squared. Single-machine strategies need no cluster at all.
        depends_on: list[pulumi.Resource] = []
        if cluster.tf_cluster:
            self.tf_cluster = gcp.compute.ProjectMetadataItem(
                f"{name}-tf-cluster",
                project=args.place.project,
                key=cluster.tf_cluster_metadata_key,
                value=json.dumps(cluster.tf_cluster, separators=(",", ":")),
                opts=child,
            )
            depends_on.append(self.tf_cluster)
        release_role: pulumi.Output[str] | None = None
        if cluster.on_finish == "delete":
            release_role = NodeActionRole(
                f"{name}-node-release",
                NodeActionRoleArgs(
                    args.place.project,
                    args.place.stack_name,
                    "node_release",
                    "cluster node releases itself",
                    INSTANCE_RELEASE_PERMISSIONS,
                    RELEASE_DESCRIPTION,
                ),
                opts=child,
            ).role_name
        # The chief watches its Spot peers and starts a preempted one again. Not itself: a
        # preempted chief ends the job. Not an on-demand node: it restarts by itself.
        recoverable = {node.name for node in cluster.recoverable_nodes}
        self.recoverable_names = [node.vm_name for node in cluster.recoverable_nodes]
        recover_role: pulumi.Output[str] | None = None
        if recoverable:
            recover_role = NodeActionRole(
                f"{name}-node-recover",
                NodeActionRoleArgs(
                    args.place.project,
                    args.place.stack_name,
                    "node_recover",
                    "cluster chief starts its preempted Spot peers",
                    INSTANCE_RECOVER_PERMISSIONS,
                    "trainstack: the cluster's chief starts a preempted Spot node of its job again",
                ),
                opts=child,
            ).role_name
        self.instances = {}
        nodes = Grantee(pulumi.Output.concat("serviceAccount:", args.service_account_email), child)
        where = Zone(args.place.project, args.place.zone)
        for node in cluster.nodes:
            waits = pulumi.ResourceOptions.merge(waits_with(self, opts), pulumi.ResourceOptions(depends_on=depends_on))
            instance = node_instance(f"{name}-{node.name}", node, args, waits)
            self.instances[node.name] = instance
            # Each grant is on this instance alone. The nodes share one account, so a grant
            # is what any node holds: the release role lets a node get, stop or delete any
            # node of this cluster; the recover role reaches only the Spot peers (never the
            # chief, an on-demand node, or anything outside this cluster).
            grants = {"self-delete": release_role}
            if node.name in recoverable:
                grants["recover"] = recover_role
            for purpose, role in grants.items():
                if role is not None:
                    nodes.on_instance(f"{name}-{node.name}-{purpose}", where, instance.name, role)
        self.names = [node.vm_name for node in cluster.nodes]
        self.register_outputs({"names": self.names, "recoverable_names": self.recoverable_names})


# What `pulumi up` leaves as it was created: the provider cannot change a boot disk's labels
# (initialize_params.labels is ForceNew in the Google provider), so a label added to the stack
# would replace every VM, ending its job. The VM's own labels change in place; its disk keeps
# the labels it was created with.
INSTANCE_IGNORED_CHANGES = ("bootDisk.initializeParams.labels",)


def node_instance(
    resource_name: str, node: ClusterNode, args: TrainingClusterArgs, opts: pulumi.ResourceOptions
) -> gcp.compute.Instance:
    """One node's VM: no public IP, shielded boot, OS Login, the boot script and its metadata."""
    accelerators = []
    if node.attach_accelerator and node.accelerator is not None:
        accelerators.append(
            gcp.compute.InstanceGuestAcceleratorArgs(type=node.accelerator.type, count=node.accelerator.count)
        )
    return gcp.compute.Instance(
        resource_name,
        project=args.place.project,
        name=node.vm_name,
        zone=args.place.zone,
        machine_type=node.machine_type,
        guest_accelerators=accelerators,
        scheduling=scheduling_for(node, args.cluster),
        reservation_affinity=reservation_affinity_for(node),
        boot_disk=gcp.compute.InstanceBootDiskArgs(
            auto_delete=True,
            kms_key_self_link=args.disk_key,
            initialize_params=gcp.compute.InstanceBootDiskInitializeParamsArgs(
                image=node.image.uri, size=node.disk_gb, type=node.boot_disk_type, labels=args.place.labels
            ),
        ),
        # No access_configs: the node has no public IP; it reaches Google APIs through
        # Private Google Access and the internet through Cloud NAT.
        network_interfaces=[
            gcp.compute.InstanceNetworkInterfaceArgs(subnetwork=args.place.subnetwork, nic_type=node.nic_type)
        ],
        service_account=gcp.compute.InstanceServiceAccountArgs(
            email=args.service_account_email, scopes=[CLOUD_PLATFORM_SCOPE]
        ),
        shielded_instance_config=gcp.compute.InstanceShieldedInstanceConfigArgs(
            enable_secure_boot=True, enable_vtpm=True, enable_integrity_monitoring=True
        ),
        metadata={
            "enable-oslogin": "TRUE",
            "block-project-ssh-keys": "TRUE",
            # Updated in place on change (metadata_startup_script would replace the VM).
            "startup-script": args.startup_script,
            **args.node_metadata[node.name],
        },
        labels={**args.place.labels, "trainstack-role": node.role},
        allow_stopping_for_update=True,
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(ignore_changes=list(INSTANCE_IGNORED_CHANGES))),
    )
