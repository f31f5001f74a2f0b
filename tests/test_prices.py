"""A stack's price, by hand from catalog rows: its own region's list prices, or unknown."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from stack_helpers import base_config, plan_of, write_stack

CATALOG = Path(__file__).resolve().parent.parent / "trainstack" / "catalog"
HOURS_PER_MONTH = 730


def row(filename: str, **match: str) -> dict[str, str]:
    with (CATALOG / filename).open() as handle:
        [found] = [r for r in csv.DictReader(handle) if all(r[k] == v for k, v in match.items())]
    return found


def hourly(kind: str, name: str, region: str, column: str = "on_demand_usd_hr") -> float:
    return float(row("regional_prices.csv", kind=kind, name=name, region=region)[column])


def disk_gb_month(disk: str, region: str) -> float:
    return float(row("regional_rates.csv", kind="disk", name=disk, region=region)["usd"])


def in_region(config: dict[str, Any], region: str) -> dict[str, Any]:
    config["gcp:region"] = region
    config["trainstack:zone"] = f"{region}-a"
    return config


@pytest.mark.parametrize("region", ["us-central1", "europe-west4"])
def test_a_gpu_node_costs_its_machine_gpus_and_disk_at_the_regions_prices(tmp_path: Path, region: str) -> None:
    config = in_region(base_config(), region)
    config["trainstack:cluster"]["workers"]["count"] = 0
    config["trainstack:cluster"]["chief"]["disk_gb"] = 200
    [chief] = plan_of(write_stack(tmp_path, config)).costs
    expected = (
        hourly("machine", "n1-standard-8", region)
        + 2 * hourly("gpu", "nvidia-tesla-t4", region)
        + 200 * disk_gb_month("pd-balanced", region) / HOURS_PER_MONTH
    )
    assert chief.usd_per_hour == pytest.approx(expected, abs=1e-9)
    if region != "us-central1":
        # Not the us-central1 figure under another name.
        assert chief.usd_per_hour != pytest.approx(0.38 + 2 * 0.35 + 200 * 0.10 / HOURS_PER_MONTH, abs=1e-6)


@pytest.mark.parametrize("region", ["us-central1", "us-west1"])
def test_an_a2_notebook_is_created_with_its_a100_and_priced_with_it(tmp_path: Path, region: str) -> None:
    config = in_region(base_config(), region)
    del config["trainstack:cluster"], config["trainstack:job"]
    config["trainstack:zone"] = f"{region}-b"
    config["trainstack:notebook"] = {"machine_type": "a2-highgpu-1g"}
    plan = plan_of(write_stack(tmp_path, config))
    [instance] = plan.of_type("gcp:workbench/instance:Instance")
    assert instance.inputs["gceSetup"]["acceleratorConfigs"] == [{"coreCount": "1", "type": "NVIDIA_TESLA_A100"}]
    [notebook] = plan.costs
    expected = (
        hourly("machine", "a2-highgpu-1g", region)
        + hourly("gpu", "nvidia-tesla-a100", region)
        + 150 * disk_gb_month("pd-balanced", region) / HOURS_PER_MONTH
    )
    assert notebook.usd_per_hour == pytest.approx(expected, abs=1e-9)
    assert notebook.usd_per_hour > 3.6, "the A100 is in the price"


def test_a_region_without_a_price_is_unknown_not_us_central1s(tmp_path: Path) -> None:
    # The catalog has no on-demand A100 price for europe-west4 (its source row is doubtful).
    config = in_region(base_config(), "europe-west4")
    del config["trainstack:cluster"], config["trainstack:job"]
    config["trainstack:zone"] = "europe-west4-a"
    config["trainstack:notebook"] = {"machine_type": "a2-highgpu-1g"}
    plan = plan_of(write_stack(tmp_path, config))
    assert (
        row("regional_prices.csv", kind="gpu", name="nvidia-tesla-a100", region="europe-west4")["on_demand_usd_hr"]
        == ""
    )
    assert [c.usd_per_hour for c in plan.costs] == [None]
    assert plan.hourly_usd is None
