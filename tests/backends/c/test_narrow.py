"""The branch-free f16/bf16 conversions of the C target (backends/c/narrow.py), bit for bit
against the reference's rounding: every f16 and bf16 value widened, the midpoints between
neighbours (exact ties) and one double ulp either side of them, random doubles in every binade
from far below the least subnormal to far above the largest finite value, infinities, NaNs and
signed zeros."""

from __future__ import annotations

import ctypes
import functools

import ml_dtypes
import numpy as np
import pytest

from gdv.backends.c import narrow
from gdv.backends.c.toolchain import build
from gdv.ir.dtypes import DType
from gdv.ir.numerics import float_to_float

_ARRAYS = """
void round_f16_all(const double *x, uint16_t *y, int64_t n)
{
#pragma omp simd
  for (int64_t i = 0; i < n; i++) y[i] = gdv_round_f16(x[i]);
}
void round_bf16_all(const double *x, uint16_t *y, int64_t n)
{
#pragma omp simd
  for (int64_t i = 0; i < n; i++) y[i] = gdv_round_bf16(x[i]);
}
void widen_f16_all(const uint16_t *h, double *y, int64_t n)
{
#pragma omp simd
  for (int64_t i = 0; i < n; i++) y[i] = gdv_widen_f16(h[i]);
}
void widen_bf16_all(const uint16_t *h, double *y, int64_t n)
{
#pragma omp simd
  for (int64_t i = 0; i < n; i++) y[i] = gdv_widen_bf16(h[i]);
}
"""


@functools.cache
def _lib() -> ctypes.CDLL:
    source = "#include <stdint.h>\n#include <string.h>\n" + narrow.helpers() + _ARRAYS
    lib = ctypes.CDLL(str(build(source)))
    for name in ("round_f16_all", "round_bf16_all", "widen_f16_all", "widen_bf16_all"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    return lib


def _round(x: np.ndarray, suffix: str) -> np.ndarray:
    x = np.ascontiguousarray(x, np.float64)
    y = np.empty(x.shape, np.uint16)
    getattr(_lib(), f"round_{suffix}_all")(x.ctypes.data, y.ctypes.data, x.size)
    return y


def _widen(h: np.ndarray, suffix: str) -> np.ndarray:
    h = np.ascontiguousarray(h, np.uint16)
    y = np.empty(h.shape, np.float64)
    getattr(_lib(), f"widen_{suffix}_all")(h.ctypes.data, y.ctypes.data, h.size)
    return y


SUFFIX = {DType.F16: "f16", DType.BF16: "bf16"}
NP = {DType.F16: np.float16, DType.BF16: ml_dtypes.bfloat16}


def _doubles(dtype: DType) -> np.ndarray:
    """Every narrow value, the midpoints of neighbours and a double ulp either side, and random
    doubles over every binade the format and its rounding can see."""
    with np.errstate(invalid="ignore"):  # the NaN patterns
        every = np.arange(1 << 16, dtype=np.uint16).view(NP[dtype]).astype(np.float64)
    finite = np.unique(every[np.isfinite(every)])
    mids = (finite[:-1] + finite[1:]) / 2  # exact: the neighbours are 1 ulp apart in double
    largest = finite[-1]
    ulp = largest - finite[-2]
    edges = np.array([largest + ulp / 2, -(largest + ulp / 2), largest + ulp / 4, 1e300, 5e-324])
    rng = np.random.default_rng(int(dtype is DType.BF16))
    exps = rng.uniform(-170, 140, 200_000)
    rand = np.sign(rng.standard_normal(exps.size)) * np.exp2(exps)
    return np.concatenate(
        [
            every,
            mids,
            np.nextafter(mids, np.inf),
            np.nextafter(mids, -np.inf),
            edges,
            rand,
            [np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0],
        ]
    )


@pytest.mark.parametrize("dtype", [DType.F16, DType.BF16])
def test_round_is_the_reference_rounding_bit_for_bit(dtype: DType) -> None:
    x = _doubles(dtype)
    got = _round(x, SUFFIX[dtype])
    want = float_to_float(x, dtype).view(np.uint16)
    nan = np.isnan(x)
    bad = np.flatnonzero((got != want) & ~nan)
    assert bad.size == 0, [(float(x[i]), hex(got[i]), hex(want[i])) for i in bad[:5]]
    # NaN: the quiet NaN of the argument's sign
    t, emax = narrow.FORMATS[dtype]
    qnan = ((2 * emax + 1) << t) | (1 << (t - 1))
    sign = np.where(np.signbit(x[nan]), 0x8000, 0)
    assert (got[nan] == (sign | qnan)).all()


@pytest.mark.parametrize("dtype", [DType.F16, DType.BF16])
def test_widen_is_exact_on_every_value(dtype: DType) -> None:
    h = np.arange(1 << 16, dtype=np.uint16)
    got = _widen(h, SUFFIX[dtype])
    with np.errstate(invalid="ignore"):
        want = h.view(NP[dtype]).astype(np.float64)
    same = (got.view(np.uint64) == want.view(np.uint64)) | (np.isnan(got) & np.isnan(want))
    assert same.all()
    assert (np.signbit(got) == np.signbit(want)).all()
