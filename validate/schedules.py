"""The formulas of schedule claims, derived by the checker from the IR itself.

A pass that schedules kernels or plans memory only states its claim (`coverage` of a kernel's
tiled nest, `memory-safety` of a function's arena); this module reads the schedule attributes
and the buffer plan off the IR it was given and builds the violation formula, computing the
liveness of every value anew. So a pass whose own bookkeeping is wrong cannot write the formula
that would excuse it. Unsat of the violation proves the claim.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import z3

from gdv.ir.core import Function
from gdv.ir.obligation import Obligation
from gdv.ir.ops.kernel import block_local_values, group_spans


def formula_text(violation: z3.BoolRef) -> str:
    """The violation as SMT-LIB 2 text with `(set-logic ALL)`, as obligations store it."""
    s = z3.Solver()
    s.add(violation)
    return "(set-logic ALL)\n" + s.to_smt2()


@dataclass(frozen=True)
class DimLoop:
    """One loop dim of a tiled nest: extent, tile, vector lanes (1: none), tile count."""

    extent: int
    tile: int
    vector: int = 1
    count: int | None = None
    """Tile loop trip count; None: ceil(extent / tile), the one that covers the remainder."""
    ordered: bool = False
    """The loop must also visit its coordinates in increasing order (a product's reduce
    positions, which each output folds in that order)."""

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
        if loop.ordered:
            (o1, c1, l1), (o2, c2, l2) = ix1, ix2
            earlier = z3.Or(o1 < o2, z3.And(o1 == o2, z3.Or(c1 < c2, z3.And(c1 == c2, l1 < l2))))
            cases.append(z3.And(ok1, ok2, earlier, p1 >= p2))
    return z3.Or(*cases) if cases else z3.BoolVal(False)


def nest_of(attrs: dict) -> list[DimLoop]:
    """The per-dim loops a kernel's schedule attributes describe (a product's: `product_nest`)."""
    if attrs.get("strategy") == "product":
        return product_nest(attrs)
    space, tile = attrs["space"], attrs.get("tile") or [max(1, n) for n in attrs["space"]]
    lanes = attrs.get("vector", 1)
    vdim = vector_dim(attrs)
    return [
        DimLoop(n, t, lanes if d == vdim else 1)
        for d, (n, t) in enumerate(zip(space, tile, strict=True))
    ]


def product_nest(attrs: dict) -> list[DimLoop]:
    """The loops of a packed product (`strategy = "product"`), one per role, each role's dims
    flattened row-major into one index (a bijection of their box onto [0, size)): the batch
    index one at a time; the rows in blocks of MC, each in slivers of MR rows (the last of a
    block cut short); the columns likewise in blocks of NC and slivers of NR; the reduce
    positions in blocks of KC, which must also come in increasing order, since every output
    folds them in that order. (Threads then take whole slivers of the rows or columns, each
    thread a contiguous range; that split is not part of this claim.)"""

    def size(dims: list[int]) -> int:
        out = 1
        for d in dims:
            out *= attrs["space"][d]
        return out

    mr, nr = attrs["micro"]
    mc, kc, nc = attrs["blocks"]
    return [
        DimLoop(size(attrs["batch"]), 1),
        DimLoop(size(attrs["rows"]), mc, mr),
        DimLoop(size(attrs["cols"]), nc, nr),
        DimLoop(size(attrs["reduce"]), kc, 1, ordered=True),
    ]


def vector_dim(attrs: dict) -> int | None:
    """The loop dim whose intra-tile loop runs in vector lanes: the last out dim in `order`."""
    order = attrs.get("order") or list(range(len(attrs["space"])))
    outs = [d for d in order if d in attrs["out"]]
    return outs[-1] if outs else None


@dataclass(frozen=True)
class Buffer:
    """One value's place: name, byte offset and size, live interval [start, end] in op steps."""

    name: str
    offset: int
    size: int
    start: int
    end: int


def live_buffers(fn: Function) -> list[Buffer]:
    """The plan recorded on `fn` (`buffers = [[name, offset, bytes], ...]`) with each buffer's
    live interval computed here from the ops.

    Storage, as the targets lay it out: a `reshape`'s result is its operand's bytes, so a value
    and the reshapes of it are one group, named by its first value. A group holding a parameter
    or a returned value is the caller's and has no buffer in the arena; every other group must
    have exactly one buffer, named by its first value and large enough for it, live from the op
    that defines that value to the last use of any value of the group. A group without a buffer,
    a buffer too small, a buffer for anything else, or two buffers for one name is an error.
    So is a value listed in `block_local` that may not be kept for one row block alone
    (`block_local_values`)."""
    root = {p.name: p.name for p in fn.params}
    for op in fn.ops:
        shares = op.name == "reshape" and len(op.operands) == 1 and op.operands[0] in root
        root[op.result] = root[op.operands[0]] if shares else op.result
    caller = {p.name for p in fn.params} | {root[r] for r in fn.returns if r in root}
    caller |= set(fn.attrs.get("at_bind") or ())  # kept across calls (IR_SPEC: `at_bind`)
    # A row group (`row_group`) runs its members interleaved: one step of liveness.
    spans = group_spans(fn)
    caller |= block_local_values(fn)  # kept for one row block (IR_SPEC: `block_local`)
    first = {op.result: spans[i][0] for i, op in enumerate(fn.ops) if root[op.result] == op.result}
    last = {op.result: spans[i][1] for i, op in enumerate(fn.ops) if root[op.result] == op.result}
    for i, op in enumerate(fn.ops):
        for v in [*op.operands, op.result]:
            if root.get(v) in last:
                last[root[v]] = max(last[root[v]], spans[i][1])
    entries = [(str(b[0]), int(b[1]), int(b[2])) for b in fn.attrs.get("buffers", [])]
    recorded = {name: (offset, size) for name, offset, size in entries}
    if len(recorded) != len(entries):
        raise ValueError("a value has two buffers in the plan")
    buffers = []
    for op in fn.ops:
        if op.result not in first or op.result in caller:
            if op.result in recorded:
                raise ValueError(f"%{op.result} is not an intermediate: it has no arena buffer")
            continue
        need = op.type.num_elements * max(1, op.type.dtype.bits // 8)
        if op.result not in recorded:
            raise ValueError(f"%{op.result} has no buffer in the plan")
        offset, size = recorded.pop(op.result)
        if size < need:
            raise ValueError(f"%{op.result} needs {need} bytes, its buffer has {size}")
        buffers.append(Buffer(op.result, offset, size, first[op.result], last[op.result]))
    if recorded:
        raise ValueError(f"buffers for values the function does not define: {sorted(recorded)}")
    return buffers


def overlap_violation(buffers: list[Buffer], arena: int) -> z3.BoolRef:
    """Two distinct buffers live at one time share a byte, or one leaves [0, arena).

    Each buffer's offset, size and live interval are named constants fixed by equations; the
    violation is a disjunction over every buffer (outside the arena) and over every pair whose
    live intervals meet (sharing a byte), the only pairs that can clash. The formula is linear
    in the buffers and in those pairs, and every solver decides it at once: the earlier
    encoding, with a symbolic pair of indices into uninterpreted tables, took cvc5 45 s on
    MiniLM's 166 buffers (issue 15)."""
    facts, cases = [], []
    fields = []
    for k, b in enumerate(buffers):
        off, size, start, end = (z3.Int(f"{f}!{k}") for f in ("offset", "size", "start", "end"))
        facts += [off == b.offset, size == b.size, start == b.start, end == b.end]
        fields.append((off, size, start, end))
        cases.append(z3.Or(off < 0, off + size > arena))
    order = sorted(range(len(buffers)), key=lambda k: buffers[k].start)
    for n, i in enumerate(order):  # pairs whose live intervals meet, by a sweep over starts
        for j in order[n + 1 :]:
            if buffers[j].start > buffers[i].end:
                break
            (oi, si, ti, ei), (oj, sj, tj, ej) = fields[i], fields[j]
            cases.append(z3.And(ti <= ej, tj <= ei, si > 0, sj > 0, oi < oj + sj, oj < oi + si))
    return z3.And(*facts, z3.Or(*cases)) if cases else z3.BoolVal(False)


def _plan(fn: Function) -> tuple[tuple[Buffer, ...], int] | None:
    """`fn`'s recorded arena plan (its buffers and arena size), None when it is incomplete."""
    try:
        return tuple(live_buffers(fn)), int(fn.attrs.get("arena_bytes", 0))
    except ValueError:
        return None


def memory_violation(fn: Function) -> z3.BoolRef:
    """The violation of `fn`'s recorded arena plan (an incomplete plan is violated outright)."""
    plan = _plan(fn)
    return z3.BoolVal(True) if plan is None else overlap_violation(list(plan[0]), plan[1])


def memory_text(fn: Function) -> str:
    """The SMT-LIB text of `memory_violation(fn)`, built once per plan: a memory-safety claim's
    text is asked for by its cache key, its stored query, its solve and the checker."""
    plan = _plan(fn)
    return formula_text(z3.BoolVal(True)) if plan is None else _memory_text(*plan)


@functools.lru_cache(maxsize=256)
def _memory_text(buffers: tuple[Buffer, ...], arena: int) -> str:
    return formula_text(overlap_violation(list(buffers), arena))


def coverage_text(attrs: dict) -> str:
    """The SMT-LIB text of the coverage claim of a kernel with attributes `attrs`: a function of
    its nest alone, so kernels with one nest (twelve layers' worth) share it."""
    return _coverage_text(tuple(nest_of(attrs)))


@functools.lru_cache(maxsize=4096)
def _coverage_text(loops: tuple[DimLoop, ...]) -> str:
    return formula_text(coverage_violation(list(loops)))


def claim_formula(ob: Obligation) -> str | None:
    """The SMT-LIB text of a formula claim, derived from the obligation's IR (`coverage`: the
    kernel in `src`; `memory-safety`: the planned function in `src`), or the formula the
    obligation carries for other kinds; None for an equivalence."""
    if ob.kind == "coverage":
        (kernel,) = [op for op in ob.src.ops if op.name == "kernel"]
        return coverage_text(kernel.attrs)
    if ob.kind == "memory-safety":
        return memory_text(ob.src)
    return ob.formula
