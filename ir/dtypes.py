"""Element types of the IR (IR_SPEC.md section 2) and their numpy counterparts."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from fractions import Fraction

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
    F8E4M3FN = "f8e4m3fn"
    F8E4M3FNUZ = "f8e4m3fnuz"
    F8E5M2 = "f8e5m2"
    F8E5M2FNUZ = "f8e5m2fnuz"
    F4E2M1FN = "f4e2m1fn"
    I4 = "i4"
    U4 = "u4"
    I2 = "i2"
    U2 = "u2"

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
    def is_float8(self) -> bool:
        """A narrow storage float (f8e4m3fn f8e4m3fnuz f8e5m2 f8e5m2fnuz, and the 4-bit
        f4e2m1fn, IR_SPEC.md section 8): its values are held and moved, and converted to and
        from other dtypes; no arithmetic."""
        return self in _FLOAT8

    @property
    def is_small_int(self) -> bool:
        """A sub-byte integer, storage only (i4 u4 i2 u2, IR_SPEC.md section 8): one value per
        byte, converted and moved, never operated on."""
        return self in _SMALL_INTS

    @property
    def is_storage(self) -> bool:
        """A storage-only dtype: `convert` and data movement take it, arithmetic does not."""
        return self in _FLOAT8 or self in _SMALL_INTS

    @property
    def float8(self) -> Float8Format:
        """The format of a float8 dtype."""
        return FLOAT8_FORMATS[self]

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
        """The smallest value of an integer dtype (i1: 0, false; i4, i2 too)."""
        return -(1 << (self.bits - 1)) if self.is_signed or self in _SMALL_SIGNED else 0

    @property
    def int_max(self) -> int:
        """The largest value of an integer dtype (i1: 1, true; the sub-byte ones too)."""
        if self.is_signed or self in _SMALL_SIGNED:
            return (1 << (self.bits - 1)) - 1
        return (1 << self.bits) - 1 if self.is_unsigned or self.is_small_int else 1

    @classmethod
    def parse(cls, text: str) -> DType | None:
        """The dtype spelled `text`, or None."""
        return _BY_NAME.get(text)


_FLOATS = (DType.F64, DType.F32, DType.F16, DType.BF16)
_SIGNED = (DType.I64, DType.I32, DType.I16, DType.I8)
_UNSIGNED = (DType.U64, DType.U32, DType.U16, DType.U8)
_INTS = _SIGNED + _UNSIGNED
_FLOAT8 = (DType.F8E4M3FN, DType.F8E4M3FNUZ, DType.F8E5M2, DType.F8E5M2FNUZ, DType.F4E2M1FN)
_SMALL_SIGNED = (DType.I4, DType.I2)
_SMALL_INTS = (DType.I4, DType.U4, DType.I2, DType.U2)
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
    DType.F8E4M3FN: 8,
    DType.F8E4M3FNUZ: 8,
    DType.F8E5M2: 8,
    DType.F8E5M2FNUZ: 8,
    DType.F4E2M1FN: 4,
    DType.I4: 4,
    DType.U4: 4,
    DType.I2: 2,
    DType.U2: 2,
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
    DType.F8E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
    DType.F8E4M3FNUZ: np.dtype(ml_dtypes.float8_e4m3fnuz),
    DType.F8E5M2: np.dtype(ml_dtypes.float8_e5m2),
    DType.F8E5M2FNUZ: np.dtype(ml_dtypes.float8_e5m2fnuz),
    DType.F4E2M1FN: np.dtype(ml_dtypes.float4_e2m1fn),  # one value per byte (unpacked)
    DType.I4: np.dtype(ml_dtypes.int4),  # one value per byte (unpacked)
    DType.U4: np.dtype(ml_dtypes.uint4),
    DType.I2: np.dtype(ml_dtypes.int2),
    DType.U2: np.dtype(ml_dtypes.uint2),
}
# (exponent bits, significand precision including the hidden bit)
_FLOAT_FORMAT = {
    DType.F64: (11, 53),
    DType.F32: (8, 24),
    DType.F16: (5, 11),
    DType.BF16: (8, 8),
}
_BY_NAME = {d.value: d for d in DType}


@dataclass(frozen=True)
class Float8Format:
    """A float8 format (IR_SPEC.md section 8): sign, `exponent_bits`, `mantissa_bits` stored
    significand bits, exponent `bias`. A finite value with exponent field e and mantissa m is
    (-1)^s m 2^(1 - bias - mantissa_bits) for e = 0 and (-1)^s (2^mantissa_bits + m)
    2^(e - bias - mantissa_bits) otherwise, except the codes the format reserves:
    e4m3fn: S.1111.111 is NaN (no infinities); e5m2: IEEE (exponent all ones: inf for m = 0,
    NaN otherwise); fnuz formats: 0x80 (the would-be -0) is the only NaN, no infinities, no -0.
    `max_code` is the largest finite positive code: positive codes 0 .. max_code are the finite
    non-negative values in increasing order. `nan_code` is the NaN `convert` writes."""

    exponent_bits: int
    mantissa_bits: int
    bias: int
    max_code: int
    nan_code: int | None
    """None: the format has no NaN (f4e2m1fn); a NaN converts to +0 there."""
    has_inf: bool
    unsigned_zero: bool
    """fnuz: no -0 (0x80 is NaN), so a negative result that rounds to zero is +0."""
    width: int = 8
    """Bits of a code: 8, or 4 for f4e2m1fn (held in the low bits of a byte)."""

    @property
    def sign_bit(self) -> int:
        return 1 << (self.width - 1)

    @property
    def codes(self) -> int:
        return 1 << self.width

    @property
    def precision(self) -> int:
        return self.mantissa_bits + 1

    @property
    def emin(self) -> int:
        """The exponent of the least normal value, 2^emin."""
        return 1 - self.bias

    def is_nan_code(self, code: int) -> bool:
        code &= self.codes - 1
        if self.nan_code is None:
            return False
        if self.unsigned_zero:
            return code == self.sign_bit
        mag = code & (self.sign_bit - 1)
        return mag > self.max_code + (1 if self.has_inf else 0)

    def is_inf_code(self, code: int) -> bool:
        return self.has_inf and (code & (self.sign_bit - 1)) == self.max_code + 1

    def value(self, code: int) -> Fraction:
        """The exact value of a finite code (its magnitude with the sign applied; -0 is 0)."""
        code &= self.codes - 1
        assert not self.is_nan_code(code) and not self.is_inf_code(code), hex(code)
        e = (code >> self.mantissa_bits) & ((1 << self.exponent_bits) - 1)
        m = code & ((1 << self.mantissa_bits) - 1)
        if e == 0:
            v = Fraction(m) * Fraction(2) ** (1 - self.bias - self.mantissa_bits)
        else:
            v = Fraction((1 << self.mantissa_bits) + m) * Fraction(2) ** (
                e - self.bias - self.mantissa_bits
            )
        return -v if code & self.sign_bit else v

    @property
    def max(self) -> Fraction:
        return self.value(self.max_code)


FLOAT8_FORMATS: dict[DType, Float8Format] = {
    DType.F8E4M3FN: Float8Format(4, 3, 7, 0x7E, 0x7F, False, False),
    DType.F8E4M3FNUZ: Float8Format(4, 3, 8, 0x7F, 0x80, False, True),
    DType.F8E5M2: Float8Format(5, 2, 15, 0x7B, 0x7E, True, False),
    DType.F8E5M2FNUZ: Float8Format(5, 2, 16, 0x7F, 0x80, False, True),
    DType.F4E2M1FN: Float8Format(2, 1, 1, 0x7, None, False, False, width=4),
}

FLOAT_DTYPES: tuple[DType, ...] = _FLOATS
INT_DTYPES: tuple[DType, ...] = _INTS
FLOAT8_DTYPES: tuple[DType, ...] = _FLOAT8
SMALL_INT_DTYPES: tuple[DType, ...] = _SMALL_INTS
STORAGE_DTYPES: tuple[DType, ...] = _FLOAT8 + _SMALL_INTS
"""Storage-only dtypes (IR_SPEC.md section 8)."""
ALL_DTYPES: tuple[DType, ...] = tuple(d for d in DType if not d.is_storage)
"""The dtypes arithmetic takes (every dtype but the storage-only ones)."""


def from_numpy(dtype: np.dtype) -> DType | None:
    """The IR dtype whose numpy dtype is `dtype`, or None."""
    for d, n in _NUMPY.items():
        if n == dtype:
            return d
    return None
