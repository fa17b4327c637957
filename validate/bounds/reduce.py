"""Bound rules of the reduce family (sequential left folds, IR_SPEC.md section 3).

reduce_sum of n terms: n ex (propagated) + the sequential-summation error of `sequential_sum`
(u/(1-u) (1 + gamma_{n-1}) P (n(n+1)/2 - 1) for terms |t| <= P); the interval is n [lo, hi].
Where the terms are nonnegative and one of them is 1 (softmax's exp(x - max x), fact `max1`),
the sum is at least 1 exactly and at least (1 - slack)(1 - u)^(n-1) computed.
reduce_max, reduce_min: exact and 1-Lipschitz: the operand's interval and error.
cumsum, cumprod: every output is the fold of a prefix of k terms, 1 <= k <= n (or the empty
prefix, exclusive): the hull of the bounds of those folds (a sum's bound grows with k and its
interval k [lo, hi] is linear in k, so k = 1 and k = n bound it; a product's bounds are
iterated `mul` bounds, one per k).
argsort: positions in [0, n - 1], exact when the operand is, else off by up to n - 1.
Integers are exact; a sum that may leave the dtype wraps (reported).
"""

from __future__ import annotations

import math

from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS
from gdv.validate.bounds.elementwise import _mul, _specials_add, finish, int_result
from gdv.validate.bounds.model import EMPTY, TB, Err, hull, i_scale, is_empty, mag, make_tb
from gdv.validate.bounds.registry import Context, rule
from gdv.validate.bounds.rounding import combine, sequential_sum


def reduced_count(op: Op, x: TB) -> int:
    return math.prod(x.type.shape[a] for a in op.attrs["axes"])


@rule(OPS["reduce_sum"])
def _reduce_sum(op: Op, args: list[TB], ctx: Context) -> TB:
    return sum_bound(op, args[0], reduced_count(op, args[0]), ctx)


def sum_bound(op: Op, x: TB, n: int, ctx: Context) -> TB:
    """The bound of `op`'s result, a sum of n terms bounded by `x`, folded in any order: the
    recursive (left-fold) bound holds for every order, since no summation tree has a larger
    total leaf depth than the left fold's (shared with the collectives' `add`)."""
    if n == 0:
        return make_tb(op.type, (0.0, 0.0), Err.zero())
    specials = _specials_add(x.specials, x.specials)
    exact = i_scale(x.exact, n)
    pre = i_scale(x.computed, n)
    prop = x.err.scale(n)
    if not x.dtype.is_float:
        return int_result(op, ctx, exact, prop, specials)
    if not prop.finite:
        return make_tb(op.type, (-math.inf, math.inf), prop)
    own = sequential_sum(ctx, n, x.dtype, mag(*x.exact), mag(*x.computed), op.type.num_elements)
    err = (
        prop + combine(own)
        if math.isfinite(own[1])
        else Err.infinite(f"reduce_sum of {n} terms: n u >= 1 in {ctx.fmt(x.dtype)}")
    )
    computed = None
    if not is_empty(*x.computed) and x.clo >= 0:
        computed = (0.0, math.inf)  # a sum of nonnegative floats is nonnegative
        if (
            op.name == "reduce_sum"
            and tuple(op.attrs["axes"]) == tuple(x.facts.get("max1", ()))
            and x.lo >= 0
        ):
            # One term is 1 (exactly; computed >= 1 - slack) and the others are >= 0.
            u = ctx.u(x.dtype)
            exact = (max(exact[0], 1.0), exact[1])
            low = (1.0 - x.facts.get("max1_slack", 0.0)) * (1.0 - u) ** (n - 1)
            computed = (max(0.0, low * (1 - 1e-12)), math.inf)
    return finish(op, ctx, exact, err, mag(*pre) + own[1], computed, specials)


@rule(OPS["reduce_max"], OPS["reduce_min"])
def _reduce_extreme(op: Op, args: list[TB], ctx: Context) -> TB:
    x = args[0]
    return extreme_bound(op, x, reduced_count(op, x), op.name == "reduce_max")


def extreme_bound(op: Op, x: TB, n: int, is_max: bool) -> TB:
    """The bound of a max (or min) of n values bounded by `x`: exact, in any order (shared
    with the collectives' carry_reduce)."""
    if n == 0:  # -inf / +inf (floats) or the dtype's extreme (ints), identically on both sides
        if x.dtype.is_float:
            s = "-inf" if is_max else "+inf"
            return make_tb(op.type, EMPTY, Err.zero(), specials=frozenset({s}))
        v = float(x.dtype.int_min if is_max else x.dtype.int_max)
        return make_tb(op.type, (v, v), Err.zero())
    return make_tb(op.type, x.exact, x.err, x.computed, x.specials)


def _hull_of(op: Op, parts: list[TB]) -> TB:
    """A bound holding for each of `parts`: the hull of their intervals, the largest error."""
    err = parts[0].err
    for p in parts[1:]:
        err = err.max(p.err)
    specials = frozenset().union(*(p.specials for p in parts))
    exact = hull(*(p.exact for p in parts))
    return make_tb(op.type, exact, err, hull(*(p.computed for p in parts)), specials)


@rule(OPS["cumsum"], OPS["cumprod"])
def _scan(op: Op, args: list[TB], ctx: Context) -> TB:
    x = args[0]
    n = x.type.shape[op.attrs["axis"]]
    exclusive = bool(op.attrs.get("exclusive", False))
    longest = n - 1 if exclusive else n
    parts: list[TB] = []
    if exclusive and n:  # the empty prefix: exactly 0 (sum) or 1 (product) on both sides
        v = 0.0 if op.name == "cumsum" else 1.0
        parts.append(make_tb(op.type, (v, v), Err.zero()))
    if longest >= 1 and op.name == "cumsum":
        parts += [sum_bound(op, x, 1, ctx), sum_bound(op, x, longest, ctx)]
    elif longest >= 1:
        acc = make_tb(op.type, x.exact, x.err, x.computed, x.specials)
        parts.append(acc)
        step = Op(op.result, op.name, ["acc", "x"], {}, op.type)  # a mul, named for notes
        for _ in range(1, longest):
            acc = _mul(step, [acc, x], ctx)
            if not acc.err.finite:
                return make_tb(op.type, (-math.inf, math.inf), acc.err)
            parts.append(acc)
    if not parts:  # no element at all
        return make_tb(op.type, (0.0, 0.0), Err.zero())
    return _hull_of(op, parts)


@rule(OPS["argsort"])
def _argsort(op: Op, args: list[TB], ctx: Context) -> TB:
    """Positions in [0, n - 1]: exact when the operand is; otherwise a rounding may reorder
    two elements, and a position may be off by up to n - 1."""
    x = args[0]
    n = x.type.shape[op.attrs["axis"]]
    if n == 0:
        return make_tb(op.type, (0.0, 0.0), Err.zero())
    err = Err.zero() if x.err.total == 0 else Err.make({}, float(n - 1))
    return make_tb(op.type, (0.0, float(n - 1)), err)
