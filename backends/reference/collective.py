"""Kernels of the collectives (docs/IR_SPEC.md section 7): the reference backend simulates
every rank of the mesh at once.

In an SPMD simulation (`gdv.backends.reference.spmd`) a collective's operand and result are
stacked: `[*mesh.shape, *local shape]`, rank `coords` holding `value[coords]`. The folds use
the IR's own `add`, `max` and `min` kernels, one pair of members at a time, in the order the op
declares, so the result is the one value the specification defines.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from gdv.backends.reference.registry import KERNELS, Context, kernel
from gdv.ir.core import Op
from gdv.ir.diagnostics import IRError
from gdv.ir.dtypes import DType
from gdv.ir.mesh import Mesh, with_member
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.types import TensorType


def _combine(
    name: str, dtype: DType, ctx: Context
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The IR's binary op `name` on two arrays of one shape (rounded as the spec says)."""

    def step(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        op = Op("acc", name, ["a", "b"], {}, TensorType(dtype, a.shape))
        return np.asarray(KERNELS[OPS[name]](op, [a, b], ctx))

    return step


def fold_members(
    values: list[np.ndarray], order: str, step, chunks: list[slice] | None
) -> np.ndarray:
    """The fold of `values` (member order) in `order` (IR_SPEC section 7). `chunks`: for
    "ring", the slices of the flattened value that form chunks 0 .. p-1."""
    p = len(values)
    if order == "rank":
        acc = values[0]
        for v in values[1:]:
            acc = step(acc, v)
        return acc
    if order == "tree":
        return _tree(values, 0, p, step)
    assert order == "ring" and chunks is not None
    flat = [v.reshape(-1) for v in values]
    out = np.empty_like(flat[0])
    for c, sl in enumerate(chunks):
        acc = flat[(c + 1) % p][sl]
        for j in range(2, p + 1):
            acc = step(acc, flat[(c + j) % p][sl])
        out[sl] = acc
    return out.reshape(values[0].shape)


def _tree(values: list[np.ndarray], lo: int, n: int, step) -> np.ndarray:
    if n == 1:
        return values[lo]
    h = (n + 1) // 2
    return step(_tree(values, lo, h, step), _tree(values, lo + h, n - h, step))


def ring_chunks(elements: int, p: int) -> list[slice]:
    """Chunk c of a ring all_reduce: elements [c * ceil(E/p), (c+1) * ceil(E/p)) of the
    row-major flattened value, cut at E."""
    size = -(-elements // p) if p else 0
    return [slice(min(c * size, elements), min((c + 1) * size, elements)) for c in range(p)]


def _mesh(op: Op, ctx: Context) -> Mesh:
    if ctx.mesh is None:
        raise IRError(
            f"{op.name} is a collective: it runs only in an SPMD simulation "
            "(gdv.backends.reference.spmd.run_spmd)",
            op.loc,
        )
    return ctx.mesh


def _members(mesh: Mesh, axes: list[str], coords: tuple[int, ...]) -> list[tuple[int, ...]]:
    p = mesh.group_size(axes)
    return [with_member(mesh, axes, coords, m) for m in range(p)]


def _per_rank(op: Op, args: list[np.ndarray], ctx: Context, each) -> np.ndarray:
    """Stacked result: `each(coords, members, stacked operand)` for every rank."""
    mesh = _mesh(op, ctx)
    (x,) = args
    dtype = ctx.storage(op.type.dtype)
    out = np.empty(mesh.shape + op.type.shape, dtype=dtype.np)
    for coords in mesh.ranks():
        out[coords] = each(coords, _members(mesh, op.attrs["axes"], coords), x)
    return out


def _blocks(v: np.ndarray, dim: int, p: int) -> list[np.ndarray]:
    n = v.shape[dim] // p
    return [np.take(v, range(m * n, (m + 1) * n), axis=dim) for m in range(p)]


@kernel(OPS["all_reduce"])
def _all_reduce(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    step = _combine(op.attrs["combiner"], ctx.storage(op.type.dtype), ctx)
    order = op.attrs["order"]

    def each(coords, members, x):
        values = [x[m] for m in members]
        chunks = ring_chunks(math.prod(op.type.shape), len(members))
        return fold_members(values, order, step, chunks)

    return _per_rank(op, args, ctx, each)


@kernel(OPS["all_gather"])
def _all_gather(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    def each(coords, members, x):
        return np.concatenate([x[m] for m in members], axis=op.attrs["dim"])

    return _per_rank(op, args, ctx, each)


@kernel(OPS["reduce_scatter"])
def _reduce_scatter(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    step = _combine(op.attrs["combiner"], ctx.storage(op.type.dtype), ctx)
    order, dim = op.attrs["order"], op.attrs["dim"]

    def each(coords, members, x):
        p = len(members)
        m = members.index(coords)
        blocks = [_blocks(x[r], dim, p)[m] for r in members]
        if order != "ring":
            return fold_members(blocks, order, step, None)
        # Block m is ring chunk m: folded from member m+1 round to member m.
        acc = blocks[(m + 1) % p]
        for j in range(2, p + 1):
            acc = step(acc, blocks[(m + j) % p])
        return acc

    return _per_rank(op, args, ctx, each)


@kernel(OPS["all_to_all"])
def _all_to_all(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    split, concat = op.attrs["split_dim"], op.attrs["concat_dim"]

    def each(coords, members, x):
        p = len(members)
        m = members.index(coords)
        return np.concatenate([_blocks(x[r], split, p)[m] for r in members], axis=concat)

    return _per_rank(op, args, ctx, each)


@kernel(OPS["collective_permute"])
def _collective_permute(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    source = {dst: src for src, dst in op.attrs["pairs"]}

    def each(coords, members, x):
        m = members.index(coords)
        if m not in source:
            return np.zeros(op.type.shape, dtype=x.dtype)
        return x[members[source[m]]]

    return _per_rank(op, args, ctx, each)


@kernel(OPS["shard_slice"])
def _shard_slice(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    dim = op.attrs["dim"]

    def each(coords, members, x):
        return _blocks(x[coords], dim, len(members))[members.index(coords)]

    return _per_rank(op, args, ctx, each)


_REDUCTION = {"add": "reduce_sum", "max": "reduce_max", "min": "reduce_min"}


@kernel(OPS["carry_reduce"])
def _carry_reduce(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    """reduce(all_gather(x, dim = min(dims)), dims): the reference's own reduction kernel on
    the members' blocks joined in member order, so the fold is the global left fold."""
    dims = op.attrs["dims"]
    reduction = OPS[_REDUCTION[op.attrs["combiner"]]]

    def each(coords, members, x):
        joined = np.concatenate([x[m] for m in members], axis=min(dims))
        red = Op(op.result, reduction.name, ["x"], {"axes": list(dims)}, op.type)
        return np.asarray(KERNELS[reduction](red, [joined], ctx))

    return _per_rank(op, args, ctx, each)
