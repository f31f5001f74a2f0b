"""The Google Cloud APIs a stack uses, enabled before anything that needs them."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

# Turning an API off on destroy would break anything else in the project that uses it.
REQUIRED_APIS = (
    "compute.googleapis.com",
    "iam.googleapis.com",
    "storage.googleapis.com",
    "artifactregistry.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
)
TPU_API = "tpu.googleapis.com"
WORKBENCH_API = "notebooks.googleapis.com"
BUDGET_API = "billingbudgets.googleapis.com"
SECRETS_API = "secretmanager.googleapis.com"


@dataclass(frozen=True)
class ProjectServicesArgs:
    project: str
    apis: tuple[str, ...]


class ProjectServices(pulumi.ComponentResource):
    """Enables the APIs; other components depend on ``self.ready``."""

    ready: list[pulumi.Resource]

    def __init__(self, name: str, args: ProjectServicesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("trainstack:index:ProjectServices", name, None, opts)
        self.services = [
            gcp.projects.Service(
                f"{name}-{api.split('.')[0]}",
                project=args.project,
                service=api,
                disable_on_destroy=False,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for api in args.apis
        ]
        self.ready = list(self.services)
        self.register_outputs({"apis": [s.service for s in self.services]})
