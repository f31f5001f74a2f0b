"""A TPU VM runs its job on the TensorFlow of its runtime: a stack takes a runtime that brings
TensorFlow (the newest one, 2.18, is Google's last), never a JAX/PyTorch base image, and a TPU
generation without TensorFlow (TPU7x, Ironwood) is refused for that reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from trainstack.catalog import load_catalog
from trainstack.commands.main import main


def tpu_stack(directory: Path, accelerator_type: str, runtime_version: str, zone: str = "us-central1-a") -> Path:
    path = directory / "Pulumi.team.yaml"
    path.write_text(
        "config:\n  gcp:project: my-team-project\n  gcp:region: us-central1\n"
        f"  trainstack:zone: {zone}\n"
        f"  trainstack:tpu: {{accelerator_type: {accelerator_type}, runtime_version: {runtime_version}}}\n",
        encoding="utf-8",
    )
    return path


def validate(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str]:
    code = main(["validate", "--stack-file", str(path)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize("accelerator_type", ["tpu7x-8", "tpu7x"])
def test_tpu7x_is_refused_because_it_runs_no_tensorflow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], accelerator_type: str
) -> None:
    code, output = validate(capsys, tpu_stack(tmp_path, accelerator_type, "tpu-vm-tf-2.18.0-pjrt"))
    assert code == 1
    [line] = [line.strip() for line in output.splitlines() if line.startswith("  ")]
    assert line.startswith(f"trainstack:tpu.accelerator_type: {accelerator_type} is a TPU tpu7x type")
    assert "runs no TensorFlow" in line
    assert "unknown" not in line
    assert line.endswith("TPU generations with TensorFlow: v2, v3, v4, v5e, v5p, v6e")


def test_a_runtime_without_tensorflow_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """v2-alpha-tpuv5-lite is a base image for JAX and PyTorch: the job would find no TensorFlow."""
    code, output = validate(capsys, tpu_stack(tmp_path, "v5litepod-8", "v2-alpha-tpuv5-lite"))
    assert code == 1
    [line] = [line.strip() for line in output.splitlines() if line.startswith("  ")]
    assert line.startswith("trainstack:tpu.runtime_version: v2-alpha-tpuv5-lite brings no TensorFlow")
    assert "tpu-vm-tf-2.18.0-pjrt" in line


def test_the_newest_tensorflow_with_a_tpu_runtime_is_2_18() -> None:
    """Cloud TPU's supported-patches page: TensorFlow 2.18.0 is the last with a TPU runtime."""
    catalog = load_catalog()
    versions = {r.tensorflow_version for r in catalog.tpu_runtimes.values() if r.tensorflow_version}
    assert max(versions, key=lambda v: tuple(int(p) for p in v.split("."))) == "2.18.0"
    assert "tpu7x" in catalog.tpu_generations
    assert not catalog.tensorflow_runtimes("tpu7x")


@pytest.mark.parametrize(
    ("accelerator_type", "region"),
    [("v2-8", "us-central1"), ("v3-8", "us-central1"), ("v4-8", "us-central2"), ("v5litepod-8", "us-central1"),
     ("v5p-8", "us-central1"), ("v6e-8", "us-central1")],
)  # fmt: skip
def test_init_writes_the_newest_tensorflow_runtime_for_every_generation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], accelerator_type: str, region: str
) -> None:
    """Defect: init wrote v2-alpha-tpuv5-lite (no TensorFlow) for v5e, v2-alpha-tpuv6e for v6e and
    the unverified tpu-vm-tf-2.18.0-pjrt-v5p-and-below for v2: the name that sorted last."""
    out = tmp_path / "Pulumi.team.yaml"
    code = main(["init", "--stack", "team", "--tpu", accelerator_type, "--region", region, "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    tpu = yaml.safe_load(out.read_text())["config"]["trainstack:tpu"]
    assert tpu["runtime_version"] == "tpu-vm-tf-2.18.0-pjrt"


def test_init_refuses_tpu7x_naming_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "Pulumi.team.yaml"
    assert main(["init", "--stack", "team", "--tpu", "tpu7x-8", "--out", str(out)]) == 2
    assert not out.exists()
    assert "TPU tpu7x runs no TensorFlow; TPU generations with TensorFlow: v2, v3" in capsys.readouterr().err


def test_tpus_lists_only_tensorflow_runtimes_and_generations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tpus", "--json"]) == 0
    tpus = {t["generation"]: t for t in json.loads(capsys.readouterr().out)["tpus"]}
    assert "tpu7x" not in tpus
    catalog = load_catalog()
    for listing in tpus.values():
        assert listing["runtimes"]
        assert all(catalog.tpu_runtimes[r].tensorflow_version for r in listing["runtimes"])
