"""Bound rules of the control flow ops (IR_SPEC.md section 9).

`if` is bounded as `select` is (`validate/bounds/elementwise.py`): each branch function is
bounded on the operands' bounds, in a context of its own, and the result is their hull with the
larger error; where the computed condition may differ from the exact one (its error is not 0)
the flip adds the span of the branches' exact values, or makes the bound infinite between
special values. `while` and `scan` are not analysed yet: an infinite error bound that names
the op, so `gdv bounds` reports it rather than a number.
"""

from __future__ import annotations

import math

from gdv.ir.core import Function, Op
from gdv.ir.diagnostics import IRError
from gdv.ir.ops.control import IF, SCAN, WHILE, function_of
from gdv.validate.bounds.model import SPECIALS, TB, Err, hull, is_empty, make_tb, up
from gdv.validate.bounds.registry import Context, apply_op, rule


def _unbounded(op: Op, reason: str) -> TB:
    specials = SPECIALS if op.type.dtype.is_float else frozenset()
    return make_tb(op.type, (-math.inf, math.inf), Err.infinite(reason), None, specials)


def _branch(fn: Function, args: list[TB], k: int, ctx: Context) -> TB:
    """Result k of `fn` bounded on `args`: its values and producers in a context of their
    own; the rounding model, assumptions and event counts shared."""
    sub = Context(ctx.ideal, ctx.ulps, ctx.lam, ctx.target, ctx.assumptions, ctx.notes)
    for p, a in zip(fn.params, args, strict=True):
        sub.values[p.name] = a.with_(facts={})
    for b in fn.ops:
        apply_op(b, sub)
    ctx.prob_events += sub.prob_events
    ctx.max_u = max(ctx.max_u, sub.max_u)
    return sub.values[fn.returns[k]]


@rule(IF)
def _if(op: Op, args: list[TB], ctx: Context) -> TB:
    try:
        then, other = function_of(op, "then"), function_of(op, "else")
    except IRError as e:  # analysed without its module: nothing is known of it
        return _unbounded(op, e.message)
    c, k = args[0], op.attrs["result"]
    a, b = _branch(then, args[1:], k, ctx), _branch(other, args[1:], k, ctx)
    if c.lo == c.hi == 1.0 and c.err.total == 0:
        return a.with_(type=op.type, facts={})
    if c.lo == c.hi == 0.0 and c.err.total == 0:
        return b.with_(type=op.type, facts={})
    specials = a.specials | b.specials
    exact = hull(a.exact, b.exact)
    err = a.err.max(b.err)
    if c.err.total > 0:
        # A flipped condition takes the other branch: |a^ - b| <= ea + |a - b|.
        if specials:
            err = Err.infinite("if on a condition that may flip, between special values")
        else:
            span = exact[1] - exact[0] if not is_empty(*exact) else 0.0
            err = Err.make(err.lin, err.total + up(span))
    return make_tb(op.type, exact, err, hull(a.computed, b.computed), specials)


@rule(WHILE, SCAN)
def _loop(op: Op, args: list[TB], ctx: Context) -> TB:
    return _unbounded(
        op, f"{op.name} is a control flow op: the error bound of loops is not analysed yet"
    )
