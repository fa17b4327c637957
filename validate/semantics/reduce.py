"""SMT meaning of the reductions: one fold over the reduced positions, flattened row-major.

`reduce_*` over several axes visits the reduced positions in row-major order of the operand
(whatever order `axes` lists them in), so they flatten into one fold index k, and each
operand index is recovered from k by div/mod.
"""

from __future__ import annotations

import math

import z3

from gdv.ir.core import Op
from gdv.ir.dtypes import DType
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops.reduce import REDUCTIONS, SCANS
from gdv.validate.semantics.index import Idx, delinearize
from gdv.validate.semantics.registry import Ctx, Index, Tensor, Term, _run, rule

_KIND = {s.name: s.combiner.fold for s in REDUCTIONS.specs()}


@rule(*REDUCTIONS.specs())
def reduce(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """fold(kind, n, lambda k. x[kept dims from i, reduced dims from k])."""
    (x,) = xs
    axes = sorted(op.attrs["axes"])
    kept = [d for d in range(len(x.shape)) if d not in axes]
    red_shape = tuple(x.shape[d] for d in axes)
    n = math.prod(red_shape)
    kind = _KIND[op.name]

    def at(i: Index) -> Term:
        def body(k: Idx) -> Term:
            j: list[Idx] = [Idx.of(0)] * len(x.shape)
            for d, v in zip(kept, i, strict=True):
                j[d] = v
            for d, v in zip(axes, delinearize(k, red_shape), strict=True):
                j[d] = v
            return (yield x.read(tuple(j)))

        return (yield from ctx.fold(kind, x.dtype, n, body))

    return Tensor(op.type, at)


@rule(*SCANS.specs())
def scan(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """out[i] = fold(kind, L, lambda k. x[i with the axis at the k-th position in scan order]),
    L the length of i's prefix in scan order (one less when exclusive).

    L is symbolic when i is: the fold is then the same uninterpreted fold as a reduction's (a
    function of the extent and the guarded body), with the empty and one-element prefixes
    written out (the identity, the first element) as `Ctx.fold` writes them for a constant
    extent. Small axes in `fp`, and concrete evaluation, pick among the unrolled folds."""
    (x,) = xs
    axis = op.attrs["axis"]
    n = x.shape[axis]
    reverse = bool(op.attrs.get("reverse", False))
    exclusive = bool(op.attrs.get("exclusive", False))
    kind = "sum" if op.name == "cumsum" else "prod"
    v = ctx.values

    def at(i: Index) -> Term:
        def body(k: Idx) -> Term:
            j = list(i)
            j[axis] = Idx.of(n - 1) - k if reverse else k
            return (yield x.read(tuple(j)))

        rank = Idx.of(n - 1) - i[axis] if reverse else i[axis]
        length = rank if exclusive else rank + 1
        if length.is_const:
            return (yield from ctx.fold(kind, x.dtype, length.const, body))
        lt = length.to_z3()
        lo, hi = max(length.lo, 0), min(length.hi, n)
        if ctx.unroll or ctx.small_fold(n):
            acc = yield from ctx.fold(kind, x.dtype, hi, body)
            for c in range(hi - 1, lo - 1, -1):
                acc = z3.If(lt == c, (yield from ctx.fold(kind, x.dtype, c, body)), acc)
            return acc
        first = yield from _run(body(Idx.of(0)))
        var = z3.Int(f"k!{ctx.depth}")
        ctx.depth += 1
        try:
            b = yield from _run(body(Idx.var(var, 0, n - 1)))
        finally:
            ctx.depth -= 1
        guarded = z3.If(z3.And(var >= 0, var < lt), b, v.zero(x.dtype))
        folded = v.fold_function(kind, x.dtype)(lt, z3.Lambda([var], guarded))
        return z3.If(lt == 0, v.fold_identity(kind, x.dtype), z3.If(lt == 1, first, folded))

    return Tensor(op.type, at)


@rule(OPS["argsort"])
def argsort(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """out[j] = sum over p of (rank(p) == j ? p : 0), rank(p) = sum over q of (q comes before
    p ? 1 : 0): exactly one p has rank j, since "comes before" (by value, NaN above every
    number, then by position) is a strict total order on the positions. Two nested i64 sum
    folds, unrolled where small like every fold."""
    (x,) = xs
    axis = op.attrs["axis"]
    n = x.shape[axis]
    descending = bool(op.attrs.get("descending", False))
    v = ctx.values
    dt = x.dtype
    i64 = DType.I64
    nan_aware = dt.is_float and ctx.theory == "fp"

    def before(a, b, qa: z3.ArithRef, qb: z3.ArithRef) -> z3.BoolRef:
        """Element a (at position qa) comes before element b (at qb)."""
        strict = v.cmp("gt" if descending else "lt", dt, a, b)
        tie = v.cmp("eq", dt, a, b)
        if nan_aware:
            na, nb = v.is_nan(dt, a), v.is_nan(dt, b)
            above = z3.And(na, z3.Not(nb)) if descending else z3.And(z3.Not(na), nb)
            strict = z3.Or(strict, above)
            tie = z3.Or(tie, z3.And(na, nb))
        return z3.Or(strict, z3.And(tie, qa < qb))

    def at(i: Index) -> Term:
        def element(p: Idx) -> Term:
            j = list(i)
            j[axis] = p
            return (yield x.read(tuple(j)))

        def candidate(p: Idx) -> Term:
            xp = yield from element(p)

            def precedes(q: Idx) -> Term:
                xq = yield from element(q)
                one = before(xq, xp, q.to_z3(), p.to_z3())
                return z3.If(one, v.one(i64), v.zero(i64))

            rank = yield from ctx.fold("sum", i64, n, precedes)
            hit = rank == z3.Int2BV(i[axis].to_z3(), 64)
            return z3.If(hit, z3.Int2BV(p.to_z3(), 64), v.zero(i64))

        return (yield from ctx.fold("sum", i64, n, candidate))

    return Tensor(op.type, at)
