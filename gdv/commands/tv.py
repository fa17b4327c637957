"""`gdv tv A B [--real] [--timeout S] [--json] [--cex CEX.npz]`: translation validation.

Modeled on Alive2's alive-tv: a verdict line, and for a refutation an "Example:" block with the
inputs, the output, the index and both values. Exit status (IR_SPEC.md section 6): 0
equivalent, 1 not equivalent (a counterexample confirmed on the reference backend), 2 unknown,
3 input error.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

import numpy as np

from gdv.commands import seconds
from gdv.commands.basic import load_arg
from gdv.ir.core import Function
from gdv.ir.diagnostics import IRError, Loc

EXIT = {"equivalent": 0, "not-equivalent": 1, "unknown": 2}
_SHOW_ELEMENTS = 16
_JSON_ELEMENTS = 4096


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `gdv tv` to the command line."""
    p = subparsers.add_parser(
        "tv",
        help="translation validation: is B equivalent to A? (0 yes, 1 no, 2 unknown, 3 error)",
    )
    p.add_argument("a", metavar="A", help="the source program (.gdv)")
    p.add_argument("b", metavar="B", help="the target program (.gdv)")
    p.add_argument("--real", action="store_true", help="compare over the reals (IR_SPEC.md 5)")
    p.add_argument(
        "--timeout", type=seconds, default=10.0, metavar="S", help="seconds per solver query"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--cex",
        metavar="CEX.npz",
        help="write the counterexample's inputs, keyed by A's parameter names (bf16 as raw "
        "2-byte values, as `gdv run --inputs` reads them)",
    )
    p.set_defaults(handler=tv)


def format_value(x: Any) -> str:
    """A scalar as the IR writes it: -0.0, nan, inf and integers exactly."""
    a = np.asarray(x)
    if a.dtype == np.bool_:
        return "true" if bool(a) else "false"
    if a.dtype.kind in "iu":
        return str(int(a))
    f = float(a.astype(np.float64))
    if math.isnan(f):
        return "nan"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return repr(f) if a.dtype == np.float64 else str(a[()])


def _format_array(a: np.ndarray) -> str:
    flat = a.reshape(-1)
    shown = ", ".join(format_value(v) for v in flat[:_SHOW_ELEMENTS])
    more = f", ... ({flat.size} elements)" if flat.size > _SHOW_ELEMENTS else ""
    return shown if a.ndim == 0 else f"[{shown}{more}]"


def _write_cex(path: str, inputs: dict[str, np.ndarray]) -> None:
    from gdv.commands.run import _write_npz_atomically

    # np.savez stores bf16 arrays as raw 2-byte values (dtype |V2), which `gdv run --inputs`
    # views back as bf16: the file feeds straight into `gdv run`.
    _write_npz_atomically(path, inputs)


def tv(args: argparse.Namespace) -> int:
    """Run `gdv tv`; with --json an input error also prints verdict "error"."""
    try:
        return _tv(args)
    except IRError as e:
        if not args.json:
            raise
        print(json.dumps({"verdict": "error", "error": str(e)}, indent=2))
        print(e, file=sys.stderr)
        return 3


def _tv(args: argparse.Namespace) -> int:
    from gdv.validate.equivalence import check_equivalence, entry
    from gdv.validate.spmd import check_spmd_equivalence, is_spmd, spmd_pair

    if not args.timeout > 0:
        raise IRError("--timeout must be a positive number of seconds", Loc("<command line>", 1, 1))
    ma, mb = load_arg(args.a), load_arg(args.b)
    fa, fb = entry(ma), entry(mb)
    theory = "real" if args.real else "fp"
    if is_spmd(mb):
        # B is an SPMD function: the claim is that every rank's result block equals A's
        # result there (docs/IR_SPEC.md section 7); results compare stacked per rank.
        fa, fb = spmd_pair(ma, mb)
        result = check_spmd_equivalence(ma, mb, theory, args.timeout)
    else:
        result = check_equivalence(ma, mb, theory, args.timeout, names=(args.a, args.b))
    cex = result.counterexample
    if cex is not None and args.cex:
        _write_cex(args.cex, cex.inputs)
    if args.json:
        print(json.dumps(to_json(result, fa), indent=2))
    else:
        print_report(result, fa, fb, args)
    return EXIT[result.verdict]


def to_json(result, fa: Function) -> dict[str, Any]:
    """The result as one JSON object; scalar values are strings in the IR's spelling."""
    obj: dict[str, Any] = {
        "verdict": result.verdict,
        "theory": result.theory,
        "reason": result.reason,
        "outputs": [
            {"output": f"out{i}", "type": str(t), "verdict": v}
            for i, (t, v) in enumerate(zip(fa.results, result.output_verdicts, strict=False))
        ],
        "queries": [
            {
                "output": f"out{q.output}",
                "stage": q.stage,
                "result": q.result,
                "seconds": round(q.seconds, 6),
            }
            for q in result.queries
        ],
        "seconds": round(result.seconds, 6),
    }
    cex = result.counterexample
    if cex is not None:
        obj["counterexample"] = {
            "output": f"out{cex.output}",
            "index": list(cex.index),
            "source_value": format_value(cex.value_a),
            "target_value": format_value(cex.value_b),
            "origin": cex.origin,
            "inputs": {
                p.name: {
                    "type": str(p.type),
                    "values": [format_value(v) for v in cex.inputs[p.name].reshape(-1)]
                    if cex.inputs[p.name].size <= _JSON_ELEMENTS
                    else None,
                }
                for p in fa.params
            },
        }
    return obj


def print_report(result, fa: Function, fb: Function, args: argparse.Namespace) -> None:
    """Alive2-style text: the checked pair, per-output results, the verdict, an Example."""
    theory = "real (floats as reals)" if result.theory == "real" else "fp (bit-exact IEEE)"
    print("----------------------------------------")
    print(f"@{fa.name} ({args.a})  =>  @{fb.name} ({args.b})")
    print(f"theory: {theory}")
    for i, (t, v) in enumerate(zip(fa.results, result.output_verdicts, strict=False)):
        secs = sum(q.seconds for q in result.queries if q.output == i)
        print(f"  out{i} : {t} ... {v} ({secs:.3f}s)")
    print()
    if result.verdict == "equivalent":
        print("Transformation seems to be correct!")
        return
    if result.verdict == "unknown":
        print("Transformation could not be verified (unknown): " + result.reason)
        print("ERROR: unknown is never a proof")
        return
    cex = result.counterexample
    t = fa.results[cex.output]
    print("Transformation doesn't verify!")
    print(f"ERROR: Value mismatch in out{cex.output}")
    print()
    print(f"Example ({cex.origin}):")
    for p in fa.params:
        print(f"  %{p.name} : {p.type} = {_format_array(cex.inputs[p.name])}")
    print()
    where = ", ".join(map(str, cex.index))
    mesh = getattr(fa, "mesh", None)
    if mesh is not None:  # an SPMD claim: stacked results, the rank's coordinates first
        k = len(mesh.shape)
        rank = ", ".join(f"{a}={c}" for a, c in zip(mesh.names, cex.index[:k], strict=True))
        local = ", ".join(map(str, cex.index[k:]))
        where += f"] (rank {rank} of mesh @{mesh.name}, local index [{local}])"
        print(f"Output out{cex.output} : {t} (stacked per rank) at index [{where}:")
    else:
        print(f"Output out{cex.output} : {t} at index [{where}]:")
    print(f"  Source value: {format_value(cex.value_a)}")
    print(f"  Target value: {format_value(cex.value_b)}")
    if args.cex:
        print(f"\nwrote the inputs to {args.cex}")
    sys.stdout.flush()
