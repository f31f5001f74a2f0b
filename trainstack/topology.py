"""The nodes of a training cluster, their names and the TF_CONFIG cluster they form."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainstack.catalog import load_catalog
from trainstack.config import Accelerator, StackConfig
from trainstack.rules import effective_accelerator, resolved_strategy

Role = Literal["chief", "worker", "ps"]


@dataclass(frozen=True)
class Node:
    role: Role
    index: int
    vm_name: str
    machine_type: str
    accelerator: Accelerator | None  # what the VM really gets, built-in GPUs included
    spot: bool
    disk_gb: int

    @property
    def key(self) -> str:
        """Stable short id used in Pulumi resource names and logs: chief, worker-0, ps-1."""
        return "chief" if self.role == "chief" else f"{self.role}-{self.index}"


def cluster_nodes(cfg: StackConfig) -> list[Node]:
    cluster = cfg.settings.cluster
    if cluster is None:
        return []
    catalog = load_catalog()
    name = cfg.name
    chief = cluster.chief
    nodes = [
        Node("chief", 0, f"{name}-chief", chief.machine_type, effective_accelerator(chief.machine_type, chief.accelerator, catalog), chief.spot, chief.disk_gb)
    ]
    if cluster.workers is not None:
        pool = cluster.workers
        accel = effective_accelerator(pool.machine_type, pool.accelerator, catalog)
        nodes += [Node("worker", i, f"{name}-worker-{i}", pool.machine_type, accel, pool.spot, pool.disk_gb) for i in range(pool.count)]
    if cluster.parameter_servers is not None:
        ps = cluster.parameter_servers
        nodes += [Node("ps", i, f"{name}-ps-{i}", ps.machine_type, None, ps.spot, ps.disk_gb) for i in range(ps.count)]
    return nodes


def internal_hostname(vm_name: str, zone: str, project: str) -> str:
    """Compute Engine's zonal internal DNS name, resolvable from every VM of the network."""
    return f"{vm_name}.{zone}.c.{project}.internal"


def tf_cluster_spec(cfg: StackConfig, nodes: list[Node]) -> dict[str, list[str]]:
    """The ``cluster`` part of TF_CONFIG; empty for single-machine strategies, which need none."""
    cluster = cfg.settings.cluster
    if cluster is None or resolved_strategy(cluster) in ("one_device", "mirrored"):
        return {}
    spec: dict[str, list[str]] = {}
    for node in nodes:
        address = f"{internal_hostname(node.vm_name, cfg.settings.zone, cfg.project)}:{cluster.port}"
        spec.setdefault(node.role, []).append(address)
    return spec
