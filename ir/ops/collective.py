"""Collectives (docs/IR_SPEC.md section 7, "Meshes, shardings and collectives").

`all_reduce`, `all_gather`, `reduce_scatter`, `all_to_all`, `collective_permute`,
`carry_reduce` (the exact `carry` order: each member continues the previous member's fold) and
`shard_slice`: each acts over the group of ranks that `axes` names, in an SPMD function. The
type rules here check what the operand and attributes alone decide; the group size comes from
the function's mesh, so the exact extents are checked by `gdv.ir.mesh.check_spmd` (the
verifier's module-level part).
"""

from __future__ import annotations

from typing import Any

from gdv.ir.ops import (
    AttrSpec,
    OpSpec,
    OpTypeError,
    describe,
    kind_choice,
    kind_int,
    kind_int_list,
    names_where,
    register,
)
from gdv.ir.ops._rules import check_axes, check_axis
from gdv.ir.types import TensorType

ORDERS = ("rank", "tree", "ring")
COMBINERS = ("add", "max", "min")


def kind_axes(v: Any) -> list[str]:
    if not isinstance(v, list) or not v or not all(isinstance(a, str) for a in v):
        raise ValueError(f"expected a non-empty list of mesh axis names, got {describe(v)}")
    return v


def kind_pairs(v: Any) -> list[list[int]]:
    ok = isinstance(v, list) and all(
        isinstance(p, list)
        and len(p) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) for x in p)
        for p in v
    )
    if not ok:
        raise ValueError(
            f"expected a list of [source, destination] member pairs, got {describe(v)}"
        )
    srcs = [p[0] for p in v]
    dsts = [p[1] for p in v]
    if len(set(srcs)) != len(srcs) or len(set(dsts)) != len(dsts):
        raise ValueError("each member is a source at most once and a destination at most once")
    return v


def _same(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
    (x,) = types
    if "combiner" in attrs and x.dtype.is_bool:
        raise OpTypeError(f"a reduction needs a numeric operand, operand 1 is {x}", 0)
    return x


def _scaled(dims: dict[int, str]):
    """A type rule for a collective that scales dims by the group size: the written extent
    of each dim in `dims` must be a multiple ("grow") or a divisor ("shrink") of the operand's;
    every other dim is unchanged (the mesh-level check fixes the factor)."""

    def infer(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
        (x,) = types
        if "combiner" in attrs and x.dtype.is_bool:
            raise OpTypeError(f"a reduction needs a numeric operand, operand 1 is {x}", 0)
        shape = list(x.shape)
        for name in dims:
            check_axis(attrs[name], x.rank, name, name)
        if written.rank != x.rank:
            return x  # the verifier reports the rank mismatch against this
        for name, how in dims.items():
            d = attrs[name]
            a, b = x.shape[d], written.shape[d]
            if how == "grow" and (a == 0 or b % a == 0) and b >= a:
                shape[d] = b
            elif how == "shrink" and (b == 0 or a % b == 0) and a >= b:
                shape[d] = b
        if "split_dim" in dims and attrs["split_dim"] == attrs["concat_dim"]:
            shape[attrs["split_dim"]] = x.shape[attrs["split_dim"]]
        return x.with_shape(tuple(shape))

    return infer


_AXES = AttrSpec("axes", kind_axes)
_COMBINER = AttrSpec("combiner", kind_choice(*COMBINERS))
_ORDER = AttrSpec("order", kind_choice(*ORDERS))

register(
    OpSpec(
        "all_reduce",
        "collective",
        1,
        1,
        (_AXES, _COMBINER, _ORDER),
        _same,
        "every member of the group gets the fold of the members' operands with `combiner`, in "
        "the declared order (rank: left fold in member order; tree: pairwise halves; ring: "
        "chunk c folded from member c+1 round to member c)",
        int_legal=True,
    )
)
register(
    OpSpec(
        "all_gather",
        "collective",
        1,
        1,
        (_AXES, AttrSpec("dim", kind_int)),
        _scaled({"dim": "grow"}),
        "out = concat(dim, v_0, ..., v_{p-1}): the members' operands in member order",
        int_legal=True,
    )
)
register(
    OpSpec(
        "reduce_scatter",
        "collective",
        1,
        1,
        (_AXES, AttrSpec("dim", kind_int), _COMBINER, _ORDER),
        _scaled({"dim": "shrink"}),
        "member m gets block m (along dim) of all_reduce(x) with the same combiner and order",
        int_legal=True,
    )
)
register(
    OpSpec(
        "all_to_all",
        "collective",
        1,
        1,
        (_AXES, AttrSpec("split_dim", kind_int), AttrSpec("concat_dim", kind_int)),
        _scaled({"split_dim": "shrink", "concat_dim": "grow"}),
        "member m gets concat(concat_dim, block m of v_0, ..., block m of v_{p-1}), blocks cut "
        "along split_dim",
        int_legal=True,
    )
)
register(
    OpSpec(
        "collective_permute",
        "collective",
        1,
        1,
        (_AXES, AttrSpec("pairs", kind_pairs)),
        _same,
        "member dst gets member src's operand for each [src, dst]; members named by no pair "
        "as dst get zeros",
        int_legal=True,
    )
)

register(
    OpSpec(
        "shard_slice",
        "collective",
        1,
        1,
        (_AXES, AttrSpec("dim", kind_int)),
        _scaled({"dim": "shrink"}),
        "member m gets block m (along dim) of its own operand: a replicated value made sharded, "
        "with no communication",
        int_legal=True,
    )
)


def _carried(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
    """carry_reduce: a numeric operand; the result drops the folded `dims` (as a reduction's
    does); the members' blocks are joined along the outermost of them, `min(dims)`."""
    (x,) = types
    if x.dtype.is_bool:
        raise OpTypeError(f"a fold needs a numeric operand, operand 1 is {x}", 0)
    dims = attrs["dims"]
    if not dims:
        raise OpTypeError("dims lists no dim to fold", attr="dims")
    check_axes(dims, x.rank, "dims")
    return x.with_shape([s for d, s in enumerate(x.shape) if d not in dims])


register(
    OpSpec(
        "carry_reduce",
        "collective",
        1,
        1,
        (_AXES, AttrSpec("dims", kind_int_list), _COMBINER),
        _carried,
        "the exact `carry` order: every member gets the fold over `dims`, in row-major order, of "
        "the members' operands joined along min(dims) in member order, i.e. "
        "reduce(all_gather(x, dim = min(dims)), dims): member m continues member m-1's fold",
        int_legal=True,
    )
)

COLLECTIVES = names_where(lambda s: s.family == "collective", "the collective ops")
