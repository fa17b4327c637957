"""Compile-and-prove time of every example at -O2, cold (empty proof cache) and warm.

    python benchmarks/compile_times.py [--repeat 3] [--jobs N] [--out benchmarks/compile_times.json]

Each figure is the median of `--repeat` runs of `gdv.driver.compile_module` in this process;
cold runs use a fresh cache directory each time, warm runs reuse one filled by a first run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from gdv.driver import CompileOptions, compile_module

ROOT = Path(__file__).resolve().parent.parent


def _time(path: str, opts: CompileOptions) -> tuple[float, int, str]:
    start = time.perf_counter()
    comp = compile_module(path, opts)
    return time.perf_counter() - start, len(comp.outcomes), comp.verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "compile_times.json"))
    args = parser.parse_args()
    rows = []
    for path in sorted((ROOT / "examples").glob("*.gdv")):
        cold, warm = [], []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as cache:
                opts = CompileOptions(level=2, jobs=args.jobs, cache_dir=cache)
                t, n, verdict = _time(str(path), opts)
                cold.append(t)
        with tempfile.TemporaryDirectory() as cache:
            opts = CompileOptions(level=2, jobs=args.jobs, cache_dir=cache)
            _time(str(path), opts)
            for _ in range(args.repeat):
                warm.append(_time(str(path), opts)[0])
        rows.append(
            {
                "example": path.name,
                "obligations": n,
                "verdict": verdict,
                "cold_s": statistics.median(cold),
                "warm_s": statistics.median(warm),
            }
        )
    print(f"{'example':<22} {'obligations':>11} {'verdict':>8} {'cold s':>8} {'warm s':>8}")
    for r in rows:
        print(
            f"{r['example']:<22} {r['obligations']:>11} {r['verdict']:>8} "
            f"{r['cold_s']:>8.2f} {r['warm_s']:>8.2f}"
        )
    result = {
        "command": "python benchmarks/compile_times.py",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "repeat": args.repeat,
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
