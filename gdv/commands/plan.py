"""`gdv plan FILE --mesh AXIS=N,...`: choose how to partition @main over a mesh (issue 17,
item 4).

An integer program over every op's sharding strategies (`gdv.passes.plan`), costed with the
alpha-beta model of the MPI runtime's collectives (`gdv.backends.mpi.cost`) and the roofline of
the C target's capability descriptor, solved with HiGHS. Prints the predicted step time and
memory per device and the `--shard` annotations; `--json` prints the plan report
(`gdv.plan/1`, docs/PLAN.md). `--apply` runs the partition pass on the plan and proves every
op's claim as `gdv partition` does, writing the SPMD program only when all are proved.

Exit status: 0 planned (and, with --apply, proved); 1 a claim refuted; 2 unknown (a claim not
proved, or the solver stopped at --timeout: never a plan); 3 input error (bad file, mesh or
annotation; no plan fits --max-memory).
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from gdv.commands import seconds, write_text_atomically
from gdv.commands.basic import load_arg
from gdv.ir.diagnostics import IRError, Loc

SCHEMA = "gdv.plan/1"
EXIT = {"planned": 0, "proved": 0, "refuted": 1, "unknown": 2}
_UNITS = {
    "": 1,
    "B": 1,
    "K": 10**3,
    "KB": 10**3,
    "KIB": 2**10,
    "M": 10**6,
    "MB": 10**6,
    "MIB": 2**20,
    "G": 10**9,
    "GB": 10**9,
    "GIB": 2**30,
    "T": 10**12,
    "TB": 10**12,
    "TIB": 2**40,
}


def memory_size(text: str) -> int:
    """`4096`, `512MiB`, `16GB`, `1.5GiB` -> bytes (a usage error otherwise)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    unit = m.group(2).upper() if m else ""
    if m is None or unit not in _UNITS or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(
            f"expected a positive number of bytes (e.g. 4096, 512MiB, 16GB), got {text!r}"
        )
    return int(float(m.group(1)) * _UNITS[unit])


def gap_fraction(text: str) -> float:
    """A relative optimality gap in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {text!r}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "plan",
        help="choose shardings for @main on a device mesh: an integer program over each op's "
        "strategies, costed by the alpha-beta model and the roofline (exit 0 planned, 1 "
        "refuted, 2 unknown or time-out, 3 input error)",
    )
    p.add_argument("file", help="the global program (.gdv, or - for standard input)")
    p.add_argument("--mesh", required=True, help="the mesh, e.g. data=2,model=2")
    p.add_argument(
        "--shard",
        action="append",
        default=[],
        metavar="NAME=[AXES,...]",
        help="pin a parameter's sharding (as gdv partition takes it); repeatable",
    )
    p.add_argument(
        "--order",
        default="rank",
        choices=["rank", "tree", "ring"],
        help="the order of the all_reduce that finishes a split sum (default rank)",
    )
    p.add_argument(
        "--results",
        default="whole",
        choices=["whole", "any"],
        help="whole: every rank ends with each whole result (default); any: results may stay split",
    )
    p.add_argument(
        "--max-memory", type=memory_size, metavar="BYTES", help="bytes per device (e.g. 16GiB)"
    )
    p.add_argument("--timeout", type=seconds, default=60.0, metavar="S", help="solver seconds (60)")
    p.add_argument(
        "--gap",
        type=gap_fraction,
        default=1e-6,
        metavar="G",
        help="the relative gap to the optimum the solver must prove (default 1e-6; "
        "memory-limited plans of large models may need 1e-3)",
    )
    p.add_argument("--probe", action="store_true", help="measure alpha and beta with MPI now")
    p.add_argument("--json", action="store_true", help="print the plan report as JSON")
    p.add_argument(
        "--apply", action="store_true", help="partition on the plan and prove every claim"
    )
    p.add_argument(
        "-o", "--output", metavar="FILE", help="with --apply: write the SPMD program here"
    )
    p.add_argument(
        "--claim-timeout",
        type=seconds,
        default=10.0,
        metavar="S",
        help="with --apply: seconds per claim (10)",
    )
    p.set_defaults(handler=plan_command)


def machine_models(probe: bool):
    """(network, roofline, roofline source): measured where measured, defaults otherwise."""
    from gdv.backends.cost import Roofline
    from gdv.backends.mpi.cost import DEFAULT_NETWORK
    from gdv.backends.mpi.probe import cached_network, measure_network
    from gdv.passes.plan import DEFAULT_ROOFLINE

    if probe:
        net, _ = measure_network(refresh=True)
    else:
        got = cached_network()
        net = got[0] if got is not None else DEFAULT_NETWORK
    roof, source = (
        DEFAULT_ROOFLINE,
        (
            "default (not measured: 100 GFLOP/s, 20 GB/s; the C target's descriptor was not "
            "available)"
        ),
    )
    try:
        from gdv.backends.capabilities import descriptor

        d = descriptor("c")
        r = Roofline.from_descriptor(d)
        if r.peak_gflops > 0 and r.bandwidth_gbs > 0:
            roof, source = r, "the C target's capability descriptor (measured on this host)"
    except IRError:
        pass
    return net, roof, source


def plan_command(args: argparse.Namespace) -> int:
    import time

    from gdv.ir.printer import print_module
    from gdv.passes.partition import parse_mesh, parse_shard, partition, prove_steps
    from gdv.passes.plan import PlanError, apply, plan, program_cost

    where = Loc("<command line>", 1, 1)
    if args.output and not args.apply:
        raise IRError("-o writes the partitioned program: it needs --apply", where)
    module = load_arg(args.file)
    mesh = parse_mesh(args.mesh)
    pinned = {}
    for text in args.shard:
        name, s = parse_shard(text)
        if name in pinned:
            raise IRError(f"--shard gives %{name} twice", where)
        pinned[name] = s
    net, roof, roof_source = machine_models(args.probe)
    t0 = time.perf_counter()
    try:
        chosen = plan(
            module,
            mesh,
            net,
            roof,
            order=args.order,
            max_memory=args.max_memory,
            timeout=args.timeout,
            fixed=pinned,
            whole_results=args.results == "whole",
            gap=args.gap,
        )
    except PlanError as e:
        print(e, file=sys.stderr)
        if args.json:
            print(json.dumps({"schema": SCHEMA, "verdict": e.status, "error": e.message}))
        return 2 if e.status in ("timeout", "failed") else 3  # infeasible, unavailable
    part = apply(module, chosen)
    plan_seconds = time.perf_counter() - t0
    # The same annotations alone, through propagation: does `gdv partition` write this program?
    alone = partition(module, mesh, chosen.annotations, args.order)
    same = print_module(alone.module) == print_module(part.module)
    cost = program_cost(part.module, net, roof)
    verdict = "planned"
    if args.apply:
        verdict = prove_steps(part, args.claim_timeout)
    report = plan_report(
        args, module, chosen, part, cost, net, roof, roof_source, verdict, same, plan_seconds
    )
    if args.json:
        print(json.dumps(report, indent=1))
    out = sys.stderr if args.apply and not args.output and not args.json else sys.stdout
    if not args.json:
        _print_summary(report, out)
    if args.apply and verdict == "proved":
        text = print_module(part.module)
        if args.output:
            write_text_atomically(args.output, text)
        elif not args.json:
            sys.stdout.write(text)
    return EXIT[verdict]


def plan_report(
    args, module, chosen, part, cost, net, roof, roof_source, verdict, same, plan_seconds
) -> dict:
    """The plan report (`gdv.plan/1`, documented in docs/PLAN.md)."""
    import importlib.metadata

    from gdv.passes.plan import shard_text

    mesh = chosen.mesh
    annotations = [shard_text(n, s) for n, s in chosen.annotations.items()]
    strategies = []
    for v, s in chosen.choice.items():
        node = chosen.nodes[v]
        if node.op is None:
            continue
        strategies.append(
            {
                "value": v,
                "op": node.op.name,
                "factors": {f: list(a) for f, a in s.factors},
                "operands": [[list(a) for a in o] for o in s.operands],
                "result": [list(a) for a in s.result],
                "pending_sum_axes": list(s.partial),
                "compute_s": s.compute_s,
                "communication_s": s.comm_s,
            }
        )
    report = {
        "schema": SCHEMA,
        "verdict": verdict,
        "file": args.file,
        "mesh": {"name": mesh.name, "axes": dict(mesh.axes)},
        "order": chosen.order,
        "results": "whole" if chosen.whole_results else "any",
        "network": {
            "alpha_s": net.alpha,
            "beta_s_per_byte": net.beta,
            "source": net.source,
        },
        "roofline": {
            "peak_gflops": roof.peak_gflops,
            "bandwidth_gbs": roof.bandwidth_gbs,
            "source": roof_source,
        },
        "annotations": annotations,
        "partition_command": (
            f"gdv partition {args.file} --mesh {args.mesh} "
            + " ".join(f"--shard '{a}'" for a in annotations)
        ),
        "reproduced_by_annotations": same,
        "parallelism": chosen.parallelism(),
        "predicted": {
            "step_s": cost.step_s,
            "compute_s": cost.compute_s,
            "communication_s": cost.comm_s,
            "memory_bytes_per_device": cost.memory_bytes,
            "bytes_sent_per_rank": cost.bytes_sent_per_rank,
            "objective_s": chosen.objective_s,
        },
        "collectives": cost.collectives,
        "strategies": strategies,
        "solver": {
            "name": "HiGHS",
            "version": importlib.metadata.version("highspy"),
            "status": chosen.status,
            "mip_gap": chosen.mip_gap,
            "variables": chosen.variables,
            "rows": chosen.rows,
            "build_s": round(chosen.build_seconds, 4),
            "solve_s": round(chosen.solve_seconds, 4),
            "plan_s": round(plan_seconds, 4),
            "time_limit_s": args.timeout,
            "gap_tolerance": args.gap,
        },
    }
    if args.apply:
        report["claims"] = [st.to_json() for st in part.steps]
    return report


def _fmt_s(x: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x / 1e-9:.3g} ns"


def _fmt_b(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def _print_summary(report: dict, out) -> None:
    mesh = ", ".join(f"{a}={n}" for a, n in report["mesh"]["axes"].items())
    kinds = " + ".join(report["parallelism"]) or "no"
    pr = report["predicted"]
    net = report["network"]
    sv = report["solver"]
    print(f"plan on mesh [{mesh}]: {kinds} parallelism", file=out)
    print(
        f"  predicted step {_fmt_s(pr['step_s'])} (compute {_fmt_s(pr['compute_s'])}, "
        f"communication {_fmt_s(pr['communication_s'])}); memory per device "
        f"{_fmt_b(pr['memory_bytes_per_device'])}; {len(report['collectives'])} collectives",
        file=out,
    )
    print(
        f"  alpha {_fmt_s(net['alpha_s'])}, beta {net['beta_s_per_byte']:.3g} s/B: {net['source']}",
        file=out,
    )
    print(
        f"  roofline {report['roofline']['peak_gflops']:g} GFLOP/s, "
        f"{report['roofline']['bandwidth_gbs']:g} GB/s: {report['roofline']['source']}",
        file=out,
    )
    shown = report["annotations"][:12]
    more = len(report["annotations"]) - len(shown)
    print(
        "  --shard " + " --shard ".join(shown) + (f" ... ({more} more)" if more > 0 else ""),
        file=out,
    )
    if not report["reproduced_by_annotations"]:
        print(
            "  (propagation from these annotations alone partitions differently: --apply "
            "passes each op's strategy to the partition pass)",
            file=out,
        )
    print(
        f"  solver HiGHS: {sv['variables']} variables, {sv['rows']} rows, {sv['status']} in "
        f"{sv['solve_s']:.3g} s (planning {sv['plan_s']:.3g} s)",
        file=out,
    )
    claims = report.get("claims")
    if claims is not None:
        proved = sum(1 for c in claims if c["verdict"] == "proved")
        print(f"  claims: {proved} of {len(claims)} proved; verdict {report['verdict']}", file=out)
        for c in claims:
            if c["verdict"] != "proved" and not c["reason"].startswith("same claim"):
                print(f"    %{c['op']}: {c['verdict']} ({c['theory']}) {c['reason']}", file=out)
