"""bench/trainer_throughput.py's report: the CPU's physical peak beside the measured ceiling (bench/cpu_peak.py,
from /proc/cpuinfo text made up for CPUs this project has never run on), and which kernels the baseline ran."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _load(name: str) -> ModuleType:
    """A script of bench/, which is no package, as the module ``name``."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Dataclasses look their module up by name, and trainer_throughput imports cpu_peak.
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


cpu_peak = _load("cpu_peak")
throughput = _load("trainer_throughput")
resnet50 = _load("resnet50_throughput")
profile = _load("profile_trainer")


def cpuinfo(
    vendor: str,
    family: int,
    model: int,
    name: str,
    flags: str,
    cores: list[tuple[int, int]] | None,
    mhz: str = "2600.000",
    processors: int | None = None,
) -> str:
    """/proc/cpuinfo as x86 Linux writes it: one block per logical CPU; ``cores`` gives each
    one's (physical id, core id), None leaves the topology out as some hypervisors do."""
    count = len(cores) if cores is not None else (processors or 1)
    blocks = []
    for index in range(count):
        lines = [
            f"processor\t: {index}",
            f"vendor_id\t: {vendor}",
            f"cpu family\t: {family}",
            f"model\t\t: {model}",
            f"model name\t: {name}",
            f"cpu MHz\t\t: {mhz}",
        ]
        if cores is not None:
            lines += [f"physical id\t: {cores[index][0]}", f"core id\t\t: {cores[index][1]}"]
        lines.append(f"flags\t\t: fpu sse sse2 {flags}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


ZEN4_HIDDEN_AVX512 = cpuinfo("AuthenticAMD", 25, 17, "AMD EPYC", "avx fma avx2", [(0, 0), (0, 1)], "2596.132")
# Two vCPUs that are the two hyperthreads of one core, as Compute Engine gives them.
ZEN4_BF16_ONE_CORE = cpuinfo(
    "AuthenticAMD", 25, 17, "AMD EPYC 9B14", "avx fma avx2 avx512f avx512_bf16", [(0, 0), (0, 0)], "2600.000"
)
SAPPHIRE_RAPIDS = cpuinfo(
    "GenuineIntel",
    6,
    143,
    "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz",
    "avx fma avx2 avx512f avx512_bf16 amx_bf16 amx_tile",
    [(0, 0), (0, 0), (0, 1), (0, 1)],
    "2700.000",
)


def test_a_zen4_whose_hypervisor_hides_avx512_peaks_at_avx2_fma_and_has_no_bfloat16() -> None:
    peak = cpu_peak.physical_peak(cpu_peak.parse_cpuinfo(ZEN4_HIDDEN_AVX512))

    assert peak.cpu.physical_cores == 2
    assert peak.part.name == "AMD Zen 4"
    assert peak.float32.instructions == "AVX2 + FMA (256-bit)"
    assert peak.float32.flop_per_cycle == 32
    assert peak.float32.gflops == pytest.approx(2 * 2.596132 * 32)
    assert peak.bfloat16.flop_per_cycle is None
    assert peak.bfloat16.gflops is None
    assert "no bfloat16 instructions" in cpu_peak.describe_peak(peak.bfloat16, peak.cpu, "bfloat16")


def test_hyperthreads_of_one_core_count_once_and_zen4_bfloat16_doubles_its_512_bit_rate() -> None:
    peak = cpu_peak.physical_peak(cpu_peak.parse_cpuinfo(ZEN4_BF16_ONE_CORE))

    assert (peak.cpu.logical_cpus, peak.cpu.physical_cores) == (2, 1)
    assert peak.float32.instructions == "AVX-512 FMA"
    # Zen 4 runs a 512-bit FMA on two 256-bit halves: no more FLOP per cycle than AVX2.
    assert peak.float32.flop_per_cycle == 32
    assert peak.bfloat16.instructions.startswith("AVX512_BF16")
    assert peak.bfloat16.flop_per_cycle == 64
    assert peak.bfloat16.gflops == pytest.approx(1 * 2.6 * 64)


def test_amx_is_the_widest_bfloat16_instruction_where_a_xeon_has_it() -> None:
    peak = cpu_peak.physical_peak(cpu_peak.parse_cpuinfo(SAPPHIRE_RAPIDS))

    assert peak.cpu.physical_cores == 2
    assert peak.float32.flop_per_cycle == 64
    assert peak.bfloat16.instructions == "AMX-BF16"
    assert peak.bfloat16.flop_per_cycle == 1024
    assert peak.bfloat16.gflops == pytest.approx(2 * 2.7 * 1024)
    assert cpu_peak.describe_peak(peak.bfloat16, peak.cpu, "bfloat16").startswith(
        "bfloat16 physical peak: 5530 GFLOP/s = 2 cores x 2.700 GHz x 1024 FLOP/cycle"
    )


@pytest.mark.parametrize(
    ("name", "flop_per_cycle"),
    [
        ("Intel(R) Xeon(R) Platinum 8280 CPU @ 2.70GHz", 64),
        ("Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz", 64),
        ("Intel(R) Xeon(R) Silver 4214 CPU @ 2.20GHz", 32),
        ("Intel(R) Xeon(R) Gold 5218 CPU @ 2.30GHz", 32),
        # Compute Engine hides the model: one or two FMA units, the peak is not guessed.
        ("Intel(R) Xeon(R) CPU @ 2.20GHz", None),
    ],
)
def test_skylake_and_cascade_lake_take_their_avx512_rate_from_the_model_name(
    name: str, flop_per_cycle: int | None
) -> None:
    info = cpu_peak.parse_cpuinfo(cpuinfo("GenuineIntel", 6, 85, name, "avx fma avx2 avx512f", [(0, 0)]))

    peak = cpu_peak.physical_peak(info)

    assert peak.float32.flop_per_cycle == flop_per_cycle
    if flop_per_cycle is None:
        line = cpu_peak.describe_peak(peak.float32, info, "float32")
        assert line.startswith("float32 physical peak: unknown")
        assert "one or two 512-bit FMA units by model" in line


def test_a_part_missing_from_the_table_is_reported_unknown_not_guessed() -> None:
    info = cpu_peak.parse_cpuinfo(cpuinfo("GenuineIntel", 6, 250, "Future Xeon", "avx fma avx2 avx512f", [(0, 0)]))

    peak = cpu_peak.physical_peak(info)

    assert peak.part is None
    assert peak.float32.gflops is None
    assert "GenuineIntel family 6 model 250 (Future Xeon): not in CORE_PARTS" in cpu_peak.describe_peak(
        peak.float32, info, "float32"
    )


def test_only_the_cpus_this_process_may_run_on_count_towards_its_peak() -> None:
    # taskset -c 0,1 on a 16-core Xeon: the peak is two cores', not sixteen.
    sixteen = cpuinfo(
        "GenuineIntel",
        6,
        207,
        "Intel(R) Xeon(R) Processor",
        "avx fma avx2 avx512f amx_bf16",
        [(0, n) for n in range(16)],
    )

    pinned = cpu_peak.physical_peak(cpu_peak.parse_cpuinfo(sixteen, usable={0, 1}))
    whole = cpu_peak.physical_peak(cpu_peak.parse_cpuinfo(sixteen))

    assert (pinned.cpu.logical_cpus, pinned.cpu.physical_cores) == (2, 2)
    assert pinned.float32.gflops == pytest.approx(2 * 2.6 * 64)
    assert whole.float32.gflops == pytest.approx(16 * 2.6 * 64)


def test_the_runs_find_the_packages_the_caller_was_given_on_pythonpath(monkeypatch: pytest.MonkeyPatch) -> None:
    # TensorFlow installed with pip --target and named on PYTHONPATH must reach every run.
    monkeypatch.setenv("PYTHONPATH", "/opt/site")

    path = throughput.baseline_environment(onednn=False)["PYTHONPATH"].split(":")

    assert path == [str(BENCH.parent), "/opt/site"]


def test_without_topology_fields_every_logical_cpu_counts_as_a_core() -> None:
    info = cpu_peak.parse_cpuinfo(
        cpuinfo("AuthenticAMD", 23, 49, "AMD EPYC 7B12", "avx fma avx2", None, "2250.000", processors=4)
    )

    peak = cpu_peak.physical_peak(info)

    assert (info.logical_cpus, info.physical_cores) == (4, 4)
    assert peak.part.name == "AMD Zen 2"
    assert peak.float32.gflops == pytest.approx(4 * 2.25 * 32)


def test_the_highest_clock_listed_is_taken() -> None:
    text = ZEN4_HIDDEN_AVX512.replace("2596.132", "1500.000", 1)

    assert cpu_peak.parse_cpuinfo(text).mhz == pytest.approx(2596.132)


def test_an_unreadable_cpuinfo_gives_an_unknown_cpu_without_failing(tmp_path: Path) -> None:
    info = cpu_peak.read_cpuinfo(str(tmp_path / "missing"))

    peak = cpu_peak.physical_peak(info)

    assert (info.logical_cpus, info.physical_cores, info.mhz) == (0, 0, None)
    assert peak.float32.gflops is None
    assert peak.bfloat16.gflops is None
    assert all(line for line in cpu_peak.describe(peak))


def test_the_cpu_line_names_the_flags_that_decide_the_kernels() -> None:
    line = cpu_peak.describe_cpu(cpu_peak.parse_cpuinfo(ZEN4_BF16_ONE_CORE))

    assert line == (
        "AMD EPYC 9B14 (AuthenticAMD family 25 model 17), 1 physical cores / 2 logical CPUs usable here, 2600 MHz; "
        "flags: avx2+ fma+ avx512f+ avx512_bf16+ amx_bf16-"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [(ZEN4_HIDDEN_AVX512, False), (ZEN4_BF16_ONE_CORE, True), (SAPPHIRE_RAPIDS, True)],
)
def test_tensorflow_turns_onednn_on_by_itself_only_on_cpus_with_neural_network_instructions(
    text: str, expected: bool
) -> None:
    info = cpu_peak.parse_cpuinfo(text)

    assert cpu_peak.onednn_by_default(info) is expected
    assert f"TensorFlow's own default on this CPU: oneDNN {'on' if expected else 'off'}" in "\n".join(
        cpu_peak.describe(cpu_peak.physical_peak(info))
    )


def test_the_baseline_runs_onednn_on_request_and_the_users_environment_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)

    assert throughput.baseline_environment(onednn=True)["TF_ENABLE_ONEDNN_OPTS"] == "1"
    assert "TF_ENABLE_ONEDNN_OPTS" not in throughput.baseline_environment(onednn=False)
    assert throughput.parse_arguments(["--baseline-onednn"]).baseline_onednn is True
    assert throughput.parse_arguments([]).baseline_onednn is False


def _runs(baseline_onednn: bool) -> dict[str, dict[str, object]]:
    return {
        "baseline": {"onednn": baseline_onednn},
        "trainer, auto precision": {"onednn": True},
        "trainer, float32": {"onednn": True},
    }


def test_the_report_says_when_the_ratios_include_onednns_own_gain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    hidden = cpu_peak.parse_cpuinfo(ZEN4_HIDDEN_AVX512)

    unlike = throughput.kernels_line(_runs(False), False, hidden)
    like = throughput.kernels_line(_runs(True), True, hidden)

    assert unlike.startswith("kernels: baseline oneDNN off (TensorFlow's default on this CPU (off))")
    assert "the ratios include oneDNN's own gain" in unlike
    assert like == "kernels: baseline oneDNN on (TF_ENABLE_ONEDNN_OPTS=1 from --baseline-onednn)"


def test_the_measured_ceiling_stands_beside_the_physical_peak() -> None:
    peak = cpu_peak.physical_peak(cpu_peak.parse_cpuinfo(ZEN4_HIDDEN_AVX512))
    ceiling = {"float32": 137.0, "bfloat16": 107.0, "onednn": True}

    lines = throughput.ceiling_lines(ceiling, peak, throughput.seed_cnn_training_flops(180))

    assert lines[0] == (
        "matmul ceiling (2048 x 2048, oneDNN on): float32 137 GFLOP/s = 82% of the physical peak, bfloat16 107 GFLOP/s"
    )
    assert lines[-1] == "at the float32 physical peak: at most 315 examples/s"


def test_a_trainer_runs_saves_are_stated_as_a_share_of_its_training_against_the_target() -> None:
    result = {"epoch_save_seconds": [0.0, 0.0, 0.0, 0.3], "train_seconds": 12.0}

    line = throughput.saves_line("trainer, float32", result)

    # 0.3 s of 12 s: 2.5 %, within the 5 % the defaults may cost.
    assert line is not None
    assert line.startswith(
        "trainer, float32: its backups and epoch checkpoints held training up 0.30 s of 12.0 s, 2.5%"
    )
    assert "target <= 5% at the defaults: met" in line
    slow = throughput.saves_line("trainer, auto", {"epoch_save_seconds": [0.5, 0.4], "train_seconds": 10.0})
    assert slow is not None
    assert "NOT met" in slow
    assert throughput.saves_line("baseline", {"examples_per_second": 120.0}) is None


def test_the_ceiling_is_the_best_of_its_rounds_as_the_runs_are() -> None:
    """A burst of other work during one probe made a run 112 % of its ceiling: 78 GFLOP/s measured
    once, where the same CPU gave 150 minutes earlier."""
    rounds = [
        {"float32": 78.0, "bfloat16": 68.0, "onednn": True},
        {"float32": 150.0, "bfloat16": 66.0, "onednn": True},
    ]

    assert throughput.best_ceiling(rounds) == {
        "float32": 150.0,
        "bfloat16": 68.0,
        "onednn": True,
        "device": "CPU",
        "size": 2048,
    }


def test_a_ceiling_measured_on_a_gpu_names_it_and_is_not_set_against_the_cpus_peak() -> None:
    """On a lent H200 the probe's 2048 x 2048 matmul ran on the GPU and was printed as 166 % of the CPU's peak."""
    peak = cpu_peak.physical_peak(cpu_peak.parse_cpuinfo(ZEN4_HIDDEN_AVX512))
    ceiling = throughput.best_ceiling(
        [{"float32": 89811.0, "bfloat16": 183705.0, "onednn": True, "device": "NVIDIA H200", "size": 8192}]
    )

    lines = throughput.ceiling_lines(ceiling, peak, throughput.seed_cnn_training_flops(180))

    assert lines[0].startswith("matmul ceiling on the GPU (NVIDIA H200, 8192 x 8192): float32 89811 GFLOP/s")
    assert not any("physical peak" in line for line in lines)
    assert lines[-1] == "0.528 GFLOP per training example, so at most 348138 examples/s at the matmul ceiling"


def test_resnet50_bench_finds_nvidias_figure_by_gpu_name_and_none_where_nvidia_publishes_none() -> None:
    bench = resnet50
    a100 = bench.nvidia_figure("NVIDIA A100-SXM4-40GB")
    assert a100 is not None
    assert a100["images_per_second"] == "2375"
    v100_32 = bench.nvidia_figure("Tesla V100-SXM2-32GB")
    assert v100_32 is not None
    assert v100_32["gpu"].startswith("V100 32GB")  # the longest match wins over plain "V100"
    assert bench.nvidia_figure("NVIDIA H200") is None
    # ResNet-50 at 224 px: about 24.6 GFLOP a training image; a quarter of that at 112 px.
    assert bench.training_flops_per_image(224) == pytest.approx(24.6e9)
    assert bench.training_flops_per_image(112) == pytest.approx(24.6e9 / 4)


def test_the_profile_charges_each_op_to_the_layer_pass_or_optimizer_its_scope_names() -> None:
    """Scopes as TensorFlow's profiler names the ops of a tf-keras train function (seen in a trace of the CNN)."""
    owners = frozenset({"conv2d", "conv2d_1", "max_pooling2d", "dense", "Adam"})
    body = "while/body/_1/"
    assert profile.part_of(body + "while/sequential/conv2d_1/Relu", owners) == "conv2d_1"
    assert profile.part_of(body + "gradient_tape/while/sequential/conv2d_1/Conv2D/Conv2DBackpropFilter", owners) == (
        "conv2d_1 (backward)"
    )
    assert profile.part_of(body + "gradient_tape/while/sequential/max_pooling2d/MaxPool/MaxPoolGrad", owners) == (
        "max_pooling2d (backward)"
    )
    # Adam's update of the dense layer's kernel is Adam's time, not the layer's.
    assert profile.part_of(body + "while/Adam/ResourceApplyAdam_4", owners) == "Adam"
    assert profile.part_of(body + "while/sparse_categorical_crossentropy/Sum", owners) == "other"
