"""``trainstack gpus`` and ``trainstack tpus``: what the catalog knows, as a user shops for it.

Every GPU type with the counts each machine type takes, the zones that offer it and its hourly
price in one region; every TPU generation with its single-host slices, zones, runtimes and
prices; cheapest first. A name narrows the list (``gpus a100``), and ``--all-regions`` lists
every region that offers what is named, cheapest first. Prices are the region's list prices
from the catalog, or "unknown" where the catalog has none for that region (never another
region's figure).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from typing import Any

from trainstack.base.names import region_argument, zone_argument
from trainstack.catalog import BASE_PRICE_REGION, Catalog, catalog_line, load_catalog


@dataclass(frozen=True)
class MachineOption:
    machine_type: str
    gpu_count: int
    vcpus: int
    memory_gb: float


@dataclass(frozen=True)
class GpuListing:
    gpu: str
    name: str
    memory_gb: float | None
    status: str
    machines: list[MachineOption]
    zones: list[str]
    on_demand_usd_hr: float | None  # per GPU, the machine not included
    spot_usd_hr: float | None


@dataclass(frozen=True)
class TpuListing:
    generation: str
    accelerator_types: list[str]  # single-host slices, the ones trainstack runs
    chips: dict[str, int]
    zones: list[str]
    runtimes: list[str]
    on_demand_usd_chip_hr: float | None
    spot_usd_chip_hr: float | None


def _in_place(zone: str, region: str, only_zone: str | None) -> bool:
    return zone == only_zone if only_zone else zone.rsplit("-", 1)[0] == region


def gpu_listings(catalog: Catalog, region: str, zone: str | None = None) -> list[GpuListing]:
    """Every GPU type with the machine types that carry it in the region (or the one zone):
    none where the GPU is not offered, and for GPUs built into their machine types only the
    machine types offered there (a2-megagpu-16g is in fewer zones than a2-highgpu-1g)."""
    listings = []
    for gpu in catalog.gpus.values():
        zones = sorted(z for z in catalog.gpu_zones.get(gpu.name, ()) if _in_place(z, region, zone))
        if gpu.attach == "n1":
            # N1 takes 1, 2, 4 or 8 of a GPU, and the largest N1 shapes need more: every N1
            # machine type with each GPU count its vCPUs and memory fit, where the GPU is offered.
            machines = (
                [
                    MachineOption(machine.name, count, machine.vcpus, machine.memory_gb)
                    for count, limit in sorted(catalog.n1_gpu_limits.get(gpu.name, {}).items())
                    for machine in catalog.machine_types.values()
                    if machine.series == "n1"
                    and machine.vcpus <= limit.max_vcpus
                    and machine.memory_gb <= limit.max_memory_gb
                ]
                if zones
                else []
            )
        else:
            machines = [
                MachineOption(machine.name, machine.builtin_gpu_count, machine.vcpus, machine.memory_gb)
                for machine in catalog.machine_types.values()
                if machine.builtin_gpu == gpu.name
                and any(_in_place(z, region, zone) for z in catalog.machine_zones(machine.name))
            ]
        listings.append(
            GpuListing(
                gpu=gpu.name,
                name=gpu.display_name,
                memory_gb=gpu.memory_gb,
                status=gpu.status,
                machines=machines,
                zones=zones,
                on_demand_usd_hr=catalog.gpu_usd_hr(gpu.name, region, spot=False),
                spot_usd_hr=catalog.gpu_usd_hr(gpu.name, region, spot=True),
            )
        )
    return listings


def tpu_listings(catalog: Catalog, region: str, zone: str | None = None) -> list[TpuListing]:
    listings = []
    # Only the generations with a TensorFlow runtime: a TPU VM of trainstack runs TensorFlow (not TPU7x).
    for generation in catalog.tensorflow_tpu_generations():
        single_host = generation.single_host_suffixes
        types = [f"{generation.prefix}-{size}" for size in single_host]
        zones = sorted(
            {
                z
                for size in single_host
                for z in catalog.tpu_zones_for(generation.generation, size)
                if _in_place(z, region, zone)
            }
        )
        listings.append(
            TpuListing(
                generation=generation.generation,
                accelerator_types=types,
                chips={t: generation.chips(size) for t, size in zip(types, single_host, strict=True)},
                zones=zones,
                # Single-host TensorFlow runtimes: the pod runtimes are for slices trainstack does
                # not run, the base images (JAX, PyTorch) bring no TensorFlow.
                runtimes=sorted(r.version for r in catalog.tensorflow_runtimes(generation.generation) if not r.is_pod),
                on_demand_usd_chip_hr=catalog.tpu_chip_usd_hr(generation.generation, region, spot=False),
                spot_usd_chip_hr=catalog.tpu_chip_usd_hr(generation.generation, region, spot=True),
            )
        )
    return listings


def _cheapest_first(price: float | None) -> tuple[bool, float]:
    """A sort key: known prices in increasing order, unknown ones last."""
    return (price is None, price or 0.0)


def _on_demand_price(listing: GpuListing | TpuListing) -> tuple[bool, float]:
    price = listing.on_demand_usd_hr if isinstance(listing, GpuListing) else listing.on_demand_usd_chip_hr
    return _cheapest_first(price)


def _answer(
    catalog: Catalog, listings: list[Any] | str, args: argparse.Namespace, region: str, zone: str | None, kind: str
) -> int:
    """What `gpus` and `tpus` print other than their table: a name matching nothing (exit 1),
    every region (--all-regions), or JSON."""
    if isinstance(listings, str):
        print(listings, file=sys.stderr)
        return 1
    if args.all_regions:
        names = [listing.gpu if kind == "gpus" else listing.generation for listing in listings]
        return _all_regions(catalog, names, kind, args.json)
    _print_json(region, zone, kind, listings)
    return 0


def _named(listings: list[Any], name: str | None, key: str, what: str) -> list[Any] | str:
    """The listings whose ``key`` (or display name) contains ``name``, case and '-'/' ' aside,
    cheapest first; a message naming every choice when none does."""
    if not name:
        return sorted(listings, key=_on_demand_price)

    def folded(text: str) -> str:
        return "".join(ch for ch in text.lower() if ch.isalnum())

    wanted = folded(name)
    matches = [
        listing
        for listing in listings
        if wanted and (wanted in folded(getattr(listing, key)) or wanted in folded(getattr(listing, "name", "")))
    ]
    if matches:
        return sorted(matches, key=_on_demand_price)
    choices = ", ".join(getattr(listing, key) for listing in listings)
    return f"trainstack: no {what} matches {name[:60]!r}; the catalog's {what}s: {choices}"


def _price(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.2f}"


def _counts(gpu: str, machines: list[MachineOption], catalog: Catalog, place: str) -> str:
    """One line: an N1 GPU's counts with their vCPU and memory ceilings; a built-in GPU's machine
    types offered in ``place``."""
    if not machines:
        return f"no machine type with it in {place}"
    limits = catalog.n1_gpu_limits.get(gpu)
    if limits:
        ceilings = ", ".join(
            f"{count} (up to {limit.max_vcpus} vCPUs, {limit.max_memory_gb:.0f} GB)"
            for count, limit in sorted(limits.items())
        )
        return f"N1 machine types, {ceilings}"
    return ", ".join(f"{m.machine_type} ({m.gpu_count})" for m in machines)


def _where(args: argparse.Namespace) -> tuple[str, str | None]:
    if args.zone:
        return args.zone.rsplit("-", 1)[0], args.zone
    return args.region, None


def _check_region(catalog: Catalog, region: str) -> str | None:
    if region not in catalog.regions:
        return f"trainstack: unknown region {region}; regions: {', '.join(sorted(catalog.regions))}"
    return None


def _print_json(region: str, zone: str | None, key: str, listings: list[GpuListing] | list[TpuListing]) -> None:
    document = {"region": region, "zone": zone, key: [asdict(listing) for listing in listings]}
    print(json.dumps(document, indent=2, sort_keys=True))


def _place(args: argparse.Namespace) -> tuple[Catalog, str, str | None] | int:
    """The catalog and the region and zone the arguments name; the exit status (said why) for
    an unknown region (2) or zone (1)."""
    catalog = load_catalog()
    region, zone = _where(args)
    if (problem := _check_region(catalog, region)) is not None:
        print(problem, file=sys.stderr)
        return 2
    if zone is not None and zone not in catalog.zones:
        print(
            f"trainstack: --zone {zone}: no such zone in {region}; its zones: {', '.join(catalog.zones_of(region))}",
            file=sys.stderr,
        )
        return 1
    return catalog, region, zone


def with_catalog_line(command: Any) -> Any:
    """The command, followed by the line saying which catalog it read (on stderr under --json)."""

    def run(args: argparse.Namespace) -> int:
        status = int(command(args))
        if status == 0:
            print(catalog_line(), file=sys.stderr if getattr(args, "json", False) else sys.stdout)
        return status

    return run


@with_catalog_line
def cmd_gpus(args: argparse.Namespace) -> int:
    if isinstance(place_of := _place(args), int):
        return place_of
    catalog, region, zone = place_of
    current = [g for g in gpu_listings(catalog, region, zone) if args.all or g.status != "retired"]
    listings = _named(current, args.name, "gpu", "GPU")
    if isinstance(listings, str) or args.all_regions or args.json:
        return _answer(catalog, listings, args, region, zone, "gpus")
    place = zone or region
    print(f"GPUs in {place}, cheapest first: per-GPU hourly list prices in {region} (USD; the machine is extra)")
    print(f"{'GPU':<24}{'memory':>8}{'on-demand':>11}{'spot':>8}  zones / machine types and GPU counts")
    for g in listings:
        memory = "-" if g.memory_gb is None else f"{g.memory_gb:.0f} GB"
        zones = ", ".join(g.zones) if g.zones else f"not offered in {place}"
        status = " (retired)" if g.status == "retired" else ""
        print(f"{g.gpu + status:<24}{memory:>8}{_price(g.on_demand_usd_hr):>11}{_price(g.spot_usd_hr):>8}  {zones}")
        print(f"{'':<51}{_counts(g.gpu, g.machines, catalog, place)}")
    if region != BASE_PRICE_REGION:
        print(f"(prices for {region} from the catalog's regional table; 'unknown' where it has none)")
    return 0


@with_catalog_line
def cmd_tpus(args: argparse.Namespace) -> int:
    if isinstance(place_of := _place(args), int):
        return place_of
    catalog, region, zone = place_of
    listings = _named(tpu_listings(catalog, region, zone), args.name, "generation", "TPU generation")
    if isinstance(listings, str) or args.all_regions or args.json:
        return _answer(catalog, listings, args, region, zone, "tpus")
    place = zone or region
    print(f"TPU VMs (single host) in {place}, cheapest first: hourly list prices in {region} (USD)")
    print(f"{'generation':<12}{'per chip':>10}{'spot':>8}  slices (chips, on-demand per slice) / zones / runtimes")
    for t in listings:
        slices = ", ".join(
            f"{name} ({chips}, {_price(None if t.on_demand_usd_chip_hr is None else t.on_demand_usd_chip_hr * chips)})"
            for name, chips in t.chips.items()
        )
        print(f"{t.generation:<12}{_price(t.on_demand_usd_chip_hr):>10}{_price(t.spot_usd_chip_hr):>8}  {slices}")
        print(f"{'':<32}zones: {', '.join(t.zones) if t.zones else f'none in {place}'}")
        print(f"{'':<32}runtimes: {', '.join(t.runtimes) or '-'}")
    return 0


@dataclass(frozen=True)
class RegionOffer:
    """Where one GPU type or TPU generation is offered: a region, its zones and prices
    (per GPU, or per TPU chip)."""

    name: str
    region: str
    zones: list[str]
    on_demand_usd_hr: float | None
    spot_usd_hr: float | None


def region_offers(catalog: Catalog, kind: str, names: list[str]) -> list[RegionOffer]:
    """Every region offering each of ``names`` (GPU types, or TPU generations), cheapest first."""
    offers = []
    for region in sorted(catalog.regions):
        listings: list[Any] = gpu_listings(catalog, region) if kind == "gpus" else tpu_listings(catalog, region)
        for listing in listings:
            name = listing.gpu if kind == "gpus" else listing.generation
            if name not in names or not listing.zones:
                continue
            prices = (
                (listing.on_demand_usd_hr, listing.spot_usd_hr)
                if kind == "gpus"
                else (listing.on_demand_usd_chip_hr, listing.spot_usd_chip_hr)
            )
            offers.append(RegionOffer(name, region, listing.zones, *prices))
    return sorted(offers, key=lambda o: (names.index(o.name), _cheapest_first(o.on_demand_usd_hr), o.region))


def _all_regions(catalog: Catalog, names: list[str], kind: str, as_json: bool) -> int:
    offers = region_offers(catalog, kind, names)
    if as_json:
        print(json.dumps({"regions": "all", kind: [asdict(offer) for offer in offers]}, indent=2, sort_keys=True))
        return 0
    unit = "per GPU, the machine is extra" if kind == "gpus" else "per TPU chip"
    print(f"Regions that offer each, cheapest first: hourly list prices (USD, {unit})")
    print(f"{'name':<24}{'region':<26}{'on-demand':>10}{'spot':>8}  zones")
    for offer in offers:
        print(
            f"{offer.name:<24}{offer.region:<26}{_price(offer.on_demand_usd_hr):>10}{_price(offer.spot_usd_hr):>8}  "
            f"{', '.join(offer.zones)}"
        )
    offered = {offer.name for offer in offers}
    for name in names:
        if name not in offered:
            print(f"{name:<24}offered in no region the catalog knows")
    return 0


def _add_place(parser: argparse.ArgumentParser, example: str) -> None:
    parser.add_argument(
        "name", nargs="?", help=f"only these: a name or part of one, case and '-' aside (e.g. {example})"
    )
    place = parser.add_mutually_exclusive_group()
    place.add_argument(
        "--region", type=region_argument, default=BASE_PRICE_REGION, help="prices and zones of this region"
    )
    place.add_argument("--zone", type=zone_argument, help="only this zone (prices of its region)")
    place.add_argument(
        "--all-regions", action="store_true", help="every region that offers each, with its zones and prices"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def register(subparsers: Any) -> None:
    gpus = subparsers.add_parser("gpus", help="GPU types: machine types and counts, zones, hourly prices")
    _add_place(gpus, "a100, nvidia-l4")
    gpus.add_argument("--all", action="store_true", help="include retired GPUs")
    gpus.set_defaults(func=cmd_gpus)
    tpus = subparsers.add_parser("tpus", help="TPU generations: single-host slices, zones, runtimes, hourly prices")
    _add_place(tpus, "v5e")
    tpus.set_defaults(func=cmd_tpus)
