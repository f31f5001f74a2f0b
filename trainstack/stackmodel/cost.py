"""What a stack costs, the whole truth the catalog knows: running, one run at most, left running,
stopped, storage and the first boot, and two ways to pay for the same job.

Every figure is at the stack's own region's list prices from the catalog; a figure with a part
the catalog has no price for there is None ("unknown"), never another region's price.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass
from importlib import resources
from typing import TYPE_CHECKING

from trainstack.catalog import HOURS_PER_MONTH, Catalog, load_catalog
from trainstack.stackmodel.prices import is_flex_start_discounted, machine_hourly_usd, tpu_hourly_usd

if TYPE_CHECKING:
    from trainstack.stackmodel.resolved import ClusterNode, NodeCost, ResolvedStack

# "Left running a day after the job": the seeds' warning about a cluster nobody stopped.
LEFT_RUNNING_HOURS = 24
# Cloud Storage keeps deleted and overwritten objects 7 days by default (soft delete), billed
# at their class's rate (https://cloud.google.com/storage/docs/soft-delete).
SOFT_DELETE_DAYS = 7
# Cloud NAT bills its gateway per VM it serves ("gateway" rate), up to 32 VMs; beyond, one flat
# hourly price ("gateway_flat" rate) (https://cloud.google.com/nat/pricing).
NAT_PRICED_VMS = 32
BYTES_PER_GIB = 2**30


def _sum(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else round(sum(v or 0.0 for v in values), 4)


def _times(value: float | None, factor: float | None) -> float | None:
    return None if value is None or factor is None else round(value * factor, 4)


def node_download_bytes() -> int:
    """What a node downloads on its first boot (catalog/downloads.csv, measured)."""
    text = resources.files("trainstack.catalog").joinpath("downloads.csv").read_text(encoding="utf-8")
    [row] = [r for r in csv.DictReader(text.splitlines()) if r["what"] == "node_environment"]
    return int(row["bytes"])


@dataclass(frozen=True)
class Column:
    """One way to pay for the stack's job."""

    name: str
    usd: float | None
    how: str


@dataclass(frozen=True)
class CostReport:
    stack: str
    region: str
    nodes: tuple[NodeCost, ...]
    hourly_usd: float | None
    # The job's length the columns assume: the run-time cap unless asked otherwise.
    run_hours: float | None
    one_run_max_usd: float | None
    monthly_running_usd: float | None
    monthly_stopped_usd: float | None
    storage_usd_gb_month: float | None
    first_boot_network_usd: float | None
    nat_gateway_usd_hr: float | None
    columns: tuple[Column, ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        document = asdict(self)
        document["nodes"] = [asdict(n) for n in self.nodes]
        return document


def _job_hours(stack: ResolvedStack) -> float | None:
    """The run-time cap of the machines that run the job (the cluster's, else the TPU's)."""
    if stack.cluster is not None:
        seconds = stack.cluster.max_run_seconds
        return None if seconds is None else seconds / 3600
    if stack.tpu is not None:
        return stack.tpu.max_run_seconds / 3600
    return None


def _job_machine_prices(stack: ResolvedStack, catalog: Catalog, region: str, as_they_are: bool) -> list[float | None]:
    """Each machine that runs the job (the cluster's nodes, the TPU VM) per hour at ``region``'s
    list prices: Spot or flex-start where the stack's node is (``as_they_are``), else every one
    on demand."""
    import trainstack_contract as contract

    prices: list[float | None] = []
    if stack.cluster is not None:
        for node in stack.cluster.nodes:
            prices.append(
                machine_hourly_usd(
                    catalog,
                    node.machine_type,
                    node.accelerator,
                    node.spot and as_they_are,
                    node.disk_gb,
                    node.boot_disk_type,
                    region,
                    flex_start=as_they_are and node.capacity == contract.FLEX_START,
                )
            )
    if stack.tpu is not None:
        prices.append(tpu_hourly_usd(catalog, stack.tpu.accelerator_type, stack.tpu.spot and as_they_are, region))
    return prices


def _on_demand_hourly(stack: ResolvedStack, catalog: Catalog) -> float | None:
    """The job's machines as they are, every Spot one on demand instead."""
    return _sum(_job_machine_prices(stack, catalog, stack.region, as_they_are=False))


def hourly_in_region(stack: ResolvedStack, region: str, catalog: Catalog | None = None) -> float | None:
    """The whole stack's price per running hour (:attr:`ResolvedStack.hourly_usd`: its machines
    with their GPUs and boot disks, Spot where its nodes are, the notebook) had it been created
    in ``region``; None when the catalog has no price there for some part, never another
    region's figure."""

    catalog = catalog or load_catalog()
    prices = _job_machine_prices(stack, catalog, region, as_they_are=True)
    notebook = stack.notebook
    if notebook is not None:
        prices.append(
            machine_hourly_usd(
                catalog,
                notebook.machine_type,
                notebook.accelerator,
                False,
                notebook.disk_gb,
                notebook.boot_disk_type,
                region,
            )
        )
    return _sum(prices)


def job_hourly(stack: ResolvedStack) -> float | None:
    """What the machines that run the job (the cluster, the TPU VM) cost an hour together."""
    return hourly_together(list(node_hourly(stack).values()))


def hourly_together(prices: list[float | None]) -> float | None:
    """What machines of these hourly prices cost an hour together; None when there are none or
    one has no catalog price."""
    return _sum(prices) if prices else None


def node_hourly(stack: ResolvedStack) -> dict[str, float | None]:
    """What each machine that runs jobs costs an hour, by its node name (None: not in the catalog)."""
    costs = {n.name: n.cost.usd_per_hour for n in stack.cluster.nodes} if stack.cluster else {}
    costs |= {stack.tpu.name: stack.tpu.cost.usd_per_hour} if stack.tpu else {}
    return costs


def _stopped_monthly(stack: ResolvedStack, catalog: Catalog) -> float | None:
    """Persistent disks keep billing while their VMs are stopped."""
    disks: list[float | None] = []
    if stack.cluster is not None:
        disks += [
            _times(catalog.disk_usd_gb_hour(n.boot_disk_type, stack.region), n.disk_gb * HOURS_PER_MONTH)
            for n in stack.cluster.nodes
        ]
    if stack.notebook is not None:
        notebook = stack.notebook
        disks.append(
            _times(catalog.disk_usd_gb_hour(notebook.boot_disk_type, stack.region), notebook.disk_gb * HOURS_PER_MONTH)
        )
    return _sum(disks) if disks else 0.0


# How the cost table names each way a machine gets its capacity (contract.CAPACITIES).
CAPACITY_WORDS = {
    "on_demand": "on demand",
    "spot": "Spot",
    "flex_start": "flex-start (Dynamic Workload Scheduler)",
    "reservation": "from a reservation",
}


def capacity_words(stack: ResolvedStack) -> str:
    """The capacity models of the stack's machines, as the cost table's first column prices
    them: "each machine Spot or on demand as the stack sets it" for the usual mix."""
    capacities = [n.capacity for n in stack.cluster.nodes] if stack.cluster else []
    if stack.tpu is not None:
        capacities.append(stack.tpu.capacity)
    used = [CAPACITY_WORDS[c] for c in CAPACITY_WORDS if c in capacities]
    if len(used) <= 1:
        return f"every machine {used[0] if used else 'on demand'}"
    return f"each machine {', '.join(used[:-1])} or {used[-1]} as the stack sets it"


def capacity_notes(stack: ResolvedStack, catalog: Catalog) -> list[str]:
    """How the flex-start and reserved machines are priced, and what a reservation bills
    (catalog: capacity_rules.csv); nothing for a stack of on-demand and Spot machines."""
    import trainstack_contract as contract

    nodes = list(stack.cluster.nodes) if stack.cluster else []
    notes = flex_start_notes([n for n in nodes if n.capacity == contract.FLEX_START], stack.region, catalog)
    reserved = [n.vm_name for n in nodes if n.capacity == contract.RESERVATION]
    reserved += [stack.tpu.vm_name] if stack.tpu is not None and stack.tpu.capacity == contract.RESERVATION else []
    if reserved:
        notes.append(
            f"reservation: {', '.join(reserved)} {'consumes' if len(reserved) == 1 else 'consume'} a reservation, which bills at on-demand rates for as long as "
            "it exists, whether these machines run, are stopped or deleted; the machines bill nothing more for what "
            "it covers (the prices shown are those rates). The stopped and run figures leave the reservation out"
        )
    return notes


def unpriced_parts(stack: ResolvedStack, catalog: Catalog) -> list[str]:
    """The parts of the stack's machines the catalog has no list price for in its region (a
    flex-start machine's own SKUs are said by :func:`flex_start_notes`)."""
    import trainstack_contract as contract

    region, missing = stack.region, []
    machines = [
        (n.machine_type, n.accelerator, n.spot, n.boot_disk_type)
        for n in (stack.cluster.nodes if stack.cluster else ())
        if n.capacity != contract.FLEX_START
    ]
    if stack.notebook is not None:
        notebook = stack.notebook
        machines.append((notebook.machine_type, notebook.accelerator, False, notebook.boot_disk_type))
    for machine_type, accelerator, spot, disk_type in machines:
        side = "Spot " if spot else ""
        if catalog.machine_usd_hr(machine_type, region, spot) is None:
            missing.append(f"{side}{machine_type}")
        if accelerator is not None and catalog.gpu_usd_hr(accelerator.type, region, spot) is None:
            missing.append(f"{side}{accelerator.type}")
        if catalog.disk_usd_gb_hour(disk_type, region) is None:
            missing.append(f"{disk_type} disks")
    if stack.tpu is not None and stack.tpu.cost.usd_per_hour is None:
        missing.append(stack.tpu.accelerator_type)
    return list(dict.fromkeys(missing))


def flex_start_notes(flex: list[ClusterNode], region: str, catalog: Catalog) -> list[str]:
    """How the flex-start nodes are priced: at Dynamic Workload Scheduler's SKUs (named), at the
    on-demand price where Google names no discount for the series, or not at all where the
    catalog holds no flex-start price for the machine in the region."""
    from trainstack.catalog import flex_start_rows

    discounted = [n for n in flex if is_flex_start_discounted(catalog, n.machine_type)]
    priced = [n for n in discounted if n.cost.usd_per_hour is not None]
    notes = []
    if priced:
        skus = {
            row.sku_description
            for n in priced
            for row in flex_start_rows(catalog, n.machine_type, n.accelerator.type if n.accelerator else None, region)
        }
        notes.append(
            f"flex-start: {', '.join(n.vm_name for n in priced)} priced at Dynamic Workload Scheduler's own SKUs "
            f"({'; '.join(sorted(skus))}: flex_start_prices.csv)"
        )
    unpriced = [n for n in discounted if n.cost.usd_per_hour is None]
    if unpriced:
        notes.append(
            f"flex-start: no flex-start price is known for {', '.join(sorted({n.machine_type for n in unpriced}))} "
            f"in {region} (flex_start_prices.csv), so {', '.join(n.vm_name for n in unpriced)} "
            f"{'is' if len(unpriced) == 1 else 'are'} left unpriced rather than shown at the on-demand list price; "
            "`trainstack catalog refresh` reads Google's DWS SKUs"
        )
    full_price = [n.vm_name for n in flex if n not in discounted]
    if full_price:
        notes.append(
            f"flex-start: {', '.join(full_price)} priced at the on-demand list price: Google names no flex-start "
            "discount for its series (capacity_rules.csv)"
        )
    return notes


def cost_report(stack: ResolvedStack, run_hours: float | None = None, catalog: Catalog | None = None) -> CostReport:
    catalog = catalog or load_catalog()
    region = stack.region
    notes: list[str] = []
    warnings: list[str] = []
    hourly = stack.hourly_usd
    machines_hourly = job_hourly(stack)
    cap_hours = _job_hours(stack)
    hours = run_hours if run_hours is not None else cap_hours

    one_run_max = _times(machines_hourly, cap_hours)
    if stack.cluster is not None and cap_hours is None:
        notes.append("the cluster has no run-time cap (acknowledged): one run has no upper bound")
    if stack.notebook is not None:
        notes.append(
            f"the notebook is not part of a run: it bills while running and stops after "
            f"{stack.notebook.idle_timeout_minutes} idle minutes"
        )

    training_vms = len(stack.cluster.nodes) if stack.cluster else 0
    # Every machine of the stack reaches the internet through the one NAT gateway.
    all_vms = training_vms + (1 if stack.tpu else 0) + (1 if stack.notebook else 0)
    per_vm = catalog.regional_rates.get(("nat", "gateway", region))
    flat = catalog.regional_rates.get(("nat", "gateway_flat", region))
    nat_gateway = None
    if all_vms > NAT_PRICED_VMS:
        nat_gateway = flat
    elif per_vm is not None and all_vms:
        nat_gateway = round(per_vm * all_vms, 4)
    processing = catalog.regional_rates.get(("nat", "data_processing", region))
    download_gib = node_download_bytes() / BYTES_PER_GIB
    first_boot = _times(processing, download_gib * training_vms) if training_vms and not stack.wheelhouse else 0.0
    if training_vms and stack.wheelhouse:
        notes.append(
            "first boot: each cluster node installs its Python packages from the stack's wheelhouse "
            "(storage.wheelhouse), through Private Google Access: no Cloud NAT data processing"
        )
    elif training_vms:
        notes.append(
            f"first boot: each cluster node downloads {download_gib:.1f} GiB of Python packages through Cloud NAT "
            "(none with storage.wheelhouse)"
        )
    if stack.network is not None:
        # The network is the host's: its Cloud NAT, if it has one, bills the host project.
        nat_gateway, first_boot = 0.0, 0.0
        notes.append(
            f"network: the stack joins {stack.network.subnetwork}; its egress (Cloud NAT, if the host has one) bills "
            f"project {stack.network.host_project}, not this stack"
        )

    storage_rate = catalog.regional_rates.get(("storage", "standard", region))
    noncurrent_days = stack.storage.noncurrent_version_days
    notes.append(
        f"storage: every GB kept in the bucket costs {'unknown' if storage_rate is None else f'${storage_rate}'} "
        f"a month; an overwritten checkpoint is kept (and billed) {noncurrent_days} more days by versioning, "
        f"and a deleted object {SOFT_DELETE_DAYS} days by soft delete"
    )

    columns: list[Column] = []
    if machines_hourly is not None or stack.cluster is not None or stack.tpu is not None:
        length = "unknown length" if hours is None else f"{hours:g} h"
        columns = [
            Column(
                "as configured",
                _times(machines_hourly, hours),
                f"{capacity_words(stack)}, released when the job ends ({length})",
            ),
            Column(
                "on demand, left running a day",
                _times(_on_demand_hourly(stack, catalog), None if hours is None else hours + LEFT_RUNNING_HOURS),
                f"the same machines on demand, still running {LEFT_RUNNING_HOURS} h after the job",
            ),
        ]

    budget = stack.budget
    if budget is not None and one_run_max is not None and one_run_max > budget.monthly_usd:
        warnings.append(
            f"one run can cost up to ${one_run_max:,.2f} ({cap_hours:g} h at ${machines_hourly:,.2f}/h), more than "
            f"budget.monthly_usd ${budget.monthly_usd:,.2f}"
        )
    notes += capacity_notes(stack, catalog)
    if hourly is None:
        missing = unpriced_parts(stack, catalog)
        named = f" ({', '.join(missing)})" if missing else ""
        notes.append(f"some part has no {region} price in the catalog{named}: totals that include it are unknown")
    return CostReport(
        stack=stack.stack,
        region=region,
        nodes=stack.costs,
        hourly_usd=hourly,
        run_hours=hours,
        one_run_max_usd=one_run_max,
        monthly_running_usd=_times(hourly, HOURS_PER_MONTH),
        monthly_stopped_usd=_stopped_monthly(stack, catalog),
        storage_usd_gb_month=storage_rate,
        first_boot_network_usd=first_boot,
        nat_gateway_usd_hr=nat_gateway,
        columns=tuple(columns),
        warnings=tuple(warnings),
        notes=tuple(notes),
    )


def _usd(value: float | None) -> str:
    if value is None:
        return "unknown"
    # Cents hide the small hourly rates (a NAT gateway for 3 VMs is $0.0042/h).
    return f"${value:,.4f}" if 0 < value < 0.1 else f"${value:,.2f}"


def report_lines(report: CostReport) -> list[str]:
    """The report as `cost` and `plan` print it."""
    lines = [f"Cost of stack {report.stack} at {report.region} list prices (USD; unknown where the catalog has none)"]
    lines.append("  while running, per hour:")
    for node in report.nodes:
        lines.append(f"    {node.name:<30} {node.description:<46} {_usd(node.usd_per_hour)}")
    lines.append(f"    {'total':<30} {'':<46} {_usd(report.hourly_usd)}")
    one_run = _usd(report.one_run_max_usd) if report.columns else "no job machines"
    lines.append(f"  one run at most (up to the run-time cap):     {one_run}")
    lines.append(f"  a month left running 24/7:                    {_usd(report.monthly_running_usd)}")
    lines.append(f"  a month stopped (persistent disks):           {_usd(report.monthly_stopped_usd)}")
    lines.append(f"  storage, per GB-month kept in the bucket:     {_usd(report.storage_usd_gb_month)}")
    lines.append(f"  first boot, Cloud NAT data processing:        {_usd(report.first_boot_network_usd)}")
    lines.append(f"  Cloud NAT gateway, per hour while running:    {_usd(report.nat_gateway_usd_hr)}")
    if report.columns:
        lines.append("  the job, two ways:")
        for column in report.columns:
            lines.append(f"    {column.name:<32} {_usd(column.usd):>12}  {column.how}")
    lines += [f"  warning: {w}" for w in report.warnings]
    lines += [f"  note: {n}" for n in report.notes]
    return lines
