"""What Google Cloud offers, read from the CSV files beside this module."""

# The figures (machine shapes, GPU limits, zones, prices, TPU runtimes, images) live in data,
# each row with its source and date; this module only loads them into typed records.
# The checks that use them are in trainstack.stackmodel.catalog_fit.

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date
from functools import cache
from importlib import resources

from trainstack.catalog.overlay import Overlay, current_overlay, shown_path
from trainstack.catalog.rows import column, records
from trainstack_contract.tpu import is_multi_host, is_pod_runtime

# Google prices a month as 730 hours.
HOURS_PER_MONTH = 730
# The region of the prices in gpus.csv, machine_types.csv, tpu_generations.csv and disks.csv.
# Other regions are priced from regional_prices.csv (and regional_rates.csv) alone: a region
# without a row there has no known price, never the us-central1 one.
BASE_PRICE_REGION = "us-central1"


def _optional_float(text: str) -> float | None:
    return float(text) if text.strip() else None


@dataclass(frozen=True)
class Gpu:
    name: str = field(metadata=column("gpu"))
    display_name: str
    attach: str  # "n1": attached to N1 machine types; "builtin": comes with its own machine family
    status: str  # "available" or "retired"
    memory_gb: float | None
    on_demand_usd_hr: float | None
    spot_usd_hr: float | None
    note: str

    @property
    def retired(self) -> bool:
        return self.status == "retired"

    @property
    def workbench_type(self) -> str:
        return workbench_enum(self.name)


def workbench_enum(compute_engine_name: str) -> str:
    """Workbench and Vertex AI name GPUs and disk types by enum (NVIDIA_TESLA_T4, PD_BALANCED)
    where Compute Engine uses nvidia-tesla-t4 and pd-balanced."""
    return compute_engine_name.upper().replace("-", "_")


@dataclass(frozen=True)
class MachineType:
    name: str = field(metadata=column("machine_type"))
    series: str
    vcpus: int
    memory_gb: float
    builtin_gpu: str | None
    builtin_gpu_count: int = field(metadata=column(empty=0))
    on_demand_usd_hr: float | None  # without its GPUs
    spot_usd_hr: float | None
    on_demand_allowed: (
        bool  # False: Compute Engine creates it only as Spot, flex-start or reserved (capacity_rules.csv)
    )
    nic_type: str | None  # the network interface the series requires (A3: GVNIC)
    boot_disk_type: str  # the Compute Engine disk type of its boot disk (A3 Ultra: hyperdisk-balanced)


@dataclass(frozen=True)
class N1GpuLimit:
    gpu: str
    count: int = field(metadata=column("gpu_count"))
    max_vcpus: int
    max_memory_gb: float


@dataclass(frozen=True)
class TpuGeneration:
    generation: str
    api_type: str
    prefix: str
    suffix_unit: str  # "cores": the number after the dash counts TensorCores; "chips": it counts chips
    cores_per_chip: int
    chips_per_host: int
    valid_suffixes: tuple[int, ...]
    on_demand_usd_chip_hr: float | None
    spot_usd_chip_hr: float | None

    def chips(self, suffix: int) -> int:
        return suffix // self.cores_per_chip if self.suffix_unit == "cores" else suffix

    def is_multi_host(self, suffix: int) -> bool:
        """A slice larger than one host is a pod slice: several TPU VMs, a ``-pod-`` runtime."""
        return is_multi_host(self.chips(suffix), self.chips_per_host)

    @property
    def single_host_suffixes(self) -> list[int]:
        """The slice sizes of one host: the ones trainstack runs."""
        return [suffix for suffix in self.valid_suffixes if not self.is_multi_host(suffix)]


@dataclass(frozen=True)
class TpuRuntime:
    version: str = field(metadata=column("runtime_version"))
    tensorflow_version: str
    generations: tuple[str, ...]
    status: str

    @property
    def is_pod(self) -> bool:
        """A runtime for pod slices, which trainstack does not run."""
        return is_pod_runtime(self.version)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


@dataclass(frozen=True)
class Image:
    purpose: str
    project: str = field(metadata=column("image_project"))
    family: str = field(metadata=column("image_family"))

    @property
    def uri(self) -> str:
        return f"projects/{self.project}/global/images/family/{self.family}"


@dataclass(frozen=True)
class HourlyPrice:
    on_demand_usd_hr: float | None
    spot_usd_hr: float | None

    def get(self, spot: bool) -> float | None:
        return self.spot_usd_hr if spot else self.on_demand_usd_hr


@dataclass(frozen=True)
class FlexStartPrice:
    """One of Dynamic Workload Scheduler's flex-start prices (flex_start_prices.csv)."""

    kind: str  # gpu, machine_core or machine_ram
    name: str  # the GPU type, or the machine family whose host it prices
    region: str
    usd_hr: float  # per GPU-hour, vCPU-hour or GiB-hour
    sku_description: str  # the Cloud Billing SKU's description


@dataclass(frozen=True)
class CapacityRule:
    """One row of capacity_rules.csv: a rule of how machines are had, with its source."""

    rule: str
    subject: str
    value: str
    note: str
    source: str
    as_of: str


@dataclass(frozen=True)
class CapacityRules:
    """Google's rules for flex-start, reservations and TPU capacity (capacity_rules.csv)."""

    rows: tuple[CapacityRule, ...] = ()

    def _value(self, rule: str, subject: str = "") -> str | None:
        return next((r.value for r in self.rows if r.rule == rule and r.subject == subject), None)

    def row(self, rule: str, subject: str = "") -> CapacityRule | None:
        return next((r for r in self.rows if r.rule == rule and r.subject == subject), None)

    @property
    def flex_start_series(self) -> frozenset[str]:
        """The machine series a standalone flex-start VM can be created with."""
        return frozenset(r.subject for r in self.rows if r.rule == "flex_start_series" and r.value == "yes")

    @property
    def flex_start_discounted_series(self) -> frozenset[str]:
        """The series whose flex-start price Google says is below on demand."""
        row = next((r for r in self.rows if r.rule == "flex_start_discounted_series"), None)
        return frozenset(row.subject.split()) if row is not None and row.value == "yes" else frozenset()

    @property
    def flex_start_max_run_hours(self) -> float | None:
        value = self._value("flex_start_max_run_hours")
        return float(value) if value else None

    @property
    def flex_start_termination_actions(self) -> tuple[str, ...]:
        """The termination actions a flex-start VM may have at the end of its run."""
        return tuple((self._value("flex_start_termination_actions") or "DELETE").split())

    @property
    def flex_start_min_run_minutes(self) -> float | None:
        value = self._value("flex_start_min_run_minutes")
        return float(value) if value else None

    @property
    def flex_start_reservation_affinity(self) -> str:
        return self._value("flex_start_reservation_affinity") or "NO_RESERVATION"

    @property
    def flex_start_automatic_restart(self) -> bool:
        return self._value("flex_start_automatic_restart") == "yes"

    @property
    def flex_start_stoppable(self) -> bool:
        return self._value("flex_start_stoppable") == "yes"

    def reservation_bound(self, machine_type: str) -> str | None:
        """How ``machine_type``'s reserved capacity binds its VMs: "always" (future reservations
        only: RESERVATION_BOUND), "calendar" (either kind: the stack says), None (never)."""
        row = next((r for r in self.rows if r.rule == "reservation_bound_machine" and r.subject == machine_type), None)
        return row.value if row is not None else None

    @property
    def reservation_with_spot(self) -> bool:
        return self._value("reservation_spot") == "yes"

    def tpu_capacities(self) -> dict[str, CapacityRule]:
        """Each capacity a TPU VM may be asked for, and whether it can (value yes/no) and why."""
        return {r.subject: r for r in self.rows if r.rule == "tpu_capacity"}


@dataclass(frozen=True)
class Catalog:
    gpus: dict[str, Gpu]
    machine_types: dict[str, MachineType]
    n1_gpu_limits: dict[str, dict[int, N1GpuLimit]]
    # GPU -> the zones that offer it on any of its machine types.
    gpu_zones: dict[str, frozenset[str]]
    tpu_generations: dict[str, TpuGeneration]
    # generation -> zone -> the slice sizes offered there (None: every size of the generation)
    tpu_zones: dict[str, dict[str, frozenset[int] | None]]
    tpu_runtimes: dict[str, TpuRuntime]
    images: dict[str, Image] = field(default_factory=dict)
    disk_usd_gb_month: dict[str, float | None] = field(default_factory=dict)
    regions: frozenset[str] = frozenset()
    # Every zone of every region (zones.csv).
    zones: frozenset[str] = frozenset()
    # (kind, name, region) -> price; kinds "machine", "gpu", "tpu_chip".
    regional_prices: dict[tuple[str, str, str], HourlyPrice] = field(default_factory=dict)
    # (kind, name, region) -> USD per unit; kinds "disk" (GB-month), "storage", "nat", ...
    regional_rates: dict[tuple[str, str, str], float] = field(default_factory=dict)
    # Built-in GPU -> zone -> the machine types carrying it that the zone offers (None: all of
    # them). Availability is per machine type: a2-megagpu-16g is in fewer zones than a2-highgpu-1g.
    gpu_zone_machines: dict[str, dict[str, frozenset[str] | None]] = field(default_factory=dict)
    # How machines can be had: flex-start, reservations, TPU capacity (capacity_rules.csv).
    capacity: CapacityRules = field(default_factory=CapacityRules)
    # (kind, name, region) -> Dynamic Workload Scheduler's flex-start price (flex_start_prices.csv):
    # kinds "gpu" (per GPU-hour), "machine_core" (per vCPU-hour) and "machine_ram" (per GiB-hour)
    # of a machine family's host ("a3-highgpu").
    flex_start_rates: dict[tuple[str, str, str], FlexStartPrice] = field(default_factory=dict)

    def _hourly(self, kind: str, name: str, region: str, spot: bool, base: HourlyPrice | None) -> float | None:
        regional = self.regional_prices.get((kind, name, region))
        value = regional.get(spot) if regional is not None else None
        if value is None and region == BASE_PRICE_REGION and base is not None:
            value = base.get(spot)
        return value

    def machine_usd_hr(self, machine_type: str, region: str, spot: bool) -> float | None:
        """The machine without its GPUs, per hour in ``region``; None when unknown there."""
        machine = self.machine_types.get(machine_type)
        base = None if machine is None else HourlyPrice(machine.on_demand_usd_hr, machine.spot_usd_hr)
        return self._hourly("machine", machine_type, region, spot, base)

    def gpu_usd_hr(self, gpu_type: str, region: str, spot: bool) -> float | None:
        """One GPU per hour in ``region`` (built-in GPUs are priced per GPU too)."""
        gpu = self.gpus.get(gpu_type)
        base = None if gpu is None else HourlyPrice(gpu.on_demand_usd_hr, gpu.spot_usd_hr)
        return self._hourly("gpu", gpu_type, region, spot, base)

    def tpu_chip_usd_hr(self, generation: str, region: str, spot: bool) -> float | None:
        record = self.tpu_generations.get(generation)
        base = None if record is None else HourlyPrice(record.on_demand_usd_chip_hr, record.spot_usd_chip_hr)
        return self._hourly("tpu_chip", generation, region, spot, base)

    def disk_usd_gb_hour(self, disk_type: str, region: str = BASE_PRICE_REGION) -> float | None:
        """None when the catalog has no price for that disk type in ``region``."""
        monthly = self.regional_rates.get(("disk", disk_type, region))
        if monthly is None and region == BASE_PRICE_REGION:
            monthly = self.disk_usd_gb_month.get(disk_type)
        return None if monthly is None else monthly / HOURS_PER_MONTH

    def machine_zones(self, machine_type: str) -> frozenset[str]:
        """The zones that offer a machine type whose GPUs are built in (A2, A3, A4, G2); empty
        for a machine type the catalog does not know or one without built-in GPUs."""
        machine = self.machine_types.get(machine_type)
        if machine is None or machine.builtin_gpu is None:
            return frozenset()
        return frozenset(
            zone
            for zone, machines in self.gpu_zone_machines.get(machine.builtin_gpu, {}).items()
            if machines is None or machine_type in machines
        )

    def zones_of(self, region: str) -> list[str]:
        return sorted(zone for zone in self.zones if zone.rsplit("-", 1)[0] == region)

    def tpu_zones_for(self, generation: str, size: int) -> list[str]:
        """The zones that offer this slice size (availability is per size, not per generation)."""
        return sorted(
            zone for zone, sizes in self.tpu_zones.get(generation, {}).items() if sizes is None or size in sizes
        )

    def tensorflow_runtimes(self, generation: str) -> list[TpuRuntime]:
        """The TPU runtimes that bring TensorFlow for ``generation``, newest TensorFlow first and,
        within one version, the plainest name first (tpu-vm-tf-2.18.0-pjrt before its -v5e-and-v6
        variant); single-host and pod runtimes alike. Empty for a generation that runs no
        TensorFlow (TPU7x)."""
        runtimes = [r for r in self.tpu_runtimes.values() if r.tensorflow_version and generation in r.generations]
        return sorted(runtimes, key=lambda r: (_version_key(r.tensorflow_version), -len(r.version)), reverse=True)

    def tensorflow_runtime(self, generation: str) -> TpuRuntime | None:
        """The current single-host TensorFlow runtime a new stack takes for ``generation``."""
        return next(
            (r for r in self.tensorflow_runtimes(generation) if r.status == "current" and not r.is_pod),
            None,
        )

    def tpu_generation_for(self, accelerator_type: str) -> tuple[TpuGeneration, int] | None:
        """Split "v5litepod-8" into its generation record and size 8; None when unknown."""
        prefix, _, size = accelerator_type.rpartition("-")
        for generation in self.tpu_generations.values():
            if generation.prefix == prefix and size.isdigit():
                return generation, int(size)
        return None

    def tpu_generation_without_tensorflow(self, accelerator_type: str) -> TpuGeneration | None:
        """The generation ``accelerator_type`` names ("tpu7x", "tpu7x-8", "tpu7x-standard-4t")
        when that generation runs no TensorFlow; None otherwise."""
        for generation in self.tpu_generations.values():
            named = accelerator_type == generation.prefix or accelerator_type.startswith(f"{generation.prefix}-")
            if named and not self.tensorflow_runtimes(generation.generation):
                return generation
        return None

    def tensorflow_tpu_generations(self) -> list[TpuGeneration]:
        """The generations a TPU VM of trainstack can run: those with a TensorFlow runtime."""
        return [g for g in self.tpu_generations.values() if self.tensorflow_runtimes(g.generation)]


def _rows(filename: str, overlay: Overlay | None = None) -> list[dict[str, str]]:
    """The shipped rows of ``filename``, with ``overlay``'s (`catalog refresh`) laid over them."""
    text = resources.files(__package__).joinpath(filename).read_text(encoding="utf-8")
    shipped = list(csv.DictReader(text.splitlines()))
    return shipped if overlay is None else overlay.merge(filename, shipped)


def _inferred(confidence: str) -> bool:
    """An AI Platform table's row whose Compute Engine machine is inferred, not read from Google."""
    return confidence == "inferred"


def _regional_prices(overlay: Overlay | None) -> dict[tuple[str, str, str], HourlyPrice]:
    return {
        (row["kind"], row["name"], row["region"]): HourlyPrice(
            _optional_float(row["on_demand_usd_hr"]), _optional_float(row["spot_usd_hr"])
        )
        for row in _rows("regional_prices.csv", overlay)
    }


def flex_start_machine_usd_hr(catalog: Catalog, machine_type: str, region: str) -> float | None:
    """A flex-start machine's host (its vCPUs and memory, without its GPUs) per hour at
    Dynamic Workload Scheduler's own SKUs in ``region``; None when they are not known there."""
    machine = catalog.machine_types.get(machine_type)
    family = machine_family(machine_type)
    core = catalog.flex_start_rates.get(("machine_core", family, region))
    ram = catalog.flex_start_rates.get(("machine_ram", family, region))
    if machine is None or core is None or ram is None:
        return None
    return machine.vcpus * core.usd_hr + machine.memory_gb * ram.usd_hr


def flex_start_gpu_usd_hr(catalog: Catalog, gpu_type: str, region: str) -> float | None:
    """One GPU of a flex-start machine per hour in ``region``; None when not known there."""
    found = catalog.flex_start_rates.get(("gpu", gpu_type, region))
    return None if found is None else found.usd_hr


def flex_start_rows(catalog: Catalog, machine_type: str, gpu_type: str | None, region: str) -> list[FlexStartPrice]:
    """The flex-start prices a machine (and its GPUs) is priced with in ``region``."""
    family = machine_family(machine_type)
    keys = [("machine_core", family, region), ("machine_ram", family, region), ("gpu", gpu_type or "", region)]
    return [catalog.flex_start_rates[key] for key in keys if key in catalog.flex_start_rates]


def machine_family(machine_type: str) -> str:
    """The family whose host SKUs price a machine type: its name without the size ("a3-highgpu"
    of "a3-highgpu-8g"), since one series' families bill differently (A3 High, Mega, Ultra)."""
    return machine_type.rsplit("-", 1)[0]


def _flex_start_rates(overlay: Overlay | None) -> dict[tuple[str, str, str], FlexStartPrice]:
    # A row without a price (an overlay of `catalog refresh` may hold one) gives no rate.
    priced = [row for row in _rows("flex_start_prices.csv", overlay) if row["usd_hr"].strip()]
    return {
        (rate.kind, rate.name, rate.region): rate for rate in records(priced, FlexStartPrice, "flex_start_prices.csv")
    }


def _regional_rates() -> dict[tuple[str, str, str], float]:
    if not resources.files(__package__).joinpath("regional_rates.csv").is_file():
        return {}
    return {
        (row["kind"], row["name"], row["region"]): float(row["usd"])
        for row in _rows("regional_rates.csv")
        if row["usd"].strip()
    }


@cache
def load_catalog() -> Catalog:
    """The catalog the commands and the Pulumi program use: the shipped CSVs, with the overlay
    of the last `trainstack catalog refresh` over them unless TRAINSTACK_CATALOG=shipped."""
    return build_catalog(current_overlay())


@cache
def shipped_as_of() -> str:
    """The month of the shipped catalog's newest GPU and price rows ("2026-11")."""
    return max(row["as_of"][:7] for name in ("gpus.csv", "gpu_zones.csv") for row in _rows(name))


def catalog_line() -> str:
    """Which catalog the commands use, in one line for their output."""
    overlay = current_overlay()
    if overlay is None:
        return f"catalog: shipped ({shipped_as_of()})"
    return (
        f"catalog: refreshed {overlay.refreshed} from project {overlay.project} "
        f"(overlay {shown_path(overlay.directory)}), shipped {shipped_as_of()} beneath"
    )


def build_catalog(overlay: Overlay | None) -> Catalog:
    """The shipped catalog with ``overlay`` laid over it (None: the shipped CSVs alone)."""

    def rows(filename: str) -> list[dict[str, str]]:
        return _rows(filename, overlay)

    gpus = {gpu.name: gpu for gpu in records(rows("gpus.csv"), Gpu, "gpus.csv")}
    machine_types = {
        machine.name: machine for machine in records(rows("machine_types.csv"), MachineType, "machine_types.csv")
    }
    limits: dict[str, dict[int, N1GpuLimit]] = defaultdict(dict)
    for limit in records(rows("n1_gpu_limits.csv"), N1GpuLimit, "n1_gpu_limits.csv"):
        limits[limit.gpu][limit.count] = limit
    gpu_zones: dict[str, set[str]] = defaultdict(set)
    gpu_zone_machines: dict[str, dict[str, frozenset[str] | None]] = defaultdict(dict)
    for row in rows("gpu_zones.csv"):
        gpu_zones[row["gpu"]].add(row["zone"])
        machines = None if row["machine_types"] == "all" else frozenset(row["machine_types"].split())
        gpu_zone_machines[row["gpu"]][row["zone"]] = machines
    generations = {
        generation.generation: generation
        for generation in records(rows("tpu_generations.csv"), TpuGeneration, "tpu_generations.csv")
    }
    tpu_zones: dict[str, dict[str, frozenset[int] | None]] = defaultdict(dict)
    for row in rows("tpu_zones.csv"):
        sizes = None if row["sizes"] == "all" else frozenset(int(size) for size in row["sizes"].split())
        tpu_zones[row["generation"]][row["zone"]] = sizes
    runtimes = {
        runtime.version: runtime for runtime in records(rows("tpu_runtimes.csv"), TpuRuntime, "tpu_runtimes.csv")
    }
    images: dict[str, Image] = {}
    for image in records(rows("images.csv"), Image, "images.csv"):
        # The first row per purpose is the one the program uses; later rows are alternatives.
        images.setdefault(image.purpose, image)
    return Catalog(
        gpus=gpus,
        machine_types=machine_types,
        n1_gpu_limits=dict(limits),
        gpu_zones={gpu: frozenset(zones) for gpu, zones in gpu_zones.items()},
        tpu_generations=generations,
        tpu_zones=dict(tpu_zones),
        tpu_runtimes=runtimes,
        images=images,
        disk_usd_gb_month={row["disk_type"]: _optional_float(row["usd_gb_month"]) for row in rows("disks.csv")},
        regions=frozenset(row["region"] for row in rows("regions.csv")),
        zones=frozenset(row["zone"] for row in rows("zones.csv")),
        regional_prices=_regional_prices(overlay),
        flex_start_rates=_flex_start_rates(overlay),
        regional_rates=_regional_rates(),
        gpu_zone_machines=dict(gpu_zone_machines),
        capacity=CapacityRules(tuple(records(_rows("capacity_rules.csv"), CapacityRule, "capacity_rules.csv"))),
    )


# --- AI Platform Training (retired), for `trainstack import` ------------------------------------


@dataclass(frozen=True)
class LegacyMachineType:
    """An AI Platform machine type and the Compute Engine machine (and current GPU) standing for it."""

    name: str = field(metadata=column("legacy_type"))
    machine_type: str
    gpu: str | None
    gpu_count: int
    retired_gpu: str | None  # the GPU it carried when that GPU is retired (K80)
    # True: the Compute Engine machine is inferred, not read from a Google table
    inferred: bool = field(metadata=column("confidence", parse=_inferred))
    source: str
    note: str


@dataclass(frozen=True)
class ScaleTier:
    name: str = field(metadata=column("tier"))
    master_type: str
    worker_type: str | None
    worker_count: int
    parameter_server_type: str | None
    parameter_server_count: int
    inferred: bool = field(metadata=column("confidence", parse=_inferred))
    source: str
    note: str


@cache
def legacy_machine_types() -> dict[str, LegacyMachineType]:
    filename = "ai_platform_machine_types.csv"
    return {legacy.name: legacy for legacy in records(_rows(filename), LegacyMachineType, filename)}


@cache
def scale_tiers() -> dict[str, ScaleTier]:
    filename = "ai_platform_scale_tiers.csv"
    return {tier.name: tier for tier in records(_rows(filename), ScaleTier, filename)}


@dataclass(frozen=True)
class TrainingContainer:
    framework: str
    version: str
    accelerator: str  # "cpu" or "gpu"
    uri: str
    # Google's end of availability: after it, a job naming the container is refused.
    available_until: date
    note: str


@cache
def vertex_training_containers() -> list[TrainingContainer]:
    """Google's prebuilt training containers for Vertex AI's python_package_spec."""
    filename = "vertex_training_containers.csv"
    return records(_rows(filename), TrainingContainer, filename)


# --- Compute Engine quota metrics, for `trainstack quota` ---------------------------------------


@dataclass(frozen=True)
class QuotaMetric:
    """Which Compute Engine quota metric (``Quota.metric`` of regions.get or projects.get) a
    resource draws on: ``kind`` gpu (by GPU type), cpu (by machine series), tpu (by generation)
    or gpus_all_regions; ``pool`` on_demand or preemptible. An empty ``metric``: Google's
    quotas report none for it (said, never guessed). Scope ``cloud_quotas``: Compute Engine's
    regions.get does not report it, and the quota is read from the Cloud Quotas API by
    ``quota_id`` in the stack's region (and ``gpu_family``, for the GPU-family quota)."""

    kind: str
    name: str
    pool: str
    metric: str
    scope: str  # "region" (regions.get), "project" (projects.get) or "cloud_quotas"
    quota_id: str  # Cloud Quotas' ID for `gcloud beta quotas preferences create`; empty: unknown
    note: str
    gpu_family: str = ""  # the gpu_family dimension of GPUS-PER-GPU-FAMILY-per-project-region

    @property
    def label(self) -> str:
        """The quota as the report names it: the metric, and the GPU family where there is one."""
        return f"{self.metric} [gpu_family={self.gpu_family}]" if self.gpu_family else self.metric


@cache
def quota_metrics() -> dict[tuple[str, str, str], QuotaMetric]:
    """(kind, name, pool) -> the metric, from quota_metrics.csv."""
    metrics = records(_rows("quota_metrics.csv"), QuotaMetric, "quota_metrics.csv")
    return {(metric.kind, metric.name, metric.pool): metric for metric in metrics}


@cache
def service_agent_domains() -> dict[str, str]:
    """API ("storage.googleapis.com") -> where its Google-managed service agent lives: the agent
    is service-PROJECT_NUMBER@DOMAIN (service_agents.csv)."""
    return {row["service"]: row["domain"] for row in _rows("service_agents.csv")}


@dataclass(frozen=True)
class UnsupportedMachine:
    """A machine family Google offers that trainstack refuses, and why (unsupported_machines.csv)."""

    family: str = field(metadata=column("machine_family"))
    gpu: str
    reason: str
    source: str


@cache
def unsupported_machines() -> dict[str, UnsupportedMachine]:
    """Machine family ("a4x-highgpu") -> why trainstack does not run on it."""
    filename = "unsupported_machines.csv"
    return {machine.family: machine for machine in records(_rows(filename), UnsupportedMachine, filename)}


@dataclass(frozen=True)
class UnverifiedRow:
    """A shipped catalog row that rests on no confirmed source: its note or source says so."""

    filename: str
    subject: str  # the row's first columns, as they name it
    note: str
    source: str
    as_of: str
    key: tuple[str, ...] = ()  # the values of the row's first two columns, to match it by


def unverified_rows() -> list[UnverifiedRow]:
    """Every row of the shipped catalog whose note or source says "unverified", file by file."""
    found = []
    for entry in sorted(resources.files(__package__).iterdir(), key=lambda path: path.name):
        if not entry.name.endswith(".csv"):
            continue
        reader = csv.DictReader(
            line for line in entry.read_text(encoding="utf-8").splitlines() if not line.startswith("#")
        )
        columns = [name for name in reader.fieldnames or () if name not in ("note", "source", "as_of")]
        for row in reader:
            note, source = row.get("note") or "", row.get("source") or ""
            if "unverified" in (note + " " + source).lower():
                key = tuple(row.get(column) or "" for column in columns[:2])
                subject = " ".join(value for value in key if value)
                found.append(UnverifiedRow(entry.name, subject, note, source, row.get("as_of") or "", key))
    return found
