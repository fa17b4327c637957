"""Seeded random inputs within each parameter's declared `range`."""

from __future__ import annotations

import math

import numpy as np

from gdv.backends.reference.interpreter import entry_function
from gdv.backends.reference.memory import check_params_memory
from gdv.ir.core import Function, Module, Param
from gdv.ir.diagnostics import IRError
from gdv.ir.dtypes import DType
from gdv.ir.numerics import convert_array, float_to_float

DEFAULT_FLOAT_RANGE = (-1.0, 1.0)
INT_WINDOW = 4
"""Integers are drawn from the (at most) 2 * INT_WINDOW + 1 values of the declared range
nearest to zero: [-4, 4] by default, so sums and products stay small and meaningful."""


def _declared_range(p: Param) -> tuple[float, float] | None:
    try:
        r = p.range
    except (TypeError, ValueError, IndexError) as e:
        raise IRError(f"parameter %{p.name}: range must be [lo, hi] numbers ({e})", p.loc) from None
    if r is not None and not r[0] <= r[1]:
        raise IRError(f"parameter %{p.name}: range [{r[0]}, {r[1]}] has lo > hi", p.loc)
    return r


def _floats(p: Param, rng: np.random.Generator) -> np.ndarray:
    lo, hi = _declared_range(p) or DEFAULT_FLOAT_RANGE
    # An infinite bound becomes half the dtype's largest finite value, so hi - lo stays
    # finite in float64 and every value drawn is finite.
    half_max = _half_max(p.type.dtype)
    lo = min(max(lo, -half_max), half_max)
    hi = min(max(hi, -half_max), half_max)
    wide = rng.uniform(lo, hi, p.type.shape) if lo < hi else np.full(p.type.shape, lo)
    return float_to_float(wide, p.type.dtype)


def _float8s(p: Param, rng: np.random.Generator) -> np.ndarray:
    """float8 values: uniform in the declared range (default [-1, 1]) within +-max/2, rounded
    to the dtype."""
    lo, hi = _declared_range(p) or DEFAULT_FLOAT_RANGE
    half_max = float(p.type.dtype.float8.max) / 2
    lo = min(max(lo, -half_max), half_max)
    hi = min(max(hi, -half_max), half_max)
    wide = rng.uniform(lo, hi, p.type.shape) if lo < hi else np.full(p.type.shape, lo)
    return convert_array(wide, DType.F64, p.type.dtype)


def _half_max(dtype: DType) -> float:
    largest = {
        DType.F64: float(np.finfo(np.float64).max),
        DType.F32: float(np.finfo(np.float32).max),
        DType.F16: float(np.finfo(np.float16).max),
        DType.BF16: float.fromhex("0x1.fep127"),
    }[dtype]
    return largest / 2


def _ints(p: Param, rng: np.random.Generator) -> np.ndarray:
    dtype = p.type.dtype
    lo, hi = dtype.int_min, dtype.int_max
    r = _declared_range(p)
    if r is not None:
        lo = max(lo, math.ceil(r[0]) if math.isfinite(r[0]) else lo)
        hi = min(hi, math.floor(r[1]) if math.isfinite(r[1]) else hi)
        if lo > hi:
            raise IRError(
                f"parameter %{p.name}: range [{r[0]}, {r[1]}] holds no {dtype} value", p.loc
            )
    # The window of values nearest to zero.
    if lo <= 0 <= hi:
        lo, hi = max(lo, -INT_WINDOW), min(hi, INT_WINDOW)
    elif lo > 0:
        hi = min(hi, lo + 2 * INT_WINDOW)
    else:
        lo = max(lo, hi - 2 * INT_WINDOW)
    return rng.integers(lo, hi, size=p.type.shape, endpoint=True).astype(dtype.np)


def random_inputs(
    program: Function | Module, seed: int, *, limit_bytes: int | None = None
) -> dict[str, np.ndarray]:
    """An input per parameter, keyed by name without `%`, drawn with `seed` (same seed, same
    inputs): floats uniform in the declared `range` (default [-1, 1]) then rounded to the
    dtype; integers from the few values of the range nearest to zero (default [-4, 4]); i1
    uniform over false, true (within a declared range). Refuses parameters too large for
    memory with an IRError before drawing."""
    function = entry_function(program)
    check_params_memory(function, limit_bytes)
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for p in function.params:
        if p.type.dtype.is_float:
            out[p.name] = _floats(p, rng)
        elif p.type.dtype.is_float8:
            out[p.name] = _float8s(p, rng)
        else:
            out[p.name] = _ints(p, rng)  # i1: int_min 0, int_max 1
    return out
