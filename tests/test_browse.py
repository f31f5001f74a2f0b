"""`trainstack gpus` and `trainstack tpus`: the catalog as a user shops for hardware."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from trainstack.commands.main import main

CATALOG = Path(__file__).resolve().parent.parent / "trainstack" / "catalog"


def regional_row(kind: str, name: str, region: str) -> dict[str, str]:
    with (CATALOG / "regional_prices.csv").open() as handle:
        [row] = [r for r in csv.DictReader(handle) if (r["kind"], r["name"], r["region"]) == (kind, name, region)]
    return row


def gpus_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, dict]:
    assert main(["gpus", "--json", *args]) == 0
    return {g["gpu"]: g for g in json.loads(capsys.readouterr().out)["gpus"]}


def test_gpus_lists_counts_zones_and_prices_of_the_region(capsys: pytest.CaptureFixture[str]) -> None:
    gpus = gpus_json(capsys)
    t4 = gpus["nvidia-tesla-t4"]
    assert t4["zones"] == ["us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"]
    assert (t4["on_demand_usd_hr"], t4["spot_usd_hr"]) == (0.35, 0.1915)
    n1_8 = {m["gpu_count"] for m in t4["machines"] if m["machine_type"] == "n1-standard-8"}
    assert n1_8 == {1, 2, 4}
    assert {m["gpu_count"] for m in t4["machines"] if m["machine_type"] == "n1-standard-64"} == {4}
    a100 = {m["machine_type"]: m["gpu_count"] for m in gpus["nvidia-tesla-a100"]["machines"]}
    assert a100["a2-highgpu-2g"] == 2
    assert a100["a2-megagpu-16g"] == 16
    assert "nvidia-tesla-k80" not in gpus, "retired GPUs only with --all"


def test_gpus_in_another_region_are_priced_there_or_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    row = regional_row("gpu", "nvidia-tesla-t4", "europe-west4")
    gpus = gpus_json(capsys, "--region", "europe-west4")
    t4 = gpus["nvidia-tesla-t4"]
    assert (t4["on_demand_usd_hr"], t4["spot_usd_hr"]) == (float(row["on_demand_usd_hr"]), float(row["spot_usd_hr"]))
    assert all(zone.startswith("europe-west4-") for g in gpus.values() for zone in g["zones"])
    # No P4 row for us-west1: unknown, never the us-central1 price.
    p4 = gpus_json(capsys, "--zone", "us-west1-b")["nvidia-tesla-p4"]
    assert p4["on_demand_usd_hr"] is None
    assert p4["zones"] == []
    assert main(["gpus", "--zone", "us-west1-b"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("nvidia-tesla-p4"))
    assert "unknown" in line
    assert "0.60" not in line
    assert "not offered in us-west1-b" in line


def test_tpus_lists_single_host_slices_with_their_prices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tpus", "--json"]) == 0
    tpus = {t["generation"]: t for t in json.loads(capsys.readouterr().out)["tpus"]}
    v5e = tpus["v5e"]
    assert v5e["accelerator_types"] == ["v5litepod-1", "v5litepod-4", "v5litepod-8"]
    assert v5e["chips"]["v5litepod-8"] == 8
    assert tpus["v2"]["accelerator_types"] == ["v2-8"], "pod slices are not run by trainstack"
    assert not [r for t in tpus.values() for r in t["runtimes"] if "-pod-" in r]
    assert "us-central1-b" in tpus["v2"]["zones"]
    assert main(["tpus"]) == 0
    v2_line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("v2 "))
    assert "v2-8 (4, 4.50)" in v2_line


@pytest.mark.parametrize("args", [["--region", "mars-north1"], ["--zone", "us-central1-a\nx"], ["--region", "US"]])
def test_a_bad_place_is_refused_naming_it(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    try:
        code = main(["gpus", *args])
    except SystemExit as exit_:  # argparse refuses the syntax itself
        code = int(exit_.code or 0)
    assert code == 2
    err = capsys.readouterr().err
    assert "unknown region" in err or "is not a" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("command", ["gpus", "tpus"])
def test_a_zone_that_does_not_exist_is_named_and_exits_1(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Defect: `gpus --zone us-central1-z` exited 0 listing nothing."""
    assert main([command, "--zone", "us-central1-z"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "--zone us-central1-z: no such zone in us-central1; its zones: us-central1-a" in captured.err


def test_gpus_are_listed_cheapest_first_with_unknown_prices_last(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpus", "--json"]) == 0
    prices = [g["on_demand_usd_hr"] for g in json.loads(capsys.readouterr().out)["gpus"]]
    known = [p for p in prices if p is not None]
    assert known == sorted(known)
    assert prices[: len(known)] == known


@pytest.mark.parametrize(("name", "expected"), [("A100", {"nvidia-tesla-a100", "nvidia-a100-80gb"}),
                                                ("nvidia-l4", {"nvidia-l4"}), ("h100 mega", {"nvidia-h100-mega-80gb"})])  # fmt: skip
def test_a_name_narrows_the_gpus_listed(capsys: pytest.CaptureFixture[str], name: str, expected: set[str]) -> None:
    assert set(gpus_json(capsys, name)) == expected


def test_a_name_that_matches_nothing_exits_1_naming_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpus", "k99\n$(x)"]) == 1
    err = capsys.readouterr().err
    assert "no GPU matches 'k99\\n$(x)'" in err
    assert "nvidia-tesla-t4" in err
    assert main(["tpus", "v99"]) == 1
    assert "no TPU generation matches 'v99'" in capsys.readouterr().err


def test_all_regions_lists_every_region_that_offers_a_gpu_cheapest_first(capsys: pytest.CaptureFixture[str]) -> None:
    from trainstack.catalog import load_catalog

    assert main(["gpus", "nvidia-tesla-a100", "--all-regions", "--json"]) == 0
    offers = [o for o in json.loads(capsys.readouterr().out)["gpus"] if o["name"] == "nvidia-tesla-a100"]
    catalog = load_catalog()
    offering = {z.rsplit("-", 1)[0] for z in catalog.gpu_zones["nvidia-tesla-a100"]}
    assert {o["region"] for o in offers} == offering & set(catalog.regions)
    for offer in offers:
        assert offer["zones"] == sorted(
            z for z in catalog.gpu_zones["nvidia-tesla-a100"] if z.startswith(offer["region"] + "-")
        )
        assert offer["on_demand_usd_hr"] == catalog.gpu_usd_hr("nvidia-tesla-a100", offer["region"], spot=False)
    known = [o["on_demand_usd_hr"] for o in offers if o["on_demand_usd_hr"] is not None]
    assert known == sorted(known)
    assert offers[0]["region"] == "us-central1"
    assert main(["gpus", "nvidia-tesla-a100", "--all-regions"]) == 0
    assert "nvidia-tesla-a100       us-central1                     2.93" in capsys.readouterr().out


def test_all_regions_lists_tpu_generations_by_region(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tpus", "v5p", "--all-regions", "--json"]) == 0
    offers = json.loads(capsys.readouterr().out)["tpus"]
    assert offers
    assert {o["name"] for o in offers} == {"v5p"}
    assert "us-central1" in {o["region"] for o in offers}


def test_all_regions_cannot_be_combined_with_a_place(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["gpus", "--all-regions", "--zone", "us-central1-a"])
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
