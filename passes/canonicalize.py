"""`canonicalize`: algebraic rewrites that are bit-exact under IEEE 754 (IR_SPEC.md section 5).

Each rule is proved once for all inputs in tests/passes/test_canonicalize.py, and each firing
emits its own local obligation. Rules that hold only over the reals live in `fast-math`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gdv.ir.core import Module
from gdv.ir.types import TensorType
from gdv.passes.base import Pass, PassResult, Rewrite, Site, rewrite_module
from gdv.passes.patterns import is_splat_of


def _binary_identity(op_name: str, side: int, value: float) -> object:
    """`op(x, c) -> x` (or `op(c, x)`) when the constant has exactly the bits of `value`."""

    def rule(site: Site) -> Rewrite | None:
        op = site.op
        if op.name != op_name:
            return None
        const, keep = (1, 0) if side == 1 else (0, 1)
        if not is_splat_of(site.producer(const), value, op.type.dtype):
            return None
        producer = site.producer(const)
        return Rewrite(f"{op_name}-identity", [], op.operands[keep], [producer, op])

    return rule


def _involution(name: str):
    """`f(f(x)) -> x`."""

    def rule(site: Site) -> Rewrite | None:
        inner = site.producer(0) if site.op.name == name else None
        if inner is None or inner.name != name:
            return None
        return Rewrite(f"{name}-{name}", [], inner.operands[0], [inner, site.op])

    return rule


def _abs_of_sign_op(site: Site) -> Rewrite | None:
    """`abs(neg(x)) -> abs(x)` and `abs(abs(x)) -> abs(x)`: abs clears the sign bit anyway."""
    inner = site.producer(0) if site.op.name == "abs" else None
    if inner is None or inner.name not in ("neg", "abs"):
        return None
    new = site.new_op("abs", [inner.operands[0]], site.op.type)
    return Rewrite(f"abs-{inner.name}", [new], new.result, [inner, site.op])


def _idempotent(site: Site) -> Rewrite | None:
    """`max(x, x) -> x`, `min(x, x) -> x`, `select(c, x, x) -> x`."""
    op = site.op
    if op.name in ("max", "min") and op.operands[0] == op.operands[1]:
        return Rewrite(f"{op.name}-same", [], op.operands[0], [op])
    if op.name == "select" and op.operands[1] == op.operands[2]:
        return Rewrite("select-same", [], op.operands[1], [op])
    return None


def _convert_same(site: Site) -> Rewrite | None:
    """`convert(x) : T -> x` when x is already T."""
    op = site.op
    if op.name == "convert" and site.type_of(0) == op.type:
        return Rewrite("convert-same-type", [], op.operands[0], [op])
    return None


def _merge_reduced_axes(site: Site) -> Rewrite | None:
    """`reduce_*(x) {axes}` with adjacent axes both reduced (a global pool's H and W) ->
    `reduce_*(reshape(x))` over one axis per run of adjacent axes. Row-major order over the
    run's positions is the order of the merged axis, so every output folds the same values in
    the same order (IR_SPEC section 3), bit for bit; the reshape is a view. One reduced axis
    is what the loop stage folds along memory in vector lanes (and `-O3` in `lanes`)."""
    op = site.op
    if op.name not in ("reduce_sum", "reduce_max", "reduce_min"):
        return None
    axes = sorted(op.attrs["axes"])
    if not any(b == a + 1 for a, b in zip(axes, axes[1:], strict=False)):
        return None
    shape = site.type_of(0).shape
    merged: list[int] = []  # the reshaped operand's dims
    new_axes: list[int] = []
    for d, size in enumerate(shape):
        if d in axes and d - 1 in axes:
            merged[-1] *= size
            continue
        if d in axes:
            new_axes.append(len(merged))
        merged.append(size)
    flat = site.new_op(
        "reshape", [op.operands[0]], TensorType(site.type_of(0).dtype, tuple(merged))
    )
    new = site.new_op(op.name, [flat.result], op.type, axes=new_axes)
    return Rewrite("merge-reduced-axes", [flat, new], new.result, [op])


RULES = [
    _binary_identity("mul", 1, 1.0),  # x * 1.0 -> x (NaN stays NaN, -0.0 stays -0.0)
    _binary_identity("mul", 0, 1.0),  # 1.0 * x -> x
    _binary_identity("div", 1, 1.0),  # x / 1.0 -> x
    _binary_identity("add", 1, -0.0),  # x + -0.0 -> x (+0 + -0 = +0, -0 + -0 = -0)
    _binary_identity("add", 0, -0.0),  # -0.0 + x -> x
    _binary_identity("sub", 1, 0.0),  # x - 0.0 -> x (-0 - +0 = -0)
    _involution("neg"),  # neg(neg(x)) -> x
    _abs_of_sign_op,  # abs(neg(x)), abs(abs(x)) -> abs(x)
    _idempotent,  # max(x, x), min(x, x), select(c, x, x) -> x
    _convert_same,  # convert(x) : typeof(x) -> x
    _merge_reduced_axes,  # reduce over adjacent axes -> reduce over one axis of a reshape
]


@dataclass(frozen=True)
class Canonicalize(Pass):
    name = "canonicalize"

    def run(self, module: Module) -> PassResult:
        return rewrite_module(module, self.name, RULES)
