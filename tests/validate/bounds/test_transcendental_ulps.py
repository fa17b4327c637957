"""The transcendental assumption is true of the reference target: each function, on every float
dtype, is within DEFAULT_ULPS ulps of the exact value (measured against 60-digit mpmath)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from gdv.backends import reference
from gdv.ir.dtypes import DType
from gdv.ir.numerics import float_to_float
from gdv.validate.bounds import DEFAULT_ULPS

FUNCTIONS = {
    "exp": (mpmath.exp, (-20.0, 10.0)),
    "log": (mpmath.log, (1e-6, 1e4)),
    "rsqrt": (lambda x: 1 / mpmath.sqrt(x), (1e-6, 1e4)),
    "tanh": (mpmath.tanh, (-10.0, 10.0)),
    "sigmoid": (lambda x: 1 / (1 + mpmath.exp(-x)), (-20.0, 20.0)),
    "erf": (mpmath.erf, (-6.0, 6.0)),
    "sin": (mpmath.sin, (-10.0, 10.0)),
    "cos": (mpmath.cos, (-10.0, 10.0)),
    "tan": (mpmath.tan, (-10.0, 10.0)),
    "asin": (mpmath.asin, (-1.0, 1.0)),
    "acos": (mpmath.acos, (-1.0, 1.0)),
    "atan": (mpmath.atan, (-50.0, 50.0)),
    "sinh": (mpmath.sinh, (-10.0, 10.0)),
    "cosh": (mpmath.cosh, (-10.0, 10.0)),
    "asinh": (mpmath.asinh, (-100.0, 100.0)),
    "acosh": (mpmath.acosh, (1.0, 100.0)),
    "atanh": (mpmath.atanh, (-1.0, 1.0)),
}


def _ulp(y: float, dtype: DType) -> float:
    """The spacing of `dtype`'s floats at |y| (for subnormals, the smallest subnormal)."""
    p = dtype.significand_bits
    emin = {DType.F64: -1022, DType.F32: -126, DType.F16: -14, DType.BF16: -126}[dtype]
    e = max(math.frexp(abs(y))[1] - 1, emin) if y != 0 else emin
    return 2.0 ** (e - p + 1)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("dtype", [DType.F64, DType.F32, DType.F16, DType.BF16])
def test_reference_transcendentals_within_assumed_ulps(name: str, dtype: DType) -> None:
    fn, (lo, hi) = FUNCTIONS[name]
    rng = np.random.default_rng(7)
    x = float_to_float(rng.uniform(lo, hi, 300), dtype)
    y = reference.apply(name, [x])
    worst = 0.0
    with mpmath.workdps(60):
        for xi, yi in zip(x.astype(np.float64), y.astype(np.float64), strict=True):
            exact = fn(mpmath.mpf(float(xi)))
            err = abs(mpmath.mpf(float(yi)) - exact)
            worst = max(worst, float(err) / _ulp(float(exact), dtype))
    assert worst <= DEFAULT_ULPS, f"{name} on {dtype}: {worst:.2f} ulp > {DEFAULT_ULPS}"
    if dtype is not DType.F64:
        # Evaluated in f64 and rounded once: essentially correctly rounded.
        assert worst <= 0.5 + 1e-6, f"{name} on {dtype}: {worst:.4f} ulp"


def test_pow_within_assumed_ulps() -> None:
    rng = np.random.default_rng(3)
    a = rng.uniform(0.01, 10.0, 300)
    b = rng.uniform(-4.0, 4.0, 300)
    y = reference.apply("pow", [a, b])
    with mpmath.workdps(60):
        worst = max(
            float(abs(mpmath.mpf(float(yi)) - mpmath.power(mpmath.mpf(ai), mpmath.mpf(bi))))
            / _ulp(float(mpmath.power(mpmath.mpf(ai), mpmath.mpf(bi))), DType.F64)
            for ai, bi, yi in zip(a, b, y, strict=True)
        )
    assert worst <= DEFAULT_ULPS
