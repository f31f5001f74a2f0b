"""The Keras precision policy for ``--precision auto``: rules for accelerators, a measurement for CPUs.

GPUs and TPUs have documented half-precision units, so their policy is a rule
(``ACCELERATOR_RULES``, with sources). A CPU is different: whether bfloat16 pays
depends on the exact part and on oneDNN's kernels for it. A CPU that lists
``avx512_bf16`` can still run bfloat16 at two thirds of float32's rate (measured
on this project's CI machines: 171 against 255 GFLOP/s), so the CPU's choice is
made by timing the same convolution in both precisions (``probe_cpu``), and
bfloat16 is taken only when it is clearly faster.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable

from trainstack_contract import TPU

log = logging.getLogger(__name__)

FLOAT32 = "float32"
MIXED_FLOAT16 = "mixed_float16"
MIXED_BFLOAT16 = "mixed_bfloat16"


@dataclasses.dataclass(frozen=True)
class AcceleratorRule:
    accelerator: str
    precision: str
    why: str
    source: str


ACCELERATOR_RULES = (
    AcceleratorRule(
        accelerator="tpu",
        precision=MIXED_BFLOAT16,
        why="TPU matrix units compute in bfloat16; float16 is not supported there",
        source="https://www.tensorflow.org/guide/mixed_precision (read 2026-11-24)",
    ),
    AcceleratorRule(
        accelerator="gpu",
        precision=MIXED_FLOAT16,
        why=(
            "NVIDIA GPUs run float16 faster than float32; Tensor Cores (compute capability 7.0 "
            "and up: V100, T4, A100, L4, H100) gain most, older GPUs still save memory bandwidth"
        ),
        source="https://www.tensorflow.org/guide/mixed_precision (read 2026-11-24)",
    ),
)

# bfloat16 must beat float32 by this factor before a CPU trains in it: the probe's op
# is one convolution, while a training step adds casts to and from float32 around
# every layer, which eat a small lead.
BFLOAT16_MARGIN = 1.2


@dataclasses.dataclass(frozen=True)
class CpuProbe:
    """The same convolution timed in both precisions, as GFLOP/s (best of a few runs)."""

    float32_gflops: float
    bfloat16_gflops: float

    @property
    def bfloat16_speedup(self) -> float:
        return self.bfloat16_gflops / self.float32_gflops if self.float32_gflops > 0 else 0.0

    def describe(self) -> str:
        return (
            f"float32 {self.float32_gflops:.0f} GFLOP/s, bfloat16 {self.bfloat16_gflops:.0f} GFLOP/s "
            f"({self.bfloat16_speedup:.2f}x)"
        )


# A 3x3 convolution the size of the flowers CNN's middle layer (and of ResNet's
# early blocks): what image models spend their training steps on. 8 x 45 x 45 x 64
# outputs over 32 input channels is 0.15 GFLOP, a few milliseconds a run.
PROBE_SHAPE = (8, 45, 45, 32)
PROBE_FILTERS = 64
PROBE_RUNS = 5


def probe_flops() -> int:
    batch, height, width, channels = PROBE_SHAPE
    return 2 * batch * height * width * channels * PROBE_FILTERS * 3 * 3


def _time_convolution(dtype_name: str) -> float:
    """GFLOP/s of the probe convolution in ``dtype_name``: best of ``PROBE_RUNS`` after one warm-up."""
    import tensorflow as tf

    dtype = tf.as_dtype(dtype_name)
    generator = tf.random.Generator.from_seed(0)
    images = tf.cast(generator.normal(PROBE_SHAPE), dtype)
    kernel = tf.cast(generator.normal((3, 3, PROBE_SHAPE[-1], PROBE_FILTERS)), dtype)

    @tf.function(jit_compile=False)  # type: ignore[untyped-decorator]  # TensorFlow ships no type information
    def convolve() -> tf.Tensor:
        return tf.nn.conv2d(images, kernel, strides=1, padding="SAME")

    convolve().numpy()  # traces, and lets oneDNN pick and cache its kernel
    best = float("inf")
    for _ in range(PROBE_RUNS):
        started = time.perf_counter()
        convolve().numpy()
        best = min(best, time.perf_counter() - started)
    return probe_flops() / best / 1e9


@functools.lru_cache(maxsize=1)
def probe_cpu() -> CpuProbe:
    """Times the probe once per process (about a tenth of a second on a 2-core VM)."""
    return CpuProbe(float32_gflops=_time_convolution("float32"), bfloat16_gflops=_time_convolution("bfloat16"))


def cpu_precision(probe: CpuProbe) -> str:
    """bfloat16 only when the probe measured it clearly faster than float32."""
    return MIXED_BFLOAT16 if probe.bfloat16_speedup >= BFLOAT16_MARGIN else FLOAT32


def accelerator_rule(accelerator: str) -> AcceleratorRule:
    return next(rule for rule in ACCELERATOR_RULES if rule.accelerator == accelerator)


def cpu_has_bf16(cpuinfo_path: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU lists bfloat16 instructions (AVX512_BF16 or AMX). Without them oneDNN
    converts bfloat16 to float32 to compute, which cannot be clearly faster than float32
    itself (0.97x measured on an AMD EPYC without them), so there is nothing to measure."""
    try:
        with open(cpuinfo_path, encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


def auto_precision(
    kind: str,
    num_gpus: int,
    cpu_bf16: Callable[[], bool] = cpu_has_bf16,
    probe: Callable[[], CpuProbe] = probe_cpu,
) -> str:
    """The policy ``--precision auto`` trains in, with the reason logged.

    Must run after the strategy is built: the probe runs TensorFlow ops, and
    MultiWorkerMirroredStrategy has to configure TensorFlow before any op runs. This is one
    node's own choice: workers that chose differently cannot train together (their
    all-reduces differ in shape), so the job trains with the chief's choice
    (:mod:`trainer.job_settings`).
    """
    if kind == TPU or num_gpus > 0:
        rule = accelerator_rule("tpu" if kind == TPU else "gpu")
        log.info("precision %s: %s (%s)", rule.precision, rule.why, rule.source)
        return rule.precision
    if not cpu_bf16():
        log.info("precision %s: this CPU has no bfloat16 instructions (avx512_bf16, amx_bf16)", FLOAT32)
        return FLOAT32
    measured = probe()
    choice = cpu_precision(measured)
    log.info(
        "precision %s on this CPU, measured: %s; bfloat16 is taken at %.1fx or more",
        choice,
        measured.describe(),
        BFLOAT16_MARGIN,
    )
    return choice
