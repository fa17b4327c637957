"""`gdv import FILE.onnx|FILE.pt2 -o OUT.gdv --weights OUT.npz [--input-shape NAME=D,D,...]`.

A `.pt2` file is a program saved by `torch.export.save`; anything else is read as ONNX."""

from __future__ import annotations

import argparse

from gdv.ir.diagnostics import IRError, Loc, printable


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "import",
        help="import an ONNX model or a torch.export program to the textual IR and a weights file",
    )
    p.add_argument("file", help="an .onnx model or a .pt2 program (torch.export.save)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.gdv", help="the IR module")
    p.add_argument(
        "--weights",
        metavar="OUT.npz",
        help="initializer values keyed by parameter name (default: OUT with .npz); pass it to "
        "`gdv run` as one more --inputs",
    )
    p.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME=D,D,...",
        help="a static shape for an ONNX graph input with symbolic dims (repeatable; a .pt2 "
        "program has the static shapes it was exported with)",
    )
    p.add_argument(
        "--narrow-in-f32",
        action="store_true",
        help="ONNX: compute f16 and bf16 values in f32, rounding each f16/bf16 output once (as "
        "ONNX's reference computes most ops); default: every op rounds to its ONNX type",
    )
    p.add_argument(
        "--accumulate-in-f32",
        action="store_true",
        help="ONNX: accumulate f16 and bf16 matrix products, and f16 Softmax row sums, in f32 "
        "and round each result once (as numpy and so ONNX's reference compute them); other ops "
        "keep their ONNX type",
    )
    p.set_defaults(handler=run)


def _shapes(specs: list[str]) -> dict[str, list[int]]:
    shapes: dict[str, list[int]] = {}
    for spec in specs:
        name, sep, dims = spec.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = [int(d) for d in dims.split(",")] if dims else []
            if any(d < 0 for d in shapes[name]):
                raise ValueError
        except ValueError:
            raise IRError(
                f"--input-shape '{printable(spec)}' must be NAME=D,D,... with dims >= 0",
                Loc("<command line>", 1, 1),
            ) from None
    return shapes


def run(args: argparse.Namespace) -> int:
    from gdv.commands.run import _write_npz_atomically
    from gdv.frontends.provenance import annotated_text

    if args.file.lower().endswith(".pt2"):
        from gdv.frontends.torch import import_program

        if args.input_shape or args.narrow_in_f32 or args.accumulate_in_f32:
            raise IRError(
                "--input-shape, --narrow-in-f32 and --accumulate-in-f32 apply to ONNX models; "
                "a .pt2 program keeps "
                "the static shapes and dtypes it was exported with",
                Loc("<command line>", 1, 1),
            )
        module, weights = import_program(args.file)
    else:
        from gdv.frontends.onnx import import_model

        module, weights = import_model(
            args.file,
            input_shapes=_shapes(args.input_shape),
            narrow_in_f32=args.narrow_in_f32,
            accumulate_in_f32=args.accumulate_in_f32,
        )
    weights_path = args.weights or (args.output.rsplit(".", 1)[0] + ".npz")
    text = annotated_text(module)  # each op line ends with `// from` its source node
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise IRError(
            f"cannot write {printable(args.output, 200)}: {e.strerror}", Loc(args.output, 1, 1)
        ) from None
    _write_npz_atomically(weights_path, weights)
    fn = module.entry
    print(
        f"imported {args.file}: {len(fn.ops)} op(s), {len(fn.params) - len(weights)} input(s), "
        f"{len(weights)} weight(s) -> {args.output}, {weights_path}"
    )
    return 0
