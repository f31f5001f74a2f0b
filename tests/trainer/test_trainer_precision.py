"""--precision auto (rules for GPUs and TPUs, a measurement for CPUs) and the CPU kernels the trainer asks for."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from trainer.precision import (
    FLOAT32,
    MIXED_BFLOAT16,
    MIXED_FLOAT16,
    CpuProbe,
    auto_precision,
    cpu_has_bf16,
    probe_cpu,
    probe_flops,
)
from trainstack_contract import MIRRORED, MULTI_WORKER_MIRRORED, ONE_DEVICE, TPU

BF16_SLOWER = CpuProbe(float32_gflops=255.0, bfloat16_gflops=171.0)  # this project's CI CPU
BF16_FASTER = CpuProbe(float32_gflops=210.0, bfloat16_gflops=420.0)  # a CPU with fast bf16 kernels
BF16_BARELY_FASTER = CpuProbe(float32_gflops=200.0, bfloat16_gflops=220.0)


def never_probed() -> CpuProbe:
    raise AssertionError("the probe ran where a rule decides")


def test_accelerators_follow_their_rules_without_measuring() -> None:
    assert auto_precision(TPU, 0, probe=never_probed) == MIXED_BFLOAT16
    assert auto_precision(MIRRORED, 2, probe=never_probed) == MIXED_FLOAT16
    assert auto_precision(ONE_DEVICE, 1, cpu_bf16=lambda: True, probe=never_probed) == MIXED_FLOAT16


@pytest.mark.parametrize(
    ("probe", "expected"),
    [(BF16_SLOWER, FLOAT32), (BF16_BARELY_FASTER, FLOAT32), (BF16_FASTER, MIXED_BFLOAT16)],
)
def test_a_cpu_with_bf16_instructions_takes_bfloat16_only_when_measured_clearly_faster(
    probe: CpuProbe, expected: str
) -> None:
    for kind in (ONE_DEVICE, MULTI_WORKER_MIRRORED):
        assert auto_precision(kind, 0, cpu_bf16=lambda: True, probe=lambda: probe) == expected


def test_a_cpu_without_bf16_instructions_stays_in_float32_without_measuring() -> None:
    assert auto_precision(ONE_DEVICE, 0, cpu_bf16=lambda: False, probe=never_probed) == FLOAT32


def test_the_choice_is_logged_with_the_probes_figures(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="trainer.precision"):
        auto_precision(ONE_DEVICE, 0, cpu_bf16=lambda: True, probe=lambda: BF16_SLOWER)
    assert "precision float32 on this CPU, measured: float32 255 GFLOP/s, bfloat16 171 GFLOP/s (0.67x)" in caplog.text


def test_bf16_detection_reads_cpu_flags(tmp_path: Path) -> None:
    with_bf16 = tmp_path / "bf16"
    with_bf16.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 avx512vl\n")
    with_amx = tmp_path / "amx"
    with_amx.write_text("processor\t: 0\nflags\t\t: fpu avx512f amx_bf16 amx_tile\n")
    without = tmp_path / "plain"
    without.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f\n")
    assert cpu_has_bf16(str(with_bf16))
    assert cpu_has_bf16(str(with_amx))
    assert not cpu_has_bf16(str(without))
    assert not cpu_has_bf16(str(tmp_path / "missing"))


@pytest.mark.slow
def test_the_probe_measures_both_precisions_once_per_process() -> None:
    probe_cpu.cache_clear()
    first = probe_cpu()
    assert first.float32_gflops > 0
    assert first.bfloat16_gflops > 0
    assert probe_cpu() is first
    assert probe_cpu.cache_info().misses == 1
    assert probe_flops() == 2 * 8 * 45 * 45 * 32 * 64 * 9


def test_the_trainer_asks_for_onednn_before_tensorflow_loads_unless_the_user_said_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainer import task
    from trainer.kernels import ONEDNN_SWITCH

    finished = tmp_path / "job"
    finished.mkdir()
    (finished / "metrics.json").write_text(json.dumps({"status": "finished"}))
    arguments = ["--job-dir", str(finished), "--data", "synthetic"]

    monkeypatch.delenv(ONEDNN_SWITCH, raising=False)
    assert task.main(arguments) == 0
    assert os.environ[ONEDNN_SWITCH] == "1"

    monkeypatch.setenv(ONEDNN_SWITCH, "0")
    assert task.main(arguments) == 0
    assert os.environ[ONEDNN_SWITCH] == "0"
