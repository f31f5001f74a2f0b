"""`trainstack zones`: where else a stack's machines can be created, when `pulumi up` fails in its
zone (ZONE_RESOURCE_POOL_EXHAUSTED, a quota error). Expected zones and prices are read from the
catalog's CSV files here, row by row, not through the code under test."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from stack_helpers import base_config, write_stack
from trainstack.catalog import HOURS_PER_MONTH, Catalog, load_catalog
from trainstack.commands.main import main
from trainstack.commands.zones import format_report
from trainstack.stackmodel.resolved import ResolvedStack, resolve_stack
from trainstack.stackmodel.stackfile import STACKS_DIR, load_checked_stack
from trainstack.stackmodel.zones import zone_choices

CATALOG_DIR = Path(__file__).resolve().parents[1] / "trainstack" / "catalog"


def rows(filename: str) -> list[dict[str, str]]:
    with (CATALOG_DIR / filename).open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def known_zones() -> set[str]:
    regions = {row["region"] for row in rows("regions.csv")}
    return {row["zone"] for row in rows("zones.csv") if row["region"] in regions}


def gpu_zones_csv(gpu: str, machine_type: str | None = None) -> set[str]:
    """The zones gpu_zones.csv offers ``gpu`` in (on ``machine_type`` when named)."""
    return {
        row["zone"]
        for row in rows("gpu_zones.csv")
        if row["gpu"] == gpu
        and (machine_type is None or row["machine_types"] == "all" or machine_type in row["machine_types"].split())
    }


def zones_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["zones", "--json", *args]) == 0
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


def resolved(stack: str) -> ResolvedStack:
    cfg, facts = load_checked_stack(STACKS_DIR / f"Pulumi.{stack}.yaml", stack)
    return resolve_stack(cfg, facts=facts)


def test_a_gpu_stack_lists_the_zones_the_catalog_offers_its_gpu_in_and_no_other(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # dev: one n1-standard-8 with a T4 in us-central1-a.
    document = zones_json(capsys, "--stack", "dev")
    listed = {c["zone"] for c in document["choices"]}
    expected = gpu_zones_csv("nvidia-tesla-t4") & known_zones()
    assert listed == expected
    assert "europe-west4-a" in listed
    # A zone that exists but offers no T4 (zones.csv has it, gpu_zones.csv has no T4 row for it).
    assert "africa-south1-a" in known_zones()
    assert "africa-south1-a" not in listed
    [current] = [c for c in document["choices"] if c["current"]]
    assert current["zone"] == "us-central1-a"


def test_a_zone_taken_out_of_the_catalog_is_no_longer_listed() -> None:
    catalog = load_catalog()
    stack = resolved("dev")
    assert "europe-west4-a" in {c.zone for c in zone_choices(stack, catalog).choices}
    t4_zones = catalog.gpu_zones["nvidia-tesla-t4"] - {"europe-west4-a"}
    fewer = dataclasses.replace(catalog, gpu_zones={**catalog.gpu_zones, "nvidia-tesla-t4": t4_zones})
    listed = {c.zone for c in zone_choices(stack, fewer).choices}
    assert "europe-west4-a" not in listed
    assert "europe-west4-b" in listed


def test_the_tpu_stack_lists_the_zones_that_offer_its_slice_size() -> None:
    # tpu: a v2-8. us-central1-a offers v2 pod slices only, not v2-8 (tpu_zones.csv).
    expected = {
        row["zone"]
        for row in rows("tpu_zones.csv")
        if row["generation"] == "v2" and (row["sizes"] == "all" or "8" in row["sizes"].split())
    }
    report = zone_choices(resolved("tpu"))
    assert {c.zone for c in report.choices} == expected
    assert "us-central1-a" not in expected
    assert any(row["generation"] == "v2" and row["zone"] == "us-central1-a" for row in rows("tpu_zones.csv"))
    assert report.machines == ("v2-8",)


def test_every_machine_of_the_stack_must_be_offered_in_a_zone_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A cluster of N1 machines with T4s and a notebook on g2-standard-8 (an L4 built in): only the
    # zones that offer both.
    config = base_config()
    config["trainstack:notebook"] = {"machine_type": "g2-standard-8"}
    path = write_stack(tmp_path, config)
    document = zones_json(capsys, "--stack-file", str(path))
    listed = {c["zone"] for c in document["choices"]}
    t4, l4 = gpu_zones_csv("nvidia-tesla-t4"), gpu_zones_csv("nvidia-l4", "g2-standard-8")
    assert listed == t4 & l4 & known_zones()
    assert t4 - l4
    assert not listed & (t4 - l4)
    assert "g2-standard-8 + 1 x nvidia-l4" in document["machines"]
    assert "2 x n1-standard-8 + 2 x nvidia-tesla-t4 (spot)" in document["machines"]
    # The whole stack's price, the notebook's included, as `cost` gives it.
    [current] = [c for c in document["choices"] if c["current"]]
    assert main(["cost", "--json", "--stack-file", str(path)]) == 0
    cost = json.loads(capsys.readouterr().out)
    assert any(n["name"].endswith("notebook") for n in cost["nodes"])
    assert current["usd_per_hour"] == pytest.approx(cost["hourly_usd"])


def regional_price(kind: str, name: str, region: str) -> tuple[float, float]:
    """On demand and Spot per hour, from the row of regional_prices.csv."""
    [row] = [r for r in rows("regional_prices.csv") if (r["kind"], r["name"], r["region"]) == (kind, name, region)]
    return float(row["on_demand_usd_hr"]), float(row["spot_usd_hr"])


def disk_hourly(disk_type: str, region: str) -> float:
    [row] = [
        r for r in rows("regional_rates.csv") if (r["kind"], r["name"], r["region"]) == ("disk", disk_type, region)
    ]
    return float(row["usd"]) / HOURS_PER_MONTH


def test_prices_are_sorted_and_each_is_the_regions_own(capsys: pytest.CaptureFixture[str]) -> None:
    document = zones_json(capsys, "--stack", "dev")
    prices = [c["usd_per_hour"] for c in document["choices"]]
    known = [p for p in prices if p is not None]
    assert known == sorted(known)
    assert prices[: len(known)] == known
    assert len(set(known)) > 3
    # The stack's own zone at the price `cost` gives.
    [current] = [c for c in document["choices"] if c["current"]]
    assert main(["cost", "--json", "--stack", "dev"]) == 0
    assert current["usd_per_hour"] == pytest.approx(json.loads(capsys.readouterr().out)["hourly_usd"])
    # europe-west4 by hand from its regional rows: the machine, one T4 and 200 GB pd-balanced.
    machine, t4 = (
        regional_price("machine", "n1-standard-8", "europe-west4"),
        regional_price("gpu", "nvidia-tesla-t4", "europe-west4"),
    )
    by_hand = machine[0] + t4[0] + 200 * disk_hourly("pd-balanced", "europe-west4")
    [europe] = [c for c in document["choices"] if c["zone"] == "europe-west4-a"]
    assert europe["usd_per_hour"] == pytest.approx(by_hand, abs=1e-4)


def test_spot_nodes_are_priced_as_spot_in_every_region() -> None:
    # multiworker: the chief on demand, two workers Spot.
    stack = resolved("multiworker")
    assert stack.cluster is not None
    assert [n.spot for n in stack.cluster.nodes] == [False, True, True]
    disk_gb = sum(n.disk_gb for n in stack.cluster.nodes)
    machine, t4 = (
        regional_price("machine", "n1-standard-8", "europe-west4"),
        regional_price("gpu", "nvidia-tesla-t4", "europe-west4"),
    )
    by_hand = (
        machine[0] + 2 * t4[0] + 2 * (machine[1] + 2 * t4[1]) + disk_gb * disk_hourly("pd-balanced", "europe-west4")
    )
    [europe] = [c for c in zone_choices(stack).choices if c.zone == "europe-west4-a"]
    assert europe.usd_per_hour == pytest.approx(by_hand, abs=1e-4)


def without_price(catalog: Catalog, kind: str, name: str, region: str) -> Catalog:
    prices = {key: value for key, value in catalog.regional_prices.items() if key != (kind, name, region)}
    return dataclasses.replace(catalog, regional_prices=prices)


def test_a_region_without_a_price_is_unknown_and_listed_last() -> None:
    catalog = without_price(load_catalog(), "gpu", "nvidia-tesla-t4", "europe-west4")
    # The us-central1 figure is there to borrow, and must not be.
    assert catalog.gpu_usd_hr("nvidia-tesla-t4", "us-central1", spot=False) is not None
    report = zone_choices(resolved("dev"), catalog)
    europe = [c for c in report.choices if c.region == "europe-west4"]
    assert europe
    assert all(c.usd_per_hour is None for c in europe)
    assert all(c.usd_per_hour is not None for c in report.choices[: -len(europe)])
    assert report.choices[-len(europe) :] == tuple(europe)
    lines = format_report(report, list(report.choices), "stacks/Pulumi.dev.yaml", "--stack dev")
    [row] = [line for line in lines if "europe-west4-a " in line]
    assert "unknown" in row
    assert "$" not in row


def apply_change(source: Path, change: dict[str, str], directory: Path) -> Path:
    """The stack file with the keys a choice names set, as a user would edit it."""
    document = yaml.safe_load(source.read_text(encoding="utf-8"))
    document["config"].update(change)
    target = directory / source.name
    target.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return target


def test_the_change_names_the_stack_files_keys_and_makes_a_valid_stack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = zones_json(capsys, "--stack", "dev")
    choices = {c["zone"]: c for c in document["choices"]}
    assert choices["us-central1-a"]["change"] == {}
    assert choices["us-central1-b"]["change"] == {"trainstack:zone": "us-central1-b"}
    assert choices["europe-west4-a"]["change"] == {"gcp:region": "europe-west4", "trainstack:zone": "europe-west4-a"}
    source = STACKS_DIR / "Pulumi.dev.yaml"
    text = source.read_text(encoding="utf-8")
    assert "  gcp:region: us-central1\n" in text
    assert "  trainstack:zone: us-central1-a\n" in text
    for zone in ("us-central1-b", "europe-west4-a"):
        (tmp_path / zone).mkdir()
        moved = apply_change(source, choices[zone]["change"], tmp_path / zone)
        assert main(["validate", "--stack-file", str(moved)]) == 0
        assert f"in {zone}," in capsys.readouterr().out


def test_text_output_marks_the_stack_zone_and_prints_the_line_to_change(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["zones", "--stack", "tpu"]) == 0
    out = capsys.readouterr().out
    assert "  * us-central1-b " in out
    assert "(the stack's zone)" in out
    [other] = [line for line in out.splitlines() if " us-central1-c " in line]
    assert other.rstrip().endswith("trainstack:zone: us-central1-c")
    assert "stacks/Pulumi.tpu.yaml" in out
    assert "trainstack validate --stack tpu" in out


def test_json_shape_and_limit(capsys: pytest.CaptureFixture[str]) -> None:
    document = zones_json(capsys, "--stack", "multiworker", "--limit", "2")
    assert set(document) == {"stack", "stack_file", "zone", "region", "machines", "choices", "notes"}
    assert (document["stack"], document["zone"], document["region"]) == ("multiworker", "us-central1-a", "us-central1")
    assert document["stack_file"].endswith("stacks/Pulumi.multiworker.yaml")
    # The two cheapest other zones, and the stack's own wherever its price puts it.
    assert len(document["choices"]) == 3
    assert [c["current"] for c in document["choices"]].count(True) == 1
    for choice in document["choices"]:
        assert set(choice) == {"zone", "region", "usd_per_hour", "current", "change"}
    everything = zones_json(capsys, "--stack", "multiworker")
    others = [c for c in everything["choices"] if not c["current"]][:2]
    assert [c for c in document["choices"] if not c["current"]] == others


def test_bad_input_is_one_problem_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["zones", "--stack", "nosuchstack"]) == 1
    err = capsys.readouterr().err
    assert "Pulumi.nosuchstack.yaml: no such stack file; stacks in stacks/:" in err
    assert "Traceback" not in err
    with pytest.raises(SystemExit) as exit_info:
        main(["zones", "--stack", "dev", "--limit", "0"])
    assert exit_info.value.code == 2
    assert "--limit: '0': a whole number from 1 to 1000" in capsys.readouterr().err


def test_the_command_line_loads_no_pydantic_pulumi_or_tensorflow_at_start() -> None:
    # main.py builds every command's parser at start-up: a command imports what it needs when it runs.
    code = (
        "import sys, trainstack.commands.main\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'pydantic', 'pulumi', 'pulumi_gcp', 'tensorflow'})\n"
        "print(heavy)\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert done.stdout.strip() == "[]"
