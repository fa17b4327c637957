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
from gdv.ir import products

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


def vector_registers(vb: int | None = None) -> int:
    """How many vector registers of width `vb` (default: the host's width) the host has: 32
    with AVX-512 or NEON, else 16."""
    vb = vector_bytes() if vb is None else vb
    return 32 if vb == 64 or _native_isa()[0] == "neon" else 16


def blocking_override() -> tuple[int, int, int] | None:
    """The (KC, MC, NC) `GDV_C_BLOCKING` imposes, or None."""
    parts = os.environ.get(BLOCKING_ENV, "").split(",")
    if len(parts) == 3 and all(p.strip().isdigit() and int(p) > 0 for p in parts):
        kc, mc, nc = (int(p) for p in parts)
        return kc, mc, nc
    return None


def l1_l2() -> tuple[int, int]:
    """(L1 data, L2) bytes per core."""
    c = cache_sizes()
    return c["l1d"], c["l2"]


def micro_tile(
    elem_bytes: int, rows: int, cols: int, vb: int | None = None
) -> tuple[int, int, int]:
    """(MR, NV, VL) of the product micro-kernel on this host (`gdv.ir.products.micro_tile`
    with the host's registers); `vb`: the vector width in bytes (default: the host's)."""
    vb = vector_bytes() if vb is None else vb
    return products.micro_tile(elem_bytes, rows, cols, vb, vector_registers(vb))


def blocking(elem_bytes: int, mr: int, nr: int) -> tuple[int, int, int]:
    """(KC, MC, NC) on this host (`gdv.ir.products.blocking` with its caches, or what
    `GDV_C_BLOCKING` imposes)."""
    return products.blocking(elem_bytes, mr, nr, l1_l2(), blocking_override())


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
