"""`schedule-kernels`: choose each kernel's tile sizes, loop order, vector width and parallel
dims from its sizes, and claim that the tiled nest covers the iteration space exactly once.

The nest a schedule describes: per loop dim d with extent n and tile t, a tile loop
`o in [0, count)` (count = ceil(n / t)) and an intra-tile loop over `min(t, n - o t)` points;
along the vector dim the intra-tile loop runs in chunks of `vector` lanes, the last chunk
masked. The nest is the product of these per-dim loops (`order` only orders them), so it
visits every point of the box exactly once iff each dim's loop visits every coordinate in
[0, n) exactly once. The `coverage` obligation asserts, over symbolic loop indices, a
violation of that for some dim: a visit outside [0, n), two distinct visits of one
coordinate, or a coordinate whose visit (o = p div t, ...) is not a visit. Unsat proves it.

The chosen schedules keep every reduction's order: reduce dims come last in `order`, in the
order `reduce` lists them, only a single reduce dim is tiled (tiles visited in increasing
order give the same sequence), and one accumulator. So the meaning, and the bit-exact
equivalence, are untouched, and no `real` claim is needed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import z3

from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.obligation import Obligation
from gdv.ir.ops.kernel import bodies_used
from gdv.passes.base import Pass, PassResult

VECTOR_BYTES = 32
"""The vector register width the lane count is chosen for (AVX2-sized)."""


@dataclass(frozen=True)
class DimLoop:
    """One loop dim of a tiled nest: extent, tile, vector lanes (1: none), tile count."""

    extent: int
    tile: int
    vector: int = 1
    count: int | None = None
    """Tile loop trip count; None: ceil(extent / tile), the one that covers the remainder."""

    @property
    def tiles(self) -> int:
        return -(-self.extent // self.tile) if self.count is None else self.count


def _min(a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
    return z3.If(a < b, a, b)


def _visit(d: int, tag: str, loop: DimLoop) -> tuple[list[z3.ArithRef], z3.BoolRef, z3.ArithRef]:
    """Symbolic indices (tile, chunk, lane) of a visit along dim d, whether the nest makes
    it, and the coordinate it visits."""
    o, c, lane = (z3.Int(f"{k}{tag}!{d}") for k in ("tile", "chunk", "lane"))
    t, v = loop.tile, loop.vector
    rem = _min(z3.IntVal(t), loop.extent - o * t)
    valid = z3.And(o >= 0, o < loop.tiles, c >= 0, lane >= 0, lane < v, c * v + lane < rem)
    return [o, c, lane], valid, o * t + c * v + lane


def coverage_violation(loops: list[DimLoop]) -> z3.BoolRef:
    """Some dim's loop visits a point outside its extent, visits a point twice, or misses one."""
    cases = []
    for d, loop in enumerate(loops):
        n = loop.extent
        ix1, ok1, p1 = _visit(d, "", loop)
        ix2, ok2, p2 = _visit(d, "2", loop)
        cases.append(z3.And(ok1, z3.Or(p1 < 0, p1 >= n)))
        distinct = z3.Or(*(a != b for a, b in zip(ix1, ix2, strict=True)))
        cases.append(z3.And(ok1, ok2, distinct, p1 == p2))
        p = z3.Int(f"point!{d}")
        t, v = loop.tile, loop.vector
        o, r = p / t, p % t  # z3 div/mod by a positive constant: floor semantics
        c, lane = r / v, r % v
        rem = _min(z3.IntVal(t), n - o * t)
        hit = z3.And(o >= 0, o < loop.tiles, c >= 0, lane >= 0, lane < v, c * v + lane < rem)
        cases.append(z3.And(p >= 0, p < n, z3.Not(z3.And(hit, o * t + c * v + lane == p))))
    return z3.Or(*cases) if cases else z3.BoolVal(False)


def formula_text(violation: z3.BoolRef) -> str:
    """The violation as SMT-LIB 2 text with `(set-logic ALL)`, as obligations store it."""
    s = z3.Solver()
    s.add(violation)
    return "(set-logic ALL)\n" + s.to_smt2()


def nest_of(attrs: dict) -> list[DimLoop]:
    """The per-dim loops a kernel's schedule attributes describe."""
    space, tile = attrs["space"], attrs.get("tile") or [max(1, n) for n in attrs["space"]]
    lanes = attrs.get("vector", 1)
    vdim = vector_dim(attrs)
    return [
        DimLoop(n, t, lanes if d == vdim else 1)
        for d, (n, t) in enumerate(zip(space, tile, strict=True))
    ]


def vector_dim(attrs: dict) -> int | None:
    """The loop dim whose intra-tile loop runs in vector lanes: the last out dim in `order`."""
    order = attrs.get("order") or list(range(len(attrs["space"])))
    outs = [d for d in order if d in attrs["out"]]
    return outs[-1] if outs else None


def keeps_reduction_order(attrs: dict) -> bool:
    """Whether the schedule visits each output's reduced positions in the kernel's order."""
    red = attrs["reduce"]
    order = attrs.get("order") or list(range(len(attrs["space"])))
    tile = attrs.get("tile") or attrs["space"]
    tiled = [d for d in red if tile[d] < attrs["space"][d]]
    return (
        attrs.get("accumulators", 1) == 1
        and [d for d in order if d in red] == red
        and (len(red) <= 1 or not tiled)
    )


def choose(op: Op) -> dict:
    """Tile sizes, order, lanes and parallel dims for `op` from its sizes."""
    space, out, red = op.attrs["space"], op.attrs["out"], op.attrs["reduce"]
    tile = []
    for d, n in enumerate(space):
        if d in red:
            tile.append(max(1, min(n, 256)) if len(red) == 1 else max(1, n))
        else:
            tile.append(max(1, min(n, 64 if out and d == out[-1] else 32)))
    bytes_ = max(1, op.type.dtype.bits // 8)
    lanes = max(1, VECTOR_BYTES // bytes_) if out and not op.type.dtype.is_bool else 1
    parallel = [out[0]] if out and space[out[0]] > 1 else []
    return {
        "tile": tile,
        "order": [*out, *red],
        "vector": lanes,
        "parallel": parallel,
        "accumulators": 1,
    }


def kernel_function(op: Op, types: dict) -> Function:
    """A one-op function holding `op`: where an obligation about it points."""
    params = [Param(v, types[v]) for v in dict.fromkeys(op.operands)]
    return Function("src", params, [op.type], [op], [op.result])


def split_accumulators(op: Op, accumulators: int) -> int:
    """How many accumulators `op`'s float sum may use: `accumulators` where its one reduce dim
    is longer than that and divisible by it, else 1."""
    red = op.attrs["reduce"]
    if accumulators <= 1 or op.attrs["combiner"] != "add" or not op.type.dtype.is_float:
        return 1
    if len(red) != 1 or op.attrs["space"][red[0]] <= accumulators:
        return 1
    return accumulators if op.attrs["space"][red[0]] % accumulators == 0 else 1


def split_obligation(
    pass_name: str, before: Op, after: Op, types: dict, body: Function | None, index: int
) -> Obligation:
    """The `real` claim that the blocked sum equals the sequential one (lemma `split`)."""
    src = kernel_function(before, types)
    tgt = replace(kernel_function(after, types), name="tgt")
    return Obligation(
        id=f"{pass_name}/split-accumulators/equivalence" + (f"#{index}" if index else ""),
        kind="equivalence",
        theory="real",
        src=src,
        tgt=tgt,
        claim=f"%{before.result}: {after.attrs['accumulators']} accumulators sum the same "
        "reals in another order",
        assumptions=["split"],
        loc=before.loc,
        functions=[body] if body is not None else [],
    )


@dataclass(frozen=True)
class ScheduleKernels(Pass):
    """`accumulators` > 1 lets float sums run in that many blocks (a reordering, claimed under
    `real`); the default keeps every reduction's order and meaning."""

    name = "schedule-kernels"
    stage_in = "loop"
    accumulators: int = 1

    def run(self, module: Module) -> PassResult:
        bodies = bodies_used(module.functions)
        obligations: list[Obligation] = []
        functions = []
        covers = splits = 0
        for fn in module.functions:
            types = fn.types()
            ops = []
            for op in fn.ops:
                if op.name != "kernel" or fn.name in bodies or "tile" in op.attrs:
                    ops.append(op)
                    continue
                attrs = {**op.attrs, **choose(op)}
                attrs["accumulators"] = blocks = split_accumulators(op, self.accumulators)
                new = Op(op.result, op.name, list(op.operands), attrs, op.type, op.loc)
                ops.append(new)
                where = kernel_function(new, types)
                body = module.function(new.attrs["body"])
                if blocks > 1:
                    splits += 1
                    obligations.append(
                        split_obligation(self.name, op, new, types, body, splits - 1)
                    )
                else:
                    assert keeps_reduction_order(new.attrs), new.attrs
                index = covers
                covers += 1
                obligations.append(
                    Obligation(
                        id=f"{self.name}/tile-nest/coverage" + (f"#{index}" if index else ""),
                        kind="coverage",
                        theory="int",
                        src=where,
                        tgt=where,
                        claim=f"the tiled nest of %{op.result} visits each of its "
                        f"{new.attrs['space']} points exactly once",
                        loc=op.loc,
                        functions=[body] if body is not None else [],
                        formula=formula_text(coverage_violation(nest_of(new.attrs))),
                    )
                )
            functions.append(
                Function(
                    fn.name,
                    fn.params,
                    fn.results,
                    ops,
                    fn.returns,
                    fn.attrs,
                    fn.loc,
                    fn.return_loc,
                    fn.return_locs,
                    fn.results_parenthesized,
                )
            )
        return PassResult(Module(functions, module.filename), obligations, bool(obligations))
