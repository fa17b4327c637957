"""SMT meaning of the collectives (docs/IR_SPEC.md section 7), on stacked tensors.

While an SPMD function is encoded (`gdv.validate.spmd`), a value is one tensor over
`(rank coordinates..., local index...)`: the rank is as symbolic as the index, so a claim about
a 64-way group costs about what a 2-way one does. A group member is named by its index m over
the collective's `axes`; its coordinates are the rank's with those axes replaced by m's digits
(`Idx` div/mod, so m may be symbolic: `i // n` in `all_gather`, `(c + j) mod p` in a ring).

Orders: `rank` is the left fold in member order, the same `Ctx.fold` a reduction uses (unrolled
up to `SMALL_FOLD` members in `fp`, an uninterpreted fold beyond). `tree` and `ring` are
unrolled in `fp` in their own order; under `real` every order is the one sum, so they share the
rank fold there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator

import z3

from gdv.ir.core import Op
from gdv.ir.diagnostics import IRError
from gdv.ir.mesh import Mesh
from gdv.ir.ops import REGISTRY as OPS
from gdv.validate.semantics.index import Idx, delinearize, linearize
from gdv.validate.semantics.registry import Ctx, Index, Tensor, Term, rule

_KIND = {"add": "sum", "max": "max", "min": "min"}


def _group(ctx: Ctx, op: Op) -> tuple[Mesh, Group]:
    """The mesh being encoded and the group of `op`'s axes in it."""
    if ctx.mesh is None:
        raise IRError(
            f"{op.name} is a collective: it has a meaning only inside an SPMD function",
            op.loc,
        )
    return ctx.mesh, Group(ctx.mesh, op.attrs["axes"])


class Group:
    """The group of `axes` in `mesh`: member indices and coordinates as index terms."""

    def __init__(self, mesh: Mesh, axes: list[str]) -> None:
        self.mesh = mesh
        self.axes = list(axes)
        self.p = mesh.group_size(axes)
        self.pos = {a: mesh.names.index(a) for a in mesh.names}

    def member(self, coords: Index) -> Idx:
        """The member index of the rank at `coords`."""
        m = Idx.of(0)
        for a in self.axes:
            m = m * self.mesh.axis_size(a) + coords[self.pos[a]]
        return m

    def coords(self, coords: Index, m: Idx) -> Index:
        """`coords` with the group's axes set to member `m`'s digits."""
        out = list(coords)
        sizes = [self.mesh.axis_size(a) for a in self.axes]
        for a, d in zip(self.axes, delinearize(m, tuple(sizes)), strict=True):
            out[self.pos[a]] = d
        return tuple(out)


def _stacked(op: Op, mesh: Mesh):
    """The stacked type of `op`'s result: `[*mesh.shape, *local]`."""
    return op.type.with_shape(mesh.shape + op.type.shape)


def _split(mesh: Mesh, i: Index) -> tuple[Index, Index]:
    k = len(mesh.shape)
    return i[:k], i[k:]


def _fold_members(
    ctx: Ctx,
    op: Op,
    dtype,
    p: int,
    value: Callable[[Idx], Term],
    start: Idx | None = None,
) -> Generator:
    """The fold of `value(m)` over the p members in `op`'s order; for "ring", the fold starts
    at member `start` + 1 and ends at `start` (the chunk's own member)."""
    kind = _KIND[op.attrs["combiner"]]
    order = op.attrs["order"]
    if order == "rank" or p == 1 or ctx.theory == "real":
        return (yield from ctx.fold(kind, dtype, p, value))
    if order == "tree":
        return (yield from _tree(ctx, kind, dtype, value, 0, p))
    assert order == "ring" and start is not None
    acc = yield from _run(value((start + 1).mod(p)))
    for j in range(2, p + 1):
        acc = ctx.values.fold_step(kind, dtype, acc, (yield from _run(value((start + j).mod(p)))))
    return acc


def _read(x: Tensor, idx: Index) -> Generator:
    return (yield x.read(idx))


def _tree(ctx: Ctx, kind: str, dtype, value, lo: int, n: int) -> Generator:
    if n == 1:
        return (yield from _run(value(Idx.of(lo))))
    h = (n + 1) // 2
    a = yield from _tree(ctx, kind, dtype, value, lo, h)
    b = yield from _tree(ctx, kind, dtype, value, lo + h, n - h)
    return ctx.values.fold_step(kind, dtype, a, b)


def _run(term: Term) -> Generator:
    if isinstance(term, Generator):
        return (yield from term)
    return term


@rule(OPS["all_reduce"])
def all_reduce(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """out[r, i] = fold over members m of x[member m of r's group, i], in the declared order;
    for "ring", i's chunk c = flat(i) // ceil(E / p) folds from member c + 1 to member c."""
    (x,) = xs
    mesh, g = _group(ctx, op)
    local = op.type.shape
    chunk = max(1, -(-math.prod(local) // g.p))

    def at(i: Index) -> Term:
        r, j = _split(mesh, i)
        start = linearize(j, local).floordiv(chunk) if op.attrs["order"] == "ring" else None
        return (
            yield from _fold_members(
                ctx, op, x.dtype, g.p, lambda m: _read(x, g.coords(r, m) + j), start
            )
        )

    return Tensor(_stacked(op, mesh), at)


@rule(OPS["all_gather"])
def all_gather(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """out[r, i] = x[member i[dim] // n of r's group, i with i[dim] mod n], n the operand's
    extent along dim."""
    (x,) = xs
    mesh, g = _group(ctx, op)
    k = len(mesh.shape)
    d = op.attrs["dim"]
    n = x.shape[k + d]

    def at(i: Index) -> Term:
        r, j = _split(mesh, i)
        jj = list(j)
        jj[d] = j[d].mod(n)
        return (yield x.read(g.coords(r, j[d].floordiv(n)) + tuple(jj)))

    return Tensor(_stacked(op, mesh), at)


@rule(OPS["reduce_scatter"])
def reduce_scatter(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """out[r, i] = fold over members m of x[member m, i with i[dim] + me * n]: block `me`
    (r's member index) of the group's fold; for "ring" it folds from member me + 1 to me."""
    (x,) = xs
    mesh, g = _group(ctx, op)
    d = op.attrs["dim"]
    n = op.type.shape[d]

    def at(i: Index) -> Term:
        r, j = _split(mesh, i)
        me = g.member(r)
        jj = list(j)
        jj[d] = j[d] + me * n
        src = tuple(jj)
        return (
            yield from _fold_members(
                ctx, op, x.dtype, g.p, lambda m: _read(x, g.coords(r, m) + src), me
            )
        )

    return Tensor(_stacked(op, mesh), at)


@rule(OPS["all_to_all"])
def all_to_all(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """out[r, i]: along concat_dim, block h = i[c] // S[c] comes from member h, whose block
    `me` along split_dim it is (S the operand's local shape)."""
    (x,) = xs
    mesh, g = _group(ctx, op)
    k = len(mesh.shape)
    s, c = op.attrs["split_dim"], op.attrs["concat_dim"]
    local_in = x.shape[k:]
    b = local_in[s] // g.p  # block extent along split_dim

    def at(i: Index) -> Term:
        r, j = _split(mesh, i)
        me = g.member(r)
        jj = list(j)
        if s == c:
            h = j[s].floordiv(b)
            jj[s] = me * b + j[s].mod(b)
        else:
            h = j[c].floordiv(local_in[c])
            jj[c] = j[c].mod(local_in[c])
            jj[s] = me * b + j[s]
        return (yield x.read(g.coords(r, h) + tuple(jj)))

    return Tensor(_stacked(op, mesh), at)


@rule(OPS["collective_permute"])
def collective_permute(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """out[r, i] = x[member src, i] where r is member dst of a pair, else zero."""
    (x,) = xs
    mesh, g = _group(ctx, op)
    pairs = op.attrs["pairs"]
    zero = ctx.values.zero(x.dtype)

    def at(i: Index) -> Term:
        r, j = _split(mesh, i)
        me = g.member(r)
        term = zero
        for src, dst in reversed(pairs):
            if me.is_const:
                if me.const != dst:
                    continue
                return (yield x.read(g.coords(r, Idx.of(src)) + j))
            here = yield x.read(g.coords(r, Idx.of(src)) + j)
            term = z3.If(me.to_z3() == dst, here, term)
        return term

    return Tensor(_stacked(op, mesh), at)


@rule(OPS["shard_slice"])
def shard_slice(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """out[r, i] = x[r, i with i[dim] + me * n]: the rank's own block `me`."""
    (x,) = xs
    mesh, g = _group(ctx, op)
    d = op.attrs["dim"]
    n = op.type.shape[d]

    def at(i: Index) -> Term:
        r, j = _split(mesh, i)
        jj = list(j)
        jj[d] = j[d] + g.member(r) * n
        return (yield x.read(r + tuple(jj)))

    return Tensor(_stacked(op, mesh), at)


@rule(OPS["carry_reduce"])
def carry_reduce(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """out[r, i] = the fold over the global reduced positions (row-major over `dims`, dim
    s = min(dims) p times longer than the operand's extent n there): position q reads
    x[member q_s // n of r's group, i's kept dims, q's reduced dims with q_s mod n]. It is the
    fold `reduce_*` makes of `all_gather(x, dim = s)`, one fold index over the whole group."""
    (x,) = xs
    mesh, g = _group(ctx, op)
    local_in = x.shape[len(mesh.shape) :]
    dims = sorted(op.attrs["dims"])
    s = dims[0]
    n = local_in[s]
    red_shape = tuple(local_in[d] * (g.p if d == s else 1) for d in dims)
    kept = [d for d in range(len(local_in)) if d not in dims]
    kind = _KIND[op.attrs["combiner"]]

    def at(i: Index) -> Term:
        r, j = _split(mesh, i)

        def body(q: Idx) -> Term:
            jj: list[Idx] = [Idx.of(0)] * len(local_in)
            for d, v in zip(kept, j, strict=True):
                jj[d] = v
            for d, v in zip(dims, delinearize(q, red_shape), strict=True):
                jj[d] = v
            m = jj[s].floordiv(n)
            jj[s] = jj[s].mod(n)
            return (yield x.read(g.coords(r, m) + tuple(jj)))

        return (yield from ctx.fold(kind, x.dtype, math.prod(red_shape), body))

    return Tensor(_stacked(op, mesh), at)
