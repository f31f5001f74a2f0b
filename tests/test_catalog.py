"""The catalog's data holds together, and the rules reproduce Google's published tables."""

from __future__ import annotations

import csv
import re
from importlib import resources

import pytest

from trainstack.catalog import load_catalog
from trainstack.stackmodel.catalog_fit import check_machine
from trainstack.stackmodel.schema import Accelerator

CATALOG_FILES = sorted(p.name for p in resources.files("trainstack.catalog").iterdir() if p.name.endswith(".csv"))


@pytest.mark.parametrize("filename", CATALOG_FILES)
def test_every_figure_carries_its_source_and_date(filename: str) -> None:
    text = resources.files("trainstack.catalog").joinpath(filename).read_text()
    rows = list(csv.DictReader(text.splitlines()))
    assert rows
    for row in rows:
        assert row["source"].strip(), row
        assert row["as_of"][:4].isdigit(), row


def test_catalog_references_are_consistent() -> None:
    catalog = load_catalog()
    assert set(catalog.gpu_zones) <= set(catalog.gpus)
    assert set(catalog.n1_gpu_limits) == {g.name for g in catalog.gpus.values() if g.attach == "n1" and not g.retired}
    for machine in catalog.machine_types.values():
        if machine.builtin_gpu:
            assert catalog.gpus[machine.builtin_gpu].attach == "builtin"
    assert set(catalog.tpu_zones) <= set(catalog.tpu_generations)
    for generation, zones in catalog.tpu_zones.items():
        for sizes in zones.values():
            assert sizes is None or sizes <= set(catalog.tpu_generations[generation].valid_suffixes), generation
    for runtime in catalog.tpu_runtimes.values():
        assert set(runtime.generations) <= set(catalog.tpu_generations), runtime
    assert {"gpu", "cpu", "workbench"} <= set(catalog.images)
    assert catalog.gpus["nvidia-tesla-k80"].retired


def valid_counts(machine_type: str, gpu: str) -> list[int]:
    catalog = load_catalog()
    zone = sorted(catalog.gpu_zones[gpu])[0]
    return [
        n
        for n in (1, 2, 3, 4, 8)
        if not check_machine("k", machine_type, Accelerator(type=gpu, count=n), zone, catalog)
    ]


# AI Platform Training's table of valid GPU counts per machine type, a few rows of it
# (https://cloud.google.com/ai-platform/training/docs/using-gpus).
@pytest.mark.parametrize(
    ("machine_type", "gpu", "counts"),
    [
        ("n1-standard-4", "nvidia-tesla-t4", [1, 2, 4]),
        ("n1-standard-16", "nvidia-tesla-t4", [1, 2, 4]),
        ("n1-standard-64", "nvidia-tesla-t4", [4]),
        ("n1-highcpu-64", "nvidia-tesla-t4", [4]),
        ("n1-standard-8", "nvidia-tesla-v100", [1, 2, 4, 8]),
        ("n1-standard-16", "nvidia-tesla-v100", [2, 4, 8]),
        ("n1-standard-32", "nvidia-tesla-v100", [4, 8]),
        ("n1-highmem-96", "nvidia-tesla-v100", [8]),
        ("n1-standard-32", "nvidia-tesla-p4", [2, 4]),
        ("n1-highmem-32", "nvidia-tesla-p100", [2, 4]),
        ("a2-highgpu-4g", "nvidia-tesla-a100", [4]),
    ],
)
def test_rules_reproduce_the_seed_table(machine_type: str, gpu: str, counts: list[int]) -> None:
    assert valid_counts(machine_type, gpu) == counts


@pytest.mark.parametrize(
    ("accelerator_type", "zone", "offered"),
    [
        # Google's TPU regions page (2026-11): v2-8 is not in us-central1-a, larger v2 slices are.
        ("v2-8", "us-central1-a", False),
        ("v2-32", "us-central1-a", True),
        ("v2-8", "us-central1-b", True),
        ("v2-8", "us-central1-f", False),
        ("v3-8", "us-east1-d", False),
        ("v5litepod-8", "us-east1-b", False),
        ("v5litepod-8", "us-west4-a", True),
        ("v6e-8", "us-central1-a", False),
        ("v6e-8", "us-central1-c", False),
        ("v6e-8", "us-central1-b", True),
    ],
)
def test_tpu_availability_is_per_slice_size(accelerator_type: str, zone: str, offered: bool) -> None:
    catalog = load_catalog()
    found = catalog.tpu_generation_for(accelerator_type)
    assert found is not None
    generation, size = found
    assert (zone in catalog.tpu_zones_for(generation.generation, size)) is offered


def test_every_machine_type_with_built_in_gpus_has_zones_and_they_are_its_gpus() -> None:
    catalog = load_catalog()
    builtin = [m for m in catalog.machine_types.values() if m.builtin_gpu]
    assert {m.series for m in builtin} >= {"a2", "a3", "a4", "g2"}
    for machine in builtin:
        zones = catalog.machine_zones(machine.name)
        assert zones, f"{machine.name}: no zone in gpu_zones.csv"
        assert zones <= catalog.gpu_zones[machine.builtin_gpu], machine.name
        assert zones <= catalog.zones, machine.name
    for gpu, by_zone in catalog.gpu_zone_machines.items():
        carriers = {m.name for m in builtin if m.builtin_gpu == gpu}
        for zone, machines in by_zone.items():
            assert machines is None or (machines and machines <= carriers), (gpu, zone, machines)
        if carriers:
            assert set().union(*(catalog.machine_zones(m) for m in carriers)) == catalog.gpu_zones[gpu], gpu


def test_a_note_naming_the_only_zone_of_a_gpu_agrees_with_its_zones() -> None:
    """Defect: H200's rows said "us-central1-b only" where the source lists 9 zones."""
    catalog = load_catalog()
    only = re.compile(r"\b([a-z]+-[a-z]+[0-9]+-[a-z]) only\b")
    for filename, key in (("gpus.csv", "gpu"), ("machine_types.csv", "machine_type")):
        text = resources.files("trainstack.catalog").joinpath(filename).read_text()
        for row in csv.DictReader(text.splitlines()):
            zones = catalog.gpu_zones.get(row[key]) or catalog.machine_zones(row[key])
            for match in only.finditer(row["note"]):
                assert zones == {match[1]}, (
                    f"{filename} {row[key]}: the note says {match[0]!r}, the zones are {sorted(zones)}"
                )


def test_h200_and_b200_machines_are_in_the_zones_of_the_source() -> None:
    """skypilot-org/skypilot-catalog catalogs/v9/gcp/vms.csv, the a3-ultragpu-8g and a4-highgpu-8g rows."""
    catalog = load_catalog()
    assert catalog.machine_zones("a3-ultragpu-8g") == {
        "asia-south1-b", "asia-south2-c", "europe-west1-b", "europe-west4-a", "us-central1-b", "us-east4-b",
        "us-east5-a", "us-south1-b", "us-west1-c",
    }  # fmt: skip
    assert catalog.machine_zones("a4-highgpu-8g") == {
        "asia-northeast1-b", "asia-southeast1-b", "europe-north1-b", "europe-north1-c", "europe-west4-b",
        "us-central1-b", "us-east1-b", "us-east4-b", "us-south1-b", "us-west2-c", "us-west3-b", "us-west3-c",
    }  # fmt: skip


def test_a4_carries_eight_b200_at_the_prices_of_the_source() -> None:
    catalog = load_catalog()
    a4 = catalog.machine_types["a4-highgpu-8g"]
    assert (a4.series, a4.builtin_gpu, a4.builtin_gpu_count, a4.vcpus, a4.memory_gb) == (
        "a4",
        "nvidia-b200",
        8,
        224,
        3968,
    )
    assert catalog.gpus["nvidia-b200"].attach == "builtin"
    assert catalog.gpus["nvidia-b200"].memory_gb == 180

    def machine(region: str, spot: bool) -> float | None:
        host = catalog.machine_usd_hr("a4-highgpu-8g", region, spot)
        gpu = catalog.gpu_usd_hr("nvidia-b200", region, spot)
        return None if host is None or gpu is None else host + 8 * gpu

    # A4 bills per GPU slice, the machine included (the source's a4-highgpu-8g rows are 0.0). On
    # demand is the list rate 16.11 a slice (what a reservation bills), not the source's
    # us-central1 row 90.216 / 8, which is the calendar-mode SKU's.
    assert machine("us-central1", spot=False) == pytest.approx(8 * 16.11)
    assert machine("europe-west4", spot=False) is None
    assert machine("us-central1", spot=True) == pytest.approx(37.7464)
    assert machine("europe-west4", spot=True) == pytest.approx(34.0736)
    # us-east4's row reads 64.44, another SKU than us-central1's: unknown, not a guess.
    assert machine("us-east4", spot=False) is None
    assert machine("us-east4", spot=True) == pytest.approx(32.6064)
    # A region with no row has no price, never us-central1's.
    assert machine("europe-west1", spot=False) is None


def test_catalog_show_unverified_lists_the_rules_that_rest_on_no_confirmed_source(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from trainstack.commands.main import main

    assert main(["catalog", "show", "--unverified"]) == 0
    lines = capsys.readouterr().out.splitlines()
    [restart] = [line for line in lines if line.startswith("capacity_rules.csv: flex_start_stoppable")]
    assert "unverified" in restart
    assert "[source: https://cloud.google.com/compute/docs/instances/about-flex-start-vms" in restart
    # Confirmed rules are not listed.
    for rule in ("flex_start_termination_actions", "flex_start_min_run_minutes"):
        assert not [line for line in lines if line.startswith(f"capacity_rules.csv: {rule}")]
    assert lines[-1].endswith("row(s) of the shipped catalog rest on no confirmed source")
