"""The instruction set the C target generates code for: the host's own, or another host class.

`GDV_C_ISA` (`gdv compile --isa`, `gdv tune --isa`) makes the whole C target behave as on a
host of that class: the `-march` flags the C is compiled with, the vector width and register
count in the capability descriptor and the schedule parameters (so `select-products` sizes its
micro-kernels for that register file), and, through the flags, the key of every cached shared
object, machine measurement and autotune result. The values:

| ISA | flags | vector | registers | add latency x pipes | runs here when the host has |
|---|---|---|---|---|---|
| `native` (default) | `-march=native` if accepted (+ P512: AVX-512) | host | host | host | - |
| `avx512` | `-march=skylake-avx512` + P512 | 64 bytes | 32 zmm | 4 x 2 | avx512f |
| `avx2` | `-march=haswell` (AVX2 + FMA) | 32 bytes | 16 ymm | 4 x 2 | avx2, fma |
| `sse2` | `-march=x86-64` | 16 bytes | 16 xmm | 4 x 2 | sse2 |
| `neon` | `-march=armv8-a` | 16 bytes | 32 v | 3 x 2 | asimd (an AArch64 host) |

The add latency (cycles) and pipes (vector adds issued per cycle) are the micro-architecture
numbers the analytical model of `gdv.ir.products` needs for its independent accumulator chains:
Skylake-SP / Ice Lake `vaddps` (4 cycles, ports 0 and 5; 0 and 1 for ymm on Haswell-class
parts, 3 cycles on Haswell itself: 4 x 2 covers both), Neoverse N1 / Cortex-A76 `fadd` (2
cycles, 2 pipes; 3 x 2 leaves slack). `-ffp-contract=off` stays in every variant: wider or
newer instructions never change a result.

P512 is `-mprefer-vector-width=512`. Without it GCC vectorises loops (an `omp simd` loop's
`gdv_vexpf`, say) in 32-byte vectors even on AVX-512 parts. Measured on the softmax
workload's exp(x - max) kernel over 4096 x 1024 f32, one thread, best of 20 runs: 2.51 ms
with 32-byte and 1.95 ms with 64-byte vectors on this Xeon. The product micro-kernels name
their width and are unaffected.

A variant whose instructions the host cannot execute (`neon` on x86-64, `avx512` on an AVX2
host) still has its descriptor and schedule parameters; building it is refused with a clear
error unless `$CC` is a compiler for that architecture (then it compiles, but does not load).
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

from gdv.ir.diagnostics import IRError, Loc

ISA_ENV = "GDV_C_ISA"


@dataclass(frozen=True)
class Isa:
    """One host class: its flags, vector width, vector registers and add pipeline."""

    name: str
    arch: str
    """`x86_64` or `aarch64`: the architecture its code runs on."""
    march: tuple[str, ...]
    vector_bytes: int
    registers: int
    add_latency: int
    """Cycles from a vector add's inputs to its result."""
    add_pipes: int
    """Vector adds the core can start per cycle."""
    requires: tuple[str, ...]
    """The /proc/cpuinfo flags a host needs to execute this ISA's code."""
    kind: str = ""
    """The named class it behaves as (`native` resolved: `avx512`, `avx2`, ...; else `name`)."""
    fma: bool = True
    """Whether its code has a fused multiply-add instruction. Without one (SSE2: `-march=x86-64`)
    each `fmaf` is a call into libm's software emulation, so `-O3` does not contract products
    there (`reassociate-reductions`, `fma`): measured on this host under `GDV_C_ISA=sse2`, the
    2-layer BERT's products ran at 1.2 GFLOP/s contracted (760 ms a call)."""

    def __post_init__(self) -> None:
        if not self.kind:
            object.__setattr__(self, "kind", self.name)

    @property
    def chains(self) -> int:
        """Independent accumulator chains that keep every add pipe busy: latency x pipes."""
        return self.add_latency * self.add_pipes


PREFER_512 = "-mprefer-vector-width=512"
"""Vectorised loops in 64-byte vectors (GCC's default on AVX-512 parts is 32)."""

ISAS: dict[str, Isa] = {
    i.name: i
    for i in (
        Isa(
            "avx512",
            "x86_64",
            ("-march=skylake-avx512", PREFER_512),
            64,
            32,
            4,
            2,
            ("avx512f",),
        ),
        Isa("avx2", "x86_64", ("-march=haswell",), 32, 16, 4, 2, ("avx2", "fma")),
        Isa("sse2", "x86_64", ("-march=x86-64",), 16, 16, 4, 2, ("sse2",), fma=False),
        Isa("neon", "aarch64", ("-march=armv8-a",), 16, 32, 3, 2, ("asimd",)),
    )
}
"""Every host class `GDV_C_ISA` may name (besides `native`)."""

CHOICES = ("native", *ISAS)


def requested() -> str:
    """The ISA `GDV_C_ISA` names (`native` when unset); an IRError naming the choices else."""
    return check(os.environ.get(ISA_ENV, ""), f"${ISA_ENV}")


def check(name: str, where: str) -> str:
    """`name` as a known ISA (empty: `native`); an IRError at `where` naming the choices else."""
    name = name.strip().lower() or "native"
    if name not in CHOICES:
        raise IRError(
            f"target c: unknown ISA '{name}' (choose one of: {', '.join(CHOICES)})",
            Loc(where, 1, 1),
        )
    return name


def host_arch() -> str:
    """`x86_64`, `aarch64`, ... (the machine the compiler runs on)."""
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


def native(features: set[str], march_native: bool) -> Isa:
    """The host's own class from its cpuinfo `features`: without `-march=native` (the compiler
    refused it) only the baseline (SSE2 / NEON) is enabled."""
    arch = host_arch()
    if arch == "aarch64" or "asimd" in features or "neon" in features:
        base = ISAS["neon"]
    elif march_native and "avx512f" in features:
        base = ISAS["avx512"]
    elif march_native and ("avx2" in features or "avx" in features):
        base = ISAS["avx2"]
    else:
        base = ISAS["sse2"]
    flags = ("-march=native",) if march_native else ()
    if march_native and base.name == "avx512":
        flags += (PREFER_512,)
    return Isa(
        "native",
        base.arch,
        flags,
        base.vector_bytes,
        base.registers,
        base.add_latency,
        base.add_pipes,
        base.requires,
        base.name,
        # AArch64 always has `fmla`; an x86 host only where its flags say so (an AVX host
        # without AVX2 runs as `avx2` but has no FMA) and `-march=native` enables it.
        arch == "aarch64" or (march_native and "fma" in features),
    )


def runnable(isa: Isa, features: set[str]) -> str:
    """Why code for `isa` cannot execute on this host ('' when it can)."""
    if isa.arch != host_arch():
        return f"ISA {isa.name} is {isa.arch} code; this host is {host_arch()}"
    missing = [f for f in isa.requires if f not in features]
    if isa.name != "native" and missing:
        return f"ISA {isa.name} needs CPU features this host lacks: {', '.join(missing)}"
    return ""
