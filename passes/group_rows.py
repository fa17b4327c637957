"""`group-rows`: run consecutive kernels that work row by row as one loop over row blocks, so
a row is read from memory once and stays in cache while every kernel of the group uses it
(softmax's max, exp, sum and divide; layer_norm's mean, variance and normalisation).

A run of consecutive nest kernels of the entry function with one row dim of extent R (the
first result dim of extent above 1, `gdv.ir.ops.kernel.row_dim`), each reading what earlier
members made only at its own rows, gets `row_group = [G, B]`: the C target then runs, for each
block of B rows (the blocks shared by the threads), every member in order. The rules that make
that the program's meaning are the verifier's (`check_row_groups`), checked at every stage;
liveness counts a group as one step (`group_spans`), so the memory plan keeps every value of a
group apart, and a value only the group reads is kept for one block of rows (`block_local`,
`plan-memory`). The attribute never changes what a kernel computes: each member is the same op
with one more schedule attribute (a certificate step whose fp pair the checker builds).

B is the most rows whose data (each value a member reads or makes along the row, counted once)
fits in L1 (measured against half the L2: `GroupRows.l1_bytes`), at most R / 8 so that the
blocks spread over the threads, a multiple of 8 when above 8 (a reduction folds 8 rows
together).
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


def _row_bytes(ops: list[Op], types: dict) -> int:
    """Bytes of one row of every value the kernels `ops` read or make, each value once."""
    total = 0
    for v in dict.fromkeys(v for op in ops for v in [*op.operands, op.result]):
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
    l1_bytes: int = 32 << 10
    """The L1 data cache per core (from the target's descriptor), which a block's rows fit.
    It replaced half the L2, each member's result and operand rows counted apart. On the
    2-core Zen 4 host (-O3, two threads, the C target called from Python, the plans'
    executables in one process, alternating blocks of 5 calls, medians, 2026-12-07): softmax
    over the rows of 4096x1024 f32 (`benchmarks/side_by_side.py`'s workload; 12 KiB a row: x,
    exp, out) in blocks of 16 rows (half L2) 2.054 ms, of 8 1.977, of 4 1.793, of 2 (L1)
    1.688, of 1 1.689; its layer_norm + GELU over 4096x1024 in blocks of 24 (half L2) 1.774, of
    8 1.796, of 5 1.812, of 2 1.730, of 1 1.775 (L1: 3); the causal attention (seq 128) kept
    its blocks of 16. The CNNs' groups (max pools, squeeze-excite, the classifier's product
    over 1000 rows) change too: -O3, bound, both rules' programs in one process, alternating
    blocks of 5 calls with the two-vCPU probe before each, medians over the near and the far
    rounds, half L2 -> L1: efficientnet_b0's torch.export path 6.772 -> 6.715 ms near and
    10.027 -> 9.936 far, its ONNX path 6.630 -> 6.611 and 9.817 -> 9.745, resnet18 (ONNX)
    17.710 -> 17.687 and 19.292 -> 19.235, mobilenet_v2 (ONNX) 4.196 -> 4.190 and 6.890 ->
    6.832, the same bits. The transformers' groups (32 rows) are held to 4 rows by R / 8
    either way."""

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
                fits = self.l1_bytes // max(1, _row_bytes(members, types))
                block = max(1, min(fits, rows // 8))
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
