"""A Cloud TPU VM running the trainer with TPUStrategy, and the IAM only it needs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from trainstack.cloud.components import Placement, moved_here, waits_with
from trainstack.cloud.components.grants import Grantee
from trainstack.cloud.components.identity import (
    RELEASE_DESCRIPTION,
    TPU_RELEASE_PERMISSIONS,
    NodeActionRole,
    NodeActionRoleArgs,
    TpuServiceAgent,
    TpuServiceAgentArgs,
)
from trainstack.stackmodel.resolved import ResolvedTpu
from trainstack_contract import RESERVATION
from trainstack_contract.iam import CLOUD_PLATFORM_SCOPE


@dataclass(frozen=True)
class TpuVmArgs:
    # Its stack_name names the TPU's IAM resources as before (see aliases).
    place: Placement
    tpu: ResolvedTpu
    startup_script: str
    metadata: Mapping[str, pulumi.Input[str]]
    service_account_email: pulumi.Input[str]
    service_account_member: pulumi.Input[str]


class TpuVm(pulumi.ComponentResource):
    """The TPU VM, the Cloud TPU service agent's role, and the custom role the VM's own
    account uses to stop or delete it when the job ends."""

    name: str
    state: pulumi.Output[str]

    def __init__(self, name: str, args: TpuVmArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("trainstack:index:TpuVm", name, None, opts)
        stack = args.place.stack_name
        moved = moved_here(self, opts)
        agent = TpuServiceAgent(
            f"{stack}-tpu-agent", TpuServiceAgentArgs(args.place.project, args.tpu.service_agent_role), opts=moved
        )
        # TPU nodes have no per-node IAM: the TPU VM's own account holds this role on the
        # project, which is why no other machine of the stack runs as that account. It is
        # granted even with on_finish: keep, because the run-time cap stops the TPU too.
        release = NodeActionRole(
            f"{stack}-tpu-release",
            NodeActionRoleArgs(
                args.place.project,
                stack,
                "tpu_release",
                "TPU VM releases itself",
                TPU_RELEASE_PERMISSIONS,
                RELEASE_DESCRIPTION,
            ),
            opts=moved,
        )
        release_binding = Grantee(args.service_account_member, moved).on_project(
            f"{stack}-tpu-identity-release", args.place.project, release.role_name
        )
        tpu = args.tpu
        self.vm = gcp.tpu.V2Vm(
            f"{name}-vm",
            project=args.place.project,
            name=tpu.vm_name,
            zone=args.place.zone,
            accelerator_type=tpu.accelerator_type,
            runtime_version=tpu.runtime_version,
            network_config=gcp.tpu.V2VmNetworkConfigArgs(
                network=args.place.network, subnetwork=args.place.subnetwork, enable_external_ips=False
            ),
            service_account=gcp.tpu.V2VmServiceAccountArgs(
                email=args.service_account_email, scopes=[CLOUD_PLATFORM_SCOPE]
            ),
            # reserved: created under a reservation (any matching one: V2Vm cannot name it).
            scheduling_config=gcp.tpu.V2VmSchedulingConfigArgs(spot=tpu.spot)
            if tpu.capacity != RESERVATION
            else gcp.tpu.V2VmSchedulingConfigArgs(reserved=True),
            shielded_instance_config=gcp.tpu.V2VmShieldedInstanceConfigArgs(enable_secure_boot=True),
            metadata={
                "startup-script": args.startup_script,
                "enable-oslogin": "TRUE",
                "block-project-ssh-keys": "TRUE",
                **args.metadata,
            },
            labels=args.place.labels,
            # The VM boots into its job: the agent's role and its own release role come first.
            opts=pulumi.ResourceOptions.merge(
                waits_with(self, opts), pulumi.ResourceOptions(depends_on=[agent.binding, release_binding])
            ),
        )
        self.name = tpu.vm_name
        self.state = self.vm.state
        self.register_outputs({"name": self.name, "state": self.state})
