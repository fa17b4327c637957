"""Tensor types: `DTYPE[DIMS]` (IR_SPEC.md section 2)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gdv.ir.dtypes import DType

MAX_ELEMENTS = 2**62
"""The most elements a tensor type may have: indices and byte sizes stay in int64."""
MAX_RANK = 64
"""The most dims a tensor type may have (numpy's limit, which the reference backend runs on)."""


@dataclass(frozen=True)
class TensorType:
    """A tensor type; a scalar has an empty shape."""

    dtype: DType
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def num_bytes(self) -> int:
        return self.num_elements * self.dtype.itemsize

    def with_dtype(self, dtype: DType) -> TensorType:
        return TensorType(dtype, self.shape)

    def with_shape(self, shape: tuple[int, ...] | list[int]) -> TensorType:
        return TensorType(self.dtype, tuple(shape))

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(str(d) for d in self.shape)}]"
