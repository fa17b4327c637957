"""Encode a function's outputs as index-symbolic tensors over given input tensors."""

from __future__ import annotations

import numpy as np
import z3

from gdv.ir.core import Function
from gdv.ir.types import TensorType
from gdv.validate.semantics.registry import Ctx, Index, Tensor, apply
from gdv.validate.semantics.values import Values


def input_function(values: Values, name: str, type_: TensorType) -> z3.FuncDeclRef:
    """The uninterpreted function `X(i, j, ...)` standing for input `name` (a constant when
    the input is a scalar)."""
    sorts = [z3.IntSort()] * type_.rank
    return z3.Function(f"in.{name}", *sorts, values.sort(type_.dtype))


def input_tensor(values: Values, name: str, type_: TensorType) -> Tensor:
    """A symbolic input: every element is `X(i, j, ...)`."""
    f = input_function(values, name, type_)
    return Tensor(type_, lambda i: f(*(k.to_z3() for k in i)))


def concrete_tensor(values: Values, array: np.ndarray, type_: TensorType) -> Tensor:
    """A concrete input, read at concrete indices only (for evaluating the semantics)."""
    array = np.asarray(array, dtype=type_.dtype.np)

    def at(i: Index) -> z3.ExprRef:
        assert all(k.is_const for k in i), "concrete tensors are read at concrete indices"
        pos = tuple(k.const for k in i)
        if not all(0 <= p < n for p, n in zip(pos, type_.shape, strict=True)):
            # Read only under a false guard (pad, concat); input functions are total too.
            return values.zero(type_.dtype)
        return values.scalar(array[pos], type_.dtype)

    return Tensor(type_, at)


def encode(ctx: Ctx, fn: Function, inputs: list[Tensor]) -> list[Tensor]:
    """The tensors `fn` returns, given tensors for its parameters."""
    own = getattr(fn, "encode_smt", None)
    if own is not None:  # a derived function with its own meaning (gdv.validate.spmd)
        return own(ctx, inputs)
    env: dict[str, Tensor] = {p.name: t for p, t in zip(fn.params, inputs, strict=True)}
    for op in fn.ops:
        env[op.result] = apply(ctx, op, [env[o] for o in op.operands])
    return [env[r] for r in fn.returns]
