"""`gdv selftest --mutants [--only NAME...] [--json] [--jobs N] [--no-control]`: gdv's own passes
and C printer built with seeded bugs (`gdv.fuzzing.mutants`), and which check catches each:
the proof (a refuted obligation whose counterexample replays), conformance (the C program
against the reference backend on the source) or bounds (the error against the rigorous bound).

Exit status: 0 when every mutant is caught (and the unmutated programs pass every check), 1
otherwise, 3 for an unknown mutant name or bad usage."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from gdv.commands import positive_int
from gdv.ir.diagnostics import IRError, Loc

_DETAIL = 110


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `gdv selftest` to the command line."""
    p = subparsers.add_parser(
        "selftest",
        help="build gdv's passes and C printer with seeded bugs and report which check catches "
        "each (0 all caught, 1 not, 3 error)",
    )
    p.add_argument(
        "--mutants",
        action="store_true",
        help="run the mutants (seeded bugs) and print the mutation score",
    )
    p.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help="run only these mutants (see --list)",
    )
    p.add_argument("--list", action="store_true", help="list the mutants and exit")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=None,
        metavar="N",
        help="mutants run at once, each in its own process (default: all cores)",
    )
    p.add_argument(
        "--no-control",
        action="store_true",
        help="skip the control run (the same programs with no mutation must pass every check)",
    )
    p.set_defaults(handler=selftest)


def _loc() -> Loc:
    return Loc("<command line>", 1, 1)


def selftest(args: argparse.Namespace) -> int:
    from gdv.fuzzing import mutants

    if args.list:
        for m in mutants.MUTANTS.values():
            print(f"{m.name}: {m.where}: {m.breaks} (meant for: {m.expected})")
        return 0
    if not args.mutants:
        raise IRError("gdv selftest: nothing to do (pass --mutants, or --list)", _loc())
    names = list(mutants.MUTANTS) if not args.only else list(dict.fromkeys(args.only))
    unknown = [n for n in names if n not in mutants.MUTANTS]
    if unknown:
        raise IRError(
            f"unknown mutant {', '.join(repr(n) for n in unknown)}; the mutants are: "
            f"{', '.join(mutants.MUTANTS)}",
            _loc(),
        )
    jobs = args.jobs or os.cpu_count() or 1
    control = not args.no_control
    start = time.perf_counter()
    reports = mutants.run_many([""] * control + names, jobs)
    seconds = time.perf_counter() - start
    control_report = reports[0] if control else None
    reports = reports[1:] if control else reports
    caught, total, percent = mutants.score(reports)
    clean = control_report is None or not control_report.findings
    if args.json:
        print(
            json.dumps(
                {
                    "mutants": [r.to_json() for r in reports],
                    "control": None if control_report is None else control_report.to_json(),
                    "caught": caught,
                    "total": total,
                    "score": percent,
                    "seconds": round(seconds, 3),
                },
                indent=1,
            )
        )
    else:
        _print_table(reports, control_report, caught, total, percent, seconds)
    return 0 if caught == total and clean else 1


def _print_table(reports, control, caught: int, total: int, percent: float, seconds: float) -> None:
    rows = [("mutant", "where", "caught by", "detail")]
    for r in reports:
        by = ", ".join(r.caught_by) if r.caught else "NOT CAUGHT"
        if r.caught and r.first != r.expected:
            by += f" (meant for {r.expected})"
        first = next((f for f in r.findings if f.check == r.first), None)
        detail = f"[{first.program}] {first.detail}" if first else r.error or "-"
        if len(detail) > _DETAIL:
            detail = detail[: _DETAIL - 3] + "..."
        rows.append((r.mutant, r.where, by, detail))
    widths = [max(len(row[k]) for row in rows) for k in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True)), row[3])
    for r in reports:
        for n in r.notes:
            print(f"note ({r.mutant}): {n}")
    if control is not None:
        if control.findings:
            print("control: the unmutated programs FAIL a check (every catch is suspect):")
            for f in control.findings:
                print(f"  {f.check} [{f.program}] {f.detail}")
        else:
            print("control: the unmutated programs pass the proof, conformance and bounds checks")
        for n in control.notes:
            print(f"note (control): {n}")
    gaps = [r for r in reports if r.caught and r.first != r.expected]
    for r in gaps:
        print(f"gap: {r.mutant} is meant for the {r.expected} check but caught first by {r.first}")
    print(f"mutation score: {caught}/{total} ({percent:.0f}%)  [{seconds:.1f} s]")
    sys.stdout.flush()
