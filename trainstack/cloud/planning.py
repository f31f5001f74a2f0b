"""An offline plan: the real Pulumi program run under Pulumi's mock runtime.

Pulumi's mock monitor stands in for the engine and the gcp provider. The program is the same
``__main__.py`` that ``pulumi up`` runs, fed the stack file's config the way the engine feeds
it; each resource it registers is recorded with the inputs the provider would receive.
The mocks answer only what the provider would compute on create (ids, a service account's
e-mail, a bucket's URL), derived from the inputs by Google's naming rules.
"""

from __future__ import annotations

import gc
import hashlib
import json
import re
import runpy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime.mocks import MockMonitor

from trainstack.base.errors import ProgramExit, shorten
from trainstack.base.project import PROJECT_ROOT
from trainstack.cloud.bootscripts import BootFiles
from trainstack.cloud.program import runs_observed
from trainstack.cloud.pulumi_internals import (
    SECRET_SIGNATURE,
    SECRET_SIGNATURE_KEY,
    run_until_settled,
    set_program_config,
    sync_await,
)
from trainstack.jobcode.package import ExtraRequirements
from trainstack.jobcode.requirements_lock import pinned_lines
from trainstack.stackmodel.cost import CostReport, cost_report
from trainstack.stackmodel.resolved import NodeCost, ResolvedJob, ResolvedStack, placeholder_notes, stack_warnings
from trainstack_contract import EXECUTED_PREFIX, LAYOUT, METADATA_KEYS, PROJECT_INSTALL
from trainstack_contract.grants import is_submit_grant
from trainstack_contract.iam import STORAGE_WRITE_ROLES

PROGRAM = PROJECT_ROOT / "__main__.py"
# A stand-in project number for the mocked getProject call (budgets filter by project number).
MOCK_PROJECT_NUMBER = "123456789012"
# Artifact Registry's image lookup, which resolves job.image's tag at `pulumi up`; offline, a
# stand-in digest derived from the image's name answers it (see stand_in_docker_image).
DOCKER_IMAGE_TOKEN = "gcp:artifactregistry/getDockerImage:getDockerImage"
STAND_IN_DIGEST_SEED = "trainstack plan stand-in digest:"


@dataclass(frozen=True)
class PlannedResource:
    type: str
    name: str
    inputs: dict[str, Any]


@dataclass
class Plan:
    stack: str
    resources: list[PlannedResource]
    # The stack as the program resolved it, and the boot files it set: what the costs,
    # notes and `plan --out` scripts come from, with no second parse.
    resolved: ResolvedStack
    boot: BootFiles
    # The cost report `trainstack cost` prints, worked out once per plan.
    cost: CostReport
    outputs: dict[str, Any] = field(default_factory=dict)
    # What the program chose for the user where the stack file is silent.
    notes: list[str] = field(default_factory=list)
    # By resource name, the names of the resources the engine would create before it (its
    # depends_on and the resources its inputs come from), as the program registered them.
    waits_for: dict[str, frozenset[str]] = field(default_factory=dict)

    @property
    def costs(self) -> tuple[NodeCost, ...]:
        return self.resolved.costs

    @property
    def hourly_usd(self) -> float | None:
        return self.resolved.hourly_usd

    @property
    def region(self) -> str:
        """Whose list prices the costs are: the stack's own region."""
        return self.resolved.region

    @property
    def scripts(self) -> dict[str, str]:
        """Every boot script the program set, by file name (what `plan --out DIR` writes)."""
        return self.boot.by_filename()

    def of_type(self, type_token: str) -> list[PlannedResource]:
        return [r for r in self.resources if r.type == type_token]

    def to_json(self) -> dict[str, Any]:
        """The plan as JSON values: scripts by hash and size (their text is `--out`'s), so
        the document stays readable and two plans of one stack are byte-identical."""
        return {
            "stack": self.stack,
            "resources": self.resource_documents(),
            "hourly_usd": self.hourly_usd,
            "price_region": self.region,
            "nodes": [{"name": c.name, "description": c.description, "hourly_usd": c.usd_per_hour} for c in self.costs],
            "outputs": self.outputs,
            "notes": self.notes,
            "scripts": {name: text_digest(text) for name, text in sorted(self.scripts.items())},
            "cost": self.cost.to_json(),
            "bucket_access": self.bucket_access(),
            "executed_artifacts": with_requirement_lock(
                with_stand_in_digests(executed_artifacts(self.resources), self.resolved), self.resolved
            ),
        }

    def bucket_access(self) -> dict[str, Any]:
        """Who may write what in the stack's bucket (and in job.job_dir's), from the planned
        grants, beside the objects nodes run: none of those, and nothing under trainstack/ in
        any bucket, may fall in what a grant lets a machine write."""
        bucket = self.resolved.bucket_name
        executed = sorted(
            r.inputs["name"]
            for r in self.of_type("gcp:storage/bucketObject:BucketObject")
            if r.inputs.get("bucket") == bucket and str(r.inputs.get("name", "")).startswith(EXECUTED_PREFIX)
        )
        grants = [_grant_document(grant, bucket) for grant in self._bucket_grants(bucket)]
        grants.sort(key=lambda g: (g["member"], g["role"]))
        job = self.resolved.job
        job_bucket = job.job_dir_bucket or bucket if job is not None else None
        job_grants = [_grant_document(g, job_bucket) for g in self._bucket_grants(job_bucket)] if job_bucket else []
        # What a machine could rewrite and another then run: must be empty. A teammate's grants
        # to queue jobs are not a machine's (and create no object over another, nor touch what
        # `pulumi up` put there but the queue's index).
        teammates = set(self.resolved.access.members) - self.machine_members() if self.resolved.access else set()
        exposed = sorted(
            {
                f"{name} ({grant['member']})"
                for grant in grants
                if grant["writes"] and not (grant["queues_jobs"] and grant["member"] in teammates)
                for name in [*executed, EXECUTED_PREFIX]
                if _may_write(grant["area"], name)
            }
            | {
                f"gs://{job_bucket}/{EXECUTED_PREFIX} ({grant['member']})"
                for grant in job_grants
                if job_bucket != bucket and grant["writes"] and _may_write(grant["area"], EXECUTED_PREFIX)
            }
        )
        access: dict[str, Any] = {
            "bucket": bucket,
            "executed_objects": executed,
            "grants": [{k: v for k, v in g.items() if k != "area"} for g in grants],
            "writable_executed_objects": exposed,
        }
        if job is not None and job_bucket is not None:
            # The job's directory: who can write its status and backups (its own machines alone).
            prefix = job.job_dir_prefix or f"{LAYOUT.jobs}/{job.name}"
            watched = (f"{prefix}/{LAYOUT.job_status}", f"{prefix}/{LAYOUT.backup_dir}/")
            access["job_dir"] = job_dir_access(job, job_grants, watched)
        return access

    def machine_members(self) -> set[str]:
        """The IAM members of the accounts this stack creates for its machines."""
        return {
            f"serviceAccount:{account.inputs['accountId']}@{account.inputs['project']}.iam.gserviceaccount.com"
            for account in self.of_type("gcp:serviceaccount/account:Account")
        }

    def _bucket_grants(self, bucket: str) -> list[PlannedResource]:
        return [
            grant
            for grant in self.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
            if grant.inputs.get("bucket") == bucket
        ]

    def resource_documents(self) -> list[dict[str, Any]]:
        """Each resource as type, name and inputs, boot scripts by digest: what `plan --json`
        lists and what `check` hands the policy pack."""
        return [{"type": r.type, "name": r.name, "inputs": _scripts_as_hashes(r.inputs)} for r in self.resources]


MACHINE_TYPES = frozenset({"gcp:compute/instance:Instance", "gcp:tpu/v2Vm:V2Vm", "gcp:workbench/instance:Instance"})
# Pins, as `plan --json` names them.
PIN_SHA256 = "sha256"
PIN_HASH_LOCKED = "hash-locked"
PIN_IMAGE_DIGEST = "image-digest"
PIN_INLINE = "inline-metadata"
PIN_NONE = "none"


def machine_metadata(resource: PlannedResource) -> dict[str, Any] | None:
    """A machine's instance metadata (a Workbench instance's sits in its gce_setup)."""
    if resource.type not in MACHINE_TYPES:
        return None
    metadata = resource.inputs.get("metadata")
    if metadata is None:
        metadata = (resource.inputs.get("gceSetup") or {}).get("metadata")
    return metadata if isinstance(metadata, dict) else None


def metadata_artifacts(metadata: dict[str, Any]) -> list[dict[str, Any]]:
    """What one machine's metadata makes it execute, each with its pin."""
    keys = METADATA_KEYS
    found: list[dict[str, Any]] = []

    def add(artifact: str, obj: Any, pin: str, sha256: Any = None) -> None:
        unpinned = pin == PIN_NONE or (pin in (PIN_SHA256, PIN_HASH_LOCKED) and not isinstance(sha256, str))
        found.append({"artifact": artifact, "object": str(obj), "pin": pin, "sha256": sha256, "unpinned": unpinned})

    script = metadata.get("startup-script")
    if isinstance(script, str):
        add("boot script", "startup-script", PIN_INLINE, hashlib.sha256(script.encode()).hexdigest())
    if "post-startup-script" in metadata:
        # Workbench runs this object itself, unchecked: nothing pins it.
        add("notebook post-startup script", metadata["post-startup-script"], PIN_NONE)
    if keys.notebook_script in metadata:
        # The notebook's startup-script fetches it and runs it only at this sha256.
        digest = metadata.get(keys.notebook_script_sha256)
        add("notebook post-startup script", metadata[keys.notebook_script], PIN_SHA256, digest)
    pinned = (
        ("node agent archive", keys.agent, keys.agent_sha256, PIN_SHA256),
        ("node environment lock", keys.python_lock, keys.python_lock_sha256, PIN_HASH_LOCKED),
        ("wheelhouse manifest", keys.wheelhouse, keys.wheelhouse_sha256, PIN_SHA256),
        ("job code archive", keys.code_archive, keys.code_archive_sha256, PIN_SHA256),
        ("job requirements", keys.requirements, keys.requirements_sha256, PIN_HASH_LOCKED),
    )
    for artifact, key, digest_key, pin in pinned:
        if key in metadata:
            add(artifact, metadata[key], pin, metadata.get(digest_key))
    if metadata.get(keys.code_install) == PROJECT_INSTALL:
        # pip resolves a project's own dependencies at boot: nothing pins them.
        add("job project dependencies", metadata.get(keys.code_archive), PIN_NONE)
    image = metadata.get(keys.image)
    if image is not None:
        digest = str(image).partition("@sha256:")[2]
        add("job image", image, PIN_IMAGE_DIGEST if digest else PIN_NONE, digest or None)
    return found


def executed_artifacts(resources: list[PlannedResource]) -> list[dict[str, Any]]:
    """Everything a machine of the stack executes or installs, read from the metadata the
    program set, with how it is pinned; ``unpinned`` marks what nothing pins."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for resource in resources:
        metadata = machine_metadata(resource)
        if metadata is None:
            continue
        for entry in metadata_artifacts(metadata):
            key = (entry["artifact"], entry["object"])
            found.setdefault(key, {**entry, "machines": []})["machines"].append(resource.name)
    return sorted(found.values(), key=lambda entry: (entry["artifact"], entry["object"]))


def with_stand_in_digests(artifacts: list[dict[str, Any]], stack: ResolvedStack) -> list[dict[str, Any]]:
    """``artifacts``, where a job image named by tag says which tag `pulumi up` resolves and that
    the digest shown is the plan's stand-in for the one it will find (a plan reaches no registry)."""
    image = stack.job.image if stack.job is not None else None
    if image is not None and image.tag is not None:
        for entry in artifacts:
            if entry["artifact"] == "job image":
                entry.update(resolved_from=image.uri, stand_in_digest=True)
    return artifacts


def requirements_note(requirements: ExtraRequirements) -> str:
    """What the nodes install of the job's requirements: the file, or the lock made of it."""
    uploaded = f"uploaded as {requirements.object_name}"
    if requirements.lock is None:
        return f"the job's requirements are {requirements.display_path} ({uploaded})"
    versions: dict[str, list[str]] = {}
    for pin in pinned_lines(requirements.data.decode("utf-8")):
        name, _, version = pin.partition(";")[0].strip().partition("==")
        versions.setdefault(name, []).append(version)
    shown = ", ".join(f"{name} {' or '.join(found)}" for name, found in versions.items())
    return (
        f"the job's requirements {requirements.display_path} pin no versions: the nodes install the lock trainstack "
        f"made of them, {_shown_path(requirements.lock)} ({uploaded}): {shown} (one version for each Python the "
        "nodes run)"
    )


def with_requirement_lock(artifacts: list[dict[str, Any]], stack: ResolvedStack) -> list[dict[str, Any]]:
    """``artifacts``, where the job's requirements are a lock trainstack made of the team's file
    says so: the file, the lock and each version it pins."""
    requirements = stack.job.requirements if stack.job is not None else None
    if requirements is not None and requirements.lock is not None:
        pins = pinned_lines(requirements.data.decode("utf-8"))
        for entry in artifacts:
            if entry["artifact"] == "job requirements":
                entry.update(locked_from=requirements.display_path, lock=_shown_path(requirements.lock), pins=pins)
    return artifacts


def _shown_path(path: Path) -> str:
    return str(path.relative_to(PROJECT_ROOT)) if path.is_relative_to(PROJECT_ROOT) else str(path)


_OBJECTS_UNDER = re.compile(
    r'resource\.name\.startsWith\("projects/_/buckets/(?P<bucket>[^"/]+)/objects/(?P<prefix>[^"]*)"\)'
)
_OBJECT_NAMED = re.compile(r'resource\.name == "projects/_/buckets/(?P<bucket>[^"/]+)/objects/(?P<name>[^"]*)"')
# The bucket itself (a listing), as components/identity's job-directory condition admits it.
_BUCKET_ITSELF = 'resource.type == "storage.googleapis.com/Bucket" || '


@dataclass(frozen=True)
class ObjectArea:
    """The objects a grant's condition admits: names under ``prefix``, none under ``excluded``."""

    prefix: str
    excluded: tuple[str, ...] = ()
    # The one object named ``prefix`` alone (a ``resource.name ==`` condition).
    exact: bool = False

    def admits(self, name: str) -> bool:
        """``name`` (an object, or a folder "a/": any object under it) is one it admits."""
        if self.exact:
            return name == self.prefix or (name.endswith("/") and self.prefix.startswith(name))
        inside = name.startswith(self.prefix) or (name.endswith("/") and self.prefix.startswith(name))
        return inside and not any(name.startswith(e) for e in self.excluded)

    def describe(self) -> str:
        """``jobs/x/*``, ``* except trainstack/*``: exclusions shown where they cut into the prefix."""
        if self.exact:
            return self.prefix
        shown = f"{self.prefix}*" if self.prefix else "*"
        return shown + "".join(f" except {e}*" for e in self.excluded if e.startswith(self.prefix))


def object_area(bucket: str, expression: str) -> ObjectArea | None:
    """The objects a grant's condition limits it to, when the condition is one the program
    writes: ``startsWith(PREFIX)``, each ``&& !startsWith(EXCLUDED)``, optionally after
    ``resource.type == Bucket ||`` in parentheses, on this bucket's objects; else None
    (a condition this report cannot read, taken as every object)."""
    text = expression.strip()
    named = _OBJECT_NAMED.fullmatch(text)
    if named is not None:
        return ObjectArea(named["name"], exact=True) if named["bucket"] == bucket else None
    if text.startswith(_BUCKET_ITSELF) and text.endswith(")"):
        text = text.removeprefix(_BUCKET_ITSELF).strip()
        if not text.startswith("("):
            return None
        text = text[1:-1]
    terms = [t.strip() for t in text.split("&&")]
    tests = [_OBJECTS_UNDER.fullmatch(t.removeprefix("!") if i else t) for i, t in enumerate(terms)]
    if any(m is None or m["bucket"] != bucket for m in tests) or not all(t.startswith("!") for t in terms[1:]):
        return None
    prefixes = [m["prefix"] for m in tests if m is not None]
    return ObjectArea(prefixes[0], tuple(prefixes[1:]))


def _grant_document(grant: PlannedResource, bucket: str) -> dict[str, Any]:
    condition = grant.inputs.get("condition")
    # No condition: every object; a condition this report cannot read: taken as every object.
    area = object_area(bucket, condition["expression"]) if isinstance(condition, dict) else ObjectArea("")
    return {
        "member": grant.inputs["member"],
        "role": grant.inputs["role"],
        "objects": area.describe() if area is not None else "* (conditional)",
        "writes": grant.inputs["role"] in STORAGE_WRITE_ROLES,
        # One of the grants a trainstack:access member queues jobs with (trainstack_contract.grants).
        "queues_jobs": isinstance(condition, dict)
        and is_submit_grant(bucket, grant.inputs["role"], condition["expression"]),
        "area": area,
    }


def job_dir_access(job: ResolvedJob, job_grants: list[dict[str, Any]], watched: tuple[str, ...]) -> dict[str, Any]:
    """Who can write the job's status and backups (its own machines alone), and what its own
    token reaches besides its directory (job.buckets)."""
    writers = {g["member"] for g in job_grants if g["writes"] and any(_may_write(g["area"], n) for n in watched)}
    return {
        "uri": job.job_dir,
        "writers": sorted(writers),
        "reads": list(job.places.reads),
        "writes": list(job.places.writes),
    }


def _may_write(area: ObjectArea | None, name: str) -> bool:
    return area is None or area.admits(name)


# Inputs that hold a whole boot script: shown in JSON by digest.
SCRIPT_INPUTS = frozenset({"startup-script", "content"})


def text_digest(text: str) -> str:
    data = text.encode()
    return f"<{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}>"


def _scripts_as_hashes(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: text_digest(v) if k in SCRIPT_INPUTS and isinstance(v, str) else _scripts_as_hashes(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_scripts_as_hashes(v) for v in value]
    return value


# Cloud Storage's service agent, as getProjectServiceAccount names it (it creates the agent).
STORAGE_AGENT_TOKEN = "gcp:storage/getProjectServiceAccount:getProjectServiceAccount"


def service_agent_domain(service: str) -> str:
    """Where a service's agent lives (service-NUMBER@DOMAIN), as ServiceIdentity reports it, from
    the catalog's service_agents.csv."""
    from trainstack.catalog import service_agent_domains

    domains = service_agent_domains()
    if service not in domains:
        raise ValueError(f"the planning stand-in knows no service agent for {service}")
    return domains[service]


def _computed_state(type_token: str, inputs: dict[str, Any], project: str) -> dict[str, Any]:
    """What the provider reports after create that the program reads back."""
    name = inputs.get("name", "")
    if type_token == "gcp:serviceaccount/account:Account":
        email = f"{inputs['accountId']}@{inputs.get('project', project)}.iam.gserviceaccount.com"
        return {
            "email": email,
            "member": f"serviceAccount:{email}",
            "name": f"projects/{project}/serviceAccounts/{email}",
        }
    if type_token == "gcp:storage/bucket:Bucket":
        return {"url": f"gs://{name}", "selfLink": f"https://www.googleapis.com/storage/v1/b/{name}"}
    if type_token == "gcp:projects/serviceIdentity:ServiceIdentity":
        email = f"service-{MOCK_PROJECT_NUMBER}@{service_agent_domain(inputs['service'])}"
        return {"email": email, "member": f"serviceAccount:{email}"}
    if type_token == "gcp:artifactregistry/repository:Repository":
        return {"name": inputs["repositoryId"]}
    if type_token in ("gcp:compute/network:Network", "gcp:compute/subnetwork:Subnetwork", "gcp:compute/router:Router"):
        return {
            "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/{type_token.split(':')[-1].lower()}s/{name}"
        }
    if type_token == "gcp:projects/iAMCustomRole:IAMCustomRole":
        return {"name": f"projects/{inputs.get('project', project)}/roles/{inputs['roleId']}"}
    if type_token == "gcp:tpu/v2Vm:V2Vm":
        return {"state": "READY"}
    if type_token == "gcp:workbench/instance:Instance":
        return {"proxyUri": f"{name}.notebooks.googleusercontent.com"}
    return {}


# What a plan shows for a value the provider computes on create (an id, a generated name).
COMPUTED = "<computed>"


def _archive_description(archive: pulumi.Archive | pulumi.Asset) -> Any:
    """An archive as its contents' paths and a hash of their bytes: stable across runs and
    clones, and different when the code it uploads changes. A single file shows its full
    sha256: for what nodes run, the digest their metadata pins."""
    if isinstance(archive, pulumi.AssetArchive):
        return {"asset_archive": {name: _archive_description(inner) for name, inner in sorted(archive.assets.items())}}
    if isinstance(archive, (pulumi.FileArchive, pulumi.FileAsset)):
        path = Path(archive.path)
        if path.is_file():
            return {"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
        files = sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        digest = hashlib.sha256()
        for file in files:
            digest.update(str(file.relative_to(path)).encode() + b"\0" + file.read_bytes())
        return {"files": path.name, "sha256": digest.hexdigest()[:16]}
    return type(archive).__name__


# What a plan shows for a secret input: the mock monitor hands a secret Output's value over
# wrapped in Pulumi's secret signature (as the engine would encrypt it), never shown.
SECRET_MASK = "[secret]"


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(SECRET_SIGNATURE_KEY) == SECRET_SIGNATURE


def _plain(value: Any) -> Any:
    """Inputs as JSON values: the engine carries every number as a double (a GPU count shows
    as 2, not 2.0), unknowns and archives become stable descriptions, so that two plans of
    the same stack are equal and plans can be compared (`plan --against`)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if is_secret(value):
        return SECRET_MASK
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (pulumi.Archive, pulumi.Asset)):
        return _archive_description(value)
    if value is not None and not isinstance(value, (str, int, float, bool)):
        return COMPUTED
    return value


class OrderingMonitor(MockMonitor):
    """The mock monitor, also keeping what each resource waits for: the URNs the engine gets
    with its registration (explicit depends_on and the resources its inputs come from)."""

    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self.dependencies: dict[str, list[str]] = {}

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (the gRPC method's name)
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        self.dependencies[response.urn] = list(request.dependencies)
        return response

    def waits_for(self) -> dict[str, frozenset[str]]:
        """Names of the resources each resource (by name) waits for."""
        return {
            _urn_name(urn): frozenset(_urn_name(dependency) for dependency in dependencies)
            for urn, dependencies in self.dependencies.items()
        }


def _urn_name(urn: str) -> str:
    """A resource's name, the URN's last part (urn:pulumi:STACK::PROJECT::TYPE::NAME)."""
    return urn.rsplit("::", 1)[-1]


class PlanMocks(pulumi.runtime.Mocks):
    """Records every custom resource the program registers."""

    def __init__(self, project: str) -> None:
        self.project = project
        self.resources: list[PlannedResource] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[Any, Any]]:
        inputs = _plain(dict(args.inputs))
        if getattr(args, "custom", True):
            self.resources.append(PlannedResource(args.typ, args.name, inputs))
        state = {**inputs, **_computed_state(args.typ, inputs, self.project)}
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]] | None]:
        if args.token == "gcp:organizations/getProject:getProject":
            return {"number": MOCK_PROJECT_NUMBER, "projectId": args.args.get("projectId", self.project)}, []
        if args.token == DOCKER_IMAGE_TOKEN:
            return stand_in_docker_image(args.args), []
        if args.token == STORAGE_AGENT_TOKEN:
            email = f"service-{MOCK_PROJECT_NUMBER}@{service_agent_domain('storage.googleapis.com')}"
            return {"emailAddress": email, "member": f"serviceAccount:{email}", "project": self.project}, []
        return {}, []


def stand_in_docker_image(args: Mapping[str, Any]) -> dict[str, str]:
    """What Artifact Registry's getDockerImage answers for an image named by tag, offline: the
    image by a digest derived from its name (a plan reaches no registry; `pulumi up` asks it)."""
    project, location = str(args.get("project")), str(args.get("location"))
    repository, image_name = str(args.get("repositoryId")), str(args.get("imageName"))
    image = image_name.partition(":")[0]
    named = f"{location}-docker.pkg.dev/{project}/{repository}/{image_name}"
    digest = "sha256:" + hashlib.sha256(f"{STAND_IN_DIGEST_SEED}{named}".encode()).hexdigest()
    return {
        "project": project,
        "location": location,
        "repositoryId": repository,
        "imageName": image_name,
        "name": f"projects/{project}/locations/{location}/repositories/{repository}/dockerImages/{image}@{digest}",
        "selfLink": f"{location}-docker.pkg.dev/{project}/{repository}/{image}@{digest}",
    }


def engine_config(config: Mapping[str, Any]) -> dict[str, str]:
    """Config values as the Pulumi engine hands them to a program: strings, objects as JSON."""
    return {key: value if isinstance(value, str) else json.dumps(value) for key, value in config.items()}


def run_plan(stack: str, raw_config: Mapping[str, Any], secret_keys: frozenset[str] = frozenset()) -> Plan:
    """Run ``__main__.py`` once for ``stack`` under mocks, with the stack file's ``config`` map.

    The program parses, validates, resolves and prices the stack as `pulumi up` would; the
    plan takes the resources it registers, its outputs, and the resolved stack and boot
    files it built (handed over by :func:`trainstack.cloud.program.runs_observed`). ``secret_keys`` are the config keys the
    engine would mark secret (`pulumi config set --secret`), their values given decrypted.
    Invalid config ends the program as it ends `pulumi up`: its problems on stderr, then
    :class:`ProgramExit`."""
    project = raw_config.get("gcp:project")
    mocks = PlanMocks(project if isinstance(project, str) else "")
    monitor = OrderingMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project="trainstack", stack=stack, preview=True, monitor=monitor)
    set_program_config(engine_config(raw_config), secret_keys)

    def program() -> None:
        runpy.run_path(str(PROGRAM), run_name="__pulumi__")

    # A plan allocates many small, long-lived objects (every Output of every resource);
    # the cyclic collector rescanned them all again and again, which made a 512-worker
    # plan grow faster than linearly. Nothing here needs collecting before the plan ends.
    collecting = gc.isenabled()
    gc.disable()
    try:
        with runs_observed() as runs:
            run_until_settled(program)
    except SystemExit as exit_:
        raise ProgramExit(exit_.code if isinstance(exit_.code, int) else 1) from None
    finally:
        if collecting:
            gc.enable()
    [run] = runs
    resolved = run.stack
    # Registration order depends on the event loop; a sorted plan reads and diffs the same every run.
    resources = sorted(mocks.resources, key=lambda r: (r.type, r.name))
    return Plan(
        stack=stack,
        resources=resources,
        resolved=resolved,
        boot=run.boot,
        cost=cost_report(resolved),
        outputs=_resolved_outputs(),
        notes=plan_notes(resolved),
        waits_for=monitor.waits_for(),
    )


# Google's monthly estimates count 730 hours a month.
HOURS_PER_MONTH = 730


# Why the TPU VM's release role is bound on the project, not on its own node.
TPU_RELEASE_SCOPE = (
    "the TPU VM's account can get, stop and delete every TPU node of the project, not only its own: Cloud TPU "
    "has no per-node IAM policy, and IAM Conditions' resource attributes (resource.name) are not recognised by "
    "tpu.googleapis.com (https://cloud.google.com/iam/docs/conditions-resource-attributes lists the services "
    "that do), so the grant cannot be narrowed to this node; no other machine runs as this account"
)


def joined_network_notes(stack: ResolvedStack) -> list[str]:
    """What a stack that joins an existing network (trainstack:network) relies on the network's
    owners for, and, with ``firewall: host``, the rules they must have."""
    from trainstack.cloud.components.network import host_firewall_rules

    joined = stack.network
    if joined is None:
        return []
    notes = [
        f"network: the machines join {joined.subnetwork} (project {joined.host_project}); the stack creates no "
        "network, subnetwork, router or Cloud NAT. The subnetwork needs Private Google Access and egress to the "
        "package index (or storage.wheelhouse), and the stack's service accounts and Google's Compute Engine and "
        "Notebooks service agents of project "
        f"{stack.project} need roles/compute.networkUser on it (docs/deploying.md#inside-a-landing-zone)"
    ]
    rules = host_firewall_rules(stack)
    if rules:
        notes.append(
            f"network: firewall: host: the stack creates no firewall rule; {joined.network} must have: "
            + "; ".join(rules)
        )
    return notes


def encryption_notes(stack: ResolvedStack) -> list[str]:
    """What a stack with a customer-managed key (trainstack:encryption) encrypts with it, what
    it does not, and, with ``grants: key_admins``, the grants the key's admins must make."""
    from trainstack.cloud.components.encryption import KEY_USER_ROLE, TPU_DISK_NOTE, key_admin_grants

    encryption = stack.encryption
    if encryption is None:
        return []
    encrypted = ["the bucket", "the registry"]
    encrypted += ["the cluster's boot disks"] if stack.cluster is not None else []
    encrypted += ["the notebook's boot and data disks"] if stack.notebook is not None else []
    notes = [f"encryption: {encryption.kms_key} encrypts " + ", ".join(encrypted)]
    if stack.tpu is not None:
        notes.append(f"encryption: {TPU_DISK_NOTE}")
    agents = key_admin_grants(stack)
    if agents:
        notes.append(
            f"encryption: grants: key_admins: the stack grants nothing on the key; before `pulumi up` its admins must "
            f"grant {KEY_USER_ROLE} on it to " + "; ".join(agents) + " (PROJECT_NUMBER: `gcloud projects describe "
            f"{stack.project} --format='value(projectNumber)'`)"
        )
    elif encryption.grants == "stack":
        notes.append(
            f"encryption: the stack grants {KEY_USER_ROLE} on the key to the service agents that use it: "
            "`pulumi up` needs cloudkms.cryptoKeys.setIamPolicy on the key (or set grants: key_admins)"
        )
    return notes


def plan_notes(stack: ResolvedStack) -> list[str]:
    notes = placeholder_notes(stack) + [f"warning: {w}" for w in stack_warnings(stack)]
    notes += joined_network_notes(stack)
    notes += encryption_notes(stack)
    tpu = stack.tpu
    if tpu is not None and not tpu.on_finish_chosen:
        why = "a Spot TPU cannot be started again once stopped" if tpu.spot else "it stops billing for the TPU"
        notes.append(f"tpu.on_finish is not set: the TPU VM will {tpu.on_finish} itself when the job ends ({why})")
    machines = stack.cluster is not None or stack.tpu is not None
    monthly = None if stack.hourly_usd is None else f"${stack.hourly_usd * HOURS_PER_MONTH:,.0f}"
    if machines and stack.job is None:
        notes.append(
            "no job: the machines boot ready (python environment installed, TF_CONFIG in "
            "/var/lib/trainstack/tf_config.json and login shells) and start no trainer; "
            f"left running, the stack costs {monthly or 'an unknown amount'} a month ({HOURS_PER_MONTH} h)"
        )
    if stack.cluster is not None and stack.cluster.max_run_seconds is None:
        notes.append(
            "cluster.max_run_hours is null (acknowledged): no run-time cap; the cluster bills until it is stopped "
            f"or `pulumi destroy` runs: {monthly or 'an unknown amount'} a month at the hourly total below"
        )
    if stack.job is not None and stack.job.image is not None:
        notes.append(f"the job runs the image {stack.job.image.uri} with Docker on every node")
        if stack.job.image.tag is not None:
            notes.append(
                f"job.image is named by tag: `pulumi up` resolves {stack.job.image.uri} to its digest in Artifact "
                "Registry and every machine pulls that digest; this plan reaches no registry, so the digest it "
                "shows is a stand-in derived from the image's name"
            )
    elif stack.job is not None and stack.job.package is not None and not stack.job.builtin:
        notes.append(
            f"the job runs `python -m {stack.job.package.module}` from {stack.job.package.display_source} "
            f"(uploaded as {stack.job.package.object_name})"
        )
    if stack.job is not None and stack.job.requirements is not None:
        notes.append(requirements_note(stack.job.requirements))
    if stack.job is not None and stack.job.env:
        shown = ", ".join(f"{name}={shorten(value)}" for name, value in stack.job.env)
        notes.append(f"the job's code runs with these environment variables (job.env): {shown}")
    if stack.tpu is not None:
        notes.append(TPU_RELEASE_SCOPE)
    access = stack.access
    if access is not None and access.members and stack.tpu is not None:
        notes.append(
            "access: TPU VMs have no per-VM IAM, so access.members get no login to the TPU VM (that would be "
            "project-wide); grant roles/tpu.viewer, roles/compute.osLogin and roles/iap.tunnelResourceAccessor "
            "on the project yourself if you accept that"
        )
    if not stack.storage.delete_on_destroy:
        notes.append(
            "the bucket is protected: `pulumi destroy --exclude-protected` removes everything else and leaves it"
        )
    return notes


def _resolved_outputs() -> dict[str, Any]:
    root = pulumi.runtime.get_root_resource()
    exported = getattr(root, "outputs", {}) if root is not None else {}
    return {key: _plain(sync_await(pulumi.Output.from_input(value).future())) for key, value in exported.items()}
