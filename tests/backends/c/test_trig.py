"""The C target's tan, asin, acos, atan, sinh, cosh, asinh, acosh and atanh (issue 19) against
the reference backend.

C computes each in double with libm and rounds once to the dtype, as the reference evaluates
numpy's float64 function and rounds once (IR_SPEC.md section 3: the last bits are
implementation-defined). Checked: every f16 and every bf16 value, and the edge values of f32
and f64 (+-0, +-1 and its neighbours, +-inf, NaN, subnormals, the largest finite values, huge
arguments) plus random ones. f32, f16 and bf16 results must be within 1 ulp of the reference's
(both are the float64 value, within a few float64 ulps of the truth, rounded once); f64 results
within 4 ulp (the two libms, numpy's and the C library's, each within the ulp assumption of
validate/bounds, DEFAULT_ULPS = 4). NaN exactly where the reference has NaN, and zeros with the
reference's sign.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from gdv.api import parse
from gdv.backends import c, reference
from gdv.ir.dtypes import DType
from gdv.ir.ops.elementwise import TRIG_OPS
from gdv.validate.bounds import DEFAULT_ULPS


def _program(dtype: DType, n: int) -> str:
    t = f"{dtype}[{n}]"
    body = [f"  %r{k} = {name}(%x) : {t}" for k, name in enumerate(TRIG_OPS)]
    results = ", ".join(f"%r{k}" for k in range(len(TRIG_OPS)))
    return "\n".join(
        [
            f"func @main(%x: {t}) -> ({', '.join([t] * len(TRIG_OPS))}) {{",
            *body,
            f"  return {results}",
            "}",
        ]
    )


def _ulp_distance(got: np.ndarray, want: np.ndarray, dtype: DType) -> np.ndarray:
    """|got - want| in ulps of `dtype` at want (inf where one is infinite and the other not)."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    info = ml_dtypes.finfo(dtype.np)
    e = np.floor(np.log2(np.maximum(np.abs(w), float(info.smallest_normal))))
    ulp = np.exp2(e - (info.nmant))
    with np.errstate(invalid="ignore"):
        d = np.where(g == w, 0.0, np.abs(g - w) / ulp)
    return np.where(np.isnan(d), np.inf, d)


def _compare(dtype: DType, x: np.ndarray, ulps: float) -> None:
    module = parse(_program(dtype, x.size))
    got = c.run(module, {"x": x})
    want = reference.run(module, {"x": x})
    for name, g, w in zip(TRIG_OPS, got, want, strict=True):
        gn, wn = np.isnan(g.astype(np.float64)), np.isnan(w.astype(np.float64))
        assert np.array_equal(gn, wn), (name, dtype, x[gn != wn])
        zero = w.astype(np.float64) == 0
        assert np.array_equal(np.signbit(g[zero]), np.signbit(w[zero])), (name, dtype)
        d = _ulp_distance(g[~wn], w[~wn], dtype)
        worst = int(np.argmax(d)) if d.size else 0
        assert d.size == 0 or d[worst] <= ulps, (
            f"{name} on {dtype}: x = {x[~wn][worst]!r}: C {g[~wn][worst]!r}, "
            f"reference {w[~wn][worst]!r} ({d[worst]:.2f} ulp)"
        )


@pytest.mark.parametrize("dtype", [DType.F16, DType.BF16], ids=str)
def test_every_narrow_value(dtype: DType) -> None:
    x = np.arange(2**16, dtype=np.uint16).view(dtype.np)
    _compare(dtype, x, 1.0)


def _edges(dtype: DType) -> np.ndarray:
    info = np.finfo(dtype.np)
    tiny, big = float(info.smallest_subnormal), float(info.max)
    eps, epsneg = float(info.eps), float(info.epsneg)
    vals = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, tiny, -tiny, big, -big]
    vals += [1 + eps, -1 - eps, 1 - epsneg, -1 + epsneg, float(info.smallest_normal)]
    vals += [np.pi / 2, -np.pi / 2, 1e10, -1e30, 1e300 if dtype is DType.F64 else 3e38]
    vals += [88.7, 89.5, 710.0, -710.5, 0.5, -0.25, 2.0, 1e-5, 1e-20]
    rng = np.random.default_rng(19)
    r = rng.standard_normal(2000) * 10.0 ** rng.integers(-8, 4, 2000)
    return np.concatenate([np.array(vals), r, rng.uniform(-1, 1, 500)]).astype(dtype.np)


@pytest.mark.parametrize("dtype", [DType.F32, DType.F64], ids=str)
def test_edges_and_random_values(dtype: DType) -> None:
    _compare(dtype, _edges(dtype), 1.0 if dtype is DType.F32 else DEFAULT_ULPS)


def test_the_comparison_can_fail() -> None:
    """A result one ulp off in f16 passes at 1 ulp and fails at 0: the check measures."""
    w = np.array([1.0, 0.5], dtype=np.float16)
    g = np.nextafter(w, np.float16(2))
    assert np.all(_ulp_distance(g, w, DType.F16) == 1.0)
    assert np.all(_ulp_distance(w, w, DType.F16) == 0.0)


def test_c_f64_results_are_within_the_assumed_ulps_of_the_exact_value() -> None:
    """The C target's double libm functions are what the bound's assumption (DEFAULT_ULPS on
    the reference's float64 step) covers on that target: measured against 60-digit mpmath on
    the finite edge values and a few hundred random ones."""
    import math

    import mpmath

    x = _edges(DType.F64)[:400]
    module = parse(_program(DType.F64, x.size))
    got = c.run(module, {"x": x})
    fns = {"asinh": mpmath.asinh, "acosh": mpmath.acosh, "atanh": mpmath.atanh}
    for name, y in zip(TRIG_OPS, got, strict=True):
        fn = fns.get(name, getattr(mpmath, name))
        worst = 0.0
        with mpmath.workdps(60):
            for xi, yi in zip(x.tolist(), y.tolist(), strict=True):
                if not (math.isfinite(xi) and math.isfinite(yi)):
                    continue
                exact = fn(mpmath.mpf(xi))
                if isinstance(exact, mpmath.mpc) or not mpmath.isfinite(exact):
                    continue
                ulp = math.ulp(float(exact)) if float(exact) != 0 else 5e-324
                worst = max(worst, float(abs(mpmath.mpf(yi) - exact)) / ulp)
        assert worst <= DEFAULT_ULPS, f"{name}: {worst:.2f} ulp"
