"""Bound rules of the conv family: conv2d is a dot product per output element of
K = C/groups * KH * KW terms in the order C, KH, KW (IR_SPEC.md), the padded positions taking
part as 0.0 * w (exact). So its bound is `dot`'s, with zero added to the input's interval when
there is padding. An `epilogue`'s ops are then bounded by their own rules on that bound and the
extra operands' (each broadcast over the result: the hull of its elements serves every one)."""

from __future__ import annotations

import math

from gdv.ir.core import Op
from gdv.ir.diagnostics import IRError
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops.kernel import epilogue_of
from gdv.validate.bounds.contract import contraction
from gdv.validate.bounds.kernel import apply_epilogue
from gdv.validate.bounds.model import SPECIALS, TB, Err, hull, make_tb
from gdv.validate.bounds.registry import Context, rule


@rule(OPS["conv2d"])
def _conv2d(op: Op, args: list[TB], ctx: Context) -> TB:
    x, w, *extra = args
    k = w.type.shape[1] * w.type.shape[2] * w.type.shape[3]
    if any(v for pair in op.attrs["padding"] for v in pair):
        x = x.with_(
            lo=hull(x.exact, (0.0, 0.0))[0],
            hi=hull(x.exact, (0.0, 0.0))[1],
            clo=hull(x.computed, (0.0, 0.0))[0],
            chi=hull(x.computed, (0.0, 0.0))[1],
        )
    value = contraction(op, x, w, k, op.type.dtype, ctx, "conv2d")
    try:
        epi = epilogue_of(op.attrs) if "epilogue" in op.attrs else None
    except IRError as e:  # analysed without its module: nothing is known of the result
        specials = SPECIALS if op.type.dtype.is_float else frozenset()
        return make_tb(op.type, (-math.inf, math.inf), Err.infinite(e.message), None, specials)
    if epi is None:
        return value
    return apply_epilogue(epi, value, extra, op.type, ctx).with_(type=op.type, facts={})
