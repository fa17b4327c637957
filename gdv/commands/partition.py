"""`gdv partition FILE --mesh AXIS=N,... --shard NAME=[AXES,...]...`: the SPMD program.

Propagates the shardings, partitions the entry function for every rank of the mesh, proves
each op's partitioned form (fp where no float sum is split, real where one is, with the
error-bound change recorded) and, when every claim is proved, writes the SPMD module;
`--emit-evidence DIR` writes a partition bundle (`gdv.evidence.partition`) that `gdv evidence
verify` re-checks, and a policy (`--policy`, or one found as `gdv compile` finds it) gates the
result. `gdv compile FILE --mesh ... --shard ...` does the same and compiles every segment of
local ops for C, each with its own bundle inside the partition bundle. Exit status: 0 proved,
1 refuted (or a policy violated), 2 unknown, 3 input error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from gdv.commands import seconds, write_text_atomically
from gdv.commands.basic import load_arg
from gdv.ir.diagnostics import IRError, Loc

EXIT = {"proved": 0, "refuted": 1, "unknown": 2}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "partition",
        help="partition @main over a device mesh: propagate shardings, emit the SPMD program, "
        "prove each op's partitioned form",
    )
    p.add_argument("file", help="the global program (.gdv, or - for standard input)")
    add_partition_options(p, mesh_required=True)
    p.add_argument("-o", "--output", help="write the SPMD program here (default: stdout)")
    p.add_argument("--timeout", type=seconds, default=10.0, help="seconds per claim (10)")
    p.add_argument("--json", action="store_true", help="print the partition report as JSON")
    p.add_argument(
        "--emit-evidence",
        metavar="DIR",
        help="write a partition evidence bundle (gdv evidence verify DIR re-checks it)",
    )
    p.add_argument(
        "--policy",
        metavar="FILE",
        help="gate on this policy (default: gdv-policy.toml or [tool.gdv.policy] if present)",
    )
    p.set_defaults(handler=partition_command)


def add_partition_options(p: argparse.ArgumentParser, mesh_required: bool) -> None:
    """--mesh, --shard and --order (gdv partition; gdv compile --mesh)."""
    p.add_argument(
        "--mesh",
        required=mesh_required,
        help="the mesh, e.g. data=2,model=2"
        + ("" if mesh_required else " (partitions @main over it: an SPMD program, see --shard)"),
    )
    p.add_argument(
        "--shard",
        action="append",
        default=[],
        metavar="NAME=[AXES,...]",
        help="a parameter's sharding, one entry per dim: - (whole) or mesh axes joined by + "
        "(e.g. w1=[-,model]); repeatable",
    )
    p.add_argument(
        "--order",
        default="rank",
        choices=["rank", "tree", "ring", "carry"],
        help="how a split reduction is finished: an all_reduce in the order rank, tree or ring, "
        "or carry (bit-exact: a carry_reduce where the reduction is split on its outermost "
        "reduced dim, the reduction kept whole elsewhere); default rank",
    )


def partition_command(args: argparse.Namespace) -> int:
    from gdv.ir.printer import print_module

    module, part, annotations, verdict = run_partition(args)
    report = partition_report(module, part, verdict)
    text = print_module(part.module)
    # Only a proved program is written: the gate fails closed (the report says what failed).
    if verdict == "proved" and args.output:
        write_text_atomically(args.output, text)
    elif verdict == "proved" and not args.json:
        sys.stdout.write(text)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_summary(report, sys.stderr if not args.output else sys.stdout)
    out = sys.stderr if not args.output and not args.json else sys.stdout
    return finish(args, module, part, annotations, verdict, None, out)


def run_partition(args: argparse.Namespace):
    """Parse, partition and prove: (module, partitioned, annotations, verdict)."""
    from gdv.passes.partition import parse_mesh, parse_shard, partition, prove_steps

    module = load_arg(args.file)
    mesh = parse_mesh(args.mesh)
    annotations = {}
    for text in args.shard:
        name, s = parse_shard(text)
        if name in annotations:
            raise IRError(f"--shard gives %{name} twice", Loc("<command line>", 1, 1))
        annotations[name] = s
    part = partition(module, mesh, annotations, args.order)
    verdict = prove_steps(part, args.timeout)
    return module, part, annotations, verdict


def finish(args, module, part, annotations, verdict: str, segments, out) -> int:
    """Write the bundle (--emit-evidence), apply the policy; the exit status."""
    from gdv.evidence.partition import (
        check_partition_policy,
        policy_view,
        write_partition_bundle,
    )
    from gdv.evidence.policy import load_policy
    from gdv.ir.printer import print_module

    if args.emit_evidence:
        if args.file == "-":
            source, name = print_module(module).encode(), "<stdin>"
        else:
            with open(args.file, "rb") as f:
                source, name = f.read(), args.file
        path = write_partition_bundle(
            args.emit_evidence,
            source_name=name,
            source=source,
            module=module,
            part=part,
            annotations=annotations,
            order=args.order,
            verdict=verdict,
            segments=segments,
        )
        print(f"evidence: {path}", file=out)
    policy = load_policy(args.policy)
    if policy is not None and verdict == "proved":
        violations = check_partition_policy(policy, policy_view(part, args.order))
        if violations:
            print(f"gdv: {violations[0]} (policy from {policy.origin})", file=sys.stderr)
            return 1
    return EXIT[verdict]


def compile_partitioned(args: argparse.Namespace) -> int:
    """`gdv compile FILE --mesh ... --shard ...`: partition and prove, then compile every
    segment of local ops for C with its obligations proved; -o writes the SPMD program (run
    it with `gdv run --ranks N`), --emit-evidence the partition bundle with every segment's
    bundle inside."""
    from gdv.backends.mpi import SEGMENT_TARGETS
    from gdv.ir.printer import print_module
    from gdv.ir.targets import target_info

    if args.target not in SEGMENT_TARGETS or target_info(args.target).interpreter:
        raise IRError(
            f"--mesh compiles for target c (segments of local ops between MPI collectives), "
            f"not {args.target}",
            Loc("<command line>", 1, 1),
        )
    module, part, annotations, verdict = run_partition(args)
    report = partition_report(module, part, verdict)
    _print_summary(report, sys.stdout)
    segments = None
    if verdict == "proved":
        from gdv.backends.mpi import CompiledSegment, compile_segments

        steps = compile_segments(part.module, args.allow_fallback)
        segments = [s for s in steps if isinstance(s, CompiledSegment)]
        print(f"compiled {len(segments)} segment(s) of local ops for c, every obligation proved")
        if args.output:
            write_text_atomically(args.output, print_module(part.module))
            mesh = part.module.meshes[0]
            print(f"wrote {args.output} (run it with: gdv run --ranks {mesh.size} {args.output})")
    if args.emit_evidence == "":  # the flag without DIR: <input stem>.evidence, as compile's
        stem = os.path.splitext(os.path.basename(args.file))[0]
        args.emit_evidence = os.path.join(os.path.dirname(args.file), f"{stem}.evidence")
    return finish(args, module, part, annotations, verdict, segments, sys.stdout)


def partition_report(module, part, verdict: str) -> dict:
    """The partition's report: mesh, shardings and why, every collective, every claim, and the
    error bounds of the global and the partitioned program."""
    from gdv.passes.partition import communication_bytes
    from gdv.validate.bounds import analyze

    mesh = part.module.meshes[0]
    bounds: dict[str, object] = {}
    try:
        g, s = analyze(module), analyze(part.module)
        bounds = {
            "global": [o.abs for o in g.outputs],
            "partitioned": [o.abs for o in s.outputs],
        }
    except IRError as e:  # a parameter without a declared range: no bound, said so
        bounds = {"error": e.message}
    return {
        "schema": "gdv.partition/1",
        "verdict": verdict,
        "mesh": {"name": mesh.name, "axes": dict(mesh.axes)},
        "shardings": [
            {"value": c.value, "sharding": c.sharding, "reason": c.reason} for c in part.choices
        ],
        "collectives": [
            {"result": r, "op": name, "axes": axes, "operand_bytes": nbytes}
            for r, name, axes, nbytes in part.collectives
        ],
        "bytes_sent_per_rank": communication_bytes(part),
        "claims": [st.to_json() for st in part.steps],
        "bounds": bounds,
    }


def _print_summary(report: dict, out) -> None:
    claims = report["claims"]
    proved = sum(1 for c in claims if c["verdict"] == "proved")
    real = sum(1 for c in claims if c["theory"] == "real")
    distinct = sum(1 for c in claims if not c["reason"].startswith("same claim"))
    mesh = ", ".join(f"{a}={n}" for a, n in report["mesh"]["axes"].items())
    print(
        f"partition on mesh [{mesh}]: {len(claims)} op claims ({distinct} distinct, {real} "
        f"real), {proved} proved; {len(report['collectives'])} collectives, "
        f"{report['bytes_sent_per_rank']} bytes sent per rank; verdict {report['verdict']}",
        file=out,
    )
    for c in claims:
        if c["verdict"] not in ("proved",):
            print(f"  %{c['op']}: {c['verdict']} ({c['theory']}) {c['reason']}", file=out)
    b = report["bounds"]
    if "global" in b:
        print(
            f"  error bound per output: global {b['global']}, partitioned {b['partitioned']}",
            file=out,
        )
