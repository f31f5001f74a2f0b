"""What the checks and the resolved model both derive from a stack and the catalog: the GPUs a
VM really gets, the cluster's strategy, the zones that offer a machine, whether a reservation
node is reservation-bound, what the nodes have installed before a job's requirements, and the
facts the checks hand to the resolved model."""

from __future__ import annotations

from dataclasses import dataclass

from trainstack.catalog import Catalog
from trainstack.jobcode.package import (
    CodePackage,
    ExtraRequirements,
    Wheelhouse,
)
from trainstack.jobcode.requirements_lock import Constraints, node_constraints, tpu_constraints
from trainstack.stackmodel.schema import (
    Accelerator,
    CapacityChoice,
    Cluster,
    StackConfig,
)
from trainstack_contract import (
    AUTO,
    RESERVATION,
    auto_strategy,
)


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


def is_reservation_bound(pool: CapacityChoice, machine_type: str, catalog: Catalog) -> bool:
    """Whether a reservation node is reservation-bound: as the stack says, else as its machine
    type is reserved (catalog: reservation_bound_machine)."""
    if pool.effective_capacity != RESERVATION:
        return False
    if pool.reservation_bound is not None:
        return pool.reservation_bound
    return catalog.capacity.reservation_bound(machine_type) == "always"


def gpu_zones(machine_type: str, declared: Accelerator | None, catalog: Catalog) -> tuple[str, frozenset[str]] | None:
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
    found = gpu_zones(machine_type, declared, catalog)
    return None if found is None else found[1]


def tpu_offered_zones(accelerator_type: str, catalog: Catalog) -> list[str]:
    """The zones that offer this TPU slice (:func:`check_tpu`'s rule: per slice size); empty
    for a type the catalog does not know."""
    found = catalog.tpu_generation_for(accelerator_type)
    return [] if found is None else catalog.tpu_zones_for(found[0].generation, found[1])


def requirement_constraints(cfg: StackConfig, catalog: Catalog) -> Constraints:
    """What the stack's nodes have installed before the job's requirements, which their lock keeps."""
    tpu = cfg.settings.tpu
    runtime = catalog.tpu_runtimes.get(tpu.runtime_version) if tpu is not None else None
    if runtime is not None and runtime.tensorflow_version:
        return tpu_constraints(runtime.tensorflow_version)
    return node_constraints()


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
