"""Tightness of the error bounds on the example workloads: bound / worst observed error.

For each examples/*.gdv: the rigorous bound and the probabilistic companion of `gdv bounds`,
and the largest error measured (exact mode against the f64 ideal mode of the reference backend)
over seeded inputs of every family in gdv.validate.bounds.measure (random, range ends, aligned,
near-constant, near-underflow). A ratio below 1 would be a soundness bug (the tests forbid it).

    python benchmarks/bounds_tightness.py [--seeds N] [EXAMPLE.gdv ...]
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from gdv.api import load
from gdv.validate.bounds import analyze
from gdv.validate.bounds.measure import KINDS, make_inputs, output_errors

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="workloads (default: examples/*.gdv)")
    parser.add_argument("--seeds", type=int, default=10, help="seeds per input family")
    args = parser.parse_args()
    files = [Path(f) for f in args.files] or sorted((ROOT / "examples").glob("*.gdv"))
    header = (
        f"| {'workload':<16} | {'rigorous':>9} | {'prob.':>9} | {'worst seen':>10} | "
        f"{'worst family':<12} | {'rig/seen':>9} | {'prob/seen':>9} | {'P(fail)':>8} | "
        f"{'analyze':>8} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    for path in files:
        module = load(str(path))
        start = time.perf_counter()
        result = analyze(module)
        elapsed = time.perf_counter() - start
        for i, out in enumerate(result.outputs):
            worst, family = 0.0, "-"
            for kind in KINDS:
                for seed in range(args.seeds):
                    try:
                        inputs = make_inputs(module.entry, kind, seed)
                    except ValueError:
                        continue
                    measured = output_errors(module, inputs)[i][0]
                    if measured > worst:
                        worst, family = measured, kind
            ratio = out.abs / worst if worst else math.inf
            pratio = out.prob_abs / worst if worst else math.inf
            name = path.stem if len(result.outputs) == 1 else f"{path.stem}[{i}]"
            print(
                f"| {name:<16} | {out.abs:9.2e} | {out.prob_abs:9.2e} | {worst:10.2e} | "
                f"{family:<12} | {ratio:9.3g} | {pratio:9.3g} | {result.prob_failure:8.1e} | "
                f"{elapsed * 1000:6.0f}ms |"
            )


if __name__ == "__main__":
    main()
