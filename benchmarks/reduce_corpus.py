"""Issue 18's acceptance figures for `gdv reduce`, on the corpus of tests/fuzzing/corpus.py
(10 layered programs of 64 to 992 ops, each with a wrong external pass that the proof
refutes) and three seeded bugs of `gdv selftest --mutants` in gdv's own passes, on layered
programs of 480 to 800 ops: per case the reduced ops and largest dim, whether the signature
is kept, whether the result is 1-minimal (removing any one remaining op, its uses rerouted
to a parameter, loses the signature), and the seconds it took.

    python benchmarks/reduce_corpus.py [--jobs N] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fuzzing"))

from corpus import cases  # noqa: E402

from gdv.fuzzing.reduce import dead_code, keep_ops, reduce_case  # noqa: E402
from gdv.fuzzing.signature import Case, CaseOptions, observe, parse_case_text  # noqa: E402
from gdv.ir.core import Module  # noqa: E402


def one_minimal(case: Case, signature: str) -> bool:
    """No single remaining op can go (rerouted to a parameter) with the signature kept."""
    fn = case.modules[0].entry
    for i in range(len(fn.ops)):
        smaller, _ = keep_ops(fn, set(range(len(fn.ops))) - {i})
        smaller = dead_code(smaller)
        cand = Case([Module([smaller], "<minimal>")], None, case.options)
        if observe(cand, signature) == signature:
            return False
    return True


MUTANT_CASES = (("swapped-operands", 30), ("off-by-one-extent", 40), ("overlapping-buffers", 50))
"""Seeded bugs of `gdv selftest --mutants` in gdv's own passes, on layered programs of that
many blocks (16 ops each): the failing compile is reduced with the mutant in place."""


def _cases():
    import contextlib

    from corpus import layered

    from gdv.fuzzing.mutants import MUTANTS

    for name, text, cmd in cases():
        yield name, text, CaseOptions(external_passes=(cmd,)), contextlib.nullcontext
    for k, (mutant, blocks) in enumerate(MUTANT_CASES):
        yield (
            f"mutant-{mutant}-{blocks * 16}ops",
            layered(blocks, seed=20 + k),
            CaseOptions(),
            (MUTANTS[mutant].patch),
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", metavar="OUT.json")
    args = ap.parse_args()
    rows = []
    for name, text, options, patch in _cases():
        case = Case(parse_case_text(text, name), None, options)
        with patch():
            sig = observe(case)
            result = reduce_case(case, sig, jobs=args.jobs)
            kept = observe(result.case, sig) == sig
            minimal = one_minimal(result.case, sig)
        seconds = result.seconds  # the reduction alone, not the checks after it
        row = {
            "case": name,
            "signature": sig,
            "ops_before": case.ops,
            "ops_after": result.case.ops,
            "largest_dim_before": case.largest_dim,
            "largest_dim_after": result.case.largest_dim,
            "kept": kept,
            "one_minimal": minimal,
            "tests": result.tests,
            "seconds": round(seconds, 1),
        }
        rows.append(row)
        print(
            f"{name:34s} {sig[:40]:40s} {row['ops_before']:5d} -> {row['ops_after']:2d} ops, dim "
            f"{row['largest_dim_before']} -> {row['largest_dim_after']}, kept {row['kept']}, "
            f"1-minimal {row['one_minimal']}, {row['tests']} tests, {row['seconds']} s",
            flush=True,
        )
    summary = {
        "cases": len(rows),
        "median_ops": statistics.median(r["ops_after"] for r in rows),
        "median_largest_dim": statistics.median(r["largest_dim_after"] for r in rows),
        "kept": sum(r["kept"] for r in rows) / len(rows),
        "one_minimal": sum(r["one_minimal"] for r in rows) / len(rows),
        "max_seconds": max(r["seconds"] for r in rows),
    }
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
