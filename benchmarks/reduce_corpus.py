"""Issue 18's acceptance figures for `gdv reduce`, on three kinds of case:

- the corpus of tests/fuzzing/corpus.py: 10 layered programs of 64 to 1,120 ops, each with a
  wrong external pass (tests/fuzzing/wrong_pass.py) that the proof refutes;
- four seeded bugs of `gdv selftest --mutants` on layered programs of 160 to 800 ops: three in
  gdv's own passes (refuted proofs) and one in the C printer (a `mismatch:c` run);
- the real all-MiniLM-L6-v2 sentence encoder imported through ONNX (708 ops, 22M weights as
  parameters), with the wrong external pass `swap-sub` (skipped with a note where torch, onnx
  or the model package are missing). Its layers stacked twice do not make a 12-layer case:
  the ONNX export of shared layers inlines their weights as constants (233M characters of
  text, past the parser's 64M limit).

Per case: the reduced ops and largest dim, whether the signature is kept, whether the result
is 1-minimal (removing any one remaining op, its uses rerouted to a parameter, loses the
signature), the candidates tested and the seconds the reduction took.

    HF_HUB_OFFLINE=1 python benchmarks/reduce_corpus.py [--jobs N] [--json OUT.json] [--no-minilm]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fuzzing"))
sys.path.insert(0, str(ROOT / "benchmarks"))

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


MUTANT_CASES = (
    ("swapped-operands", 30),
    ("off-by-one-extent", 40),
    ("overlapping-buffers", 50),
    ("c-swapped-operands", 10),
)
"""Seeded bugs of `gdv selftest --mutants`, on layered programs of that many blocks (16 ops
each): the failing compile is reduced with the mutant in place. The C printer's mutant is on
the smallest: its `mismatch:c` needs a run whose difference exceeds the rigorous bounds, and
those grow with depth (at 30 blocks the bound under [-1, 1] is 5.9, the swap's effect 2.2)."""


def minilm_text() -> str:
    """all-MiniLM-L6-v2 imported through ONNX, as text."""
    import tempfile

    from minilm import load_encoder
    from models import export_onnx

    import gdv
    from gdv.ir.printer import print_module

    encoder, inputs = load_encoder()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "minilm.onnx")
        export_onnx(encoder, inputs, path)
        module, _ = gdv.import_onnx(path)
    return print_module(module)


def _cases(with_minilm: bool = True):
    import contextlib

    from corpus import WRONG_PASS, layered

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
    if not with_minilm:
        return
    try:
        texts = [("minilm-6-layers-swap-sub", minilm_text())]
    except ImportError as e:
        print(f"(MiniLM cases skipped: {e.name} is not installed)", flush=True)
        return
    cmd = f"{sys.executable} {WRONG_PASS} swap-sub"
    for name, text in texts:
        yield name, text, CaseOptions(external_passes=(cmd,)), contextlib.nullcontext


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", metavar="OUT.json")
    ap.add_argument("--no-minilm", action="store_true", help="only the synthetic cases")
    args = ap.parse_args()
    rows = []
    for name, text, options, patch in _cases(not args.no_minilm):
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
