"""Bit-exact comparison of results (IR_SPEC.md section 5): the same bits, all NaNs one value."""

from __future__ import annotations

import numpy as np

from gdv.ir.dtypes import from_numpy

_UINT_OF_SIZE = {8: np.uint64, 4: np.uint32, 2: np.uint16, 1: np.uint8}


def same_bits_mask(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per element of two arrays of one dtype and shape: identical bits, or both NaN."""
    a, b = np.asarray(a), np.asarray(b)
    dtype = from_numpy(a.dtype)
    if dtype is not None and (dtype.is_float or dtype.is_float8):
        u = _UINT_OF_SIZE[a.dtype.itemsize]
        wa, wb = a.astype(np.float64), b.astype(np.float64)
        return (a.view(u) == b.view(u)) | (np.isnan(wa) & np.isnan(wb))
    return a == b


def bit_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """True when `a` and `b` have one dtype and shape and are bit-exact equal: -0.0 differs
    from +0.0, all NaNs are one value."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bool(np.all(same_bits_mask(a, b)))


def describe_difference(got: np.ndarray, want: np.ndarray, limit: int = 5) -> str:
    """A short account of where two arrays differ, for test failures and messages."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"got {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    bad = np.argwhere(~same_bits_mask(got, want))
    if len(bad) == 0:
        return "bit-exact equal"
    shown = ", ".join(
        f"at {tuple(int(i) for i in idx)}: got {got[tuple(idx)]!r}, expected {want[tuple(idx)]!r}"
        for idx in bad[:limit]
    )
    return f"{len(bad)} element(s) differ: {shown}"
