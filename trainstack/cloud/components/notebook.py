"""A Vertex AI Workbench instance (formerly AI Platform Notebooks) with GPUs."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from trainstack.catalog import workbench_enum
from trainstack.cloud.components import Placement, moved_here, waits_with
from trainstack.jobcode.artifacts import NAME_DIGEST_CHARS
from trainstack.stackmodel.resolved import ResolvedNotebook
from trainstack_contract import LAYOUT, METADATA_KEYS

SECONDS_PER_MINUTE = 60


@dataclass(frozen=True)
class WorkbenchNotebookArgs:
    # Its stack_name names the script object as before (see aliases).
    place: Placement
    notebook: ResolvedNotebook
    post_startup_script: str
    # The instance's own startup script: fetches the post-startup script and checks its sha256.
    startup_script: str
    # The stack's bucket, which holds the post-startup script.
    bucket_name: pulumi.Input[str]
    service_account_email: pulumi.Input[str]
    # The boot and data disks' key (trainstack:encryption); None: Google's.
    disk_key: str | None = None


class WorkbenchNotebook(pulumi.ComponentResource):
    """The Workbench instance and the post-startup script it runs, kept in the stack's bucket and
    checked against the sha256 in the instance's metadata before it runs."""

    name: str
    proxy_uri: pulumi.Output[str]

    def __init__(self, name: str, args: WorkbenchNotebookArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("trainstack:index:WorkbenchNotebook", name, None, opts)
        notebook = args.notebook
        moved = moved_here(self, opts)
        # Workbench's own post-startup-script key is not set: Workbench would run whatever the
        # object holds when it fetches it. The instance's startup-script, in metadata only `pulumi
        # up` writes, fetches the object, checks it against the sha256 pinned beside it and runs
        # it; a script that does not match never runs and the notebook stops.
        script_sha256 = hashlib.sha256(args.post_startup_script.encode()).hexdigest()
        script = gcp.storage.BucketObject(
            f"{args.place.stack_name}-notebook-post-startup",
            bucket=args.bucket_name,
            name=LAYOUT.notebook_script(script_sha256[:NAME_DIGEST_CHARS]),
            content=args.post_startup_script,
            opts=moved,
        )
        accelerators = []
        if notebook.accelerator is not None and notebook.workbench_accelerator_type is not None:
            # Workbench takes counts and sizes as strings and GPU names as enums.
            accelerators.append(
                gcp.workbench.InstanceGceSetupAcceleratorConfigArgs(
                    type=notebook.workbench_accelerator_type, core_count=str(notebook.accelerator.count)
                )
            )
        self.instance = gcp.workbench.Instance(
            f"{name}-instance",
            project=args.place.project,
            name=notebook.instance_name,
            location=args.place.zone,
            gce_setup=gcp.workbench.InstanceGceSetupArgs(
                machine_type=notebook.machine_type,
                accelerator_configs=accelerators,
                vm_image=gcp.workbench.InstanceGceSetupVmImageArgs(
                    project=notebook.image.project, family=notebook.image.family
                ),
                boot_disk=gcp.workbench.InstanceGceSetupBootDiskArgs(
                    disk_size_gb=str(notebook.disk_gb),
                    disk_type=workbench_enum(notebook.boot_disk_type),
                    **disk_encryption(args.disk_key),
                ),
                # A Workbench instance has a data disk too (/home/jupyter); it takes the key as well.
                data_disks=gcp.workbench.InstanceGceSetupDataDisksArgs(**disk_encryption(args.disk_key))
                if args.disk_key
                else None,
                disable_public_ip=True,
                network_interfaces=[
                    gcp.workbench.InstanceGceSetupNetworkInterfaceArgs(
                        network=args.place.network, subnet=args.place.subnetwork
                    )
                ],
                service_accounts=[gcp.workbench.InstanceGceSetupServiceAccountArgs(email=args.service_account_email)],
                shielded_instance_config=gcp.workbench.InstanceGceSetupShieldedInstanceConfigArgs(
                    enable_secure_boot=True, enable_vtpm=True, enable_integrity_monitoring=True
                ),
                metadata={
                    # A running notebook bills for its CPUs and GPUs; idle shutdown stops it
                    # (https://cloud.google.com/vertex-ai/docs/workbench/instances/idle-shutdown).
                    "idle-timeout-seconds": str(notebook.idle_timeout_minutes * SECONDS_PER_MINUTE),
                    "startup-script": args.startup_script,
                    METADATA_KEYS.notebook_script: pulumi.Output.concat("gs://", script.bucket, "/", script.name),
                    METADATA_KEYS.notebook_script_sha256: script_sha256,
                    # OS Login and no project-wide SSH keys, as on every other machine of the stack.
                    "enable-oslogin": "TRUE",
                    "block-project-ssh-keys": "TRUE",
                    # No install-nvidia-driver key: Workbench protects it and overwrites what is
                    # set there. The post-startup script installs a GPU notebook's driver.
                    # No post-startup-script key either (see above).
                },
            ),
            labels=args.place.labels,
            opts=waits_with(self, opts),
        )
        self.name = notebook.instance_name
        self.proxy_uri = self.instance.proxy_uri
        self.register_outputs({"name": self.name, "proxy_uri": self.proxy_uri})


def disk_encryption(key: str | None) -> dict[str, str]:
    """Workbench's disk arguments for ``key``: CMEK with it, or nothing (Google's key)."""
    return {"disk_encryption": "CMEK", "kms_key": key} if key else {}
