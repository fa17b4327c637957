"""Kernels of the control flow ops (IR_SPEC.md section 9): each evaluates the functions it names
(in scope through `kernel_bodies`, as a kernel's body is) with the op sequence evaluator, so a
body means exactly what it means as a function.

The ops of a group (same operands and functions, another `result`) denote one evaluation: the
last few groups' results are kept (`_GROUPS`), keyed by the op's functions and attributes other
than `result`, the mode, and the operand arrays themselves (held, so their identities stay
theirs; kernels never modify their operands), and a later member of a group reads its result
there instead of running the loop again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from gdv.backends.reference.registry import Context, kernel
from gdv.ir.core import Function, Op, attr_key
from gdv.ir.ops.control import IF, SCAN, WHILE, function_of

GROUPS_KEPT = 4
"""How many groups' results are kept."""
_GROUPS: OrderedDict[tuple, tuple[list, list[np.ndarray]]] = OrderedDict()
_LOCK = threading.Lock()


def _group(
    op: Op, fns: list[Function], args: list[np.ndarray], ctx: Context, run: Callable
) -> list[np.ndarray]:
    """All the results of `op`'s group: the kept ones when the group ran on the very same
    function objects and arrays (held by the entry, so no other object can take their
    identities), else `run()`'s."""
    attrs = tuple((k, attr_key(v)) for k, v in sorted(op.attrs.items()) if k != "result")
    held = [*fns, *args]
    key = (op.name, attrs, ctx.mode, tuple(id(x) for x in held))
    with _LOCK:
        hit = _GROUPS.get(key)
        if hit is not None and all(x is y for x, y in zip(hit[0], held, strict=True)):
            _GROUPS.move_to_end(key)
            return hit[1]
    results = run()
    with _LOCK:
        _GROUPS[key] = (held, results)
        while len(_GROUPS) > GROUPS_KEPT:
            _GROUPS.popitem(last=False)
    return results


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

    def run() -> list[np.ndarray]:
        values, trips = list(args), 0
        while trips < op.attrs["max_trips"] and bool(call(cond, values, ctx)[0]):
            values = call(body, values, ctx)
            trips += 1
        return values

    return np.array(_group(op, [cond, body], args, ctx, run)[op.attrs["result"]], copy=True)


@kernel(SCAN)
def _scan(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    body = function_of(op, "body")
    ns = len(args) - op.attrs["num_scan_inputs"]
    n_out = len(body.results) - ns

    def run() -> list[np.ndarray]:
        states, xs = list(args[:ns]), args[ns:]
        ys: list[list[np.ndarray]] = [[] for _ in range(n_out)]
        for t in range(xs[0].shape[0]):
            out = call(body, states + [x[t] for x in xs], ctx)
            states = out[:ns]
            for j in range(n_out):
                ys[j].append(out[ns + j])
        stacked = []
        for j, y in enumerate(ys):
            t = body.results[ns + j]
            shape = (xs[0].shape[0], *t.shape)
            stacked.append(np.stack(y) if y else np.zeros(shape, ctx.storage(t.dtype).np))
        return states + stacked

    return np.array(_group(op, [body], args, ctx, run)[op.attrs["result"]], copy=True)
