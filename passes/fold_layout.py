"""`fold-layout`: fold and sink transpose, reshape and broadcast, so that layout changes cancel
or merge. All rules are bit-exact: layout ops only move elements."""

from __future__ import annotations

from dataclasses import dataclass

from gdv.ir import ops
from gdv.ir.core import Module
from gdv.passes.base import Pass, PassResult, Rewrite, Site, rewrite_module

ELEMENTWISE_UNARY = frozenset(
    s.name for s in ops.by_family("elementwise") if s.min_operands == s.max_operands == 1
) - {"convert"}
ELEMENTWISE_BINARY = frozenset(
    s.name
    for s in ops.by_family("elementwise")
    if s.min_operands == s.max_operands == 2 and not s.attr_names
)
"""Binary elementwise ops without attributes (`cmp`'s direction is left alone)."""


def _identity_layout(site: Site) -> Rewrite | None:
    """transpose by the identity, reshape or broadcast to the same type, full slice, zero pad,
    one-operand concat -> x."""
    op = site.op
    x = op.operands[0] if op.operands else None
    same = x is not None and site.types[x] == op.type
    if op.name == "transpose" and op.attrs["perm"] == sorted(op.attrs["perm"]):
        return Rewrite("transpose-identity", [], x, [op])
    if op.name in ("reshape", "broadcast", "slice", "pad", "concat") and same:
        if op.name == "broadcast" and op.attrs["dims"] != list(range(op.type.rank)):
            return None
        if op.name == "concat" and len(op.operands) != 1:
            return None
        return Rewrite(f"{op.name}-identity", [], x, [op])
    return None


def _transpose_transpose(site: Site) -> Rewrite | None:
    """transpose(transpose(x, p), q) -> transpose(x, p∘q)."""
    op, inner = site.op, site.producer(0) if site.op.name == "transpose" else None
    if inner is None or inner.name != "transpose":
        return None
    p, q = inner.attrs["perm"], op.attrs["perm"]
    perm = [p[i] for i in q]
    new = site.new_op("transpose", [inner.operands[0]], op.type, perm=perm)
    return Rewrite("transpose-transpose", [new], new.result, [inner, op])


def _reshape_reshape(site: Site) -> Rewrite | None:
    """reshape(reshape(x)) -> reshape(x): row-major order is kept by both."""
    op, inner = site.op, site.producer(0) if site.op.name == "reshape" else None
    if inner is None or inner.name != "reshape":
        return None
    new = site.new_op("reshape", [inner.operands[0]], op.type)
    return Rewrite("reshape-reshape", [new], new.result, [inner, op])


def _broadcast_broadcast(site: Site) -> Rewrite | None:
    """broadcast(broadcast(x, d1), d2) -> broadcast(x, d2∘d1)."""
    op, inner = site.op, site.producer(0) if site.op.name == "broadcast" else None
    if inner is None or inner.name != "broadcast":
        return None
    dims = [op.attrs["dims"][d] for d in inner.attrs["dims"]]
    new = site.new_op("broadcast", [inner.operands[0]], op.type, dims=dims)
    return Rewrite("broadcast-broadcast", [new], new.result, [inner, op])


def _sink_transpose(site: Site) -> Rewrite | None:
    """f(transpose(x, p)) -> transpose(f(x), p) for elementwise f (one operand, or two
    operands transposed alike), so transposes meet and cancel."""
    op = site.op
    if op.name not in ELEMENTWISE_UNARY | ELEMENTWISE_BINARY:
        return None
    producers = [site.producer(i) for i in range(len(op.operands))]
    if any(p is None or p.name != "transpose" for p in producers):
        return None
    perm = producers[0].attrs["perm"]
    if any(p.attrs["perm"] != perm for p in producers):
        return None
    inner_type = site.types[producers[0].operands[0]]
    inner_type = inner_type.with_dtype(op.type.dtype)
    f = site.new_op(op.name, [p.operands[0] for p in producers], inner_type, **op.attrs)
    t = site.new_op("transpose", [f.result], op.type, perm=perm)
    unique = list({p.result: p for p in producers}.values())
    return Rewrite(f"sink-transpose-{op.name}", [f, t], t.result, [*unique, op])


RULES = [
    _identity_layout,  # layout op that changes nothing -> x
    _transpose_transpose,  # transpose(transpose(x)) -> one transpose
    _reshape_reshape,  # reshape(reshape(x)) -> one reshape
    _broadcast_broadcast,  # broadcast(broadcast(x)) -> one broadcast
    _sink_transpose,  # f(transpose(x)) -> transpose(f(x))
]


@dataclass(frozen=True)
class FoldLayout(Pass):
    name = "fold-layout"
    stage_in = "core"

    def run(self, module: Module) -> PassResult:
        return rewrite_module(module, self.name, RULES)
