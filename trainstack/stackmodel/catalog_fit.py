"""Checks of a parsed stack against what Google Cloud offers (the catalog): its region and
zone, each machine with its GPUs (known, attachable in that count, offered in the zone, had
with its capacity), the cluster's strategy, the TPU slice and runtime.

Each check returns problems that name the config key, the bad value and the valid choices,
so a user can fix the stack file before anything is created or billed.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from trainstack.base.errors import Problem
from trainstack.catalog import Catalog, MachineType, N1GpuLimit, machine_family, unsupported_machines
from trainstack.stackmodel.derived import effective_accelerator, gpu_zones, is_reservation_bound, resolved_strategy
from trainstack.stackmodel.naming import NAMESPACE
from trainstack.stackmodel.schema import (
    Accelerator,
    CapacityChoice,
    Cluster,
    StackConfig,
    Tpu,
)
from trainstack_contract import (
    AUTO,
    FLEX_START,
    MIRRORED,
    MULTI_WORKER_MIRRORED,
    ON_DEMAND,
    ONE_DEVICE,
    PARAMETER_SERVER,
    RESERVATION,
    SPOT,
)


def _join(items: Iterable[object]) -> str:
    return ", ".join(str(i) for i in items)


def _region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


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
        if node is not None and (found := gpu_zones(node.machine_type, node.accelerator, catalog)) is not None
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


@dataclass(frozen=True)
class CatalogFit:
    """The stack's problems against the catalog; the cluster's strategy, when it has one;
    whether its region and zone exist (when not, nothing else was checked: every other
    check is of what that zone offers)."""

    problems: list[Problem]
    strategy: str | None = None
    placed: bool = True


def check_catalog_fit(cfg: StackConfig, catalog: Catalog) -> CatalogFit:
    """Every problem of the stack's region, zone and machines (cluster, TPU VM, notebook)
    against what Google Cloud offers."""
    zone = cfg.settings.zone
    if cfg.region not in catalog.regions:
        close = difflib.get_close_matches(cfg.region, sorted(catalog.regions), n=3, cutoff=0.6)
        hint = f"did you mean: {_join(close)}" if close else f"regions: {_join(sorted(catalog.regions))}"
        return CatalogFit([Problem("gcp:region", f"unknown region {cfg.region}; {hint}")], placed=False)
    if _region_of(zone) != cfg.region:
        zone_problem = f"zone {zone} is not in gcp:region {cfg.region}; zones look like {cfg.region}-a"
        return CatalogFit([Problem(f"{NAMESPACE}:zone", zone_problem)], placed=False)
    if zone not in catalog.zones:
        # Every stack, CPU-only ones included: a zone that does not exist fails only at `pulumi up`.
        zone_problem = f"no zone {zone} in {cfg.region}; its zones: {_join(catalog.zones_of(cfg.region))}"
        return CatalogFit([Problem(f"{NAMESPACE}:zone", zone_problem)], placed=False)
    cluster_problems, strategy = _check_cluster(cfg, catalog)
    return CatalogFit(cluster_problems + check_tpu(cfg, catalog) + check_notebook(cfg, catalog), strategy)
