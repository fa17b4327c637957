"""Kernel of the gather family: take, with indices clamped to the axis (no wrap-around)."""

from __future__ import annotations

import numpy as np

from gdv.backends.reference.registry import Context, kernel
from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS


@kernel(OPS["take"])
def _take(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    table, idx = args
    axis = op.attrs["axis"]
    size = table.shape[axis]
    if size == 0:
        # Only empty index tensors reach here (the type rule): the result is empty too.
        return np.zeros(op.type.shape, dtype=table.dtype)
    # Widen first: clamping an i8 index to size - 1 must not overflow i8; unsigned indices
    # widen to uint64 (a u64 index of 2^63 or more is not an int64).
    if idx.dtype.kind == "u":
        clamped = np.minimum(idx.astype(np.uint64), np.uint64(size - 1)).astype(np.int64)
    else:
        clamped = np.clip(idx.astype(np.int64), 0, size - 1)
    return np.take(table, clamped, axis=axis)
