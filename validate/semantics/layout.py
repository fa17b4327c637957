"""SMT meaning of the layout ops: each is an index map, composed as a Python closure.

broadcast drops or zeroes indices; reshape goes through the row-major position (div/mod by
constants); transpose permutes; slice is `start + i * stride`; concat and pad choose with
`ite` on index ranges.
"""

from __future__ import annotations

import z3

from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS
from gdv.validate.semantics.index import Idx, delinearize, linearize
from gdv.validate.semantics.registry import Ctx, Index, Tensor, Term, rule


@rule(OPS["broadcast"])
def broadcast(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """result[i] = x[j], j[k] = i[dims[k]], or 0 where x's dim k has size 1."""
    (x,), dims = xs, op.attrs["dims"]

    def at(i: Index) -> Term:
        return (
            yield x.read(
                tuple(i[d] if n != 1 else Idx.of(0) for d, n in zip(dims, x.shape, strict=True))
            )
        )

    return Tensor(op.type, at)


@rule(OPS["reshape"])
def reshape(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """The same row-major position in the operand's shape."""
    (x,) = xs
    if x.shape == op.type.shape:
        return Tensor(op.type, lambda i: (yield x.read(i)))
    return Tensor(
        op.type, lambda i: (yield x.read(delinearize(linearize(i, op.type.shape), x.shape)))
    )


@rule(OPS["transpose"])
def transpose(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """result[i] = x[j] with j[perm[k]] = i[k]."""
    (x,), perm = xs, op.attrs["perm"]

    def at(i: Index) -> Term:
        j: list[Idx] = [Idx.of(0)] * len(perm)
        for k, p in enumerate(perm):
            j[p] = i[k]
        return (yield x.read(tuple(j)))

    return Tensor(op.type, at)


@rule(OPS["slice"])
def slice_(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """result[i] = x[start + i * stride]."""
    (x,) = xs
    start, stride = op.attrs["start"], op.attrs["stride"]
    return Tensor(
        op.type,
        lambda i: (
            yield x.read(tuple(k * s + b for k, s, b in zip(i, stride, start, strict=True)))
        ),
    )


@rule(OPS["concat"])
def concat(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """The operand whose range along `axis` holds the index, at the index less its offset."""
    axis = op.attrs["axis"]
    parts = []
    offset = 0
    for x in xs:
        if x.shape[axis]:
            parts.append((offset, x))
        offset += x.shape[axis]

    def at(i: Index) -> Term:
        k = i[axis]
        live = []
        for off, x in parts:
            cond = k.in_range(off, off + x.shape[axis])
            if z3.is_false(cond):
                continue
            j = list(i)
            j[axis] = k - off
            if z3.is_true(cond):
                return (yield x.read(tuple(j)))
            live.append((cond, (yield x.read(tuple(j)))))
        # The last part that may hold k is the default: the index is in bounds.
        term = live[-1][1]
        for cond, here in reversed(live[:-1]):
            term = z3.If(cond, here, term)
        return term

    return Tensor(op.type, at)


@rule(OPS["pad"])
def pad(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """x at offset `low`; `value` elsewhere."""
    (x,) = xs
    low = op.attrs["low"]
    fill = ctx.values.literal(op.attrs["value"], x.dtype)

    def at(i: Index) -> Term:
        if 0 in x.shape:
            return fill
        inside = [k.in_range(lo, lo + n) for k, lo, n in zip(i, low, x.shape, strict=True)]
        if any(z3.is_false(c) for c in inside):
            return fill
        j = tuple(k - lo for k, lo in zip(i, low, strict=True))
        conds = [c for c in inside if not z3.is_true(c)]
        here = yield x.read(j)
        if not conds:
            return here
        return z3.If(z3.And(*conds) if len(conds) > 1 else conds[0], here, fill)

    return Tensor(op.type, at)
