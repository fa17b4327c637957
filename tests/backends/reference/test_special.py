"""The vectorized float64 erf: within an ulp of the exact value, exact special cases."""

from __future__ import annotations

import math

import mpmath
import numpy as np

from gdv.backends.reference.special import erf


def test_erf_special_values() -> None:
    got = erf(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 6.0, -30.0, 5e-324]))
    assert got[0] == 0.0 and not np.signbit(got[0])
    assert got[1] == 0.0 and np.signbit(got[1])
    assert got[2:4].tolist() == [1.0, -1.0]
    assert np.isnan(got[4])
    assert got[5:7].tolist() == [1.0, -1.0]
    assert got[7] == 5e-324  # erf(x) ~ 1.128 x rounds back to the smallest subnormal


def test_erf_is_odd_and_keeps_shape() -> None:
    x = np.random.default_rng(0).uniform(-7, 7, (3, 50))
    got = erf(x)
    assert got.shape == (3, 50)
    assert np.array_equal(erf(-x), -got)


def test_erf_within_one_ulp_of_the_exact_value() -> None:
    rng = np.random.default_rng(1)
    # every interval of the piecewise expansion, their boundaries, and tiny arguments
    xs = np.concatenate(
        [
            rng.uniform(0, 6.5, 400),
            np.arange(1, 25) * 0.25,
            np.nextafter(np.arange(1, 25) * 0.25, 0),
            10.0 ** rng.uniform(-300, -1, 50),
        ]
    )
    got = erf(xs)
    with mpmath.workdps(40):
        for x, g in zip(xs, got, strict=True):
            exact = mpmath.erf(mpmath.mpf(float(x)))
            ulp = math.ulp(float(exact))
            assert abs(mpmath.mpf(float(g)) - exact) <= ulp, (x, g)


def test_erf_agrees_with_math_erf() -> None:
    xs = np.random.default_rng(2).uniform(-6, 6, 20000)
    want = np.array([math.erf(v) for v in xs])
    assert np.all(np.abs(erf(xs) - want) <= 2 * np.spacing(np.abs(want)))
