"""`trainstack quota` end to end through the real Google client: the shipped stacks' needs against
answers of Compute Engine's regions.get and projects.get held to the published schema, with the
exact figures, the requests' project and region, and every failure as one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stack_helpers import write_stack
from tests.cloud_quotas_server import cloud_quotas, dimensions_info, quota_info
from tests.googleapi_fakes import FakeGoogle, api_disabled, error, off_schema, ok
from trainstack.commands import quota as quota_command
from trainstack.commands.main import main

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "your-gcp-project"  # the shipped stacks' gcp:project
REGION_URI = f"https://compute.googleapis.com/compute/v1/projects/{PROJECT}/regions/us-central1"
PROJECT_URI = f"https://compute.googleapis.com/compute/v1/projects/{PROJECT}"


def region(**quotas: tuple[float, float]) -> tuple[dict[str, str], str]:
    body = {
        "kind": "compute#region",
        "name": "us-central1",
        "status": "UP",
        "quotas": [{"metric": m, "limit": limit, "usage": usage} for m, (limit, usage) in quotas.items()],
    }
    return ok("compute", "v1", "compute.regions.get", body)


def project(**quotas: tuple[float, float]) -> tuple[dict[str, str], str]:
    body = {
        "kind": "compute#project",
        "name": PROJECT,
        "quotas": [{"metric": m, "limit": limit, "usage": usage} for m, (limit, usage) in quotas.items()],
    }
    return ok("compute", "v1", "compute.projects.get", body)


def run(
    stack: str, answers: list[tuple[dict[str, str], str]], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> tuple[int, dict[str, Any], FakeGoogle, str]:
    http = FakeGoogle(answers)
    monkeypatch.setattr(quota_command, "HTTP", http)
    code = main(["quota", "--stack", stack, "--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out else {}, http, captured.err


def by_metric(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {q["metric"]: q for q in report["quotas"] if q["metric"]}


def test_a_gpu_stack_that_fits_reads_its_region_and_project(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    answers = [region(CPUS=(24.0, 4.0), NVIDIA_T4_GPUS=(1.0, 0.0)), project(GPUS_ALL_REGIONS=(4.0, 1.0))]
    code, report, http, _ = run("dev", answers, monkeypatch, capsys)
    assert code == 0
    assert report["fits"] is True
    assert report["region"] == "us-central1"
    assert report["project"] == PROJECT
    quotas = by_metric(report)
    assert set(quotas) == {"CPUS", "NVIDIA_T4_GPUS", "GPUS_ALL_REGIONS"}
    assert (quotas["CPUS"]["need"], quotas["CPUS"]["available"], quotas["CPUS"]["status"]) == (8, 20.0, "fits")
    assert (quotas["NVIDIA_T4_GPUS"]["need"], quotas["NVIDIA_T4_GPUS"]["available"]) == (1, 1.0)
    assert (quotas["GPUS_ALL_REGIONS"]["need"], quotas["GPUS_ALL_REGIONS"]["scope"]) == (1, "project")
    assert http.uris[0].split("?")[0] == REGION_URI
    assert http.uris[1].split("?")[0] == PROJECT_URI
    http.assert_all_used()


def test_an_exceeded_gpu_quota_says_by_how_much_and_how_to_ask(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    answers = [region(CPUS=(24.0, 4.0), NVIDIA_T4_GPUS=(1.0, 1.0)), project(GPUS_ALL_REGIONS=(4.0, 1.0))]
    code, report, _, _ = run("dev", answers, monkeypatch, capsys)
    assert code == 1
    assert report["fits"] is False
    t4 = by_metric(report)["NVIDIA_T4_GPUS"]
    assert (t4["status"], t4["need"], t4["limit"], t4["usage"], t4["available"], t4["short_by"]) == (
        "exceeded",
        1,
        1.0,
        1.0,
        0.0,
        1.0,
    )
    assert t4["request"] == [
        f"https://console.cloud.google.com/iam-admin/quotas?project={PROJECT} (search for NVIDIA_T4_GPUS)",
        "gcloud beta quotas preferences create --service=compute.googleapis.com "
        f"--project={PROJECT} --quota-id=NVIDIA-T4-GPUS-per-project-region --preferred-value=2 "
        '--dimensions=region=us-central1 --email="$(gcloud config get-value account)"',
    ]
    assert by_metric(report)["CPUS"]["status"] == "fits"


def test_the_text_report_names_the_shortfall(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    http = FakeGoogle([region(CPUS=(4.0, 0.0), NVIDIA_T4_GPUS=(1.0, 0.0)), project(GPUS_ALL_REGIONS=(4.0, 0.0))])
    monkeypatch.setattr(quota_command, "HTTP", http)
    assert main(["quota", "--stack", "dev"]) == 1
    out = capsys.readouterr().out
    assert "EXCEEDED     CPUS" in out
    assert "need 8, limit 4, used 0, available 4: short by 4" in out
    assert "--quota-id=CPUS-per-project-region --preferred-value=8 --dimensions=region=us-central1" in out


def test_spot_nodes_draw_on_the_preemptible_quotas_when_the_project_has_them(
    monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # multiworker: the chief (n1-standard-8, 2 T4) on demand, two workers (the same) on Spot.
    answers = [
        region(
            CPUS=(8.0, 0.0),
            NVIDIA_T4_GPUS=(2.0, 0.0),
            PREEMPTIBLE_CPUS=(16.0, 0.0),
            PREEMPTIBLE_NVIDIA_T4_GPUS=(4.0, 1.0),
        ),
        project(GPUS_ALL_REGIONS=(8.0, 0.0)),
    ]
    code, report, _, _ = run("multiworker", answers, monkeypatch, capsys)
    assert code == 1
    quotas = by_metric(report)
    assert (quotas["NVIDIA_T4_GPUS"]["need"], quotas["NVIDIA_T4_GPUS"]["status"]) == (2, "fits")
    assert (quotas["CPUS"]["need"], quotas["CPUS"]["status"]) == (8, "fits")
    assert (quotas["PREEMPTIBLE_CPUS"]["need"], quotas["PREEMPTIBLE_CPUS"]["status"]) == (16, "fits")
    spot = quotas["PREEMPTIBLE_NVIDIA_T4_GPUS"]
    assert (spot["need"], spot["available"], spot["short_by"], spot["status"]) == (4, 3.0, 1.0, "exceeded")
    assert sorted(spot["nodes"]) == ["multiworker-worker-0", "multiworker-worker-1"]
    assert quotas["GPUS_ALL_REGIONS"]["need"] == 6


def test_spot_nodes_draw_on_the_standard_quotas_without_preemptible_quota(
    monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # No preemptible T4 quota (limit 0) and no PREEMPTIBLE_CPUS at all: everything on the standard ones.
    answers = [
        region(CPUS=(24.0, 0.0), NVIDIA_T4_GPUS=(6.0, 0.0), PREEMPTIBLE_NVIDIA_T4_GPUS=(0.0, 0.0)),
        project(GPUS_ALL_REGIONS=(8.0, 0.0)),
    ]
    code, report, _, _ = run("multiworker", answers, monkeypatch, capsys)
    assert code == 0
    quotas = by_metric(report)
    assert set(quotas) == {"CPUS", "NVIDIA_T4_GPUS", "GPUS_ALL_REGIONS"}
    assert (quotas["NVIDIA_T4_GPUS"]["need"], quotas["CPUS"]["need"]) == (6, 24)
    assert any("Spot draws on the standard quota" in n for n in quotas["NVIDIA_T4_GPUS"]["notes"])


def test_a_metric_the_answer_lacks_is_said_and_fails_the_check(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    answers = [region(CPUS=(24.0, 0.0)), project(GPUS_ALL_REGIONS=(4.0, 0.0))]
    code, report, _, _ = run("dev", answers, monkeypatch, capsys)
    assert code == 1
    t4 = by_metric(report)["NVIDIA_T4_GPUS"]
    assert (t4["status"], t4["limit"], t4["available"]) == ("missing", None, None)
    assert t4["notes"] == ["regions.get for us-central1 reported no NVIDIA_T4_GPUS: not checked"]


def test_a_tpu_generation_compute_engine_does_not_report_is_said(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    answers = [region(CPUS=(24.0, 0.0), TPU_PODSLICE_V4=(32.0, 0.0)), project(GPUS_ALL_REGIONS=(4.0, 0.0))]
    code, report, http, _ = run("tpu", answers, monkeypatch, capsys)
    assert code == 0
    (line,) = report["quotas"]
    assert (line["metric"], line["what"], line["need"], line["status"]) == (None, "v2 TPU chips", 4, "not reported")
    assert "no TPU v2 metric" in line["notes"][0]
    assert "Cloud TPU API" in report["notes"][0]
    assert (
        http.uris[0].split("?")[0]
        == f"https://compute.googleapis.com/compute/v1/projects/{PROJECT}/regions/us-central1"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            error(403, "Required 'compute.regions.get' permission for 'projects/your-gcp-project'", reason="forbidden"),
            "the quotas of us-central1 in your-gcp-project: permission denied (Required 'compute.regions.get'",
        ),
        (
            api_disabled("compute.googleapis.com"),
            "gcloud services enable compute.googleapis.com --project your-gcp-project",
        ),
        (
            error(404, "The resource 'projects/your-gcp-project/regions/us-central1' was not found", reason="notFound"),
            "the quotas of us-central1 in your-gcp-project: not found (The resource",
        ),
    ],
    ids=["permission-denied", "api-disabled", "region-not-found"],
)
def test_a_failed_call_is_one_line_and_exit_1(
    answer: tuple[dict[str, str], str], expected: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    code, report, _, err = run("dev", [answer], monkeypatch, capsys)
    assert code == 1
    assert report == {}
    assert err.startswith("trainstack quota: ")
    assert err.count("\n") == 1
    assert "Traceback" not in err
    assert expected in err


def test_failures_print_one_line_on_stderr(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setattr(
        quota_command, "HTTP", FakeGoogle([region(CPUS=(1.0, 0.0)), api_disabled("compute.googleapis.com")])
    )
    assert main(["quota", "--stack", "dev"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert "Traceback" not in captured.err
    assert captured.err.startswith("trainstack quota: the quotas of project your-gcp-project: the API is disabled")


def test_no_credentials_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    import google.auth
    from google.auth import exceptions

    def no_credentials(**_: Any) -> Any:
        raise exceptions.DefaultCredentialsError("Your default credentials were not found.")

    monkeypatch.setattr(quota_command, "HTTP", None)
    monkeypatch.setattr(google.auth, "default", no_credentials)
    assert main(["quota", "--stack", "dev"]) == 1
    captured = capsys.readouterr()
    assert captured.err == (
        "trainstack quota: no Google Cloud credentials found: run `gcloud auth application-default login` "
        "(or set GOOGLE_APPLICATION_CREDENTIALS)\n"
    )


def test_built_in_gpus_count_and_a_series_without_a_cpu_metric_is_said(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    text = (ROOT / "stacks" / "Pulumi.dev.yaml").read_text(encoding="utf-8")
    text = text.replace(
        "machine_type: n1-standard-8\n      accelerator: {type: nvidia-tesla-t4, count: 1}",
        "machine_type: g2-standard-24",
    )
    assert "g2-standard-24" in text
    stack_file = tmp_path / "Pulumi.l4.yaml"
    stack_file.write_text(text, encoding="utf-8")
    http = FakeGoogle([region(CPUS=(24.0, 0.0), NVIDIA_L4_GPUS=(1.0, 0.0)), project(GPUS_ALL_REGIONS=(4.0, 0.0))])
    monkeypatch.setattr(quota_command, "HTTP", http)
    assert main(["quota", "--stack-file", str(stack_file), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    l4 = by_metric(report)["NVIDIA_L4_GPUS"]  # g2-standard-24 carries 2 L4 (machine_types.csv)
    assert (l4["need"], l4["short_by"], l4["status"]) == (2, 1.0, "exceeded")
    assert "CPUS" not in by_metric(report)
    (cpu,) = [q for q in report["quotas"] if q["metric"] is None]
    assert (cpu["what"], cpu["need"], cpu["status"]) == ("g2 vCPUs", 24, "not reported")
    assert "no G2 CPU metric" in cpu["notes"][0]


def a100_stack(tmp_path: Path, capacity: dict[str, str], on_finish: str = "stop") -> Path:
    """A chief and two workers, a2-highgpu-1g (1 A100 each), of the capacity given."""
    config = {
        "gcp:project": PROJECT,
        "gcp:region": "us-central1",
        "trainstack:zone": "us-central1-a",
        "trainstack:cluster": {
            "chief": {"machine_type": "a2-highgpu-1g", **capacity},
            "workers": {"count": 2, "machine_type": "a2-highgpu-1g", **capacity},
            "max_run_hours": 24,
            "on_finish": on_finish,
        },
    }
    return write_stack(tmp_path, config, stack=f"a100-{capacity['capacity']}")


def test_flex_start_draws_on_the_preemptible_quota_and_a_reserved_node_on_the_standard_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # Google: flex-start VMs "consume preemptible quota" (capacity_rules.csv, flex_start_quota).
    quotas = {
        "A2_CPUS": (24.0, 0.0),
        "NVIDIA_A100_GPUS": (3.0, 0.0),
        "PREEMPTIBLE_CPUS": (48.0, 0.0),
        "PREEMPTIBLE_NVIDIA_A100_GPUS": (2.0, 0.0),
    }
    flex = a100_stack(tmp_path, {"capacity": "flex_start"}, on_finish="delete")
    reserved = a100_stack(tmp_path, {"capacity": "reservation", "reservation": "team-a100"})
    reports = []
    for stack_file in (flex, reserved):
        monkeypatch.setattr(quota_command, "HTTP", FakeGoogle([region(**quotas), project(GPUS_ALL_REGIONS=(8.0, 0.0))]))
        main(["quota", "--stack-file", str(stack_file), "--json"])
        reports.append(by_metric(json.loads(capsys.readouterr().out)))
    flex_quotas, reserved_quotas = reports
    gpus = flex_quotas["PREEMPTIBLE_NVIDIA_A100_GPUS"]
    assert (gpus["need"], gpus["short_by"], gpus["status"]) == (3, 1.0, "exceeded")
    assert "NVIDIA_A100_GPUS" not in flex_quotas
    assert flex_quotas["PREEMPTIBLE_CPUS"]["need"] == 36
    gpus = reserved_quotas["NVIDIA_A100_GPUS"]
    assert (gpus["need"], gpus["status"]) == (3, "fits")
    assert "PREEMPTIBLE_NVIDIA_A100_GPUS" not in reserved_quotas


# The GPU-family quota as Google's Cloud Quotas documentation shows it: dimensions gpu_family and
# region, dimensionsInfos from the most specific to the default.
FAMILY = "GPUS-PER-GPU-FAMILY-per-project-region"


def family_quota(*infos: dict[str, Any]) -> Any:
    return quota_info(
        PROJECT, FAMILY, "compute.googleapis.com/gpus_per_gpu_family", ["gpu_family", "region"], list(infos)
    )


def h100_stack(tmp_path: Path, capacity: str = "on_demand", count: int = 0) -> Path:
    """An a3-highgpu-8g chief (8 H100) and ``count`` workers like it, in us-central1."""
    cluster: dict[str, Any] = {"chief": {"machine_type": "a3-highgpu-8g", "capacity": capacity}, "max_run_hours": 24}
    if count:
        cluster["workers"] = {"count": count, "machine_type": "a3-highgpu-8g", "capacity": capacity}
        cluster["strategy"] = "multi_worker_mirrored"
    config = {
        "gcp:project": PROJECT,
        "gcp:region": "us-central1",
        "trainstack:zone": "us-central1-a",
        "trainstack:cluster": cluster,
    }
    return write_stack(tmp_path, config, stack=f"h100-{capacity}-{count}")


def run_with_cloud_quotas(
    stack_file: Path,
    quotas: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
    project: str = PROJECT,
    enabled: bool = True,
) -> tuple[int, dict[str, Any], list[str], str]:
    answers = [
        region(CPUS=(24.0, 0.0), PREEMPTIBLE_NVIDIA_H100_GPUS=(0.0, 0.0)),
        project_answer(GPUS_ALL_REGIONS=(64.0, 8.0)),
    ]
    monkeypatch.setattr(quota_command, "HTTP", FakeGoogle(answers))
    with cloud_quotas(project, quotas, enabled) as (server, channel):
        monkeypatch.setattr(quota_command, "QUOTAS_CHANNEL", channel)
        code = main(["quota", "--stack-file", str(stack_file), "--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out else {}, server.names, captured.err


project_answer = project


def family_line(report: dict[str, Any]) -> dict[str, Any]:
    [line] = [q for q in report["quotas"] if q["metric"] == FAMILY]
    return line


def test_h100_is_checked_against_its_gpu_family_quota_in_cloud_quotas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """regions.get reports no on-demand H100 quota: it is Cloud Quotas' GPU-family quota, whose
    value for us-central1 and NVIDIA_H100 is the most specific entry that applies."""
    quotas = {
        FAMILY: family_quota(
            dimensions_info(16, ["us-central1"], region="us-central1", gpu_family="NVIDIA_H100"),
            dimensions_info(8, ["global"], gpu_family="NVIDIA_H100"),
            dimensions_info(None, ["global"]),
        )
    }
    code, report, names, _ = run_with_cloud_quotas(h100_stack(tmp_path, count=1), quotas, monkeypatch, capsys)
    assert code == 0
    assert names == [f"projects/{PROJECT}/locations/global/services/compute.googleapis.com/quotaInfos/{FAMILY}"]
    line = family_line(report)
    assert (line["gpu_family"], line["need"], line["limit"], line["usage"], line["status"]) == (
        "NVIDIA_H100",
        16,
        16.0,
        None,
        "under limit",
    )
    assert "Cloud Quotas reports the limit, not the usage" in line["notes"][0]
    assert report["fits"] is True


def test_a_family_quota_short_of_the_stack_prints_the_request_with_its_dimensions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Nothing set for us-central1: the family's own entry (8) applies, and 24 H100 exceed it;
    H200's entry, and H100's in another region, are not H100's in us-central1."""
    quotas = {
        FAMILY: family_quota(
            dimensions_info(64, ["europe-west4"], region="europe-west4", gpu_family="NVIDIA_H100"),
            dimensions_info(64, ["global"], gpu_family="NVIDIA_H200"),
            dimensions_info(8, ["global"], gpu_family="NVIDIA_H100"),
            dimensions_info(None, ["global"]),
        )
    }
    code, report, _, _ = run_with_cloud_quotas(h100_stack(tmp_path, count=2), quotas, monkeypatch, capsys)
    assert code == 1
    line = family_line(report)
    assert (line["need"], line["limit"], line["short_by"], line["status"]) == (24, 8.0, 16.0, "exceeded")
    assert line["request"][1] == (
        "gcloud beta quotas preferences create --service=compute.googleapis.com "
        f"--project={PROJECT} --quota-id={FAMILY} --preferred-value=24 "
        '--dimensions=region=us-central1,gpu_family=NVIDIA_H100 --email="$(gcloud config get-value account)"'
    )


def test_a_zero_family_quota_is_a_shortfall_and_an_absent_one_is_not_taken_for_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """proto3 leaves a zero value out: such an entry enforces 0; a project whose Cloud Quotas has
    no family quota at all is said, and fails the check."""
    zero = {FAMILY: family_quota(dimensions_info(None, ["global"]))}
    code, report, _, _ = run_with_cloud_quotas(h100_stack(tmp_path), zero, monkeypatch, capsys)
    assert code == 1
    assert (family_line(report)["limit"], family_line(report)["status"]) == (0.0, "exceeded")
    code, report, _, _ = run_with_cloud_quotas(h100_stack(tmp_path), {}, monkeypatch, capsys)
    assert code == 1
    line = family_line(report)
    assert (line["status"], line["limit"]) == ("missing", None)
    assert line["notes"] == [f"Cloud Quotas has no quota {FAMILY} in the project: not checked"]


def test_spot_h200_without_its_preemptible_quota_draws_on_the_family_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    config = {
        "gcp:project": PROJECT,
        "gcp:region": "us-central1",
        "trainstack:zone": "us-central1-b",
        "trainstack:cluster": {"chief": {"machine_type": "a3-ultragpu-8g", "capacity": "spot"}, "max_run_hours": 24},
    }
    stack_file = write_stack(tmp_path, config, stack="h200")
    quotas = {FAMILY: family_quota(dimensions_info(8, ["global"], gpu_family="NVIDIA_H200"))}
    code, report, names, _ = run_with_cloud_quotas(stack_file, quotas, monkeypatch, capsys)
    assert code == 0
    assert sorted(name.rsplit("/", 1)[1] for name in names) == [
        FAMILY,
        "PREEMPTIBLE-NVIDIA-H200-GPUS-per-project-region",
    ]
    line = family_line(report)
    assert (line["gpu_family"], line["need"], line["status"]) == ("NVIDIA_H200", 8, "under limit")
    assert "no PREEMPTIBLE-NVIDIA-H200-GPUS-per-project-region in the region" in line["notes"][0]


def test_a_cloud_quotas_refusal_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    code, report, _, err = run_with_cloud_quotas(
        h100_stack(tmp_path), {}, monkeypatch, capsys, project="another-project"
    )
    assert code == 1
    assert report == {}
    assert err.count("\n") == 1
    assert err.startswith(f"trainstack quota: Cloud Quotas of project {PROJECT} ({FAMILY}): permission denied")
    assert "roles/servicemanagement.quotaViewer" in err


def test_cloud_quotas_disabled_says_how_to_enable_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    code, _, _, err = run_with_cloud_quotas(h100_stack(tmp_path), {}, monkeypatch, capsys, enabled=False)
    assert code == 1
    assert err == (
        f"trainstack quota: Cloud Quotas of project {PROJECT} ({FAMILY}): the Cloud Quotas API is not enabled in "
        f"the project: gcloud services enable cloudquotas.googleapis.com --project={PROJECT}\n"
    )


@pytest.mark.parametrize(
    ("limit", "usage", "words"),
    [
        ("abc", 0, "the limit 'abc' is not a number"),
        (8, "NaN", "the usage 'NaN' is not a finite count"),
        ("Infinity", 0, "the limit 'Infinity' is not a finite count"),
        (-1, 0, "the limit -1 is not a finite count"),
        (None, 0, "the limit None is not a number"),
    ],
    ids=["text", "nan-usage", "infinite-limit", "negative", "null"],
)
def test_a_figure_that_is_not_a_count_is_named_and_never_counted_as_room(
    limit: Any, usage: Any, words: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    region_body = {
        "kind": "compute#region",
        "name": "us-central1",
        "quotas": [
            {"metric": "CPUS", "limit": 24, "usage": 0},
            {"metric": "NVIDIA_T4_GPUS", "limit": limit, "usage": usage},
        ],
    }
    answers = [off_schema(region_body), project(GPUS_ALL_REGIONS=(4.0, 0.0))]
    code, report, _, err = run("dev", answers, monkeypatch, capsys)
    assert code == 1, err
    assert report["fits"] is False
    t4 = by_metric(report)["NVIDIA_T4_GPUS"]
    assert (t4["status"], t4["limit"], t4["available"]) == ("unreadable", None, None)
    assert t4["notes"] == [f"Google's answer for NVIDIA_T4_GPUS: {words}; not counted as room"]
    assert "Traceback" not in err


def test_an_unreadable_cloud_quotas_value_is_named(tmp_path: Path) -> None:
    from trainstack.stackmodel.quota import UnreadableFigure, quota_info_limit

    info = {"dimensionsInfos": [{"dimensions": {"gpu_family": "NVIDIA_H100"}, "details": {"value": "lots"}}]}
    with pytest.raises(UnreadableFigure, match="the value 'lots' is not a number"):
        quota_info_limit(info, "us-central1", "NVIDIA_H100")
    assert quota_info_limit({"dimensionsInfos": "not a list"}, "us-central1") is None
