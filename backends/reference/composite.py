"""Kernels of the composite family: each runs the op sequence its spec's `decompose` builds.

A composite means exactly its decomposition (IR_SPEC.md section 4), so none gets a kernel of
its own, which could drift from what the decomposition pass produces. The decomposition was
type-checked with the program's types before evaluation started (`evaluate.check_ops`)."""

from __future__ import annotations

import numpy as np

from gdv.backends.reference.evaluate import decompose, evaluate_ops
from gdv.backends.reference.registry import Context, kernel
from gdv.ir.core import Op
from gdv.ir.ops import by_family


def _run_decomposition(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    env = dict(zip(op.operands, args, strict=True))
    return evaluate_ops(decompose(op), env, ctx, keep=[op.result])[op.result]


for _spec in by_family("composite"):
    kernel(_spec)(_run_decomposition)
