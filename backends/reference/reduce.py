"""Kernels of the reduce family: left folds in row-major order over the reduced positions.

The reduced axes are moved to the front (in increasing axis order, which is the operand's
row-major order over the reduced positions) and flattened, giving rows[r, j]: reduced position
r of output element j. numpy's sum is pairwise and is never used.
"""

from __future__ import annotations

import math

import numpy as np

from gdv.backends.reference.arith import Working, narrow, widen
from gdv.backends.reference.registry import Context, kernel
from gdv.ir.core import Op
from gdv.ir.dtypes import DType
from gdv.ir.ops import REGISTRY as OPS

_CHUNK_ELEMENTS = 1 << 22
"""About how many elements one np.add.accumulate call handles (bounds its scratch memory)."""


def reduced_rows(x: np.ndarray, axes: list[int]) -> np.ndarray:
    """x as rows[r, j]: r runs over the reduced positions in row-major order, j over the kept
    positions in row-major order."""
    axes = sorted(axes)
    kept = [d for d in range(x.ndim) if d not in axes]
    count = math.prod(x.shape[a] for a in axes)
    outer = math.prod(x.shape[d] for d in kept)
    return np.transpose(x, axes + kept).reshape(count, outer)


def fold_sum(rows: np.ndarray, dtype: DType) -> np.ndarray:
    """acc = rows[0]; acc = acc + rows[r] for r = 1, 2, ..., each add rounded to `dtype`
    (wrapping for integers). `rows` holds `dtype` values; at least one row."""
    w = Working(dtype)
    if not w.native:
        acc = w.load(rows[0])
        for r in range(1, rows.shape[0]):
            acc = w.add(acc, w.load(rows[r]))
        return w.store(acc)
    # np.add.accumulate is defined as the sequential recurrence out[i] = out[i-1] + x[i] (no
    # pairwise splitting), evaluated in `dtype` when asked to: the same left fold, in C.
    # Chunked so its scratch output stays small; each chunk starts from the previous total.
    acc = np.array(rows[0], dtype=dtype.np)
    step = max(1, _CHUNK_ELEMENTS // max(1, rows.shape[1]))
    for start in range(1, rows.shape[0], step):
        block = np.concatenate([acc[None], rows[start : start + step]])
        acc = np.add.accumulate(block, axis=0, dtype=dtype.np)[-1]
    return acc


def _float_extreme(rows: np.ndarray, dtype: DType, is_max: bool) -> np.ndarray:
    # IR max/min is associative and commutative (NaN absorbs; among equal values only zeros
    # differ, and max prefers +0.0 whichever comes first, min -0.0), so the left fold equals the
    # extreme of the set, computed here without a Python loop.
    w = widen(rows)
    m = np.max(w, axis=0) if is_max else np.min(w, axis=0)
    zero = w == 0
    if is_max:
        signed = (zero & ~np.signbit(w)).any(axis=0)  # some +0.0 among the zeros
        m = np.where(m == 0, np.where(signed, 0.0, -0.0), m)
    else:
        signed = (zero & np.signbit(w)).any(axis=0)  # some -0.0 among the zeros
        m = np.where(m == 0, np.where(signed, -0.0, 0.0), m)
    m = np.where(np.isnan(w).any(axis=0), np.nan, m)
    return narrow(m, dtype)  # exact: m is one of the inputs


def _reduce(kind: str):
    def run(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
        dtype = ctx.storage(op.type.dtype)
        rows = reduced_rows(args[0], op.attrs["axes"])
        if rows.shape[0] == 0:
            return np.full(op.type.shape, _empty(kind, dtype), dtype=dtype.np)
        if kind == "sum":
            flat = fold_sum(rows, dtype)
        elif dtype.is_float:
            flat = _float_extreme(rows, dtype, kind == "max")
        else:
            flat = rows.max(axis=0) if kind == "max" else rows.min(axis=0)
        return np.asarray(flat, dtype=dtype.np).reshape(op.type.shape)

    return run


def _empty(kind: str, dtype: DType) -> float | int:
    """The result of an empty reduction (IR_SPEC.md section 3)."""
    if kind == "sum":
        return 0
    if dtype.is_float:
        return -math.inf if kind == "max" else math.inf
    return dtype.int_min if kind == "max" else dtype.int_max


kernel(OPS["reduce_sum"])(_reduce("sum"))
kernel(OPS["reduce_max"])(_reduce("max"))
kernel(OPS["reduce_min"])(_reduce("min"))


def scan(x: np.ndarray, axis: int, step: str, exclusive: bool, reverse: bool, dtype: DType):
    """The running left fold of IR cumsum (`step` "add") or cumprod ("mul") along `axis`,
    each step rounded to (or wrapping in) `dtype`; x holds `dtype` values."""
    rows = np.moveaxis(np.asarray(x, dtype=dtype.np), axis, 0)
    if reverse:
        rows = rows[::-1]
    out = np.empty_like(rows)
    if rows.shape[0]:
        w = Working(dtype)
        if w.native:
            # ufunc.accumulate is the sequential recurrence out[i] = op(out[i-1], x[i]) (no
            # pairwise splitting), in `dtype` when asked to: the IR's left fold.
            ufunc = np.add if step == "add" else np.multiply
            inclusive = ufunc.accumulate(rows, axis=0, dtype=dtype.np)
        else:
            inclusive = np.empty_like(rows)
            acc = w.load(rows[0])
            inclusive[0] = w.store(acc)
            for r in range(1, rows.shape[0]):
                acc = (w.add if step == "add" else w.mul)(acc, w.load(rows[r]))
                inclusive[r] = w.store(acc)
        if exclusive:
            out[0] = 0 if step == "add" else 1
            out[1:] = inclusive[:-1]
        else:
            out = inclusive
    if reverse:
        out = out[::-1]
    return np.ascontiguousarray(np.moveaxis(out, 0, axis))


@kernel(OPS["cumsum"], OPS["cumprod"])
def _scan(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    step = "add" if op.name == "cumsum" else "mul"
    a = op.attrs
    return scan(
        args[0],
        a["axis"],
        step,
        bool(a.get("exclusive", False)),
        bool(a.get("reverse", False)),
        ctx.storage(op.type.dtype),
    )


def argsort(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """IR argsort: the stable order along `axis` by value (NaN above every number, NaNs equal,
    -0.0 equal to +0.0), equal values by position, as i64 positions."""
    rows = np.moveaxis(np.asarray(x), axis, -1)
    pos = np.broadcast_to(np.arange(rows.shape[-1]), rows.shape)
    if rows.dtype.kind == "f" or not np.issubdtype(rows.dtype, np.integer):
        w = widen(rows)
        nan = np.isnan(w)
        value = np.where(nan, 0.0, w)
        # lexsort: the last key is the primary one; each key is compared with `<`, under
        # which -0.0 and +0.0 are equal, and the position breaks every remaining tie
        keys = (pos, -value, ~nan) if descending else (pos, value, nan)
    else:
        # ~v is strictly decreasing on signed and unsigned integers alike, with no overflow
        keys = (pos, ~rows) if descending else (pos, rows)
    order = np.lexsort(keys, axis=-1)
    return np.ascontiguousarray(np.moveaxis(order.astype(np.int64), -1, axis))


@kernel(OPS["argsort"])
def _argsort(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    return argsort(args[0], op.attrs["axis"], bool(op.attrs.get("descending", False)))
