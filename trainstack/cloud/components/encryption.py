"""A customer-managed key (trainstack:encryption): the grants that let Google's service agents
use it for the stack's bucket, registry and disks, and what the key's admins must grant when
the stack may not."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from trainstack.catalog import service_agent_domains
from trainstack.cloud.components.grants import Grantee
from trainstack.stackmodel.resolved import ResolvedStack
from trainstack.stackmodel.schema import Encryption

# The one role a service agent needs on a key to encrypt and decrypt with it; nothing broader.
KEY_USER_ROLE = "roles/cloudkms.cryptoKeyEncrypterDecrypter"


@dataclass(frozen=True)
class KeyUser:
    """A Google service agent that encrypts the stack's data with its key: it is
    service-PROJECT_NUMBER@``domain`` (the catalog's service_agents.csv), in the project that
    owns the resources."""

    slug: str
    service: str
    uses: str

    @property
    def domain(self) -> str:
        return service_agent_domains()[self.service]


STORAGE_AGENT = KeyUser("storage", "storage.googleapis.com", "Cloud Storage: the bucket's objects")
COMPUTE_AGENT = KeyUser("compute", "compute.googleapis.com", "Compute Engine: the VMs' and the notebook's disks")
REGISTRY_AGENT = KeyUser("registry", "artifactregistry.googleapis.com", "Artifact Registry: the repository's images")
NOTEBOOKS_AGENT = KeyUser("notebooks", "notebooks.googleapis.com", "Vertex AI Workbench: the notebook's disks")
SERVICE_AGENTS = (STORAGE_AGENT, COMPUTE_AGENT, REGISTRY_AGENT, NOTEBOOKS_AGENT)


def key_users(stack: ResolvedStack) -> list[KeyUser]:
    """The service agents that use the stack's key: Cloud Storage's and Artifact Registry's for
    the bucket and the registry every stack has; Compute Engine's for the cluster's and the
    notebook's disks; Notebooks' for the notebook. Not the TPU VM's: its disk keeps Google's key
    (:data:`TPU_DISK_NOTE`)."""
    users = [STORAGE_AGENT, REGISTRY_AGENT]
    users += [COMPUTE_AGENT] if stack.cluster is not None or stack.notebook is not None else []
    users += [NOTEBOOKS_AGENT] if stack.notebook is not None else []
    return users


# The TPU API takes a boot disk key (Node.bootDiskConfig.customerEncryptionKey), but
# pulumi-gcp 10.2's tpu.V2Vm has no argument for it.
TPU_DISK_NOTE = (
    "the TPU VM's boot disk keeps Google's key (pulumi-gcp's tpu.V2Vm takes no disk key); the job's data, "
    "checkpoints and models are in the bucket, under the key"
)


@dataclass(frozen=True)
class KeyGrantsArgs:
    project: str
    encryption: Encryption
    users: tuple[KeyUser, ...]


class KeyGrants(pulumi.ComponentResource):
    """The key's Encrypter/Decrypter role, on that key alone, for each service agent that uses it.
    ``ready`` is what the bucket, the registry and the machines wait for: Google refuses to create
    a resource with a key its service agent may not use."""

    ready: list[pulumi.Resource]

    def __init__(self, name: str, args: KeyGrantsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("trainstack:index:KeyGrants", name, None, opts)
        self.ready = []
        if args.encryption.grants != "stack":
            self.register_outputs({})
            return
        number = gcp.organizations.get_project_output(
            project_id=args.project, opts=pulumi.InvokeOutputOptions(parent=self)
        ).number
        for user in args.users:
            member, exists = self._agent(name, args.project, user, number)
            grant_opts = pulumi.ResourceOptions(parent=self, depends_on=exists)
            self.ready.append(
                Grantee(member, grant_opts).on_crypto_key(f"{name}-{user.slug}", args.encryption.kms_key, KEY_USER_ROLE)
            )
        self.register_outputs({"kms_key": args.encryption.kms_key, "role": KEY_USER_ROLE})

    def _agent(
        self, name: str, project: str, user: KeyUser, number: pulumi.Output[str]
    ) -> tuple[pulumi.Input[str], list[pulumi.Resource]]:
        """The agent's member, and what makes sure the agent exists before the grant names it."""
        child = pulumi.ResourceOptions(parent=self)
        if user is STORAGE_AGENT:
            # Cloud Storage creates its agent when asked for it (getProjectServiceAccount).
            found = gcp.storage.get_project_service_account_output(
                project=project, opts=pulumi.InvokeOutputOptions(parent=self)
            )
            return found.member, []
        if user is COMPUTE_AGENT:
            # Compute Engine's agent exists once its API is enabled, which the stack waits for.
            return pulumi.Output.concat("serviceAccount:service-", number, "@", user.domain), []
        identity = gcp.projects.ServiceIdentity(
            f"{name}-{user.slug}-agent", project=project, service=user.service, opts=child
        )
        return identity.member, [identity]


def key_admin_grants(stack: ResolvedStack) -> list[str]:
    """With ``grants: key_admins``, the service agents the key's admins must grant
    :data:`KEY_USER_ROLE` on the key to, in words."""
    encryption = stack.encryption
    if encryption is None or encryption.grants != "key_admins":
        return []
    return [f"service-PROJECT_NUMBER@{user.domain} ({user.uses})" for user in key_users(stack)]
