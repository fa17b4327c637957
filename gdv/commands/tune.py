"""`gdv tune [--isa ISA] [--size N] [--runs R] [--json]`: measure the C target's product
micro-kernel and blocking on this machine and store the fastest (`gdv.tune`)."""

from __future__ import annotations

import argparse
import json
import os

from gdv.commands import positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "tune",
        help="time a few product micro-kernels and blockings of the C target on this machine "
        "and store the fastest (used by compiles with GDV_C_AUTOTUNE=1)",
    )
    p.add_argument(
        "--isa",
        default=None,
        metavar="ISA",
        help="the host class to tune for: native, avx512, avx2 or sse2 (default: $GDV_C_ISA, "
        "else native)",
    )
    p.add_argument(
        "--size",
        type=positive_int,
        default=1024,
        metavar="N",
        help="the N x N x N f32 product timed (default 1024)",
    )
    p.add_argument(
        "--runs", type=positive_int, default=5, metavar="R", help="timed runs per candidate"
    )
    p.add_argument("--json", action="store_true", help="print the stored record as JSON")
    p.set_defaults(handler=tune_command)


def tune_command(args: argparse.Namespace) -> int:
    from gdv.backends.c.isa import ISA_ENV, check
    from gdv.backends.c.tuning import AUTOTUNE_ENV
    from gdv.tune import tune

    if args.isa:
        os.environ[ISA_ENV] = check(args.isa, "<command line>")
    log = None if args.json else print
    if log:
        log(f"gdv tune: {args.size}^3 f32 product, {args.runs} timed runs per candidate")
    record = tune(args.size, args.runs, log)
    if args.json:
        print(json.dumps(record, indent=1))
        return 0
    choice = record["choice"]["f32"]
    print(
        f"fastest: MR {choice['mr']} NV {choice['nv']} KC {choice['kc']} MC {choice['mc']} "
        f"NC {choice['nc']} ({record['isa']}); stored in {record['path']}\n"
        f"compiles use it with {AUTOTUNE_ENV}=1"
    )
    return 0
