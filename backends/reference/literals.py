"""Attribute literals as arrays: each literal rounded once to the dtype where it is used."""

from __future__ import annotations

from typing import Any

import numpy as np

from gdv.ir.dtypes import DType
from gdv.ir.numerics import convert_array, literal_to_array
from gdv.ir.ops.elementwise import iter_leaves


def literal(value: Any, dtype: DType) -> np.ndarray:
    """`value` (int, bool, float or Fraction) rounded once to `dtype`, as a 0-d array."""
    return literal_to_array(value, dtype)


def _exact_f64(leaf: Any) -> float | None:
    """`leaf` as a float64 when that is exactly its value, else None."""
    if isinstance(leaf, float):
        return leaf
    if isinstance(leaf, int) and abs(leaf) <= 2**53:
        return float(leaf)  # bool included: 0.0 or 1.0
    return None


def constant_array(value: Any, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    """The value of `constant {value} : dtype[shape]`, `value` a scalar (splat) or a nested
    list of that shape (the verifier checked it)."""
    if not isinstance(value, list):
        return np.full(shape, literal(value, dtype), dtype=dtype.np)
    leaves = list(iter_leaves(value))
    if dtype.is_float:
        # Vectorized for leaves exact in f64 (rounding them is rounding the literal), one by
        # one for the rest (Fractions, large integers), so each leaf is rounded exactly once.
        exact = [_exact_f64(v) for v in leaves]
        wide = np.array([0.0 if e is None else e for e in exact], dtype=np.float64)
        flat = convert_array(wide, DType.F64, dtype)
        for i, e in enumerate(exact):
            if e is None:
                flat[i] = literal(leaves[i], dtype)
    elif dtype.is_bool:
        flat = np.array([bool(v) for v in leaves], dtype=np.bool_)
    else:
        flat = np.array([int(v) for v in leaves], dtype=dtype.np)
    return flat.reshape(shape)
