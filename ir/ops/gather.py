"""Gathering: `take` (numpy.take with clamped indices)."""

from __future__ import annotations

from typing import Any

from gdv.ir.ops import AttrSpec, OpSpec, OpTypeError, kind_int, register
from gdv.ir.ops._rules import check_axis
from gdv.ir.types import TensorType


def _infer_take(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
    table, idx = types
    axis = attrs["axis"]
    check_axis(axis, table.rank, "axis")
    if not idx.dtype.is_int:
        raise OpTypeError(
            f"indices must be an integer type (i8 .. i64, u8 .. u64), operand 2 is {idx}", 1
        )
    if table.shape[axis] == 0 and idx.num_elements > 0:
        raise OpTypeError(
            f"cannot take from axis {axis} of {table}: it has no entries to clamp to", 0
        )
    shape = table.shape[:axis] + idx.shape + table.shape[axis + 1 :]
    return table.with_shape(shape)


register(
    OpSpec(
        "take",
        "gather",
        2,
        2,
        (AttrSpec("axis", kind_int),),
        _infer_take,
        "out[a..., i..., b...] = table[a..., clamp(idx[i...], 0, size-1), b...] (numpy.take "
        "with indices clamped, no wrap-around)",
        int_legal=True,
    )
)
