"""Kernel of the contract family: `dot` (dot_general) with IR_SPEC.md's summation order.

Per output element: p[k] = convert(a[k], acc) * convert(b[k], acc), rounded in the `acc`
dtype; acc = p[0]; acc = acc + p[k] over the contraction positions in row-major order of the
contracting dims as lhs_contract lists them; result = convert(acc). No np.matmul or einsum
(their order and blocking are unspecified); a Python loop over k, vectorized over
(batch, M, N).
"""

from __future__ import annotations

import math

import numpy as np

from gdv.backends.reference.arith import Working
from gdv.backends.reference.registry import Context, kernel
from gdv.ir.core import Op
from gdv.ir.dtypes import from_numpy
from gdv.ir.numerics import convert_array
from gdv.ir.ops import REGISTRY as OPS


def dot_operands(
    a: np.ndarray, b: np.ndarray, attrs: dict
) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """A as [batch, M, K] and B as [batch, K, N], with K in the contraction order, and the
    result shape (batch dims, A's free dims, B's free dims)."""
    lb, rb = list(attrs["lhs_batch"]), list(attrs["rhs_batch"])
    lc, rc = list(attrs["lhs_contract"]), list(attrs["rhs_contract"])
    a_free = [d for d in range(a.ndim) if d not in lb and d not in lc]
    b_free = [d for d in range(b.ndim) if d not in rb and d not in rc]
    batch = math.prod(a.shape[d] for d in lb)
    m = math.prod(a.shape[d] for d in a_free)
    n = math.prod(b.shape[d] for d in b_free)
    k = math.prod(a.shape[d] for d in lc)
    # Contracting dims in lhs_contract's order (rhs paired with it): flattening them row-major
    # visits the contraction positions in the spec's order.
    a3 = np.transpose(a, lb + a_free + lc).reshape(batch, m, k)
    b3 = np.transpose(b, rb + rc + b_free).reshape(batch, k, n)
    shape = tuple(
        [a.shape[d] for d in lb] + [a.shape[d] for d in a_free] + [b.shape[d] for d in b_free]
    )
    return a3, b3, shape


@kernel(OPS["dot"])
def _dot(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    a, b = args
    src = from_numpy(a.dtype)
    assert src is not None, a.dtype
    result = ctx.storage(op.type.dtype)
    acc_dtype = ctx.storage(op.attrs.get("acc", op.type.dtype))
    a3, b3, shape = dot_operands(a, b, op.attrs)
    w = Working(acc_dtype)
    # Both operands converted to the accumulation dtype first (rounding if it is narrower).
    a3 = w.load(convert_array(a3, src, acc_dtype))
    b3 = w.load(convert_array(b3, src, acc_dtype))
    if a3.shape[2] == 0:
        return np.zeros(shape, dtype=result.np)  # empty contraction: +0.0 (or 0)
    acc = w.mul(a3[:, :, 0, None], b3[:, None, 0, :])
    for k in range(1, a3.shape[2]):
        acc = w.add(acc, w.mul(a3[:, :, k, None], b3[:, None, k, :]))
    return convert_array(w.store(acc), acc_dtype, result).reshape(shape)
