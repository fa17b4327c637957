"""Exact conversions between numbers and IR dtypes.

numpy converts float64 to float32 and float16 with one correct rounding, but ml_dtypes converts
float64 to bfloat16 through float32, rounding twice (1 + 2^-8 + 2^-40 becomes 1 instead of
1 + 2^-7), and int64 to bfloat16 through float64, rounding twice again. IR_SPEC.md asks for one
rounding to nearest-even, so narrow conversions go through round-to-odd intermediates: rounding
to odd at precision q >= p + 2 followed by round-to-nearest-even at precision p is the correct
rounding at p (Boldo and Melquiond, 2008).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from gdv.ir.dtypes import DType


def _f64_to_f32_round_to_odd(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        r = x.astype(np.float32)
        inexact = (r.astype(np.float64) != x) & np.isfinite(x)
        even = (r.view(np.uint32) & 1) == 0
        fix = inexact & even
        if fix.any():
            toward = np.where(x[fix] > r[fix].astype(np.float64), np.inf, -np.inf)
            r = r.copy()
            r[fix] = np.nextafter(r[fix], toward.astype(np.float32))
    return r


def _halves(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int64 or uint64 values as hi + lo, two exact f64s: the one IEEE addition hi + lo is the
    value rounded once to nearest-even."""
    mask = x.dtype.type(0xFFFFFFFF)
    lo = (x & mask).astype(np.float64)  # exact, in [0, 2^32)
    hi = (x - (x & mask)).astype(np.float64)  # <= 32 significant bits: exact
    return hi, lo


def _int_to_f64_round_to_odd(x: np.ndarray) -> np.ndarray:
    """int64 or uint64 values rounded to odd at f64's precision."""
    hi, lo = _halves(x)
    s = hi + lo
    # TwoSum: the exact rounding error of hi + lo.
    bb = s - hi
    err = (hi - (s - bb)) + (lo - bb)
    even = (s.view(np.uint64) & np.uint64(1)) == 0
    fix = (err != 0) & even
    if fix.any():
        s = s.copy()
        s[fix] = np.nextafter(s[fix], np.where(err[fix] > 0, np.inf, -np.inf))
    return s


def _exact_int(x: np.ndarray) -> np.ndarray:
    """Integer (or boolean) values in a 64-bit integer dtype that holds them all: uint64 for
    u64, int64 for every other."""
    x = np.asarray(x)
    return x.astype(np.uint64 if x.dtype == np.uint64 else np.int64)


def float_to_float(x: np.ndarray, dtype: DType) -> np.ndarray:
    """Round floats (any float dtype) to `dtype`, nearest-even, one rounding."""
    x = np.asarray(x)
    if x.ndim == 0:  # the round-to-odd fix-ups assign by mask, which needs an array
        return float_to_float(x.reshape(1), dtype).reshape(())
    if x.dtype == dtype.np:
        return x.copy()
    wide = x.astype(np.float64)  # every float dtype widens to f64 exactly
    if dtype is DType.BF16:
        return _f64_to_f32_round_to_odd(wide).astype(dtype.np)
    with np.errstate(all="ignore"):
        return wide.astype(dtype.np)


def int_to_float(x: np.ndarray, dtype: DType) -> np.ndarray:
    """Round integers (or booleans) to the float `dtype`, nearest-even, one rounding."""
    x = _exact_int(x)
    if x.ndim == 0:
        return int_to_float(x.reshape(1), dtype).reshape(())
    if dtype is DType.F64:
        hi, lo = _halves(x)
        return hi + lo
    odd = _int_to_f64_round_to_odd(x)
    if dtype is DType.BF16:
        return _f64_to_f32_round_to_odd(odd).astype(dtype.np)
    with np.errstate(all="ignore"):
        return odd.astype(dtype.np)


def float_to_int(x: np.ndarray, dtype: DType) -> np.ndarray:
    """Truncate toward zero and saturate to [int_min, int_max]; NaN becomes 0 (IR_SPEC.md,
    `convert`). numpy's own float-to-integer casts are undefined out of range (and for
    negative values to unsigned types), so only in-range values reach one."""
    wide = np.asarray(x).astype(np.float64)
    held = np.uint64 if dtype.is_unsigned else np.int64
    with np.errstate(all="ignore"):
        t = np.trunc(wide)
        t = np.where(np.isnan(t), 0.0, t)
        lo, hi = dtype.int_min, dtype.int_max
        # 2^63 - 1 and 2^64 - 1 are not f64s, so compare before converting.
        big = t >= float(hi)
        small = t <= float(lo)
        mid = np.where(big | small, 0.0, t).astype(held)
    out = np.where(big, held(hi), np.where(small, held(lo), mid))
    return out.astype(dtype.np)


def int_to_int(x: np.ndarray, dtype: DType) -> np.ndarray:
    """The value modulo 2^n in `dtype`'s range (two's complement wrap for signed targets;
    i1: nonzero is true)."""
    x = np.asarray(x)
    if dtype is DType.I1:
        return x != 0
    # numpy's integer casts keep the low bits (modulo 2^64, then modulo 2^n).
    return _exact_int(x).astype(dtype.np)


def float8_decode(x: np.ndarray) -> np.ndarray:
    """float8 values (an ml_dtypes float8 array) as float64, exactly (NaN stays NaN)."""
    return np.asarray(x).astype(np.float64)


def float8_encode(x: np.ndarray, dtype: DType, saturate: bool = True) -> np.ndarray:
    """Float values (any float dtype, or float64) rounded once to nearest-even in the float8
    `dtype` (IR_SPEC.md section 8). saturate: finite values and infinities beyond the largest
    finite value become +-max (ONNX's reference clips first); otherwise a value whose rounding
    exceeds max becomes inf (f8e5m2) or NaN (the others), inf stays inf in f8e5m2 and is NaN
    elsewhere. Every NaN becomes the format's `nan_code`; fnuz formats have no -0."""
    fmt = dtype.float8
    wide = np.asarray(x).astype(np.float64)  # exact from every float dtype
    if saturate:
        top = float(fmt.max)
        wide = np.clip(wide, -top, top)  # NaN stays NaN
    with np.errstate(all="ignore"):
        out = wide.astype(dtype.np)  # ml_dtypes: one rounding from the double, nearest-even
    bits = out.view(np.uint8).copy()
    if fmt.nan_code is None:  # no NaN (f4e2m1fn): +0, and beyond max +-max whatever saturate
        bits[np.isnan(wide)] = 0
        top = float(fmt.max)
        bits[wide > top] = fmt.max_code
        bits[wide < -top] = fmt.max_code | fmt.sign_bit
    else:
        bits[np.isnan(out.astype(np.float32))] = fmt.nan_code  # NaN in, or overflow to NaN
    return bits.view(dtype.np)


def convert_array(x: np.ndarray, src: DType, dst: DType, saturate: bool = True) -> np.ndarray:
    """The `convert` op's meaning on an array of `src` values (`saturate`: float8 targets only,
    IR_SPEC.md section 8)."""
    x = np.asarray(x)
    if src is dst:
        return x.copy()
    if src.is_small_int:  # its integer value, exactly, in a byte of its signedness
        wide = DType.I8 if src.int_min < 0 else DType.U8
        return convert_array(x.astype(wide.np), wide, dst, saturate)
    if dst.is_small_int:
        if src.is_float8:
            x, src = float8_decode(x), DType.F64
        if src.is_float:
            return float_to_int(x, dst)  # truncate, saturate to its range, NaN -> 0
        v = _exact_int(x).astype(np.int64)  # i1 and integers: the value modulo 2^n
        n = 1 << dst.bits
        return (((v - dst.int_min) % n) + dst.int_min).astype(dst.np)
    if src.is_float8:
        return convert_array(float8_decode(x), DType.F64, dst, saturate)
    if dst.is_float8:
        if src.is_bool or src.is_int:
            x = int_to_float(x, DType.F64)  # beyond 2^53 the value overflows every float8
        return float8_encode(x, dst, saturate)
    if dst is DType.I1:
        return x != 0  # NaN != 0 is true
    if src.is_float and dst.is_float:
        return float_to_float(x, dst)
    if src.is_float:
        return float_to_int(x, dst)
    if dst.is_float:
        return int_to_float(x, dst)
    return int_to_int(x, dst)


# --- literals ---------------------------------------------------------------------------------

FloatLiteral = float | Fraction
"""A float literal: a Python float when the literal is exactly an f64 (which covers -0.0, inf
and nan), otherwise the literal's exact rational value, so that rounding it to a narrower dtype
happens once, from the literal itself."""


def _fraction_to_f64(q: Fraction) -> float:
    try:
        return float(q)  # int / int: correctly rounded
    except OverflowError:
        return float("inf") if q > 0 else float("-inf")


def _fraction_to_f64_round_to_odd(q: Fraction) -> float:
    import math

    f = _fraction_to_f64(q)
    if math.isinf(f) or Fraction(f) == q:
        return f
    bits = np.float64(f).view(np.uint64)
    if int(bits) & 1 == 0:
        f = math.nextafter(f, math.inf if q > Fraction(f) else -math.inf)
    return f


def literal_to_array(value: int | bool | FloatLiteral, dtype: DType) -> np.ndarray:
    """A literal rounded to nearest-even in `dtype` (IR_SPEC.md section 2), as a 0-d array.

    Integer literals for integer dtypes must fit; the verifier checks that first."""
    if dtype.is_bool:
        return np.array(bool(value))
    if dtype.is_int:
        return np.array(int(value), dtype=dtype.np)
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        if -(2**63) <= value < 2**64:
            held = np.int64 if value < 2**63 else np.uint64
            return int_to_float(np.array(value, dtype=held), dtype)
        value = Fraction(value)
    if isinstance(value, Fraction):
        if dtype is DType.F64:
            return np.array(_fraction_to_f64(value), dtype=np.float64)
        return float_to_float(np.array(_fraction_to_f64_round_to_odd(value)), dtype)
    return float_to_float(np.array(float(value), dtype=np.float64), dtype)


_NARROW_FORMATS = ((24, -126), (11, -14), (8, -126))  # (precision, emin) of f32, f16, bf16


def is_narrow_midpoint(f: float) -> bool:
    """Whether the f64 value `f` lies exactly halfway between two neighbours in f32, f16 or
    bf16. Only then can rounding a literal first to f64 and then to a narrower dtype differ
    from rounding it once; elsewhere the nearest f64 stands for the literal in every dtype."""
    import math

    if not math.isfinite(f) or f == 0.0:
        return False
    _, exp = math.frexp(f)  # f = m * 2^exp, 0.5 <= |m| < 1
    q = Fraction(f)
    for precision, emin in _NARROW_FORMATS:
        ulp = Fraction(2) ** (max(exp - 1, emin) - precision + 1)
        twice = q * 2 / ulp
        if twice.denominator == 1 and twice.numerator % 2 == 1:
            return True
    return False
