"""Bound rules of the collectives (docs/IR_SPEC.md section 7).

Every rank runs the same program on inputs with the same declared ranges, so a value's bound
holds on every rank alike: a collective that moves values (`all_gather`, `all_to_all`) keeps
its operand's bound, `collective_permute` adds the exact zeros of members that receive
nothing, and `all_reduce` / `reduce_scatter` with `add` are a sum of p terms (p the group
size), bounded as `reduce_sum` bounds one: that bound holds for the `rank`, `tree` and `ring`
orders alike. `max` and `min` are exact. `carry_reduce` is the global reduction itself (the
members' blocks joined), bounded as `reduce_sum` / `reduce_max` / `reduce_min` bound it over
all p blocks.
"""

from __future__ import annotations

import math

from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS
from gdv.validate.bounds.model import TB, Err, make_tb
from gdv.validate.bounds.reduce import extreme_bound, sum_bound
from gdv.validate.bounds.registry import Context, rule


def _group(op: Op, ctx: Context) -> int | None:
    return None if ctx.mesh is None else ctx.mesh.group_size(op.attrs["axes"])


def _no_group(op: Op) -> TB:
    return make_tb(
        op.type,
        (-math.inf, math.inf),
        Err.infinite(f"{op.name} outside an SPMD function has no group size"),
    )


@rule(OPS["all_reduce"], OPS["reduce_scatter"])
def _reduction(op: Op, args: list[TB], ctx: Context) -> TB:
    (x,) = args
    p = _group(op, ctx)
    if p is None:
        return _no_group(op)
    if op.attrs["combiner"] != "add":
        return make_tb(op.type, x.exact, x.err, x.computed, x.specials)
    return sum_bound(op, x, p, ctx)


@rule(OPS["all_gather"], OPS["all_to_all"], OPS["shard_slice"])
def _moved(op: Op, args: list[TB], ctx: Context) -> TB:
    (x,) = args
    return make_tb(op.type, x.exact, x.err, x.computed, x.specials)


@rule(OPS["collective_permute"])
def _permute(op: Op, args: list[TB], ctx: Context) -> TB:
    (x,) = args
    exact = (min(x.lo, 0.0), max(x.hi, 0.0))
    computed = (min(x.computed[0], 0.0), max(x.computed[1], 0.0))
    return make_tb(op.type, exact, x.err, computed, x.specials)


@rule(OPS["carry_reduce"])
def _carry(op: Op, args: list[TB], ctx: Context) -> TB:
    (x,) = args
    p = _group(op, ctx)
    if p is None:
        return _no_group(op)
    n = p * math.prod(x.type.shape[d] for d in op.attrs["dims"])
    if op.attrs["combiner"] == "add":
        return sum_bound(op, x, n, ctx)
    return extreme_bound(op, x, n, op.attrs["combiner"] == "max")
