"""`trainstack catalog refresh`: offerings and prices read from Google's APIs into the catalog
overlay (:mod:`trainstack.catalog.overlay`), and what changed against the shipped CSVs.

Read: Compute Engine ``acceleratorTypes.aggregatedList`` (the GPU types of every zone) and
``machineTypes.aggregatedList`` (the machine types with built-in GPUs, per zone) into
gpu_zones.csv and zones.csv rows; Cloud TPU v2 ``projects.locations.acceleratorTypes.list``
per TPU zone into tpu_zones.csv rows (``runtimeVersions.list`` is compared, not written); the
Cloud Billing Catalog's ``services.skus.list`` for GPU prices per GPU and TPU prices per chip,
on demand and Spot, and for each machine type of the series billing_skus.csv names, its vCPUs
and memory at its series' per-vCPU and per-GB SKUs, into regional_prices.csv rows.

A zone that an answer marks unreachable, or leaves out, keeps its shipped rows: only zones
read completely replace theirs.
"""

from __future__ import annotations

import csv
import re
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from trainstack.base.discovery import item_problems
from trainstack.base.googleapis import GoogleApiError, pages
from trainstack.catalog import Catalog, build_catalog
from trainstack.catalog.overlay import MANIFEST, Overlay

# Cloud Billing service ids (https://cloud.google.com/skus): Compute Engine, Cloud TPU.
COMPUTE_SERVICE = "services/6F81-5844-456A"
TPU_SERVICE = "services/E000-3F24-B8AA"
# SKUs that are not the plain on-demand or Spot hour (commitments, reservations, sole tenancy,
# virtual workstations, flex-start and calendar-mode capacity).
EXCLUDED_SKU = re.compile(r"commit|reserv|sole tenan|virtual workstation|\bDWS\b|calendar|flex", re.IGNORECASE)
# Compute Engine's per-zone warnings that mean the zone was not read (compute.v1 discovery
# document, the ScopedList warning codes); NO_RESULTS_ON_PAGE means read, and empty.
UNREAD_WARNINGS = frozenset({"UNREACHABLE", "PARTIAL_SUCCESS"})
# What a name in Google's answers must be to enter the catalog, matched whole: a zone
# (us-central1-a), and a GPU, machine type, TPU type or runtime (nvidia-l4, tpu-vm-tf-2.18.0-pjrt).
ZONE = re.compile(r"[a-z]+(?:-[a-z]+)*[0-9]+-[a-z]")
RESOURCE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
# The dearest unit the catalog prices (a GPU-, TPU-chip- or vCPU-hour, a GiB-hour) is far
# below this: a larger price, or a negative one, is not taken.
MAX_USD_PER_UNIT_HOUR = 1000.0
# The compute v1 schema of each aggregatedList's items.
SCOPED_SCHEMAS = {
    "acceleratorTypes": ("AcceleratorTypesScopedList", "AcceleratorType"),
    "machineTypes": ("MachineTypesScopedList", "MachineType"),
}

ServiceFactory = Callable[[str, str], Any]


@dataclass
class Refresh:
    """What one refresh read: overlay rows per file, the zones each file holds completely,
    and what it could not read or did not rebuild (one line each)."""

    project: str
    regions: tuple[str, ...]
    today: str
    rows: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    zones_read: dict[str, set[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Items of Google's answers left out: off the method's schema, or outside the catalog's
    # patterns and bounds (what, the first reason), counted in one note.
    skipped: list[str] = field(default_factory=list)

    def skip(self, what: str, problems: list[str]) -> None:
        self.skipped.append(f"{what}: {problems[0]}")

    def overlay(self, directory: Path) -> Overlay:
        return Overlay(
            directory=directory,
            refreshed=self.today,
            project=self.project,
            regions=self.regions,
            zones_read={name: frozenset(zones) for name, zones in self.zones_read.items()},
            notes=tuple(self.notes),
        )

    @property
    def read_anything(self) -> bool:
        return any(self.rows.values())


def _source(method: str, project: str) -> str:
    return f"{method} (project {project})"


def _region(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def _scoped(
    answers: Iterable[dict[str, Any]], key: str, regions: frozenset[str], refresh: Refresh
) -> tuple[dict[str, list[dict[str, Any]]], set[str]]:
    """An aggregatedList's items per zone of ``regions``, and the zones it could not read; an
    item off its schema (AcceleratorType, MachineType) or a scope that is not a zone's name is
    skipped and counted."""
    scoped_schema, schema = SCOPED_SCHEMAS[key]
    items: dict[str, list[dict[str, Any]]] = {}
    unread: set[str] = set()
    for answer in answers:
        unreachables = answer.get("unreachables", [])
        unread.update(
            u.rsplit("/", 1)[-1] for u in unreachables if isinstance(u, str) and ZONE.fullmatch(u.rsplit("/", 1)[-1])
        )
        scopes = answer.get("items", {})
        for scope, scoped in scopes.items() if isinstance(scopes, dict) else ():
            zone = scope.rsplit("/", 1)[-1] if isinstance(scope, str) else ""
            if not isinstance(scope, str) or not scope.startswith("zones/") or not ZONE.fullmatch(zone):
                refresh.skip("a scope", [f"{scope!r} is not zones/ZONE"])
                continue
            if _region(zone) not in regions:
                continue
            problems = item_problems("compute", "v1", scoped_schema, {k: v for k, v in scoped.items() if k != key})
            if problems:
                refresh.skip(f"{zone}'s {key}", problems)
                continue
            if scoped.get("warning", {}).get("code") in UNREAD_WARNINGS:
                unread.add(zone)
            kept = []
            listed = scoped.get(key, [])
            for item in listed if isinstance(listed, list) else [listed]:
                problems = item_problems("compute", "v1", schema, item) or _name_problems(item)
                if problems:
                    refresh.skip(f"an item of {zone}'s {key}", problems)
                else:
                    kept.append(item)
            items.setdefault(zone, []).extend(kept)
    return items, unread


def _name_problems(item: dict[str, Any]) -> list[str]:
    name = item.get("name")
    if not isinstance(name, str) or not RESOURCE_NAME.fullmatch(name):
        return [f"name {name!r} is not a resource name"]
    return []


def read_gpu_zones(compute: Any, refresh: Refresh, catalog: Catalog) -> None:
    project, regions = refresh.project, frozenset(refresh.regions)
    series = sorted({m.name.split("-")[0] for m in catalog.machine_types.values() if m.builtin_gpu})
    accelerators, unread_a = _scoped(
        pages(
            compute.acceleratorTypes().aggregatedList(project=project, maxResults=500),
            compute.acceleratorTypes().aggregatedList_next,
            "the GPU types per zone (compute.acceleratorTypes.aggregatedList)",
            project,
        ),
        "acceleratorTypes",
        regions,
        refresh,
    )
    machines, unread_m = _scoped(
        pages(
            compute.machineTypes().aggregatedList(
                project=project, maxResults=500, filter=f"name eq '({'|'.join(series)})-.*'"
            ),
            compute.machineTypes().aggregatedList_next,
            "the machine types with GPUs per zone (compute.machineTypes.aggregatedList)",
            project,
        ),
        "machineTypes",
        regions,
        refresh,
    )
    known = {zone for zone in catalog.zones if _region(zone) in regions}
    read = (set(accelerators) & set(machines)) - unread_a - unread_m
    kept = sorted((known | set(accelerators) | set(machines)) - read)
    if kept:
        refresh.problems.append(
            f"{len(kept)} zone(s) not read (unreachable or missing from the answer), their shipped rows kept: "
            + _bounded(kept)
        )
    rows: list[dict[str, str]] = []
    unknown: dict[str, set[str]] = defaultdict(set)
    for zone in sorted(read):
        carrying: dict[str, set[str]] = defaultdict(set)
        for machine in machines[zone]:
            for accelerator in machine.get("accelerators", []):
                carrying[str(accelerator.get("guestAcceleratorType", ""))].add(str(machine["name"]))
            if machine["name"] not in catalog.machine_types:
                unknown["machine type"].add(str(machine["name"]))
        for accelerator in accelerators[zone]:
            gpu = catalog.gpus.get(str(accelerator["name"]))
            if gpu is None:
                unknown["GPU type"].add(str(accelerator["name"]))
                continue
            offered = "all" if gpu.attach == "n1" else " ".join(sorted(carrying.get(gpu.name, ())))
            if offered:
                rows.append(
                    {
                        "gpu": gpu.name,
                        "zone": zone,
                        "machine_types": offered,
                        "note": f"maximumCardsPerInstance {accelerator.get('maximumCardsPerInstance', '?')}",
                        "source": _source("compute.acceleratorTypes.aggregatedList", project),
                        "as_of": refresh.today,
                    }
                )
    for kind, names in sorted(unknown.items()):
        refresh.notes.append(
            f"{kind}s the API lists and the catalog does not know (not added): {_bounded(sorted(names))}"
        )
    refresh.rows["gpu_zones.csv"] = rows
    refresh.zones_read["gpu_zones.csv"] = read
    refresh.rows["zones.csv"] = [
        {"region": _region(z), "zone": z, "note": "", "source": _source("compute", project), "as_of": refresh.today}
        for z in sorted(read - catalog.zones)
    ]


def _each_field(
    collection: Any, query: dict[str, str], items_field: tuple[str, str, str], what: str, refresh: Refresh
) -> list[str]:
    """``field`` of every item a paged ``collection.list(**query)`` returns under ``items``
    (``items_field``: the items' key, the field, the items' schema in Cloud TPU v2); an item off
    its schema or whose field is not a resource name is skipped and counted."""
    items, field, schema = items_field
    found = []
    for answer in pages(collection.list(**query), collection.list_next, what, refresh.project):
        listed = answer.get(items, [])
        for item in listed if isinstance(listed, list) else [listed]:
            value = item.get(field) if isinstance(item, dict) else None
            problems = item_problems("tpu", "v2", schema, item)
            if not problems and (not isinstance(value, str) or not RESOURCE_NAME.fullmatch(value)):
                problems = [f"{field} {value!r} is not a resource name"]
            if problems:
                refresh.skip(what, problems)
            elif isinstance(value, str):
                found.append(value)
    return found


def read_tpu_zones(tpu: Any, refresh: Refresh, catalog: Catalog) -> None:
    project, regions = refresh.project, frozenset(refresh.regions)
    locations = _each_field(
        tpu.projects().locations(),
        {"name": f"projects/{project}"},
        ("locations", "locationId", "Location"),
        "the Cloud TPU locations (tpu.projects.locations.list)",
        refresh,
    )
    zones = sorted(z for z in locations if ZONE.fullmatch(z) and _region(z) in regions)
    by_prefix = {g.prefix: g.generation for g in catalog.tpu_generations.values()}
    rows: list[dict[str, str]] = []
    read: set[str] = set()
    runtimes: set[str] = set()
    for zone in zones:
        parent = f"projects/{project}/locations/{zone}"
        try:
            in_zone = tpu.projects().locations()
            types = _each_field(
                in_zone.acceleratorTypes(),
                {"parent": parent},
                ("acceleratorTypes", "type", "AcceleratorType"),
                f"the TPU types of {zone}",
                refresh,
            )
            runtimes.update(
                _each_field(
                    in_zone.runtimeVersions(),
                    {"parent": parent},
                    ("runtimeVersions", "version", "RuntimeVersion"),
                    f"the TPU runtimes of {zone}",
                    refresh,
                )
            )
        except GoogleApiError as error:
            refresh.problems.append(f"{error}; its shipped rows kept")
            continue
        read.add(zone)
        sizes: dict[str, set[int]] = defaultdict(set)
        for name in types:
            prefix, _, size = name.rpartition("-")
            if prefix in by_prefix and size.isdigit():
                sizes[by_prefix[prefix]].add(int(size))
        for generation, offered in sorted(sizes.items()):
            rows.append(
                {
                    "generation": generation,
                    "zone": zone,
                    "sizes": " ".join(str(s) for s in sorted(offered)),
                    "note": "",
                    "source": _source("tpu.projects.locations.acceleratorTypes.list", project),
                    "as_of": refresh.today,
                }
            )
    refresh.rows["tpu_zones.csv"] = rows
    refresh.zones_read["tpu_zones.csv"] = read
    new = sorted(r for r in runtimes - set(catalog.tpu_runtimes) if r.startswith("tpu-vm-tf-"))
    if new:
        refresh.notes.append(
            f"TensorFlow TPU runtimes the API lists and tpu_runtimes.csv lacks (not added): {_bounded(new)}"
        )


@dataclass(frozen=True)
class SkuRule:
    kind: str
    name: str
    pattern: re.Pattern[str]
    chips_per_sku: int


def sku_rules() -> list[SkuRule]:
    text = resources.files("trainstack.catalog").joinpath("billing_skus.csv").read_text(encoding="utf-8")
    return [
        SkuRule(row["kind"], row["name"], re.compile(row["sku_description_regex"]), int(row["chips_per_sku"] or 1))
        for row in csv.DictReader(text.splitlines())
    ]


# The unit a SKU of each kind is priced in: an hour of a GPU, TPU device or vCPU; a GiB-hour of
# memory (Compute Engine's "GB" of memory is a GiB).
USAGE_UNITS = {"machine_ram": "GiBy.h", "flex_machine_ram": "GiBy.h"}
# billing_skus.csv's kinds for Dynamic Workload Scheduler's flex-start SKUs ("DWS Defined
# Duration"), and the flex_start_prices.csv kind each becomes. Their usageType is OnDemand, as the
# list price's: the description alone tells them, and EXCLUDED_SKU keeps them from the list prices.
FLEX_START_KINDS = {"flex_gpu": "gpu", "flex_machine_core": "machine_core", "flex_machine_ram": "machine_ram"}
CALENDAR_SKU = re.compile(r"calendar", re.IGNORECASE)


def hourly_usd(sku: dict[str, Any], unit: str = "h") -> float | None:
    """The first tier's USD price per ``unit`` of a SKU; None when it is priced otherwise;
    ValueError for a price that is not a number of dollars between 0 and MAX_USD_PER_UNIT_HOUR."""
    for info in sku.get("pricingInfo", [])[:1]:
        expression = info.get("pricingExpression", {})
        rates = expression.get("tieredRates", [])
        if expression.get("usageUnit") != unit or not rates:
            return None
        price = rates[0].get("unitPrice", {})
        if price.get("currencyCode", "USD") != "USD":
            return None
        usd = int(price.get("units", "0") or 0) + int(price.get("nanos", 0) or 0) / 1e9
        if not 0 <= usd <= MAX_USD_PER_UNIT_HOUR:
            raise ValueError(f"a price of {usd:g} USD per {unit} is outside 0 to {MAX_USD_PER_UNIT_HOUR:g}")
        return usd
    return None


def _is_spot(sku: dict[str, Any]) -> bool | None:
    usage = sku.get("category", {}).get("usageType")
    description = str(sku.get("description", ""))
    if usage == "Preemptible" or re.search(r"\b(Preemptible|Spot)\b", description):
        return True
    return False if usage == "OnDemand" else None


def _flex_start_price(
    sku: dict[str, Any],
    rules: list[SkuRule],
    regions: frozenset[str],
    found: dict[tuple[str, str, str], set[tuple[float, str]]],
) -> None:
    """Record a flex-start SKU's price (and description) under each rule it matches, per region."""
    description = str(sku.get("description", ""))
    if CALENDAR_SKU.search(description):
        return
    for rule in rules:
        price = hourly_usd(sku, USAGE_UNITS.get(rule.kind, "h"))
        if price is not None and rule.pattern.search(description):
            for region in set(sku.get("serviceRegions", [])) & regions:
                found[(FLEX_START_KINDS[rule.kind], rule.name, region)].add((round(price, 6), description))


def _sku_problems(sku: Any) -> list[str]:
    """Why a SKU of the answer cannot be read: off the Sku schema, or a price out of bounds."""
    problems = item_problems("cloudbilling", "v1", "Sku", sku)
    if problems:
        return problems
    try:
        for unit in ("h", *USAGE_UNITS.values()):
            hourly_usd(sku, unit)
    except ValueError as error:
        return [str(error)]
    return []


def read_prices(billing: Any, refresh: Refresh, catalog: Catalog) -> None:
    regions = frozenset(refresh.regions)
    rules = [rule for rule in sku_rules() if rule.kind not in FLEX_START_KINDS]
    flex_rules = [rule for rule in sku_rules() if rule.kind in FLEX_START_KINDS]
    found: dict[tuple[str, str, str, bool], set[float]] = defaultdict(set)
    flex_found: dict[tuple[str, str, str], set[tuple[float, str]]] = defaultdict(set)
    for service in (COMPUTE_SERVICE, TPU_SERVICE):
        for answer in pages(
            billing.services().skus().list(parent=service, currencyCode="USD", pageSize=5000),
            billing.services().skus().list_next,
            f"the prices of {service} (cloudbilling.services.skus.list)",
            refresh.project,
        ):
            for sku in answer.get("skus", []):
                problems = _sku_problems(sku)
                if problems:
                    refresh.skip(f"a SKU of {service}", problems)
                    continue
                _flex_start_price(sku, flex_rules, regions, flex_found)
                description = str(sku.get("description", ""))
                spot = _is_spot(sku)
                if spot is None or EXCLUDED_SKU.search(description):
                    continue
                for rule in rules:
                    price = hourly_usd(sku, USAGE_UNITS.get(rule.kind, "h"))
                    if price is not None and rule.pattern.search(description):
                        for region in set(sku.get("serviceRegions", [])) & regions:
                            found[(rule.kind, rule.name, region, spot)].add(round(price / rule.chips_per_sku, 6))
    _add_machine_prices(found, catalog)
    ambiguous = sorted(f"{k[1]} {k[2]}" for k, v in found.items() if len(v) > 1)
    ambiguous += sorted(f"{k[1]} {k[2]} (flex-start)" for k, v in flex_found.items() if len({p for p, _ in v}) > 1)
    if ambiguous:
        refresh.notes.append(f"prices left as shipped, several SKUs disagree: {_bounded(ambiguous)}")
    rows = []
    for kind, name, region in sorted({k[:3] for k in found}):
        on_demand, spot_prices = (found.get((kind, name, region, s), set()) for s in (False, True))
        if len(on_demand) > 1 or len(spot_prices) > 1 or not (on_demand or spot_prices):
            continue
        shipped = _shipped_price(catalog, kind, name, region)
        rows.append(
            {
                "kind": kind,
                "name": name,
                "region": region,
                "on_demand_usd_hr": _text(next(iter(on_demand)) if on_demand else shipped[0]),
                "spot_usd_hr": _text(next(iter(spot_prices)) if spot_prices else shipped[1]),
                "source": _source("cloudbilling.services.skus.list", refresh.project)
                + ("" if on_demand and spot_prices else "; the side the SKUs lack is the shipped figure"),
                "as_of": refresh.today,
            }
        )
    refresh.rows["regional_prices.csv"] = rows
    refresh.rows["flex_start_prices.csv"] = [
        {
            "kind": kind,
            "name": name,
            "region": region,
            "usd_hr": _text(price),
            "sku_description": description,
            "note": "",
            "source": _source("cloudbilling.services.skus.list", refresh.project),
            "as_of": refresh.today,
        }
        for (kind, name, region), matches in sorted(flex_found.items())
        if len({p for p, _ in matches}) == 1
        for price, description in [min(matches)]
    ]


def _add_machine_prices(found: dict[tuple[str, str, str, bool], set[float]], catalog: Catalog) -> None:
    """Each machine type of a series whose vCPU and memory prices were read, in each region and
    on each side (on demand, Spot) that has both: vCPUs x per-vCPU + GB x per-GB. For a series
    with built-in GPUs (A2, G2) that is the host part, as machine_types.csv holds it."""
    rates = {key: next(iter(values)) for key, values in found.items() if len(values) == 1}
    for (kind, series, region, spot), core in list(rates.items()):
        ram = rates.get(("machine_ram", series, region, spot))
        if kind != "machine_core" or ram is None:
            continue
        for machine in catalog.machine_types.values():
            if machine.series == series:
                found[("machine", machine.name, region, spot)].add(
                    round(machine.vcpus * core + machine.memory_gb * ram, 6)
                )
    for key in [key for key in found if key[0] in ("machine_core", "machine_ram")]:
        del found[key]


def _shipped_price(catalog: Catalog, kind: str, name: str, region: str) -> tuple[float | None, float | None]:
    price = {"gpu": catalog.gpu_usd_hr, "machine": catalog.machine_usd_hr}.get(kind, catalog.tpu_chip_usd_hr)
    return price(name, region, False), price(name, region, True)


def _text(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


def _bounded(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def refresh_catalog(services: ServiceFactory, project: str, regions: tuple[str, ...], today: str) -> Refresh:
    """Read every part it can; a part whose API fails is one problem line, the others still count."""
    shipped = build_catalog(None)
    refresh = Refresh(project=project, regions=regions, today=today)
    parts: list[tuple[str, str, str, Callable[[Any, Refresh, Catalog], None]]] = [
        ("GPU offerings", "compute", "v1", read_gpu_zones),
        ("TPU offerings", "tpu", "v2", read_tpu_zones),
        ("prices", "cloudbilling", "v1", read_prices),
    ]
    for what, api, version, read in parts:
        try:
            read(services(api, version), refresh, shipped)
        except GoogleApiError as error:
            refresh.problems.append(f"{what} not refreshed: {error}")
    if refresh.skipped:
        refresh.problems.append(
            f"{len(refresh.skipped)} item(s) of Google's answers skipped, off the API's schema or outside the "
            f"catalog's bounds (first: {refresh.skipped[0]})"
        )
    refresh.notes.append(
        "not rebuilt (shipped figures kept): list prices of machine series billing_skus.csv does not name (A3, A4), "
        "machine shapes and rules, TPU runtimes' generations, disk and network rates"
    )
    return refresh


def write_overlay(refresh: Refresh, directory: Path) -> Overlay:
    """The overlay written whole into a folder beside ``directory``, then renamed into place:
    a refresh that stops part-way leaves the previous overlay (or none), never half of one."""
    import json

    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".catalog-", dir=directory.parent))
    try:
        for filename, rows in refresh.rows.items():
            header = _header(filename)
            with (staging / filename).open("w", encoding="utf-8", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=header)
                writer.writeheader()
                writer.writerows(rows)
        overlay = refresh.overlay(directory)
        (staging / MANIFEST).write_text(json.dumps(overlay.to_json(), indent=2) + "\n", encoding="utf-8")
        old = directory.with_name(directory.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if directory.exists():
            directory.rename(old)
        staging.rename(directory)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return overlay


def _header(filename: str) -> list[str]:
    text = resources.files("trainstack.catalog").joinpath(filename).read_text(encoding="utf-8")
    return next(csv.reader(text.splitlines()))


def _usd(value: float | None) -> str:
    return "none" if value is None else f"${value:g}"


def _price_changes(shipped: Catalog, refreshed: Catalog, kinds: tuple[str, ...]) -> list[str]:
    lines = []
    order = {"gpu": 0, "tpu_chip": 1, "machine": 2}
    keys = sorted((k for k in refreshed.regional_prices if k[0] in kinds), key=lambda k: (order[k[0]], k[1:]))
    for kind, name, region in keys:
        old, new = _shipped_price(shipped, kind, name, region), _shipped_price(refreshed, kind, name, region)
        unit = {"gpu": "per GPU", "machine": "per machine, GPUs apart"}.get(kind, "per chip")
        for side, before, after in (("on demand", old[0], new[0]), ("Spot", old[1], new[1])):
            if before != after and after is not None:
                trend = "new" if before is None else ("up" if after > before else "down")
                lines.append(f"price {name} {side} in {region} ({unit}/h): {_usd(before)} -> {_usd(after)} ({trend})")
    return lines


def _zone_changes(what: str, old: Iterable[str], new: Iterable[str], read: frozenset[str]) -> list[str]:
    before, after = set(old) & read, set(new) & read
    lines = []
    if after - before:
        lines.append(f"{what}: zones added: {', '.join(sorted(after - before))}")
    if before - after:
        lines.append(f"{what}: zones removed: {', '.join(sorted(before - after))}")
    return lines


def changes(shipped: Catalog, refreshed: Catalog, overlay: Overlay) -> list[str]:
    """Every difference the overlay makes: prices up or down with both figures, zones added or
    removed per GPU type, per machine type with built-in GPUs and per TPU generation."""
    lines = _price_changes(shipped, refreshed, ("gpu", "tpu_chip"))
    gpu_read = overlay.zones_read.get("gpu_zones.csv", frozenset())
    for gpu in sorted(set(shipped.gpu_zones) | set(refreshed.gpu_zones)):
        lines += _zone_changes(gpu, shipped.gpu_zones.get(gpu, ()), refreshed.gpu_zones.get(gpu, ()), gpu_read)
    for machine in sorted(m.name for m in shipped.machine_types.values() if m.builtin_gpu):
        old, new = shipped.machine_zones(machine), refreshed.machine_zones(machine)
        if old & gpu_read and not new & gpu_read:
            lines.append(f"machine type {machine}: removed from every zone read ({', '.join(sorted(old & gpu_read))})")
        else:
            lines += _zone_changes(f"machine type {machine}", old, new, gpu_read)
    tpu_read = overlay.zones_read.get("tpu_zones.csv", frozenset())
    for generation in sorted(shipped.tpu_generations):
        old_zones, new_zones = shipped.tpu_zones.get(generation, {}), refreshed.tpu_zones.get(generation, {})
        lines += _zone_changes(f"TPU {generation}", old_zones, new_zones, tpu_read)
        for zone in sorted(set(old_zones) & set(new_zones) & tpu_read):
            if old_zones[zone] != new_zones[zone]:
                sizes = [
                    " ".join(str(s) for s in sorted(z)) if z is not None else "all"
                    for z in (old_zones[zone], new_zones[zone])
                ]
                lines.append(f"TPU {generation} in {zone}: sizes {sizes[0]} -> {sizes[1]}")
    # Machine types last: they come many to a series, and the printed list is cut after 30 lines.
    return lines + _price_changes(shipped, refreshed, ("machine",))
