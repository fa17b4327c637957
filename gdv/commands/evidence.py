"""`gdv evidence verify|show|report|keygen`: re-check and review evidence bundles."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from gdv.commands import positive_int, seconds

EXIT_OK, EXIT_FAIL, EXIT_INPUT = 0, 1, 3


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "evidence", help="verify and review evidence bundles (gdv compile --emit-evidence)"
    )
    sub = p.add_subparsers(dest="evidence_command", metavar="ACTION", parser_class=type(p))
    sub.required = True
    v = sub.add_parser(
        "verify",
        help="re-check a bundle without trusting the compiler (exit 0 holds, 1 does not, "
        "3 input error)",
    )
    v.add_argument("dir", help="the bundle directory")
    v.add_argument(
        "--solver",
        choices=("z3", "cvc5", "all"),
        default=None,
        help="solvers that re-solve every query, besides those the policy requires (default: "
        "the policy's, z3)",
    )
    v.add_argument("--source", metavar="FILE", help="check the source against its hash")
    v.add_argument("--trust-key", metavar="PUB.pem", help="require a valid Ed25519 signature")
    v.add_argument("--policy", metavar="FILE", help="policy file (default: discovered)")
    v.add_argument("--timeout", type=seconds, default=30.0, metavar="S", help="seconds per query")
    v.add_argument(
        "--whole-function",
        action="store_true",
        help="also prove each stage equivalent to the one before, whole entry function (the "
        "check before certificates; slow on large models)",
    )
    v.add_argument(
        "--jobs",
        type=positive_int,
        default=None,
        metavar="N",
        help="solver worker processes (default: all cores)",
    )
    v.set_defaults(handler=verify_command)
    s = sub.add_parser("show", help="a terminal summary of a bundle")
    s.add_argument("dir")
    s.set_defaults(handler=show_command)
    r = sub.add_parser("report", help="a self-contained HTML review page")
    r.add_argument("dir")
    r.add_argument("-o", "--output", required=True, metavar="REPORT.html")
    r.set_defaults(handler=report_command)
    k = sub.add_parser("keygen", help="write an Ed25519 key pair for --sign-key/--trust-key")
    k.add_argument("private", metavar="KEY.pem")
    k.add_argument("public", metavar="PUB.pem")
    k.set_defaults(handler=keygen_command)


def verify_command(args: argparse.Namespace) -> int:
    from gdv.evidence.policy import Policy, load_policy
    from gdv.evidence.verify import verify_bundle

    policy = load_policy(args.policy) or Policy()
    solvers = ("z3", "cvc5") if args.solver == "all" else ((args.solver,) if args.solver else ())

    def log(check) -> None:
        print(f"{'ok  ' if check.ok else 'FAIL'}  {check.item}: {check.detail}")

    report = verify_bundle(
        args.dir,
        solvers=solvers,
        source=args.source,
        trust_key=args.trust_key,
        policy=policy,
        timeout=args.timeout,
        log=log,
        whole_function=args.whole_function,
        jobs=args.jobs,
    )
    print(f"signature: {report.signature}")
    failure = report.failure
    if failure is not None:
        print(f"not verified: {failure.item}: {failure.detail}", file=sys.stderr)
        return EXIT_FAIL
    print(f"verified: {args.dir}")
    return EXIT_OK


def show_command(args: argparse.Namespace) -> int:
    from gdv.evidence import read_manifest
    from gdv.evidence.cross_target import is_cross_target_manifest, show_cross_target
    from gdv.evidence.partition import is_partition_manifest, show_partition
    from gdv.evidence.report import show

    manifest = read_manifest(_bundle(args.dir))
    if is_cross_target_manifest(manifest):
        sys.stdout.write(show_cross_target(Path(args.dir), manifest))
    elif is_partition_manifest(manifest):
        sys.stdout.write(show_partition(Path(args.dir), manifest))
    else:
        sys.stdout.write(show(Path(args.dir), manifest))
    return EXIT_OK


def report_command(args: argparse.Namespace) -> int:
    from gdv.evidence import EvidenceError, read_manifest
    from gdv.evidence.cross_target import is_cross_target_manifest
    from gdv.evidence.partition import is_partition_manifest
    from gdv.evidence.report import render_cross_target_html, render_html

    manifest = read_manifest(_bundle(args.dir))
    if is_partition_manifest(manifest):
        raise EvidenceError(
            f"{args.dir} is a partition bundle: the review page covers compile bundles (each "
            "segment's under segments/NN has one); use `gdv evidence show` for the partition"
        )
    if is_cross_target_manifest(manifest):
        page = render_cross_target_html(Path(args.dir), manifest)
    else:
        page = render_html(Path(args.dir), manifest)
    out = Path(args.output)
    fd, tmp = tempfile.mkstemp(dir=out.resolve().parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(page)
    os.replace(tmp, out)
    print(f"report: {out}")
    return EXIT_OK


def keygen_command(args: argparse.Namespace) -> int:
    from gdv.evidence import EvidenceError
    from gdv.evidence.signing import keygen

    try:
        keygen(args.private, args.public)
    except FileExistsError:
        raise EvidenceError(f"{args.private} exists; not overwriting a key") from None
    print(f"private key: {args.private} (keep it secret); public key: {args.public}")
    return EXIT_OK


def _bundle(directory: str) -> str:
    from gdv.evidence import EvidenceError

    if not os.path.isdir(directory):
        raise EvidenceError(f"{directory}: no such directory")
    return directory
