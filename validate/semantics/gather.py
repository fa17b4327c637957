"""SMT meaning of `take`: the table at the clamped index (no wrap-around)."""

from __future__ import annotations

import z3

from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS
from gdv.validate.semantics.index import Idx
from gdv.validate.semantics.registry import Ctx, Index, Tensor, Term, rule


@rule(OPS["take"])
def take(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """out[a..., i..., b...] = table[a..., clamp(idx[i...], 0, size-1), b...]."""
    table, idx = xs
    axis = op.attrs["axis"]
    r = len(idx.shape)
    size = table.shape[axis]
    dt = idx.dtype

    def at(i: Index) -> Term:
        v = yield idx.read(i[axis : axis + r])
        if z3.is_bv_value(v):
            pos = Idx.of(v.as_signed_long() if dt.is_signed else v.as_long())
        else:
            pos = Idx.var(z3.BV2Int(v, is_signed=dt.is_signed), dt.int_min, dt.int_max)
        j = (*i[:axis], pos.clamp(0, size - 1), *i[axis + r :])
        return (yield table.read(j))

    return Tensor(op.type, at)
