"""Reductions: reduce_sum, reduce_max, reduce_min over `axes`, left folds in row-major order;
the scans cumsum, cumprod and the sort argsort along one `axis` (since gdv 0.6)."""

from __future__ import annotations

from typing import Any

from gdv.ir.dtypes import DType
from gdv.ir.ops import (
    AttrSpec,
    Combiner,
    OpSpec,
    OpTypeError,
    kind_bool,
    kind_int,
    kind_int_list,
    names_where,
    register,
)
from gdv.ir.ops._rules import check_axes, check_axis
from gdv.ir.types import TensorType

REDUCE_DOCS = {
    "reduce_sum": "acc = x[first]; acc = acc + x[next] ... ; empty: 0 (0.0 for floats)",
    "reduce_max": "acc = x[first]; acc = max(acc, x[next]) ... ; empty: -inf, int min",
    "reduce_min": "acc = x[first]; acc = min(acc, x[next]) ... ; empty: +inf, int max",
}
COMBINE = {
    "reduce_sum": Combiner("add", "sum"),
    "reduce_max": Combiner("max", "max"),
    "reduce_min": Combiner("min", "min"),
}
"""Each reduction's fold (its spec's `combiner` trait)."""


def _infer_reduce(name: str):
    def infer(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
        x = types[0]
        if x.dtype.is_bool:
            raise OpTypeError(f"{name} takes a float or integer operand, operand 1 is {x}", 0)
        axes = attrs["axes"]
        check_axes(axes, x.rank, "axes")
        return x.with_shape([s for d, s in enumerate(x.shape) if d not in axes])

    return infer


for _name, _doc in REDUCE_DOCS.items():
    register(
        OpSpec(
            _name,
            "reduce",
            1,
            1,
            (AttrSpec("axes", kind_int_list),),
            _infer_reduce(_name),
            _doc + ". The reduced positions are visited in row-major order of the operand.",
            combiner=COMBINE[_name],
            int_legal=True,
        )
    )

REDUCTIONS = names_where(lambda s: s.combiner is not None, "Ops that fold with a combiner.")
"""The reductions (ops with a `combiner`), a live set of names."""


def combiner_of(name: str) -> Combiner:
    """The combiner kernel attribute value `name` (`add`, `max`, `min`) stands for."""
    for spec in REDUCTIONS.specs():
        if spec.combiner.op == name:
            return spec.combiner
    raise KeyError(name)


# --- scans (since gdv 0.6, issue 19) ---------------------------------------------------------

SCAN_STEP = {"cumsum": "add", "cumprod": "mul"}
"""Each scan's step: the elementwise op it folds with (so it rounds and wraps as that op)."""


def _infer_scan(name: str):
    def infer(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
        x = types[0]
        if x.dtype.is_bool:
            raise OpTypeError(f"{name} takes a float or integer operand, operand 1 is {x}", 0)
        check_axis(attrs["axis"], x.rank, "axis")
        return x

    return infer


for _name, _step in SCAN_STEP.items():
    register(
        OpSpec(
            _name,
            "reduce",
            1,
            1,
            (
                AttrSpec("axis", kind_int),
                AttrSpec("exclusive", kind_bool, required=False),
                AttrSpec("reverse", kind_bool, required=False),
            ),
            _infer_scan(_name),
            f"A running left fold with {_step} along `axis`, same type as x. Scan order: the "
            "positions of the axis in increasing index (decreasing with `reverse = true`). "
            "out[p] = acc over the positions up to p in scan order (before p with `exclusive = "
            f"true`): acc = x[first]; acc = {_step}(acc, x[next]) ...; an empty prefix (the "
            f"first position, exclusive) gives {0 if _step == 'add' else 1} "
            "(+0.0 for float sums). Each step rounds (or wraps) as one "
            f"{_step} in the dtype.",
            int_legal=True,
        )
    )

SCANS = names_where(lambda s: s.name in SCAN_STEP, "The running folds (cumsum, cumprod).")


# --- sorting (since gdv 0.6, issue 19) -------------------------------------------------------


def _infer_argsort(
    types: list[TensorType], attrs: dict[str, Any], written: TensorType
) -> TensorType:
    x = types[0]
    if x.dtype.is_bool:
        raise OpTypeError(f"argsort takes a float or integer operand, operand 1 is {x}", 0)
    check_axis(attrs["axis"], x.rank, "axis")
    return x.with_dtype(DType.I64)


register(
    OpSpec(
        "argsort",
        "reduce",
        1,
        1,
        (AttrSpec("axis", kind_int), AttrSpec("descending", kind_bool, required=False)),
        _infer_argsort,
        "The stable sorting permutation along `axis`, as i64 positions: out[..., j, ...] is "
        "the position p along the axis of the element that comes j-th when the positions are "
        "ordered by value (ascending; descending with `descending = true`), equal values by "
        "position (lower first). A NaN is above every number (last ascending, first "
        "descending) and NaNs are equal to each other; -0.0 and +0.0 are equal. So "
        "out[j] = the p with rank(p) = j, rank(p) = #{q : q comes before p}.",
        int_legal=True,
    )
)
