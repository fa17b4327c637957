"""`gdv reduce CASE.gdv [--inputs IN.npz] (--signature SIG | --test CMD) [-o OUT.gdv]
[--jobs N]` and `gdv signature CASE.gdv`: minimized regression cases (issue 18).

Exit statuses: 0 reduced (or, for `gdv signature`, the signature printed, and with
`--expect` equal to it); 1 `gdv signature --expect` differs; 3 input error (a case that does
not show the signature to begin with is one)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile

from gdv.commands import positive_int, write_text_atomically
from gdv.ir.diagnostics import IRError, Loc, printable

DEFAULT_LIT_DIR = os.path.join("tests", "lit", "regress")


def register(subparsers: argparse._SubParsersAction) -> None:
    from gdv.fuzzing.regress import add_case_options

    p = subparsers.add_parser(
        "reduce",
        help="shrink a failing case to a small one with the same signature (a lit test)",
    )
    p.add_argument("case", metavar="CASE.gdv", help="the case: a module, or a tv pair")
    p.add_argument("--inputs", metavar="IN.npz", help="the inputs the failure needs")
    how = p.add_mutually_exclusive_group()
    how.add_argument(
        "--signature",
        metavar="SIG",
        help="what to keep (default: what the case shows when first run), e.g. "
        "refuted:fold-constants/fold, mismatch:c, crash:KeyError@gdv.passes.canonicalize.run",
    )
    how.add_argument(
        "--test",
        metavar="CMD",
        help="an interestingness command instead: run as CMD CANDIDATE.gdv, exit 0 means "
        "interesting (as with llvm-reduce)",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT.gdv",
        help="the reduced case (default: CASE.reduced.gdv beside the case)",
    )
    p.add_argument("--jobs", type=positive_int, default=1, metavar="N", help="candidates at once")
    p.add_argument(
        "--lit-dir",
        default=DEFAULT_LIT_DIR,
        metavar="DIR",
        help=f"write the lit regression test here (default {DEFAULT_LIT_DIR}; '' for none)",
    )
    p.add_argument(
        "--emit-evidence", metavar="LOG.json", help="write the reduction log (hashes, steps)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress display")
    add_case_options(p)
    p.set_defaults(handler=reduce_command)

    s = subparsers.add_parser("signature", help="print the signature a case shows")
    s.add_argument("case", metavar="CASE.gdv", help="the case (a lit regress file is fine)")
    s.add_argument("--inputs", metavar="IN.npz", help="the inputs")
    s.add_argument("--expect", metavar="SIG", help="exit 1 unless the case shows SIG")
    add_case_options(s)
    s.set_defaults(handler=signature_command)


def _read_case(args):
    from gdv.fuzzing.regress import case_options
    from gdv.fuzzing.signature import Case, parse_case_text

    try:
        with open(args.case, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise IRError(f"no such file {printable(args.case, 200)}", Loc(args.case, 1, 1)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise IRError(
            f"cannot read {printable(args.case, 200)}: {e}", Loc(args.case, 1, 1)
        ) from None
    modules = parse_case_text(text, args.case)
    inputs = None
    if args.inputs:
        from gdv.commands.run import entry_inputs

        entry = modules[0].entry
        if entry is None:
            raise IRError("the case has no entry function (@main, or the only one)")
        inputs = entry_inputs([args.inputs], entry, 0)
    return Case(modules, inputs, case_options(args)), text


def signature_command(args: argparse.Namespace) -> int:
    from gdv.fuzzing.signature import check_signature, observe

    case, _ = _read_case(args)
    if args.expect:
        check_signature(args.expect)
        found = observe(case, args.expect if args.expect != "clean" else None)
        print(found)
        return 0 if found == args.expect else 1
    print(observe(case))
    return 0


def _external_test(command: str):
    """`--test CMD`: CMD CANDIDATE.gdv (and CANDIDATE.npz via $GDV_REDUCE_INPUTS)."""
    argv = shlex.split(command)
    if not argv:
        raise IRError("--test needs a command")

    def test(case) -> bool:
        import numpy as np

        with tempfile.TemporaryDirectory(prefix="gdv-reduce-") as d:
            path = os.path.join(d, "candidate.gdv")
            with open(path, "w", encoding="utf-8") as f:
                f.write(case.text())
            env = dict(os.environ)
            if case.inputs is not None:
                env["GDV_REDUCE_INPUTS"] = os.path.join(d, "candidate.npz")
                np.savez(env["GDV_REDUCE_INPUTS"], **case.inputs)
            try:
                r = subprocess.run(
                    [*argv, path], env=env, capture_output=True, timeout=600, check=False
                )
            except FileNotFoundError:
                raise IRError(f"--test: no such command {printable(argv[0], 200)}") from None
            except subprocess.TimeoutExpired:
                return False
            return r.returncode == 0

    return test


def reduce_command(args: argparse.Namespace) -> int:
    from gdv.fuzzing.reduce import progress_bar, reduce_case
    from gdv.fuzzing.regress import write_lit
    from gdv.fuzzing.signature import check_signature

    case, text = _read_case(args)
    if args.signature:
        check_signature(args.signature)
    out = args.output or (os.path.splitext(args.case)[0] + ".reduced.gdv")
    if os.path.abspath(out) == os.path.abspath(args.case):
        raise IRError("-o would overwrite the case itself; choose another file")
    test = _external_test(args.test) if args.test else None
    progress = None if args.quiet else progress_bar()
    result = reduce_case(case, args.signature, jobs=args.jobs, test=test, progress=progress)
    if progress is not None and sys.stderr.isatty():
        sys.stderr.write("\n")
    write_text_atomically(out, result.case.text())
    print(
        f"reduced {result.original.ops} ops -> {result.case.ops} ops (largest dim "
        f"{result.original.largest_dim} -> {result.case.largest_dim}), signature "
        f"{result.signature}, {result.tests} tests in {result.seconds:.1f} s: {out}"
    )
    if result.culprit:
        print(f"culprit pass: {result.culprit}")
    if args.lit_dir and test is None:
        path = write_lit(result, args.lit_dir, os.path.basename(args.case))
        print(f"lit test: {path}")
    if args.emit_evidence:
        log = result.log()
        log["original"]["file"] = args.case
        log["original"]["sha256"] = hashlib.sha256(text.encode()).hexdigest()
        write_text_atomically(args.emit_evidence, json.dumps(log, indent=2) + "\n")
        print(f"reduction log: {args.emit_evidence}")
    return 0
