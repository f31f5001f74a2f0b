"""Hourly cost of a stack while it runs, from the catalog's us-central1 prices."""

from __future__ import annotations

from dataclasses import dataclass

from trainstack.catalog import load_catalog
from trainstack.config import Accelerator, StackConfig
from trainstack.topology import cluster_nodes


@dataclass(frozen=True)
class NodeCost:
    name: str
    description: str
    usd_per_hour: float | None  # None: the catalog has no price for some part of it


def machine_hourly_usd(machine_type: str, accelerator: Accelerator | None, spot: bool, disk_gb: int) -> float | None:
    catalog = load_catalog()
    machine = catalog.machine_types.get(machine_type)
    if machine is None:
        return None
    price = machine.spot_usd_hr if spot else machine.on_demand_usd_hr
    if price is None:
        return None
    if accelerator is not None:
        gpu = catalog.gpus.get(accelerator.type)
        gpu_price = None if gpu is None else (gpu.spot_usd_hr if spot else gpu.on_demand_usd_hr)
        if gpu_price is None:
            return None
        price += accelerator.count * gpu_price
    disk_price = catalog.disk_usd_gb_hour(machine.boot_disk_type)
    return None if disk_price is None else price + disk_gb * disk_price


def tpu_hourly_usd(accelerator_type: str, spot: bool) -> float | None:
    found = load_catalog().tpu_generation_for(accelerator_type)
    if found is None:
        return None
    generation, size = found
    per_chip = generation.spot_usd_chip_hr if spot else generation.on_demand_usd_chip_hr
    return None if per_chip is None else per_chip * generation.chips(size)


def _describe(machine_type: str, accelerator: Accelerator | None, spot: bool) -> str:
    gpus = f" + {accelerator.count} x {accelerator.type}" if accelerator else ""
    return f"{machine_type}{gpus}{' (spot)' if spot else ''}"


def stack_costs(cfg: StackConfig) -> list[NodeCost]:
    costs = [
        NodeCost(node.vm_name, _describe(node.machine_type, node.accelerator, node.spot), machine_hourly_usd(node.machine_type, node.accelerator, node.spot, node.disk_gb))
        for node in cluster_nodes(cfg)
    ]
    settings = cfg.settings
    if settings.tpu is not None:
        tpu = settings.tpu
        costs.append(NodeCost(f"{cfg.name}-tpu", f"{tpu.accelerator_type}{' (spot)' if tpu.spot else ''}", tpu_hourly_usd(tpu.accelerator_type, tpu.spot)))
    if settings.notebook is not None:
        nb = settings.notebook
        costs.append(NodeCost(f"{cfg.name}-notebook", _describe(nb.machine_type, nb.accelerator, False), machine_hourly_usd(nb.machine_type, nb.accelerator, False, nb.disk_gb)))
    return costs


def total_hourly_usd(costs: list[NodeCost]) -> float | None:
    if any(c.usd_per_hour is None for c in costs):
        return None
    return round(sum(c.usd_per_hour or 0.0 for c in costs), 4)
