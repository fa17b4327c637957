"""Slow, independent pure-Python meanings of the folding ops, for property tests.

Floats are Python floats holding dtype values; every operation is computed exactly with
Fractions and rounded once with `gdv.ir.numerics.literal_to_array` (a rounding path separate
from the backend's float64-then-round one). Only finite values are supported; signs of exact
zeros follow IEEE 754 round-to-nearest. Integers are Python ints wrapped to the dtype.

Loaded by path (pytest runs with --import-mode=importlib): see `load` in the tests.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from gdv.ir.dtypes import DType
from gdv.ir.numerics import literal_to_array


def round_to(q: Fraction, dtype: DType) -> float:
    """The exact value `q` rounded once to `dtype` (q != 0)."""
    return float(literal_to_array(q, dtype))


def wrap(v: int, dtype: DType) -> int:
    """v modulo 2^n, in the dtype's range (two's complement for signed dtypes)."""
    return (v - dtype.int_min) % (1 << dtype.bits) + dtype.int_min


def add(x, y, dtype: DType):
    if dtype.is_int:
        return wrap(x + y, dtype)
    exact = Fraction(x) + Fraction(y)
    if exact == 0:
        # x + y = 0 exactly: -0.0 only for (-0.0) + (-0.0) under round-to-nearest.
        both_negative = math.copysign(1, x) < 0 and math.copysign(1, y) < 0
        return -0.0 if both_negative and x == 0 else 0.0
    return round_to(exact, dtype)


def mul(x, y, dtype: DType):
    if dtype.is_int:
        return wrap(x * y, dtype)
    exact = Fraction(x) * Fraction(y)
    if exact == 0:
        return math.copysign(0.0, math.copysign(1, x) * math.copysign(1, y))
    return round_to(exact, dtype)


def convert(x, dtype: DType):
    """float -> float rounding (the only conversion the folds need)."""
    return x if x == 0 else round_to(Fraction(x), dtype)


def ir_max(x: float, y: float) -> float:
    if math.isnan(x) or math.isnan(y):
        return math.nan
    if x == 0 and y == 0:
        return 0.0 if (math.copysign(1, x) > 0 or math.copysign(1, y) > 0) else -0.0
    return x if x > y else y


def ir_min(x: float, y: float) -> float:
    if math.isnan(x) or math.isnan(y):
        return math.nan
    if x == 0 and y == 0:
        return -0.0 if (math.copysign(1, x) < 0 or math.copysign(1, y) < 0) else 0.0
    return x if x < y else y


def fold(values: list, step, empty):
    if not values:
        return empty
    acc = values[0]
    for v in values[1:]:
        acc = step(acc, v)
    return acc


def reduce(x: np.ndarray, axes: list[int], kind: str, dtype: DType) -> np.ndarray:
    """reduce_sum / reduce_max / reduce_min by visiting every output index and folding the
    reduced positions in row-major order of the operand (np.ndindex order)."""
    kept = [d for d in range(x.ndim) if d not in axes]
    out_shape = tuple(x.shape[d] for d in kept)
    red_shape = tuple(x.shape[d] for d in sorted(axes))
    out = np.zeros(out_shape, dtype=dtype.np)
    for o in np.ndindex(*out_shape):
        values = []
        for r in np.ndindex(*red_shape):
            index = [0] * x.ndim
            for d, i in zip(kept, o, strict=True):
                index[d] = i
            for d, i in zip(sorted(axes), r, strict=True):
                index[d] = i
            v = x[tuple(index)]
            values.append(int(v) if dtype.is_int else float(v))
        if kind == "sum":
            empty = 0 if dtype.is_int else 0.0
            out[o] = fold(values, lambda a, b: add(a, b, dtype), empty)
        elif kind == "max":
            empty = dtype.int_min if dtype.is_int else -math.inf
            step = max if dtype.is_int else ir_max
            out[o] = fold(values, step, empty)
        else:
            empty = dtype.int_max if dtype.is_int else math.inf
            step = min if dtype.is_int else ir_min
            out[o] = fold(values, step, empty)
    return out


def dot(a: np.ndarray, b: np.ndarray, attrs: dict, result: DType, acc: DType) -> np.ndarray:
    """dot_general element by element, contraction positions in row-major order over the
    contracting dims in lhs_contract's order."""
    lb, rb, lc, rc = (attrs[k] for k in ("lhs_batch", "rhs_batch", "lhs_contract", "rhs_contract"))
    a_free = [d for d in range(a.ndim) if d not in lb and d not in lc]
    b_free = [d for d in range(b.ndim) if d not in rb and d not in rc]
    batch_shape = [a.shape[d] for d in lb]
    shape = batch_shape + [a.shape[d] for d in a_free] + [b.shape[d] for d in b_free]
    k_shape = [a.shape[d] for d in lc]
    out = np.zeros(shape, dtype=result.np)
    is_int = result.is_int
    for idx in np.ndindex(*shape):
        bi = idx[: len(lb)]
        ai = idx[len(lb) : len(lb) + len(a_free)]
        bj = idx[len(lb) + len(a_free) :]
        terms = []
        for k in np.ndindex(*k_shape):
            ia = [0] * a.ndim
            ib = [0] * b.ndim
            for d, v in zip(lb, bi, strict=True):
                ia[d] = v
            for d, v in zip(rb, bi, strict=True):
                ib[d] = v
            for d, v in zip(a_free, ai, strict=True):
                ia[d] = v
            for d, v in zip(b_free, bj, strict=True):
                ib[d] = v
            for d, v in zip(lc, k, strict=True):
                ia[d] = v
            for d, v in zip(rc, k, strict=True):
                ib[d] = v
            if is_int:
                terms.append(mul(int(a[tuple(ia)]), int(b[tuple(ib)]), acc))
            else:
                x = convert(float(a[tuple(ia)]), acc)
                y = convert(float(b[tuple(ib)]), acc)
                terms.append(mul(x, y, acc))
        total = fold(terms, lambda s, t: add(s, t, acc), 0 if is_int else 0.0)
        out[idx] = total if is_int else convert(total, result)
    return out


def conv2d(x: np.ndarray, w: np.ndarray, attrs: dict, dtype: DType) -> np.ndarray:
    """conv2d by its definition: padded input read with +0.0 outside, products folded over c
    in the group, then kh, then kw."""
    n_, c_, h_, w_ = x.shape
    o_, cg, kh_, kw_ = w.shape
    g = attrs["groups"]
    og = o_ // g
    (pt, pb), (pl, pr) = attrs["padding"]
    sh, sw = attrs["stride"]
    dh, dw = attrs["dilation"]
    oh = (h_ + pt + pb - dh * (kh_ - 1) - 1) // sh + 1
    ow = (w_ + pl + pr - dw * (kw_ - 1) - 1) // sw + 1
    zero = 0 if dtype.is_int else 0.0
    out = np.zeros((n_, o_, oh, ow), dtype=dtype.np)
    for n in range(n_):
        for o in range(o_):
            grp = o // og
            for i in range(oh):
                for j in range(ow):
                    terms = []
                    for c in range(cg):
                        for ki in range(kh_):
                            for kj in range(kw_):
                                r = i * sh + ki * dh - pt
                                s = j * sw + kj * dw - pl
                                inside = 0 <= r < h_ and 0 <= s < w_
                                xv = x[n, grp * cg + c, r, s] if inside else zero
                                xv = int(xv) if dtype.is_int else float(xv)
                                wv = w[o, c, ki, kj]
                                wv = int(wv) if dtype.is_int else float(wv)
                                terms.append(mul(xv, wv, dtype))
                    out[n, o, i, j] = fold(terms, lambda s, t: add(s, t, dtype), zero)
    return out
