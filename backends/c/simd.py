"""The vector width and blocking the C target's fast kernels are generated for.

The generated code uses GCC vector extensions (`__attribute__((vector_size(B)))`), not
intrinsics: the same source is correct for every width, and the compiler lowers a vector wider
than the hardware's to several narrower instructions. The width, the register count and the
add chains come from the active host class (`backends/c/isa.py`): `GDV_C_ISA` (avx512, avx2,
sse2, neon), else the host's own ISA (`toolchain.isa_features()`) and whether the compiler
accepts `-march=native` (without it, no ISA extension is enabled, so only the x86-64 / AArch64
baseline of 16 bytes is used). The micro-kernel and blocking are the analytical model's
(`gdv.ir.products`), or with `GDV_C_AUTOTUNE=1` what `gdv tune` stored (`tuning.py`).
`GDV_C_VECTOR_BYTES` (16, 32 or 64) overrides only the width, and `GDV_C_BLOCKING` ("KC,MC,NC")
the cache blocking: the tests use them to run every width's code, and every blocking path
(partial sums carried across reduce blocks, several row and column blocks) at small sizes.

None of these choices changes a result: vectors hold independent output elements, each folded
in the order the IR fixes, with separate multiplies and adds (`-ffp-contract=off`).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from gdv.backends.c.isa import Isa
from gdv.backends.c.toolchain import isa
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


def active_isa() -> Isa:
    """The host class the code is generated for (`GDV_C_ISA`, else the host's own)."""
    return isa()


def _native_isa() -> tuple[str, int]:
    """(name, vector bytes) of the ISA the compiled code may use (the active class's)."""
    i = active_isa()
    return i.kind, i.vector_bytes


def vector_bytes() -> int:
    """The width, in bytes, of the vectors the fast kernels are written with: `GDV_C_VECTOR_BYTES`
    (16, 32 or 64), else the active ISA's."""
    env = os.environ.get(VECTOR_BYTES_ENV)
    if env in ("16", "32", "64"):
        return int(env)
    return active_isa().vector_bytes


def vector_registers(vb: int | None = None) -> int:
    """How many vectors of width `vb` (default: the generated width) the active ISA's register
    file holds: its registers (32 zmm for AVX-512, 16 ymm for AVX2, 16 xmm for SSE2, 32 for
    NEON), fewer when a vector is wider than its registers (the compiler splits it)."""
    vb = vector_bytes() if vb is None else vb
    i = active_isa()
    return max(1, i.registers * i.vector_bytes // max(vb, i.vector_bytes))


def add_chains() -> int:
    """Independent add chains the active ISA's add pipeline needs (latency x pipes)."""
    return active_isa().chains


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
    """(MR, NV, VL) of the product micro-kernel by the analytical model
    (`gdv.ir.products.micro_tile` with the active ISA's registers and add chains); `vb`: the
    vector width in bytes (default: the generated width)."""
    vb = vector_bytes() if vb is None else vb
    return products.micro_tile(elem_bytes, rows, cols, vb, vector_registers(vb), add_chains())


def blocking(elem_bytes: int, mr: int, nr: int, reduce: int | None = None) -> tuple[int, int, int]:
    """(KC, MC, NC) on this host (`gdv.ir.products.blocking` with its caches, or what
    `GDV_C_BLOCKING` imposes), for a reduction of `reduce` positions when given."""
    return products.blocking(elem_bytes, mr, nr, l1_l2(), blocking_override(), reduce=reduce)


def tuned() -> tuple[dict[str, products.Tuned], str]:
    """The autotune cache's choices compiles use now, per dtype, and their source
    (`backends/c/tuning.py`: empty and 'model' unless `GDV_C_AUTOTUNE` is on)."""
    from gdv.backends.c import tuning

    return tuning.active(vector_bytes())


def contraction(size: int, measured: products.Tuned | None) -> dict:
    """The micro-kernel and blocking a large product of `size`-byte elements gets."""
    vb = vector_bytes()
    vl = max(1, vb // size)
    if measured is not None:
        mr, nv = measured.mr, measured.nv
        kc, mc, nc = products.blocking(
            size,
            mr,
            nv * vl,
            l1_l2(),
            blocking_override() or (measured.kc, measured.mc, measured.nc),
        )
    else:
        mr, nv, vl = micro_tile(size, 1 << 30, 1 << 30)
        kc, mc, nc = blocking(size, mr, nv * vl)
    return {"mr": mr, "nr": nv * vl, "kc": kc, "mc": mc, "nc": nc}


def simd_choice() -> dict:
    """What the fast kernels are generated for (for the capability descriptor): the active
    ISA (`GDV_C_ISA`), its flags, vector width and registers, and per dtype the micro-kernel
    and blocking of a large product with the source of those numbers."""
    from gdv.backends.c.isa import ISA_ENV, requested

    i = active_isa()
    vb = vector_bytes()
    found, source = tuned()
    out: dict = {
        "isa": i.kind,
        "isa_requested": requested(),
        "isa_env": ISA_ENV,
        "march": list(i.march),
        "arch": i.arch,
        "vector_bytes": vb,
        "overridden": vb != i.vector_bytes,
        "vector_registers": vector_registers(vb),
        "add_latency_cycles": i.add_latency,
        "add_pipes": i.add_pipes,
        "add_chains": i.chains,
        "method": "GCC vector extensions, separate multiply and add (no FMA)",
        "caches": cache_sizes(),
        "model": "gdv.ir.products.micro_tile / blocking: MR x NV accumulators + NV B vectors + "
        "1 broadcast <= registers, chains <= MR x NV <= 2 x chains; KC: MR x KC A + KC x NR B "
        "slivers in L1d; NC: KC x NC B panel in L2; MC: MC x KC A block in half of L2",
        "contraction": {},
    }
    for name, size in (("f32", 4), ("f64", 8)):
        entry = contraction(size, found.get(name))
        if name in found:
            entry["source"] = source
        else:
            entry["source"] = "model (not tuned for this dtype)" if found else source
        if blocking_override() is not None:
            entry["source"] += f"; blocking imposed by {BLOCKING_ENV}"
        out["contraction"][name] = entry
    return out
