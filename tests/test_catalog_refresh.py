"""`trainstack catalog refresh`: offerings and prices read through the real Google API client
from answers held to the published schemas (tests/googleapi_fakes.py) into an overlay that
`gpus`, `tpus`, `cost` and `validate` then read and name; every failure one line."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.googleapi_fakes import FakeGoogle, api_disabled, error, off_schema, ok
from trainstack.base import googleapis
from trainstack.catalog import build_catalog, flex_start_gpu_usd_hr, flex_start_machine_usd_hr, load_catalog
from trainstack.catalog.overlay import CATALOG_VARIABLE, MANIFEST, read_overlay
from trainstack.commands.main import main

PROJECT = "my-project"
TODAY = "2026-11-26"
REAL_BUILD = googleapis.build_service


def zone_scope(key: str, items: list[dict[str, Any]] | None = None, warning: str | None = None) -> dict[str, Any]:
    if warning is not None:
        return {"warning": {"code": warning, "message": f"{warning} in this scope", "data": [{"key": "scope"}]}}
    return {key: items or []}


def gpu(name: str, zone: str, cards: int) -> dict[str, Any]:
    return {"kind": "compute#acceleratorType", "name": name, "zone": zone, "maximumCardsPerInstance": cards}


def machine(name: str, gpu_type: str, count: int, cpus: int, memory_mb: int) -> dict[str, Any]:
    return {
        "kind": "compute#machineType",
        "name": name,
        "guestCpus": cpus,
        "memoryMb": memory_mb,
        "accelerators": [{"guestAcceleratorType": gpu_type, "guestAcceleratorCount": count}],
    }


# us-central1-a: T4 and L4 (g2-standard-4 and -8) and a GPU and machine the catalog lacks;
# -b: L4 on g2-standard-4 only (T4 gone); -c: unreachable; -f: no GPUs; europe-west4 is not asked for.
ACCELERATORS = {
    "items": {
        "zones/us-central1-a": zone_scope(
            "acceleratorTypes",
            [
                gpu("nvidia-tesla-t4", "us-central1-a", 4),
                gpu("nvidia-l4", "us-central1-a", 8),
                gpu("nvidia-gb300", "us-central1-a", 4),
            ],
        ),
        "zones/us-central1-b": zone_scope("acceleratorTypes", [gpu("nvidia-l4", "us-central1-b", 8)]),
        "zones/us-central1-c": zone_scope("acceleratorTypes", warning="UNREACHABLE"),
        "zones/us-central1-f": zone_scope("acceleratorTypes", warning="NO_RESULTS_ON_PAGE"),
        "zones/europe-west4-a": zone_scope("acceleratorTypes", [gpu("nvidia-tesla-t4", "europe-west4-a", 4)]),
    }
}
MACHINES = {
    "items": {
        "zones/us-central1-a": zone_scope(
            "machineTypes",
            [
                machine("g2-standard-4", "nvidia-l4", 1, 4, 16384),
                machine("g2-standard-8", "nvidia-l4", 1, 8, 32768),
                machine("a4x-maxgpu-4g-metal", "nvidia-gb300", 4, 144, 983040),
            ],
        ),
        "zones/us-central1-b": zone_scope("machineTypes", [machine("g2-standard-4", "nvidia-l4", 1, 4, 16384)]),
        "zones/us-central1-c": zone_scope("machineTypes", [machine("g2-standard-4", "nvidia-l4", 1, 4, 16384)]),
        "zones/us-central1-f": zone_scope("machineTypes", warning="NO_RESULTS_ON_PAGE"),
    }
}


def compute_answers() -> list[tuple[dict[str, str], str]]:
    return [
        ok("compute", "v1", "compute.acceleratorTypes.aggregatedList", ACCELERATORS),
        ok("compute", "v1", "compute.machineTypes.aggregatedList", MACHINES),
    ]


def tpu_answers() -> list[tuple[dict[str, str], str]]:
    locations = {
        "locations": [
            {"name": f"projects/{PROJECT}/locations/{zone}", "locationId": zone}
            for zone in ("us-central1", "us-central1-a", "us-central1-b", "europe-west4-a")
        ]
    }
    types = {
        "acceleratorTypes": [
            {"name": f"projects/{PROJECT}/locations/us-central1-a/acceleratorTypes/{t}", "type": t}
            for t in ("v5litepod-1", "v5litepod-4", "v5litepod-8", "v6e-8")
        ]
    }
    runtimes = {
        "runtimeVersions": [
            {"name": f"projects/{PROJECT}/locations/us-central1-a/runtimeVersions/{v}", "version": v}
            for v in ("tpu-vm-tf-2.18.0-pjrt", "tpu-vm-tf-2.19.0-pjrt")
        ]
    }
    return [
        ok("tpu", "v2", "tpu.projects.locations.list", locations),
        ok("tpu", "v2", "tpu.projects.locations.acceleratorTypes.list", types),
        ok("tpu", "v2", "tpu.projects.locations.runtimeVersions.list", runtimes),
        error(403, "Permission 'tpu.acceleratorTypes.list' denied on 'projects/my-project/locations/us-central1-b'"),
    ]


def sku(
    sku_id: str, description: str, usage: str, regions: list[str], units: str, nanos: int, unit: str = "h"
) -> dict[str, Any]:
    return {
        "name": f"services/6F81-5844-456A/skus/{sku_id}",
        "skuId": sku_id,
        "description": description,
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": "Compute",
            "resourceGroup": "GPU",
            "usageType": usage,
        },
        "serviceRegions": regions,
        "pricingInfo": [
            {
                "pricingExpression": {
                    "usageUnit": unit,
                    "tieredRates": [
                        {"startUsageAmount": 0, "unitPrice": {"currencyCode": "USD", "units": units, "nanos": nanos}}
                    ],
                }
            }
        ],
    }


def billing_answers() -> list[tuple[dict[str, str], str]]:
    compute_skus = {
        "skus": [
            sku(
                "A1", "Nvidia Tesla T4 GPU running in Americas", "OnDemand", ["us-central1", "us-east1"], "0", 400000000
            ),
            sku(
                "A2",
                # Spot told by its usage type alone (TPU SKUs tell it in the description)
                "Nvidia Tesla T4 GPU attached to preemptible VMs running in Americas",
                "Preemptible",
                ["us-central1"],
                "0",
                150000000,
            ),
            # not the on-demand hour: a reservation's price, and a commitment
            sku("A5", "Reserved Nvidia L4 GPU running in Americas", "OnDemand", ["us-central1"], "0", 300000000),
            sku("A3", "Commitment v1: Nvidia L4 GPU running in Americas", "Commit1Yr", ["us-central1"], "0", 1000),
            sku("A4", "Nvidia L4 GPU running in Americas", "OnDemand", ["us-central1"], "0", 560040000),
            # N1 machines: per vCPU-hour and per GiB-hour, on demand and Spot; a custom type's SKU is not theirs
            sku("C1", "N1 Predefined Instance Core running in Americas", "OnDemand", ["us-central1"], "0", 35000000),
            sku(
                "C2",
                "N1 Predefined Instance Ram running in Americas",
                "OnDemand",
                ["us-central1"],
                "0",
                5000000,
                "GiBy.h",
            ),
            sku(
                "C3",
                "Spot Preemptible N1 Predefined Instance Core running in Americas",
                "Preemptible",
                ["us-central1"],
                "0",
                10000000,
            ),
            sku(
                "C4",
                "Spot Preemptible N1 Predefined Instance Ram running in Americas",
                "Preemptible",
                ["us-central1"],
                "0",
                2000000,
                "GiBy.h",
            ),
            sku("C5", "N1 Custom Instance Core running in Americas", "OnDemand", ["us-central1"], "0", 990000000),
            # Dynamic Workload Scheduler (flex-start): usage type OnDemand like the list price's
            sku(
                "D1",
                "Nvidia H100 80GB GPU attached to DWS Defined Duration VMs running in Americas",
                "OnDemand",
                ["us-central1"],
                "4",
                100000000,
            ),
            sku("D2", "DWS Defined Duration A3 Core running in Americas", "OnDemand", ["us-central1"], "0", 11000000),
            sku(
                "D3",
                "DWS Defined Duration A3 Ram running in Americas",
                "OnDemand",
                ["us-central1"],
                "0",
                1000000,
                "GiBy.h",
            ),
            # a calendar-mode reservation's SKU is not flex-start's
            sku(
                "D4",
                "DWS Calendar Mode A4 Nvidia B200 (1 gpu slice) in Americas",
                "OnDemand",
                ["us-central1"],
                "11",
                277000000,
            ),
        ],
        "nextPageToken": "",
    }
    tpu_skus = {"skus": [sku("B1", "Tpu-v2 running in Americas", "OnDemand", ["us-central1"], "4", 800000000)]}
    return [
        ok("cloudbilling", "v1", "cloudbilling.services.skus.list", compute_skus),
        ok("cloudbilling", "v1", "cloudbilling.services.skus.list", tpu_skus),
    ]


@pytest.fixture
def overlay_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    directory = tmp_path / "project" / ".trainstack" / "catalog"
    monkeypatch.setenv(CATALOG_VARIABLE, str(directory))
    load_catalog.cache_clear()
    yield directory
    load_catalog.cache_clear()


def fake_google(monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[Any]]) -> dict[str, FakeGoogle]:
    fakes = {api: FakeGoogle(list(a)) for api, a in answers.items()}
    monkeypatch.setattr(googleapis, "build_service", lambda api, version: REAL_BUILD(api, version, http=fakes[api]))
    return fakes


def refresh(overlay_dir: Path, *extra: str) -> int:
    return main(["catalog", "refresh", "--project", PROJECT, "--today", TODAY, "--out", str(overlay_dir), *extra])


def overlay_rows(directory: Path, filename: str) -> list[dict[str, str]]:
    with (directory / filename).open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def run_all(
    overlay_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str, dict[str, FakeGoogle]]:
    fakes = fake_google(
        monkeypatch, {"compute": compute_answers(), "tpu": tpu_answers(), "cloudbilling": billing_answers()}
    )
    status = refresh(overlay_dir, "--regions", "us-central1")
    out, err = capsys.readouterr()
    return status, out, err, fakes


def test_refresh_writes_the_overlay_from_the_answers(
    overlay_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err, fakes = run_all(overlay_dir, monkeypatch, capsys)
    assert status == 0, err
    for fake in fakes.values():
        fake.assert_all_used()
    assert fakes["compute"].uris == [
        f"https://compute.googleapis.com/compute/v1/projects/{PROJECT}/aggregated/acceleratorTypes?maxResults=500&alt=json",
        f"https://compute.googleapis.com/compute/v1/projects/{PROJECT}/aggregated/machineTypes?maxResults=500"
        "&filter=name+eq+%27%28a2%7Ca3%7Ca4%7Cg2%7Cg4%29-.%2A%27&alt=json",
    ]
    assert fakes["tpu"].uris == [
        f"https://tpu.googleapis.com/v2/projects/{PROJECT}/locations?alt=json",
        f"https://tpu.googleapis.com/v2/projects/{PROJECT}/locations/us-central1-a/acceleratorTypes?alt=json",
        f"https://tpu.googleapis.com/v2/projects/{PROJECT}/locations/us-central1-a/runtimeVersions?alt=json",
        f"https://tpu.googleapis.com/v2/projects/{PROJECT}/locations/us-central1-b/acceleratorTypes?alt=json",
    ]
    assert [u.split("?")[0] for u in fakes["cloudbilling"].uris] == [
        "https://cloudbilling.googleapis.com/v1/services/6F81-5844-456A/skus",
        "https://cloudbilling.googleapis.com/v1/services/E000-3F24-B8AA/skus",
    ]
    assert all("currencyCode=USD" in u for u in fakes["cloudbilling"].uris)

    gpu_rows = {(r["gpu"], r["zone"]): r for r in overlay_rows(overlay_dir, "gpu_zones.csv")}
    assert set(gpu_rows) == {
        ("nvidia-tesla-t4", "us-central1-a"),
        ("nvidia-l4", "us-central1-a"),
        ("nvidia-l4", "us-central1-b"),
    }
    assert gpu_rows["nvidia-l4", "us-central1-a"]["machine_types"] == "g2-standard-4 g2-standard-8"
    assert gpu_rows["nvidia-tesla-t4", "us-central1-a"]["machine_types"] == "all"
    assert gpu_rows["nvidia-l4", "us-central1-b"]["source"] == (
        f"compute.acceleratorTypes.aggregatedList (project {PROJECT})"
    )
    assert {r["as_of"] for r in gpu_rows.values()} == {TODAY}
    tpu_rows = overlay_rows(overlay_dir, "tpu_zones.csv")
    assert [(r["generation"], r["zone"], r["sizes"]) for r in tpu_rows] == [
        ("v5e", "us-central1-a", "1 4 8"),
        ("v6e", "us-central1-a", "8"),
    ]
    prices = {(r["kind"], r["name"], r["region"]): r for r in overlay_rows(overlay_dir, "regional_prices.csv")}
    assert {key for key in prices if key[0] != "machine"} == {
        ("gpu", "nvidia-tesla-t4", "us-central1"),
        ("gpu", "nvidia-l4", "us-central1"),
        ("tpu_chip", "v2", "us-central1"),
    }
    # every N1 machine type from its vCPUs and memory: n1-standard-8 is 8 vCPUs and 30 GB
    n1 = prices.pop(("machine", "n1-standard-8", "us-central1"))
    assert (n1["on_demand_usd_hr"], n1["spot_usd_hr"]) == ("0.43", "0.14")
    assert {name for kind, name, _ in prices if kind == "machine"} == {
        m.name for m in build_catalog(None).machine_types.values() if m.series == "n1"
    } - {"n1-standard-8"}
    prices = {key: row for key, row in prices.items() if key[0] != "machine"}
    t4 = prices["gpu", "nvidia-tesla-t4", "us-central1"]
    assert (t4["on_demand_usd_hr"], t4["spot_usd_hr"]) == ("0.4", "0.15")
    # the commitment SKU is not the on-demand price; the Spot side the SKUs lack stays shipped
    l4 = prices["gpu", "nvidia-l4", "us-central1"]
    assert (l4["on_demand_usd_hr"], l4["spot_usd_hr"]) == ("0.56004", "0.2862")
    assert "the side the SKUs lack is the shipped figure" in l4["source"]
    # a v2 SKU prices a v2-8 device: 4 chips
    assert prices["tpu_chip", "v2", "us-central1"]["on_demand_usd_hr"] == "1.2"
    # flex-start's own SKUs, apart from the list prices; the calendar-mode SKU taken for neither
    flex = {(r["kind"], r["name"], r["region"]): r for r in overlay_rows(overlay_dir, "flex_start_prices.csv")}
    assert {key: (row["usd_hr"], row["sku_description"]) for key, row in flex.items()} == {
        ("gpu", "nvidia-h100-80gb", "us-central1"): (
            "4.1",
            "Nvidia H100 80GB GPU attached to DWS Defined Duration VMs running in Americas",
        ),
        ("machine_core", "a3-highgpu", "us-central1"): ("0.011", "DWS Defined Duration A3 Core running in Americas"),
        ("machine_ram", "a3-highgpu", "us-central1"): ("0.001", "DWS Defined Duration A3 Ram running in Americas"),
    }
    refreshed = build_catalog(read_overlay(overlay_dir))
    assert flex_start_gpu_usd_hr(refreshed, "nvidia-h100-80gb", "us-central1") == 4.1
    assert flex_start_machine_usd_hr(refreshed, "a3-highgpu-8g", "us-central1") == pytest.approx(
        208 * 0.011 + 1872 * 0.001
    )
    assert refreshed.gpu_usd_hr("nvidia-h100-80gb", "us-central1", False) == build_catalog(None).gpu_usd_hr(
        "nvidia-h100-80gb", "us-central1", False
    )
    manifest = json.loads((overlay_dir / MANIFEST).read_text(encoding="utf-8"))
    assert manifest["zones_read"] == {
        "gpu_zones.csv": ["us-central1-a", "us-central1-b", "us-central1-f"],
        "tpu_zones.csv": ["us-central1-a"],
    }
    assert (manifest["project"], manifest["refreshed"], manifest["regions"]) == (PROJECT, TODAY, ["us-central1"])


def test_refresh_prints_what_changed_bounded_and_each_problem_in_one_line(
    overlay_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, err, _ = run_all(overlay_dir, monkeypatch, capsys)
    assert "price nvidia-tesla-t4 on demand in us-central1 (per GPU/h): $0.35 -> $0.4 (up)" in out
    assert "price nvidia-tesla-t4 Spot in us-central1 (per GPU/h): $0.1915 -> $0.15 (down)" in out
    assert "price v2 on demand in us-central1 (per chip/h): $1.125 -> $1.2 (up)" in out
    assert "nvidia-tesla-t4: zones removed: us-central1-b, us-central1-f" in out
    change_lines = [line for line in out.splitlines() if line.startswith("  ") and "... and" not in line]
    assert len(change_lines) == 30
    assert "more (`trainstack catalog diff` lists them all)" in out
    assert "GPU types the API lists and the catalog does not know (not added): nvidia-gb300" in out
    assert "machine types the API lists and the catalog does not know (not added): a4x-maxgpu-4g-metal" in out
    assert "tpu-vm-tf-2.19.0-pjrt" in out
    assert "prices of machine series billing_skus.csv does not name (A3, A4)" in out
    problems = err.splitlines()
    assert problems == [
        "trainstack: catalog refresh: 1 zone(s) not read (unreachable or missing from the answer), "
        "their shipped rows kept: us-central1-c",
        "trainstack: catalog refresh: the TPU types of us-central1-b: permission denied (Permission "
        "'tpu.acceleratorTypes.list' denied on 'projects/my-project/locations/us-central1-b'); its shipped rows kept",
    ]
    # `catalog diff` lists every change the refresh counted
    main(["catalog", "diff"])
    total = int(out.split(" change(s)")[0].rsplit("\n", 1)[-1])
    everything = capsys.readouterr().out
    assert len([line for line in everything.splitlines() if line.startswith("  ")]) == total > 30
    assert "  machine type g2-standard-8: zones removed: us-central1-b\n" in everything
    # machine types last (many to a series), each priced from its series' vCPU and memory SKUs
    assert everything.rstrip().endswith(
        "price n1-standard-96 Spot in us-central1 (per machine, GPUs apart/h): $1.5318 -> $1.68 (up)"
    )
    assert (
        "  price n1-standard-8 on demand in us-central1 (per machine, GPUs apart/h): $0.38 -> $0.43 (up)\n"
        in everything
    )
    assert (
        "  machine type a2-highgpu-1g: removed from every zone read (us-central1-a, us-central1-b, us-central1-f)"
        in everything
    )
    assert "  TPU v6e: zones added: us-central1-a\n" in everything
    assert "  TPU v5e in us-central1-a: sizes all -> 1 4 8\n" in everything


def test_the_commands_read_the_overlay_and_say_which_catalog(
    overlay_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_all(overlay_dir, monkeypatch, capsys)
    load_catalog.cache_clear()
    line = f"catalog: refreshed {TODAY} from project {PROJECT} (overlay {overlay_dir}), shipped 2026-11 beneath"
    catalog = load_catalog()
    # the unreachable zone keeps its shipped rows; the zones read lose what they no longer offer
    assert sorted(z for z in catalog.gpu_zones["nvidia-tesla-t4"] if z.startswith("us-central1")) == [
        "us-central1-a",
        "us-central1-c",
    ]
    assert catalog.machine_zones("g2-standard-8") & {"us-central1-a", "us-central1-b", "us-central1-c"} == {
        "us-central1-a",
        "us-central1-c",
    }
    assert catalog.gpu_usd_hr("nvidia-tesla-t4", "us-central1", spot=False) == 0.4
    assert catalog.tpu_zones["v2"]["us-central1-b"] == frozenset({8})  # TPU zone not read: shipped row
    assert main(["gpus", "t4"]) == 0
    out = capsys.readouterr().out
    assert "us-central1-a, us-central1-c" in out
    assert "0.40" in out
    assert out.splitlines()[-1] == line
    assert main(["tpus", "--json"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)
    assert captured.err.strip() == line
    assert main(["validate", "--stack", "dev"]) == 0
    assert line in capsys.readouterr().out.splitlines()
    assert main(["cost", "--stack", "dev"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == line
    monkeypatch.setenv(CATALOG_VARIABLE, "shipped")
    load_catalog.cache_clear()
    assert main(["gpus", "t4"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "catalog: shipped (2026-11)"
    assert "us-central1-a, us-central1-b, us-central1-c, us-central1-f" in out


def test_a_disabled_billing_api_refreshes_the_rest_and_says_how_to_enable_it(
    overlay_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_google(
        monkeypatch,
        {
            "compute": compute_answers(),
            "tpu": tpu_answers(),
            "cloudbilling": [api_disabled("cloudbilling.googleapis.com")],
        },
    )
    assert refresh(overlay_dir, "--regions", "us-central1") == 0
    err = capsys.readouterr().err
    assert (
        "trainstack: catalog refresh: prices not refreshed: the prices of services/6F81-5844-456A "
        "(cloudbilling.services.skus.list): the API is disabled in the project: "
        f"gcloud services enable cloudbilling.googleapis.com --project {PROJECT}"
    ) in err
    assert "Traceback" not in err
    assert not (overlay_dir / "regional_prices.csv").exists()
    assert overlay_rows(overlay_dir, "gpu_zones.csv")


def test_nothing_read_exits_1_and_leaves_no_overlay(
    overlay_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    denied = error(
        403, "Required 'compute.acceleratorTypes.list' permission for 'projects/my-project'", reason="forbidden"
    )
    fake_google(
        monkeypatch,
        {
            "compute": [denied],
            "tpu": [api_disabled("tpu.googleapis.com")],
            "cloudbilling": [error(403, "The caller does not have permission")],
        },
    )
    assert refresh(overlay_dir) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == (
        "trainstack: catalog refresh: GPU offerings not refreshed: the GPU types per zone "
        "(compute.acceleratorTypes.aggregatedList): permission denied (Required "
        "'compute.acceleratorTypes.list' permission for 'projects/my-project')"
    )
    assert "gcloud services enable tpu.googleapis.com --project my-project" in lines[1]
    assert "prices not refreshed" in lines[2]
    assert "permission denied" in lines[2]
    assert lines[3] == "trainstack: catalog refresh: nothing read; the catalog is unchanged"
    assert not overlay_dir.exists()


def test_no_credentials_is_one_line(
    overlay_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import google.auth
    from google.auth import exceptions

    def no_credentials(**_: Any) -> Any:
        raise exceptions.DefaultCredentialsError("Your default credentials were not found.")

    monkeypatch.setattr(google.auth, "default", no_credentials)
    assert refresh(overlay_dir) == 1
    err = capsys.readouterr().err
    assert "no Google Cloud credentials found: run `gcloud auth application-default login`" in err
    assert "Traceback" not in err
    assert not overlay_dir.exists()


def test_a_refresh_that_fails_while_writing_keeps_the_previous_overlay(
    overlay_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_all(overlay_dir, monkeypatch, capsys)
    before = {p.name: p.read_text(encoding="utf-8") for p in overlay_dir.iterdir()}
    from trainstack.catalog import refresh as refresh_module

    real_header = refresh_module._header
    calls = iter(range(100))

    def failing_header(filename: str) -> list[str]:
        if next(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_header(filename)

    monkeypatch.setattr(refresh_module, "_header", failing_header)
    fake_google(monkeypatch, {"compute": compute_answers(), "tpu": tpu_answers(), "cloudbilling": billing_answers()})
    with pytest.raises(
        OSError, match="No space left on device"
    ):  # a later day: every row the failed refresh wrote would differ
        main(
            [
                "catalog",
                "refresh",
                "--project",
                PROJECT,
                "--today",
                "2026-11-27",
                "--out",
                str(overlay_dir),
                "--regions",
                "us-central1",
            ]
        )
    assert {p.name: p.read_text(encoding="utf-8") for p in overlay_dir.iterdir()} == before
    assert sorted(p.name for p in overlay_dir.parent.iterdir()) == ["catalog"]


def test_bad_arguments_are_one_line(
    overlay_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert refresh(overlay_dir, "--regions", "mars-north9") == 1
    assert capsys.readouterr().err.startswith("trainstack: catalog refresh: --regions: unknown region(s) mars-north9;")
    with pytest.raises(SystemExit):
        refresh(overlay_dir, "--regions", "us central1")
    assert "regions separated by commas" in capsys.readouterr().err
    assert main(["catalog", "refresh", "--project", "Bad_Project"]) == 1
    assert "is not a project id" in capsys.readouterr().err
    (overlay_dir).mkdir(parents=True)
    (overlay_dir / MANIFEST).write_text("{", encoding="utf-8")
    load_catalog.cache_clear()
    assert main(["gpus"]) == 1
    assert "cannot be read" in capsys.readouterr().err


def test_answers_off_the_schema_or_out_of_bounds_are_skipped_counted_and_never_written(
    overlay_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a broken proxy or a hostile endpoint could answer: a scope that is no zone's name, a
    GPU whose name is a number, a TPU location that is a list, a negative price and a price
    whose units are text. None of it reaches the overlay; the rest of each answer does."""
    accelerators = json.loads(compute_answers()[0][1])
    accelerators["items"]["zones/us-central1-x y"] = {"acceleratorTypes": [gpu("nvidia-tesla-t4", "x y", 4)]}
    accelerators["items"]["zones/us-central1-b"]["acceleratorTypes"].append({"name": 5, "zone": "us-central1-b"})
    locations = json.loads(tpu_answers()[0][1])
    locations["locations"].append({"name": "projects/p/locations/x", "locationId": ["us-central1-f"]})
    compute_skus = json.loads(billing_answers()[0][1])
    negative = sku("N1", "Nvidia Tesla T4 GPU running in Americas", "OnDemand", ["us-west1"], "-5", 0)
    text = sku("N2", "Nvidia L4 GPU running in Americas", "OnDemand", ["us-central1"], "lots", 0)
    compute_skus["skus"] += [negative, text]
    fake_google(
        monkeypatch,
        {
            "compute": [off_schema(accelerators), compute_answers()[1]],
            "tpu": [off_schema(locations), *tpu_answers()[1:]],
            "cloudbilling": [off_schema(compute_skus), billing_answers()[1]],
        },
    )
    status = refresh(overlay_dir, "--regions", "us-central1,us-west1")
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "Traceback" not in out + err
    [line] = [line for line in err.splitlines() if "item(s) of Google's answers skipped" in line]
    assert line.startswith("trainstack: catalog refresh: 5 item(s) of Google's answers skipped")
    zones = {row["zone"] for row in overlay_rows(overlay_dir, "gpu_zones.csv")}
    assert zones == {"us-central1-a", "us-central1-b"}
    prices = {(r["kind"], r["name"], r["region"]): r for r in overlay_rows(overlay_dir, "regional_prices.csv")}
    assert ("gpu", "nvidia-tesla-t4", "us-west1") not in prices
    assert prices["gpu", "nvidia-l4", "us-central1"]["on_demand_usd_hr"] == "0.56004"
    assert all(float(r["on_demand_usd_hr"] or 0) >= 0 for r in prices.values())
