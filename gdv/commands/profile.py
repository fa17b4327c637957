"""`gdv profile FILE [--inputs IN.npz]... [--bind W.npz]... [-O N] [--runs N] [--json]
[--trace TRACE.json] [--threads N[,N...]]`.

Compiles FILE for the C target (every obligation proved, as `gdv run --target c` does), builds
the program once more with a clock read around each op's code (`gdv.backends.c.profile`),
runs it and prints its kernels by time: median over the runs, share of the whole call,
GFLOP/s, GB/s and percent of the roofline (flops and bytes from `gdv.backends.cost`, peaks
from the target's capability descriptor), and where each came from (the input's FILE:LINE,
and the ONNX node or torch module `gdv import` noted on that line). `--json` prints the
execution report (`evidence/schema/reports-execution-1.json`); `--trace` writes a
Chrome-trace / Perfetto timeline of every run. `--bind` fixes the parameters its files hold
(a model's weights, as `Compilation.bind` and onnxruntime's session do) before the timed calls,
so the product factors read only from them are packed once, and the kernels computed from
them alone (`at_bind`) run once, outside the timers; the report lists them (`bound`).

`--threads N` runs the calls with N OpenMP threads. `--threads 1,2` (two counts or more) times
every count in the same rounds, call by call (`gdv.backends.c.profile.run_threads`), prints the
last count's table and then the scaling table: per kernel its medians at each count, its
speedup and the time it loses against perfect scaling from the first count, most first (a
kernel that gets slower with more threads, or one whose threads wait on each other, heads the
list). `--json` then prints the scaling report (`evidence/schema/reports-scaling-1.json`),
which holds the execution report of every count; `--trace` is the last count's timeline. A
build that links no OpenMP runtime (no op of it runs in parallel) runs on one thread at every
count, and a note on standard error says so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from gdv.commands import positive_int, write_text_atomically
from gdv.ir.diagnostics import IRError, Loc


def _warmup(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    from gdv.passes.pipelines import LEVELS

    p = subparsers.add_parser(
        "profile",
        help="compile for target c, run with per-kernel timers, print kernels by time "
        "(exit 0, 3 input error)",
    )
    p.add_argument("file", help="a .gdv file, or - for standard input")
    p.add_argument(
        "--inputs",
        action="append",
        default=[],
        metavar="IN.npz",
        help="inputs keyed by parameter name (no %%); may repeat, later files win on a key; "
        "parameters not given are seeded random values within their ranges",
    )
    p.add_argument(
        "--bind",
        action="append",
        default=[],
        metavar="W.npz",
        help="parameters to fix before the timed calls (a model's weights, e.g. the weights file "
        "of gdv import): their factors are packed once, and kernels computed from them alone "
        "run once, as Compilation.bind does; may repeat",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for inputs not given (default 0)")
    p.add_argument(
        "-O",
        dest="level",
        type=int,
        choices=LEVELS,
        default=2,
        help="optimisation level (default 2), as for gdv compile",
    )
    p.add_argument(
        "--runs",
        type=positive_int,
        default=10,
        metavar="N",
        help="timed runs (default 10); times are medians over them",
    )
    p.add_argument(
        "--warmup", type=_warmup, default=1, metavar="N", help="untimed runs first (default 1)"
    )
    p.add_argument("--json", action="store_true", help="print the execution report as JSON")
    p.add_argument(
        "--trace",
        metavar="TRACE.json",
        help="write a Chrome-trace / Perfetto timeline (chrome://tracing, ui.perfetto.dev)",
    )
    p.add_argument(
        "--threads",
        type=thread_counts,
        default=None,
        metavar="N[,N...]",
        help="OpenMP threads to run with; two counts or more (1,2) are timed in the same "
        "rounds and a scaling table follows",
    )
    p.add_argument("--jobs", type=positive_int, default=None, metavar="N", help="solver workers")
    p.add_argument("--cache-dir", metavar="DIR", help="proof cache (default ~/.cache/gdv)")
    p.set_defaults(handler=profile_command)


MAX_THREADS = 4096
"""The largest thread count `--threads` takes."""


def thread_counts(text: str) -> list[int]:
    """`N[,N...]`: distinct whole numbers from 1 to `MAX_THREADS`, in the order given."""
    counts = []
    for part in text.split(","):
        try:
            value = int(part.strip())
        except ValueError:
            value = 0
        if not 1 <= value <= MAX_THREADS or value in counts:
            raise argparse.ArgumentTypeError(
                f"expected distinct whole numbers from 1 to {MAX_THREADS}, separated by commas, "
                f"got {text!r}"
            )
        counts.append(value)
    return counts


def measure(
    comp,
    runs: int = 10,
    inputs: dict | None = None,
    seed: int = 0,
    warmup: int = 1,
    bound: frozenset[str] = frozenset(),
    threads: list[int] | None = None,
):
    """Run the compiled program of `comp` (a proved `gdv.driver.Compilation` for target c)
    with per-kernel timers: (the execution report, the `gdv.backends.c.profile.Runs`). The
    parameters named in `bound` are fixed first (`Executable.bind`), outside the timers. With
    `threads` (thread counts), the calls run at each count in turn (`run_threads`): (the
    scaling report, the last count's `Runs`), or with one count, at that count."""
    from gdv.backends import c
    from gdv.backends.c import profile
    from gdv.backends.capabilities import descriptor
    from gdv.backends.reference import random_inputs
    from gdv.backends.targets import get_target
    from gdv.evidence.reports import execution, scaling

    if get_target(comp.options.target).artifact_kind != "c-source":
        raise IRError(
            f"profiling runs the generated C: target c, not {comp.options.target}",
            Loc("<command line>", 1, 1),
        )
    exe = c.Executable(comp.module, comp.options.allow_fallback, profile=True)
    if inputs is None:
        inputs = random_inputs(comp.source.entry, seed)
    if bound:
        exe = exe.bind({k: v for k, v in inputs.items() if k in bound})
        inputs = {k: v for k, v in inputs.items() if k not in bound}
    counts = threads or []
    if counts and not profile.has_openmp(exe):
        print(
            "note: --threads: this build links no OpenMP runtime (none of its ops opens a "
            "parallel region, or the C compiler has no OpenMP), so every count runs it on one "
            "thread",
            file=sys.stderr,
        )
    if counts:
        every = profile.run_threads(exe, inputs, runs, counts, warmup)
    else:
        every = [profile.run(exe, inputs, runs, warmup)]
    reports = [
        execution(
            comp.module,
            measured,
            descriptor("c"),
            comp.source_text,
            source=os.path.basename(comp.source.filename),
            level=comp.options.level,
            warmup=warmup,
            bound=sorted(bound),
        )
        for measured in every
    ]
    if len(counts) > 1:
        return scaling(counts, reports), every[-1]
    return reports[0], every[0]


def _inputs(args: argparse.Namespace, module) -> dict:
    from gdv.commands.run import entry_inputs

    return entry_inputs(args.inputs + args.bind, module.entry, args.seed)


def _bound(args: argparse.Namespace) -> frozenset[str]:
    from gdv.commands.run import read_inputs

    return frozenset(read_inputs(args.bind)) if args.bind else frozenset()


def profile_command(args: argparse.Namespace) -> int:
    from gdv.commands.basic import load_arg
    from gdv.driver import CompileOptions, compile_module
    from gdv.evidence.reports import chrome_trace
    from gdv.ir.printer import print_module

    module = load_arg(args.file)
    inputs = _inputs(args, module)
    bound = _bound(args)
    source = args.file if args.file != "-" else print_module(module)
    # The bound parameters' products are planned for factors packed once, at bind time.
    options = CompileOptions(
        target="c",
        level=args.level,
        jobs=args.jobs,
        cache_dir=args.cache_dir,
        bound=tuple(sorted(bound)),
    )
    comp = compile_module(source, options)
    if comp.verdict != "proved":
        bad = next(o for o in comp.outcomes if o.status != "proved")
        raise IRError(
            f"refusing to profile: obligation {bad.obligation.id} is {bad.status}",
            bad.obligation.loc or Loc(comp.source.filename, 1, 1),
        )
    report, runs = measure(comp, args.runs, inputs, args.seed, args.warmup, bound, args.threads)
    last = report["executions"][-1] if "executions" in report else report
    if args.trace:
        write_text_atomically(args.trace, json.dumps(chrome_trace(runs, last)) + "\n")
    if args.json:
        sys.stdout.write(json.dumps(report, indent=1, sort_keys=True) + "\n")
    else:
        sys.stdout.write(table(last, args.file, args.threads[-1] if args.threads else None))
        if "executions" in report:
            sys.stdout.write("\n" + scaling_table(report))
    if args.trace:
        print(f"trace: {args.trace}", file=sys.stderr if args.json else sys.stdout)
    return 0


def table(report: dict, name: str, threads: int | None = None) -> str:
    """The execution report as the terminal table `gdv profile` prints (`threads`: the count
    `--threads` set, if any)."""
    m, total = report["machine"], report["total"]
    at = f", {threads} thread(s)" if threads else ""
    lines = [
        f"gdv profile {name}: target c, -O{report['level']}{at}, median of {report['runs']} "
        f"run(s) after {report['warmup']} warm-up",
        f"machine: {m['cpu']}, {m['cores']} core(s); roofline peaks {m['peak_gflops_f32']:g} "
        f"GFLOP/s (f32 mul+add), {m['copy_bandwidth_gbs']:g} GB/s (copy)",
    ]
    if report.get("bound"):
        lines.append(
            f"bound before the runs: {len(report['bound'])} parameter(s) (their product factors "
            "packed once, kernels computed from them alone run once, outside the timers)"
        )
    lines += [
        "",
    ]
    rows = [("time ms", "%", "GFLOP/s", "GB/s", "roofline", "kernel", "kind", "source")]
    for k in report["kernels"]:
        src = k["source"]
        where = src["location"] or "?"
        if src["origin"]:
            where += f"  {src['origin']}"
        rows.append(
            (
                f"{k['median_seconds'] * 1e3:.4f}",
                f"{100 * k['share']:.1f}",
                f"{k['gflops']:.2f}",
                f"{k['gbs']:.2f}",
                f"{k['roofline_percent']:.1f}%",
                f"%{k['value']}",
                f"{k['kind']} ({k['op']})" if k["op"] != "kernel" else k["kind"],
                where,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(7)]
    for r in rows:
        cells = [r[i].rjust(widths[i]) for i in range(5)] + [r[5].ljust(widths[5])]
        cells += [r[6].ljust(widths[6]), r[7]]
        lines.append("  ".join(cells).rstrip())
    lines += [
        "",
        f"total {total['median_seconds'] * 1e3:.4f} ms per call (the kernels' timers "
        f"{100 * total['timed_share']:.1f}% of it; the call from Python "
        f"{total['wall_median_seconds'] * 1e3:.4f} ms); roofline "
        f"{total['predicted_seconds'] * 1e3:.4f} ms",
    ]
    return "\n".join(lines) + "\n"


SCALING_ROWS = 15
"""The kernels the scaling table lists (the JSON report holds them all)."""


def scaling_table(report: dict) -> str:
    """The scaling report as the table `gdv profile --threads 1,2` prints after the last
    count's: the whole call, then the kernels that lose the most time against perfect
    scaling."""
    counts, total = report["threads"], report["total"]
    ms = total["median_seconds"]
    up, eff = total["speedup"], total["efficiency"]
    arrow = " -> ".join(f"{t * 1e3:.4f}" for t in ms)
    lines = [
        f"scaling, {' -> '.join(map(str, counts))} threads (the counts interleaved call by call, "
        f"medians of {report['runs']} run(s) each): {arrow} ms per call, speedup "
        + (f"{up:.2f}x, efficiency {100 * eff:.0f}%" if up is not None else "-")
        + f", {total['lost_seconds'] * 1e3:.4f} ms above perfect scaling",
        "",
    ]
    head = [f"ms @{n}" for n in counts] + ["speedup", "lost ms", "kernel", "kind", "source"]
    rows = [tuple(head)]
    for k in report["kernels"][:SCALING_ROWS]:
        src = k["source"]
        where = (src["location"] or "?") + (f"  {src['origin']}" if src["origin"] else "")
        rows.append(
            tuple(f"{t * 1e3:.4f}" for t in k["median_seconds"])
            + (
                f"{k['speedup']:.2f}x" if k["speedup"] is not None else "-",
                f"{k['lost_seconds'] * 1e3:+.4f}",
                f"%{k['value']}",
                f"{k['kind']} ({k['op']})" if k["op"] != "kernel" else k["kind"],
                where,
            )
        )
    n = len(counts) + 2
    widths = [max(len(r[i]) for r in rows) for i in range(n + 2)]
    for r in rows:
        cells = [r[i].rjust(widths[i]) for i in range(n)]
        cells += [r[n].ljust(widths[n]), r[n + 1].ljust(widths[n + 1]), r[n + 2]]
        lines.append("  ".join(cells).rstrip())
    more = len(report["kernels"]) - SCALING_ROWS
    if more > 0:
        lines.append(f"({more} more kernel(s) in --json)")
    return "\n".join(lines) + "\n"
