"""Composite ops (the `graph` stage only). Each means exactly the op sequence its `decompose`
builds (IR_SPEC.md section 4), so the decomposition pass is bit-exact by definition, and the
reference backend and the SMT semantics give composites their meaning through it."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gdv.ir.core import Op
from gdv.ir.ops import (
    AttrSpec,
    OpSpec,
    OpTypeError,
    kind_choice,
    kind_int,
    kind_int_list,
    kind_number,
    register,
)
from gdv.ir.ops._rules import check_axes, check_axis, check_literal, require_float
from gdv.ir.types import TensorType

Fresh = Callable[[str], str]


class _Builder:
    """Appends ops with fresh result names; `finish` gives the last op the composite's name."""

    def __init__(self, op: Op, fresh: Fresh) -> None:
        self.op = op
        self.fresh = fresh
        self.ops: list[Op] = []

    def emit(self, name: str, operands: list[str], type_: TensorType, **attrs: Any) -> str:
        result = self.fresh(f"{self.op.result}.{name}")
        loc = self.op.loc
        self.ops.append(Op(result, name, list(operands), dict(attrs), type_, loc))
        return result

    def const(self, value: Any, type_: TensorType) -> str:
        return self.emit("constant", [], type_, value=value)

    def finish(self) -> list[Op]:
        last = self.ops[-1]
        old = last.result
        last.result = self.op.result
        assert all(old not in o.operands for o in self.ops)
        return self.ops


def _kept(rank: int, axes: list[int]) -> list[int]:
    return [d for d in range(rank) if d not in axes]


def _reduced(t: TensorType, axes: list[int]) -> TensorType:
    return t.with_shape([t.shape[d] for d in _kept(t.rank, axes)])


# --- matmul -----------------------------------------------------------------------------------


def matmul_dot_attrs(rank: int) -> dict[str, Any]:
    batch = list(range(rank - 2))
    return {
        "lhs_batch": batch,
        "rhs_batch": batch,
        "lhs_contract": [rank - 1],
        "rhs_contract": [rank - 2],
    }


def _infer_matmul(
    types: list[TensorType], attrs: dict[str, Any], written: TensorType
) -> TensorType:
    a, b = types
    if a.rank < 2 or b.rank != a.rank:
        raise OpTypeError(
            f"matmul takes A[..., M, K] and B[..., K, N] of one rank >= 2; operand 1 is {a}, "
            f"operand 2 is {b}",
            1 if a.rank >= 2 else 0,
        )
    if a.dtype != b.dtype:
        raise OpTypeError(f"operand 2 is {b}, expected dtype {a.dtype} like operand 1 ({a})", 1)
    if a.dtype.is_bool:
        raise OpTypeError(f"matmul takes float or integer operands, operand 1 is {a}", 0)
    if a.shape[:-2] != b.shape[:-2]:
        raise OpTypeError(
            f"batch dims differ: operand 1 is {a}, operand 2 is {b} (no implicit broadcasting)", 1
        )
    if a.shape[-1] != b.shape[-2]:
        raise OpTypeError(
            f"operand 2 is {b}, expected K = {a.shape[-1]} in dim {b.rank - 2} like the last "
            f"dim of operand 1 ({a})",
            1,
        )
    dtype = written.dtype if a.dtype.is_float and written.dtype.is_float else a.dtype
    return TensorType(dtype, (*a.shape[:-1], b.shape[-1]))


def _decompose_matmul(op: Op, fresh: Fresh) -> list[Op]:
    b = _Builder(op, fresh)
    b.emit("dot", op.operands, op.type, **matmul_dot_attrs(len(op.type.shape)))
    return b.finish()


register(
    OpSpec(
        "matmul",
        "composite",
        2,
        2,
        (),
        _infer_matmul,
        "A[..., M, K] x B[..., K, N] -> [..., M, N]: `dot` contracting A's last dim with B's "
        "second-to-last, batching the leading dims (which must be equal).",
        stage="graph",
        decompose=_decompose_matmul,
        int_legal=True,
    )
)

# --- softmax, log_softmax ---------------------------------------------------------------------


def _infer_axis_float(name: str):
    def infer(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
        require_float(types[0], 0, name)
        check_axis(attrs["axis"], types[0].rank, "axis")
        return types[0]

    return infer


def _max_shift(b: _Builder, x: str, t: TensorType, axis: int) -> str:
    """x - broadcast(reduce_max(x)) along `axis`."""
    r = _reduced(t, [axis])
    m = b.emit("reduce_max", [x], r, axes=[axis])
    mb = b.emit("broadcast", [m], t, dims=_kept(t.rank, [axis]))
    return b.emit("sub", [x, mb], t)


def _decompose_softmax(op: Op, fresh: Fresh) -> list[Op]:
    b, t, axis = _Builder(op, fresh), op.type, op.attrs["axis"]
    e = b.emit("exp", [_max_shift(b, op.operands[0], t, axis)], t)
    s = b.emit("reduce_sum", [e], _reduced(t, [axis]), axes=[axis])
    sb = b.emit("broadcast", [s], t, dims=_kept(t.rank, [axis]))
    b.emit("div", [e, sb], t)
    return b.finish()


def _decompose_log_softmax(op: Op, fresh: Fresh) -> list[Op]:
    b, t, axis = _Builder(op, fresh), op.type, op.attrs["axis"]
    s = _max_shift(b, op.operands[0], t, axis)
    e = b.emit("exp", [s], t)
    r = b.emit("reduce_sum", [e], _reduced(t, [axis]), axes=[axis])
    lg = b.emit("log", [r], _reduced(t, [axis]))
    lb = b.emit("broadcast", [lg], t, dims=_kept(t.rank, [axis]))
    b.emit("sub", [s, lb], t)
    return b.finish()


register(
    OpSpec(
        "softmax",
        "composite",
        1,
        1,
        (AttrSpec("axis", kind_int),),
        _infer_axis_float("softmax"),
        "m = reduce_max(x); e = exp(x - m); e / reduce_sum(e), along `axis`",
        stage="graph",
        decompose=_decompose_softmax,
    )
)
register(
    OpSpec(
        "log_softmax",
        "composite",
        1,
        1,
        (AttrSpec("axis", kind_int),),
        _infer_axis_float("log_softmax"),
        "s = x - reduce_max(x); s - log(reduce_sum(exp(s))), along `axis`",
        stage="graph",
        decompose=_decompose_log_softmax,
    )
)

# --- layer_norm -------------------------------------------------------------------------------


def _infer_layer_norm(
    types: list[TensorType], attrs: dict[str, Any], written: TensorType
) -> TensorType:
    x, gamma, beta = types
    require_float(x, 0, "layer_norm")
    axes = attrs["axes"]
    check_axes(axes, x.rank, "axes", increasing=True)
    # eps becomes a constant in x's dtype when the op decomposes: it must be a literal of it.
    check_literal(attrs["eps"], x.dtype, "eps")
    norm = x.with_shape([x.shape[a] for a in axes])
    for i, t in ((1, gamma), (2, beta)):
        if t != norm:
            raise OpTypeError(
                f"operand {i + 1} is {t}, expected {norm}: the normalised dims {axes} of {x}", i
            )
    return x


def _decompose_layer_norm(op: Op, fresh: Fresh) -> list[Op]:
    b, t = _Builder(op, fresh), op.type
    x, gamma, beta = op.operands
    axes = op.attrs["axes"]
    kept = _kept(t.rank, axes)
    r = _reduced(t, axes)
    n = b.const(math.prod(t.shape[a] for a in axes), r)
    m = b.emit("div", [b.emit("reduce_sum", [x], r, axes=list(axes)), n], r)
    d = b.emit("sub", [x, b.emit("broadcast", [m], t, dims=kept)], t)
    dd = b.emit("mul", [d, d], t)
    v = b.emit("div", [b.emit("reduce_sum", [dd], r, axes=list(axes)), n], r)
    rs = b.emit("rsqrt", [b.emit("add", [v, b.const(op.attrs["eps"], r)], r)], r)
    dn = b.emit("mul", [d, b.emit("broadcast", [rs], t, dims=kept)], t)
    g = b.emit("mul", [dn, b.emit("broadcast", [gamma], t, dims=list(axes))], t)
    b.emit("add", [g, b.emit("broadcast", [beta], t, dims=list(axes))], t)
    return b.finish()


register(
    OpSpec(
        "layer_norm",
        "composite",
        3,
        3,
        (AttrSpec("axes", kind_int_list), AttrSpec("eps", kind_number)),
        _infer_layer_norm,
        "m = reduce_sum(x) / n; d = x - m; v = reduce_sum(d * d) / n; "
        "((d * rsqrt(v + eps)) * gamma) + beta, n the reduced element count (a constant in "
        "x's dtype), gamma and beta of the normalised dims' shape, broadcast along `axes`.",
        stage="graph",
        decompose=_decompose_layer_norm,
    )
)

# --- gelu -------------------------------------------------------------------------------------

SQRT1_2 = 0.7071067811865476
SQRT2_PI = 0.7978845608028654
GELU_CUBIC = 0.044715


def _decompose_gelu(op: Op, fresh: Fresh) -> list[Op]:
    b, t, x = _Builder(op, fresh), op.type, op.operands[0]
    half_x = b.emit("mul", [b.const(0.5, t), x], t)
    if op.attrs["approximate"] == "none":
        inner = b.emit("erf", [b.emit("mul", [x, b.const(SQRT1_2, t)], t)], t)
    else:
        cube = b.emit("mul", [b.emit("mul", [x, x], t), x], t)
        poly = b.emit("add", [x, b.emit("mul", [b.const(GELU_CUBIC, t), cube], t)], t)
        inner = b.emit("tanh", [b.emit("mul", [b.const(SQRT2_PI, t), poly], t)], t)
    b.emit("mul", [half_x, b.emit("add", [b.const(1.0, t), inner], t)], t)
    return b.finish()


def _infer_gelu(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
    require_float(types[0], 0, "gelu")
    return types[0]


register(
    OpSpec(
        "gelu",
        "composite",
        1,
        1,
        (AttrSpec("approximate", kind_choice("none", "tanh")),),
        _infer_gelu,
        '"none": (0.5 * x) * (1 + erf(x * 0.7071067811865476)); "tanh": (0.5 * x) * (1 + '
        "tanh(0.7978845608028654 * (x + 0.044715 * ((x * x) * x))))",
        stage="graph",
        decompose=_decompose_gelu,
    )
)
