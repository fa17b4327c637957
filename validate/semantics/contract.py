"""SMT meaning of `dot`: a sum fold of converted products over the contraction positions.

p[k] = convert(a[k], acc) * convert(b[k], acc); acc = p[0]; acc = acc + p[k] ...; the result
is convert(acc) (IR_SPEC.md section 3). The contraction positions are visited row-major over
the contracting dims in the order `lhs_contract` lists them, flattened into one fold index.
"""

from __future__ import annotations

import math

from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops.contract import dot_dims
from gdv.validate.semantics.index import Idx, delinearize
from gdv.validate.semantics.registry import Ctx, Index, Tensor, Term, rule


@rule(OPS["dot"])
def dot(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """dot_general: result dims are batch, A's free, B's free."""
    a, b = xs
    lb, rb = op.attrs["lhs_batch"], op.attrs["rhs_batch"]
    lc, rc = op.attrs["lhs_contract"], op.attrs["rhs_contract"]
    a_free, b_free = dot_dims(a.type, b.type, op.attrs)
    res = op.type.dtype
    acc = op.attrs.get("acc") or res
    if a.dtype.is_int:
        acc = res = a.dtype
    c_shape = tuple(a.shape[d] for d in lc)
    n = math.prod(c_shape)
    v = ctx.values

    def at(i: Index) -> Term:
        nb = len(lb)
        batch, af, bf = i[:nb], i[nb : nb + len(a_free)], i[nb + len(a_free) :]

        def body(k: Idx) -> Term:
            ck = delinearize(k, c_shape)
            ja: list[Idx] = [Idx.of(0)] * len(a.shape)
            jb: list[Idx] = [Idx.of(0)] * len(b.shape)
            for d, e, t in zip(lb, rb, batch, strict=True):
                ja[d], jb[e] = t, t
            for d, t in zip(a_free, af, strict=True):
                ja[d] = t
            for d, t in zip(b_free, bf, strict=True):
                jb[d] = t
            for d, e, t in zip(lc, rc, ck, strict=True):
                ja[d], jb[e] = t, t
            pa = v.convert(a.dtype, acc, (yield a.read(tuple(ja))))
            pb = v.convert(b.dtype, acc, (yield b.read(tuple(jb))))
            return v.mul(acc, pa, pb)

        return v.convert(acc, res, (yield from ctx.fold("sum", acc, n, body)))

    return Tensor(op.type, at)
