"""The reference backend's kernel table: one numpy kernel per op spec.

Kernels are registered against the `OpSpec` objects of `gdv.ir.ops` (never against a name), so
`tests/backends/reference/test_registry.py` can check that no op of the registry is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gdv.ir.core import Op
from gdv.ir.dtypes import DType
from gdv.ir.ops import OpSpec

MODES = ("exact", "ideal")


@dataclass(frozen=True)
class Context:
    """How a program is evaluated.

    `exact`: every value has its program dtype, every op rounds as IR_SPEC.md says.
    `ideal`: every float dtype is replaced by f64 (inputs widened, float constants and literals
    rounded to f64, convert between floats the identity); integers and booleans are unchanged.
    Comparing the two measures a program's rounding error.
    """

    mode: str = "exact"
    mesh: Any = None
    """In an SPMD simulation (`gdv.backends.reference.spmd`), the function's mesh: collectives
    then take and give stacked values, `[*mesh.shape, *local shape]`."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")

    @property
    def ideal(self) -> bool:
        return self.mode == "ideal"

    def storage(self, dtype: DType) -> DType:
        """The dtype a value of program dtype `dtype` is held in under this mode."""
        if self.ideal and (dtype.is_float or dtype.is_float8):  # float8: no rounding either
            return DType.F64
        return dtype


Kernel = Callable[[Op, list[np.ndarray], Context], np.ndarray]
"""(op, operand values, context) -> result value, of dtype `ctx.storage(op.type.dtype)` and
shape `op.type.shape`. Kernels never modify their operands."""

KERNELS: dict[OpSpec, Kernel] = {}


def kernel(*specs: OpSpec) -> Callable[[Kernel], Kernel]:
    """Register the decorated function as the kernel of each of `specs`."""

    def register(fn: Kernel) -> Kernel:
        for spec in specs:
            if not isinstance(spec, OpSpec):
                raise TypeError(f"kernels register against OpSpec objects, got {spec!r}")
            if spec in KERNELS:
                raise ValueError(f"{spec.name} already has a reference kernel")
            KERNELS[spec] = fn
        return fn

    return register
