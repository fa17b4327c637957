"""SMT meaning of the composite ops: exactly that of their decomposition (IR_SPEC.md 4).

`spec.decompose` gives the op sequence a composite means; its rules give the meaning, so a
composite and its decomposition are the same terms by construction.
"""

from __future__ import annotations

from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY, by_family
from gdv.validate.semantics.registry import Ctx, Tensor, apply, rule


@rule(*by_family("composite"))
def composite(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """Encode `spec.decompose(op)` with the operands bound to their names."""
    spec = REGISTRY[op.name]
    assert spec.decompose is not None
    env = dict(zip(op.operands, xs, strict=True))
    ops = spec.decompose(op, ctx.fresh)
    for sub in ops:
        env[sub.result] = apply(ctx, sub, [env[o] for o in sub.operands])
    return env[op.result]
