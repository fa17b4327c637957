"""Tightness of the error bounds on the example workloads: bound / worst observed error.

For each examples/*.gdv: the rigorous bound and the probabilistic companion of `gdv bounds`,
and the largest error measured (exact mode against the f64 ideal mode of the reference backend)
by `gdv.validate.bounds.measure.worst_error`: every adversarial input family, each parameter
from its own family, then a hill climb maximising the error, all within the declared ranges.
A rigorous ratio below 1 would be a soundness bug (the tests forbid it). The probabilistic
companion bounds every input in the ranges but models the rounding errors as random
(Higham-Mary); the search's inputs are built to line the roundings up, so they may exceed it.
For scale, `random` is the worst error on uniformly random inputs (RANDOM_SEEDS of them), and
`prob/rand` the companion over it. The table also goes to benchmarks/bounds_tightness.json.
The default budget takes about 8 minutes on one core; the attention example needs most of it
(its worst inputs, near-constant rows of x beside full ones and weights with alike columns,
come from a coherent draw of the `rows` and `rank1` families and thousands of climb steps; with
seeds 0 to 3 the search finds 16.7, 22.7, 19.1 and 19.5).

    python benchmarks/bounds_tightness.py [--budget RUNS] [--seed S] [EXAMPLE.gdv ...]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from gdv.api import load
from gdv.validate.bounds import analyze
from gdv.validate.bounds.measure import make_inputs, output_errors, worst_error

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "bounds_tightness.json"
RANDOM_SEEDS = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="workloads (default: examples/*.gdv)")
    parser.add_argument("--budget", type=int, default=10000, help="program runs per output")
    parser.add_argument("--seed", type=int, default=0, help="the search's seed")
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS.name}")
    args = parser.parse_args()
    files = [Path(f) for f in args.files] or sorted((ROOT / "examples").glob("*.gdv"))
    header = (
        f"| {'workload':<16} | {'rigorous':>9} | {'prob.':>9} | {'worst seen':>10} | "
        f"{'found by':<16} | {'rig/seen':>9} | {'prob/seen':>9} | {'random':>9} | "
        f"{'prob/rand':>9} | {'P(fail)':>8} | {'analyze':>8} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    rows = []
    for path in files:
        module = load(str(path))
        start = time.perf_counter()
        result = analyze(module)
        elapsed = time.perf_counter() - start
        for i, out in enumerate(result.outputs):
            worst, how, _ = worst_error(module, i, budget=args.budget, seed=args.seed)
            ratio = out.abs / worst if worst > 0 else math.inf
            pratio = out.prob_abs / worst if worst > 0 else math.inf
            rand = max(
                output_errors(module, make_inputs(module.entry, "random", seed))[i][0]
                for seed in range(RANDOM_SEEDS)
            )
            rratio = out.prob_abs / rand if rand > 0 else math.inf
            name = path.stem if len(result.outputs) == 1 else f"{path.stem}[{i}]"
            print(
                f"| {name:<16} | {out.abs:9.2e} | {out.prob_abs:9.2e} | {worst:10.2e} | "
                f"{how:<16} | {ratio:9.3g} | {pratio:9.3g} | {rand:9.2e} | {rratio:9.3g} | "
                f"{result.prob_failure:8.1e} | "
                f"{elapsed * 1000:6.0f}ms |",
                flush=True,
            )
            rows.append(
                {
                    "workload": name,
                    "rigorous": out.abs,
                    "probabilistic": out.prob_abs,
                    "probabilistic_lambda": result.prob_lambda,
                    "probabilistic_failure": result.prob_failure,
                    "worst_observed": worst,
                    "found_by": how,
                    "rigorous_over_observed": ratio,
                    "probabilistic_over_observed": pratio,
                    "worst_random": rand,
                    "probabilistic_over_random": rratio,
                }
            )
    if not args.no_write and not args.files:
        command = "python benchmarks/bounds_tightness.py " + " ".join(sys.argv[1:])
        record = {"command": command.strip(), "budget": args.budget, "seed": args.seed}
        RESULTS.write_text(json.dumps({**record, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
