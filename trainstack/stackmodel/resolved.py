"""The stack resolved once: every fact its consumers need, derived from config and catalog.

A validated :class:`~trainstack.stackmodel.schema.StackConfig` says what the user asked for; a
:class:`ResolvedStack` says what that means on Google Cloud: each node's name, effective
GPUs (built-in ones included), image, NIC, boot disk type and price, the cluster's strategy
and TF_CONFIG cluster, the bucket and job directory. The components, the boot scripts, the
cost report and the plan read this model; none of them calls back into the rules or the
catalog, so they cannot disagree about what a stack means.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import trainstack_contract as contract
from trainstack.catalog import Catalog, Image, load_catalog
from trainstack.jobcode.package import (
    CodePackage,
    ExtraRequirements,
    ImageRef,
    Wheelhouse,
    as_installed,
    builtin_package,
    load_package,
    load_requirements,
    load_wheelhouse,
    project_path,
    resolve_image,
)
from trainstack.stackmodel.derived import (
    CheckedFacts,
    effective_accelerator,
    is_reservation_bound,
    requirement_constraints,
    resolved_strategy,
)
from trainstack.stackmodel.naming import NOTEBOOK_ACCOUNT_SUFFIX, TPU_ACCOUNT_SUFFIX, TRAINING_ACCOUNT_SUFFIX
from trainstack.stackmodel.places import JobPlaces, job_places
from trainstack.stackmodel.prices import machine_hourly_usd, tpu_hourly_usd
from trainstack.stackmodel.schema import (
    DEFAULT_IDLE_MINUTES,
    Accelerator,
    Access,
    Budget,
    CapacityChoice,
    Encryption,
    ExistingNetwork,
    NodeSpec,
    StackConfig,
    Storage,
)
from trainstack.stackmodel.secrets import JobSecret
from trainstack_contract.metadata import OnFinish

SECONDS_PER_HOUR = 3600


@dataclass(frozen=True)
class NodeCost:
    name: str
    description: str
    usd_per_hour: float | None  # None: the catalog has no price for some part of it


@dataclass(frozen=True)
class ResolvedJob:
    """The job's code and where it writes: a package (the built-in trainer is one) or an image."""

    name: str
    mode: contract.JobMode
    builtin: bool
    package: CodePackage | None
    requirements: ExtraRequirements | None
    image: ImageRef | None
    job_dir: str
    # (environment variable, Secret Manager secret id) for each secret the job needs.
    secrets: tuple[tuple[str, str], ...] = ()
    # (name, value) of each variable job.env sets for the job's code, in the stack file's order.
    env: tuple[tuple[str, str], ...] = ()
    # The bucket of a job directory the stack names itself (job.job_dir), not its own.
    job_dir_bucket: str | None = None
    # Flags the stack sets for the job's code, each with the key that sets them.
    reserved_flags: dict[str, str] = field(default_factory=dict)
    # Where it reads and writes in Cloud Storage besides its directory (trainstack.stackmodel.places).
    places: JobPlaces = field(default_factory=JobPlaces)

    @property
    def job_dir_prefix(self) -> str | None:
        """The folder of job.job_dir in its bucket (``flowers/run1``), None for jobs/<name>."""
        match = contract.EXTERNAL_JOB_DIR.fullmatch(self.job_dir) if self.job_dir_bucket else None
        return match["prefix"] if match else None


@dataclass(frozen=True)
class FlexStart:
    """What Compute Engine requires of a flex-start VM (catalog: capacity_rules.csv)."""

    # At the end of its run: STOP or DELETE, as the cluster's on_finish says.
    termination_action: str
    automatic_restart: bool
    max_run_hours: float | None
    # The reservations it may consume: none (NO_RESERVATION).
    reservation_affinity: str = "NO_RESERVATION"


class OnCapacity:
    """A machine that says how it gets its machine (contract.CAPACITIES)."""

    capacity: contract.Capacity

    @property
    def spot(self) -> bool:
        return self.capacity == contract.SPOT


@dataclass(frozen=True)
class ClusterNode(OnCapacity):
    """One VM of the training cluster: the chief, a worker or a parameter server."""

    role: str
    index: int
    name: str  # the contract's node name: chief, worker-0, ps-1
    vm_name: str
    machine_type: str
    accelerator: Accelerator | None  # what the VM really gets, built-in GPUs included
    # True for N1, which takes attached GPUs; A2/A3/G2 machine types bring theirs.
    attach_accelerator: bool
    disk_gb: int
    boot_disk_type: str
    nic_type: str | None
    image: Image
    cost: NodeCost
    # How the VM gets its machine (contract.CAPACITIES), and the reservation it consumes
    # (None with capacity reservation: any matching one).
    capacity: contract.Capacity = contract.ON_DEMAND
    reservation: str | None = None
    # A reservation node bound to a future reservation's lifetime (RESERVATION_BOUND).
    reservation_bound: bool = False
    # Set for a flex-start node alone.
    flex_start: FlexStart | None = None


@dataclass(frozen=True)
class ResolvedCluster:
    strategy: str
    nodes: tuple[ClusterNode, ...]
    # TF_CONFIG's cluster; empty for single-machine strategies, which need none.
    tf_cluster: dict[str, list[str]]
    # Project metadata key holding tf_cluster; unique per stack in a project.
    tf_cluster_metadata_key: str
    trainer_args: tuple[str, ...]
    on_finish: OnFinish
    # TF_CONFIG's port on every node, the one the firewall opens between them.
    port: int
    # How long a node waits for a silent chief or peer before it takes it for dead.
    heartbeat_timeout_seconds: int
    # How many times the chief starts a preempted Spot peer again.
    max_restarts: int
    # Compute Engine's run-time cap in hours; None only when the stack acknowledged running unbounded.
    max_run_hours: float | None
    # How long the nodes wait for a queued job before they apply on_finish; None: the stack runs
    # no queue (ResolvedStack.runs_queue) and the nodes' metadata says nothing of it.
    idle_seconds: int | None = None

    @property
    def chief(self) -> ClusterNode:
        return self.nodes[0]

    @property
    def recoverable_nodes(self) -> tuple[ClusterNode, ...]:
        """The nodes the chief starts again when Compute Engine preempts them: its Spot peers
        (a Spot chief has no one to watch it)."""
        return tuple(node for node in self.nodes[1:] if node.spot)

    @property
    def training_port(self) -> int | None:
        """The port nodes talk on, only where they talk (a TF_CONFIG cluster)."""
        return self.port if self.tf_cluster else None

    @property
    def max_run_seconds(self) -> int | None:
        """Compute Engine's run-time cap; None only when the stack acknowledged running unbounded."""
        hours = self.max_run_hours
        return None if hours is None else int(hours * SECONDS_PER_HOUR)

    @property
    def ps_count(self) -> int:
        return sum(1 for node in self.nodes if node.role == contract.PS)


@dataclass(frozen=True)
class ResolvedTpu(OnCapacity):
    name: str
    vm_name: str
    accelerator_type: str
    runtime_version: str
    # The runtime's TensorFlow, major.minor: the tf-keras line the boot script adds.
    tensorflow_minor: str
    on_finish: OnFinish
    # False: tpu.on_finish was left out and on_finish is the default for its kind (spot or not).
    on_finish_chosen: bool
    max_run_seconds: int
    service_agent_role: str
    trainer_args: tuple[str, ...]
    cost: NodeCost
    # As ResolvedCluster.idle_seconds.
    idle_seconds: int | None = None
    # As ClusterNode.capacity; a TPU VM takes on_demand, spot or reservation (any matching one).
    capacity: contract.Capacity = contract.ON_DEMAND


@dataclass(frozen=True)
class ResolvedNotebook:
    instance_name: str
    machine_type: str
    accelerator: Accelerator | None  # built-in GPUs included, as for cluster nodes
    # Workbench names GPUs by enum (NVIDIA_TESLA_T4) where Compute Engine uses nvidia-tesla-t4.
    workbench_accelerator_type: str | None
    image: Image
    disk_gb: int
    # Compute Engine's name (pd-balanced, what the price is for); Workbench takes it as an enum.
    boot_disk_type: str
    idle_timeout_minutes: int
    cost: NodeCost


@dataclass(frozen=True)
class ResolvedStack:
    # The stack's own name (stacks/Pulumi.<stack>.yaml); ``name`` prefixes its resources.
    stack: str
    name: str
    project: str
    region: str
    zone: str
    labels: dict[str, str]
    bucket_name: str
    # None: the machines boot ready and run no job.
    job: ResolvedJob | None
    # The bucket of job.data when it is not the stack's own (the nodes get read access).
    external_data_bucket: str | None
    cluster: ResolvedCluster | None
    tpu: ResolvedTpu | None
    notebook: ResolvedNotebook | None
    costs: tuple[NodeCost, ...] = field(default=())
    # Wheels the machines install from instead of the package index (storage.wheelhouse).
    wheelhouse: Wheelhouse | None = None
    # The bucket's versioning, retention and deletion; the budget and its alerts; who may use
    # the stack's machines: taken as the stack file states them.
    storage: Storage = field(default_factory=Storage)
    budget: Budget | None = None
    access: Access | None = None
    # A network the machines join (a Shared VPC's subnetwork); None: the stack creates its own.
    network: ExistingNetwork | None = None
    # A customer-managed key for the bucket, the disks and the registry; None: Google's keys.
    encryption: Encryption | None = None
    # The job's secret values by variable, as Pulumi decrypts them (None offline); their repr hides them.
    secret_values: dict[str, JobSecret] = field(default_factory=dict)
    # The cluster's nodes and the TPU VM run a job queue (`trainstack submit`), then idle out: the
    # stack has a job, or sets idle_minutes (see :func:`stack_runs_queue`).
    runs_queue: bool = False

    @property
    def bucket_uri(self) -> str:
        return f"gs://{self.bucket_name}"

    @property
    def job_dir(self) -> str | None:
        return self.job.job_dir if self.job else None

    @property
    def repository_id(self) -> str:
        """The stack's own Artifact Registry Docker repository."""
        return repository_id(self.name)

    @property
    def training_account_email(self) -> str:
        return f"{self.name}-{TRAINING_ACCOUNT_SUFFIX}@{self.project}.iam.gserviceaccount.com"

    @property
    def machine_accounts(self) -> list[str]:
        """The service accounts the stack's machines run as (cluster nodes, TPU VM, notebook)."""
        suffixes = [TRAINING_ACCOUNT_SUFFIX] if self.cluster else []
        suffixes += [TPU_ACCOUNT_SUFFIX] if self.tpu else []
        suffixes += [NOTEBOOK_ACCOUNT_SUFFIX] if self.notebook else []
        return [f"{self.name}-{suffix}@{self.project}.iam.gserviceaccount.com" for suffix in suffixes]

    @property
    def registry_url(self) -> str:
        """Where the stack's images live: LOCATION-docker.pkg.dev/PROJECT/REPOSITORY."""
        return registry_url(self.region, self.project, self.repository_id)

    @property
    def external_image(self) -> ImageRef | None:
        """The job's image when it lives outside the stack's repository (the nodes need a
        reader binding on that repository too)."""
        image = self.job.image if self.job else None
        if image is None or (image.location, image.project, image.repository) == (
            self.region,
            self.project,
            self.repository_id,
        ):
            return None
        return image

    @property
    def idle_seconds(self) -> int | None:
        """How long the machines that run the queue wait for a job before they apply on_finish:
        the TPU VM's where there is one (what `trainstack local` runs), else the cluster's; None
        when the stack runs no queue."""
        machines = self.tpu or self.cluster
        return machines.idle_seconds if machines is not None else None

    @property
    def hourly_usd(self) -> float | None:
        """The whole stack's price per running hour; None when any part has no price."""
        if any(c.usd_per_hour is None for c in self.costs):
            return None
        return round(sum(c.usd_per_hour or 0.0 for c in self.costs), 4)

    @property
    def vm_names(self) -> list[str]:
        names = [n.vm_name for n in self.cluster.nodes] if self.cluster else []
        names += [self.tpu.vm_name] if self.tpu else []
        names += [self.notebook.instance_name] if self.notebook else []
        return names


def describe_capacity(capacity: str, reservation: str | None = None, bound: bool = False) -> str:
    """How a node's price line names its capacity: nothing on demand, " (spot)" as before."""
    if capacity == contract.ON_DEMAND:
        return ""
    if capacity == contract.RESERVATION and bound:
        return f" (reservation-bound to future reservation {reservation})"
    if capacity == contract.RESERVATION:
        return f" (reservation {reservation})" if reservation else " (any matching reservation)"
    return f" ({capacity.replace('_', '-')})"


def describe_machine(
    machine_type: str,
    accelerator: Accelerator | None,
    spot: bool,
    capacity: str | None = None,
    reservation: str | None = None,
    bound: bool = False,
) -> str:
    gpus = f" + {accelerator.count} x {accelerator.type}" if accelerator else ""
    how = describe_capacity(capacity or (contract.SPOT if spot else contract.ON_DEMAND), reservation, bound)
    return f"{machine_type}{gpus}{how}"


# --- Names and arguments ---------------------------------------------------------------------
# The training nodes' service account is <stack>-train (TRAINING_ACCOUNT_SUFFIX; components.stack
# creates it; `export vertex` runs Vertex AI jobs as it).


def repository_id(stack_name: str) -> str:
    return f"{stack_name}-images"


def registry_url(location: str, project: str, repository_id: str) -> str:
    """An Artifact Registry Docker repository's address
    (https://cloud.google.com/artifact-registry/docs/docker/names)."""
    return f"{location}-docker.pkg.dev/{project}/{repository_id}"


def internal_hostname(vm_name: str, zone: str, project: str) -> str:
    """Compute Engine's zonal internal DNS name, resolvable from every VM of the network."""
    return f"{vm_name}.{zone}.c.{project}.internal"


def trainer_args(cfg: StackConfig, strategy: str) -> tuple[str, ...]:
    """The flags for this stack's job (the boot script adds the job directory): the built-in
    trainer's from the job keys, a team's code only its own job.args."""
    job = cfg.settings.job
    if job is None:
        return ()
    if not job.builtin:
        return tuple(job.args)
    flags = contract.FLAGS
    args = [
        flags.model, job.model,
        flags.data, job.data,
        flags.epochs, str(job.epochs),
        flags.batch_size_per_replica, str(job.batch_size_per_replica),
        flags.image_size, str(job.image_size),
        flags.strategy, strategy,
    ]  # fmt: skip
    if job.steps_per_epoch is not None:
        args += [flags.steps_per_epoch, str(job.steps_per_epoch)]
    if job.save_every_minutes is not None:
        args += [flags.save_every_seconds, str(job.save_every_minutes * SECONDS_PER_MINUTE)]
    if strategy == contract.TPU:
        args += [flags.tpu, contract.LOCAL_TPU]
    return (*args, *job.args)


def one_node_refusal(stack: ResolvedStack) -> str | None:
    """Why the stack's machines cannot each run a job or trial alone (--one-node), or None."""
    cluster = stack.cluster
    if cluster is not None and cluster.strategy == contract.PARAMETER_SERVER:
        return (
            f"--one-node: stack {stack.stack} trains with parameter servers, whose nodes are not alike "
            f"(a chief, workers, parameter servers); one-node jobs need a cluster of alike nodes "
            f"({contract.MULTI_WORKER_MIRRORED}) or one machine"
        )
    return None


def single_machine_args(args: Sequence[str]) -> tuple[str, ...]:
    """The built-in trainer's arguments for one machine of a multi-worker cluster (a one-node
    job, a one-machine trial): the strategy chosen for the machine (auto) in place of the
    cluster's multi-worker one."""
    strategy = contract.FLAGS.strategy
    return tuple(
        contract.AUTO
        if index > 0 and args[index - 1] == strategy and value == contract.MULTI_WORKER_MIRRORED
        else value
        for index, value in enumerate(args)
    )


def _external_data_bucket(cfg: StackConfig, own_bucket: str) -> str | None:
    job = cfg.settings.job
    if job is None or not job.builtin:
        return None
    data = job.data
    if not data.startswith("gs://"):
        return None
    bucket = data.removeprefix("gs://").split("/", 1)[0]
    return None if bucket == own_bucket else bucket


# --- Resolution ----------------------------------------------------------------------------------
SECONDS_PER_MINUTE = 60


def stack_runs_queue(cfg: StackConfig) -> bool:
    """Whether the stack's cluster or TPU VM run queued jobs: they have a job of their own, or
    the stack file sets idle_minutes (machines that boot ready, waiting for jobs)."""
    settings = cfg.settings
    if settings.cluster is None and settings.tpu is None:
        return False
    idle_set = any(m is not None and m.idle_minutes is not None for m in (settings.cluster, settings.tpu))
    return settings.job is not None or idle_set


def machine_idle_seconds(cfg: StackConfig, idle_minutes: int | None) -> int | None:
    """The idle wait of a machine whose section sets ``idle_minutes``; None without a queue."""
    if not stack_runs_queue(cfg):
        return None
    return (DEFAULT_IDLE_MINUTES if idle_minutes is None else idle_minutes) * SECONDS_PER_MINUTE


def _cluster_node(
    cfg: StackConfig,
    catalog: Catalog,
    role: str,
    index: int,
    spec: NodeSpec | None,
    pool: CapacityChoice,
    machine_type: str,
    disk_gb: int,
) -> ClusterNode:
    machine = catalog.machine_types[machine_type]
    accelerator = effective_accelerator(machine_type, spec.accelerator if spec else None, catalog)
    name = contract.node_name(role, index)
    vm_name = contract.vm_name(cfg.name, name)
    capacity, spot = pool.effective_capacity, pool.is_spot
    bound = is_reservation_bound(pool, machine_type, catalog)
    # Flex-start VMs are priced at Dynamic Workload Scheduler's SKUs, and reserved ones at the
    # on-demand rates a reservation bills (trainstack.stackmodel.cost says what of both).
    price = machine_hourly_usd(
        catalog,
        machine_type,
        accelerator,
        spot,
        disk_gb,
        machine.boot_disk_type,
        cfg.region,
        flex_start=capacity == contract.FLEX_START,
    )
    return ClusterNode(
        role=role,
        index=index,
        name=name,
        vm_name=vm_name,
        machine_type=machine_type,
        accelerator=accelerator,
        attach_accelerator=accelerator is not None and not machine.builtin_gpu,
        disk_gb=disk_gb,
        boot_disk_type=machine.boot_disk_type,
        nic_type=machine.nic_type,
        image=catalog.images["gpu" if accelerator is not None else "cpu"],
        cost=NodeCost(
            vm_name, describe_machine(machine_type, accelerator, spot, capacity, pool.reservation, bound), price
        ),
        capacity=capacity,
        reservation=pool.reservation,
        reservation_bound=bound,
        flex_start=_flex_start(catalog, cfg.settings.cluster.on_finish if cfg.settings.cluster else "delete")
        if capacity == contract.FLEX_START
        else None,
    )


def _flex_start(catalog: Catalog, on_finish: str) -> FlexStart:
    """A flex-start node ends its run as the cluster's other nodes end theirs: deleted with
    on_finish: delete, else stopped (validate checked the catalog allows it)."""
    rules = catalog.capacity
    return FlexStart(
        "DELETE" if on_finish == "delete" else "STOP",
        rules.flex_start_automatic_restart,
        rules.flex_start_max_run_hours,
        rules.flex_start_reservation_affinity,
    )


def _resolve_cluster(cfg: StackConfig, catalog: Catalog, facts: CheckedFacts) -> ResolvedCluster | None:
    cluster = cfg.settings.cluster
    if cluster is None:
        return None
    chief = cluster.chief
    nodes = [_cluster_node(cfg, catalog, contract.CHIEF, 0, chief, chief, chief.machine_type, chief.disk_gb)]
    if cluster.workers is not None:
        pool = cluster.workers
        nodes += [
            _cluster_node(cfg, catalog, contract.WORKER, i, pool, pool, pool.machine_type, pool.disk_gb)
            for i in range(pool.count)
        ]
    if cluster.parameter_servers is not None:
        ps = cluster.parameter_servers
        nodes += [
            _cluster_node(cfg, catalog, contract.PS, i, None, ps, ps.machine_type, ps.disk_gb) for i in range(ps.count)
        ]
    strategy = facts.strategy or resolved_strategy(cluster, catalog)
    tf_cluster: dict[str, list[str]] = {}
    if strategy not in contract.SINGLE_MACHINE_STRATEGIES:
        zone, project = cfg.settings.zone, cfg.project
        tf_cluster = contract.tf_cluster(
            (n.role, f"{internal_hostname(n.vm_name, zone, project)}:{cluster.port}") for n in nodes
        )
    return ResolvedCluster(
        strategy=strategy,
        nodes=tuple(nodes),
        tf_cluster=tf_cluster,
        tf_cluster_metadata_key=f"trainstack-{cfg.name}-cluster",
        trainer_args=trainer_args(cfg, strategy),
        on_finish=cluster.on_finish,
        port=cluster.port,
        heartbeat_timeout_seconds=cluster.heartbeat_timeout_seconds,
        max_restarts=cluster.max_restarts,
        max_run_hours=cluster.max_run_hours,
        idle_seconds=machine_idle_seconds(cfg, cluster.idle_minutes),
    )


def _resolve_tpu(cfg: StackConfig, catalog: Catalog) -> ResolvedTpu | None:
    tpu = cfg.settings.tpu
    if tpu is None:
        return None
    runtime = catalog.tpu_runtimes[tpu.runtime_version]
    vm_name = contract.vm_name(cfg.name, contract.TPU_NODE)
    description = f"{tpu.accelerator_type}{describe_capacity(tpu.effective_capacity)}"
    return ResolvedTpu(
        name=contract.TPU_NODE,
        vm_name=vm_name,
        accelerator_type=tpu.accelerator_type,
        runtime_version=tpu.runtime_version,
        tensorflow_minor=".".join(runtime.tensorflow_version.split(".")[:2]),
        on_finish=tpu.effective_on_finish,
        on_finish_chosen=tpu.on_finish is not None,
        max_run_seconds=round(tpu.max_run_hours * SECONDS_PER_HOUR),
        service_agent_role=tpu.service_agent_role,
        trainer_args=trainer_args(cfg, contract.TPU),
        cost=NodeCost(vm_name, description, tpu_hourly_usd(catalog, tpu.accelerator_type, tpu.is_spot, cfg.region)),
        idle_seconds=machine_idle_seconds(cfg, tpu.idle_minutes),
        capacity=tpu.effective_capacity,
    )


# The notebook's boot disk type, the one the stack's other machines boot from.
WORKBENCH_DISK_TYPE = "pd-balanced"


def _resolve_notebook(cfg: StackConfig, catalog: Catalog) -> ResolvedNotebook | None:
    notebook = cfg.settings.notebook
    if notebook is None:
        return None
    accelerator = effective_accelerator(notebook.machine_type, notebook.accelerator, catalog)
    instance_name = contract.vm_name(cfg.name, contract.NOTEBOOK_NODE)
    price = machine_hourly_usd(
        catalog, notebook.machine_type, accelerator, False, notebook.disk_gb, WORKBENCH_DISK_TYPE, cfg.region
    )
    return ResolvedNotebook(
        instance_name=instance_name,
        machine_type=notebook.machine_type,
        accelerator=accelerator,
        workbench_accelerator_type=catalog.gpus[accelerator.type].workbench_type if accelerator else None,
        image=catalog.images["workbench"],
        disk_gb=notebook.disk_gb,
        boot_disk_type=WORKBENCH_DISK_TYPE,
        idle_timeout_minutes=notebook.idle_timeout_minutes,
        cost=NodeCost(instance_name, describe_machine(notebook.machine_type, accelerator, False), price),
    )


def _resolve_job(
    cfg: StackConfig, catalog: Catalog, bucket_uri: str, registry: str, facts: CheckedFacts
) -> ResolvedJob | None:
    job = cfg.settings.job
    if job is None:
        return None
    package = None
    if job.package is not None and job.module is not None:
        package = facts.package or load_package(project_path(job.package), job.module)
    elif job.builtin:
        package = builtin_package()
    requirements = None
    if job.requirements:
        source = project_path(job.package) if job.package is not None else None
        requirements = facts.requirements or as_installed(
            load_requirements(project_path(job.requirements), source), requirement_constraints(cfg, catalog)
        )
    job_dir = job.job_dir or contract.LAYOUT.job_dir(bucket_uri, job.name)
    return ResolvedJob(
        name=job.name,
        mode=job.mode,
        builtin=job.builtin,
        package=package,
        requirements=requirements,
        image=resolve_image(job.image, registry) if job.image is not None else None,
        job_dir=job_dir,
        secrets=tuple((env, secret_id(cfg.name, env)) for env in sorted(cfg.settings.secrets)),
        env=tuple(job.env.items()),
        job_dir_bucket=external["bucket"] if (external := _external_job_dir(job.job_dir)) else None,
        reserved_flags=dict(job.reserved_flags),
        places=job_places(job, job_dir, cfg.bucket_name)[0],
    )


def _external_job_dir(job_dir: str | None) -> re.Match[str] | None:
    return contract.EXTERNAL_JOB_DIR.fullmatch(job_dir) if job_dir is not None else None


def secret_id(stack_name: str, env: str) -> str:
    """A job secret's Secret Manager id: letters, digits, '_' and '-', unique per stack."""
    return f"{stack_name}-{env}"


def resolve_stack(cfg: StackConfig, catalog: Catalog | None = None, facts: CheckedFacts | None = None) -> ResolvedStack:
    """The resolved model of a stack that passed :func:`trainstack.stackmodel.feasibility.check_stack`;
    ``facts``: what those checks derived (:func:`~trainstack.stackmodel.feasibility.check_and_derive`),
    used as it is instead of being read or worked out again."""
    catalog = catalog or load_catalog()
    facts = facts or CheckedFacts()
    wheelhouse_path = cfg.settings.storage.wheelhouse
    bucket_name = cfg.bucket_name
    cluster = _resolve_cluster(cfg, catalog, facts)
    tpu = _resolve_tpu(cfg, catalog)
    notebook = _resolve_notebook(cfg, catalog)
    costs = [n.cost for n in cluster.nodes] if cluster else []
    costs += [tpu.cost] if tpu else []
    costs += [notebook.cost] if notebook else []
    return ResolvedStack(
        stack=cfg.stack,
        name=cfg.name,
        project=cfg.project,
        region=cfg.region,
        zone=cfg.settings.zone,
        labels=cfg.labels,
        bucket_name=bucket_name,
        job=_resolve_job(
            cfg, catalog, f"gs://{bucket_name}", registry_url(cfg.region, cfg.project, repository_id(cfg.name)), facts
        ),
        external_data_bucket=_external_data_bucket(cfg, bucket_name),
        cluster=cluster,
        tpu=tpu,
        notebook=notebook,
        costs=tuple(costs),
        wheelhouse=(facts.wheelhouse or load_wheelhouse(project_path(wheelhouse_path))) if wheelhouse_path else None,
        storage=cfg.settings.storage,
        budget=cfg.settings.budget,
        access=cfg.settings.access,
        network=cfg.settings.network,
        encryption=cfg.settings.encryption,
        secret_values=dict(cfg.settings.secrets),
        runs_queue=stack_runs_queue(cfg),
    )


# The shipped stacks' stand-ins for a user's own values: fine offline, refused by Google.
PLACEHOLDERS = {
    "gcp:project": "your-gcp-project",
    "trainstack:budget.billing_account": "012345-6789AB-CDEF01",
}


def placeholder_notes(stack: ResolvedStack) -> list[str]:
    budget = stack.budget
    values = {
        "gcp:project": stack.project,
        "trainstack:budget.billing_account": budget.billing_account if budget else None,
    }
    return [
        f"placeholder: {key} is {placeholder}, an example value; replace it with your own before `pulumi up`"
        for key, placeholder in PLACEHOLDERS.items()
        if values[key] == placeholder
    ]


def stack_warnings(stack: ResolvedStack) -> list[str]:
    """Valid choices a user should know the cost of: `validate` and `plan` both show them."""
    warnings = []
    if stack.cluster is not None and len(stack.cluster.nodes) > 1:
        chief = next(n for n in stack.cluster.nodes if n.role == "chief")
        if chief.spot:
            warnings.append(
                "cluster.chief.spot is true: when the chief is preempted the whole job ends (the other nodes take it "
                "for dead after heartbeat_timeout_seconds); keep the chief on demand and put the workers on Spot"
            )
    return warnings
