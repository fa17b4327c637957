"""Proving that an SPMD function implements an ordinary one (docs/IR_SPEC.md section 7).

`check_spmd_equivalence(F, P)` compares, for all global inputs, every rank's result block of
SPMD function P with ordinary function F's result at the same global positions. Both sides
become functions of the global inputs with *stacked* results, `[*mesh.shape, *local shape]`:

- the global side is F followed by the index map that cuts each result into the ranks' blocks
  (a replicated rank reads the same block);
- the SPMD side is P on every rank: each parameter's stacked value reads the global input at
  the rank's block, an op other than a collective acts on each rank's slice of its operands'
  stacked values, a collective reads across ranks (`validate/semantics/collective.py`).

The rank coordinates are index terms like any other, so the claim is one query per result,
symbolic in the rank: a 64-way plan costs what a 2-way plan costs. The pair then goes through
the same engine as any `gdv tv` claim (`equivalence._check`): seeded and special inputs
replayed first, abstract and precise queries, every candidate counterexample replayed on the
reference backend (F on the global inputs against the simulation of every rank,
`backends/reference/spmd.py`), `unknown` never proved.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from gdv.backends.reference.spmd import global_function, run_spmd, spmd_mesh
from gdv.ir.core import Function, Module
from gdv.ir.diagnostics import IRError, Loc
from gdv.ir.mesh import Mesh, block_offsets, out_shardings, param_sharding
from gdv.ir.ops.collective import COLLECTIVES
from gdv.ir.types import TensorType
from gdv.validate.semantics.collective import Group
from gdv.validate.semantics.registry import Ctx, Index, Tensor, apply


def stacked(t: TensorType, mesh: Mesh) -> TensorType:
    return t.with_shape(mesh.shape + t.shape)


@dataclasses.dataclass(eq=False)
class StackedView(Function):
    """A function of the global inputs whose results are stacked per rank. `side` is
    "global" (ordinary function `inner` of `module`, its results cut into blocks) or "spmd"
    (SPMD function `inner` of `module` on every rank). `gdv.validate.encode.encode` and
    `gdv.backends.reference.run` ask the view for its meaning (`encode_smt`,
    `run_reference`)."""

    inner: Function | None = None
    module: Module | None = None
    mesh: Mesh | None = None
    spmd: Function | None = None
    side: str = "global"

    def encode_smt(self, ctx: Ctx, inputs: list[Tensor]) -> list[Tensor]:
        from gdv.validate.encode import encode

        mesh, spmd = self.mesh, self.spmd
        assert mesh is not None and spmd is not None and self.inner is not None
        if self.side == "global":
            outs = encode(ctx, self.inner, inputs)
            return [
                _blocks_of(out, t, s, mesh)
                for out, t, s in zip(outs, spmd.results, out_shardings(spmd), strict=True)
            ]
        return encode_spmd(ctx, spmd, mesh, inputs)

    def run_reference(self, inputs: Mapping[str, np.ndarray], mode: str = "exact") -> list:
        from gdv.backends import reference

        mesh, spmd = self.mesh, self.spmd
        assert mesh is not None and spmd is not None and self.module is not None
        if self.side == "global":
            outs = reference.run(self.module, inputs, mode=mode)
            return [
                _stack_blocks(out, t, s, mesh)
                for out, t, s in zip(outs, spmd.results, out_shardings(spmd), strict=True)
            ]
        sim = run_spmd(self.module, inputs, mode=mode)
        return [
            np.stack([per[k] for per in sim.per_rank]).reshape(mesh.shape + t.shape)
            for k, t in enumerate(spmd.results)
        ]


def _blocks_of(out: Tensor, local: TensorType, sharding, mesh: Mesh) -> Tensor:
    """out's blocks, stacked: at (r, i) the global element at r's block offset plus i."""
    k = len(mesh.shape)

    def at(i: Index):
        r, j = i[:k], i[k:]
        g = tuple(
            Group(mesh, axes).member(r) * n + jd
            for jd, n, axes in zip(j, local.shape, sharding, strict=True)
        )
        return (yield out.read(g))

    return Tensor(stacked(local, mesh), at)


def _stack_blocks(out: np.ndarray, local: TensorType, sharding, mesh: Mesh) -> np.ndarray:
    blocks = []
    for coords in mesh.ranks():
        off = block_offsets(local, sharding, mesh, coords)
        blocks.append(out[tuple(slice(o, o + n) for o, n in zip(off, local.shape, strict=True))])
    return np.stack(blocks).reshape(mesh.shape + local.shape)


def encode_spmd(ctx: Ctx, fn: Function, mesh: Mesh, inputs: list[Tensor]) -> list[Tensor]:
    """The stacked results of SPMD function `fn`, given the global input tensors."""
    k = len(mesh.shape)
    env: dict[str, Tensor] = {}
    for p, x in zip(fn.params, inputs, strict=True):
        env[p.name] = _blocks_of(x, p.type, param_sharding(p.attrs, p.type.rank), mesh)
    outer = ctx.mesh
    ctx.mesh = mesh
    try:
        for op in fn.ops:
            operands = [env[o] for o in op.operands]
            if op.name in COLLECTIVES:
                env[op.result] = apply(ctx, op, operands)
            else:
                env[op.result] = _lifted(ctx, op, operands, mesh, k)
    finally:
        ctx.mesh = outer
    return [env[r] for r in fn.returns]


def _lifted(ctx: Ctx, op, operands: list[Tensor], mesh: Mesh, k: int) -> Tensor:
    """A local op on every rank: at (r, i), the op's own rule applied to each operand's
    slice at rank r, read at i (one encoding of the op per distinct rank term)."""
    per_rank: dict[tuple, Tensor] = {}

    def view(x: Tensor, r: Index) -> Tensor:
        local = x.type.with_shape(x.shape[k:])
        return Tensor(local, lambda i: (yield x.read(r + i)))

    def at(i: Index):
        r, j = i[:k], i[k:]
        key = tuple(c.key for c in r)
        entry = per_rank.get(key)
        if entry is None:
            t = apply(ctx, op, [view(x, r) for x in operands])
            entry = (r, t)  # r kept alive with its key (see registry._key)
            per_rank[key] = entry
        return (yield entry[1].read(j))

    return Tensor(stacked(op.type, mesh), at)


def spmd_pair(a: Module, b: Module) -> tuple[StackedView, StackedView]:
    """The two stacked views of "SPMD module `b` implements ordinary module `a`"; an input
    error when their global signatures differ."""
    fa, fb = a.entry, b.entry
    if fa is None or fb is None:
        raise IRError("both modules need an entry function", Loc(b.filename, 1, 1))
    if a.meshes and fa.attrs.get("mesh") is not None:
        raise IRError(
            "the first program must be an ordinary (global) function: an SPMD function is "
            "compared against the function it implements",
            fa.loc or Loc(a.filename, 1, 1),
        )
    mesh = spmd_mesh(b, fb)
    g = global_function(b, fb)
    where = fb.loc or Loc(b.filename, 1, 1)
    if len(g.params) != len(fa.params):
        raise IRError(
            f"signature mismatch: @{fb.name} has {len(g.params)} parameter(s), @{fa.name} has "
            f"{len(fa.params)}",
            where,
        )
    for pa, pb in zip(fa.params, g.params, strict=True):
        if pa.type != pb.type:
            raise IRError(
                f"signature mismatch: %{pb.name}'s global type is {pb.type} (its local type "
                f"and sharding), expected {pa.type} like %{pa.name}",
                pb.loc or where,
            )
    if list(fa.results) != list(g.results):
        shown = ", ".join(map(str, g.results))
        raise IRError(
            f"signature mismatch: @{fb.name}'s global results are ({shown}), expected "
            f"({', '.join(map(str, fa.results))})",
            where,
        )
    results = [stacked(t, mesh) for t in fb.results]

    def view(side: str, inner: Function, module: Module) -> StackedView:
        return StackedView(
            name=f"{inner.name}.{side}",
            params=list(fa.params),
            results=results,
            ops=list(inner.ops),
            returns=[],
            loc=inner.loc,
            inner=inner,
            module=module,
            mesh=mesh,
            spmd=fb,
            side=side,
        )

    return view("global", fa, a), view("spmd", fb, b)


def check_spmd_equivalence(a: Module, b: Module, theory: str = "fp", timeout: float = 10.0):
    """Does SPMD module `b` implement ordinary module `a` (per rank and position)?"""
    from gdv.ir.ops.kernel import kernel_bodies
    from gdv.validate.equivalence import _bodies, _check

    va, vb = spmd_pair(a, b)
    with kernel_bodies(_bodies(a, b, (a.filename, b.filename))):
        return _check(va, vb, theory, timeout)


def claim_queries(a: Module, b: Module, theory: str = "fp") -> list[str]:
    """The precise query of each output of the claim "SPMD module `b` implements `a`" as
    stable SMT-LIB 2 text (`unsat` proves it): what a partition bundle stores and its checker
    re-encodes."""
    from gdv.ir.ops.kernel import kernel_bodies
    from gdv.validate.discharge import _query_text
    from gdv.validate.equivalence import _bodies

    va, vb = spmd_pair(a, b)
    with kernel_bodies(_bodies(a, b, (a.filename, b.filename))):
        return [_query_text(va, vb, theory, o) for o in range(len(va.results))]


def is_spmd(module: Module) -> bool:
    fn = module.entry
    return fn is not None and fn.attrs.get("mesh") is not None


__all__ = [
    "StackedView",
    "check_spmd_equivalence",
    "claim_queries",
    "encode_spmd",
    "is_spmd",
    "spmd_pair",
]
