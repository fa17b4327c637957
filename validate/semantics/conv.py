"""SMT meaning of `conv2d`: a sum fold over (input channel of the group, KH, KW), row-major.

The input is padded with +0.0 elements that take part in the sum (IR_SPEC.md section 7), so a
padded position contributes `0.0 * w`, exactly as if `pad` had been applied first. An
`epilogue` E is applied to each sum with the extra operands' elements of the output channel,
as a kernel's epilogue is applied to its fold.
"""

from __future__ import annotations

import z3

from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops.kernel import epilogue_of
from gdv.ir.types import TensorType
from gdv.validate.encode import encode
from gdv.validate.semantics.index import Idx, delinearize
from gdv.validate.semantics.registry import Ctx, Index, Tensor, Term, rule


@rule(OPS["conv2d"])
def conv2d(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """out[n,o,i,j] = sum_{c,kh,kw} xp[n, g*Cg+c, i*sh+kh*dh, j*sw+kw*dw] * w[o,c,kh,kw]."""
    x, w, *extra = xs
    (pt, _), (pl, _) = op.attrs["padding"]
    sh, sw = op.attrs["stride"]
    dh, dw = op.attrs["dilation"]
    groups = op.attrs["groups"]
    _, cg, kh, kw = w.shape
    og = w.shape[0] // groups
    h, wd = x.shape[2], x.shape[3]
    v, dt = ctx.values, x.dtype
    zero = v.zero(dt)

    def at(i: Index) -> Term:
        n, o, oi, oj = i
        group = o.floordiv(og)

        def body(k: Idx) -> Term:
            c, a, b = delinearize(k, (cg, kh, kw))
            row = oi * sh + a * dh - pt
            col = oj * sw + b * dw - pl
            inside = [r for r in (row.in_range(0, h), col.in_range(0, wd)) if not z3.is_true(r)]
            if any(z3.is_false(r) for r in inside):
                xv = zero
            else:
                xv = yield x.read((n, group * cg + c, row, col))
                if inside:
                    xv = z3.If(z3.And(*inside) if len(inside) > 1 else inside[0], xv, zero)
            return v.mul(dt, xv, (yield w.read((o, c, a, b))))

        return (yield from ctx.fold("sum", dt, cg * kh * kw, body))

    epi = epilogue_of(op.attrs)
    if epi is None:
        return Tensor(op.type, at)

    def then(i: Index) -> Term:
        # E(the sum, e_k[o] for each extra operand; e_k[] for a scalar one).
        acc = yield from at(i)
        scalars = [Tensor(TensorType(dt, ()), lambda _i, v=acc: v)]
        for e in extra:
            value = yield e.read((i[1],) if e.shape else ())
            scalars.append(Tensor(TensorType(e.dtype, ()), lambda _i, v=value: v))
        (result,) = encode(ctx, epi, scalars)
        return result.at(())

    return Tensor(op.type, then)
