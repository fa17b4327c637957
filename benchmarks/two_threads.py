"""gdv against onnxruntime at two threads, block by block over time, beside a probe of what it
costs one core to read data the other core has just written (issue 16): on a shared VM the two
vCPUs are not always equally close.

    HF_HUB_OFFLINE=1 python benchmarks/two_threads.py [--model resnet18] [--seconds 150]
                                                      [--level 3] [--calls 15] [--out FILE]
                                                      [--kernels K]

The model (`models.build`, batch 1, seeded) goes through the ONNX path, is compiled with its
weights bound at `--level`, and runs beside an onnxruntime session of the ONNX file with two
intra-op threads. Until `--seconds` have passed, each round times a block of `--calls` calls of
gdv, then of onnxruntime (wall time, medians, a short quiet before each block so that neither
engine's idle threads spin into the other's), then runs the probe: a C program (gcc, OpenMP)
in which each of two threads writes half of a 2 MiB buffer and then sums a half, its own
("same") or the other thread's ("cross"), 50 times; it prints the medians in microseconds.

A round whose probe reads the other core's half at least `FAR_RATIO` times slower than its own
is a "far" round (the two vCPUs share no cache level at that moment); the summary gives the
medians of both engines over the near and the far rounds apart. With `--kernels K`, each round
also times a block of calls of the same program built with `gdv profile`'s timers, and the
summary lists the K kernels whose medians differ most between the near and the far rounds
(`kernel_table`): where the far rounds' time goes. Measured on the 2-core Zen 4
VM of the README (2026-12-05, resnet18): near rounds gdv 18.2-18.5 ms, onnxruntime 16.8-17.1,
probe cross 17-19 us against same 14-15; far rounds gdv 23.5-24.1, onnxruntime 17.5-18.1,
probe cross 41-76 us. One thread was unaffected (gdv 34.2-34.8, onnxruntime 33.2-33.7).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

FAR_RATIO = 2.0
"""A round is far when the probe's cross read takes at least this many times its same read."""

PROBE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <omp.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
int main(void) {
  enum { N = 1 << 18, IT = 50 };
  float *a = aligned_alloc(64, 2 * N * sizeof(float));
  double same[IT], cross[IT];
  volatile float sink = 0;
  if (!a) return 1;
  for (long i = 0; i < 2L * N; i++) a[i] = (float)i;
  for (int it = 0; it < IT; it++)
    for (int other = 0; other < 2; other++) {
#pragma omp parallel num_threads(2)
      {
        float *p = a + (long)omp_get_thread_num() * N;
        for (long i = 0; i < N; i++) p[i] = p[i] * 0.5f + 1.0f;
      }
      double t0 = now();
#pragma omp parallel num_threads(2)
      {
        int t = omp_get_thread_num();
        const float *p = a + (long)(other ? 1 - t : t) * N;
        float s = 0;
        for (long i = 0; i < N; i++) s += p[i];
        sink += s;
      }
      (other ? cross : same)[it] = (now() - t0) * 1e6;
    }
  qsort(same, IT, sizeof(double), cmp);
  qsort(cross, IT, sizeof(double), cmp);
  printf("%.2f %.2f\n", same[IT / 2], cross[IT / 2]);
  free(a);
  return 0;
}
"""


def build_probe(work: Path) -> Path:
    """The probe's executable, built in `work` (a clear exit when no gcc is found)."""
    cc = shutil.which(os.environ.get("CC", "gcc"))
    if cc is None:
        raise SystemExit("two_threads: the probe needs a C compiler (gcc, or $CC)")
    src, exe = work / "probe.c", work / "probe"
    src.write_text(PROBE, encoding="utf-8")
    # -ffast-math only lets the probe's own sums vectorise (it times memory, not arithmetic)
    cmd = [cc, "-O3", "-ffast-math", "-fopenmp", "-march=native", str(src), "-o", str(exe)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"two_threads: building the probe failed:\n{done.stderr}")
    return exe


def run_probe(exe: Path) -> tuple[float, float]:
    """The probe's (same, cross) medians in microseconds."""
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=60)
    same, cross = (float(v) for v in out.stdout.split())
    return same, cross


def is_far(same_us: float, cross_us: float) -> bool:
    """Whether a round's probe says the two cores were far apart (`FAR_RATIO`)."""
    return cross_us >= FAR_RATIO * same_us


def summarize(rounds: list[dict]) -> dict:
    """Per kind of round (`near`, `far`; a kind without rounds is left out): the number of
    rounds and the medians of each engine's block medians, with their ratio."""
    summary = {}
    for label, far in (("near", False), ("far", True)):
        part = [r for r in rounds if r["far"] == far]
        if part:
            g, o = (statistics.median(r[k] for r in part) for k in ("gdv", "ort"))
            summary[label] = {"rounds": len(part), "gdv_ms": g, "ort_ms": o, "ratio": g / o}
    return summary


def kernel_table(rounds: list[dict], names: list[str], k: int) -> list[dict]:
    """The `k` timed ops whose medians over the near rounds and over the far rounds differ
    most (each round's `kernels`: one median per op, in `names`' order), largest change
    first; with rounds of one kind only, the `k` slowest. Each row: the op's name, its median
    in ms over the near and the far rounds (None for a kind without rounds) and the change."""
    med: dict[bool, list[float] | None] = {}
    for far in (False, True):
        part = [r["kernels"] for r in rounds if r["far"] == far and "kernels" in r]
        med[far] = [statistics.median(col) for col in zip(*part, strict=True)] if part else None
    near, far = med[False], med[True]
    rows = []
    for q, name in enumerate(names):
        a = near[q] if near else None
        b = far[q] if far else None
        change = b - a if a is not None and b is not None else None
        rows.append({"op": name, "near_ms": a, "far_ms": b, "change_ms": change})
    if near and far:
        rows.sort(key=lambda r: -abs(r["change_ms"]))
    else:
        rows.sort(key=lambda r: -(r["near_ms"] if r["near_ms"] is not None else r["far_ms"]))
    return rows[:k]


def _profiled(keep: dict):
    """The compiled program built again with per-op timers and bound to the same weights:
    (the bound executable, for `gdv.backends.c.profile.run`; the timed ops' names)."""
    from gdv.backends import c
    from gdv.backends.c import profile as pr

    comp = keep["comp"]
    exe = c.Executable(comp.module, comp.options.allow_fallback, profile=True)
    names = [f"{t.op} %{t.value}" for t in pr.timed_ops(exe.lowered)]
    return exe.bind(keep["weights"]), names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--seconds", type=float, default=150.0)
    ap.add_argument("--level", type=int, default=3, choices=(2, 3))
    ap.add_argument("--calls", type=int, default=15, help="calls per engine per round")
    ap.add_argument("--out", default=None, help="JSON file of every round (default: none)")
    ap.add_argument(
        "--kernels",
        type=int,
        default=0,
        help="also time a build with per-op timers; list the K ops that change most when far",
    )
    args = ap.parse_args(argv)
    if args.kernels < 0:
        ap.error(f"--kernels: expected a count of at least 0, got {args.kernels}")
    os.environ["OMP_NUM_THREADS"] = "2"  # before anything loads OpenMP or onnxruntime
    sys.path.insert(0, str(HERE))
    import models as bench  # benchmarks/models.py: the same models, seeds and export

    work = Path(tempfile.mkdtemp(prefix="gdv-two-threads-"))
    probe = build_probe(work)
    keep: dict = {}
    bound, feed, sess, what = bench.bound_pair(
        args.model, "onnx", args.level, work, ort_threads=2, keep=keep
    )
    engines = {"gdv": lambda: bound(**feed), "ort": lambda: sess.run(None, feed)}
    timed, names = _profiled(keep) if args.kernels else (None, [])

    def timed_block() -> list[float]:
        from gdv.backends.c import profile as pr

        time.sleep(0.1)
        ns = pr.run(timed, feed, args.calls, warmup=1).durations()
        return [statistics.median(col) / 1e6 for col in ns.T.tolist()]

    def block(fn) -> float:
        time.sleep(0.1)
        fn()
        times = []
        for _ in range(args.calls):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return statistics.median(times) * 1e3

    rounds = []
    start = time.monotonic()
    print(f"{args.model} ({what}), -O{args.level}, two threads; ms per call, probe in us")
    while time.monotonic() - start < args.seconds:
        row = {k: block(fn) for k, fn in engines.items()}
        if timed is not None:
            row["kernels"] = timed_block()
        row["same_us"], row["cross_us"] = run_probe(probe)
        row["far"] = is_far(row["same_us"], row["cross_us"])
        row["t"] = time.monotonic() - start
        rounds.append(row)
        print(
            f"{row['t']:6.1f}s gdv {row['gdv']:7.2f} ort {row['ort']:7.2f} "
            f"({row['gdv'] / row['ort']:.2f}x)  probe same {row['same_us']:6.1f} "
            f"cross {row['cross_us']:6.1f}{'  far' if row['far'] else ''}",
            flush=True,
        )
    summary = summarize(rounds)
    for label, s in summary.items():
        print(
            f"{label}: {s['rounds']} rounds, gdv {s['gdv_ms']:.2f} ms, ort {s['ort_ms']:.2f} ms, "
            f"{s['ratio']:.3f}x"
        )
    table = kernel_table(rounds, names, args.kernels) if args.kernels else []
    if table:
        print("ops by change from near to far rounds (ms, medians of the rounds' block medians):")

    def ms(v: float | None) -> str:
        return f"{v:7.3f}" if v is not None else "      -"

    for r in table:
        change = f"{r['change_ms']:+7.3f}" if r["change_ms"] is not None else "      -"
        print(f"  near {ms(r['near_ms'])}  far {ms(r['far_ms'])}  {change}  {r['op']}")
    if args.out:
        result = {"model": args.model, "level": args.level, "rounds": rounds, "summary": summary}
        if args.kernels:
            result["kernel_names"], result["kernels"] = names, table
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
