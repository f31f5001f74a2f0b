"""The rules: one validate function per concern, each reporting every offending value.

A validate function takes CrossGuard's ``ResourceValidationArgs`` (``resource_type``,
``props``, ``name``, ``get_config()``) and a ``report(message, urn)`` callback, and is the
same function whether `pulumi preview --policy-pack policies` or `trainstack check` calls it.
Messages name the input at fault and what it must be, so the fix is in the message.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from pulumi_policy.proxy import UnknownValueError

from trainstack_policies.contract import (
    EXECUTED_PREFIX,
    MAX_RUN_SECONDS_KEY,
    MEMBER_KINDS,
    PRIMITIVE_ROLES,
    STACK_LABEL,
    STORAGE_WRITE_ROLES,
    is_submit_grant,
    narrower_than_jobs_area,
    spares_executed,
)
from trainstack_policies.resources import (
    ACCOUNT,
    BUCKET,
    BUCKET_GRANTS,
    CUSTOM_ROLE,
    FIREWALL,
    MACHINES,
    NOTEBOOK,
    OWN_NETWORK,
    PROJECT_IAM_PREFIX,
    REPOSITORY,
    TPU_VM,
    VM,
    accounts,
    has_broad_scope,
    is_default_account,
    is_true,
    mapping,
    metadata,
    sequence,
)

Report = Callable[[str, Any], None]

# Identity-Aware Proxy's TCP forwarding range: the only source SSH may come from.
# https://cloud.google.com/iap/docs/using-tcp-forwarding (checked 2026-11)
IAP_RANGE = ipaddress.ip_network("35.235.240.0/20")
ANYWHERE = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))
PUBLIC_MEMBERS = frozenset({"allUsers", "allAuthenticatedUsers"})
# Machine families whose GPUs come with the machine type (no guestAccelerators input):
# A2 (A100), A3 (H100/H200), A4 (B200), G2 (L4). Compute Engine GPU machine types, 2026-11.
GPU_MACHINE_FAMILIES = ("a2-", "a3-", "a4-", "g2-")
# Roles that let an account act beyond training: administer a service, act as or mint
# tokens for other accounts. CIS Google Cloud 1.5 and 1.6 name these.
ACCOUNT_ESCALATION_ROLES = frozenset(
    {
        "roles/iam.serviceAccountUser",
        "roles/iam.serviceAccountTokenCreator",
        "roles/iam.serviceAccountKeyAdmin",
        "roles/iam.securityAdmin",
        "roles/resourcemanager.projectIamAdmin",
    }
)
DEFAULT_REQUIRED_LABELS = (STACK_LABEL,)
DEFAULT_MAX_NOTEBOOK_IDLE_HOURS = 4


def _machine(resource_type: str) -> str:
    return {VM: "VM", TPU_VM: "TPU VM", NOTEBOOK: "notebook"}.get(resource_type, resource_type)


def no_public_ip(args: Any, report: Report) -> None:
    """A training machine is reached through IAP and reaches out through Cloud NAT."""
    props = args.props
    if args.resource_type == VM:
        for index, nic in enumerate(sequence(props.get("networkInterfaces"))):
            for key in ("accessConfigs", "ipv6AccessConfigs"):
                if sequence(mapping(nic).get(key)):
                    report(f"networkInterfaces[{index}].{key} gives it a public IP; remove it", None)
    elif args.resource_type == TPU_VM:
        if is_true(mapping(props.get("networkConfig")).get("enableExternalIps")):
            report("networkConfig.enableExternalIps must be false", None)
    elif args.resource_type == NOTEBOOK and not is_true(mapping(props.get("gceSetup")).get("disablePublicIp")):
        report("gceSetup.disablePublicIp must be true (Workbench gives a public IP otherwise)", None)


def no_default_service_account(args: Any, report: Report) -> None:
    """Without an account of its own, a machine runs as Compute Engine's default account,
    which holds Editor on the project in most projects."""
    if args.resource_type not in MACHINES:
        return
    found = accounts(args.resource_type, args.props)
    if not found:
        report("no service account set, so it runs as the Compute Engine default account", None)
    for account in found:
        if is_default_account(account.get("email")):
            report(
                f"runs as the Compute Engine default account {account.get('email')}; give it a dedicated account",
                None,
            )


def _binding_roles(props: Mapping[str, Any]) -> Iterator[tuple[str, list[str]]]:
    """(role, members) of an IAM member, binding or whole policy resource."""
    role = props.get("role")
    if isinstance(role, str):
        members = [m for m in [props.get("member"), *sequence(props.get("members"))] if isinstance(m, str)]
        yield role, members
    policy = props.get("policyData")
    if isinstance(policy, str):
        try:
            document = json.loads(policy)
        except ValueError:
            return
        for binding in sequence(mapping(document).get("bindings")):
            binding = mapping(binding)
            if isinstance(binding.get("role"), str):
                yield binding["role"], [m for m in sequence(binding.get("members")) if isinstance(m, str)]


def _is_iam(resource_type: str) -> bool:
    return "iam" in resource_type.split(":")[-1].lower()


def no_primitive_roles(args: Any, report: Report) -> None:
    """Owner, Editor and Viewer span every service in the scope they are granted on."""
    if not _is_iam(args.resource_type):
        return
    for role, members in _binding_roles(args.props):
        if role in PRIMITIVE_ROLES:
            who = ", ".join(members) or "its members"
            report(f"grants the primitive role {role} to {who}; grant a predefined or custom role", None)


def no_public_members(args: Any, report: Report) -> None:
    """allUsers and allAuthenticatedUsers open a bucket, image or secret to the internet."""
    if not _is_iam(args.resource_type):
        return
    for role, members in _binding_roles(args.props):
        for member in members:
            if member in PUBLIC_MEMBERS:
                report(f"grants {role} to {member}", None)


def shielded_vm(args: Any, report: Report) -> None:
    """vTPM and integrity monitoring let Compute Engine attest the boot; secure boot refuses
    unsigned kernels and drivers (the Deep Learning VM images' NVIDIA drivers are signed)."""
    if args.resource_type == VM:
        config, where = mapping(args.props.get("shieldedInstanceConfig")), "shieldedInstanceConfig"
    elif args.resource_type == NOTEBOOK:
        config, where = (
            mapping(mapping(args.props.get("gceSetup")).get("shieldedInstanceConfig")),
            "gceSetup.shieldedInstanceConfig",
        )
    else:
        return
    for key in ("enableSecureBoot", "enableVtpm", "enableIntegrityMonitoring"):
        if config.get(key) is not True:
            report(f"{where}.{key} must be true", None)


def os_login(args: Any, report: Report) -> None:
    """Logins through IAM (OS Login), and no project-wide SSH keys that open every VM."""
    if args.resource_type not in MACHINES:
        return
    values = metadata(args.resource_type, args.props)
    for key in ("enable-oslogin", "block-project-ssh-keys"):
        if not is_true(values.get(key)):
            report(f"metadata {key} must be TRUE", None)
    if is_true(values.get("serial-port-enable")):
        report("metadata serial-port-enable must not be set", None)


def no_ip_forwarding(args: Any, report: Report) -> None:
    if args.resource_type == VM and is_true(args.props.get("canIpForward")):
        report("canIpForward must be false (a training VM routes no one's traffic)", None)


def bucket_access(args: Any, report: Report) -> None:
    """One access model (IAM, no object ACLs), and no way to make an object public."""
    if args.resource_type != BUCKET:
        return
    if args.props.get("uniformBucketLevelAccess") is not True:
        report("uniformBucketLevelAccess must be true", None)
    if args.props.get("publicAccessPrevention") != "enforced":
        report('publicAccessPrevention must be "enforced"', None)


def _bucket_write(props: Mapping[str, Any]) -> tuple[str, str | None, str | None] | None:
    """(role, bucket, condition expression) of a bucket grant whose role writes objects."""
    role = props.get("role")
    if role not in STORAGE_WRITE_ROLES:
        return None
    bucket, condition = props.get("bucket"), mapping(props.get("condition"))
    expression = condition.get("expression") if condition else None
    return role, bucket if isinstance(bucket, str) else None, expression if isinstance(expression, str) else None


def _queues_jobs(props: Mapping[str, Any], role: str, bucket: str | None, expression: str | None) -> bool:
    """A grant that lets a named principal queue jobs, exactly as trainstack_contract.grants
    writes it: create-only under trainstack/code/ or trainstack/queue/specs/, or the queue's
    index alone. The stack-level rule queue-writers-are-teammates keeps machines out of it."""
    if bucket is None or expression is None or not is_submit_grant(bucket, role, expression):
        return False
    members = _members(props)
    return bool(members) and all(m.startswith(MEMBER_KINDS) for m in members)


def _members(props: Mapping[str, Any]) -> list[Any]:
    single = props.get("member")
    return [*([single] if single is not None else []), *sequence(props.get("members"))]


def executed_objects_spared(args: Any, report: Report) -> None:
    """What machines run lives under trainstack/ (in any bucket): a grant that may write objects
    carries a condition that excludes it by name, whatever else it admits; the one exception is
    a teammate's grant to queue jobs (:func:`_queues_jobs`)."""
    if args.resource_type not in BUCKET_GRANTS:
        return
    write = _bucket_write(args.props)
    if write is None:
        return
    role, bucket, expression = write
    excluded = spares_executed(bucket) if bucket is not None else None
    if excluded is not None and expression is not None and excluded in expression:
        return
    if _queues_jobs(args.props, role, bucket, expression):
        return
    report(
        f"{role} on bucket {bucket} may write under {EXECUTED_PREFIX}, what machines run: its condition must end "
        f"with {excluded or spares_executed('BUCKET')} (or be one of a teammate's grants to queue jobs)",
        None,
    )


def queue_directories_writable(args: Any, report: Report) -> None:
    """A machine's write grant in the jobs area covers all of it: the queue puts queued jobs and
    tuning trials in jobs/q<ID>_<NAME>/, which a grant on one job's folder leaves unwritable
    (their status, claim, backups and reports are a 403, and the job never starts). Each job's
    code holds a token for its own directory alone (the node agent downscopes it)."""
    if args.resource_type not in BUCKET_GRANTS:
        return
    write = _bucket_write(args.props)
    if write is None:
        return
    _, bucket, expression = write
    folder = narrower_than_jobs_area(bucket, expression) if bucket is not None and expression is not None else None
    if folder is not None:
        report(
            f"a write grant on {folder} alone: the queue's jobs and trials (jobs/q<ID>_<NAME>/) could not write "
            "their status or backups; grant jobs/ (each job's code gets a token for its own directory)",
            None,
        )


def _machine_accounts(resources: Any) -> set[str]:
    """The accounts the stack's machines may run as: ids of the accounts it creates, and the
    e-mails (and their ids) its machines name."""
    found: set[str] = set()
    for resource in resources:
        try:
            if resource.resource_type == ACCOUNT and isinstance(resource.props.get("accountId"), str):
                found.add(resource.props["accountId"])
            elif resource.resource_type in MACHINES:
                for account in accounts(resource.resource_type, resource.props):
                    email = account.get("email")
                    if isinstance(email, str):
                        found.update({email, email.split("@", 1)[0]})
        except UnknownValueError:
            continue
    return found


def _is_submit_grant(props: Mapping[str, Any]) -> bool:
    write = _bucket_write(props)
    if write is None:
        return False
    role, bucket, expression = write
    return bucket is not None and expression is not None and is_submit_grant(bucket, role, expression)


def queue_writers_are_teammates(args: Any, report: Report) -> None:
    """A grant to queue jobs (under trainstack/, what machines run) goes to a teammate, never to
    an account the stack's machines run as: a machine that could queue a job could run code on
    every other one. A stack validation: it needs the machines and accounts with the grants."""
    machines = _machine_accounts(args.resources)
    for resource in args.resources:
        if resource.resource_type not in BUCKET_GRANTS:
            continue
        try:
            if not _is_submit_grant(resource.props):
                continue
        except UnknownValueError:
            continue
        where = f"{resource.resource_type} {resource.name}"
        try:
            members: list[str | None] = [m if isinstance(m, str) else None for m in _members(resource.props)]
        except UnknownValueError:
            members = [None]
        for member in members or [None]:
            email = member.split(":", 1)[-1] if member is not None else None
            if email is None:
                report(f"{where}: queues jobs for a principal not known before deployment; name a teammate", None)
            elif email in machines or email.split("@", 1)[0] in machines or is_default_account(email):
                report(
                    f"{where}: lets {member}, an account the stack's machines run as, queue jobs (write under "
                    f"{EXECUTED_PREFIX}); only the teammates trainstack:access names may",
                    None,
                )


def _has_gpus(props: Mapping[str, Any]) -> bool:
    attached = any(
        isinstance(a, Mapping) and isinstance(a.get("count"), (int, float)) and a["count"] > 0
        for a in sequence(props.get("guestAccelerators"))
    )
    machine_type = props.get("machineType")
    built_in = isinstance(machine_type, str) and machine_type.split("/")[-1].startswith(GPU_MACHINE_FAMILIES)
    return attached or built_in


def gpu_terminates_on_maintenance(args: Any, report: Report) -> None:
    """A GPU VM cannot live-migrate: Compute Engine refuses MIGRATE for it at create time."""
    if args.resource_type != VM or not _has_gpus(args.props):
        return
    if mapping(args.props.get("scheduling")).get("onHostMaintenance") != "TERMINATE":
        report('a GPU VM: scheduling.onHostMaintenance must be "TERMINATE"', None)


def spot_no_automatic_restart(args: Any, report: Report) -> None:
    """A Spot VM that restarts by itself after preemption bills again with no one asking."""
    if args.resource_type != VM:
        return
    scheduling = mapping(args.props.get("scheduling"))
    spot = scheduling.get("provisioningModel") == "SPOT" or is_true(scheduling.get("preemptible"))
    if spot and scheduling.get("automaticRestart") is not False:
        report("a Spot VM: scheduling.automaticRestart must be false", None)


def _positive_whole(value: Any) -> bool:
    """A count of seconds: the engine carries every number as a double (3600.0), metadata as
    text ("3600")."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return value > 0 and float(value).is_integer()
    return isinstance(value, str) and value.isdigit() and int(value) > 0


def run_time_bound(args: Any, report: Report) -> None:
    """Every machine stops billing by itself: a cap on run time, or an idle timeout."""
    props = args.props
    if args.resource_type == VM:
        seconds = mapping(mapping(props.get("scheduling")).get("maxRunDuration")).get("seconds")
        if not _positive_whole(seconds):
            report("no scheduling.maxRunDuration: nothing stops it if its job never ends", None)
    elif args.resource_type == TPU_VM:
        # The TPU API has no run-time cap; trainstack's boot script enforces this one.
        if not _positive_whole(metadata(TPU_VM, props).get(MAX_RUN_SECONDS_KEY)):
            report(f"no metadata {MAX_RUN_SECONDS_KEY}: nothing stops it if its job never ends", None)
    elif args.resource_type == NOTEBOOK and not _positive_whole(metadata(NOTEBOOK, props).get("idle-timeout-seconds")):
        report("no gceSetup.metadata idle-timeout-seconds: it bills until someone stops it", None)


def cost_labels(args: Any, report: Report) -> None:
    """Billing reports and budgets group spending by these labels; a machine without them
    is spending no one can attribute. The VM's boot disk bills separately and needs them too."""
    if args.resource_type not in MACHINES:
        return
    required = [str(key) for key in sequence(args.get_config().get("required_labels", DEFAULT_REQUIRED_LABELS))]
    places = [("labels", mapping(args.props.get("labels")))]
    if args.resource_type == VM:
        initialize = mapping(mapping(args.props.get("bootDisk")).get("initializeParams"))
        places.append(("bootDisk.initializeParams.labels", mapping(initialize.get("labels"))))
    for where, found in places:
        missing = [key for key in required if not found.get(key)]
        if missing:
            report(f"{where} lacks the cost label(s) {', '.join(missing)}", None)


def _ranges(values: Any) -> list[tuple[str, ipaddress.IPv4Network | ipaddress.IPv6Network | None]]:
    parsed: list[tuple[str, ipaddress.IPv4Network | ipaddress.IPv6Network | None]] = []
    for value in sequence(values):
        try:
            parsed.append((str(value), ipaddress.ip_network(str(value), strict=False)))
        except ValueError:
            parsed.append((str(value), None))
    return parsed


def _port_in(port: int, ports: Any) -> bool:
    listed = [str(p) for p in sequence(ports)]
    if not listed:
        return True  # no ports: every port of the protocol
    for entry in listed:
        low, _, high = entry.partition("-")
        try:
            if int(low) <= port <= int(high or low):
                return True
        except ValueError:
            continue
    return False


def _admits_ssh(props: Mapping[str, Any]) -> bool:
    return any(
        mapping(rule).get("protocol") in ("tcp", "all", "6") and _port_in(22, mapping(rule).get("ports"))
        for rule in sequence(props.get("allows"))
    )


def firewall_ingress(args: Any, report: Report) -> None:
    """Nothing open to the internet; SSH only through IAP's TCP forwarding."""
    if args.resource_type != FIREWALL:
        return
    props = args.props
    if (
        props.get("direction", "INGRESS") != "INGRESS"
        or not sequence(props.get("allows"))
        or is_true(props.get("disabled"))
    ):
        return
    ranges = _ranges(props.get("sourceRanges"))
    if not ranges and not sequence(props.get("sourceTags")) and not sequence(props.get("sourceServiceAccounts")):
        # Compute Engine's default source for an ingress rule with none given is 0.0.0.0/0.
        report("no sourceRanges, sourceTags or sourceServiceAccounts, so it admits 0.0.0.0/0", None)
        return
    for text, network in ranges:
        if network is None:
            report(f"sourceRanges entry {text!r} is not an IP range", None)
        elif network in ANYWHERE or network.prefixlen == 0:
            report(f"sourceRanges {text} admits the whole internet", None)
        elif _admits_ssh(props) and not (network.version == 4 and network.subnet_of(IAP_RANGE)):  # type: ignore[arg-type]
            report(f"admits SSH from {text}; SSH may come only from IAP's range {IAP_RANGE}", None)


def bucket_versioning(args: Any, report: Report) -> None:
    """Versioning keeps an overwritten checkpoint or model; advisory, since it costs storage."""
    if args.resource_type == BUCKET and mapping(args.props.get("versioning")).get("enabled") is not True:
        report("versioning is off: an overwritten or deleted checkpoint cannot be recovered", None)


def notebook_idle_timeout(args: Any, report: Report) -> None:
    if args.resource_type != NOTEBOOK:
        return
    hours = args.get_config().get("max_idle_hours", DEFAULT_MAX_NOTEBOOK_IDLE_HOURS)
    seconds = metadata(NOTEBOOK, args.props).get("idle-timeout-seconds")
    if _positive_whole(seconds) and float(str(seconds)) > float(hours) * 3600:
        report(f"idle-timeout-seconds {seconds} is above {hours} hours of idle billing", None)


def _is_escalation_role(role: str) -> bool:
    # roles/storage.admin, roles/compute.instanceAdmin.v1, roles/iam.serviceAccountAdmin, ...
    segments = role.rsplit("/", 1)[-1].split(".")
    admin = any(segment.lower().endswith("admin") for segment in segments)
    return role in PRIMITIVE_ROLES or role in ACCOUNT_ESCALATION_ROLES or admin


# Permissions that let whoever holds them on a project become someone else or grant
# themselves anything: act as or mint tokens for service accounts, make keys, rewrite IAM.
ESCALATION_PERMISSIONS = frozenset(
    {
        "iam.serviceAccounts.actAs",
        "iam.serviceAccounts.getAccessToken",
        "iam.serviceAccounts.getOpenIdToken",
        "iam.serviceAccounts.implicitDelegation",
        "iam.serviceAccounts.signBlob",
        "iam.serviceAccounts.signJwt",
        "iam.serviceAccountKeys.create",
        "iam.roles.create",
        "iam.roles.update",
        "resourcemanager.projects.setIamPolicy",
    }
)


def custom_role_escalation(args: Any, report: Report) -> None:
    """A custom role the stack defines may not carry an escalation permission if it is bound on
    the project (CIS Google Cloud 1.5, 1.6): a custom role is not checked by name like the
    predefined ones, so its permissions are. A stack validation: roles and bindings together."""
    escalating: dict[str, list[str]] = {}
    for resource in args.resources:
        if resource.resource_type != CUSTOM_ROLE:
            continue
        permissions = [p for p in sequence(resource.props.get("permissions")) if p in ESCALATION_PERMISSIONS]
        role_id = resource.props.get("roleId")
        if permissions and isinstance(role_id, str):
            escalating[role_id] = sorted(permissions)
    for resource in args.resources:
        if not resource.resource_type.startswith(PROJECT_IAM_PREFIX):
            continue
        for role, members in _binding_roles(resource.props):
            role_id = role.rsplit("/roles/", 1)[-1] if "/roles/" in role else None
            if role_id in escalating and members:
                report(
                    f"{resource.resource_type} {resource.name}: binds the custom role {role_id} on the project, and it "
                    f"carries {', '.join(escalating[role_id])}: its members ({', '.join(members)}) could act as other "
                    "accounts or rewrite the project's IAM",
                    None,
                )


def broad_scope_least_privilege(args: Any, report: Report) -> None:
    """The cloud-platform scope hands every decision to IAM, which is right only when the
    account is the stack's own and every role it is granted is narrow (CIS Google Cloud 4.2
    with 1.5): then the scope adds nothing the bindings do not allow.

    A stack validation: it needs the machines, the accounts and the bindings together."""
    created = set()
    for resource in args.resources:
        if resource.resource_type == ACCOUNT and isinstance(resource.props.get("accountId"), str):
            created.add(resource.props["accountId"])
    broad: dict[str, str] = {}
    for resource in args.resources:
        if resource.resource_type not in MACHINES:
            continue
        for account in accounts(resource.resource_type, resource.props):
            email = account.get("email")
            # A Workbench instance takes no scopes: it always runs with the cloud-platform scope
            # (Vertex AI Workbench, "service account" of an instance), so its account is broad.
            broad_by_scope = resource.resource_type == NOTEBOOK or has_broad_scope(account)
            if isinstance(email, str) and broad_by_scope and not is_default_account(email):
                broad.setdefault(email, f"{_machine(resource.resource_type)} {resource.name}")
    for email, machine in sorted(broad.items()):
        if email.split("@", 1)[0] not in created:
            report(
                f"{machine}: runs as {email} with the cloud-platform scope, but this stack does not create that "
                "account, so its roles cannot be checked; create it in the stack or narrow the scopes",
                None,
            )
    for resource in args.resources:
        if not _is_iam(resource.resource_type):
            continue
        for role, members in _binding_roles(resource.props):
            for member in members:
                email = member.split(":", 1)[-1]
                if email in broad and _is_escalation_role(role):
                    report(
                        f"{resource.resource_type} {resource.name}: grants {role} to {email}, which {broad[email]} "
                        "runs as with the cloud-platform scope; grant only the roles the job needs",
                        None,
                    )


def _key_in(key: Any, projects: Sequence[str]) -> str | None:
    """Why ``key`` does not do as a customer-managed key (None: it does): there is none, or it
    is not in one of ``projects`` (any project where none are listed)."""
    if not isinstance(key, str) or not key:
        return "no customer-managed key"
    project = key.split("/")[1] if key.startswith("projects/") and key.count("/") >= 1 else ""
    if projects and project not in projects:
        return f"the key {key} is in project {project or '?'}, not in {', '.join(projects)}"
    return None


def customer_managed_keys(args: Any, report: Report) -> None:
    """Everything that stores data is encrypted with a customer-managed key, from one of the
    allowed projects: what an organisation's gcp.restrictNonCmekServices and
    gcp.restrictCmekCryptoKeyProjects constraints refuse at `pulumi up`, found at preview."""
    projects = [str(p) for p in sequence(args.get_config().get("key_projects", []))]
    props = args.props
    places: list[tuple[str, Any]] = []
    if args.resource_type == BUCKET:
        places.append(("encryption.defaultKmsKeyName", mapping(props.get("encryption")).get("defaultKmsKeyName")))
    elif args.resource_type == REPOSITORY:
        places.append(("kmsKeyName", props.get("kmsKeyName")))
    elif args.resource_type == VM:
        places.append(("bootDisk.kmsKeySelfLink", mapping(props.get("bootDisk")).get("kmsKeySelfLink")))
    elif args.resource_type == NOTEBOOK:
        setup = mapping(props.get("gceSetup"))
        for disk in ("bootDisk", "dataDisks"):
            found = mapping(setup.get(disk))
            if found.get("diskEncryption") != "CMEK":
                report(f"gceSetup.{disk}.diskEncryption is not CMEK: Google's key encrypts it", None)
            else:
                places.append((f"gceSetup.{disk}.kmsKey", found.get("kmsKey")))
    elif args.resource_type == TPU_VM:
        report("a TPU VM's boot disk takes no customer-managed key through pulumi-gcp's tpu.V2Vm", None)
    for where, key in places:
        problem = _key_in(key, projects)
        if problem is not None:
            report(f"{where}: {problem}", None)


def shared_network_only(args: Any, report: Report) -> None:
    """The stack creates no network of its own and puts every machine on an allowed
    subnetwork: what a Shared VPC's service project may do (gcp's
    compute.restrictSharedVpcSubnetworks constraint), found at preview."""
    if args.resource_type in OWN_NETWORK:
        kind = args.resource_type.rsplit(":", 1)[-1]
        report(f"creates a {kind}: join the organisation's network instead (trainstack:network)", None)
        return
    if args.resource_type not in MACHINES:
        return
    allowed = [str(s) for s in sequence(args.get_config().get("subnetworks", []))]
    props = args.props
    if args.resource_type == VM:
        found = [mapping(nic).get("subnetwork") for nic in sequence(props.get("networkInterfaces"))]
        where = "networkInterfaces[].subnetwork"
    elif args.resource_type == TPU_VM:
        found = [mapping(props.get("networkConfig")).get("subnetwork")]
        where = "networkConfig.subnetwork"
    else:
        found = [
            mapping(nic).get("subnet") for nic in sequence(mapping(props.get("gceSetup")).get("networkInterfaces"))
        ]
        where = "gceSetup.networkInterfaces[].subnet"
    for subnetwork in found or [None]:
        if not isinstance(subnetwork, str) or not subnetwork.startswith("projects/"):
            report(f"{where} is not a subnetwork of an existing network (projects/HOST/regions/R/subnetworks/S)", None)
        elif allowed and subnetwork not in allowed:
            report(f"{where} {subnetwork} is not one of the allowed subnetworks: {', '.join(allowed)}", None)
