"""`gdv profile FILE [--inputs IN.npz]... [--bind W.npz]... [-O N] [--runs N] [--json]
[--trace TRACE.json]`.

Compiles FILE for the C target (every obligation proved, as `gdv run --target c` does), builds
the program once more with a clock read around each op's code (`gdv.backends.c.profile`),
runs it and prints its kernels by time: median over the runs, share of the whole call,
GFLOP/s, GB/s and percent of the roofline (flops and bytes from `gdv.backends.cost`, peaks
from the target's capability descriptor), and where each came from (the input's FILE:LINE,
and the ONNX node or torch module `gdv import` noted on that line). `--json` prints the
execution report (`evidence/schema/reports-execution-1.json`); `--trace` writes a
Chrome-trace / Perfetto timeline of every run. `--bind` fixes the parameters its files hold
(a model's weights, as `Compilation.bind` and onnxruntime's session do) before the timed calls,
so the product factors read only from them are packed once, outside the timers; the report
lists them (`bound`).
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
        "of gdv import): their factors are packed once, as Compilation.bind does; may repeat",
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
    p.add_argument("--jobs", type=positive_int, default=None, metavar="N", help="solver workers")
    p.add_argument("--cache-dir", metavar="DIR", help="proof cache (default ~/.cache/gdv)")
    p.set_defaults(handler=profile_command)


def measure(
    comp,
    runs: int = 10,
    inputs: dict | None = None,
    seed: int = 0,
    warmup: int = 1,
    bound: frozenset[str] = frozenset(),
):
    """Run the compiled program of `comp` (a proved `gdv.driver.Compilation` for target c)
    with per-kernel timers: (the execution report, the `gdv.backends.c.profile.Runs`). The
    parameters named in `bound` are fixed first (`Executable.bind`), outside the timers."""
    from gdv.backends import c
    from gdv.backends.c import profile
    from gdv.backends.capabilities import descriptor
    from gdv.backends.reference import random_inputs
    from gdv.backends.targets import get_target
    from gdv.evidence.reports import execution

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
    measured = profile.run(exe, inputs, runs, warmup)
    report = execution(
        comp.module,
        measured,
        descriptor("c"),
        comp.source_text,
        source=os.path.basename(comp.source.filename),
        level=comp.options.level,
        warmup=warmup,
        bound=sorted(bound),
    )
    return report, measured


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
    report, runs = measure(comp, args.runs, inputs, args.seed, args.warmup, bound)
    if args.trace:
        write_text_atomically(args.trace, json.dumps(chrome_trace(runs, report)) + "\n")
    if args.json:
        sys.stdout.write(json.dumps(report, indent=1, sort_keys=True) + "\n")
    else:
        sys.stdout.write(table(report, args.file))
    if args.trace:
        print(f"trace: {args.trace}", file=sys.stderr if args.json else sys.stdout)
    return 0


def table(report: dict, name: str) -> str:
    """The execution report as the terminal table `gdv profile` prints."""
    m, total = report["machine"], report["total"]
    lines = [
        f"gdv profile {name}: target c, -O{report['level']}, median of {report['runs']} run(s) "
        f"after {report['warmup']} warm-up",
        f"machine: {m['cpu']}, {m['cores']} core(s); roofline peaks {m['peak_gflops_f32']:g} "
        f"GFLOP/s (f32 mul+add), {m['copy_bandwidth_gbs']:g} GB/s (copy)",
    ]
    if report.get("bound"):
        lines.append(
            f"bound before the runs: {len(report['bound'])} parameter(s) (their product factors "
            "packed once, outside the timers)"
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
