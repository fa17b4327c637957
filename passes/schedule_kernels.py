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

from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.obligation import Obligation
from gdv.ir.ops.kernel import bodies_used
from gdv.passes.base import Pass, PassResult, Step, reordered, rescheduled

VECTOR_BYTES = 32
"""The default vector register width the lane count is chosen for (AVX2-sized); a target's
pipeline passes its own (`ScheduleKernels(vector_bytes=...)`, from its capability descriptor)."""


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


def choose(op: Op, vector_bytes: int = VECTOR_BYTES) -> dict:
    """Tile sizes, order, lanes and parallel dims for `op` from its sizes and the target's
    vector width in bytes (lanes = width / element size, at least 1; i1 results: 1)."""
    space, out, red = op.attrs["space"], op.attrs["out"], op.attrs["reduce"]
    tile = []
    for d, n in enumerate(space):
        if d in red:
            tile.append(max(1, min(n, 256)) if len(red) == 1 else max(1, n))
        else:
            tile.append(max(1, min(n, 64 if out and d == out[-1] else 32)))
    bytes_ = max(1, op.type.dtype.bits // 8)
    lanes = max(1, vector_bytes // bytes_) if not op.type.dtype.is_bool else 1
    # the outermost out dim with more than one position (a batch of 1 leaves the channels)
    parallel = [d for d in out if space[d] > 1][:1]
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


def coverage_obligation(
    pass_name: str, rule: str, index: int, op: Op, types: dict, module: Module, claim: str
) -> Obligation:
    """The `coverage` claim of scheduled kernel `op` (its formula is derived from the op's
    attributes by `gdv.validate.schedules`, never written here)."""
    body = module.function(op.attrs["body"])
    return Obligation(
        id=f"{pass_name}/{rule}/coverage" + (f"#{index}" if index else ""),
        kind="coverage",
        theory="int",
        src=kernel_function(op, types),
        tgt=kernel_function(op, types),
        claim=claim,
        loc=op.loc,
        functions=[body] if body is not None else [],
    )


def reorder_obligation(
    pass_name: str,
    rule: str,
    before: Op,
    after: Op,
    types: dict,
    body: Function | None,
    index: int,
    claim: str,
    assumptions: list[str],
) -> Obligation:
    """The `real` claim that kernel `after` (`before` with attributes that change its fold's
    order or rounding) sums the same reals, citing the lemmas in `assumptions`."""
    src = kernel_function(before, types)
    tgt = replace(kernel_function(after, types), name="tgt")
    return Obligation(
        id=f"{pass_name}/{rule}/equivalence" + (f"#{index}" if index else ""),
        kind="equivalence",
        theory="real",
        src=src,
        tgt=tgt,
        claim=f"%{before.result}: {claim}",
        assumptions=assumptions,
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
    vector_bytes: int = VECTOR_BYTES
    """The target's vector width (its capability descriptor's), which sets each kernel's
    `vector` lanes; the C target's code is written with exactly that width."""

    def run(self, module: Module) -> PassResult:
        bodies = bodies_used(module.functions)
        obligations: list[Obligation] = []
        steps: list[Step] = []
        functions = []
        covers = splits = 0
        for fn in module.functions:
            types = fn.types()
            ops = []
            for op in fn.ops:
                scheduled = "tile" in op.attrs or "strategy" in op.attrs  # (by hand, too)
                if op.name != "kernel" or fn.name in bodies or scheduled:
                    ops.append(op)
                    continue
                attrs = {**op.attrs, **choose(op, self.vector_bytes)}
                attrs["accumulators"] = blocks = split_accumulators(op, self.accumulators)
                new = Op(op.result, op.name, list(op.operands), attrs, op.type, op.loc)
                ops.append(new)
                body = module.function(new.attrs["body"])
                if blocks > 1:  # the step cites the split claim, whose pair is its own
                    steps.append(reordered(fn.name, len(ops) - 1, new, len(obligations)))
                    obligations.append(
                        reorder_obligation(
                            self.name, "split-accumulators", op, new, types, body, splits,
                            f"{blocks} accumulators sum the same reals in another order",
                            ["split"],
                        )
                    )  # fmt: skip
                    splits += 1
                else:  # schedule only: the checker builds the pair
                    steps.append(rescheduled(fn.name, len(ops) - 1, new))
                    assert keeps_reduction_order(new.attrs), new.attrs
                claim = (
                    f"the tiled nest of %{op.result} visits each of its {new.attrs['space']} "
                    "points exactly once"
                )
                obligations.append(
                    coverage_obligation(self.name, "tile-nest", covers, new, types, module, claim)
                )
                covers += 1
            functions.append(replace(fn, ops=ops))
        return PassResult(Module(functions, module.filename), obligations, bool(obligations), steps)
