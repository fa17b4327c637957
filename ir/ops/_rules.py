"""Shared pieces of type rules."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from gdv.ir.dtypes import DType
from gdv.ir.ops import OpTypeError
from gdv.ir.types import TensorType


def same_shape_operands(types: list[TensorType]) -> None:
    """All operands share the first one's shape and dtype."""
    first = types[0]
    for i, t in enumerate(types[1:], start=1):
        if t != first:
            raise OpTypeError(f"operand {i + 1} is {t}, expected {first} like operand 1", i)


def require_float(t: TensorType, index: int, op: str) -> None:
    if not t.dtype.is_float:
        raise OpTypeError(f"{op} takes a float operand, operand {index + 1} is {t}", index)


def check_axis(axis: int, rank: int, attr: str, what: str = "axis") -> None:
    if not 0 <= axis < rank:
        raise OpTypeError(f"{what} {axis} is out of range for rank {rank}", attr=attr)


def check_axes(axes: list[int], rank: int, attr: str, increasing: bool = False) -> None:
    for a in axes:
        check_axis(a, rank, attr)
    if len(set(axes)) != len(axes):
        raise OpTypeError(f"{attr} {axes} repeats an axis", attr=attr)
    if increasing and axes != sorted(axes):
        raise OpTypeError(f"{attr} {axes} must be strictly increasing", attr=attr)


def check_length(values: list[Any], n: int, attr: str, what: str) -> None:
    if len(values) != n:
        raise OpTypeError(f"{attr} has {len(values)} entries, expected {n} ({what})", attr=attr)


def literal_fits(value: Any, dtype: DType) -> str | None:
    """Why the literal `value` cannot be an element of `dtype`, or None when it can."""
    if dtype.is_bool:
        if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            return None
        return f"{value!r} is not a boolean (true, false, 0 or 1)"
    if dtype.is_int:
        if isinstance(value, bool):
            return None if dtype.is_bool else f"a boolean is not an {dtype} value"
        if not isinstance(value, int):
            return f"{float(value)!r} is not an integer, but the dtype is {dtype}"
        if not dtype.int_min <= value <= dtype.int_max:
            return f"{value} is out of range for {dtype} [{dtype.int_min}, {dtype.int_max}]"
        return None
    if isinstance(value, bool):
        return f"a boolean is not a {dtype} value"
    if isinstance(value, int | float | Fraction):
        return None
    return f"{value!r} is not a number"


def check_literal(value: Any, dtype: DType, attr: str) -> None:
    why = literal_fits(value, dtype)
    if why is not None:
        raise OpTypeError(f"{attr}: {why}", attr=attr)
