"""trainstack's CrossGuard policies, importable without starting a policy pack.

``POLICIES`` is what the pack's ``__main__.py`` hands to ``PolicyPack`` and what
`trainstack check` evaluates offline (``trainstack_policies.offline``): the same objects, the
same validate functions. Each policy cites the CIS Google Cloud Platform Foundation Benchmark
control it enforces, where there is one; the others are trainstack's own cost and
reliability rules.
"""

from __future__ import annotations

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyComplianceFramework,
    PolicyConfigSchema,
    ResourceValidationPolicy,
    StackValidationPolicy,
)

from trainstack_policies import rules

PACK_NAME = "trainstack"
CIS = "CIS Google Cloud Platform Foundation Benchmark"
CIS_VERSION = "4.0.0"
MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY
DISABLED = EnforcementLevel.DISABLED


def _cis(*controls: str) -> PolicyComplianceFramework:
    return PolicyComplianceFramework(name=CIS, version=CIS_VERSION, reference=", ".join(controls))


def _landing_zone(*constraints: str) -> PolicyComplianceFramework:
    return PolicyComplianceFramework(name="organisation policy", reference=", ".join(constraints))


def _own() -> PolicyComplianceFramework:
    return PolicyComplianceFramework(name="trainstack", reference="cost and reliability")


POLICIES: tuple[Policy, ...] = (
    ResourceValidationPolicy(
        name="no-public-ip",
        description="No VM, TPU VM or notebook has a public IP address.",
        validate=rules.no_public_ip,
        enforcement_level=MANDATORY,
        framework=_cis("4.9"),
    ),
    ResourceValidationPolicy(
        name="no-default-service-account",
        description="Every VM, TPU VM and notebook runs as a dedicated service account, not Compute Engine's default.",
        validate=rules.no_default_service_account,
        enforcement_level=MANDATORY,
        framework=_cis("4.1", "4.2"),
    ),
    StackValidationPolicy(
        name="broad-scope-least-privilege",
        description="An account used with the cloud-platform scope is created by the stack and holds no "
        "primitive, admin or account-impersonation role.",
        validate=rules.broad_scope_least_privilege,
        enforcement_level=MANDATORY,
        framework=_cis("4.2", "1.5", "1.6"),
    ),
    StackValidationPolicy(
        name="custom-role-escalation",
        description="No custom role bound on the project carries a permission to act as other accounts, mint "
        "their tokens or keys, or rewrite IAM.",
        validate=rules.custom_role_escalation,
        enforcement_level=MANDATORY,
        framework=_cis("1.5", "1.6"),
    ),
    ResourceValidationPolicy(
        name="no-primitive-roles",
        description="No IAM binding grants roles/owner, roles/editor or roles/viewer.",
        validate=rules.no_primitive_roles,
        enforcement_level=MANDATORY,
        framework=_cis("1.5"),
    ),
    ResourceValidationPolicy(
        name="no-public-members",
        description="No IAM binding grants anything to allUsers or allAuthenticatedUsers.",
        validate=rules.no_public_members,
        enforcement_level=MANDATORY,
        framework=_cis("5.1"),
    ),
    ResourceValidationPolicy(
        name="shielded-vm",
        description="VMs and notebooks boot as Shielded VMs: secure boot, vTPM and integrity monitoring.",
        validate=rules.shielded_vm,
        enforcement_level=MANDATORY,
        framework=_cis("4.8"),
    ),
    ResourceValidationPolicy(
        name="os-login",
        description="VMs, TPU VMs and notebooks use OS Login, block project-wide SSH keys and keep the serial "
        "console closed.",
        validate=rules.os_login,
        enforcement_level=MANDATORY,
        framework=_cis("4.3", "4.4", "4.5"),
    ),
    ResourceValidationPolicy(
        name="no-ip-forwarding",
        description="VMs do not forward IP packets.",
        validate=rules.no_ip_forwarding,
        enforcement_level=MANDATORY,
        framework=_cis("4.6"),
    ),
    ResourceValidationPolicy(
        name="bucket-access",
        description="Buckets have uniform bucket-level access and enforced public access prevention.",
        validate=rules.bucket_access,
        enforcement_level=MANDATORY,
        framework=_cis("5.1", "5.2"),
    ),
    ResourceValidationPolicy(
        name="executed-objects-spared",
        description="No bucket grant that writes objects can reach trainstack/, what machines run: its condition "
        "excludes it by name, unless it is one of a named principal's grants to queue jobs (create-only under "
        "trainstack/code/ and trainstack/queue/specs/, or trainstack/queue/index.json alone).",
        validate=rules.executed_objects_spared,
        enforcement_level=MANDATORY,
        framework=_own(),
    ),
    ResourceValidationPolicy(
        name="queue-directories-writable",
        description="A bucket grant that writes in the jobs area covers all of jobs/, never one job's folder: the "
        "queue's jobs and tuning trials live in jobs/q<ID>_<NAME>/; each job's code gets a token for its own alone.",
        validate=rules.queue_directories_writable,
        enforcement_level=MANDATORY,
        framework=_own(),
    ),
    StackValidationPolicy(
        name="queue-writers-are-teammates",
        description="A grant to queue jobs goes to a teammate, never to an account the stack's machines run as.",
        validate=rules.queue_writers_are_teammates,
        enforcement_level=MANDATORY,
        framework=_own(),
    ),
    ResourceValidationPolicy(
        name="gpu-terminates-on-maintenance",
        description="GPU VMs are set to terminate on host maintenance (they cannot live-migrate).",
        validate=rules.gpu_terminates_on_maintenance,
        enforcement_level=MANDATORY,
        framework=_own(),
    ),
    ResourceValidationPolicy(
        name="spot-no-automatic-restart",
        description="Spot VMs do not restart automatically.",
        validate=rules.spot_no_automatic_restart,
        enforcement_level=MANDATORY,
        framework=_own(),
    ),
    ResourceValidationPolicy(
        name="run-time-bound",
        description="Every VM has a max run duration, every TPU VM trainstack's run-time cap, every notebook an "
        "idle timeout.",
        validate=rules.run_time_bound,
        enforcement_level=MANDATORY,
        framework=_own(),
    ),
    ResourceValidationPolicy(
        name="cost-labels",
        description="Every VM (and its boot disk), TPU VM and notebook carries the cost labels.",
        validate=rules.cost_labels,
        enforcement_level=MANDATORY,
        config_schema=PolicyConfigSchema(
            properties={
                "required_labels": {
                    "type": "array",
                    "items": {"type": "string"},
                    "default": list(rules.DEFAULT_REQUIRED_LABELS),
                }
            }
        ),
        framework=_own(),
    ),
    ResourceValidationPolicy(
        name="firewall-ingress",
        description="No firewall rule admits 0.0.0.0/0; SSH only from IAP's range 35.235.240.0/20.",
        validate=rules.firewall_ingress,
        enforcement_level=MANDATORY,
        framework=_cis("3.6", "3.7"),
    ),
    ResourceValidationPolicy(
        name="bucket-versioning",
        description="Buckets keep noncurrent versions, so an overwritten checkpoint or model can be recovered.",
        validate=rules.bucket_versioning,
        enforcement_level=ADVISORY,
        framework=_own(),
    ),
    ResourceValidationPolicy(
        name="notebook-idle-timeout",
        description="Notebooks stop after at most 4 hours idle.",
        validate=rules.notebook_idle_timeout,
        enforcement_level=ADVISORY,
        config_schema=PolicyConfigSchema(
            properties={"max_idle_hours": {"type": "number", "default": rules.DEFAULT_MAX_NOTEBOOK_IDLE_HOURS}}
        ),
        framework=_own(),
    ),
    # The landing zone's rules: off unless an organisation's policy config turns them on.
    ResourceValidationPolicy(
        name="customer-managed-keys",
        description="The bucket, the registry and every disk are encrypted with a customer-managed key (from the "
        "listed projects, where key_projects lists any); a TPU VM, whose disk cannot take one, fails.",
        validate=rules.customer_managed_keys,
        enforcement_level=DISABLED,
        config_schema=PolicyConfigSchema(
            properties={"key_projects": {"type": "array", "items": {"type": "string"}, "default": []}}
        ),
        framework=_landing_zone("gcp.restrictNonCmekServices", "gcp.restrictCmekCryptoKeyProjects"),
    ),
    ResourceValidationPolicy(
        name="shared-network-only",
        description="The stack creates no network, subnetwork, router or Cloud NAT, and every machine is on an "
        "existing subnetwork (one of the listed subnetworks, where subnetworks lists any).",
        validate=rules.shared_network_only,
        enforcement_level=DISABLED,
        config_schema=PolicyConfigSchema(
            properties={"subnetworks": {"type": "array", "items": {"type": "string"}, "default": []}}
        ),
        framework=_landing_zone("compute.restrictSharedVpcSubnetworks"),
    ),
)
