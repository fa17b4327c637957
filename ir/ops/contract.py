"""Contraction: `dot`, StableHLO's dot_general with IR_SPEC.md's summation order."""

from __future__ import annotations

from typing import Any

from gdv.ir.ops import AttrSpec, OpSpec, OpTypeError, kind_dtype, kind_int_list, register
from gdv.ir.types import TensorType


def dot_dims(a: TensorType, b: TensorType, attrs: dict[str, Any]) -> tuple[list[int], list[int]]:
    """The free dims of A and of B, in order."""
    lb, rb = attrs["lhs_batch"], attrs["rhs_batch"]
    lc, rc = attrs["lhs_contract"], attrs["rhs_contract"]
    a_free = [d for d in range(a.rank) if d not in lb and d not in lc]
    b_free = [d for d in range(b.rank) if d not in rb and d not in rc]
    return a_free, b_free


def _check_dims(dims: list[int], rank: int, attr: str, side: str, used: set[int]) -> None:
    for d in dims:
        if not 0 <= d < rank:
            raise OpTypeError(
                f"{attr}: dim {d} is out of range for {side} of rank {rank}", attr=attr
            )
        if d in used:
            raise OpTypeError(f"{attr}: dim {d} of {side} is used twice", attr=attr)
        used.add(d)


def _infer_dot(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
    a, b = types
    if a.dtype != b.dtype:
        raise OpTypeError(f"operand 2 is {b}, expected dtype {a.dtype} like operand 1 ({a})", 1)
    if a.dtype.is_bool:
        raise OpTypeError(f"dot takes float or integer operands, operand 1 is {a}", 0)
    lb, rb = attrs["lhs_batch"], attrs["rhs_batch"]
    lc, rc = attrs["lhs_contract"], attrs["rhs_contract"]
    if len(lb) != len(rb):
        raise OpTypeError(f"lhs_batch {lb} and rhs_batch {rb} differ in length", attr="rhs_batch")
    if len(lc) != len(rc):
        raise OpTypeError(
            f"lhs_contract {lc} and rhs_contract {rc} differ in length", attr="rhs_contract"
        )
    used_a: set[int] = set()
    used_b: set[int] = set()
    _check_dims(lb, a.rank, "lhs_batch", "operand 1", used_a)
    _check_dims(lc, a.rank, "lhs_contract", "operand 1", used_a)
    _check_dims(rb, b.rank, "rhs_batch", "operand 2", used_b)
    _check_dims(rc, b.rank, "rhs_contract", "operand 2", used_b)
    for attr, ld, rd in (("rhs_batch", lb, rb), ("rhs_contract", lc, rc)):
        for x, y in zip(ld, rd, strict=True):
            if a.shape[x] != b.shape[y]:
                raise OpTypeError(
                    f"{attr}: operand 2 dim {y} has size {b.shape[y]}, expected {a.shape[x]} "
                    f"like operand 1 dim {x}",
                    attr=attr,
                )
    acc = attrs.get("acc")
    if acc is not None and (acc.is_float != a.dtype.is_float or acc.is_bool):
        raise OpTypeError(
            f"acc {acc} must be a {'float' if a.dtype.is_float else 'integer'} "
            f"dtype like the operands ({a.dtype})",
            attr="acc",
        )
    if acc is not None and a.dtype.is_int and acc != a.dtype:
        raise OpTypeError(f"acc {acc} must equal the integer operand dtype {a.dtype}", attr="acc")
    a_free, b_free = dot_dims(a, b, attrs)
    shape = [a.shape[d] for d in lb] + [a.shape[d] for d in a_free] + [b.shape[d] for d in b_free]
    dtype = written.dtype if a.dtype.is_float and written.dtype.is_float else a.dtype
    return TensorType(dtype, tuple(shape))


register(
    OpSpec(
        "dot",
        "contract",
        2,
        2,
        (
            AttrSpec("lhs_batch", kind_int_list),
            AttrSpec("rhs_batch", kind_int_list),
            AttrSpec("lhs_contract", kind_int_list),
            AttrSpec("rhs_contract", kind_int_list),
            AttrSpec("acc", kind_dtype, required=False),
        ),
        _infer_dot,
        "result dims: batch, A's free, B's free. Per element: p[k] = convert(a[k], acc) * "
        "convert(b[k], acc); acc = p[0]; acc = acc + p[k] over the contraction positions in "
        "row-major order (the contracting dims taken in the order lhs_contract lists them); "
        "result = convert(acc). acc defaults to the result dtype; empty contraction gives 0.",
        int_legal=True,
    )
)
