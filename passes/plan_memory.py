"""`plan-memory`: place every intermediate value of a loop-stage function in one arena, reusing
space by liveness, and claim that no two simultaneously live buffers overlap.

A value is live from the op that defines it to its last use (to the end for returned values);
intervals are closed, so an op's result never shares space with its operands. Buffers are
placed first-fit in definition order at 64-byte aligned offsets. The plan is recorded in the
function's attributes: `arena_bytes` (the peak memory) and `buffers` ([name, offset, bytes]
per value). The `memory-safety` obligation asserts, over symbolic buffer indices a and b, two
distinct buffers live at one time whose byte ranges overlap, or a buffer outside the arena;
unsat proves the plan safe.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gdv.ir.core import Function, Module
from gdv.ir.obligation import Obligation
from gdv.ir.ops.kernel import bodies_used
from gdv.passes.base import Pass, PassResult

ALIGN = 64


@dataclass(frozen=True)
class Buffer:
    """One value's place: name, byte offset and size, live interval [start, end] in op steps.

    `gdv.validate.schedules` recomputes the liveness on its own, on purpose: the checker of
    this plan must not reuse the planner's bookkeeping."""

    name: str
    offset: int
    size: int
    start: int
    end: int


def plan(fn: Function) -> list[Buffer]:
    """First-fit placement of every op result of `fn` by liveness."""
    n = len(fn.ops)
    last = {op.result: i for i, op in enumerate(fn.ops)}
    for i, op in enumerate(fn.ops):
        for v in op.operands:
            if v in last:
                last[v] = i
    for r in fn.returns:
        if r in last:
            last[r] = n
    types = fn.types()
    placed: list[Buffer] = []
    for i, op in enumerate(fn.ops):
        t = types[op.result]
        size = t.num_elements * max(1, t.dtype.bits // 8)
        busy = sorted(
            (b.offset, b.offset + b.size)
            for b in placed
            if b.start <= last[op.result] and i <= b.end
        )
        offset = 0
        for lo, hi in busy:  # the lowest aligned gap that holds `size` bytes
            if offset + size <= lo:
                break
            offset = max(offset, -(-hi // ALIGN) * ALIGN)
        placed.append(Buffer(op.result, offset, size, i, last[op.result]))
    return placed


def memory_obligation(pass_name: str, fn: Function, buffers: list[Buffer], arena: int, index: int):
    """The memory-safety claim of `buffers` in an arena of `arena` bytes."""
    # The checker reads the plan off these attributes and recomputes liveness itself.
    where = replace(
        fn,
        name="src",
        attrs={"arena_bytes": arena, "buffers": [[b.name, b.offset, b.size] for b in buffers]},
    )
    return Obligation(
        id=f"{pass_name}/arena/memory-safety" + (f"#{index}" if index else ""),
        kind="memory-safety",
        theory="int",
        src=where,
        tgt=where,
        claim=f"@{fn.name}: no two live buffers of the {arena}-byte arena overlap",
        loc=fn.loc,
    )


@dataclass(frozen=True)
class PlanMemory(Pass):
    name = "plan-memory"
    stage_in = "loop"

    def run(self, module: Module) -> PassResult:
        bodies = bodies_used(module.functions)
        obligations: list[Obligation] = []
        functions = []
        for fn in module.functions:
            if fn.name in bodies or not fn.ops:
                functions.append(fn)
                continue
            buffers = plan(fn)
            arena = max((b.offset + b.size for b in buffers), default=0)
            attrs = {
                **fn.attrs,
                "arena_bytes": arena,
                "buffers": [[b.name, b.offset, b.size] for b in buffers],
            }
            obligations.append(memory_obligation(self.name, fn, buffers, arena, len(obligations)))
            functions.append(replace(fn, attrs=attrs))
        return PassResult(Module(functions, module.filename), obligations, bool(obligations))
