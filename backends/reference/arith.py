"""Correctly rounded float arithmetic on numpy arrays, and the IEEE max/min of IR_SPEC.md.

numpy's float64 and float32 ufuncs are the hardware's IEEE 754 operations (one rounding to
nearest-even, no fused multiply-add across separate ufunc calls, no flush-to-zero), so they are
used directly. float16 and bfloat16 arithmetic in numpy and ml_dtypes goes through float32 by
implementation choice; gdv does not rely on that: it computes in float64 and rounds once to the
narrow dtype with `gdv.ir.numerics.float_to_float`. For add, sub, mul, div and sqrt this is the
correctly rounded result because float64's 53 bits are at least 2p + 2 for every narrower
format (p = 24, 11, 8): rounding twice is then innocuous (Figueroa, 1995).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gdv.ir.dtypes import DType
from gdv.ir.numerics import float_to_float

NATIVE_FLOATS = (DType.F64, DType.F32)
"""Float dtypes whose numpy ufuncs are used as the IEEE operations themselves."""

_UINT_OF_SIZE = {8: np.uint64, 4: np.uint32, 2: np.uint16}


def widen(x: np.ndarray) -> np.ndarray:
    """Float values as float64 (exact for every float dtype)."""
    return np.asarray(x).astype(np.float64)


def narrow(x: np.ndarray, dtype: DType) -> np.ndarray:
    """float64 values rounded once, to nearest-even, to `dtype`."""
    return float_to_float(np.asarray(x, dtype=np.float64), dtype)


def via_f64(fn: Callable[..., np.ndarray], dtype: DType, *args: np.ndarray) -> np.ndarray:
    """`fn` evaluated in float64 on float `args` and rounded once to `dtype`."""
    if dtype is DType.F64:
        return np.asarray(fn(*(np.asarray(a, dtype=np.float64) for a in args)))
    return narrow(fn(*(widen(a) for a in args)), dtype)


def flip_sign(x: np.ndarray) -> np.ndarray:
    """-x by flipping the sign bit (NaN stays NaN, -0.0 <-> +0.0)."""
    x = np.asarray(x)
    u = _UINT_OF_SIZE[x.dtype.itemsize]
    sign = u(1) << u(8 * x.dtype.itemsize - 1)
    return (x.view(u) ^ sign).view(x.dtype)


def clear_sign(x: np.ndarray) -> np.ndarray:
    """|x| by clearing the sign bit."""
    x = np.asarray(x)
    u = _UINT_OF_SIZE[x.dtype.itemsize]
    mask = ~(u(1) << u(8 * x.dtype.itemsize - 1))
    return (x.view(u) & mask).view(x.dtype)


def float_max(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IR max: NaN if either is NaN; max(-0.0, +0.0) = +0.0 in either order.

    Written out instead of np.maximum, whose choice between equal zeros is not specified."""
    a, b = np.asarray(a), np.asarray(b)
    wa, wb = widen(a), widen(b)
    out = np.where(wa > wb, a, b)
    # Equal values differ only for zeros: keep `a` when `b` is -0.0 (a is then +0.0 or -0.0).
    out = np.where((wa == wb) & np.signbit(wb), a, out)
    out = np.where(np.isnan(wb), b, out)
    return np.where(np.isnan(wa), a, out)


def float_min(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IR min: NaN if either is NaN; min(-0.0, +0.0) = -0.0 in either order."""
    a, b = np.asarray(a), np.asarray(b)
    wa, wb = widen(a), widen(b)
    out = np.where(wa < wb, a, b)
    out = np.where((wa == wb) & np.signbit(wa), a, out)
    out = np.where(np.isnan(wb), b, out)
    return np.where(np.isnan(wa), a, out)


@dataclass(frozen=True)
class Working:
    """Arithmetic for a loop whose every step rounds to `dtype` (float or integer).

    Values live in a working representation between steps: the dtype itself where numpy's
    operations are the IR's (f64, f32, integers, which wrap), float64 holding `dtype` values
    otherwise, so each step is one float64 operation and one rounding."""

    dtype: DType

    @property
    def native(self) -> bool:
        return not self.dtype.is_float or self.dtype in NATIVE_FLOATS

    def load(self, x: np.ndarray) -> np.ndarray:
        """`dtype` values into the working representation."""
        x = np.asarray(x)
        return x.astype(self.dtype.np, copy=False) if self.native else widen(x)

    def _round(self, x: np.ndarray) -> np.ndarray:
        return x if self.native else widen(narrow(x, self.dtype))

    def add(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self._round(a + b)

    def mul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self._round(a * b)

    def store(self, x: np.ndarray) -> np.ndarray:
        """Working values back as a `dtype` array (exact)."""
        x = np.asarray(x)
        return x.astype(self.dtype.np, copy=False) if self.native else narrow(x, self.dtype)
