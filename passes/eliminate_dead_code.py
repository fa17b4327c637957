"""`eliminate-dead-code`: drop ops whose results no return depends on."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gdv.ir.core import Function, Module
from gdv.ir.obligation import Obligation
from gdv.passes.base import Pass, PassResult


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
        functions, obligations = [], []
        for fn in module.functions:
            new = live_ops(fn)
            functions.append(new)
            removed = len(fn.ops) - len(new.ops)
            if removed:
                # Whole-function fallback: the outputs did not change.
                obligations.append(
                    Obligation(
                        id=f"{self.name}/remove-unused/equivalence#{fn.name}",
                        kind="equivalence",
                        theory="fp",
                        src=fn,
                        tgt=new,
                        claim=f"removing {removed} unused op(s) from @{fn.name} keeps its outputs",
                        loc=fn.loc,
                    )
                )
        return PassResult(Module(functions, module.filename), obligations, bool(obligations))
