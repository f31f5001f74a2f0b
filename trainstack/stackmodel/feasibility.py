"""Checks of a parsed stack against what Google Cloud offers (the catalog).

Each check returns problems that name the config key, the bad value and the valid choices,
so a user can fix the stack file before anything is created or billed.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainstack.base.errors import Problem, StackConfigError
from trainstack.catalog import Catalog, MachineType, N1GpuLimit, load_catalog, machine_family, unsupported_machines
from trainstack.jobcode.node_environment import Pin, cluster_pins, project_conflicts, requirements_file_conflicts
from trainstack.jobcode.package import (
    PROJECT_LAYOUT,
    CodeError,
    CodePackage,
    ExtraRequirements,
    Wheelhouse,
    as_installed,
    load_package,
    load_requirements,
    load_wheelhouse,
    misplaced_module,
    missing_package,
    package_layout,
    project_path,
)
from trainstack.jobcode.requirements_lock import Constraints, node_constraints, tpu_constraints
from trainstack.stackmodel.configmap import parse_stack_config
from trainstack.stackmodel.naming import NAMESPACE
from trainstack.stackmodel.places import job_places
from trainstack.stackmodel.schema import (
    Accelerator,
    CapacityChoice,
    Cluster,
    Job,
    StackConfig,
    Tpu,
)
from trainstack.stackmodel.siblings import stack_buckets
from trainstack_contract import (
    AUTO,
    EXTERNAL_JOB_DIR,
    FLEX_START,
    LAYOUT,
    MIRRORED,
    MULTI_WORKER_MIRRORED,
    ON_DEMAND,
    ONE_DEVICE,
    PARAMETER_SERVER,
    RESERVATION,
    SPOT,
    auto_strategy,
)


def _join(items: Iterable[object]) -> str:
    return ", ".join(str(i) for i in items)


def _region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def resolved_strategy(cluster: Cluster, catalog: Catalog) -> str:
    """The cluster's strategy, ``auto`` resolved by the contract's rule."""
    if cluster.strategy != AUTO:
        return cluster.strategy
    chief_gpus = effective_accelerator(cluster.chief.machine_type, cluster.chief.accelerator, catalog)
    return auto_strategy(
        tpu=False,
        parameter_servers=cluster.ps_count,
        training_machines=1 + cluster.worker_count,
        devices_per_machine=chief_gpus.count if chief_gpus else 0,
    )


def effective_accelerator(machine_type: str, declared: Accelerator | None, catalog: Catalog) -> Accelerator | None:
    """The GPUs a VM really gets: the declared ones, or those built into an A2/A3/G2 machine type."""
    if declared is not None:
        return declared
    machine = catalog.machine_types.get(machine_type)
    if machine is not None and machine.builtin_gpu:
        return Accelerator(type=machine.builtin_gpu, count=machine.builtin_gpu_count)
    return None


def check_machine(
    key: str,
    machine_type: str,
    accelerator: Accelerator | None,
    zone: str,
    catalog: Catalog,
    capacity: str = ON_DEMAND,
) -> list[Problem]:
    """A machine type with its GPUs: known, attachable in that count, offered in the zone, and
    to be had with ``capacity``."""
    machine = catalog.machine_types.get(machine_type)
    refused = unsupported_machines().get(machine_family(machine_type))
    if machine is None and refused is not None:
        return [Problem(f"{key}.machine_type", f"{machine_type} ({refused.gpu}) is not supported: {refused.reason}")]
    if machine is None:
        close = difflib.get_close_matches(machine_type, list(catalog.machine_types), n=5, cutoff=0.5)
        hint = (
            f"did you mean: {_join(close)}"
            if close
            else f"known series: {_join(sorted({m.series for m in catalog.machine_types.values()}))}"
        )
        return [Problem(f"{key}.machine_type", f"unknown machine type {machine_type!r}; {hint}")]
    problems = _check_machine_capacity(key, machine, capacity, catalog)
    if machine.builtin_gpu:
        # Its GPUs come with it: the machine type itself must be offered in the zone.
        zones = catalog.machine_zones(machine_type)
        if zone not in zones:
            what = f"{machine_type} ({machine.builtin_gpu_count} x {machine.builtin_gpu})"
            problems.append(Problem(f"{key}.machine_type", _not_offered(what, zone, zones)))

    if accelerator is None:
        return problems
    accel_key = f"{key}.accelerator"
    gpu = catalog.gpus.get(accelerator.type)
    available = sorted(name for name, g in catalog.gpus.items() if not g.retired)
    if gpu is None:
        return [Problem(f"{accel_key}.type", f"unknown GPU type {accelerator.type!r}; valid types: {_join(available)}")]
    if gpu.retired:
        return [
            Problem(
                f"{accel_key}.type",
                f"{gpu.name} ({gpu.display_name}) is retired and no zone offers it ({gpu.note}); valid types: {_join(available)}",
            )
        ]

    if gpu.attach == "n1":
        problems += _check_n1_attachment(key, machine_type, accelerator, catalog)
    else:
        offering = sorted(
            (m for m in catalog.machine_types.values() if m.builtin_gpu == gpu.name),
            key=lambda m: (m.builtin_gpu_count, m.name),
        )
        if machine.builtin_gpu != gpu.name or machine.builtin_gpu_count != accelerator.count:
            choices = _join(f"{m.name} ({m.builtin_gpu_count})" for m in offering)
            problems.append(
                Problem(
                    accel_key,
                    f"{gpu.name} x{accelerator.count} does not fit {machine_type}: {gpu.name} comes built into its own machine types, "
                    f"pick the one with the count you want: {choices}",
                )
            )
    zones = catalog.gpu_zones.get(gpu.name, frozenset())
    if not machine.builtin_gpu and zone not in zones:
        # (A machine with built-in GPUs was checked against its own zones above.)
        problems.append(Problem(f"{accel_key}.type", _not_offered(gpu.name, zone, zones)))
    return problems


# --- Capacity: how each node gets its machine (catalog: capacity_rules.csv) -------------------
CAPACITY_RULES = "catalog: capacity_rules.csv"


def capacity_ways(machine: MachineType, catalog: Catalog) -> list[str]:
    """The capacities other than on demand that ``machine`` can be had with."""
    ways = [SPOT]
    if machine.series in catalog.capacity.flex_start_series:
        ways.append(FLEX_START)
    return [*ways, RESERVATION]


def _or_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def _check_machine_capacity(key: str, machine: MachineType, capacity: str, catalog: Catalog) -> list[Problem]:
    """``capacity`` for one machine type: on demand where Compute Engine allows it, flex-start
    on the series that take it."""
    if capacity == ON_DEMAND and not machine.on_demand_allowed:
        ways = _or_list(capacity_ways(machine, catalog))
        return [
            Problem(
                f"{key}.capacity",
                f"{machine.name} cannot be created on demand; get it with capacity: {ways} "
                f"(spot: true is capacity: spot), or pick another machine type",
            )
        ]
    rules = catalog.capacity
    if capacity == FLEX_START and machine.series not in rules.flex_start_series:
        return [
            Problem(
                f"{key}.capacity",
                f"flex_start: {machine.name} ({machine.series.upper()}) cannot be created with flex-start; machine series "
                f"that can: {_join(sorted(s.upper() for s in rules.flex_start_series))} ({CAPACITY_RULES})",
            )
        ]
    return []


def is_reservation_bound(pool: CapacityChoice, machine_type: str, catalog: Catalog) -> bool:
    """Whether a reservation node is reservation-bound: as the stack says, else as its machine
    type is reserved (catalog: reservation_bound_machine)."""
    if pool.effective_capacity != RESERVATION:
        return False
    if pool.reservation_bound is not None:
        return pool.reservation_bound
    return catalog.capacity.reservation_bound(machine_type) == "always"


def _check_reservation_bound(key: str, pool: Any, catalog: Catalog) -> list[Problem]:
    """A reservation-bound node: a machine type Google reserves that way, naming its reservation;
    an ordinary one: a machine type that can be reserved so."""
    if pool.effective_capacity != RESERVATION:
        return []
    kind = catalog.capacity.reservation_bound(pool.machine_type)
    bound = is_reservation_bound(pool, pool.machine_type, catalog)
    if bound and kind is None:
        machines = sorted(r.subject for r in catalog.capacity.rows if r.rule == "reservation_bound_machine")
        return [
            Problem(
                f"{key}.reservation_bound",
                f"true, but {pool.machine_type} is not reserved by future reservations (reservation-bound machine "
                f"types: {_join(machines)}); leave reservation_bound out ({CAPACITY_RULES})",
            )
        ]
    if not bound and kind == "always":
        return [
            Problem(
                f"{key}.reservation_bound",
                f"false, but {pool.machine_type}'s reserved capacity comes from future reservations alone (calendar "
                f"mode or AI Hypercomputer), whose VMs are reservation-bound; leave reservation_bound out ({CAPACITY_RULES})",
            )
        ]
    if bound and pool.reservation is None:
        return [
            Problem(
                f"{key}.reservation",
                f"not set, but the node is reservation-bound ({pool.machine_type}): a reservation-bound VM targets its "
                f"future reservation by name; set reservation: NAME (the reservation Compute Engine created for it)",
            )
        ]
    return []


def _check_cluster_capacity(cluster: Cluster, catalog: Catalog) -> list[Problem]:
    """What flex-start asks of the whole cluster: every node flex-start, a run duration within
    its bound, and an on_finish its VMs can carry out."""
    key = f"{NAMESPACE}:cluster"
    pools: list[tuple[str, CapacityChoice]] = [("chief", cluster.chief)]
    pools += [("workers", cluster.workers)] if cluster.workers is not None and cluster.workers.count else []
    pools += (
        [("parameter_servers", cluster.parameter_servers)]
        if cluster.parameter_servers is not None and cluster.parameter_servers.count
        else []
    )
    bound_problems = [p for name, pool in pools for p in _check_reservation_bound(f"{key}.{name}", pool, catalog)]
    flex = [f"{name}" for name, pool in pools if pool.effective_capacity == FLEX_START]
    if not flex:
        return bound_problems
    rules = catalog.capacity
    which = f"cluster.{_join(flex)} {'is' if len(flex) == 1 else 'are'} flex-start"
    bound = rules.flex_start_max_run_hours
    problems: list[Problem] = [
        # Compute Engine ends a flex-start VM's run at max_run_hours (stopped or deleted), and
        # only the flex-start pool gives it back: a machine of another capacity would outlive it
        # and wait for it, idle and billing, with every job it takes after.
        Problem(
            f"{key}.{name}.capacity",
            f"{pool.effective_capacity}, but {which}: Compute Engine ends a flex-start VM's run after max_run_hours "
            "(stopped or deleted), and the cluster's other machines would wait for it; make every node of the "
            "cluster flex_start, or none (the flex-start machines in a stack of their own)",
        )
        for name, pool in pools
        if pool.effective_capacity != FLEX_START
    ]
    if cluster.max_run_hours is None:
        problems.append(
            Problem(
                f"{key}.max_run_hours",
                f"null, but {which}: a flex-start VM needs a run duration; set max_run_hours (at most {bound:g}) "
                "and remove acknowledge_bills_until_stopped",
            )
        )
    elif bound is not None and cluster.max_run_hours > bound:
        problems.append(
            Problem(
                f"{key}.max_run_hours",
                f"{cluster.max_run_hours:g} is over flex-start's bound of {bound:g} hours ({bound / 24:g} days), and "
                f"{which}; set max_run_hours to at most {bound:g} ({CAPACITY_RULES})",
            )
        )
    shortest = rules.flex_start_min_run_minutes
    if cluster.max_run_hours is not None and shortest is not None and cluster.max_run_hours * 60 < shortest:
        problems.append(
            Problem(
                f"{key}.max_run_hours",
                f"{cluster.max_run_hours:g} ({cluster.max_run_hours * 60:g} minutes) is under flex-start's shortest run "
                f"of {shortest:g} minutes, and {which}; set max_run_hours to at least {shortest / 60:.4g} "
                f"({CAPACITY_RULES})",
            )
        )
    action = "DELETE" if cluster.on_finish == "delete" else "STOP"
    if action not in rules.flex_start_termination_actions or (action == "STOP" and not rules.flex_start_stoppable):
        allowed = " or ".join(rules.flex_start_termination_actions)
        problems.append(
            Problem(
                f"{key}.on_finish",
                f"{cluster.on_finish}, but {which}: its run would end with termination action {action}, and a "
                f"flex-start VM takes {allowed} ({CAPACITY_RULES})",
            )
        )
    return bound_problems + problems


def _check_single_tenant_zone(tpu: Tpu, generation: str, zone: str, catalog: Catalog) -> list[Problem]:
    """A zone Google marks single-tenant for the generation gives only the capacities its
    capacity_rules.csv row names (reserved capacity; Spot too where Google says so)."""
    rule = catalog.capacity.row("tpu_single_tenant_zone", f"{generation} {zone}")
    if rule is None or tpu.effective_capacity in rule.value.split():
        return []
    allowed = " or ".join(f"capacity: {c}" for c in rule.value.split())
    return [
        Problem(
            f"{NAMESPACE}:tpu.capacity",
            f"{tpu.effective_capacity}: {generation} in {zone}: {rule.note}; use {allowed}, or another zone",
        )
    ]


def _check_tpu_capacity(tpu: Tpu, catalog: Catalog) -> list[Problem]:
    """The capacities a TPU VM can be created with through pulumi-gcp's tpu.V2Vm."""
    key = f"{NAMESPACE}:tpu"
    if tpu.reservation_bound is not None:
        return [
            Problem(
                f"{key}.reservation_bound",
                "a TPU VM's reservation is not chosen by provisioning model (tpu.V2Vm offers only \"created under a "
                'reservation"); leave reservation_bound out',
            )
        ]
    offered = catalog.capacity.tpu_capacities()
    rule = offered.get(tpu.effective_capacity)
    if rule is not None and rule.value != "yes":
        possible = _join(name for name, r in offered.items() if r.value == "yes")
        return [Problem(f"{key}.capacity", f"{tpu.effective_capacity}: not for a TPU VM: {rule.note}; use {possible}")]
    if tpu.reservation is not None:
        return [
            Problem(
                f"{key}.reservation",
                f"{tpu.reservation}: a TPU VM cannot name its reservation (tpu.V2Vm's scheduling_config has only "
                "reserved: true); leave reservation out to consume any matching reservation of the project",
            )
        ]
    return []


def _not_offered(what: str, zone: str, zones: Iterable[str]) -> str:
    """``what`` is not offered in ``zone``: the zones of its region that offer it, else every zone that does."""
    same_region = sorted(z for z in zones if _region_of(z) == _region_of(zone))
    where = (
        f"zones in {_region_of(zone)} that offer it: {_join(same_region)}"
        if same_region
        else f"no zone of {_region_of(zone)} offers it; zones that do: {_join(sorted(zones)) or 'none known'}"
    )
    return f"{what} is not offered in zone {zone}; {where}"


def _gpu_zones(machine_type: str, declared: Accelerator | None, catalog: Catalog) -> tuple[str, frozenset[str]] | None:
    """The GPU type a VM gets and the zones that offer it on that machine type; None without GPUs."""
    machine = catalog.machine_types.get(machine_type)
    if machine is not None and machine.builtin_gpu:
        return machine.builtin_gpu, catalog.machine_zones(machine_type)
    if declared is not None and declared.type in catalog.gpus:
        return declared.type, catalog.gpu_zones.get(declared.type, frozenset())
    return None


def offered_zones(machine_type: str, declared: Accelerator | None, catalog: Catalog) -> frozenset[str] | None:
    """The zones that offer a VM's machine type with its GPUs, by the rule :func:`check_machine`
    applies (built-in GPUs: the machine type's zones; attached ones: the GPU's). None for a
    machine without GPUs: the catalog records no zones for those, and any zone is taken."""
    found = _gpu_zones(machine_type, declared, catalog)
    return None if found is None else found[1]


def tpu_offered_zones(accelerator_type: str, catalog: Catalog) -> list[str]:
    """The zones that offer this TPU slice (:func:`check_tpu`'s rule: per slice size); empty
    for a type the catalog does not know."""
    found = catalog.tpu_generation_for(accelerator_type)
    return [] if found is None else catalog.tpu_zones_for(found[0].generation, found[1])


def _check_n1_attachment(key: str, machine_type: str, accelerator: Accelerator, catalog: Catalog) -> list[Problem]:
    machine = catalog.machine_types[machine_type]
    gpu = accelerator.type
    limits = catalog.n1_gpu_limits.get(gpu, {})
    if machine.series != "n1":
        n1_fits = [
            m.name
            for m in catalog.machine_types.values()
            if m.series == "n1" and _fits(m.vcpus, m.memory_gb, limits.get(accelerator.count))
        ]
        return [
            Problem(
                f"{key}.machine_type",
                f"{gpu} attaches only to N1 machine types, not {machine_type}; N1 types that take {accelerator.count} of it: {_join(n1_fits) or 'none'}",
            )
        ]
    if accelerator.count not in limits:
        return [
            Problem(
                f"{key}.accelerator.count",
                f"{accelerator.count} x {gpu} is not a valid count; valid counts: {_join(sorted(limits))}",
            )
        ]
    if not _fits(machine.vcpus, machine.memory_gb, limits[accelerator.count]):
        valid = sorted(c for c, limit in limits.items() if _fits(machine.vcpus, machine.memory_gb, limit))
        limit = limits[accelerator.count]
        return [
            Problem(
                f"{key}.accelerator.count",
                f"{machine_type} ({machine.vcpus} vCPUs, {machine.memory_gb:g} GB) is too large for {accelerator.count} x {gpu} "
                f"(at most {limit.max_vcpus} vCPUs and {limit.max_memory_gb:g} GB); valid counts for {machine_type}: {_join(valid) or 'none'}",
            )
        ]
    return []


def _fits(vcpus: int, memory_gb: float, limit: N1GpuLimit | None) -> bool:
    return limit is not None and vcpus <= limit.max_vcpus and memory_gb <= limit.max_memory_gb


def _check_cluster(cfg: StackConfig, catalog: Catalog) -> tuple[list[Problem], str | None]:
    """The cluster's problems, and its strategy (``auto`` resolved; None without a cluster)."""
    cluster = cfg.settings.cluster
    if cluster is None:
        return [], None
    zone = cfg.settings.zone
    key = f"{NAMESPACE}:cluster"
    chief, workers = cluster.chief, cluster.workers
    problems = check_machine(
        f"{key}.chief", chief.machine_type, chief.accelerator, zone, catalog, chief.effective_capacity
    )
    if workers is not None:
        problems += check_machine(
            f"{key}.workers", workers.machine_type, workers.accelerator, zone, catalog, workers.effective_capacity
        )
    if cluster.parameter_servers is not None:
        ps = cluster.parameter_servers
        problems += check_machine(
            f"{key}.parameter_servers", ps.machine_type, None, zone, catalog, ps.effective_capacity
        )
        machine = catalog.machine_types.get(ps.machine_type)
        if machine is not None and machine.builtin_gpu:
            problems.append(
                Problem(
                    f"{key}.parameter_servers.machine_type",
                    f"{ps.machine_type} carries GPUs that parameter servers do not use; choose a CPU machine type such as n1-highmem-8",
                )
            )

    problems += _check_cluster_capacity(cluster, catalog)

    # One cluster, one zone: every GPU type it uses must be offered there, as AI Platform
    # Training required (https://cloud.google.com/ai-platform/training/docs/using-gpus).
    # Built-in GPUs count as the machine's, with the zones of its machine type.
    offered = [
        found
        for node in (cluster.chief, cluster.workers)
        if node is not None and (found := _gpu_zones(node.machine_type, node.accelerator, catalog)) is not None
    ]
    gpu_types = sorted({gpu for gpu, _ in offered})
    if len(gpu_types) > 1 and any(zone not in zones for _, zones in offered):
        shared = frozenset.intersection(*(zones for _, zones in offered))
        in_region = sorted(z for z in shared if _region_of(z) == _region_of(zone))
        where = (
            f"zones in {_region_of(zone)} offering all of them: {_join(in_region)}"
            if in_region
            else f"no zone of {_region_of(zone)} offers all of them; zones that do: {_join(sorted(shared)) or 'none'}"
        )
        problems.append(
            Problem(
                f"{NAMESPACE}:zone",
                f"all GPU types of one cluster ({_join(gpu_types)}) must be offered in its zone {zone}; {where}",
            )
        )

    strategy = resolved_strategy(cluster, catalog)
    problems += _check_strategy(cluster, strategy, catalog)
    return problems, strategy


def _check_strategy(cluster: Cluster, strategy: str, catalog: Catalog) -> list[Problem]:
    key = f"{NAMESPACE}:cluster"
    problems: list[Problem] = []
    if strategy in (ONE_DEVICE, MIRRORED) and cluster.worker_count:
        problems.append(
            Problem(
                f"{key}.strategy",
                f"{strategy} trains on one machine but the cluster has {cluster.worker_count} workers; use {MULTI_WORKER_MIRRORED}, {PARAMETER_SERVER} or {AUTO}",
            )
        )
    if strategy != PARAMETER_SERVER and cluster.ps_count:
        problems.append(
            Problem(
                f"{key}.parameter_servers.count",
                f"strategy {strategy} does not use parameter servers; set strategy: {PARAMETER_SERVER} (or {AUTO}) or remove them",
            )
        )
    if strategy == PARAMETER_SERVER:
        if cluster.ps_count < 1:
            problems.append(
                Problem(
                    f"{key}.parameter_servers.count", f"strategy {PARAMETER_SERVER} needs at least 1 parameter server"
                )
            )
        if cluster.worker_count < 1:
            problems.append(Problem(f"{key}.workers.count", f"strategy {PARAMETER_SERVER} needs at least 1 worker"))
    if strategy == MULTI_WORKER_MIRRORED and cluster.worker_count < 1:
        problems.append(
            Problem(
                f"{key}.workers.count",
                f"{MULTI_WORKER_MIRRORED} needs at least 1 worker besides the chief; for one machine use {MIRRORED} (or {AUTO})",
            )
        )
    if strategy == MULTI_WORKER_MIRRORED and cluster.workers is not None:
        chief_gpus = effective_accelerator(cluster.chief.machine_type, cluster.chief.accelerator, catalog)
        worker_gpus = effective_accelerator(cluster.workers.machine_type, cluster.workers.accelerator, catalog)
        chief_count = chief_gpus.count if chief_gpus else 0
        worker_count = worker_gpus.count if worker_gpus else 0
        if chief_count != worker_count:
            # "All workers need to use the same number of devices, otherwise the behavior is
            # undefined" (https://www.tensorflow.org/api_docs/python/tf/distribute/MultiWorkerMirroredStrategy).
            problems.append(
                Problem(
                    f"{key}.workers.accelerator.count",
                    f"{MULTI_WORKER_MIRRORED} needs the same GPU count on the chief and every worker: chief has {chief_count}, workers have {worker_count}",
                )
            )
    if strategy == ONE_DEVICE:
        chief_gpus = effective_accelerator(cluster.chief.machine_type, cluster.chief.accelerator, catalog)
        if chief_gpus is not None and chief_gpus.count > 1:
            problems.append(
                Problem(
                    f"{key}.strategy",
                    f"{ONE_DEVICE} trains on one GPU but the chief has {chief_gpus.count}; use {MIRRORED} or {AUTO} so none sits idle",
                )
            )
    return problems


def check_tpu(cfg: StackConfig, catalog: Catalog) -> list[Problem]:
    tpu = cfg.settings.tpu
    if tpu is None:
        return []
    key = f"{NAMESPACE}:tpu"
    zone = cfg.settings.zone
    problems: list[Problem] = []
    with_tensorflow = catalog.tensorflow_tpu_generations()
    without = catalog.tpu_generation_without_tensorflow(tpu.accelerator_type)
    if without is not None:
        # TPU7x: Google supports JAX on it, not TensorFlow, and the trainer and a team's code run
        # on the TensorFlow of the TPU runtime.
        return [
            Problem(
                f"{key}.accelerator_type",
                f"{tpu.accelerator_type} is a TPU {without.generation} type, and TPU {without.generation} runs no "
                f"TensorFlow: Google has no TensorFlow runtime for it (catalog: tpu_generations.csv), and a TPU VM's "
                f"job runs on its runtime's TensorFlow; TPU generations with TensorFlow: "
                f"{_join(g.generation for g in with_tensorflow)}",
            )
        ]
    found = catalog.tpu_generation_for(tpu.accelerator_type)
    if found is None:
        examples = _join(f"{g.prefix}-{g.valid_suffixes[0]}" for g in with_tensorflow)
        return [
            Problem(
                f"{key}.accelerator_type", f"unknown TPU type {tpu.accelerator_type!r}; types look like: {examples}"
            )
        ]
    generation, size = found
    if size not in generation.valid_suffixes:
        problems.append(
            Problem(
                f"{key}.accelerator_type",
                f"{tpu.accelerator_type} is not a valid {generation.generation} slice; valid: {_join(f'{generation.prefix}-{s}' for s in generation.valid_suffixes)}",
            )
        )
    zones = catalog.tpu_zones_for(generation.generation, size)
    if size in generation.valid_suffixes and zone not in zones:
        problems.append(
            Problem(
                f"{key}.accelerator_type",
                f"{tpu.accelerator_type} is not offered in zone {zone}; zones that offer it: {_join(zones) or 'none known'}",
            )
        )
    problems += _check_tpu_runtime(tpu.runtime_version, generation.generation, catalog)
    if size in generation.valid_suffixes and generation.is_multi_host(size):
        # The boot script runs the trainer with TPUClusterResolver("local"): one host. A pod
        # slice runs the script on every host and needs a launcher this project lacks.
        single_host = [f"{generation.prefix}-{s}" for s in generation.single_host_suffixes]
        problems.append(
            Problem(
                f"{key}.accelerator_type",
                f"{tpu.accelerator_type} spans several hosts; trainstack runs single-host TPU VMs: {_join(single_host)}",
            )
        )
    problems += _check_tpu_capacity(tpu, catalog)
    problems += _check_single_tenant_zone(tpu, generation.generation, zone, catalog)
    if tpu.is_spot and tpu.effective_on_finish == "stop":
        # Google: a Spot TPU cannot be restarted once stopped or preempted, only recreated.
        problems.append(
            Problem(
                f"{key}.on_finish",
                "a Spot TPU cannot be started again after it stops; use on_finish: delete (or keep), or spot: false",
            )
        )
    cluster = cfg.settings.cluster
    if cluster is not None and cluster.ps_count:
        # TPUStrategy has no parameter servers; AI Platform Training rejected TPU jobs with them
        # (https://cloud.google.com/ai-platform/training/docs/using-tpus).
        problems.append(
            Problem(
                f"{NAMESPACE}:cluster.parameter_servers.count",
                "parameter servers cannot be combined with a TPU; remove them or the trainstack:tpu section",
            )
        )
    return problems


def _check_tpu_runtime(runtime_version: str, generation: str, catalog: Catalog) -> list[Problem]:
    """The TPU runtime: known, for the generation, and one that brings TensorFlow."""
    key = f"{NAMESPACE}:tpu.runtime_version"
    runtime = catalog.tpu_runtimes.get(runtime_version)
    names = sorted(r.version for r in catalog.tensorflow_runtimes(generation))
    fitting = f"TensorFlow runtimes for {generation}: {_join(names)}"
    if runtime is None:
        return [Problem(key, f"unknown TPU runtime {runtime_version!r}; {fitting}")]
    if generation not in runtime.generations:
        return [Problem(key, f"{runtime_version} does not support TPU {generation}; {fitting}")]
    if not runtime.tensorflow_version:
        # A base image for JAX or PyTorch: the job would find no TensorFlow on the VM.
        return [Problem(key, f"{runtime_version} brings no TensorFlow (a base image for JAX and PyTorch); {fitting}")]
    return []


def check_notebook(cfg: StackConfig, catalog: Catalog) -> list[Problem]:
    notebook = cfg.settings.notebook
    if notebook is None:
        return []
    return check_machine(
        f"{NAMESPACE}:notebook", notebook.machine_type, notebook.accelerator, cfg.settings.zone, catalog
    )


def _check_job_args(job: Job) -> list[Problem]:
    """Flags the stack sets itself may not come again through job.args: for the built-in
    trainer every flag a job key sets, for a team's code only the job directory."""
    reserved = job.reserved_flags
    problems = []
    for index, arg in enumerate(job.args):
        flag = arg.split("=", 1)[0]
        # argparse takes an unambiguous prefix for the whole flag (--job-d for --job-dir),
        # unless the parser forbids it; a team's parser may not, so every prefix is refused.
        meant = [name for name in reserved if flag.startswith("--") and len(flag) > 2 and name.startswith(flag)]
        if meant:
            shown = flag if flag in reserved else f"{flag} (a prefix of {', '.join(meant)}, which argparse expands)"
            problems.append(
                Problem(
                    f"{NAMESPACE}:job.args[{index}]",
                    f"{shown} is set by the stack, not by job.args; use {'; '.join(reserved[name] for name in meant)}",
                )
            )
    return problems


def _check_job(cfg: StackConfig) -> tuple[list[Problem], CodePackage | None, ExtraRequirements | None]:
    """Which code the job runs, and that it is there (before any VM exists, not at boot): the
    job's problems, and the team's package and requirements as read for the check."""
    job = cfg.settings.job
    package: CodePackage | None = None
    requirements: ExtraRequirements | None = None
    if job is None:
        return [], package, requirements
    key = f"{NAMESPACE}:job"
    problems = _check_job_args(job)
    if job.package is not None and job.image is not None:
        return (
            [
                *problems,
                Problem(f"{key}.image", "a job runs either job.package (with job.module) or job.image, not both"),
            ],
            package,
            requirements,
        )
    if not job.builtin:
        own_code = "job.image" if job.image is not None else "job.package"
        problems += [
            Problem(
                f"{key}.{setting}",
                f"configures the built-in trainer, which this job does not run; {own_code} takes its own flags in job.args",
            )
            for setting in job.builtin_settings_set
        ]
    if job.module is not None and job.package is None:
        problems.append(Problem(f"{key}.package", "job.module needs job.package, the directory that holds it"))
    if job.requirements is not None and job.package is None:
        hint = "an image brings its own" if job.image is not None else "they are installed for job.package"
        problems.append(Problem(f"{key}.requirements", f"extra requirements go with job.package; {hint}"))
    if job.package is not None:
        if job.module is None:
            problems.append(
                Problem(f"{key}.module", "required with job.package: the module to run as `python -m MODULE`")
            )
        else:
            source = project_path(job.package)
            if not source.is_dir():
                problems.append(Problem(f"{key}.package", missing_package(source, job.module)))
            elif package_layout(source, job.module) is None:
                wrong, message = misplaced_module(source, job.module)
                problems.append(Problem(f"{key}.{wrong}", message))
            else:
                try:
                    package = load_package(source, job.module)
                except CodeError as error:
                    problems.append(Problem(f"{key}.package", str(error)))
    if job.requirements is not None and job.package is not None:
        try:
            requirements = load_requirements(project_path(job.requirements), project_path(job.package))
        except CodeError as error:
            problems.append(Problem(f"{key}.requirements", str(error)))
    return problems, package, requirements


def check_job_dir(cfg: StackConfig) -> list[Problem]:
    """A job directory (job.job_dir) in a bucket of the team's own: never another stack's bucket
    (what its machines run and its jobs live there), and in the stack's own bucket under jobs/
    alone (beside what its machines run and its notebook's area). The schema already refused
    trainstack/ in any bucket."""
    job = cfg.settings.job
    match = EXTERNAL_JOB_DIR.fullmatch(job.job_dir) if job is not None and job.job_dir is not None else None
    if match is None:
        return []
    key, bucket, prefix = f"{NAMESPACE}:job.job_dir", match["bucket"], match["prefix"]
    own = cfg.bucket_name
    others = {b: stack for b, stack in stack_buckets().items() if stack != cfg.stack and b != own}
    if bucket in others:
        return [
            Problem(
                key,
                f"{match[0]} is in {bucket}, the bucket of the project's stack {others[bucket]}: what its machines "
                "run is there; use a folder of a bucket of the team's own that no stack deploys, or leave "
                f"job.job_dir out for {LAYOUT.jobs}/<name> in this stack's bucket",
            )
        ]
    if bucket == own and not prefix.startswith(f"{LAYOUT.jobs}/"):
        return [
            Problem(
                key,
                f"{match[0]} is in this stack's own bucket outside {LAYOUT.jobs}/ (what its machines run and its "
                f"notebook's area are there); use gs://{own}/{LAYOUT.jobs}/FOLDER, or leave job.job_dir out for "
                f"{LAYOUT.jobs}/<name>",
            )
        ]
    return []


def check_job_places(cfg: StackConfig) -> list[Problem]:
    """What the job reads and writes in Cloud Storage, each place known to be one or the other
    (trainstack.stackmodel.places)."""
    job = cfg.settings.job
    if job is None:
        return []
    job_dir = job.job_dir or LAYOUT.job_dir(f"gs://{cfg.bucket_name}", job.name)
    return job_places(job, job_dir, cfg.bucket_name)[1]


def requirement_constraints(cfg: StackConfig, catalog: Catalog) -> Constraints:
    """What the stack's nodes have installed before the job's requirements, which their lock keeps."""
    tpu = cfg.settings.tpu
    runtime = catalog.tpu_runtimes.get(tpu.runtime_version) if tpu is not None else None
    if runtime is not None and runtime.tensorflow_version:
        return tpu_constraints(runtime.tensorflow_version)
    return node_constraints()


def check_requirements_against_nodes(
    cfg: StackConfig, catalog: Catalog, package: CodePackage | None, requirements: ExtraRequirements | None
) -> list[Problem]:
    """The job's requirements (its file, its project's dependencies) that exclude a version the
    nodes pin: pip would replace TensorFlow on every node, or fail, at boot."""
    pins: list[Pin] = list(cluster_pins()) if cfg.settings.cluster is not None else []
    tpu = cfg.settings.tpu
    runtime = catalog.tpu_runtimes.get(tpu.runtime_version) if tpu is not None else None
    if runtime is not None and runtime.tensorflow_version:
        pins.append(Pin("tensorflow", runtime.tensorflow_version, f"the TPU runtime {runtime.version}"))
    if not pins:
        return []
    key = f"{NAMESPACE}:job"
    problems = []
    if requirements is not None:
        found = requirements_file_conflicts(requirements.path, pins)
        problems += [Problem(f"{key}.requirements", c.message()) for c in found]
    if package is not None and package.layout == PROJECT_LAYOUT:
        problems += [Problem(f"{key}.package", c.message()) for c in project_conflicts(package.source, pins)]
    return problems


@dataclass(frozen=True)
class CheckedFacts:
    """What the checks derived on their way, handed to
    :func:`trainstack.stackmodel.resolved.resolve_stack` so that nothing is read, hashed or
    worked out twice: the team's package (read and hashed), its requirements, the wheelhouse,
    the cluster's strategy."""

    package: CodePackage | None = None
    requirements: ExtraRequirements | None = None
    wheelhouse: Wheelhouse | None = None
    strategy: str | None = None


# The service accounts the stack's machines run as: <name>-train (cluster nodes), <name>-tpu,
# <name>-nb (the notebook), in the stack's project (components.stack creates them).
TRAINING_ACCOUNT_SUFFIX, TPU_ACCOUNT_SUFFIX, NOTEBOOK_ACCOUNT_SUFFIX = "train", "tpu", "nb"
# Compute Engine's default service account: PROJECT_NUMBER-compute@developer.gserviceaccount.com.
DEFAULT_COMPUTE_ACCOUNT_SUFFIX = "-compute@developer.gserviceaccount.com"


def check_access(cfg: StackConfig) -> list[Problem]:
    """trainstack:access names teammates, never an account a machine runs as: a machine that
    could queue jobs could run code on every other one (`check`'s policy refuses it too)."""
    if cfg.settings.access is None:
        return []
    machines = {
        f"{cfg.name}-{suffix}@{cfg.project}.iam.gserviceaccount.com"
        for suffix in (TRAINING_ACCOUNT_SUFFIX, TPU_ACCOUNT_SUFFIX, NOTEBOOK_ACCOUNT_SUFFIX)
    }
    problems = []
    for member in cfg.settings.access.members:
        email = member.split(":", 1)[-1]
        if email in machines or email.endswith(DEFAULT_COMPUTE_ACCOUNT_SUFFIX):
            problems.append(
                Problem(
                    f"{NAMESPACE}:access.members",
                    f"{member} is an account the stack's machines run as: a machine that could queue jobs could run "
                    "code on every other one; name the teammates (user:, group: or their own serviceAccount:)",
                )
            )
    return problems


def check_network(cfg: StackConfig) -> list[Problem]:
    """A network to join is in the stack's region: a machine goes on a subnetwork of its own region."""
    network = cfg.settings.network
    if network is None or network.region == cfg.region:
        return []
    return [
        Problem(
            f"{NAMESPACE}:network.subnetwork",
            f"{network.subnetwork} is in {network.region}, not in gcp:region {cfg.region}: the machines go on a "
            f"subnetwork of their own region (one of {network.host_project}'s in {cfg.region})",
        )
    ]


def check_encryption(cfg: StackConfig) -> list[Problem]:
    """A customer-managed key is in the stack's region: the bucket (a regional bucket), the
    registry and the disks are there, and Cloud Storage and Artifact Registry take a key of
    their resource's own location only; no `global` or multi-region key serves all three."""
    encryption = cfg.settings.encryption
    if encryption is None or encryption.location == cfg.region:
        return []
    where = "global" if encryption.location == "global" else f"location {encryption.location}"
    return [
        Problem(
            f"{NAMESPACE}:encryption.kms_key",
            f"the key is in {where}, not in gcp:region {cfg.region}: the bucket and the registry take a key of "
            f"their own region only; use a key ring in {cfg.region} (projects/P/locations/{cfg.region}/keyRings/...)",
        )
    ]


def check_stack(cfg: StackConfig, catalog: Catalog | None = None) -> list[Problem]:
    return check_and_derive(cfg, catalog)[0]


def check_and_derive(cfg: StackConfig, catalog: Catalog | None = None) -> tuple[list[Problem], CheckedFacts]:
    """Every problem of ``cfg`` against the catalog, and the facts derived while checking."""
    catalog = catalog or load_catalog()
    zone = cfg.settings.zone
    if cfg.region not in catalog.regions:
        close = difflib.get_close_matches(cfg.region, sorted(catalog.regions), n=3, cutoff=0.6)
        hint = f"did you mean: {_join(close)}" if close else f"regions: {_join(sorted(catalog.regions))}"
        return [Problem("gcp:region", f"unknown region {cfg.region}; {hint}")], CheckedFacts()
    if _region_of(zone) != cfg.region:
        return [
            Problem(
                f"{NAMESPACE}:zone", f"zone {zone} is not in gcp:region {cfg.region}; zones look like {cfg.region}-a"
            )
        ], CheckedFacts()
    if zone not in catalog.zones:
        # Every stack, CPU-only ones included: a zone that does not exist fails only at `pulumi up`.
        return [
            Problem(
                f"{NAMESPACE}:zone", f"no zone {zone} in {cfg.region}; its zones: {_join(catalog.zones_of(cfg.region))}"
            )
        ], CheckedFacts()
    cluster_problems, strategy = _check_cluster(cfg, catalog)
    job_problems, package, requirements = _check_job(cfg)
    job_problems += check_job_dir(cfg)
    job_problems += check_job_places(cfg)
    job_problems += check_access(cfg)
    job_problems += check_network(cfg)
    job_problems += check_encryption(cfg)
    job_problems += check_requirements_against_nodes(cfg, catalog, package, requirements)
    wheelhouse_problems, wheelhouse = _check_wheelhouse(cfg)
    problems = (
        cluster_problems + check_tpu(cfg, catalog) + check_notebook(cfg, catalog) + job_problems + wheelhouse_problems
    )
    if requirements is not None and not problems:
        # Last, once the stack is otherwise sound: locking may reach a package index.
        try:
            requirements = as_installed(requirements, requirement_constraints(cfg, catalog))
        except CodeError as error:
            problems.append(Problem(f"{NAMESPACE}:job.requirements", str(error)))
    return problems, CheckedFacts(package, requirements, wheelhouse, strategy)


def _check_wheelhouse(cfg: StackConfig) -> tuple[list[Problem], Wheelhouse | None]:
    wheelhouse = cfg.settings.storage.wheelhouse
    if wheelhouse is None:
        return [], None
    if cfg.settings.cluster is None and cfg.settings.tpu is None:
        return [
            Problem(f"{NAMESPACE}:storage.wheelhouse", "only a cluster or a TPU VM installs from a wheelhouse")
        ], None
    try:
        return [], load_wheelhouse(project_path(wheelhouse))
    except CodeError as error:
        return [Problem(f"{NAMESPACE}:storage.wheelhouse", str(error))], None


def validate_and_derive(cfg: StackConfig, catalog: Catalog | None = None) -> tuple[StackConfig, CheckedFacts]:
    """``cfg`` and what its checks derived, when it fits the catalog; else raise with every problem found."""
    problems, facts = check_and_derive(cfg, catalog)
    if problems:
        raise StackConfigError(problems)
    return cfg, facts


def parse_and_check(
    stack: str, config: Mapping[str, Any], catalog: Catalog | None = None, secret_keys: frozenset[str] = frozenset()
) -> StackConfig:
    """:func:`parse_check_and_derive` without the derived facts."""
    return parse_check_and_derive(stack, config, catalog, secret_keys)[0]


def parse_check_and_derive(
    stack: str, config: Mapping[str, Any], catalog: Catalog | None = None, secret_keys: frozenset[str] = frozenset()
) -> tuple[StackConfig, CheckedFacts]:
    """Parse a stack's config map and check it against the catalog, reporting every problem
    in one pass: a section that fails to parse (a bad job name, say) is left out and the
    catalog's rules still check the others (the cluster's GPUs)."""
    try:
        cfg = parse_stack_config(stack, config, secret_keys)
    except StackConfigError as error:
        if error.partial is None:
            raise
        more = [
            p
            for p in check_stack(error.partial, catalog)
            if not any(
                p.key == section or p.key.startswith((f"{section}.", f"{section}[")) for section in error.dropped
            )
        ]
        raise StackConfigError([*error.problems, *more]) from None
    return validate_and_derive(cfg, catalog)
