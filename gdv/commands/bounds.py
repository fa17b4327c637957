"""`gdv bounds FILE [--json] [--target T] [--default-range LO HI]`: error bounds per output."""

from __future__ import annotations

import argparse
import json
import math

from gdv.commands import finite_float
from gdv.commands.basic import load_arg
from gdv.ir.diagnostics import IRError, Loc
from gdv.ir.targets import TARGET_NAMES, target_info

TARGETS = TARGET_NAMES
"""The targets (`gdv.ir.targets`: plain data, so that `--help` needs no import of the analysis
or of any backend)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bounds", help="rigorous floating-point error bound of each output of @main"
    )
    p.add_argument("file", help="a .gdv file, or - for standard input")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--target",
        default="reference",
        help="the target whose reduction orders and transcendental functions to assume: "
        "reference (default) or c (gdv's f32 exp/tanh/erf/sigmoid)",
    )
    p.add_argument(
        "--default-range",
        nargs=2,
        type=finite_float,
        metavar=("LO", "HI"),
        help="range of float parameters that declare none (otherwise an error)",
    )
    p.add_argument(
        "--ulps",
        type=float,
        default=None,
        help="transcendental accuracy to assume, in ulps (default 4)",
    )
    p.add_argument(
        "--lambda",
        dest="lam",
        type=float,
        default=None,
        help="lambda of the probabilistic companion (default 7)",
    )
    p.add_argument(
        "--values",
        action="store_true",
        help="also print every value of @main (interval and error bound), to see which op "
        "dominates",
    )
    p.set_defaults(handler=bounds)


def _num(x: float) -> str:
    return f"{x:.6g}" if math.isfinite(x) else str(x)


def bounds(args: argparse.Namespace) -> int:
    from gdv.validate.bounds import DEFAULT_LAMBDA, DEFAULT_ULPS, analyze
    from gdv.validate.bounds.program import PROB_MODEL

    target_info(args.target, Loc("<command line>", 1, 1))
    default = None
    if args.default_range is not None:
        lo, hi = args.default_range
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
            raise IRError(
                f"--default-range {lo} {hi}: need finite LO <= HI", Loc("<command line>", 1, 1)
            )
        default = (lo, hi)
    ulps = DEFAULT_ULPS if args.ulps is None else args.ulps
    lam = DEFAULT_LAMBDA if args.lam is None else args.lam
    if not (ulps >= 0 and math.isfinite(ulps)) or not (lam > 0 and math.isfinite(lam)):
        raise IRError("--ulps must be >= 0 and --lambda > 0", Loc("<command line>", 1, 1))
    module = load_arg(args.file)
    result = analyze(module, default, ulps=ulps, lam=lam, target=args.target)
    if args.json:
        data = result.to_json()
        data["target"] = args.target
        print(json.dumps(data, indent=2, allow_nan=False))  # strict JSON: unbounded is null
        return 0
    for i, o in enumerate(result.outputs):
        print(
            f"out{i} (%{o.name}: {o.type}): exact values in [{_num(o.interval[0])}, "
            f"{_num(o.interval[1])}]"
        )
        print(f"  abs error <= {_num(o.abs)}  (rigorous)")
        print(f"           = {o.expr}")
        if o.reason:
            print(f"  unbounded: {o.reason}")
        if o.rel is not None:
            print(f"  rel error <= {_num(o.rel)}")
        print(
            f"  abs error <= {_num(o.prob_abs)}  (probabilistic, lambda = {result.prob_lambda:g}:"
            f" fails with probability <= {result.prob_failure:.3g})"
        )
        if o.specials:
            print(f"  may be {', '.join(o.specials)} (where the exact program is too)")
    symbols = ", ".join(
        f"{k} = 2^{round(math.log2(v))}" for k, v in sorted(result.to_json()["symbols"].items())
    )
    print(f"symbols: {symbols}")
    print("assumptions:")
    for a in result.assumptions:
        print(f"  - {a}")
    print(f"probabilistic model: {PROB_MODEL}")
    for n in result.notes:
        print(f"note: {n}")
    if args.values:
        print("values:")
        fn = module.entry
        for name in [p.name for p in fn.params] + [op.result for op in fn.ops]:
            tb = result.values[name]
            bound = f"{_num(tb.err.value)} = {tb.err.sympy()}" if tb.err.finite else "inf"
            print(f"  %{name}: {tb.type} in [{_num(tb.lo)}, {_num(tb.hi)}], error <= {bound}")
    return 0
