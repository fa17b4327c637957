"""`decompose-composites`: each composite op becomes the op sequence that defines it
(IR_SPEC.md section 4), so the module reaches the `core` stage. Bit-exact by definition; each
expansion is still proved."""

from __future__ import annotations

from dataclasses import dataclass

from gdv.ir import ops
from gdv.ir.core import Module
from gdv.passes.base import Pass, PassResult, Rewrite, Site, rewrite_module


def _expand(site: Site) -> Rewrite | None:
    spec = ops.get(site.op.name)
    if spec is None or not spec.is_composite:
        return None
    given: list[str] = []

    def fresh(hint: str) -> str:
        given.append(site.names.fresh(hint))
        return given[-1]

    expansion = spec.decompose(site.op, fresh)
    last = expansion[-1]
    last.result = given[-1]  # decompose named it after the composite; give it its own name
    return Rewrite(f"expand-{spec.name}", expansion, last.result, [site.op])


@dataclass(frozen=True)
class DecomposeComposites(Pass):
    name = "decompose-composites"

    def run(self, module: Module) -> PassResult:
        return rewrite_module(module, self.name, [_expand])
