"""Bound rule of `kernel`: its body's rules on the gathered operands, then its fold.

A kernel computes body(operands at affine positions) at every point of its space and folds the
reduce dims like reduce_sum / reduce_max / reduce_min. Every gathered operand element is an
element of that operand, so the operand's bound (interval, error, specials) bounds it; its
relational facts speak of particular axes and are dropped. An operand with a `fill` gives
the fill value outside it, so its bound is the pad rule's hull of its bound and that value.
The body's ops are bounded by their own rules on tensors shaped like the space (reduced
positions flattened into one trailing axis, so per-element event counts stay right), and the
fold by the reduce rule over that axis.
With `accumulators` > 1 the sum runs in blocks; the sequential rule still bounds it: a
summation tree's error is at most u times the sum over terms of |term| times the additions the
term goes through, and the sequential order (every term through the most) maximises that.
The same holds for `lanes` (another summation tree of the same terms), and for `contract =
"fma"`: fma(x, y, acc) = (x * y + acc)(1 + d) is the case of the sequential step's
(x * y (1 + d1) + acc)(1 + d2) with d1 = 0, so every bound of the latter bounds it. An
`epilogue`'s ops are bounded by their own rules on the folded value and the operands' elements,
shaped like the result.
"""

from __future__ import annotations

import math

from gdv.ir.core import Function, Op
from gdv.ir.diagnostics import IRError
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops.kernel import body_of, epilogue_of, fills_of
from gdv.ir.ops.reduce import REDUCTIONS
from gdv.ir.types import TensorType
from gdv.validate.bounds.model import SPECIALS, TB, Err, make_tb
from gdv.validate.bounds.registry import RULES, Context, rule

_FOLD = {s.combiner.op: s.name for s in REDUCTIONS.specs()}


@rule(OPS["kernel"])
def _kernel(op: Op, args: list[TB], ctx: Context) -> TB:
    try:
        body = body_of(op.attrs)
    except IRError as e:  # a kernel analysed without its module: nothing is known of it
        specials = SPECIALS if op.type.dtype.is_float else frozenset()
        return make_tb(op.type, (-math.inf, math.inf), Err.infinite(e.message), None, specials)
    space, out, red = op.attrs["space"], op.attrs["out"], op.attrs["reduce"]
    out_shape = tuple(space[d] for d in out)
    n = math.prod(space[d] for d in red)
    shape = (*out_shape, n) if red else out_shape
    # A context of its own: body value names must not meet the caller's, nor its producers'
    # facts; the rounding model, assumptions and event counts are shared.
    sub = Context(ctx.ideal, ctx.ulps, ctx.lam, ctx.target, ctx.assumptions, ctx.notes)
    args = with_fills(op, args, ctx)
    for p, a in zip(body.params, args, strict=True):
        sub.values[p.name] = a.with_(type=TensorType(a.dtype, shape), facts={})
    for b in body.ops:
        retyped = Op(b.result, b.name, b.operands, b.attrs, TensorType(b.type.dtype, shape))
        spec = OPS[b.name]
        result = RULES[spec](retyped, [sub.values[o] for o in b.operands], sub)
        sub.values[b.result] = result.with_(facts={})
    value = sub.values[body.returns[0]]
    if red:
        name = _FOLD[op.attrs["combiner"]]
        fold = Op(op.result, name, ["x"], {"axes": [len(out_shape)]}, op.type)
        value = RULES[OPS[name]](fold, [value], sub)
    epi = epilogue_of(op.attrs) if "epilogue" in op.attrs else None
    if epi is not None:  # E(folded value, the operands' elements), on the result's shape
        value = apply_epilogue(epi, value, args, op.type, sub)
    ctx.prob_events += sub.prob_events
    ctx.max_u = max(ctx.max_u, sub.max_u)
    return value.with_(type=op.type, facts={})


def with_fills(op: Op, args: list[TB], ctx: Context) -> list[TB]:
    """`args` with each operand that has a `fill` bounded as a pad of it by the fill value
    (a read outside it gives that value, exactly): the pad rule's hull."""
    fills = fills_of(op.attrs)
    out = list(args)
    for k, value in fills.items():
        a = args[k]
        rank = a.type.rank
        pad = Op(
            "fill",
            "pad",
            ["x"],
            {"low": [1] * rank, "high": [0] * rank, "value": value},
            a.type,
        )
        out[k] = RULES[OPS["pad"]](pad, [a], ctx) if rank else a
    return out


def apply_epilogue(epi: Function, value: TB, args: list[TB], t: TensorType, ctx: Context) -> TB:
    """An epilogue's ops bounded by their own rules on `value` (the folded result, of type
    `t`) and `args` (its other parameters' values, each broadcast over `t`: the hull of an
    operand's elements serves every element), in a context of their own whose rounding events
    count in `ctx`'s."""
    sub = Context(ctx.ideal, ctx.ulps, ctx.lam, ctx.target, ctx.assumptions, ctx.notes)
    sub.values[epi.params[0].name] = value.with_(type=t, facts={})
    for q, a in zip(epi.params[1:], args, strict=True):
        sub.values[q.name] = a.with_(type=TensorType(a.dtype, t.shape), facts={})
    for b in epi.ops:
        retyped = Op(b.result, b.name, b.operands, b.attrs, TensorType(b.type.dtype, t.shape))
        result = RULES[OPS[b.name]](retyped, [sub.values[o] for o in b.operands], sub)
        sub.values[b.result] = result.with_(facts={})
    ctx.prob_events += sub.prob_events
    ctx.max_u = max(ctx.max_u, sub.max_u)
    return sub.values[epi.returns[0]]
