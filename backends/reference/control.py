"""Kernels of the control flow ops (IR_SPEC.md section 9): each evaluates the functions it names
(in scope through `kernel_bodies`, as a kernel's body is) with the op sequence evaluator, so a
body means exactly what it means as a function.

Each op of a group (same operands and functions, another `result`) evaluates the loop again:
the reference favours plainness over speed.
"""

from __future__ import annotations

import numpy as np

from gdv.backends.reference.registry import Context, kernel
from gdv.ir.core import Function, Op
from gdv.ir.ops.control import IF, SCAN, WHILE, function_of


def call(fn: Function, args: list[np.ndarray], ctx: Context) -> list[np.ndarray]:
    """The results of function `fn` on `args` (values in their storage dtypes)."""
    from gdv.backends.reference.evaluate import evaluate_ops

    env = {p.name: a for p, a in zip(fn.params, args, strict=True)}
    values = evaluate_ops(fn.ops, env, ctx, keep=fn.returns)
    return [values[name] for name in fn.returns]


@kernel(IF)
def _if(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    branch = function_of(op, "then" if bool(args[0]) else "else")
    return np.array(call(branch, args[1:], ctx)[op.attrs["result"]], copy=True)


@kernel(WHILE)
def _while(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    cond, body = function_of(op, "cond"), function_of(op, "body")
    values, trips = list(args), 0
    while trips < op.attrs["max_trips"] and bool(call(cond, values, ctx)[0]):
        values = call(body, values, ctx)
        trips += 1
    return np.array(values[op.attrs["result"]], copy=True)


@kernel(SCAN)
def _scan(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    body = function_of(op, "body")
    ns = len(args) - op.attrs["num_scan_inputs"]
    states, xs = list(args[:ns]), args[ns:]
    k = op.attrs["result"]
    ys: list[np.ndarray] = []
    for t in range(xs[0].shape[0]):
        out = call(body, states + [x[t] for x in xs], ctx)
        states = out[:ns]
        if k >= ns:
            ys.append(out[k])
    if k < ns:
        return np.array(states[k], copy=True)
    if not ys:
        return np.zeros(op.type.shape, ctx.storage(op.type.dtype).np)
    return np.stack(ys)
