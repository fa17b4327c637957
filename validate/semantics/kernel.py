"""SMT meaning of `kernel`: operands read at affine indices, the body encoded on scalars, and
the reduce dims folded through `Ctx.fold`, flattened row-major in the order `reduce` lists them.

The fold is the very one reduce_sum / reduce_max / dot build (same kind, extent and index
normal form), so a kernel lowered from one of those ops gives the same term as the op: the
lowering proves by congruence, without bit-blasting.
"""

from __future__ import annotations

import math

from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops.kernel import FOLD_KIND, body_of
from gdv.ir.types import TensorType
from gdv.validate.encode import encode
from gdv.validate.semantics.index import Idx, delinearize
from gdv.validate.semantics.registry import Ctx, Index, Tensor, Term, rule


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
        for x, m in zip(xs, maps, strict=True):
            value = yield x.read(tuple(affine(row, loop) for row in m))
            scalars.append(Tensor(TensorType(x.dtype, ()), lambda _i, v=value: v))
        (result,) = encode(ctx, body, scalars)
        return result.at(())

    def at(i: Index) -> Term:
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
