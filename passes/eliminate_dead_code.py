"""`eliminate-dead-code`: drop ops whose results no return depends on.

The obligation is local, in the same cut form as a rewrite's: the function is cut at its live
values. `src` takes every value a removed op reads and every returned value as an input,
computes the removed ops, and returns the returned values; `tgt` takes the same inputs, computes
nothing and returns the same. Proving the two equal shows that no return reads a removed op;
the rest is structural and checked here: the kept ops are the original ops, unchanged and in
order, and the pass manager verifies the result (so no kept op reads a removed value). A
whole-function query would instead grow exponentially with the depth of a deep network (every
residual connection doubles the index-symbolic term)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gdv.ir.core import Function, Module, Param
from gdv.ir.obligation import Obligation
from gdv.passes.base import Pass, PassResult, Step


def live_ops(fn: Function) -> Function:
    """`fn` without the ops that no returned value depends on."""
    needed = set(fn.returns)
    kept = []
    for op in reversed(fn.ops):
        if op.result in needed:
            kept.append(op)
            needed.update(op.operands)
    kept.reverse()
    return dataclasses.replace(fn, ops=kept)


@dataclass(frozen=True)
class EliminateDeadCode(Pass):
    name = "eliminate-dead-code"

    def run(self, module: Module) -> PassResult:
        functions, obligations, steps = [], [], []
        for fn in module.functions:
            new = live_ops(fn)
            functions.append(new)
            removed = len(fn.ops) - len(new.ops)
            if removed:
                obligations.append(self._obligation(fn, new, removed))
                kept = {id(op) for op in new.ops}
                dead = [op.result for op in fn.ops if id(op) not in kept]
                steps.append(Step("remove", fn.name, removed=dead))
        return PassResult(Module(functions, module.filename), obligations, bool(obligations), steps)

    def _obligation(self, fn: Function, new: Function, removed: int) -> Obligation:
        kept = {id(op) for op in new.ops}
        dead = [op for op in fn.ops if id(op) not in kept]
        # Structural side: the kept ops are the original ones, unchanged and in order.
        assert [op for op in fn.ops if id(op) in kept] == new.ops and new.returns == fn.returns
        types = fn.types()
        defined = {op.result for op in dead}
        inputs: list[str] = []
        for v in [*(o for op in dead for o in op.operands), *fn.returns]:
            if v not in defined and v not in inputs:
                inputs.append(v)
        params = [Param(v, types[v]) for v in inputs]
        results = [types[v] for v in fn.returns]
        src = Function("src", params, results, list(dead), list(fn.returns))
        tgt = Function("tgt", list(params), results, [], list(fn.returns))
        return Obligation(
            id=f"{self.name}/remove-unused/equivalence#{fn.name}",
            kind="equivalence",
            theory="fp",
            src=src,
            tgt=tgt,
            claim=f"the {removed} op(s) removed from @{fn.name} reach none of its returns "
            "(the function cut at its live values)",
            loc=dead[0].loc or fn.loc,
        )
