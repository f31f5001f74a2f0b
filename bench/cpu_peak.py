"""This CPU's physical peak: cores x clock x FLOP per cycle of its widest float32 and bfloat16 instructions.

A benchmark's figures mean little without the CPU they were measured on, and a
measured ceiling (``bench/trainer_throughput.py``'s matmul) means more beside what
the silicon could do at most. Everything here reads ``/proc/cpuinfo``'s text, so the
arithmetic is tested with made-up text for CPUs this project has never run on.

FLOP per cycle is a property of the core, not of the instruction set: two CPUs
that list the same flags can differ by 2x (a Xeon Silver has one 512-bit FMA unit,
a Xeon Platinum two; Zen 4 runs a 512-bit instruction on two 256-bit halves).
``CORE_PARTS`` holds the parts whose figures are known, with sources; for any
other part the peak is reported as unknown rather than guessed.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Collection, Iterable

INTEL = "GenuineIntel"
AMD = "AuthenticAMD"

# The flags that decide which kernels oneDNN can use, in the order they are printed.
RELEVANT_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16")

NONE = "none"  # Peak.instructions of a precision this CPU has no instructions for
CLOCK_SOURCE = "'cpu MHz' of /proc/cpuinfo (the clock the kernel reports now; boost clocks can run higher)"


@dataclasses.dataclass(frozen=True)
class CpuInfo:
    """What /proc/cpuinfo says about the processors this process can see."""

    vendor: str
    family: int | None
    model: int | None
    model_name: str
    flags: frozenset[str]
    logical_cpus: int
    physical_cores: int
    mhz: float | None


def _fields(block: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in block.splitlines():
        key, separator, value = line.partition(":")
        if separator:
            fields.setdefault(key.strip(), value.strip())
    return fields


def _integer(text: str | None) -> int | None:
    return int(text) if text is not None and re.fullmatch(r"[0-9]+", text) else None


def _megahertz(text: str | None) -> float | None:
    return float(text) if text is not None and re.fullmatch(r"[0-9]+(\.[0-9]+)?", text) else None


def parse_cpuinfo(text: str, usable: Collection[int] | None = None) -> CpuInfo:
    """The x86 ``/proc/cpuinfo`` text: one block per logical CPU, separated by blank lines.

    Physical cores are the distinct (physical id, core id) pairs: hyperthreads of one core
    share its FMA units, so they add nothing to the peak. Without those fields (some
    hypervisors leave them out) every logical CPU counts as a core. The clock is the
    highest ``cpu MHz`` listed. ``usable`` keeps only the logical CPUs of those numbers: the
    ones this process may run on (``taskset``, a container's cpuset), whose cores alone count
    towards its peak."""
    blocks = [_fields(block) for block in re.split(r"\n\s*\n", text) if "processor" in _fields(block)]
    if usable is not None:
        blocks = [block for block in blocks if _integer(block.get("processor")) in usable]
    first = blocks[0] if blocks else {}
    cores = {(block.get("physical id"), block.get("core id")) for block in blocks}
    has_topology = all(block.get("physical id") is not None and block.get("core id") is not None for block in blocks)
    clocks = [mhz for mhz in (_megahertz(block.get("cpu MHz")) for block in blocks) if mhz is not None]
    return CpuInfo(
        vendor=first.get("vendor_id", "unknown"),
        family=_integer(first.get("cpu family")),
        model=_integer(first.get("model")),
        model_name=first.get("model name", "unknown"),
        flags=frozenset(first.get("flags", "").split()),
        logical_cpus=len(blocks),
        physical_cores=len(cores) if blocks and has_topology else len(blocks),
        mhz=max(clocks) if clocks else None,
    )


def usable_cpus() -> frozenset[int]:
    """The logical CPUs this process may run on; TensorFlow sizes its thread pools by them."""
    return frozenset(os.sched_getaffinity(0))


def read_cpuinfo(path: str = "/proc/cpuinfo") -> CpuInfo:
    """The CPUs this process may run on; an unreadable file gives an unknown CPU of zero cores."""
    try:
        with open(path, encoding="utf-8") as handle:
            return parse_cpuinfo(handle.read(), usable_cpus())
    except OSError:
        return parse_cpuinfo("")


@dataclasses.dataclass(frozen=True)
class CorePart:
    """FLOP per cycle of one core of a CPU family, per instruction set.

    ``fma256``: float32 with 256-bit FMA (AVX2 + FMA); ``fma512``: float32 with AVX-512
    FMA, None where the part has none or where it differs between models of the part;
    ``amx_bf16``: bfloat16 through AMX tiles. bfloat16 through AVX512_BF16 is derived: its
    dot product (VDPBF16PS) does two multiply-adds in every 32-bit lane where an FMA does
    one, so it counts twice ``fma512``, assuming it issues at the FMA rate."""

    name: str
    vendor: str
    family: int
    models: tuple[range, ...]
    fma256: int
    fma512: int | None
    amx_bf16: int | None
    source: str
    note: str = ""
    # Where the number of 512-bit FMA units differs between models of the part: a pattern of
    # the model name (re.fullmatch) and the FLOP per cycle it means.
    fma512_by_name: tuple[tuple[str, int], ...] = ()

    def matches(self, info: CpuInfo) -> bool:
        return (
            info.vendor == self.vendor
            and info.family == self.family
            and info.model is not None
            and any(info.model in models for models in self.models)
        )


INTEL_OPTIMIZATION_MANUAL = (
    "Intel 64 and IA-32 Architectures Optimization Reference Manual, Haswell and Skylake server chapters: "
    "two FMA units per core (read 2026-11-25)"
)
INTEL_AMX = (
    "Intel, Accelerate AI Workloads with Intel AMX, p. 4: 1,024 BF16 operations per cycle with AMX "
    "against 64 FP32 with AVX-512, per core (cited by https://pytorch.org/tutorials/recipes/amx.html, "
    "read 2026-11-25)"
)
AMD_ZEN_AVX512 = (
    "http://numberworld.org/blogs/2024_8_7_zen5_avx512_teardown (read 2026-11-25): Zen 4 runs 512-bit "
    "instructions on its 256-bit units, Zen 5 desktop and server cores have 512-bit units, Zen 5 mobile does not"
)
AMD_OPTIMIZATION_GUIDE = (
    "AMD Software Optimization Guides for Family 17h and 19h processors: two FMA pipes per core, "
    "128 bits wide on Zen and Zen+, 256 bits from Zen 2 on (read 2026-11-25)"
)

# Each row: the cores of one microarchitecture, by vendor, family and model (decimal, as
# /proc/cpuinfo prints them). FLOP per cycle = FMA units x float32 lanes x 2.
CORE_PARTS = (
    CorePart(
        "Intel Haswell/Broadwell",
        INTEL,
        6,
        (range(60, 61), range(63, 64), range(69, 72), range(79, 80), range(86, 87)),
        32,
        None,
        None,
        INTEL_OPTIMIZATION_MANUAL,
    ),
    CorePart(
        "Intel Skylake-SP/Cascade Lake/Cooper Lake",
        INTEL,
        6,
        (range(85, 86),),
        32,
        None,
        None,
        INTEL_OPTIMIZATION_MANUAL,
        note="one or two 512-bit FMA units by model (Platinum and Gold 6000: two; Silver, Bronze, Gold 5000: one)",
        fma512_by_name=(
            (r".*\b(Platinum|Gold 6[0-9]{3}[A-Z]*)\b.*", 64),
            (r".*\b(Silver|Bronze|Gold 5[0-9]{3}[A-Z]*)\b.*", 32),
        ),
    ),
    CorePart("Intel Ice Lake-SP", INTEL, 6, (range(106, 107), range(108, 109)), 32, 64, None, INTEL_AMX),
    CorePart(
        "Intel Sapphire/Emerald/Granite Rapids",
        INTEL,
        6,
        (range(143, 144), range(173, 174), range(207, 208)),
        32,
        64,
        1024,
        INTEL_AMX,
    ),
    CorePart("AMD Zen/Zen+", AMD, 23, (range(0x00, 0x30),), 16, None, None, AMD_OPTIMIZATION_GUIDE),
    CorePart("AMD Zen 2", AMD, 23, (range(0x30, 0x100),), 32, None, None, AMD_OPTIMIZATION_GUIDE),
    CorePart("AMD Zen 3", AMD, 25, (range(0x00, 0x10), range(0x20, 0x60)), 32, None, None, AMD_OPTIMIZATION_GUIDE),
    CorePart(
        "AMD Zen 4", AMD, 25, (range(0x10, 0x20), range(0x60, 0x80), range(0xA0, 0xB0)), 32, 32, None, AMD_ZEN_AVX512
    ),
    CorePart(
        "AMD Zen 5 (server, desktop)", AMD, 26, (range(0x00, 0x20), range(0x40, 0x50)), 32, 64, None, AMD_ZEN_AVX512
    ),
)


def find_part(info: CpuInfo, parts: Iterable[CorePart] = CORE_PARTS) -> CorePart | None:
    return next((part for part in parts if part.matches(info)), None)


@dataclasses.dataclass(frozen=True)
class Peak:
    """One precision's physical peak: None where a figure is unknown, with the reason in ``why``."""

    instructions: str
    flop_per_cycle: int | None
    gflops: float | None
    why: str


@dataclasses.dataclass(frozen=True)
class PhysicalPeak:
    cpu: CpuInfo
    part: CorePart | None
    float32: Peak
    bfloat16: Peak


def _gflops(info: CpuInfo, flop_per_cycle: int | None) -> float | None:
    if flop_per_cycle is None or info.mhz is None or info.physical_cores < 1:
        return None
    return info.physical_cores * info.mhz / 1000 * flop_per_cycle


def _fma512(info: CpuInfo, part: CorePart) -> int | None:
    if part.fma512 is not None:
        return part.fma512
    return next((flop for pattern, flop in part.fma512_by_name if re.fullmatch(pattern, info.model_name)), None)


def _float32(info: CpuInfo, part: CorePart | None) -> Peak:
    if "avx512f" in info.flags:
        instructions = "AVX-512 FMA"
    elif {"avx2", "fma"} <= info.flags:
        instructions = "AVX2 + FMA (256-bit)"
    else:
        return Peak(NONE, None, None, "neither avx512f nor avx2 with fma is listed; no figure is kept for older SIMD")
    if part is None:
        return Peak(instructions, None, None, f"FLOP per cycle unknown for {_identity(info)}: not in CORE_PARTS")
    per_cycle = _fma512(info, part) if instructions == "AVX-512 FMA" else part.fma256
    if per_cycle is None:
        return Peak(instructions, None, None, f"{part.name}: {part.note or 'AVX-512 FMA rate unknown'}")
    return Peak(instructions, per_cycle, _gflops(info, per_cycle), part.name)


def _bfloat16(info: CpuInfo, part: CorePart | None) -> Peak:
    if "amx_bf16" in info.flags:
        instructions = "AMX-BF16"
    elif "avx512_bf16" in info.flags:
        instructions = "AVX512_BF16 (VDPBF16PS)"
    else:
        return Peak(NONE, None, None, "no bfloat16 instructions (neither avx512_bf16 nor amx_bf16 is listed)")
    if part is None:
        return Peak(instructions, None, None, f"FLOP per cycle unknown for {_identity(info)}: not in CORE_PARTS")
    fma512 = _fma512(info, part)
    per_cycle = part.amx_bf16 if instructions == "AMX-BF16" else (2 * fma512 if fma512 is not None else None)
    if per_cycle is None:
        return Peak(instructions, None, None, f"{part.name}: {part.note or 'bfloat16 rate unknown'}")
    return Peak(instructions, per_cycle, _gflops(info, per_cycle), part.name)


def _identity(info: CpuInfo) -> str:
    return f"{info.vendor} family {info.family} model {info.model} ({info.model_name})"


def physical_peak(info: CpuInfo, parts: Iterable[CorePart] = CORE_PARTS) -> PhysicalPeak:
    """cores x clock x FLOP per cycle, for float32 and for bfloat16, from the widest
    instructions this CPU lists (a hypervisor may hide some the silicon has)."""
    part = find_part(info, parts)
    return PhysicalPeak(cpu=info, part=part, float32=_float32(info, part), bfloat16=_bfloat16(info, part))


# TensorFlow's Linux x86 wheels run oneDNN's kernels by default only on CPUs that list one
# of these (tensorflow/core/util/util.cc, DefaultOneDnnPolicy, read 2026-11-25);
# TF_ENABLE_ONEDNN_OPTS overrides the default either way.
ONEDNN_BY_DEFAULT_FLAGS = frozenset({"avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16"})


def onednn_by_default(info: CpuInfo) -> bool:
    """Whether TensorFlow turns oneDNN on by itself on this CPU (without TF_ENABLE_ONEDNN_OPTS)."""
    return bool(info.flags & ONEDNN_BY_DEFAULT_FLAGS)


def describe_cpu(info: CpuInfo) -> str:
    """One line: the CPU, its relevant flags, cores and clock."""
    flags = " ".join(f"{flag}{'+' if flag in info.flags else '-'}" for flag in RELEVANT_FLAGS)
    clock = f"{info.mhz:.0f} MHz" if info.mhz is not None else "clock unknown"
    return (
        f"{info.model_name} ({info.vendor} family {info.family} model {info.model}), "
        f"{info.physical_cores} physical cores / {info.logical_cpus} logical CPUs usable here, {clock}; flags: {flags}"
    )


def describe_peak(peak: Peak, info: CpuInfo, name: str) -> str:
    """One line: how a precision's peak is made up, or why it is unknown."""
    if peak.instructions == NONE:
        return f"{name} physical peak: none, {peak.why}"
    if peak.flop_per_cycle is None:
        return f"{name} physical peak: unknown ({peak.instructions}: {peak.why})"
    if peak.gflops is None or info.mhz is None:
        return f"{name} physical peak: unknown (clock unknown; {peak.flop_per_cycle} FLOP/cycle per core, {peak.why})"
    return (
        f"{name} physical peak: {peak.gflops:.0f} GFLOP/s = {info.physical_cores} cores x {info.mhz / 1000:.3f} GHz x "
        f"{peak.flop_per_cycle} FLOP/cycle ({peak.instructions}, {peak.why})"
    )


def describe(peak: PhysicalPeak) -> list[str]:
    """The lines a benchmark prints: the CPU, both precisions' peaks, the clock and the source."""
    default = "on" if onednn_by_default(peak.cpu) else "off"
    listed = ", ".join(sorted(peak.cpu.flags & ONEDNN_BY_DEFAULT_FLAGS)) or "none of " + ", ".join(
        sorted(ONEDNN_BY_DEFAULT_FLAGS)
    )
    lines = [
        f"CPU: {describe_cpu(peak.cpu)}",
        f"TensorFlow's own default on this CPU: oneDNN {default} (it lists {listed})",
        describe_peak(peak.float32, peak.cpu, "float32"),
        describe_peak(peak.bfloat16, peak.cpu, "bfloat16"),
        f"clock: {CLOCK_SOURCE}",
    ]
    if peak.part is not None:
        lines.append(f"FLOP/cycle of {peak.part.name}: {peak.part.source}")
    return lines
