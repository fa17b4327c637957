"""`gdv run FILE [--inputs IN.npz]... [--seed N] [--output OUT.npz] [--target T] [--ranks N]`.

An SPMD entry function (attribute `mesh`, docs/IR_SPEC.md section 7) takes global inputs: on
the reference target its simulation runs every rank at once (`run_spmd`); with `--ranks N` it
runs on N MPI processes, its local ops compiled for C in segments between the collectives
(`gdv.backends.mpi.run_mpi`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import zipfile

import numpy as np

from gdv.commands.basic import load_arg
from gdv.ir.diagnostics import IRError, Loc, printable
from gdv.ir.dtypes import DType
from gdv.ir.targets import TARGET_NAMES, target_info

TARGETS = TARGET_NAMES


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("run", help="execute @main on the given or random inputs")
    p.add_argument("file", help="a .gdv file, or - for standard input")
    p.add_argument(
        "--inputs",
        action="append",
        default=[],
        metavar="IN.npz",
        help="inputs keyed by parameter name (no %%); may repeat, later files win on a key",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for inputs not given (default 0)")
    p.add_argument("--output", metavar="OUT.npz", help="write outputs as out0, out1, ...")
    p.add_argument(
        "--target",
        default=None,
        help="reference (default), or c (compiled at -O2, proved, run as C)",
    )
    p.add_argument(
        "--ranks",
        type=int,
        default=None,
        metavar="N",
        help="an SPMD function: run it on N MPI processes (N = the mesh's size), its local ops "
        "compiled for C",
    )
    p.add_argument(
        "--report",
        metavar="REPORT.json",
        help="--ranks: write every rank's report (bytes sent per collective, seconds per step)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="--ranks: stop the MPI run after S seconds (default 300)",
    )
    p.add_argument("--ideal", action="store_true", help="evaluate every float in f64")
    p.add_argument(
        "--allow-fallback",
        action="store_true",
        help="target c: run ops the target cannot do on reference kernels (reported)",
    )
    p.set_defaults(handler=run)


def read_inputs(paths: list[str]) -> dict[str, np.ndarray]:
    """Merge the arrays of several .npz files; later files win on a repeated key."""
    merged: dict[str, np.ndarray] = {}
    for path in paths:
        try:
            with np.load(path, allow_pickle=False) as data:
                for key in data.files:
                    merged[key] = data[key]
        except FileNotFoundError:
            raise IRError(
                f"cannot read inputs: no such file {printable(path, 200)}", Loc(path, 1, 1)
            ) from None
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
            raise IRError(
                f"cannot read inputs: not a valid .npz file ({printable(str(e), 120)})",
                Loc(path, 1, 1),
            ) from None
    return merged


def _holds(path: str, key: str) -> bool:
    with np.load(path, allow_pickle=False) as data:
        return key in data.files


def _as_param_dtype(name: str, arr: np.ndarray, dtype: DType) -> np.ndarray:
    # bf16 arrays survive np.savez only as raw 2-byte voids; view them back.
    if dtype is DType.BF16 and arr.dtype.kind == "V" and arr.dtype.itemsize == 2:
        return arr.view(dtype.np)
    return arr


def entry_inputs(files: list[str], fn, seed: int) -> dict:
    """The inputs of entry function `fn`: the arrays the `--inputs` files give (the last file
    holding a key wins), converted to each parameter's dtype, and seeded random values within
    the declared ranges for the rest; an input naming no parameter is an error at its file."""
    from gdv.backends import reference

    given = read_inputs(files)
    params = {p.name: p for p in fn.params}
    for key in given:
        if key not in params:
            # Point at the last file that holds the key (the one whose array would be used).
            source = next(p for p in reversed(files) if _holds(p, key))
            raise IRError(
                f"input '{printable(key)}' names no parameter of @{fn.name} (parameters: "
                f"{', '.join(params) or 'none'})",
                Loc(source, 1, 1),
            )
    inputs = reference.random_inputs(fn, seed)
    for key, arr in given.items():
        inputs[key] = _as_param_dtype(key, arr, params[key].type.dtype)
    return inputs


def run(args: argparse.Namespace) -> int:
    from gdv.backends import reference

    command_line = Loc("<command line>", 1, 1)
    target = target_info(args.target or "reference", command_line)
    module = load_arg(args.file)
    fn = module.entry
    if fn is not None and "mesh" in fn.attrs:
        outputs = _run_spmd(args, module, fn)
        fn_results = _global_results(module, fn)
    else:
        if args.ranks is not None:
            where = (fn.loc if fn is not None else None) or command_line
            name = f"@{fn.name}" if fn is not None else "the module"
            raise IRError(
                f"--ranks runs an SPMD function under MPI, but {name} is not one (it has no "
                'mesh attribute, such as {mesh = "m"})',
                where,
            )
        inputs = entry_inputs(args.inputs, fn, args.seed)
        if not target.interpreter:
            outputs = _run_compiled(args, module, inputs)
        else:
            outputs = reference.run(module, inputs, mode="ideal" if args.ideal else "exact")
        fn_results = fn.results
    if args.output:
        _write_npz_atomically(args.output, {f"out{i}": o for i, o in enumerate(outputs)})
        print(f"wrote {len(outputs)} output(s) to {args.output}")
    else:
        for i, (o, t) in enumerate(zip(outputs, fn_results, strict=True)):
            print(f"out{i}: {t}")
            with np.printoptions(threshold=64, edgeitems=3, linewidth=100):
                print(np.asarray(o))
    return 0


def _global_results(module, fn) -> list:
    from gdv.backends.reference.spmd import global_function

    return global_function(module, fn).results


def _run_spmd(args: argparse.Namespace, module, fn) -> list[np.ndarray]:
    """An SPMD entry function on global inputs: simulated on the reference target, or on
    `--ranks` MPI processes."""
    from gdv.backends.reference.spmd import global_function, run_spmd

    command_line = Loc("<command line>", 1, 1)
    inputs = entry_inputs(args.inputs, global_function(module, fn), args.seed)
    if args.ranks is None:
        if args.report:
            raise IRError("--report needs --ranks (it reports the MPI ranks)", command_line)
        if args.target not in (None, "reference"):
            target_info(args.target, command_line)
            raise IRError(
                f"@{fn.name} is an SPMD function: it runs on the reference target (simulating "
                f"every rank), or under MPI with --ranks N (its local ops compiled for C)",
                command_line,
            )
        run = run_spmd(module, inputs, mode="ideal" if args.ideal else "exact")
    else:
        if args.target not in (None, "c", "reference"):
            target_info(args.target, command_line)
            raise IRError(
                f"--ranks runs the local ops compiled for C (or, --target reference, on the "
                f"reference backend), not on --target {args.target}",
                command_line,
            )
        if args.ideal:
            raise IRError("--ideal runs on the reference target only", command_line)
        if args.ranks < 1:
            raise IRError(f"--ranks must be at least 1, got {args.ranks}", command_line)
        if args.timeout <= 0:
            raise IRError(f"--timeout must be positive, got {args.timeout:g}", command_line)
        from gdv.backends.mpi import run_mpi

        run = run_mpi(
            module,
            inputs,
            args.ranks,
            timeout=args.timeout,
            allow_fallback=args.allow_fallback,
            target=args.target or "c",
        )
        if args.report:
            _write_text_atomically(
                args.report, json.dumps({"ranks": run.reports, "seconds": run.seconds}, indent=1)
            )
        sent = [r.get("bytes_sent", 0) for r in run.reports]
        print(
            f"gdv: ran on {args.ranks} MPI ranks in {run.seconds:.2f} s; bytes sent per rank: "
            f"{', '.join(map(str, sent))}",
            file=sys.stderr,
        )
    differing: dict[int, list[tuple[int, int]]] = {}
    for k, kept, other in run.disagreements:
        differing.setdefault(k, []).append((kept, other))
    for k, pairs in differing.items():
        shown = ", ".join(f"rank {other} differs from rank {kept}" for kept, other in pairs[:4])
        more = f" and {len(pairs) - 4} more" if len(pairs) > 4 else ""
        print(
            f"gdv: warning: out{k}: ranks holding the same block disagree ({shown}{more}); "
            "each block is shown as the first rank holding it has it",
            file=sys.stderr,
        )
    return run.outputs


def _run_compiled(
    args: argparse.Namespace, module, inputs: dict[str, np.ndarray]
) -> list[np.ndarray]:
    """Compile with the target's pipeline at -O2, prove it, and run it on the target."""
    from gdv.driver import CompileOptions, compile_module
    from gdv.ir.printer import print_module

    if args.ideal:
        raise IRError("--ideal runs on the reference target only", Loc("<command line>", 1, 1))
    source = args.file if args.file != "-" else print_module(module)
    options = CompileOptions(target=args.target, allow_fallback=args.allow_fallback)
    comp = compile_module(source, options)
    for f in comp.artifact.fallbacks:
        print(
            f"gdv: {f.loc}: {f.op} runs on the reference kernel (fallback): {f.reason}",
            file=sys.stderr,
        )
    if comp.verdict != "proved":
        raise IRError(f"refusing to run: the compile's obligations are {comp.verdict}")
    return comp(**inputs)


def _write_text_atomically(path: str, text: str) -> None:
    """Write to a temporary file beside `path`, then rename."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(suffix=".json", dir=directory)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise IRError(
            f"cannot write {printable(path, 200)}: {e.strerror}", Loc(path, 1, 1)
        ) from None


def _write_npz_atomically(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Write to a temporary file beside `path`, then rename: a failure leaves `path` intact."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(suffix=".npz", dir=directory)
    except OSError as e:
        raise IRError(
            f"cannot write {printable(path, 200)}: {e.strerror}", Loc(path, 1, 1)
        ) from None
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        raise IRError(
            f"cannot write {printable(path, 200)}: {e.strerror}", Loc(path, 1, 1)
        ) from None
