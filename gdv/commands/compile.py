"""`gdv compile FILE [--target c|reference] [-O2] [-o OUT] [--emit-evidence [DIR]] ...`."""

from __future__ import annotations

import argparse
import os
import sys

from gdv.commands import positive_int, seconds
from gdv.driver import CompileOptions, compile_module, write_evidence
from gdv.ir.targets import DEFAULT_TARGET

EXIT_FOR = {"proved": 0, "refuted": 1, "unknown": 2}


class _Targets(argparse.Action):
    """--target, repeatable: the default (one name) until given, then the list given."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        current = getattr(namespace, self.dest)
        targets = current if isinstance(current, list) else []
        setattr(namespace, self.dest, [*targets, values])


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "compile",
        help="run the pass pipeline and prove every obligation (exit 0 proved, 1 refuted, "
        "2 unknown, 3 input error)",
    )
    p.add_argument("file", help="a .gdv file")
    p.add_argument(
        "--target",
        action=_Targets,
        default=DEFAULT_TARGET,
        help=f"the target (default {DEFAULT_TARGET}: C11 compiled to a shared object; or "
        "triton, reference); see `gdv targets`. Repeatable: each target compiles the source "
        "by its own pipeline, and --emit-evidence writes one cross-target bundle",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="write the artifact: target c, the shared object to OUT and its C source beside "
        "it (OUT.so -> OUT.c); target reference, the final IR to OUT; target triton, the "
        "Python module to OUT. With several targets OUT is a folder holding one artifact per "
        "target: OUT/c.so (and OUT/c.c), OUT/triton.py, OUT/reference.gdv",
    )
    p.add_argument(
        "--isa",
        default=None,
        metavar="ISA",
        help="target c: generate and compile for this host class: native, avx512, avx2, sse2 "
        "or neon (-march, vector width, registers; default: $GDV_C_ISA, else native)",
    )
    p.add_argument(
        "--allow-fallback",
        action="store_true",
        help="let ops the target cannot do run on reference kernels (recorded in the "
        "evidence; without it they are compile-time errors)",
    )
    p.add_argument(
        "-O",
        dest="level",
        type=int,
        choices=(0, 1, 2, 3),
        default=2,
        help="optimisation level: -O0, -O1, -O2 (default), -O3 (-O2 --reassociate)",
    )
    p.add_argument(
        "--reassociate",
        action="store_true",
        help="run float sums in vector orders and products with fused multiply-adds (each a "
        "`real` claim with its error-bound change recorded; implied by -O3)",
    )
    p.add_argument(
        "--fast-math",
        action="store_true",
        help="allow rewrites that hold only over the reals (each a `real` claim)",
    )
    p.add_argument(
        "--bound",
        action="append",
        default=[],
        metavar="NAME|W.npz",
        help="a parameter the caller fixes once (Compilation.bind, as a runtime fixes a model's "
        "weights), or an .npz file whose arrays are such parameters (the weights file of gdv "
        "import); may repeat. Products reading them are planned for factors packed at bind "
        "time instead of on every call, and kernels computed from them alone run at bind "
        "time (the entry's at_bind)",
    )
    p.add_argument(
        "--disable-pass",
        action="append",
        default=[],
        metavar="NAME",
        help="skip a pass (repeatable), e.g. to bisect a miscompile",
    )
    p.add_argument(
        "--print-after",
        action="append",
        default=[],
        metavar="NAME",
        help="print the IR after this pass (repeatable)",
    )
    p.add_argument(
        "--print-ir-after-all", action="store_true", help="print the IR after every pass"
    )
    p.add_argument(
        "--external-pass",
        action="append",
        default=[],
        metavar="CMD",
        help="pipe the module through CMD right after parsing (repeatable, in order);"
        " its output is proved equivalent",
    )
    p.add_argument(
        "--external-timeout",
        type=seconds,
        default=60.0,
        metavar="S",
        help="seconds an external pass may run (default 60)",
    )
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=None,
        metavar="N",
        help="solver worker processes (default: all cores)",
    )
    p.add_argument(
        "--timeout",
        type=seconds,
        default=10.0,
        metavar="S",
        help="seconds per solver query (default 10)",
    )
    p.add_argument(
        "--memory-limit",
        type=positive_int,
        default=4096,
        metavar="MB",
        help="memory per solver worker (default 4096)",
    )
    p.add_argument("--cache-dir", metavar="DIR", help="proof cache (default ~/.cache/gdv)")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    p.add_argument(
        "--emit-evidence",
        nargs="?",
        const="",
        default=None,
        metavar="DIR",
        help="write an evidence bundle (default DIR: <input stem>.evidence/)",
    )
    p.add_argument(
        "--policy",
        metavar="FILE",
        help="gate on this policy (default: gdv-policy.toml or [tool.gdv.policy] if present)",
    )
    p.add_argument(
        "--hook",
        action="append",
        default=[],
        metavar="CMD",
        help="run CMD BUNDLE_DIR after writing the bundle; a non-zero exit vetoes (repeatable)",
    )
    p.add_argument("--sign-key", metavar="KEY.pem", help="sign the bundle's manifest (Ed25519)")
    p.add_argument(
        "--profile",
        action="store_true",
        help="with --emit-evidence: run the compiled program with per-kernel timers (target c) "
        "and add the measured execution report to the bundle (see `gdv profile`)",
    )
    p.add_argument(
        "--profile-runs",
        type=positive_int,
        default=10,
        metavar="N",
        help="timed runs for --profile (default 10; the median is reported)",
    )
    from gdv.commands.partition import add_partition_options

    add_partition_options(p, mesh_required=False)
    p.set_defaults(handler=compile_command)


def compile_command(args: argparse.Namespace) -> int:
    given = args.target if isinstance(args.target, list) else [args.target]
    targets = list(dict.fromkeys(given))
    if len(targets) != len(given):
        from gdv.ir.diagnostics import IRError, Loc

        raise IRError("--target names a target twice", Loc("<command line>", 1, 1))
    if len(targets) > 1:
        return compile_targets(args, targets)
    args.target = targets[0]
    if args.mesh is not None:
        from gdv.commands.partition import compile_partitioned

        return compile_partitioned(args)
    if args.shard or args.order != "rank":
        from gdv.ir.diagnostics import IRError, Loc

        raise IRError(
            "--shard and --order partition over a mesh: give --mesh too",
            Loc("<command line>", 1, 1),
        )
    if args.isa:  # read by the C target's descriptor, schedule parameters and toolchain
        from gdv.backends.c.isa import ISA_ENV, check

        os.environ[ISA_ENV] = check(args.isa, "<command line>")
    if args.profile and args.emit_evidence is None:
        from gdv.ir.diagnostics import IRError, Loc

        raise IRError(
            "--profile adds the execution report to an evidence bundle: give --emit-evidence "
            "too (or run `gdv profile FILE`)",
            Loc("<command line>", 1, 1),
        )
    comp = compile_module(args.file, _options(args))
    _summary(comp)
    if args.output and comp.verdict == "proved":
        for written in write_artifact(comp, args.output):
            print(f"wrote {written}")
    path = None
    if args.emit_evidence is not None or args.hook or args.sign_key:
        directory = _evidence_dir(args)
        execution = None
        if args.profile and comp.verdict == "proved":
            from gdv.commands.profile import measure

            execution = measure(comp, runs=args.profile_runs)[0]
        elif args.profile:
            print(
                f"gdv: not profiled: the compile's obligations are {comp.verdict}", file=sys.stderr
            )
        path = write_evidence(comp, directory, sign_key=args.sign_key, execution=execution)
        print(f"evidence: {path}")
    from gdv.evidence.gate import gate

    problem = gate(comp, path, policy_path=args.policy, hook_commands=args.hook)
    if problem is not None:
        print(f"gdv: {problem}", file=sys.stderr)
        return 1
    return EXIT_FOR[comp.verdict]


def _options(args: argparse.Namespace, target: str | None = None) -> CompileOptions:
    """The compile options the command line gives, for `target` (default: `args.target`)."""
    target = target or args.target
    return CompileOptions(
        target=target,
        level=args.level,
        fast_math=args.fast_math,
        reassociate=args.reassociate,
        disable=tuple(args.disable_pass),
        print_after=tuple(args.print_after),
        print_ir_after_all=args.print_ir_after_all,
        external_passes=tuple(args.external_pass),
        external_timeout=args.external_timeout,
        jobs=args.jobs,
        timeout=args.timeout,
        memory_mb=args.memory_limit,
        cache_dir=args.cache_dir,
        use_cache=not args.no_cache,
        progress=True,
        allow_fallback=args.allow_fallback,
        bound=bound_names(args.bound),
    )


def bound_names(values: list[str]) -> tuple[str, ...]:
    """The parameter names `--bound` gives: names as written, an .npz file's array names."""
    names: list[str] = []
    for v in values:
        if v.endswith(".npz"):
            from gdv.commands.run import read_inputs

            names += list(read_inputs([v]))
        else:
            names.append(v.lstrip("%"))
    return tuple(sorted(set(names)))


def compile_targets(args: argparse.Namespace, targets: list[str]) -> int:
    """`gdv compile FILE --target A --target B ...`: the source compiled by each target's
    pipeline, each artifact written under `-o OUT` (a folder, one file per target), and with
    --emit-evidence one cross-target bundle (`gdv.evidence.cross_target`)."""
    from gdv.ir.diagnostics import IRError, Loc
    from gdv.ir.targets import target_info

    where = Loc("<command line>", 1, 1)
    for name in targets:
        target_info(name, where)
    for flag, given in (
        ("--mesh", args.mesh is not None),
        ("--shard", bool(args.shard)),
        ("--order", args.order != "rank"),
        ("--profile", args.profile),
    ):
        if given:
            raise IRError(f"{flag} works on one target: give --target once", where)
    if args.output and os.path.exists(args.output) and not os.path.isdir(args.output):
        raise IRError(
            f"-o {args.output}: with several targets -o names a folder (one artifact per "
            "target), and this is a file",
            where,
        )
    if args.isa:
        from gdv.backends.c.isa import ISA_ENV, check

        os.environ[ISA_ENV] = check(args.isa, "<command line>")
    comps = []
    for name in targets:
        print(f"target {name}:")
        comp = compile_module(args.file, _options(args, name))
        _summary(comp)
        comps.append(comp)
    if args.output and all(c.verdict == "proved" for c in comps):
        os.makedirs(args.output, exist_ok=True)
        for comp in comps:
            name = comp.options.target
            suffix = ".so" if comp.artifact.kind == "c-source" else _suffix(name)
            for written in write_artifact(comp, os.path.join(args.output, name + suffix)):
                print(f"wrote {written}")
    path = None
    if args.emit_evidence is not None or args.hook or args.sign_key:
        from gdv.evidence.cross_target import target_bundle, write_cross_target_bundle

        directory = _evidence_dir(args)
        path = write_cross_target_bundle(comps, directory, sign_key=args.sign_key)
        print(f"evidence: {path} (cross-target: {', '.join(targets)})")
    from gdv.evidence.gate import gate

    # Every target's compile passes the gate on its own bundle, as a single target's does.
    for comp in comps:
        sub = None if path is None else path / target_bundle(comp.options.target)
        problem = gate(comp, sub, policy_path=args.policy, hook_commands=args.hook)
        if problem is not None:
            print(f"gdv: target {comp.options.target}: {problem}", file=sys.stderr)
            return 1
    verdicts = {c.verdict for c in comps}
    worst = next((v for v in ("refuted", "unknown") if v in verdicts), "proved")
    return EXIT_FOR[worst]


def _suffix(target: str) -> str:
    from gdv.ir.targets import target_info

    return target_info(target).artifact_suffix


def write_artifact(comp, out: str) -> list[str]:
    """Write the compile's artifact to `out` (and for target c the C source beside it: `x.so`
    gives `x.c`), through temporary files renamed into place; the paths written."""
    import shutil
    import tempfile

    from gdv.ir.diagnostics import IRError, Loc, printable

    art = comp.artifact
    files: list[tuple[str, bytes | None, str | None]] = []
    if art.kind == "c-source":
        files.append((out, None, str(art.library)))
        stem = out[:-3] if out.endswith(".so") else out
        files.append((stem + ".c", art.text.encode(), None))
    else:
        files.append((out, art.text.encode(), None))
    written = []
    for path, data, copy_from in files:
        directory = os.path.dirname(os.path.abspath(path))
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".gdv-")
            with os.fdopen(fd, "wb") as f:
                if data is not None:
                    f.write(data)
            if copy_from is not None:
                shutil.copyfile(copy_from, tmp)
            os.chmod(tmp, 0o755 if copy_from is not None else 0o644)
            os.replace(tmp, path)
        except OSError as e:
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)
            raise IRError(
                f"cannot write {printable(path, 200)}: {e.strerror}", Loc(path, 1, 1)
            ) from None
        written.append(path)
    return written


def _evidence_dir(args) -> str:
    """--emit-evidence's folder: the one given, or FILE's stem + `.evidence` beside FILE."""
    stem = os.path.splitext(os.path.basename(args.file))[0]
    return args.emit_evidence or os.path.join(os.path.dirname(args.file), f"{stem}.evidence")


def _summary(comp) -> None:
    by_pass: dict[str, dict[str, int]] = {}
    seconds: dict[str, float] = {}
    for r in comp.records:
        by_pass.setdefault(r.name, {"proved": 0, "refuted": 0, "unknown": 0})
        seconds[r.name] = r.seconds
    for out in comp.outcomes:
        counts = by_pass[out.obligation.pass_name]
        counts[out.status] += 1
        seconds[out.obligation.pass_name] += out.seconds
    width = max(len(n) for n in by_pass) if by_pass else 4
    print(f"{'pass':<{width}}  proved  refuted  unknown  seconds")
    for name, c in by_pass.items():
        print(
            f"{name:<{width}}  {c['proved']:>6}  {c['refuted']:>7}  {c['unknown']:>7}  "
            f"{seconds[name]:>7.2f}"
        )
    cached = sum(1 for o in comp.outcomes if o.cached)
    shared = sum(1 for o in comp.outcomes if o.shared_with)
    print(
        f"{len(comp.outcomes)} obligation(s), {cached} from the cache, {shared} sharing a "
        f"query with another; compile and prove "
        f"{comp.seconds:.2f} s; verdict: {comp.verdict}"
    )
    for r in comp.records:
        change = r.bound_change
        if change is None:
            continue
        if "unavailable" in change:
            print(f"{r.name}: error bound change unavailable: {change['unavailable']}")
        else:

            def shown(x: float | None) -> str:
                return "unbounded" if x is None else f"{x:.3g}"

            pairs = ", ".join(
                f"out{k}: {shown(a)} -> {shown(b)}"
                for k, (a, b) in enumerate(zip(change["before"], change["after"], strict=True))
            )
            print(f"{r.name} (real claims): rigorous error bound {pairs}")
    art = comp.artifact
    if art is not None and art.library is not None:
        print(f"target {comp.options.target}: {art.library.name} ({len(art.text)} bytes of C)")
    for f in art.fallbacks if art is not None else []:
        print(f"{f.loc}: {f.op} runs on the reference kernel (--allow-fallback): {f.reason}")
    for out in comp.outcomes:
        if out.status == "proved":
            continue
        ob = out.obligation
        where = f"{ob.loc}: " if ob.loc else ""
        print(f"{where}{out.status}: {ob.id} ({ob.claim}): {out.reason}", file=sys.stderr)
        cex = out.counterexample
        if cex is not None:
            print(
                f"  example: output {cex.output} at index {list(cex.index)}: src gives "
                f"{cex.value_a}, tgt gives {cex.value_b} ({cex.origin})",
                file=sys.stderr,
            )
            for name, arr in cex.inputs.items():
                print(f"    %{name} = {_short(arr)}", file=sys.stderr)


def _short(arr) -> str:
    import numpy as np

    with np.printoptions(threshold=8, edgeitems=2, linewidth=100):
        return " ".join(str(np.asarray(arr)).split())
