"""`trainstack cost` and the cost in `plan`: the whole bill, by hand from catalog rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from stack_helpers import base_config, plan_of, write_stack
from trainstack.commands.main import main


def cost_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["cost", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_cost_prints_two_columns_and_the_stopped_and_storage_lines(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "--stack", "multiworker"]) == 0
    out = capsys.readouterr().out
    for words in (
        "as configured",
        "on demand, left running a day",
        "a month stopped (persistent disks):           $60.00",
        "storage, per GB-month kept in the bucket:     $0.0200",
        "first boot, Cloud NAT data processing",
    ):
        assert words in out, words


def test_spot_released_at_the_end_costs_less_than_on_demand_left_running(capsys: pytest.CaptureFixture[str]) -> None:
    report = cost_json(capsys, "--stack", "multiworker")
    columns = {c["name"]: c["usd"] for c in report["columns"]}
    assert columns["as configured"] < columns["on demand, left running a day"]
    # By hand: chief on demand, two workers Spot, 24 h; the other column all on demand for 48 h.
    assert columns["as configured"] == pytest.approx(report["hourly_usd"] * 24, abs=0.01)
    chief = report["nodes"][0]["usd_per_hour"]
    assert columns["on demand, left running a day"] == pytest.approx(3 * chief * 48, abs=0.01)
    # No column priced as unknown for ever: a price the catalog lacks is not a column.
    assert set(columns) == {"as configured", "on demand, left running a day"}
    assert report["one_run_max_usd"] == pytest.approx(report["hourly_usd"] * 24, abs=0.01)
    assert report["monthly_running_usd"] == pytest.approx(report["hourly_usd"] * 730, abs=0.01)
    # Three 200 GB pd-balanced boot disks at $0.10 per GB-month keep billing while stopped.
    assert report["monthly_stopped_usd"] == pytest.approx(60.0)


def test_run_hours_sets_the_job_length_of_the_columns(capsys: pytest.CaptureFixture[str]) -> None:
    report = cost_json(capsys, "--stack", "multiworker", "--run-hours", "2")
    columns = {c["name"]: c["usd"] for c in report["columns"]}
    assert columns["as configured"] == pytest.approx(report["hourly_usd"] * 2, abs=0.01)


def test_one_run_over_the_monthly_budget_is_a_warning_and_the_budget_counts_the_stack_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = base_config()
    config["trainstack:budget"] = {"billing_account": "01AB23-45CD67-89EF01", "monthly_usd": 10}
    path = write_stack(tmp_path, config)
    report = cost_json(capsys, "--stack-file", str(path))
    assert any("more than budget.monthly_usd $10.00" in w for w in report["warnings"])
    [budget] = plan_of(path).of_type("gcp:billing/budget:Budget")
    assert budget.inputs["budgetFilter"]["labels"] == {"trainstack-stack": "test"}


def test_plan_json_carries_the_same_cost_report(capsys: pytest.CaptureFixture[str]) -> None:
    report = cost_json(capsys, "--stack", "dev")
    assert main(["plan", "--stack", "dev", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cost"] == report


@pytest.mark.parametrize("output", [[], ["--json"]])
def test_plan_works_the_cost_out_once(
    output: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import trainstack.cloud.planning as planning

    calls: list[str] = []
    real = planning.cost_report

    def counting(stack: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(stack.name)
        return real(stack, *args, **kwargs)

    monkeypatch.setattr(planning, "cost_report", counting)
    assert main(["plan", "--stack", "dev", *output]) == 0
    capsys.readouterr()
    assert len(calls) == 1


def test_chart_is_a_png_of_the_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart = tmp_path / "cost.png"
    assert main(["cost", "--stack", "multiworker", "--chart", str(chart)]) == 0
    with Image.open(chart) as image:
        assert image.format == "PNG"
        assert image.size == (800, 450)
        colours = {colour for _, colour in image.convert("RGB").getcolors(maxcolors=1_000_000)}
    # Both known columns are drawn in their colours; an empty chart would be white and black.
    assert (0x3B, 0x7D, 0xD8) in colours
    assert (0xD8, 0x61, 0x3B) in colours


def test_a_chart_that_cannot_be_written_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "--stack", "multiworker", "--chart", str(tmp_path / "no" / "such" / "dir.png")]) == 1
    err = capsys.readouterr().err
    assert "--chart" in err
    assert "Traceback" not in err


def test_the_nat_gateway_is_priced_per_vm_up_to_32_then_flat(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = base_config()
    assert cost_json(capsys, "--stack-file", str(write_stack(tmp_path, config)))["nat_gateway_usd_hr"] == pytest.approx(
        3 * 0.0014
    )
    config["trainstack:cluster"]["workers"]["count"] = 40
    # The catalog's flat rate for us-central1 (regional_rates.csv, nat gateway_flat).
    assert cost_json(capsys, "--stack-file", str(write_stack(tmp_path, config)))["nat_gateway_usd_hr"] == 0.044


@pytest.mark.parametrize(("suffix", "magic"), [("svg", b"<?xml"), ("pdf", b"%PDF"), ("PNG", b"\x89PNG")])
def test_the_charts_format_follows_the_files_suffix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str, magic: bytes
) -> None:
    """Defect: `cost --chart cost.svg` wrote PNG bytes into the .svg file."""
    chart = tmp_path / f"cost.{suffix}"
    assert main(["cost", "--stack", "multiworker", "--chart", str(chart)]) == 0
    assert chart.read_bytes().startswith(magic)


def test_a_chart_suffix_that_names_no_format_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chart = tmp_path / "cost.jpg"
    with pytest.raises(SystemExit) as exit_:
        main(["cost", "--stack", "multiworker", "--chart", str(chart)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "Traceback" not in err
    assert "the file name's suffix says the format: .png, .svg, .pdf" in err
    assert not chart.exists()
