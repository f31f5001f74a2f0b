"""Where else a stack's machines can be created, when its zone cannot give them.

`pulumi up` can fail in a zone that offers the stack's machines: the zone has none free right
now (``ZONE_RESOURCE_POOL_EXHAUSTED``, a TPU's "no more capacity in the zone") or the region's
quota is spent (``QUOTA_EXCEEDED``). The way out is another zone, or another region: those the
catalog says offer every machine of the stack (each cluster node's machine type with its GPUs,
the TPU VM's slice, the notebook's GPUs), by the rules ``validate`` applies
(:mod:`trainstack.stackmodel.feasibility`), each with the stack's price per running hour there
(:mod:`trainstack.stackmodel.cost`) and the keys of the stack file to change.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

from trainstack.catalog import Catalog, load_catalog
from trainstack.stackmodel.cost import hourly_in_region
from trainstack.stackmodel.derived import offered_zones, tpu_offered_zones
from trainstack.stackmodel.naming import NAMESPACE
from trainstack.stackmodel.resolved import ResolvedStack

ZONE_KEY = f"{NAMESPACE}:zone"
REGION_KEY = "gcp:region"


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


@dataclass(frozen=True)
class ZoneChoice:
    zone: str
    region: str
    # The whole stack per running hour there (Spot where its nodes are); None: the catalog has
    # no price in that region for some part of it.
    usd_per_hour: float | None
    current: bool
    # The stack file's keys to set, and their values: empty for the stack's own zone.
    change: dict[str, str] = field(default_factory=dict)

    @property
    def change_line(self) -> str:
        return ", ".join(f"{key}: {value}" for key, value in self.change.items())


@dataclass(frozen=True)
class ZonesReport:
    stack: str
    zone: str
    region: str
    # What each zone must offer: "2 x n1-standard-8 + 2 x nvidia-tesla-t4 (spot)", "v2-8".
    machines: tuple[str, ...]
    # Cheapest first, unknown prices last.
    choices: tuple[ZoneChoice, ...]
    notes: tuple[str, ...]

    def to_json(self, choices: list[ZoneChoice] | None = None) -> dict[str, object]:
        """The report as JSON; ``choices``: those shown (default: every one)."""
        document = asdict(self)
        if choices is not None:
            document["choices"] = [asdict(c) for c in choices]
        return document


def _what_and_where(stack: ResolvedStack, catalog: Catalog) -> tuple[list[str], list[frozenset[str]], bool]:
    """Each machine of the stack as `cost` describes it, the zone sets that restrict where it can
    go, and whether some machine (one without GPUs) has no zones in the catalog."""
    described: list[str] = []
    restrictions: list[frozenset[str]] = []
    unrestricted = False
    machines = [(n.machine_type, n.accelerator, n.cost) for n in stack.cluster.nodes] if stack.cluster else []
    if stack.notebook is not None:
        machines.append((stack.notebook.machine_type, stack.notebook.accelerator, stack.notebook.cost))
    for machine_type, accelerator, cost in machines:
        described.append(cost.description)
        zones = offered_zones(machine_type, accelerator, catalog)
        if zones is None:
            unrestricted = True
        else:
            restrictions.append(zones)
    if stack.tpu is not None:
        described.append(stack.tpu.cost.description)
        restrictions.append(frozenset(tpu_offered_zones(stack.tpu.accelerator_type, catalog)))
    counted = Counter(described)
    return [f"{count} x {what}" if count > 1 else what for what, count in counted.items()], restrictions, unrestricted


def zone_choices(stack: ResolvedStack, catalog: Catalog | None = None) -> ZonesReport:
    """The zones that offer every machine of ``stack`` (its own included), cheapest first."""
    catalog = catalog or load_catalog()
    machines, restrictions, unrestricted = _what_and_where(stack, catalog)
    zones = frozenset(z for z in catalog.zones if region_of(z) in catalog.regions)
    for offered in restrictions:
        zones &= offered
    prices = {region: hourly_in_region(stack, region, catalog) for region in {region_of(z) for z in zones}}
    choices = []
    for zone in zones:
        region = region_of(zone)
        change = {} if zone == stack.zone else {ZONE_KEY: zone}
        if region != stack.region:
            change = {REGION_KEY: region, **change}
        choices.append(ZoneChoice(zone, region, prices[region], zone == stack.zone, change))
    # Cheapest first; within one price the stack's own region, then its own zone, first.
    choices.sort(
        key=lambda c: (c.usd_per_hour is None, c.usd_per_hour or 0.0, c.region != stack.region, not c.current, c.zone)
    )
    notes = [
        "offered: the catalog's zones for each machine (gpu_zones.csv, tpu_zones.csv), not whether a zone has "
        "free machines, or your project quota there, right now"
    ]
    if any(c.region != stack.region for c in choices):
        notes.append(
            f"another region moves the stack's bucket, Artifact Registry repository, network and secrets with it "
            f"(Pulumi replaces them); a zone of {stack.region} changes only the machines"
        )
    if any(c.usd_per_hour is None for c in choices):
        notes.append("unknown: the catalog has no price in that region for some part (machine, GPU, TPU or boot disk)")
    if unrestricted:
        notes.append("machines without GPUs: the catalog does not record their zones, so they restrict none here")
    return ZonesReport(stack.stack, stack.zone, stack.region, tuple(machines), tuple(choices), tuple(notes))
