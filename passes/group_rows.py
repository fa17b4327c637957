"""`group-rows`: run consecutive kernels that work row by row as one loop over row blocks, so
a row is read from memory once and stays in cache while every kernel of the group uses it
(softmax's max, exp, sum and divide; layer_norm's mean, variance and normalisation).

A run of consecutive nest kernels of the entry function with one row dim of extent R (the
first result dim of extent above 1, `gdv.ir.ops.kernel.row_dim`), each reading what earlier
members made only at its own rows, gets `row_group = [G, B]`: the C target then runs, for each
block of B rows (the blocks shared by the threads), every member in order. The rules that make
that the program's meaning are the verifier's (`check_row_groups`), checked at every stage;
liveness counts a group as one step (`group_spans`), so the memory plan keeps every value of a
group apart. The attribute never changes what a kernel computes: each member is the same op
with one more schedule attribute (a certificate step whose fp pair the checker builds).

B is the most rows whose data (every member's result row and operand rows) fits in half the
L2, at most R / 8 so that the blocks spread over the threads, a multiple of 8 when above 8 (a
reduction folds 8 rows together).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gdv.ir.core import Function, Module, Op
from gdv.ir.ops.kernel import bodies_used, row_dim
from gdv.passes.base import Pass, PassResult, Step, rescheduled

MIN_ROWS = 4
"""Groups need at least this many rows (fewer leave threads idle)."""


def _reads_member(op: Op, made: dict[str, int]) -> bool:
    return any(v in made for v in op.operands)


def _row_aligned(op: Op, made: dict[str, int]) -> bool:
    """Every read of a value made in the group is at the consumer's own row."""
    _, d0 = row_dim(op)
    n = len(op.attrs["space"])
    own = [1 if d == d0 else 0 for d in range(n)] + [0]
    return all(op.attrs["maps"][k][made[v]] == own for k, v in enumerate(op.operands) if v in made)


def _row_bytes(op: Op, types: dict) -> int:
    """Bytes of one row of the result and of every operand read along the row."""
    total = 0
    for v in [*op.operands, op.result]:
        t = types[v]
        rows = max(1, max(t.shape, default=1))
        total += t.num_elements * max(1, t.dtype.bits // 8) // rows
    return total


def _plain(op: Op) -> bool:
    """A nest kernel with a row dim and no empty fold or result (whose C writes every element
    at once)."""
    a = op.attrs
    if op.name != "kernel" or "tile" not in a or row_dim(op) is None or not op.type.num_elements:
        return False
    if "fill" in a:  # a member's reads must lie inside its operands' rows
        return False
    return all(a["space"][d] > 0 for d in a["reduce"])


def groups(fn: Function) -> list[list[int]]:
    """Runs of op indices that may form row groups (at least two kernels sharing data)."""
    out: list[list[int]] = []
    run: list[int] = []
    made: dict[str, int] = {}
    rows = None
    for i, op in enumerate(fn.ops):
        found = row_dim(op) if _plain(op) else None
        extent = op.attrs["space"][found[1]] if found else None
        joins = (
            found is not None
            and extent == rows
            and _reads_member(op, made)
            and _row_aligned(op, made)
        )
        if not joins:
            if len(run) > 1:
                out.append(run)
            run, made, rows = [], {}, None
            if found is None or extent < MIN_ROWS:
                continue
            rows = extent
        run.append(i)
        made[op.result] = found[0]
    if len(run) > 1:
        out.append(run)
    return out


@dataclass(frozen=True)
class GroupRows(Pass):
    name = "group-rows"
    stage_in = "loop"
    l2_bytes: int = 1 << 20
    """The L2 per core (from the target's descriptor) a block's rows should fit half of."""

    def run(self, module: Module) -> PassResult:
        bodies = bodies_used(module.functions)
        steps: list[Step] = []
        functions = []
        for fn in module.functions:
            if fn.name in bodies or fn is not module.entry:
                functions.append(fn)
                continue
            types = fn.types()
            ops = list(fn.ops)
            for g, run in enumerate(groups(fn)):
                members = [ops[i] for i in run]
                rows = members[0].attrs["space"][row_dim(members[0])[1]]
                per_row = sum(_row_bytes(op, types) for op in members)
                block = max(1, min((self.l2_bytes // 2) // max(1, per_row), rows // 8))
                if block > 8:
                    block -= block % 8
                for i in run:
                    op = ops[i]
                    new = Op(
                        op.result, op.name, list(op.operands),
                        {**op.attrs, "row_group": [g, block]}, op.type, op.loc,
                    )  # fmt: skip
                    new.name_loc = op.name_loc
                    ops[i] = new
                    steps.append(rescheduled(fn.name, i, new))
            functions.append(replace(fn, ops=ops))
        return PassResult(Module(functions, module.filename), [], bool(steps), steps)
