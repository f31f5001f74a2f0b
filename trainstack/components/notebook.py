"""A Vertex AI Workbench instance (the seeds' AI Platform Notebook) with GPUs."""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from trainstack.catalog import load_catalog
from trainstack.config import Notebook

SECONDS_PER_MINUTE = 60


class WorkbenchNotebook(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        project: str,
        zone: str,
        instance_name: str,
        notebook: Notebook,
        post_startup_script_url: pulumi.Input[str],
        service_account_email: pulumi.Input[str],
        network: pulumi.Input[str],
        subnetwork: pulumi.Input[str],
        labels: dict[str, str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("trainstack:index:WorkbenchNotebook", name, None, opts)
        catalog = load_catalog()
        image = catalog.images["workbench"]
        accelerators = []
        if notebook.accelerator is not None:
            gpu = catalog.gpus[notebook.accelerator.type]
            # Workbench takes counts and sizes as strings and GPU names as enums.
            accelerators.append(
                gcp.workbench.InstanceGceSetupAcceleratorConfigArgs(type=gpu.workbench_type, core_count=str(notebook.accelerator.count))
            )
        self.instance = gcp.workbench.Instance(
            f"{name}-instance",
            project=project,
            name=instance_name,
            location=zone,
            gce_setup=gcp.workbench.InstanceGceSetupArgs(
                machine_type=notebook.machine_type,
                accelerator_configs=accelerators,
                vm_image=gcp.workbench.InstanceGceSetupVmImageArgs(project=image.project, family=image.family),
                boot_disk=gcp.workbench.InstanceGceSetupBootDiskArgs(disk_size_gb=str(notebook.disk_gb), disk_type="PD_BALANCED"),
                disable_public_ip=True,
                network_interfaces=[gcp.workbench.InstanceGceSetupNetworkInterfaceArgs(network=network, subnet=subnetwork)],
                service_accounts=[gcp.workbench.InstanceGceSetupServiceAccountArgs(email=service_account_email)],
                shielded_instance_config=gcp.workbench.InstanceGceSetupShieldedInstanceConfigArgs(
                    enable_secure_boot=True, enable_vtpm=True, enable_integrity_monitoring=True
                ),
                metadata={
                    # Seed 002: a notebook bills by the hour until stopped; idle shutdown stops it.
                    "idle-timeout-seconds": str(notebook.idle_timeout_minutes * SECONDS_PER_MINUTE),
                    "post-startup-script": post_startup_script_url,
                    # OS Login and no project-wide SSH keys, as on every other machine of the stack.
                    "enable-oslogin": "TRUE",
                    "block-project-ssh-keys": "TRUE",
                    # The Workbench API installs the GPU driver when gceSetup.gpuDriverConfig.
                    # enableGpuDriver is true (gcloud: --install-gpu-driver); pulumi-gcp 10.2 has
                    # no field for it. This metadata key is one the service itself manages on
                    # Workbench instances (the provider ignores its diffs); that setting it
                    # installs the driver is unverified. See the README.
                    "install-nvidia-driver": "True",
                },
            ),
            labels=labels,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.name = instance_name
        self.proxy_uri = self.instance.proxy_uri
        self.register_outputs({"name": instance_name, "proxy_uri": self.proxy_uri})
