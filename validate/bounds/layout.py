"""Bound rules of the layout family: data movement is exact, so values and errors pass through.

broadcast, reshape, transpose, slice: the result's elements are some of the operand's, so its
interval and error bound are the operand's. concat: the hull of the intervals, the largest
error. pad: adds the pad literal (rounded to the dtype, which is its only error). Relational
facts (softmax's `max0`) are dropped: positions move, and a slice may drop the maximum.
"""

from __future__ import annotations

from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS
from gdv.validate.bounds.elementwise import _constant
from gdv.validate.bounds.model import TB, hull, make_tb
from gdv.validate.bounds.registry import Context, rule


@rule(OPS["broadcast"], OPS["reshape"], OPS["transpose"], OPS["slice"])
def _move(op: Op, args: list[TB], ctx: Context) -> TB:
    x = args[0]
    if op.type.num_elements == 0:
        return make_tb(op.type, x.exact, x.err, x.computed)
    return x.with_(type=op.type, facts={})


@rule(OPS["concat"])
def _concat(op: Op, args: list[TB], ctx: Context) -> TB:
    err = args[0].err
    for a in args[1:]:
        err = err.max(a.err)
    return make_tb(
        op.type,
        hull(*(a.exact for a in args)),
        err,
        hull(*(a.computed for a in args)),
        frozenset().union(*(a.specials for a in args)),
    )


@rule(OPS["pad"])
def _pad(op: Op, args: list[TB], ctx: Context) -> TB:
    x = args[0]
    if all(v == 0 for v in op.attrs["low"]) and all(v == 0 for v in op.attrs["high"]):
        return x.with_(type=op.type, facts={})
    value = _constant(
        Op("pad.value", "constant", [], {"value": op.attrs["value"]}, op.type), [], ctx
    )
    if x.type.num_elements == 0:
        return value
    return make_tb(
        op.type,
        hull(x.exact, value.exact),
        x.err.max(value.err),
        hull(x.computed, value.computed),
        x.specials | value.specials,
    )
