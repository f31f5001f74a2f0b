"""A Cloud TPU VM running the trainer with TPUStrategy."""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from trainstack.components.identity import CLOUD_PLATFORM_SCOPE
from trainstack.config import Tpu


class TpuVm(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        project: str,
        zone: str,
        vm_name: str,
        tpu: Tpu,
        metadata: dict[str, str],
        startup_script: str,
        service_account_email: pulumi.Input[str],
        network: pulumi.Input[str],
        subnetwork: pulumi.Input[str],
        labels: dict[str, str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("trainstack:index:TpuVm", name, None, opts)
        self.vm = gcp.tpu.V2Vm(
            f"{name}-vm",
            project=project,
            name=vm_name,
            zone=zone,
            accelerator_type=tpu.accelerator_type,
            runtime_version=tpu.runtime_version,
            network_config=gcp.tpu.V2VmNetworkConfigArgs(network=network, subnetwork=subnetwork, enable_external_ips=False),
            service_account=gcp.tpu.V2VmServiceAccountArgs(
                email=service_account_email, scopes=[CLOUD_PLATFORM_SCOPE]
            ),
            scheduling_config=gcp.tpu.V2VmSchedulingConfigArgs(spot=tpu.spot),
            shielded_instance_config=gcp.tpu.V2VmShieldedInstanceConfigArgs(enable_secure_boot=True),
            metadata={"startup-script": startup_script, "enable-oslogin": "TRUE", "block-project-ssh-keys": "TRUE", **metadata},
            labels=labels,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.name = vm_name
        self.register_outputs({"name": vm_name, "state": self.vm.state})
