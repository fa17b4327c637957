"""Bound rules of the conv family: conv2d is a dot product per output element of
K = C/groups * KH * KW terms in the order C, KH, KW (IR_SPEC.md), the padded positions taking
part as 0.0 * w (exact). So its bound is `dot`'s, with zero added to the input's interval when
there is padding."""

from __future__ import annotations

from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS
from gdv.validate.bounds.contract import contraction
from gdv.validate.bounds.model import TB, hull
from gdv.validate.bounds.registry import Context, rule


@rule(OPS["conv2d"])
def _conv2d(op: Op, args: list[TB], ctx: Context) -> TB:
    x, w = args
    k = w.type.shape[1] * w.type.shape[2] * w.type.shape[3]
    if any(v for pair in op.attrs["padding"] for v in pair):
        x = x.with_(
            lo=hull(x.exact, (0.0, 0.0))[0],
            hi=hull(x.exact, (0.0, 0.0))[1],
            clo=hull(x.computed, (0.0, 0.0))[0],
            chi=hull(x.computed, (0.0, 0.0))[1],
        )
    return contraction(op, x, w, k, op.type.dtype, ctx, "conv2d")
