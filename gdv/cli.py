"""The `gdv` command (IR_SPEC.md section 6).

Exit statuses: 0 success; 1 not equivalent (tv); 2 unknown (tv); 3 input error (bad text, bad
file, bad usage); 4 internal error (a bug in gdv: please report it). No command prints a
traceback unless GDV_DEBUG=1 is set.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from gdv import __version__
from gdv.ir.diagnostics import IRError

EXIT_OK = 0
EXIT_INPUT = 3
EXIT_INTERNAL = 4

COMMAND_MODULES = (
    "gdv.commands.basic",
    "gdv.commands.run",
    "gdv.commands.tv",
    "gdv.commands.partition",
    "gdv.commands.plan",
    "gdv.commands.bounds",
    "gdv.commands.compile",
    "gdv.commands.evidence",
    "gdv.commands.importer",
    "gdv.commands.targets",
    "gdv.commands.tune",
    "gdv.commands.profile",
    "gdv.commands.reduce",
    "gdv.commands.fuzz",
    "gdv.commands.selftest",
)
"""Each module has `register(subparsers)`, which adds its commands with a `handler`."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors are input errors: exit 3, not 2
        self.print_usage(sys.stderr)
        self.exit(EXIT_INPUT, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gdv", description="gdv: a verification-first ML compiler")
    parser.add_argument("--version", action="version", version=f"gdv {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_INPUT
    try:
        return args.handler(args)
    except IRError as e:
        print(e, file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("gdv: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:  # a bug in gdv; never a traceback for users
        if os.environ.get("GDV_DEBUG"):
            raise
        print(
            f"gdv: internal error: {type(e).__name__}: {e} (set GDV_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    raise SystemExit(main())
