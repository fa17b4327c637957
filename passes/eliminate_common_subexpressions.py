"""`eliminate-common-subexpressions`: an op equal to an earlier one (same op, operands,
attributes and type) is replaced by the earlier one's result. Every op is deterministic
(IR_SPEC.md section 3), so this holds bit for bit; each merge is proved locally."""

from __future__ import annotations

from dataclasses import dataclass

from gdv.ir.core import Module, Op, attrs_key
from gdv.passes.base import Pass, PassResult, Rewrite, Site, rewrite_module


def _key(function: str, op: Op) -> tuple:
    return (
        function,
        op.name,
        tuple(op.operands),
        attrs_key(dict(sorted(op.attrs.items()))),
        op.type,
    )


@dataclass(frozen=True)
class EliminateCommonSubexpressions(Pass):
    name = "eliminate-common-subexpressions"

    def run(self, module: Module) -> PassResult:
        seen: dict[tuple, Op] = {}

        def merge(site: Site) -> Rewrite | None:
            key = _key(site.function, site.op)
            first = seen.get(key)
            if first is None:
                seen[key] = site.op
                return None
            # The obligation recomputes the earlier op on the target side: the op itself, as
            # it stands in the function, so the certificate's checker finds it there.
            witness = Op(
                first.result,
                first.name,
                list(first.operands),
                dict(first.attrs),
                first.type,
                first.loc,
            )
            return Rewrite("merge-equal-ops", [], first.result, [site.op], witness=[witness])

        result = rewrite_module(module, self.name, [merge])
        seen.clear()
        return result
