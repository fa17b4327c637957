"""`gdv targets [--json]` and `gdv capabilities --target T [--json] [--remeasure]`."""

from __future__ import annotations

import argparse
import json

from gdv.backends.capabilities import descriptor
from gdv.ir.targets import DEFAULT_TARGET, TARGET_NAMES


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("targets", help="list the targets gdv can compile for")
    p.add_argument("--json", action="store_true", help="one JSON object per target, as a list")
    p.set_defaults(handler=targets)
    p = subparsers.add_parser(
        "capabilities", help="print a target's capability descriptor (ops, dtypes, machine)"
    )
    p.add_argument(
        "--target",
        default=DEFAULT_TARGET,
        help=f"the target (default {DEFAULT_TARGET}; see `gdv targets`)",
    )
    p.add_argument("--json", action="store_true", help="the descriptor as JSON")
    p.add_argument(
        "--remeasure",
        action="store_true",
        help="measure the machine's peak FLOP/s and bandwidth again instead of the cached values",
    )
    p.set_defaults(handler=capabilities)


def targets(args: argparse.Namespace) -> int:
    rows = []
    for name in TARGET_NAMES:
        d = descriptor(name, measure=False)
        rows.append(
            {
                "name": name,
                "description": d["description"],
                "available": d["available"]["ok"],
                "reason": d["available"]["reason"],
                "default": name == DEFAULT_TARGET,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        mark = "*" if r["default"] else " "
        state = "" if r["available"] else f"  [unavailable: {r['reason']}]"
        print(f"{mark} {r['name']:<{width}}  {r['description']}{state}")
    print("(* the default target of `gdv compile`)")
    return 0


def capabilities(args: argparse.Namespace) -> int:
    d = descriptor(args.target, measure=True, refresh=args.remeasure)
    if args.json:
        print(json.dumps(d, indent=2, sort_keys=True))
        return 0
    print(f"target {d['name']} (gdv {d['version']}, {d['schema']}): {d['description']}")
    if not d["available"]["ok"]:
        print(f"unavailable: {d['available']['reason']}")
    print(f"ops ({len(d['ops'])}): {', '.join(d['ops'])}")
    for op, reason in d["unsupported_ops"].items():
        print(f"  unsupported {op}: {reason}")
    print(f"dtypes: {', '.join(d['dtypes'])}")
    for dt, reason in d["unsupported_dtypes"].items():
        print(f"  unsupported {dt}: {reason}")
    m = d["machine"]
    if m is not None:
        print(f"machine: {m.get('cpu', m['arch'])}, {m['cores']} cores, ISA {' '.join(m['isa'])}")
        print(f"  SIMD used: {m['simd']}")
        for c in m["caches"]:
            print(f"  L{c['level']} {c['type']}: {c['size_bytes'] // 1024} KiB")
        if "peak_gflops" in m:
            p = m["peak_gflops"]
            print(
                f"  measured peak: {p['f32_mul_add']} GFLOP/s f32 mul+add (bit-exact), "
                f"{p['f32_fma']} GFLOP/s f32 FMA"
            )
            print(f"  measured copy bandwidth: {m['copy_bandwidth_gbs']} GB/s (read + write)")
    cc = d["compiler"]
    if cc is not None:
        print(f"compiler: {cc['command']} ({cc['version']}), flags {' '.join(cc['flags'])}")
    if d["fallback"]:
        print(f"fallback: {d['fallback']}")
    return 0
