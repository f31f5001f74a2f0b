"""A node's price per running hour at a region's list prices, from the catalog: a machine with
its GPUs and boot disk (on demand, Spot, or flex-start's own SKUs), a TPU slice. None where the
catalog has no price for a part there, never another region's price. The resolved model prices
each node with these; `cost` prices the same nodes in other regions and ways with them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainstack.catalog import Catalog, flex_start_gpu_usd_hr, flex_start_machine_usd_hr

if TYPE_CHECKING:  # the command line loads no pydantic at its start (tests/test_zones.py)
    from trainstack.stackmodel.schema import Accelerator


def machine_hourly_usd(
    catalog: Catalog,
    machine_type: str,
    accelerator: Accelerator | None,
    spot: bool,
    disk_gb: int,
    disk_type: str,
    region: str,
    flex_start: bool = False,
) -> float | None:
    """Machine, GPUs and boot disk per hour at ``region``'s list prices; None when a part has none
    there. ``flex_start``: at Dynamic Workload Scheduler's own SKUs where Google discounts the
    series (flex_start_prices.csv; None where they are not known), else at the on-demand price."""
    if flex_start and is_flex_start_discounted(catalog, machine_type):
        price = flex_start_machine_usd_hr(catalog, machine_type, region)
        gpu_price = None if accelerator is None else flex_start_gpu_usd_hr(catalog, accelerator.type, region)
    else:
        price = catalog.machine_usd_hr(machine_type, region, spot)
        gpu_price = None if accelerator is None else catalog.gpu_usd_hr(accelerator.type, region, spot)
    if price is None:
        return None
    # Built-in GPUs are priced per GPU like attached ones (the machine row is without them).
    if accelerator is not None:
        if gpu_price is None:
            return None
        price += accelerator.count * gpu_price
    disk_price = catalog.disk_usd_gb_hour(disk_type, region)
    return None if disk_price is None else price + disk_gb * disk_price


def is_flex_start_discounted(catalog: Catalog, machine_type: str) -> bool:
    """Whether Google prices the machine's series below on demand when it is flex-start
    (capacity_rules.csv flex_start_discounted_series); others bill their on-demand price."""
    machine = catalog.machine_types.get(machine_type)
    return machine is not None and machine.series in catalog.capacity.flex_start_discounted_series


def tpu_hourly_usd(catalog: Catalog, accelerator_type: str, spot: bool, region: str) -> float | None:
    found = catalog.tpu_generation_for(accelerator_type)
    if found is None:
        return None
    generation, size = found
    per_chip = catalog.tpu_chip_usd_hr(generation.generation, region, spot)
    return None if per_chip is None else per_chip * generation.chips(size)
