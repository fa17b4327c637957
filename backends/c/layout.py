"""C for the layout family outside kernels: reshape shares its operand's buffer (row-major order
is kept, values are never written twice), broadcast, transpose and slice are affine copies (one
loop nest each, backends/c/nest.py); concat and pad are not lowered yet."""

from __future__ import annotations

from gdv.backends.c.emit import Program, comment, ctype
from gdv.backends.c.nest import Nest, emit_nest
from gdv.backends.c.registry import lowering, unsupported
from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS


def _copy(prog: Program, op: Op, rows: list[list[int]]) -> None:
    """op's result[i] = operand[rows . i + c], a loop nest over the result's shape."""
    (src,) = op.operands
    operand_type = prog.entry.types()[src]
    n = op.type.rank
    nest = Nest(list(op.type.shape), [rows], list(range(n)), [], "none", {})
    emit_nest(
        prog,
        op,
        nest,
        [operand_type],
        lambda loads, lines, indent: loads[0],
        f"{op.name} %{comment(op.result)}",
    )


def _unit(n: int, at: int | None, const: int = 0, scale: int = 1) -> list[int]:
    row = [0] * (n + 1)
    if at is not None:
        row[at] = scale
    row[n] = const
    return row


@lowering(OPS["reshape"])
def _reshape(prog: Program, op: Op) -> None:
    ctype(op.type.dtype, op, prog.module)
    prog.share_slot(op.result, op.operands[0])


@lowering(OPS["broadcast"])
def _broadcast(prog: Program, op: Op) -> None:
    operand_type = prog.entry.types()[op.operands[0]]
    n = op.type.rank
    rows = [
        _unit(n, None if size == 1 else d)
        for size, d in zip(operand_type.shape, op.attrs["dims"], strict=True)
    ]
    _copy(prog, op, rows)


@lowering(OPS["transpose"])
def _transpose(prog: Program, op: Op) -> None:
    perm = op.attrs["perm"]
    n = op.type.rank
    _copy(prog, op, [_unit(n, perm.index(d)) for d in range(n)])


@lowering(OPS["slice"])
def _slice(prog: Program, op: Op) -> None:
    n = op.type.rank
    rows = [
        _unit(n, d, start, stride)
        for d, (start, stride) in enumerate(zip(op.attrs["start"], op.attrs["stride"], strict=True))
    ]
    _copy(prog, op, rows)


unsupported(
    OPS["concat"], "concat outside a kernel is not lowered to C yet (no piecewise nests)", __name__
)
unsupported(
    OPS["pad"], "pad outside a kernel is not lowered to C yet (no piecewise nests)", __name__
)
