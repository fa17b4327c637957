"""A 1024^3 f32 matmul through gdv's C target for each x86 host class (`GDV_C_ISA`: avx512,
avx2, sse2, as this host can run them) beside numpy (OpenBLAS), in one process.

    python benchmarks/isa_matmul.py [--n 1024] [--isa avx512 avx2 sse2] [--turns 3]
                                    [--autotune] [--blas-coretype NAME] [--out FILE]

Each variant is compiled and proved with `gdv.compile` under its `GDV_C_ISA` (with
`--autotune`, also under `GDV_C_AUTOTUNE=1`, using what `gdv tune --isa ISA` stored), checked
bit for bit against the avx512 variant's result (every variant folds in the same order), and
timed as benchmarks/side_by_side.py times its engines: `--turns` turns, each engine a third of
a second of back-to-back calls after 0.2 s of quiet, the median reported. Beside each: the
variant's measured mul+add peak (`machine.peak_gflops.f32_mul_add` of its descriptor: the
ceiling of exact code, which rounds every multiply) and its FMA peak (what numpy's OpenBLAS
kernels can reach). Results go to `benchmarks/isa_matmul.json`. Timings are this machine's, on
all its cores; none of this is a unit test.

numpy's OpenBLAS picks its kernels for this host (on an AVX-512 host, its AVX-512 ones), so by
default the avx2 and sse2 variants run against a peer the host class they stand for would not
have. `--blas-coretype Haswell` (OpenBLAS's `OPENBLAS_CORETYPE`, set before numpy loads: the
script restarts itself with it) makes numpy run OpenBLAS's AVX2+FMA kernels, what numpy runs on
an AVX2 host. The JSON records the kernels numpy's OpenBLAS reports (`numpy_blas`, through
threadpoolctl when it is installed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SETTLE_S = 0.2


def _program(n: int) -> str:
    return (
        f"func @main(%a: f32[{n},{n}], %b: f32[{n},{n}]) -> f32[{n},{n}] {{\n"
        f"  %0 = matmul(%a, %b) : f32[{n},{n}]\n  return %0\n}}\n"
    )


def _variant(name: str, n: int, autotune: bool) -> dict:
    from gdv.backends import c
    from gdv.backends.c.isa import ISA_ENV
    from gdv.backends.c.tuning import AUTOTUNE_ENV
    from gdv.driver import compile as gdv_compile

    os.environ[ISA_ENV] = name
    if autotune:
        os.environ[AUTOTUNE_ENV] = "1"
    else:
        os.environ.pop(AUTOTUNE_ENV, None)
    t = time.perf_counter()
    comp = gdv_compile(_program(n), target="c")
    seconds = time.perf_counter() - t
    d = c.capabilities(measure=True)
    op = next(
        o
        for fn in comp.module.functions
        for o in fn.ops
        if o.name == "kernel" and o.attrs.get("strategy") == "product"
    )
    exe = comp.executable()  # built now, under this variant's flags
    return {
        "isa": name,
        "compile_and_prove_s": round(seconds, 2),
        "flags": d["compiler"]["flags"],
        "micro": op.attrs["micro"],
        "blocks": op.attrs["blocks"],
        "vector": op.attrs["vector"],
        "split": op.attrs["split"],
        "source": d["execution"]["vectorization"]["contraction"]["f32"]["source"],
        "peak_gflops": d["machine"].get("peak_gflops"),
        "run": exe,
    }


def main() -> None:
    from gdv.backends.c.isa import ISAS, runnable
    from gdv.backends.c.toolchain import isa_features

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--isa", nargs="+", default=["avx512", "avx2", "sse2"])
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--autotune", action="store_true")
    ap.add_argument("--out", default=str(HERE / "isa_matmul.json"))
    ap.add_argument(
        "--blas-coretype",
        default=None,
        help="OPENBLAS_CORETYPE for numpy's OpenBLAS (Haswell: its AVX2 kernels)",
    )
    args = ap.parse_args()
    if args.blas_coretype and os.environ.get("OPENBLAS_CORETYPE") != args.blas_coretype:
        # OpenBLAS reads it once, when numpy loads it: run again with it set
        env = {**os.environ, "OPENBLAS_CORETYPE": args.blas_coretype}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    n = args.n
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    inputs = {"a": a, "b": b}
    features = set(isa_features())
    variants, skipped = [], {}
    for name in args.isa:
        why = runnable(ISAS[name], features)
        if why:
            skipped[name] = why
            continue
        variants.append(_variant(name, n, args.autotune))
    calls = {f"gdv-c {v['isa']}": (lambda run=v["run"]: run(inputs)[0]) for v in variants}
    calls["numpy"] = lambda: np.matmul(a, b)
    outs = {k: np.asarray(f()) for k, f in calls.items()}
    first = next(iter(outs.values()))
    for k, out in outs.items():
        if k.startswith("gdv"):
            assert np.array_equal(out, first), f"{k} differs from {next(iter(outs))}"
    runs: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(args.turns):
        for k, f in calls.items():
            time.sleep(SETTLE_S)
            f()
            start = time.perf_counter()
            while time.perf_counter() - start < 1.0 / args.turns or len(runs[k]) < 2:
                t = time.perf_counter()
                f()
                runs[k].append(time.perf_counter() - t)
    flops = 2.0 * n**3
    numpy_s = statistics.median(runs["numpy"])
    rows = []
    for k in calls:
        med = statistics.median(runs[k])
        row = {
            "engine": k,
            "median_ms": round(med * 1e3, 3),
            "gflops": round(flops / med / 1e9, 1),
            "vs_numpy_gflops": round(numpy_s / med, 3),
            "runs": len(runs[k]),
        }
        v = next((v for v in variants if f"gdv-c {v['isa']}" == k), None)
        if v is not None:
            row.update({key: val for key, val in v.items() if key != "run"})
        rows.append(row)
        peak = row.get("peak_gflops") or {}
        print(
            f"{k:<14} {row['median_ms']:>8.2f} ms {row['gflops']:>7.1f} GFLOP/s  "
            f"x{row['vs_numpy_gflops']:.2f} of numpy"
            + (
                f"  (mul+add peak {peak['f32_mul_add']}, FMA peak {peak['f32_fma']}; "
                f"micro {row['micro']} blocks {row['blocks']})"
                if peak
                else ""
            )
        )
    for name, why in skipped.items():
        print(f"gdv-c {name}: skipped ({why})")
    blas = _numpy_blas()
    print(f"numpy's BLAS: {blas}")
    Path(args.out).write_text(
        json.dumps({"n": n, "rows": rows, "skipped": skipped, "numpy_blas": blas}, indent=1) + "\n"
    )


def _numpy_blas() -> dict:
    """The BLAS numpy calls and the kernels it picked (threadpoolctl's report; the
    `OPENBLAS_CORETYPE` asked for, if any, when threadpoolctl is not installed)."""
    asked = os.environ.get("OPENBLAS_CORETYPE") or None
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return {"coretype_requested": asked}
    for lib in threadpool_info():
        if lib.get("user_api") == "blas":
            keys = ("internal_api", "architecture", "version", "num_threads")
            return {"coretype_requested": asked, **{k: lib.get(k) for k in keys}}
    return {"coretype_requested": asked}


if __name__ == "__main__":
    main()
