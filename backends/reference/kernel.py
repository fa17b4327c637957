"""The reference meaning of `kernel` (ir/ops/kernel.py), vectorised over the iteration space.

Each operand is gathered through its affine map at every point of (a chunk of) the space, the
scalar body runs elementwise on those arrays through the ordinary op kernels, and the reduced
positions are folded in row-major order by the reduce family's own kernels, continuing chunk
after chunk from the running value: the same left fold as reduce_sum / reduce_max / dot.
"""

from __future__ import annotations

import math

import numpy as np

from gdv.backends.reference.evaluate import evaluate_ops
from gdv.backends.reference.literals import literal
from gdv.backends.reference.registry import KERNELS, Context, kernel
from gdv.ir.core import Function, Op
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops.kernel import body_of, contracted_factors, epilogue_of, epilogue_point, fills_of
from gdv.ir.ops.reduce import REDUCTIONS
from gdv.ir.types import TensorType

CHUNK_ELEMENTS = 1 << 22
"""About how many points of the space one body evaluation covers (bounds scratch memory)."""

_FOLD = {s.combiner.op: s.name for s in REDUCTIONS.specs()}
"""The reduction whose fold a kernel's combiner is (the op traits, `OpSpec.combiner`)."""


def _gather(
    x: np.ndarray, rows: list[list[int]], loop: list[np.ndarray], shape, fill=None
) -> np.ndarray:
    """x read at `row . loop + const` for each of its dims, broadcast to `shape`; with `fill`
    (the operand's `fill` value, already in x's dtype), that value where the index lies
    outside x."""
    index = []
    for row in rows:
        at: np.ndarray | int = row[-1]
        for c, i in zip(row[:-1], loop, strict=True):
            if c:
                at = at + c * i
        index.append(np.asarray(at, np.int64))
    if fill is None:
        return np.broadcast_to(x[tuple(index)], shape)
    inside = np.ones((), bool)
    for at, n in zip(index, x.shape, strict=True):
        inside = inside & (at >= 0) & (at < n)
    if x.size == 0:
        return np.broadcast_to(fill, shape)
    clipped = tuple(np.clip(at, 0, n - 1) for at, n in zip(index, x.shape, strict=True))
    return np.broadcast_to(np.where(inside, x[clipped], fill), shape)


def _fills(op: Op, body: Function, ctx: Context) -> list:
    """Per operand, its `fill` value (a 0-d array of its storage dtype; the body's parameter k
    has operand k's dtype), or None."""
    fills = fills_of(op.attrs)
    return [
        literal(fills[k], ctx.storage(p.type.dtype)) if k in fills else None
        for k, p in enumerate(body.params)
    ]


def _body_values(
    body: Function, args: list[np.ndarray], maps, loop, shape, ctx: Context, fills: list
) -> np.ndarray:
    """The body at every point of `loop` (index arrays broadcasting to `shape`)."""
    env = {
        p.name: _gather(a, m, loop, shape, f)
        for p, a, m, f in zip(body.params, args, maps, fills, strict=True)
    }
    # The body is rank-0 elementwise ops: the same ops on arrays of `shape` compute it at every
    # point at once.
    ops = [
        Op(o.result, o.name, o.operands, o.attrs, TensorType(o.type.dtype, tuple(shape)))
        for o in body.ops
    ]
    (name,) = body.returns
    out = evaluate_ops(ops, env, ctx, keep=[name])[name]
    # Not `np.ascontiguousarray`: it turns a rank-0 result into rank 1 (issue 14, "rank-0
    # promotion"), which crashed every elementwise kernel on f32[] values.
    return np.asarray(np.broadcast_to(out, shape), order="C")


def _fold_last(op: Op, values: np.ndarray, ctx: Context) -> np.ndarray:
    """Left fold over the last axis with the kernel's combiner (the reduce kernels' fold)."""
    name = _FOLD[op.attrs["combiner"]]
    type_ = TensorType(op.type.dtype, values.shape[:-1])
    red = Op("acc", name, ["x"], {"axes": [values.ndim - 1]}, type_)
    return KERNELS[OPS[name]](red, [values], ctx)


@kernel(OPS["kernel"])
def _kernel(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    acc = _folded(op, args, ctx)
    epi = epilogue_of(op.attrs)
    if epi is None:
        return acc
    # result[i_out] = E(acc[i_out], operands at (i_out, reduce dims 0)), elementwise.
    out_shape = acc.shape
    grids = np.indices(out_shape, sparse=True) if out_shape else ()
    loop = epilogue_point(op.attrs, [g.astype(np.int64) for g in grids])
    loop = [np.asarray(v, np.int64) for v in loop]
    env = {epi.params[0].name: acc}
    fills = _fills(op, body_of(op.attrs), ctx)
    for q, a, m, f in zip(epi.params[1:], args, op.attrs["maps"], fills, strict=True):
        env[q.name] = _gather(a, m, loop, out_shape, f)
    ops = [
        Op(o.result, o.name, o.operands, o.attrs, TensorType(o.type.dtype, tuple(out_shape)))
        for o in epi.ops
    ]
    (name,) = epi.returns
    value = env[name] if name in env else evaluate_ops(ops, env, ctx, keep=[name])[name]
    return np.asarray(np.broadcast_to(value, out_shape), order="C")


def _folded(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    """The kernel's fold (or body, without reduce dims) at every result index."""
    body = body_of(op.attrs)
    space, maps = op.attrs["space"], op.attrs["maps"]
    out, red = op.attrs["out"], op.attrs["reduce"]
    out_shape = tuple(space[d] for d in out)
    red_shape = tuple(space[d] for d in red)
    grids = np.indices(out_shape, sparse=True) if out_shape else ()
    loop: list[np.ndarray] = [np.zeros((), np.int64)] * len(space)
    fills = _fills(op, body, ctx)
    if op.attrs["combiner"] == "none":
        for d, g in zip(out, grids, strict=True):
            loop[d] = g.astype(np.int64)
        return _body_values(body, args, maps, loop, out_shape, ctx, fills)
    count = math.prod(red_shape)
    # The reduced positions ride on one trailing axis, in row-major order of `reduce`.
    for d, g in zip(out, grids, strict=True):
        loop[d] = g.astype(np.int64)[..., None]
    blocks = op.attrs.get("accumulators", 1)
    lanes = op.attrs.get("lanes", 1)
    if lanes > 1:  # position p to lane p mod L, lanes folded apart, then in lane order
        (d,) = red
        loop[d] = np.arange(count, dtype=np.int64).reshape((1,) * len(out_shape) + (-1,))
        values = _body_values(body, args, maps, loop, (*out_shape, count), ctx, fills)
        per_lane = values.reshape(*out_shape, count // lanes, lanes)
        partial = _fold_last(op, np.swapaxes(per_lane, -1, -2), ctx)
        return _fold_last(op, partial, ctx)
    if "contract" in op.attrs:
        return _contracted(op, body, args, maps, loop, out_shape, red, red_shape, ctx, fills)
    if blocks > 1:  # blocks folded apart, then their results in order (one reduce dim)
        (d,) = red
        loop[d] = np.arange(count, dtype=np.int64).reshape((1,) * len(out_shape) + (-1,))
        values = _body_values(body, args, maps, loop, (*out_shape, count), ctx, fills)
        partial = _fold_last(op, values.reshape(*out_shape, blocks, count // blocks), ctx)
        return _fold_last(op, partial, ctx)
    step = max(1, CHUNK_ELEMENTS // max(1, math.prod(out_shape)))
    acc: np.ndarray | None = None
    for start in range(0, count, step):
        pos = np.arange(start, min(count, start + step), dtype=np.int64)
        for d, i in zip(red, np.unravel_index(pos, red_shape), strict=True):
            loop[d] = i.astype(np.int64).reshape((1,) * len(out_shape) + (-1,))
        values = _body_values(body, args, maps, loop, (*out_shape, len(pos)), ctx, fills)
        if acc is not None:  # continue the fold from the running value
            values = np.concatenate([acc[..., None], values], axis=-1)
        acc = _fold_last(op, values, ctx)
    if acc is None:  # empty reduction: the combiner's identity
        acc = _fold_last(op, np.empty((*out_shape, 0), ctx.storage(op.type.dtype).np), ctx)
    return acc


def fma_f32(x: np.ndarray, y: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """fma(x, y, acc) of f32 arrays, rounded once to f32 (IEEE 754 fusedMultiplyAdd).

    x * y is exact in f64 (48 significant bits); the f64 sum s = x * y + acc and its exact
    error e (TwoSum) give x * y + acc = s + e. Rounding s + e to f64 with round-to-odd (s, or
    its neighbour towards e when e != 0 and s's last bit is even) and that to f32 with
    round-to-nearest-even rounds once: 53 >= 24 + 2 bits (round-to-odd's condition).
    Infinities and NaN pass through the f64 arithmetic as IEEE's fma gives them."""
    with np.errstate(invalid="ignore", over="ignore"):
        p = x.astype(np.float64) * y.astype(np.float64)
        c = acc.astype(np.float64)
        s = p + c
        bv = s - p
        err = (p - (s - bv)) + (c - bv)
        even = (s.view(np.int64) & 1) == 0
        fix = np.isfinite(s) & (err != 0) & even
        toward = np.where(err > 0, np.inf, -np.inf)
        s = np.where(fix, np.nextafter(s, toward), s)
    return s.astype(np.float32)


def _contracted(op, body, args, maps, loop, out_shape, red, red_shape, ctx, fills) -> np.ndarray:
    """`contract = "fma"`: acc = fma(x, y, acc) over the reduced positions in row-major order
    of `reduce`, from -0.0 (fma(x, y, -0.0) == x * y), x and y the operands of the body's final
    mul; an empty reduction gives +0.0."""
    xname, yname = contracted_factors(body)
    count = math.prod(red_shape)
    acc = np.full(out_shape, -0.0 if count else 0.0, np.float32)
    step = max(1, CHUNK_ELEMENTS // max(1, math.prod(out_shape)))
    for start in range(0, count, step):
        pos = np.arange(start, min(count, start + step), dtype=np.int64)
        for d, i in zip(red, np.unravel_index(pos, red_shape), strict=True):
            loop[d] = i.astype(np.int64).reshape((1,) * len(out_shape) + (-1,))
        shape = (*out_shape, len(pos))
        xs, ys = (
            _values_of(body, name, args, maps, loop, shape, ctx, fills) for name in (xname, yname)
        )
        for k in range(len(pos)):
            acc = fma_f32(xs[..., k], ys[..., k], acc)
    return acc


def _values_of(
    body: Function, name: str, args, maps, loop, shape, ctx: Context, fills: list
) -> np.ndarray:
    """Body value `name` at every point of `loop` (a parameter is its gathered operand)."""
    env = {
        p.name: _gather(a, m, loop, shape, f)
        for p, a, m, f in zip(body.params, args, maps, fills, strict=True)
    }
    if name in env:
        return np.asarray(env[name], np.float32)
    ops = [
        Op(o.result, o.name, o.operands, o.attrs, TensorType(o.type.dtype, tuple(shape)))
        for o in body.ops
    ]
    out = evaluate_ops(ops, env, ctx, keep=[name])[name]
    return np.asarray(np.broadcast_to(out, shape), np.float32)
