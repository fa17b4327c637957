"""The vector width and blocking the C target's fast kernels are generated for.

The generated code uses GCC vector extensions (`__attribute__((vector_size(B)))`), not
intrinsics: the same source is correct for every width, and the compiler lowers a vector wider
than the hardware's to several narrower instructions. The width is chosen from the host's ISA
(`toolchain.isa_features()`) and from whether the compiler accepts `-march=native` (without it,
no ISA extension is enabled, so only the x86-64 / AArch64 baseline of 16 bytes is used).
`GDV_C_VECTOR_BYTES` (16, 32 or 64) overrides the choice, and `GDV_C_BLOCKING` ("KC,MC,NC")
the cache blocking: the tests use them to run every width's code, and every blocking path
(partial sums carried across reduce blocks, several row and column blocks) at small sizes.

None of these choices changes a result: vectors hold independent output elements, each folded
in the order the IR fixes, with separate multiplies and adds (`-ffp-contract=off`).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from gdv.backends.c.toolchain import compiler, detect, isa_features

VECTOR_BYTES_ENV = "GDV_C_VECTOR_BYTES"
BLOCKING_ENV = "GDV_C_BLOCKING"

_DEFAULT_CACHES = {"l1d": 32 << 10, "l2": 1 << 20, "l3": 8 << 20}


@functools.cache
def cache_sizes() -> dict[str, int]:
    """Per-core L1 data and L2 sizes and the L3 size in bytes (Linux sysfs; defaults else)."""
    found = dict(_DEFAULT_CACHES)
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for index in sorted(base.glob("index*")):
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            text = (index / "size").read_text().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            size = int(text.rstrip("KMG")) * scale
            if level == "1" and kind in ("Data", "Unified"):
                found["l1d"] = size
            elif level in ("2", "3"):
                found[f"l{level}"] = size
    except (OSError, ValueError):
        return dict(_DEFAULT_CACHES)
    return found


def _native_isa() -> tuple[str, int]:
    """(name, vector bytes) of the widest vector ISA the compiled code may use on this host."""
    features = set(isa_features())
    native = "-march=native" in detect(compiler())["extra_flags"]
    if native and "avx512f" in features:
        return "avx512f", 64
    if native and ("avx2" in features or "avx" in features):
        return "avx2" if "avx2" in features else "avx", 32
    if "asimd" in features or "neon" in features:
        return "neon", 16
    if "sse2" in features:
        return "sse2", 16
    return "generic", 16


def vector_bytes() -> int:
    """The width, in bytes, of the vectors the fast kernels are written with."""
    env = os.environ.get(VECTOR_BYTES_ENV)
    if env in ("16", "32", "64"):
        return int(env)
    return _native_isa()[1]


def micro_tile(
    elem_bytes: int, rows: int, cols: int, vb: int | None = None
) -> tuple[int, int, int]:
    """(MR, NV, VL) of the contraction micro-kernel: MR rows by NV vectors of VL lanes.

    Measured on Zen 4 with separate vmulps/vaddps: one vector per row and 16 rows (16
    accumulators, the A element a broadcast memory operand) runs at the multiply/add peak,
    where wide tiles (6x64, 8x32) reach only about 70-80% of it. A problem with fewer rows
    gets as many rows as it has; below 8 rows, more vectors per row to keep about 12
    independent add chains in flight (the add latency times the two add pipes). (Measured on
    the mlp example's 8 x 784 x 128 product, one core, CPU time: 8x16 19.6 us, 8x32 24.5 us,
    8x48 26.4 us.) `vb`: the vector width in bytes (default: the host's)."""
    vb = vector_bytes() if vb is None else vb
    vl = max(1, vb // elem_bytes)
    regs = 32 if vb == 64 or _native_isa()[0] == "neon" else 16
    mr = 16 if regs == 32 else 12
    nv = 1
    if 0 < rows < mr:
        mr = rows
        nv = 1 if rows >= 8 else max(1, min(4, -(-12 // rows), -(-cols // vl)))
    return mr, nv, vl


def blocking(elem_bytes: int, mr: int, nr: int) -> tuple[int, int, int]:
    """(KC, MC, NC): the reduce block keeps an MR x KC sliver of A in half of L1 while it meets
    every KC x NR sliver of a KC x NC panel of B about the size of L2; the MC x KC block of A
    takes an eighth of L2. (Measured on Zen 4, 1024^3 f32, one core: MC 96..192 and NC 1024
    beat MC 1024 / NC 512 by about 8%.)"""
    env = os.environ.get(BLOCKING_ENV, "")
    parts = env.split(",")
    if len(parts) == 3 and all(p.strip().isdigit() and int(p) > 0 for p in parts):
        kc, mc, nc = (int(p) for p in parts)
        return kc, max(mr, mc - mc % mr), max(nr, nc - nc % nr)
    c = cache_sizes()
    kc = max(16, (c["l1d"] // 2) // (mr * elem_bytes))
    kc = min(512, kc - kc % 8 if kc > 8 else kc)
    nc = max(nr, c["l2"] // (kc * elem_bytes))
    nc -= nc % nr
    mc = max(mr, (c["l2"] // 8) // (kc * elem_bytes))
    mc -= mc % mr
    return kc, mc, nc


def simd_choice() -> dict:
    """What the fast kernels are generated for on this host (for the capability descriptor)."""
    isa, native_bytes = _native_isa()
    vb = vector_bytes()
    out: dict = {
        "isa": isa,
        "vector_bytes": vb,
        "overridden": vb != native_bytes,
        "method": "GCC vector extensions, separate multiply and add (no FMA)",
        "caches": cache_sizes(),
        "contraction": {},
    }
    for name, size in (("f32", 4), ("f64", 8)):
        mr, nv, vl = micro_tile(size, 1 << 30, 1 << 30)
        kc, mc, nc = blocking(size, mr, nv * vl)
        out["contraction"][name] = {"mr": mr, "nr": nv * vl, "kc": kc, "mc": mc, "nc": nc}
    return out
