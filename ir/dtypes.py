"""Element types of the IR (IR_SPEC.md section 2) and their numpy counterparts."""

from __future__ import annotations

import enum

import ml_dtypes
import numpy as np


class DType(enum.Enum):
    """An element type. The value is its spelling in the textual IR."""

    F64 = "f64"
    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"
    I64 = "i64"
    I32 = "i32"
    I16 = "i16"
    I8 = "i8"
    U64 = "u64"
    U32 = "u32"
    U16 = "u16"
    U8 = "u8"
    I1 = "i1"

    def __str__(self) -> str:
        return self.value

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_int(self) -> bool:
        """Integers, signed (two's complement: i8 i16 i32 i64) or unsigned (u8 u16 u32 u64);
        `i1` is a boolean, not an int."""
        return self in _INTS

    @property
    def is_signed(self) -> bool:
        """A two's-complement integer (i8 i16 i32 i64)."""
        return self in _SIGNED

    @property
    def is_unsigned(self) -> bool:
        """An unsigned integer (u8 u16 u32 u64): values 0 .. 2^n - 1."""
        return self in _UNSIGNED

    @property
    def is_bool(self) -> bool:
        return self is DType.I1

    @property
    def bits(self) -> int:
        return _BITS[self]

    @property
    def np(self) -> np.dtype:
        """The numpy dtype holding this type's values exactly."""
        return _NUMPY[self]

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    @property
    def exponent_bits(self) -> int:
        return _FLOAT_FORMAT[self][0]

    @property
    def significand_bits(self) -> int:
        """Significand precision p, including the hidden bit (f32: 24)."""
        return _FLOAT_FORMAT[self][1]

    @property
    def int_min(self) -> int:
        """The smallest value of an integer dtype (i1: 0, false)."""
        return -(1 << (self.bits - 1)) if self.is_signed else 0

    @property
    def int_max(self) -> int:
        """The largest value of an integer dtype (i1: 1, true)."""
        if self.is_signed:
            return (1 << (self.bits - 1)) - 1
        return (1 << self.bits) - 1 if self.is_unsigned else 1

    @classmethod
    def parse(cls, text: str) -> DType | None:
        """The dtype spelled `text`, or None."""
        return _BY_NAME.get(text)


_FLOATS = (DType.F64, DType.F32, DType.F16, DType.BF16)
_SIGNED = (DType.I64, DType.I32, DType.I16, DType.I8)
_UNSIGNED = (DType.U64, DType.U32, DType.U16, DType.U8)
_INTS = _SIGNED + _UNSIGNED
_BITS = {
    DType.F64: 64,
    DType.F32: 32,
    DType.F16: 16,
    DType.BF16: 16,
    DType.I64: 64,
    DType.I32: 32,
    DType.I16: 16,
    DType.I8: 8,
    DType.U64: 64,
    DType.U32: 32,
    DType.U16: 16,
    DType.U8: 8,
    DType.I1: 1,
}
_NUMPY = {
    DType.F64: np.dtype(np.float64),
    DType.F32: np.dtype(np.float32),
    DType.F16: np.dtype(np.float16),
    DType.BF16: np.dtype(ml_dtypes.bfloat16),
    DType.I64: np.dtype(np.int64),
    DType.I32: np.dtype(np.int32),
    DType.I16: np.dtype(np.int16),
    DType.I8: np.dtype(np.int8),
    DType.U64: np.dtype(np.uint64),
    DType.U32: np.dtype(np.uint32),
    DType.U16: np.dtype(np.uint16),
    DType.U8: np.dtype(np.uint8),
    DType.I1: np.dtype(np.bool_),
}
# (exponent bits, significand precision including the hidden bit)
_FLOAT_FORMAT = {
    DType.F64: (11, 53),
    DType.F32: (8, 24),
    DType.F16: (5, 11),
    DType.BF16: (8, 8),
}
_BY_NAME = {d.value: d for d in DType}

FLOAT_DTYPES: tuple[DType, ...] = _FLOATS
INT_DTYPES: tuple[DType, ...] = _INTS
ALL_DTYPES: tuple[DType, ...] = tuple(DType)


def from_numpy(dtype: np.dtype) -> DType | None:
    """The IR dtype whose numpy dtype is `dtype`, or None."""
    for d, n in _NUMPY.items():
        if n == dtype:
            return d
    return None
