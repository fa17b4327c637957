"""C for reduce_sum, reduce_max and reduce_min outside kernels: a loop nest whose body is the
element itself, folded left over the reduced axes in row-major order from the first element
(backends/c/nest.py), the empty fold giving 0, -inf / the dtype's minimum, +inf / its maximum."""

from __future__ import annotations

from gdv.backends.c.emit import Program, comment
from gdv.backends.c.nest import Nest, emit_nest
from gdv.backends.c.registry import lowering
from gdv.ir.core import Op
from gdv.ir.ops.reduce import REDUCTIONS

_COMBINER = {s.name: s.combiner.op for s in REDUCTIONS.specs()}


@lowering(*REDUCTIONS.specs())
def _reduce(prog: Program, op: Op) -> None:
    (src,) = op.operands
    x = prog.entry.types()[src]
    n = x.rank
    axes = sorted(op.attrs["axes"])
    kept = [d for d in range(n) if d not in axes]
    rows = [[int(j == d) for j in range(n)] + [0] for d in range(n)]
    if x.dtype.is_bool:
        raise prog.error(op, "a reduction of i1 values has no C lowering")
    nest = Nest(list(x.shape), [rows], kept, axes, _COMBINER[op.name], {})
    emit_nest(
        prog, op, nest, [x], lambda loads, lines, indent: loads[0], f"{op.name} %{comment(src)}"
    )
