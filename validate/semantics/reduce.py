"""SMT meaning of the reductions: one fold over the reduced positions, flattened row-major.

`reduce_*` over several axes visits the reduced positions in row-major order of the operand
(whatever order `axes` lists them in), so they flatten into one fold index k, and each
operand index is recovered from k by div/mod.
"""

from __future__ import annotations

import math

from gdv.ir.core import Op
from gdv.ir.ops.reduce import REDUCTIONS
from gdv.validate.semantics.index import Idx, delinearize
from gdv.validate.semantics.registry import Ctx, Index, Tensor, Term, rule

_KIND = {s.name: s.combiner.fold for s in REDUCTIONS.specs()}


@rule(*REDUCTIONS.specs())
def reduce(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """fold(kind, n, lambda k. x[kept dims from i, reduced dims from k])."""
    (x,) = xs
    axes = sorted(op.attrs["axes"])
    kept = [d for d in range(len(x.shape)) if d not in axes]
    red_shape = tuple(x.shape[d] for d in axes)
    n = math.prod(red_shape)
    kind = _KIND[op.name]

    def at(i: Index) -> Term:
        def body(k: Idx) -> Term:
            j: list[Idx] = [Idx.of(0)] * len(x.shape)
            for d, v in zip(kept, i, strict=True):
                j[d] = v
            for d, v in zip(axes, delinearize(k, red_shape), strict=True):
                j[d] = v
            return (yield x.read(tuple(j)))

        return (yield from ctx.fold(kind, x.dtype, n, body))

    return Tensor(op.type, at)
