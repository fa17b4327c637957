"""Speed of the C target's kernels against the machine's own yardsticks (issue 5, item 3).

    python benchmarks/c_kernels.py [--repeat 9] [--quick] [--only matmul|memory] [--out FILE]

- matmul: a 1024^3 f32 `matmul` compiled by gdv (target c, -O2) in GFLOP/s beside numpy's
  (OpenBLAS) on the same inputs.
- memory-bound kernels: every kernel of a compiled layer_norm, softmax and GELU (tanh form) on
  f32[8192,2048] (64 MiB, twice the last-level cache here), each run alone, in GB/s (bytes of
  its distinct operands read once plus its result written once), beside the copy bandwidth
  measured here: a C copy loop over 64 MiB on all cores, counted like STREAM (bytes read plus
  bytes written), timed in turn with each kernel so that both see the same load.

The compiled entry function is called directly through ctypes on prepared buffers, so the
figures are the kernels' own, without Python's per-call work; `whole_program_s` adds the
composite's end-to-end time through `gdv.backends.c.run` for comparison. Every figure is the
median of `--repeat` timed runs after one warm-up, with the fastest run beside it.

Everything is measured twice: on all cores (wall time), and again in a child process with
OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=1 timed by that process's CPU time, which other programs
sharing the machine do not inflate. On a shared machine read the ratios, which are measured
side by side, and the one-core figures.
None of this is a unit test (tests/backends/c/test_fast_kernels.py checks the results).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from gdv.backends import c
from gdv.backends.c.emit import Program
from gdv.backends.c.registry import LOWERINGS
from gdv.backends.c.simd import simd_choice
from gdv.backends.c.toolchain import build, compiler, detect, flags
from gdv.driver import compile as gdv_compile
from gdv.ir.core import Function, Module, Param
from gdv.ir.ops import get as get_spec

HERE = Path(__file__).resolve().parent
ROWS, COLS = 8192, 2048

COMPOSITES = {
    "layer_norm": (
        f"func @main(%x: f32[{ROWS},{COLS}], %g: f32[{COLS}], %b: f32[{COLS}]) -> "
        f"f32[{ROWS},{COLS}] {{\n  %y = layer_norm(%x, %g, %b) {{axes = [1], eps = 1e-05}} : "
        f"f32[{ROWS},{COLS}]\n  return %y\n}}"
    ),
    "softmax": (
        f"func @main(%x: f32[{ROWS},{COLS}]) -> f32[{ROWS},{COLS}] {{\n"
        f"  %y = softmax(%x) {{axis = 1}} : f32[{ROWS},{COLS}]\n  return %y\n}}"
    ),
    "gelu_tanh": (
        f"func @main(%x: f32[{ROWS},{COLS}]) -> f32[{ROWS},{COLS}] {{\n"
        f'  %y = gelu(%x) {{approximate = "tanh"}} : f32[{ROWS},{COLS}]\n  return %y\n}}'
    ),
}

_COPY = r"""
#include <stdint.h>
void gdv_copy(float *restrict dst, const float *restrict src, int64_t n)
{
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) dst[i] = src[i];
}
"""


CLOCK = time.perf_counter
"""The clock of every timing: wall time; the one-core child uses its CPU time (below)."""


def _times(fn: Callable[[], object], repeat: int) -> dict:
    fn()
    ts = []
    for _ in range(repeat):
        t = CLOCK()
        fn()
        ts.append(CLOCK() - t)
    return {"median_s": statistics.median(ts), "best_s": min(ts)}


class Compiled:
    """A module's entry function compiled by the C target, callable on fixed buffers."""

    def __init__(self, module: Module, inputs: dict[str, np.ndarray]) -> None:
        entry = module.entry
        prog = Program(module, entry)
        for op in entry.ops:
            LOWERINGS[get_spec(op.name)](prog, op)
        self.lib = ctypes.CDLL(str(build(prog.source())))
        self.lib.gdv_entry.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        self.lib.gdv_entry.restype = ctypes.c_int
        self.bufs = [np.empty(max(1, t.num_elements), t.dtype.np) for t in prog.slot_types]
        for p in entry.params:
            self.bufs[prog.slot_of[p.name]][: p.type.num_elements] = inputs[p.name].reshape(-1)
        self.ptrs = (ctypes.c_void_p * len(self.bufs))(*[b.ctypes.data for b in self.bufs])
        self.prog, self.module = prog, module

    def __call__(self) -> None:
        if self.lib.gdv_entry(self.ptrs) != 0:
            raise RuntimeError("the compiled program failed")

    def result(self) -> np.ndarray:
        name = self.module.entry.returns[0]
        t = self.module.entry.types()[name]
        return self.bufs[self.prog.slot_of[name]][: t.num_elements].reshape(t.shape)


class Copy:
    """A C copy loop over 64 MiB on all cores; its bandwidth counted like STREAM."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL(str(build(_COPY)))
        self.lib.gdv_copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        self.src = np.random.default_rng(0).standard_normal(16 << 20).astype(np.float32)
        self.dst = np.empty_like(self.src)
        self.nbytes = 2 * self.src.nbytes

    def __call__(self) -> None:
        self.lib.gdv_copy(self.dst.ctypes.data, self.src.ctypes.data, self.src.size)


def copy_bandwidth(repeat: int) -> dict:
    """STREAM-style copy bandwidth (read + write bytes per second) on all cores, 64 MiB."""
    copy = Copy()
    src, dst, nbytes = copy.src, copy.dst, copy.nbytes
    t = _times(copy, repeat)
    tn = _times(lambda: np.copyto(dst, src), repeat)
    return {
        "bytes": nbytes,
        "c_loop_gbs": nbytes / t["median_s"] / 1e9,
        "c_loop_best_gbs": nbytes / t["best_s"] / 1e9,
        "numpy_copyto_gbs": nbytes / tn["median_s"] / 1e9,
    }


def matmul(repeat: int, n: int = 1024) -> dict:
    text = (
        f"func @main(%a: f32[{n},{n}], %b: f32[{n},{n}]) -> f32[{n},{n}] {{\n"
        f"  %0 = matmul(%a, %b) : f32[{n},{n}]\n  return %0\n}}"
    )
    comp = gdv_compile(text, target="c")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    run = Compiled(comp.module, {"a": a, "b": b})
    flop = 2.0 * n**3
    rows = []
    for _ in range(3):  # interleaved, so both see the same load
        g = _times(run, repeat)
        p = _times(lambda: a @ b, repeat)
        rows.append((g, p))
    g = min((r[0] for r in rows), key=lambda t: t["median_s"])
    p = min((r[1] for r in rows), key=lambda t: t["median_s"])
    run()
    exact = np.array_equal(run.result(), c.run(comp.module, {"a": a, "b": b})[0])
    return {
        "shape": [n, n, n],
        "gdv_gflops": flop / g["median_s"] / 1e9,
        "gdv_best_gflops": flop / g["best_s"] / 1e9,
        "numpy_gflops": flop / p["median_s"] / 1e9,
        "numpy_best_gflops": flop / p["best_s"] / 1e9,
        "ratio": p["median_s"] / g["median_s"],
        "max_abs_diff_vs_numpy": float(np.max(np.abs(run.result() - a @ b))),
        "same_as_c_run": bool(exact),
    }


def _one_kernel(module: Module, index: int) -> tuple[Module, int]:
    """Op `index` of `module`'s entry alone (its operands become parameters), and its bytes."""
    entry = module.entry
    op = entry.ops[index]
    types = entry.types()
    names = list(dict.fromkeys(op.operands))
    params = [Param(v, types[v]) for v in names]
    fn = Function("main", params, [op.type], [op], [op.result])
    bodies = [f for f in module.functions if f is not entry]
    nbytes = sum(types[v].num_elements * types[v].dtype.itemsize for v in names)
    nbytes += op.type.num_elements * op.type.dtype.itemsize
    return Module([fn, *bodies], module.filename), nbytes


def _side_by_side(fn: Callable[[], object], other: Callable[[], object], repeat: int):
    """Median times of `fn` and `other`, timed alternately."""
    fn()
    other()
    ta, tb = [], []
    for _ in range(repeat):
        t = CLOCK()
        fn()
        ta.append(CLOCK() - t)
        t = CLOCK()
        other()
        tb.append(CLOCK() - t)
    return statistics.median(ta), statistics.median(tb)


def memory_bound(repeat: int) -> dict:
    out = {}
    copy = Copy()
    rng = np.random.default_rng(1)
    for name, text in COMPOSITES.items():
        comp = gdv_compile(text, target="c")
        module = comp.module
        inputs = {
            p.name: rng.standard_normal(p.type.shape).astype(p.type.dtype.np)
            for p in module.entry.params
        }
        kernels = []
        for k, op in enumerate(module.entry.ops):
            if op.name != "kernel":
                continue
            one, nbytes = _one_kernel(module, k)
            types = module.entry.types()
            feed = {
                v: rng.standard_normal(types[v].shape).astype(types[v].dtype.np)
                for v in dict.fromkeys(op.operands)
            }
            tk, tc = _side_by_side(Compiled(one, feed), copy, repeat)
            gbs = nbytes / tk / 1e9
            copy_gbs = copy.nbytes / tc / 1e9
            kernels.append(
                {
                    "kernel": op.result,
                    "body": op.attrs["body"],
                    "reduce": op.attrs["reduce"],
                    "combiner": op.attrs["combiner"],
                    "bytes": nbytes,
                    "median_s": tk,
                    "gbs": gbs,
                    "copy_gbs_alongside": copy_gbs,
                    "of_copy": gbs / copy_gbs,
                }
            )
        whole = Compiled(module, inputs)
        t = _times(whole, repeat)
        t_run = _times(lambda m=module, i=inputs: c.run(m, i), max(3, repeat // 3))
        io_bytes = sum(v.nbytes for v in inputs.values()) + whole.result().nbytes
        out[name] = {
            "kernels": kernels,
            "whole_program_median_s": t["median_s"],
            "whole_program_io_gbs": io_bytes / t["median_s"] / 1e9,
            "whole_program_s": t_run["median_s"],
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="3 runs each")
    parser.add_argument("--out", default=str(HERE / "c_kernels.json"))
    parser.add_argument("--only", choices=["matmul", "memory"], default=None)
    parser.add_argument("--one-core", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    repeat = 3 if args.quick else args.repeat
    if args.one_core:  # the child: one thread, timed by its CPU time (robust to other load)
        global CLOCK
        CLOCK = time.process_time
        child = {
            "matmul": matmul(repeat) if args.only != "memory" else None,
            "memory_bound": memory_bound(repeat) if args.only != "matmul" else {},
        }
        print(json.dumps(child))
        return
    copy = copy_bandwidth(repeat)
    mm = matmul(repeat) if args.only != "memory" else None
    mem = memory_bound(repeat) if args.only != "matmul" else {}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    command = [sys.executable, __file__, "--one-core", "--repeat", str(repeat)]
    command += ["--only", args.only] if args.only else []
    child = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    one = json.loads(child.stdout.strip().splitlines()[-1])
    mm1, mem1 = one["matmul"], one["memory_bound"]
    cc = compiler()
    result = {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "load_average": os.getloadavg(),
            "compiler": detect(cc)["version"],
            "flags": flags(cc),
            "simd": simd_choice(),
        },
        "copy_bandwidth": copy,
        "matmul_all_cores": mm,
        "matmul_one_core": mm1,
        "memory_bound": mem,
        "memory_bound_one_core": mem1,
    }
    print(f"copy bandwidth (C loop, all cores): {copy['c_loop_gbs']:.1f} GB/s")
    for label, m in (("all cores", mm), ("one core", mm1)):
        if m is None:
            continue
        print(
            f"matmul 1024^3 f32 ({label}): gdv {m['gdv_gflops']:.1f} GFLOP/s, numpy "
            f"{m['numpy_gflops']:.1f} GFLOP/s, gdv/numpy {m['ratio']:.2f}"
        )
    for label, table in (("all cores", mem), ("one core, CPU time", mem1)):
        for name, r in table.items():
            print(f"{name} ({label}): whole program {r['whole_program_median_s'] * 1e3:.2f} ms")
            for k in r["kernels"]:
                what = f"{k['combiner']} over {k['reduce']}" if k["reduce"] else "elementwise"
                print(
                    f"  %{k['kernel']:<22} {what:<16} {k['gbs']:6.1f} GB/s "
                    f"({100 * k['of_copy']:.0f}% of copy, {k['copy_gbs_alongside']:.1f} GB/s)"
                )
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
