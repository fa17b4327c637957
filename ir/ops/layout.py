"""Layout ops: broadcast, reshape, transpose, slice, concat, pad."""

from __future__ import annotations

from typing import Any

from gdv.ir.ops import (
    AttrSpec,
    OpSpec,
    OpTypeError,
    kind_int,
    kind_int_list,
    kind_number,
    register,
)
from gdv.ir.ops._rules import check_axis, check_length, check_literal
from gdv.ir.types import TensorType


def _infer_broadcast(
    types: list[TensorType], attrs: dict[str, Any], written: TensorType
) -> TensorType:
    x = types[0]
    dims = attrs["dims"]
    check_length(dims, x.rank, "dims", f"one per operand dim of {x}")
    for i, d in enumerate(dims):
        check_axis(d, written.rank, "dims", "result dim")
        if i and dims[i - 1] >= d:
            raise OpTypeError(f"dims {dims} must be strictly increasing", attr="dims")
        if x.shape[i] not in (1, written.shape[d]):
            raise OpTypeError(
                f"operand dim {i} has size {x.shape[i]}, expected 1 or {written.shape[d]} "
                f"like result dim {d} of {written}",
                attr="dims",
            )
    return written.with_dtype(x.dtype)


register(
    OpSpec(
        "broadcast",
        "layout",
        1,
        1,
        (AttrSpec("dims", kind_int_list),),
        _infer_broadcast,
        "result[i] = x[j] where j[k] = i[dims[k]] if x.shape[k] == result.shape[dims[k]] else 0",
        int_legal=True,
        storage_legal=True,
    )
)


def _infer_reshape(
    types: list[TensorType], attrs: dict[str, Any], written: TensorType
) -> TensorType:
    x = types[0]
    if x.num_elements != written.num_elements:
        raise OpTypeError(
            f"operand {x} has {x.num_elements} elements, the result {written} has "
            f"{written.num_elements}",
            0,
        )
    return written.with_dtype(x.dtype)


register(
    OpSpec(
        "reshape",
        "layout",
        1,
        1,
        (),
        _infer_reshape,
        "same elements in the same row-major order, another shape",
        int_legal=True,
        storage_legal=True,
    )
)


def _infer_transpose(
    types: list[TensorType], attrs: dict[str, Any], written: TensorType
) -> TensorType:
    x = types[0]
    perm = attrs["perm"]
    if sorted(perm) != list(range(x.rank)):
        raise OpTypeError(
            f"perm {perm} is not a permutation of the {x.rank} dims of {x}", attr="perm"
        )
    return x.with_shape([x.shape[p] for p in perm])


register(
    OpSpec(
        "transpose",
        "layout",
        1,
        1,
        (AttrSpec("perm", kind_int_list),),
        _infer_transpose,
        "result dim i is operand dim perm[i]: result[i] = x[j] with j[perm[k]] = i[k]",
        int_legal=True,
        storage_legal=True,
    )
)


def _infer_slice(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
    x = types[0]
    start, limit, stride = attrs["start"], attrs["limit"], attrs["stride"]
    for name in ("start", "limit", "stride"):
        check_length(attrs[name], x.rank, name, f"one per dim of {x}")
    shape = []
    for d in range(x.rank):
        if not 0 <= start[d] <= limit[d] <= x.shape[d]:
            raise OpTypeError(
                f"dim {d}: need 0 <= start ({start[d]}) <= limit ({limit[d]}) <= size "
                f"({x.shape[d]}) of {x}",
                attr="start" if start[d] < 0 or start[d] > limit[d] else "limit",
            )
        if stride[d] < 1:
            raise OpTypeError(f"dim {d}: stride {stride[d]} must be >= 1", attr="stride")
        shape.append(-(-(limit[d] - start[d]) // stride[d]))
    return x.with_shape(shape)


register(
    OpSpec(
        "slice",
        "layout",
        1,
        1,
        (
            AttrSpec("start", kind_int_list),
            AttrSpec("limit", kind_int_list),
            AttrSpec("stride", kind_int_list),
        ),
        _infer_slice,
        "result[i] = x[start + i * stride]; result dim d has ceil((limit-start)/stride) entries",
        int_legal=True,
        storage_legal=True,
    )
)


def _infer_concat(
    types: list[TensorType], attrs: dict[str, Any], written: TensorType
) -> TensorType:
    first = types[0]
    axis = attrs["axis"]
    check_axis(axis, first.rank, "axis")
    total = 0
    for i, t in enumerate(types):
        same = (
            t.dtype == first.dtype
            and t.rank == first.rank
            and all(t.shape[d] == first.shape[d] for d in range(t.rank) if d != axis)
        )
        if not same:
            raise OpTypeError(
                f"operand {i + 1} is {t}, expected {first.dtype} with the dims of operand 1 "
                f"({first}) except axis {axis}",
                i,
            )
        total += t.shape[axis]
    shape = list(first.shape)
    shape[axis] = total
    return first.with_shape(shape)


register(
    OpSpec(
        "concat",
        "layout",
        1,
        None,
        (AttrSpec("axis", kind_int),),
        _infer_concat,
        "operands joined along `axis`, in operand order",
        int_legal=True,
        storage_legal=True,
    )
)


def _infer_pad(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
    x = types[0]
    low, high = attrs["low"], attrs["high"]
    check_length(low, x.rank, "low", f"one per dim of {x}")
    check_length(high, x.rank, "high", f"one per dim of {x}")
    for name, vals in (("low", low), ("high", high)):
        if any(v < 0 for v in vals):
            raise OpTypeError(f"{name} {vals} has a negative entry", attr=name)
    check_literal(attrs["value"], x.dtype, "value")
    return x.with_shape([lo + s + hi for lo, s, hi in zip(low, x.shape, high, strict=True)])


register(
    OpSpec(
        "pad",
        "layout",
        1,
        1,
        (
            AttrSpec("low", kind_int_list),
            AttrSpec("high", kind_int_list),
            AttrSpec("value", kind_number),
        ),
        _infer_pad,
        "x placed at offset `low` in a tensor of `value` grown by low + high per dim",
        int_legal=True,
    )
)
