"""`gdv check FILE` and `gdv fmt FILE`."""

from __future__ import annotations

import argparse
import sys

from gdv.api import format_module, load


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("check", help="parse and verify a module (exit 0 ok, 3 error)")
    p.add_argument("file", help="a .gdv file, or - for standard input")
    p.set_defaults(handler=check)
    p = subparsers.add_parser("fmt", help="print a module's canonical form")
    p.add_argument("file", help="a .gdv file, or - for standard input")
    p.set_defaults(handler=fmt)


def load_arg(path: str):
    if path == "-":
        from gdv.api import parse

        return parse(sys.stdin.buffer.read(), "<stdin>")
    return load(path)


def check(args: argparse.Namespace) -> int:
    module = load_arg(args.file)
    n_ops = sum(len(f.ops) for f in module.functions)
    print(f"{args.file}: ok ({len(module.functions)} function(s), {n_ops} op(s))")
    return 0


def fmt(args: argparse.Namespace) -> int:
    sys.stdout.write(format_module(load_arg(args.file)))
    return 0
