"""Kernels of the layout family: broadcast, reshape, transpose, slice, concat, pad.

They move values without arithmetic, so they are the same in every dtype and mode (pad's
literal excepted, which is rounded to the value's storage dtype). Results are copied with
`np.array(..., order="C")`, not `np.ascontiguousarray`, which turns a rank-0 array into rank 1."""

from __future__ import annotations

import numpy as np

from gdv.backends.reference.literals import literal
from gdv.backends.reference.registry import Context, kernel
from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS


@kernel(OPS["broadcast"])
def _broadcast(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    x = args[0]
    shape = op.type.shape
    placed = [1] * len(shape)
    for i, d in enumerate(op.attrs["dims"]):
        placed[d] = x.shape[i]  # 1 or the result's size (the type rule checked it)
    return np.array(np.broadcast_to(x.reshape(placed), shape), order="C")


@kernel(OPS["reshape"])
def _reshape(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    return np.reshape(args[0], op.type.shape, order="C")


@kernel(OPS["transpose"])
def _transpose(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    # numpy's axes argument has the IR's meaning: result dim i is operand dim perm[i].
    return np.array(np.transpose(args[0], op.attrs["perm"]), order="C")


@kernel(OPS["slice"])
def _slice(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    a = op.attrs
    index = tuple(
        slice(s, lim, st) for s, lim, st in zip(a["start"], a["limit"], a["stride"], strict=True)
    )
    return np.array(args[0][index], order="C")


@kernel(OPS["concat"])
def _concat(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    return np.concatenate(args, axis=op.attrs["axis"])


@kernel(OPS["pad"])
def _pad(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    x = args[0]
    dtype = ctx.storage(op.type.dtype)
    out = np.full(op.type.shape, literal(op.attrs["value"], dtype), dtype=dtype.np)
    inner = tuple(slice(lo, lo + size) for lo, size in zip(op.attrs["low"], x.shape, strict=True))
    out[inner] = x
    return out
