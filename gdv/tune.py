"""`gdv tune`: a short measured autotune of the C target's product micro-kernel and blocking.

Where the analytical model of `gdv.ir.products` is not enough, this times a few candidate
(MR, NV, KC, MC, NC) on an N x N x N f32 product (default N = 1024) compiled for the active ISA
(`GDV_C_ISA`), through the same pipeline `gdv compile` runs (the candidate enters as
`select-products`' `tuned` row, exactly as a compile with `GDV_C_AUTOTUNE=1` will use it), and
stores the fastest in the autotune cache (`gdv.backends.c.tuning`), keyed by the machine's
fingerprint, the compiler and its flags. Every candidate's result is compared with the model's,
bit for bit: tuning never changes a result, only the time.

Candidates: the model's choice; the tallest one-vector tile and the widest tiles the registers
hold (MR * NV + NV + 1 <= registers, MR * NV >= chains); the model's tile with KC doubled and
with MC quartered. The obligations are not proved here (nothing is kept but the numbers); a
compile that uses them proves its schedule as usual.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from gdv.ir import products
from gdv.ir.diagnostics import IRError, Loc

WARM_S = 0.2
"""Seconds each candidate runs before each turn's timed runs (the very first gets 4x: clocks
and worker threads come up)."""

TURNS = 3
"""Turns in which every candidate is timed; a candidate's time is its fastest run in all."""


def candidates(elem_bytes: int = 4) -> list[products.Tuned]:
    """The candidates for the active ISA, the model's first, no two alike."""
    from gdv.backends.c import simd

    vb = simd.vector_bytes()
    regs = simd.vector_registers(vb)
    chains = simd.add_chains()
    vl = max(1, vb // elem_bytes)
    big = 1 << 30
    mr, nv, _ = products.micro_tile(elem_bytes, big, big, vb, regs, chains)
    caches = simd.l1_l2()

    def make(mr: int, nv: int, scale_kc: float = 1.0, scale_mc: float = 1.0) -> products.Tuned:
        # KC scales with the L1 share; MC and NC follow KC as the model sizes them.
        kc, mc, nc = products.blocking(
            elem_bytes, mr, nv * vl, (int(caches[0] * scale_kc), caches[1])
        )
        return products.Tuned(mr, nv, kc, max(mr, int(mc * scale_mc) // mr * mr), nc)

    out = [make(mr, nv)]
    tallest = regs - 2
    out.append(make(tallest, 1))
    for wide in (2, 3, 4):
        rows = (regs - 1 - wide) // wide
        if rows * wide >= chains and rows >= 1:
            out.append(make(rows, wide))
    out.append(make(mr, nv, scale_kc=2.0))
    out.append(make(mr, nv, scale_mc=0.25))
    unique: list[products.Tuned] = []
    for c in out:
        if c not in unique:
            unique.append(c)
    return unique


def _matmul(n: int) -> str:
    return (
        f"func @main(%a: f32[{n},{n}], %b: f32[{n},{n}]) -> f32[{n},{n}] {{\n"
        f"  %0 = matmul(%a, %b) : f32[{n},{n}]\n  return %0\n}}\n"
    )


def _build(n: int, tuned: products.Tuned) -> tuple[Callable, dict]:
    """The compiled product with `tuned` as select-products' row, and its recorded attrs."""
    from gdv.api import parse
    from gdv.backends import c
    from gdv.passes.manager import PassManager
    from gdv.passes.pipelines import pipeline

    params = {**c.schedule_parameters(), "blocking": None}
    params["tuned"] = (("f32", tuned.mr, tuned.nv, tuned.kc, tuned.mc, tuned.nc),)
    module = PassManager(pipeline("c", 2, False, **params)).run(parse(_matmul(n), "<tune>")).module
    attrs = next(
        op.attrs
        for fn in module.functions
        for op in fn.ops
        if op.name == "kernel" and op.attrs.get("strategy") == "product"
    )
    return c.Executable(module), attrs


def _time(run: Callable[[], object], warm_s: float, runs: int) -> float:
    """The fastest of `runs` timed calls after `warm_s` seconds of untimed ones."""
    end = time.perf_counter() + warm_s
    while time.perf_counter() < end:
        run()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return min(times)


def tune(n: int = 1024, runs: int = 5, log: Callable[[str], None] | None = None) -> dict:
    """Time the candidates on an n^3 f32 product (the fastest of `runs` calls in each of
    `TURNS` turns), store the fastest candidate, return the record."""
    from gdv.backends.c import simd, tuning
    from gdv.backends.c.isa import ISA_ENV, runnable
    from gdv.backends.c.toolchain import compiler, detect, flags, isa, isa_features, unbuildable

    cc = compiler()
    why = unbuildable(cc) or runnable(isa(cc), set(isa_features()))
    if why:
        raise IRError(
            f"gdv tune: cannot measure {ISA_ENV}={isa(cc).name} here: {why}",
            Loc("<command line>", 1, 1),
        )
    if n < 16:
        raise IRError(
            f"gdv tune: --size {n} is too small (at least 16)", Loc("<command line>", 1, 1)
        )
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    inputs = {"a": a, "b": b}
    built = []
    expect = None
    for cand in candidates():
        ex, attrs = _build(n, cand)
        out = ex(inputs)[0]
        if expect is None:
            expect = out
        elif not np.array_equal(out, expect):
            raise IRError(f"internal: tune candidate {cand} changed the product's result")
        built.append((cand, ex, attrs))
    # Turns: every candidate runs in each, so a burst of load from elsewhere on the machine
    # lands on one turn of several candidates, not on all of one; the best run counts.
    best_s = [float("inf")] * len(built)
    for turn in range(TURNS):
        for k, (_, ex, _) in enumerate(built):
            warm = WARM_S * (4 if turn == 0 and k == 0 else 1)
            best_s[k] = min(best_s[k], _time(lambda ex=ex: ex(inputs), warm, runs))
    results = []
    for k, ((cand, _, attrs), seconds) in enumerate(zip(built, best_s, strict=True)):
        row = {
            "mr": cand.mr,
            "nv": cand.nv,
            "kc": cand.kc,
            "mc": cand.mc,
            "nc": cand.nc,
            "micro": attrs["micro"],
            "blocks": attrs["blocks"],
            "seconds": seconds,
            "gflops": round(2 * n**3 / seconds / 1e9, 1),
            "model": k == 0,
        }
        results.append(row)
        if log:
            log(
                f"  MR {cand.mr:>2} NV {cand.nv} KC {cand.kc:>4} MC {cand.mc:>4} NC {cand.nc:>5}: "
                f"{row['gflops']:>7.1f} GFLOP/s" + ("  (model)" if k == 0 else "")
            )
    best = min(results, key=lambda r: r["seconds"])
    record = {
        "isa": isa(cc).kind,
        "isa_requested": isa(cc).name,
        "compiler": detect(cc)["version"],
        "flags": flags(cc),
        "size": n,
        "runs": runs,
        "candidates": results,
        "choice": {"f32": {k: best[k] for k in ("mr", "nv", "kc", "mc", "nc")}},
    }
    record["path"] = str(tuning.store(simd.vector_bytes(), record))
    return record
