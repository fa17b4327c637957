"""Kernel of the conv family: conv2d, cross-correlation of NCHW input with OIHW weights.

The input is padded with +0.0 (0 for integers) and every padded position takes part in the
sum as 0.0 * w (so 0.0 * inf gives NaN). Per output element the products, each rounded to the
dtype, are folded left starting at the first product, over c (within the output channel's
group), then kh, then kw; a Python loop over (c, kh, kw) vectorized over N, O, OH, OW. An
`epilogue` E then maps each sum, with the extra operands' elements of its output channel.
"""

from __future__ import annotations

import numpy as np

from gdv.backends.reference.arith import Working
from gdv.backends.reference.evaluate import evaluate_ops
from gdv.backends.reference.registry import Context, kernel
from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops.kernel import epilogue_of
from gdv.ir.types import TensorType


@kernel(OPS["conv2d"])
def _conv2d(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    out = _sum(op, args[:2], ctx)
    epi = epilogue_of(op.attrs)
    if epi is None:
        return out
    # out[n,o,i,j] = E(sum, e_k[o]...): each extra operand broadcast along the channel dim to
    # the output's shape (an op of E may read extras alone: batch norm's bias - mean * alpha).
    shape = op.type.shape
    env = {epi.params[0].name: out}
    for q, e in zip(epi.params[1:], args[2:], strict=True):
        e = np.asarray(e)
        env[q.name] = np.broadcast_to(e if e.ndim == 0 else e.reshape(1, -1, 1, 1), shape)
    ops = [
        Op(b.result, b.name, b.operands, b.attrs, TensorType(b.type.dtype, shape)) for b in epi.ops
    ]
    (name,) = epi.returns
    value = env[name] if name in env else evaluate_ops(ops, env, ctx, keep=[name])[name]
    return np.asarray(np.broadcast_to(value, shape), order="C")


def _sum(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    x, w = args
    dtype = ctx.storage(op.type.dtype)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    g = op.attrs["groups"]
    og = o // g
    (pt, pb), (pl, pr) = op.attrs["padding"]
    sh, sw = op.attrs["stride"]
    dh, dw = op.attrs["dilation"]
    _, _, oh, ow = op.type.shape
    if cg * kh * kw == 0 or op.type.num_elements == 0:
        return np.zeros(op.type.shape, dtype=dtype.np)
    ar = Working(dtype)
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr), dtype=x.dtype)  # +0.0 padding
    xp[:, :, pt : pt + h, pl : pl + wd] = x
    xg = ar.load(xp).reshape(n, g, cg, h + pt + pb, wd + pl + pr)
    wg = ar.load(w).reshape(g, og, cg, kh, kw)
    acc = None
    for ci in range(cg):
        for i in range(kh):
            rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
            for j in range(kw):
                cols = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
                xs = xg[:, :, ci, rows, cols]  # [n, g, oh, ow]
                ws = wg[:, :, ci, i, j]  # [g, og]
                p = ar.mul(xs[:, :, None, :, :], ws[None, :, :, None, None])
                acc = p if acc is None else ar.add(acc, p)
    return ar.store(acc).reshape(op.type.shape)
