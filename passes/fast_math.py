"""`fast-math`: rewrites that hold over the reals but not bit for bit (IR_SPEC.md section 5).
Each firing is a `real` claim; only `--fast-math` runs this pass."""

from __future__ import annotations

from dataclasses import dataclass

from gdv.ir.core import Module
from gdv.passes.base import Pass, PassResult, Rewrite, Site, rewrite_module
from gdv.passes.patterns import splat


def _is_zero(op) -> bool:
    lit = splat(op)
    return lit is not None and not isinstance(lit, bool) and float(lit) == 0.0


def _add_zero(site: Site) -> Rewrite | None:
    """x + 0.0 -> x, 0.0 + x -> x (not bit-exact: -0.0 + 0.0 is +0.0)."""
    op = site.op
    if op.name != "add" or not op.type.dtype.is_float:
        return None
    for const, keep in ((1, 0), (0, 1)):
        if _is_zero(site.producer(const)):
            return Rewrite("add-zero", [], op.operands[keep], [site.producer(const), op])
    return None


def _sub_self(site: Site) -> Rewrite | None:
    """x - x -> 0.0 (not bit-exact: inf - inf is NaN)."""
    op = site.op
    if op.name != "sub" or op.operands[0] != op.operands[1] or not op.type.dtype.is_float:
        return None
    zero = site.new_op("constant", [], op.type, value=0.0)
    return Rewrite("sub-self", [zero], zero.result, [op])


def _reassociate_constants(site: Site) -> Rewrite | None:
    """(x + c1) + c2 -> x + (c1 + c2), so the constants fold (reassociation)."""
    op = site.op
    if op.name != "add" or not op.type.dtype.is_float:
        return None
    inner, c2 = site.producer(0), site.producer(1)
    if inner is None or inner.name != "add" or splat(c2) is None:
        return None
    c1 = site.defs.get(inner.operands[1])
    if splat(c1) is None:
        return None
    cc = site.new_op("add", [c1.result, c2.result], op.type)
    new = site.new_op("add", [inner.operands[0], cc.result], op.type)
    return Rewrite("reassociate-constants", [cc, new], new.result, [c1, inner, c2, op])


RULES = [_add_zero, _sub_self, _reassociate_constants]


@dataclass(frozen=True)
class FastMath(Pass):
    name = "fast-math"

    def run(self, module: Module) -> PassResult:
        return rewrite_module(module, self.name, RULES, theory="real")
