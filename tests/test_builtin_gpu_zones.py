"""Machine types whose GPUs are built in (A2, A3, A4, G2) are checked against the zones that
offer them, as attached N1 GPUs are: in `validate` and `plan` for every role and the notebook,
in the zone `init` picks, and in what `gpus --zone` lists. Defect: each of the five machines
below validated and planned in a zone that lacks its GPU; `pulumi up` would have failed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from trainstack.catalog import load_catalog
from trainstack.commands.init import InitProblem, gpu_machine, render
from trainstack.commands.main import main

# (machine type, zone that lacks it, its GPUs as the message names them, the zones of the region that offer it)
NOT_IN_ZONE = [
    ("a3-ultragpu-8g", "us-central1-a", "8 x nvidia-h200-141gb", "us-central1-b"),
    ("a3-highgpu-8g", "us-central1-f", "8 x nvidia-h100-80gb", "us-central1-a, us-central1-b, us-central1-c"),
    ("g2-standard-8", "us-central1-f", "1 x nvidia-l4", "us-central1-a, us-central1-b, us-central1-c"),
    ("a2-ultragpu-1g", "us-central1-b", "1 x nvidia-a100-80gb", "us-central1-a, us-central1-c"),
    ("a2-highgpu-1g", "us-east1-d", "1 x nvidia-tesla-a100", "us-east1-b"),
]
# The same machine types in a zone of the source's rows for them (a3-ultragpu-8g outside us-central1-b).
IN_ZONE = [
    ("a3-ultragpu-8g", "us-west1-c"),
    ("a3-highgpu-8g", "us-central1-c"),
    ("g2-standard-8", "us-central1-b"),
    ("a2-ultragpu-1g", "us-central1-c"),
    ("a2-highgpu-1g", "us-east1-b"),
    ("a4-highgpu-8g", "us-central1-b"),
]


# What validate says of g2-standard-8 (its L4 built in) in us-central1-f.
L4_NOT_IN_CENTRAL1_F = (
    "g2-standard-8 (1 x nvidia-l4) is not offered in zone us-central1-f; "
    "zones in us-central1 that offer it: us-central1-a, us-central1-b, us-central1-c"
)


def stack_file(directory: Path, zone: str, body: str, name: str = "team") -> Path:
    """A stack file as a user writes it, outside the project (pytest's tmp_path)."""
    region = zone.rsplit("-", 1)[0]
    path = directory / f"Pulumi.{name}.yaml"
    path.write_text(
        f"config:\n  gcp:project: my-team-project\n  gcp:region: {region}\n  trainstack:zone: {zone}\n{body}",
        encoding="utf-8",
    )
    return path


def cluster(*nodes: str) -> str:
    """A trainstack:cluster body of these lines ("chief: {...}", "strategy: ...")."""
    return "  trainstack:cluster:\n" + "".join(f"    {node}\n" for node in nodes)


def chief_only(machine_type: str) -> str:
    # Spot: a3-ultragpu-8g and a4-highgpu-8g cannot be created on demand.
    return cluster(f"chief: {{machine_type: {machine_type}, spot: true}}", "max_run_hours: 4") + (
        "  trainstack:job: {name: zone_check, epochs: 1}\n"
    )


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def validate(tmp_path: Path, capsys: pytest.CaptureFixture[str], zone: str, body: str) -> tuple[int, str]:
    """`trainstack validate` of a stack file in ``zone`` with this body."""
    return run(capsys, "validate", "--stack-file", str(stack_file(tmp_path, zone, body)))


def problem_lines(output: str, key: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.strip().startswith(f"{key}:")]


@pytest.mark.parametrize(("machine_type", "zone", "gpus", "offering"), NOT_IN_ZONE, ids=[c[0] for c in NOT_IN_ZONE])
def test_a_machine_with_built_in_gpus_in_a_zone_lacking_them_is_refused_naming_the_zone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], machine_type: str, zone: str, gpus: str, offering: str
) -> None:
    path = stack_file(tmp_path, zone, chief_only(machine_type))
    region = zone.rsplit("-", 1)[0]
    for command in ("validate", "plan"):
        code, output = run(capsys, command, "--stack-file", str(path))
        assert code == 1, output
        assert problem_lines(output, "trainstack:cluster.chief.machine_type") == [
            f"trainstack:cluster.chief.machine_type: {machine_type} ({gpus}) is not offered in zone {zone}; "
            f"zones in {region} that offer it: {offering}"
        ], output
        assert "Traceback" not in output


@pytest.mark.parametrize(("machine_type", "zone"), IN_ZONE, ids=[c[0] for c in IN_ZONE])
def test_the_same_machines_in_a_zone_that_offers_them_are_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], machine_type: str, zone: str
) -> None:
    code, output = validate(tmp_path, capsys, zone, chief_only(machine_type))
    assert code == 0, output


def test_a_machine_type_is_checked_against_its_own_zones_not_only_its_gpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """us-east1-b offers the A100 on a2-highgpu-*, not a2-megagpu-16g (SkyPilot catalog rows)."""
    code, output = validate(tmp_path, capsys, "us-east1-b", chief_only("a2-megagpu-16g"))
    assert code == 1
    [line] = problem_lines(output, "trainstack:cluster.chief.machine_type")
    assert (
        "a2-megagpu-16g (16 x nvidia-tesla-a100) is not offered in zone us-east1-b; no zone of us-east1 offers it"
        in line
    )
    assert "us-central1-a" in line, "the zones that do offer it are named"


def test_declaring_the_built_in_gpus_too_gives_one_problem_not_two(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = cluster("chief: {machine_type: a2-highgpu-1g, accelerator: {type: nvidia-tesla-a100, count: 1}}")
    code, output = validate(tmp_path, capsys, "us-east1-d", body)
    assert code == 1
    assert [line for line in output.splitlines() if "not offered in zone" in line] == [
        "  trainstack:cluster.chief.machine_type: a2-highgpu-1g (1 x nvidia-tesla-a100) is not offered in zone "
        "us-east1-d; zones in us-east1 that offer it: us-east1-b"
    ], output


def test_workers_and_parameter_servers_are_checked_as_the_chief_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # us-central1-f offers the T4 (the chief's) but not the L4 of g2-standard-8.
    body = cluster(
        "chief: {machine_type: n1-standard-8, accelerator: {type: nvidia-tesla-t4, count: 1}}",
        "workers: {count: 2, machine_type: g2-standard-8, spot: true}",
    )
    code, output = validate(tmp_path, capsys, "us-central1-f", body)
    assert code == 1
    workers = "trainstack:cluster.workers.machine_type"
    assert problem_lines(output, workers) == [f"{workers}: {L4_NOT_IN_CENTRAL1_F}"], output
    assert not problem_lines(output, "trainstack:cluster.chief.machine_type")
    # Built-in GPUs count among the cluster's GPU types: the zones that offer both are named.
    assert problem_lines(output, "trainstack:zone") == [
        "trainstack:zone: all GPU types of one cluster (nvidia-l4, nvidia-tesla-t4) must be offered in its zone "
        "us-central1-f; zones in us-central1 offering all of them: us-central1-a, us-central1-b, us-central1-c"
    ], output

    body = cluster(
        "chief: {machine_type: n1-standard-8}",
        "workers: {count: 1, machine_type: n1-standard-8}",
        "parameter_servers: {count: 1, machine_type: a2-highgpu-1g}",
        "strategy: parameter_server",
    )
    code, output = validate(tmp_path, capsys, "us-east1-d", body)
    assert code == 1
    lines = problem_lines(output, "trainstack:cluster.parameter_servers.machine_type")
    assert any("a2-highgpu-1g (1 x nvidia-tesla-a100) is not offered in zone us-east1-d" in line for line in lines), (
        output
    )


def test_a_notebook_with_built_in_gpus_is_checked_against_its_zone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = "  trainstack:notebook: {machine_type: g2-standard-8}\n"
    code, output = validate(tmp_path, capsys, "us-central1-f", body)
    assert code == 1
    notebook = "trainstack:notebook.machine_type"
    assert problem_lines(output, notebook) == [f"{notebook}: {L4_NOT_IN_CENTRAL1_F}"], output
    code, output = validate(tmp_path, capsys, "us-central1-a", body)
    assert code == 0, output


def init_args(gpu: str, region: str, notebook: bool = False) -> argparse.Namespace:
    return argparse.Namespace(
        stack="team", gpu=gpu, tpu=None, workers=0, spot=False, notebook=notebook, project=None, region=region
    )


def test_init_never_picks_a_zone_that_lacks_the_machine_type() -> None:
    """Every built-in GPU count init offers, in every region: the zone it writes offers the
    machine type it writes, or init refuses (exit 2) naming the region."""
    catalog = load_catalog()
    checked = 0
    for gpu in sorted({m.builtin_gpu for m in catalog.machine_types.values() if m.builtin_gpu}):
        for count in sorted({m.builtin_gpu_count for m in catalog.machine_types.values() if m.builtin_gpu == gpu}):
            try:
                machine_type = gpu_machine(gpu, count, catalog).machine_type
            except InitProblem:
                continue  # only Spot or reserved (a3-ultragpu-8g): not a choice init makes
            for region in sorted(catalog.regions):
                for notebook in (False, True):
                    try:
                        text = render(init_args(f"{gpu}:{count}", region, notebook), catalog)
                    except InitProblem as problem:
                        refusal = str(problem)
                    else:
                        refusal = None
                    if refusal is not None:
                        assert f"--region {region}: no zone of it offers {machine_type}" in refusal
                        assert not catalog.machine_zones(machine_type) & set(catalog.zones_of(region))
                        continue
                    zone = next(line.split()[1] for line in text.splitlines() if "trainstack:zone:" in line)
                    assert zone in catalog.machine_zones(machine_type), (gpu, count, region, zone)
                    checked += 1
    assert checked > 50


def test_init_refuses_a_region_whose_a100_zones_lack_the_16_gpu_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "Pulumi.team.yaml"
    code, output = run(
        capsys, "init", "--stack", "team", "--gpu", "nvidia-tesla-a100:16", "--region", "us-east1", "--out", str(out)
    )
    assert code == 2, output
    assert not out.exists(), output
    assert "--region us-east1: no zone of it offers a2-megagpu-16g (16 x nvidia-tesla-a100)" in output


def gpus_listed(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, dict]:
    assert main(["gpus", "--json", *args]) == 0
    return {g["gpu"]: g for g in json.loads(capsys.readouterr().out)["gpus"]}


@pytest.mark.parametrize("zone", ["us-central1-a", "us-central1-f", "us-east1-b", "us-east1-d", "europe-west4-c"])
def test_gpus_in_a_zone_lists_no_machine_type_the_zone_lacks(capsys: pytest.CaptureFixture[str], zone: str) -> None:
    catalog = load_catalog()
    for gpu, listing in gpus_listed(capsys, "--zone", zone).items():
        machines = {m["machine_type"] for m in listing["machines"]}
        if catalog.gpus[gpu].attach == "builtin":
            assert machines == {
                m.name
                for m in catalog.machine_types.values()
                if m.builtin_gpu == gpu and zone in catalog.machine_zones(m.name)
            }, gpu
        if not listing["zones"]:
            assert machines == set(), gpu


def test_gpus_in_a_zone_says_which_gpus_have_no_machine_there(capsys: pytest.CaptureFixture[str]) -> None:
    listed = gpus_listed(capsys, "--zone", "us-central1-f")
    assert listed["nvidia-h100-80gb"]["machines"] == []
    assert listed["nvidia-l4"]["machines"] == []
    assert {m["machine_type"] for m in gpus_listed(capsys, "--zone", "us-east1-b")["nvidia-tesla-a100"]["machines"]} == {
        "a2-highgpu-1g", "a2-highgpu-2g", "a2-highgpu-4g", "a2-highgpu-8g",
    }  # fmt: skip
    assert main(["gpus", "--zone", "us-central1-f"]) == 0
    lines = capsys.readouterr().out.splitlines()
    l4 = next(i for i, line in enumerate(lines) if line.startswith("nvidia-l4 "))
    assert "not offered in us-central1-f" in lines[l4]
    assert lines[l4 + 1].strip() == "no machine type with it in us-central1-f"
    assert not any("a3-highgpu-8g" in line or "g2-standard-8" in line for line in lines)


@pytest.mark.parametrize(
    ("region", "machine_type", "zone", "notice"),
    [
        # us-east4-a, the region's first zone, has no A100 80 GB machine; us-east4-c has.
        ("us-east4", "a2-ultragpu-1g", "us-east4-c", "the first zone of us-east4 that offers a2-ultragpu-1g"),
        ("us-east1", "a2-megagpu-16g", "us-east1-b", "no zone of us-east1 in the catalog offers a2-megagpu-16g"),
    ],
)
def test_import_picks_a_zone_by_the_machine_types_own_zones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], region: str, machine_type: str, zone: str, notice: str
) -> None:
    """An imported job whose machine has built-in GPUs gets a zone that offers that machine,
    or, where its region has none, an existing zone and the problem named."""
    source = tmp_path / "config.yaml"
    source.write_text(f"trainingInput:\n  scaleTier: CUSTOM\n  region: {region}\n  masterType: {machine_type}\n")
    out = tmp_path / "Pulumi.team.yaml"
    code, output = run(capsys, "import", str(source), "--stack", "team", "--project", "my-project", "--out", str(out))
    assert notice in output
    assert f"trainstack:zone: {zone}" in out.read_text()
    if zone == "us-east1-b":
        assert code == 1
        assert "trainstack:cluster.chief.machine_type: a2-megagpu-16g" in output
    else:
        assert code == 0, output
