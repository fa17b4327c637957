"""Small matchers the rewrite rules share."""

from __future__ import annotations

from typing import Any

import numpy as np

from gdv.ir.core import Op
from gdv.ir.dtypes import DType
from gdv.ir.numerics import literal_to_array


def splat(op: Op | None) -> Any | None:
    """The literal of a splat `constant`, or None."""
    if op is None or op.name != "constant" or isinstance(op.attrs["value"], list):
        return None
    return op.attrs["value"]


def _bits(value: Any, dtype: DType) -> bytes:
    return literal_to_array(value, dtype).tobytes()


def is_splat_of(op: Op | None, value: float | int, dtype: DType) -> bool:
    """`op` is a splat constant whose value, rounded to `dtype`, has the bits of `value`
    (so -0.0 is not 0.0)."""
    lit = splat(op)
    if lit is None:
        return False
    return _bits(lit, dtype) == _bits(value, dtype)


def splat_array(op: Op | None) -> np.ndarray | None:
    """The 0-d value of a splat constant in its dtype, or None."""
    lit = splat(op)
    return None if lit is None else literal_to_array(lit, op.type.dtype)
