"""`gdv fuzz [--seed S] [--count N | --time T] [--ops ...] [--out DIR]`: random programs at
every level for every target, against the reference backend (issue 18).

Exit statuses: 0 no failure; 1 failures (each reduced into --out); 3 input error."""

from __future__ import annotations

import argparse
import json
import sys

from gdv.commands import positive_int, seconds
from gdv.ir.diagnostics import IRError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "fuzz", help="random well-typed programs at every level and target vs the reference"
    )
    p.add_argument("--seed", type=int, default=0, help="the first seed (default 0)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--count", type=positive_int, metavar="N", help="programs to check")
    how.add_argument("--time", type=seconds, metavar="T", help="seconds to fuzz for")
    p.add_argument("--ops", default=None, metavar="A,B", help="only these ops (default all)")
    p.add_argument("--targets", default=None, metavar="T,U", help="default: every target")
    p.add_argument("--levels", default="0,1,2,3", metavar="0,1,2,3", help="levels to compile")
    p.add_argument("--max-ops", type=positive_int, default=6, metavar="N", help="ops a program")
    p.add_argument("--out", default="fuzz-failures", metavar="DIR", help="reduced failures")
    p.add_argument("--no-reduce", action="store_true", help="report failures without reducing")
    p.add_argument("--timeout", type=seconds, default=10.0, metavar="S", help="per query")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=fuzz_command)


def _list(text: str | None) -> list[str] | None:
    return None if text is None else [w.strip() for w in text.split(",") if w.strip()]


def fuzz_command(args: argparse.Namespace) -> int:
    try:
        from gdv.fuzzing import programs
    except ModuleNotFoundError as e:
        raise IRError(
            f"gdv fuzz needs {e.name} (pip install 'gdv[test]' or pip install hypothesis)"
        ) from None
    from gdv.fuzzing.fuzz import fuzz
    from gdv.ir.targets import TARGET_NAMES

    ops = _list(args.ops)
    unknown = sorted(set(ops or ()) - set(programs.OPS))
    if unknown:
        raise IRError(
            f"--ops: cannot generate {', '.join(unknown)} (available: {', '.join(programs.OPS)})"
        )
    targets = _list(args.targets)
    bad = sorted(set(targets or ()) - set(TARGET_NAMES))
    if bad:
        raise IRError(f"--targets: unknown {', '.join(bad)} (available: {', '.join(TARGET_NAMES)})")
    try:
        levels = [int(x) for x in _list(args.levels) or []]
    except ValueError:
        raise IRError(f"--levels: expected levels like 0,1,2,3, got {args.levels!r}") from None
    if not levels or any(lv not in (0, 1, 2, 3) for lv in levels):
        raise IRError(f"--levels: each of 0, 1, 2, 3, got {args.levels!r}")
    count = args.count if args.count or args.time else 20

    def progress(report) -> None:
        if sys.stderr.isatty() and not args.json:
            sys.stderr.write(
                f"\rfuzz: {report.programs} programs, {report.checks} compiles, "
                f"{len(report.failures)} failures"
            )
            sys.stderr.flush()

    report = fuzz(
        seed=args.seed,
        count=None if args.time else count,
        seconds=args.time,
        ops=ops,
        targets=targets,
        levels=levels,
        out=args.out,
        reduce=not args.no_reduce,
        max_ops=args.max_ops,
        timeout=args.timeout,
        progress=progress,
    )
    if sys.stderr.isatty() and not args.json:
        sys.stderr.write("\n")
    print(json.dumps(report.to_json(), indent=2) if args.json else report.table())
    return 1 if report.failures else 0
