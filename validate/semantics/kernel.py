"""SMT meaning of `kernel`: operands read at affine indices, the body encoded on scalars, and
the reduce dims folded through `Ctx.fold`, flattened row-major in the order `reduce` lists them.

The fold is the very one reduce_sum / reduce_max / dot build (same kind, extent and index
normal form), so a kernel lowered from one of those ops gives the same term as the op: the
lowering proves by congruence, without bit-blasting.
"""

from __future__ import annotations

import math

import z3

from gdv.ir.core import Function, Op
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops.kernel import (
    FOLD_KIND,
    body_of,
    contracted_factors,
    epilogue_of,
    epilogue_point,
    fills_of,
)
from gdv.ir.types import TensorType
from gdv.validate.encode import encode
from gdv.validate.semantics.index import Idx, delinearize
from gdv.validate.semantics.registry import Ctx, Index, Tensor, Term, _run, rule


def affine(row: list[int], loop: list[Idx]) -> Idx:
    """`row . loop + const` as an index form."""
    at = Idx.of(row[-1])
    for c, i in zip(row[:-1], loop, strict=True):
        if c:
            at = at + i * c
    return at


@rule(OPS["kernel"])
def kernel(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """fold(combiner, lambda k. body(x_m[maps[m] . (i_out, k)])) per result index i_out."""
    body = body_of(op.attrs)
    space, maps = op.attrs["space"], op.attrs["maps"]
    out, red = op.attrs["out"], op.attrs["reduce"]
    red_shape = tuple(space[d] for d in red)
    n = math.prod(red_shape)

    def point(loop: list[Idx]) -> Term:
        scalars = []
        for k, (x, m) in enumerate(zip(xs, maps, strict=True)):
            value = yield from read(k, x, m, loop)
            scalars.append(Tensor(TensorType(x.dtype, ()), lambda _i, v=value: v))
        (result,) = encode(ctx, body, scalars)
        return result.at(())

    def factors(loop: list[Idx]) -> Term:
        """(x, y): the operands of the body's final mul at `loop`."""
        scalars = []
        for k, (x, m) in enumerate(zip(xs, maps, strict=True)):
            value = yield from read(k, x, m, loop)
            scalars.append(Tensor(TensorType(x.dtype, ()), lambda _i, v=value: v))
        pair = Function(body.name, body.params, body.results * 2, body.ops, list(named))
        tx, ty = encode(ctx, pair, scalars)
        return tx.at(()), ty.at(())

    def contracted(loop: list[Idx], n: int) -> Term:
        """`contract = "fma"` in fp: acc = x0 * y0; acc = fma(xk, yk, acc) for k = 1 .. n-1,
        unrolled when the fold is small, else the uninterpreted `fold.fma` of the extent and
        both factors (guarded to [0, n), as `Ctx.fold_term` guards a fold's body)."""
        dtype = op.type.dtype

        def at_k(k: Idx) -> list[Idx]:
            full = list(loop)
            for d, v in zip(red, delinearize(k, red_shape), strict=True):
                full[d] = v
            return full

        v = ctx.values
        if ctx.unroll or ctx._small(n):
            x0, y0 = yield from _run(factors(at_k(Idx.of(0))))
            acc = v.mul(dtype, x0, y0)
            for k in range(1, n):
                xk, yk = yield from _run(factors(at_k(Idx.of(k))))
                acc = v.fma(dtype, xk, yk, acc)
            return acc
        var = z3.Int(f"k!{ctx.depth}")
        ctx.depth += 1
        try:
            xb, yb = yield from _run(factors(at_k(Idx.var(var, 0, n - 1))))
        finally:
            ctx.depth -= 1
        inside = z3.And(var >= 0, var < n)
        s = v.sort(dtype)
        fold = v.func(f"fold.fma.{dtype}", z3.IntSort(), *[z3.ArraySort(z3.IntSort(), s)] * 2, s)
        guard = [z3.Lambda([var], z3.If(inside, b, v.zero(dtype))) for b in (xb, yb)]
        return fold(z3.IntVal(n), *guard)

    named = contracted_factors(body) if "contract" in op.attrs else None
    fills = {k: ctx.values.literal(v, xs[k].dtype) for k, v in fills_of(op.attrs).items()}

    def read(k: int, x: Tensor, m: list[list[int]], loop: list[Idx]) -> Term:
        """Operand k at `maps[k] . loop`; with a `fill`, the fill value outside its bounds
        (as `pad` reads: IR_SPEC.md section 7)."""
        at = tuple(affine(row, loop) for row in m)
        if k not in fills:
            return (yield x.read(at))
        fill = fills[k]
        if 0 in x.shape:
            return fill
        inside = [i.in_range(0, n) for i, n in zip(at, x.shape, strict=True)]
        if any(z3.is_false(c) for c in inside):
            return fill
        here = yield x.read(at)
        conds = [c for c in inside if not z3.is_true(c)]
        if not conds:
            return here
        return z3.If(z3.And(*conds) if len(conds) > 1 else conds[0], here, fill)

    epi = epilogue_of(op.attrs)

    def at(i: Index) -> Term:
        acc = yield from folded(i)
        if epi is None:
            return acc
        # E(acc, operands at (i_out, reduce dims 0)).
        loop = epilogue_point(op.attrs, list(i))
        loop = [v if isinstance(v, Idx) else Idx.of(v) for v in loop]
        scalars = [Tensor(TensorType(op.type.dtype, ()), lambda _i, v=acc: v)]
        for k, (x, m) in enumerate(zip(xs, maps, strict=True)):
            value = yield from read(k, x, m, loop)
            scalars.append(Tensor(TensorType(x.dtype, ()), lambda _i, v=value: v))
        (result,) = encode(ctx, epi, scalars)
        return result.at(())

    def folded(i: Index) -> Term:
        loop: list[Idx] = [Idx.of(0)] * len(space)
        for d, v in zip(out, i, strict=True):
            loop[d] = v
        if not red:
            return (yield from point(loop))

        def fold_body(k: Idx) -> Term:
            full = list(loop)
            for d, v in zip(red, delinearize(k, red_shape), strict=True):
                full[d] = v
            return point(full)

        kind, dtype = FOLD_KIND[op.attrs["combiner"]], op.type.dtype
        blocks = op.attrs.get("accumulators", 1)
        lanes = op.attrs.get("lanes", 1)
        if lanes > 1:  # lane l folds positions l, l + L, ...; then the L lanes in order
            t = n // lanes
            return (
                yield from ctx.fold(
                    kind,
                    dtype,
                    lanes,
                    lambda a: ctx.fold(kind, dtype, t, lambda j: fold_body(j * lanes + a)),
                )
            )
        if "contract" in op.attrs and ctx.theory == "fp" and n > 1:
            return (yield from contracted(loop, n))
        if blocks > 1:  # A blocks of n/A folded apart, then the A partial results in order
            t = n // blocks
            return (
                yield from ctx.fold(
                    kind,
                    dtype,
                    blocks,
                    lambda a: ctx.fold(kind, dtype, t, lambda j: fold_body(a * t + j)),
                )
            )
        return (yield from ctx.fold(kind, dtype, n, fold_body))

    return Tensor(op.type, at)
