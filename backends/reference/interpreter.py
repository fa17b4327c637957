"""Running functions and single ops on concrete values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gdv.backends.reference.evaluate import check_decomposition, check_ops, evaluate_ops
from gdv.backends.reference.memory import check_memory
from gdv.backends.reference.registry import Context
from gdv.ir.core import Function, Module, Op
from gdv.ir.diagnostics import IRError
from gdv.ir.dtypes import from_numpy
from gdv.ir.ops import OpTypeError
from gdv.ir.ops import get as get_spec
from gdv.ir.ops.control import bodies_called
from gdv.ir.ops.kernel import kernel_bodies
from gdv.ir.types import TensorType
from gdv.ir.verifier import verify, verify_function


def entry_function(program: Module | Function) -> Function:
    """`program` itself, or a module's entry function (`@main`, or the only function)."""
    if isinstance(program, Function):
        return program
    entry = program.entry
    if entry is None:
        names = ", ".join(f"@{f.name}" for f in program.functions) or "none"
        raise IRError(
            f"module has no entry function: neither @main nor a single function "
            f"(functions: {names})"
        )
    return entry


def check_function(function: Function, filename: str = "<input>") -> None:
    """Verify `function` (graph stage: composites allowed) and each composite's decomposition;
    raise the first IRError."""
    verify_function(function, "graph", filename)
    types = function.types()
    for op in function.ops:
        check_decomposition(op, [types[name] for name in op.operands])


def _describe(x: np.ndarray) -> str:
    dtype = from_numpy(x.dtype)
    name = str(dtype) if dtype is not None else f"numpy {x.dtype}"
    return f"{name}[{','.join(str(d) for d in x.shape)}]"


def check_inputs(
    function: Function, inputs: Mapping[str, Any], ctx: Context
) -> dict[str, np.ndarray]:
    """Each parameter's input, checked against its type and held in its storage dtype
    (widened to f64 for floats in ideal mode)."""
    if not isinstance(inputs, Mapping):
        raise IRError(f"inputs must map parameter names to arrays, got {type(inputs).__name__}")
    names = {p.name for p in function.params}
    for key in inputs:
        if key not in names:
            hint = " (keys are parameter names without %)" if str(key).startswith("%") else ""
            params = ", ".join(f"%{p.name}" for p in function.params) or "none"
            raise IRError(
                f"input {key!r} is not a parameter of @{function.name} (parameters: {params})"
                f"{hint}",
                function.loc,
            )
    env: dict[str, np.ndarray] = {}
    for p in function.params:
        if p.name not in inputs:
            raise IRError(f"missing input for parameter %{p.name}: {p.type}", p.loc)
        value = inputs[p.name]
        if not isinstance(value, np.ndarray | np.generic):
            raise IRError(
                f"input %{p.name} must be a numpy array, got {type(value).__name__} "
                f"(parameter %{p.name}: {p.type})",
                p.loc,
            )
        x = np.asarray(value)
        if from_numpy(x.dtype) is not p.type.dtype or x.shape != p.type.shape:
            raise IRError(
                f"input %{p.name} is {_describe(x)}, expected {p.type} (parameter %{p.name})",
                p.loc,
            )
        storage = ctx.storage(p.type.dtype).np
        # Widening is exact; the copy also keeps the caller's array out of our hands.
        env[p.name] = x.astype(storage, copy=True)
    return env


def run(
    program: Module | Function, inputs: Mapping[str, np.ndarray], *, mode: str = "exact"
) -> list[np.ndarray]:
    """Execute `program` (a function, or a module's entry function) on `inputs` (arrays keyed
    by parameter name without `%`), bit-exact to IR_SPEC.md.

    mode `exact`: results in the program's dtypes. mode `ideal`: every float dtype replaced by
    f64 (see `Context`), results of float type as f64 arrays.
    Raises IRError for an ill-typed program, a program that would not fit in memory (before
    allocating anything), and a missing, unknown or mistyped input."""
    ctx = Context(mode)
    function = entry_function(program)
    own = getattr(function, "run_reference", None)
    if own is not None:  # a derived function with its own meaning (gdv.validate.spmd)
        return own(inputs, mode=mode)
    check_function(function, program.filename if isinstance(program, Module) else "<input>")
    if isinstance(program, Module) and bodies_called(program.functions):
        # Control ops call other functions: the module as a whole is checked (their types,
        # no recursion), and each function as `check_function` checks the entry.
        verify(program)
        for fn in program.functions:
            check_function(fn, program.filename)
    check_memory(function, mode=mode)
    env = check_inputs(function, inputs, ctx)
    # A module's other functions are the bodies its kernels name.
    bodies = program.functions if isinstance(program, Module) else []
    with kernel_bodies(bodies):
        values = evaluate_ops(function.ops, env, ctx, keep=function.returns)
    # Copies: a returned parameter or a view must not alias the caller's or another output.
    return [np.array(values[name], copy=True) for name in function.returns]


def apply(
    name: str,
    args: Sequence[np.ndarray],
    attrs: Mapping[str, Any] | None = None,
    type: TensorType | None = None,
    *,
    mode: str = "exact",
) -> np.ndarray:
    """Evaluate one op, `name(args) {attrs} : type`, on concrete values in their program dtypes.

    `type` may be left out when the operands and attributes determine it (not for convert,
    reshape, broadcast, constant, iota, or a dot with another float result dtype)."""
    ctx = Context(mode)
    arrays = [np.asarray(a) for a in args]
    operand_types = []
    for i, a in enumerate(arrays):
        dtype = from_numpy(a.dtype)
        if dtype is None:
            raise IRError(f"operand {i + 1} has numpy dtype {a.dtype}, which is no IR dtype")
        operand_types.append(TensorType(dtype, a.shape))
    attrs = dict(attrs or {})
    if type is None:
        spec = get_spec(name)
        if spec is None:
            raise IRError(f"unknown op {name!r}")
        if not operand_types:
            raise IRError(f"{name} has no operands: give its result type")
        try:
            type = spec.infer(operand_types, attrs, operand_types[0])
        except (OpTypeError, KeyError) as e:
            raise IRError(f"{name}: cannot infer the result type ({e})") from None
    operands = [f"arg{i}" for i in range(len(arrays))]
    op = Op("result", name, operands, attrs, type)
    check_ops([op], dict(zip(operands, operand_types, strict=True)))
    env = {
        n: a.astype(ctx.storage(t.dtype).np, copy=False)
        for n, a, t in zip(operands, arrays, operand_types, strict=True)
    }
    return evaluate_ops([op], env, ctx, keep=["result"])["result"]
