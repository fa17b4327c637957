"""`plan-memory`: place every intermediate value of a function in one arena, reusing space by
liveness, and claim that no two simultaneously live buffers overlap.

Storage: a `reshape`'s result is its operand's bytes (row-major order is kept), so a value and
the reshapes of it form one storage group, named by its first value (the root). A group holding
a parameter or a returned value is the caller's (the calling convention: parameters are the
caller's arrays, returned values are written into buffers the caller owns); every other group
is an intermediate and gets a buffer in the arena. A group is live from the op that defines its
root to the last use of any of its values; intervals are closed, so an op's result never shares
space with its operands. Buffers are placed first-fit in definition order at 64-byte aligned
offsets, except that no value takes the bytes of a product's shared factor (`shared_factors`).
The plan is recorded in the function's attributes: `arena_bytes` (the peak memory) and
`buffers` ([root, offset, bytes] per intermediate group). A value of a row group that only
later members of the group read, each at its own row, is listed in `block_local` instead and
has no buffer (`BLOCK_LOCAL`): a target holds it for one block of rows at a time. The C
target takes every intermediate from this arena at these offsets. The `memory-safety`
obligation asserts, over symbolic buffer indices a and b, two distinct buffers live at one
time whose byte ranges overlap, or a buffer outside the arena; unsat proves the plan safe.

The pass runs on any stage (the C target plans at -O0 on core ops, at -O1 and -O2 on kernels).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gdv.ir import products
from gdv.ir.core import Function, Module
from gdv.ir.obligation import Obligation
from gdv.ir.ops.kernel import bodies_used, computed_once, group_spans, row_dim, storage_roots
from gdv.passes.base import Pass, PassResult, Step

ALIGN = 64

KEEP_SHARED = True
"""No value is placed over the bytes of a value that a product's threads each read whole (its
factor on the side they do not split: `shared_factors`). Those bytes end in every core's cache,
and a value written over them has to take each line back from the other core first: resnet18's
layer 2 and 3 pads (each a conv's input that every thread of the conv packs whole) were each
placed over the previous such pad. On the 2-core Zen 4 VM (-O3, bound, two threads, both plans
in one process, interleaved blocks of 20 calls with the probe of `benchmarks/two_threads.py`
before each, medians, off -> on, 2026-12-06): resnet18 18.65 -> 18.51 ms when the two vCPUs
shared a cache (143 rounds; those pads 0.022-0.036 -> 0.007-0.016 ms each) and 21.43 -> 20.84
when they did not (75 rounds; 0.091-0.144 -> 0.028-0.083); mobilenet_v2 4.38 -> 4.33 and 7.01
-> 7.04; efficientnet_b0 6.43 -> 6.35 and 9.83 -> 9.64; the 2-layer BERT 5.20 -> 5.22 and 6.26
-> 6.20. Placing every value of at most 512 KiB past all earlier buffers instead made
mobilenet_v2 4.5% slower when the vCPUs shared a cache (4.38 -> 4.58 ms, 198 rounds) and the
arenas 2.2-11 times larger; this rule leaves the CNNs' arenas as they were."""


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


def storage(fn: Function) -> tuple[dict[str, str], set[str]]:
    """Each value's storage root (`storage_roots`), and the roots kept out of the arena: the
    caller's (a parameter's group, a returned value's group), the values listed in `at_bind`
    (kept across calls) and those in `block_local` (kept for one row block)."""
    root = storage_roots(fn)
    external = {p.name for p in fn.params} | {root[r] for r in fn.returns if r in root}
    external |= set(fn.attrs.get("at_bind") or ())  # kept across calls, apart from the arena
    external |= set(fn.attrs.get("block_local") or ())  # a row block's alone, apart from it
    return root, external


def shared_factors(fn: Function, bodies: dict[str, Function]) -> set[str]:
    """The values some product kernel of `fn` reads as the factor on the side its threads do
    not split (`split = "rows"`: the column factor; `"columns"`: the row factor): every thread
    reads all of it. `bodies`: the module's functions by name (a kernel's body)."""
    shared: set[str] = set()
    for op in fn.ops:
        a = op.attrs
        if op.name != "kernel" or a.get("strategy") != "product" or a.get("split") == "none":
            continue
        body = bodies.get(a.get("body", ""))
        if body is None or products.holds(a, op.type.dtype, body) is not None:
            continue  # not a product the C target would run (it reports why)
        x, y = products.factors(a, body)
        whole = y if a.get("split") == "rows" else x
        shared.update(op.operands[k] for k in products.factor_operands(body, whole))
    return shared


def plan(fn: Function, bodies: dict[str, Function] | None = None) -> list[Buffer]:
    """First-fit placement of every intermediate storage group of `fn` by liveness, no group
    over the bytes of a shared factor (`KEEP_SHARED`, given the module's `bodies`)."""
    root, external = storage(fn)
    shared = shared_factors(fn, bodies or {}) if KEEP_SHARED else set()
    keep = {root[v] for v in shared if v in root}
    spans = group_spans(fn)  # a row group is one step of liveness
    first = {op.result: spans[i][0] for i, op in enumerate(fn.ops) if root[op.result] == op.result}
    last = {op.result: spans[i][1] for i, op in enumerate(fn.ops) if root[op.result] == op.result}
    for i, op in enumerate(fn.ops):
        for v in [*op.operands, op.result]:
            r = root.get(v)
            if r in last:
                last[r] = max(last[r], spans[i][1])
    types = fn.types()
    placed: list[Buffer] = []
    for op in fn.ops:
        if root[op.result] != op.result or op.result in external:
            continue
        t = types[op.result]
        size = t.num_elements * max(1, t.dtype.bits // 8)
        busy = sorted(
            (b.offset, b.offset + b.size)
            for b in placed
            if b.name in keep or (b.start <= last[op.result] and first[op.result] <= b.end)
        )
        offset = 0
        for lo, hi in busy:  # the lowest aligned gap that holds `size` bytes
            if offset + size <= lo:
                break
            offset = max(offset, -(-hi // ALIGN) * ALIGN)
        placed.append(Buffer(op.result, offset, size, first[op.result], last[op.result]))
    return placed


def memory_obligation(pass_name: str, fn: Function, buffers: list[Buffer], arena: int, index: int):
    """The memory-safety claim of `buffers` in an arena of `arena` bytes."""
    # The checker reads the plan off these attributes and recomputes liveness itself.
    plan_attrs = {"arena_bytes": arena, "buffers": [[b.name, b.offset, b.size] for b in buffers]}
    for key in ("at_bind", "block_local"):  # values kept apart from the arena
        if fn.attrs.get(key):
            plan_attrs[key] = list(fn.attrs[key])
    where = replace(fn, name="src", attrs=plan_attrs)
    return Obligation(
        id=f"{pass_name}/arena/memory-safety" + (f"#{index}" if index else ""),
        kind="memory-safety",
        theory="int",
        src=where,
        tgt=where,
        claim=f"@{fn.name}: no two live buffers of the {arena}-byte arena overlap",
        loc=fn.loc,
    )


AT_BIND = True
"""Kernels of the entry function computed from bound parameters alone (`PlanMemory.bound`) are
listed in its `at_bind` and kept apart from the arena: the C target computes them once, when
`Executable.bind` fixes those parameters, instead of in every call. mobilenet_v2's
torch.export path computes each batch norm's scale and shift from its four parameters: 97
such kernels in every call."""


def at_bind(fn: Function, bound: frozenset[str]) -> list[str]:
    """The kernels of `fn` computed from parameters in `bound` alone (`computed_once`), in
    order: what a target computes once when those are bound."""
    names = {op.result for op in fn.ops}
    return list(computed_once(fn, names, {p.name for p in fn.params} & set(bound)))


BLOCK_LOCAL = True
"""A value that a row group's member makes and only later members of the same group read (softmax's
row max, exp and row sum; layer_norm's row statistics) is listed in the entry's `block_local`
and kept apart from the arena: the C target holds it for the current block of rows only, in a
buffer of B rows per thread, so its rows stay in L1 instead of streaming through a buffer of the
whole value (`block_local`). On the 2-core Zen 4 host (-O3, two threads, both plans' executables
in one process, alternating blocks of 5 calls, medians, the same bits, 2026-12-07), off -> on:
softmax over the rows of 4096x1024 f32 1.740 -> 1.535 ms (its arena 16 MiB -> 0); layer_norm +
GELU over 4096x1024 2.236 -> 2.215; the causal attention (seq 128) 0.751 -> 0.735; bound models
(three executables of each plan, the probe before each block, near rounds) MiniLM 2.620 ->
2.610, efficientnet_b0 6.610 -> 6.567."""

BLOCK_LOCAL_MAX_BYTES = 64 << 10
"""The most bytes a row group's block-local values take together per thread (B rows each):
they live on the thread's stack."""


def block_local(fn: Function, external: set[str]) -> list[str]:
    """The values of `fn` a target may keep for one row block (IR_SPEC `block_local`), in
    order: each made by a member of a row group (`row_group`) and read only by later members
    of that group, at their own rows (the verifier's rule for reads inside a group); not a
    parameter's, returned or listed apart (`external`, from `storage`), nor shared by a
    reshape; at most `BLOCK_LOCAL_MAX_BYTES` of B rows each per group."""
    root = storage_roots(fn)
    spans = group_spans(fn)
    readers: dict[str, list[int]] = {}
    aliased: set[str] = set()
    for i, op in enumerate(fn.ops):
        for v in op.operands:
            readers.setdefault(v, []).append(i)
        if root.get(op.result, op.result) != op.result:
            aliased.add(root[op.result])
    taken: dict[tuple[int, int], int] = {}
    out: list[str] = []
    for i, op in enumerate(fn.ops):
        group = op.attrs.get("row_group") if op.name == "kernel" else None
        v = op.result
        if group is None or v in external or v in aliased or v not in readers:
            continue
        if any(spans[j] != spans[i] or j <= i for j in readers[v]):
            continue
        found = row_dim(op)
        if found is None or not op.type.num_elements:
            continue
        per_row = op.type.num_elements // op.type.shape[found[0]]
        size = int(group[1]) * per_row * max(1, op.type.dtype.bits // 8)
        if taken.get(spans[i], 0) + size > BLOCK_LOCAL_MAX_BYTES:
            continue
        taken[spans[i]] = taken.get(spans[i], 0) + size
        out.append(v)
    return out


@dataclass(frozen=True)
class PlanMemory(Pass):
    name = "plan-memory"
    stage_in = "loop"
    bound: frozenset[str] = frozenset()
    """The parameters the caller will fix once (`Compilation.bind`): kernels computed from
    them alone are listed in the entry's `at_bind` (`AT_BIND`)."""

    def run(self, module: Module) -> PassResult:
        bodies = bodies_used(module.functions)
        obligations: list[Obligation] = []
        steps: list[Step] = []
        functions = []
        for fn in module.functions:
            if fn.name in bodies or not fn.ops:
                functions.append(fn)
                continue
            # The plan owns `at_bind` as it owns `buffers`: a list from the input is replaced.
            kept = at_bind(fn, self.bound) if AT_BIND and fn is module.entry else []
            listed = {"at_bind": kept} if kept else {}
            own = {k: v for k, v in fn.attrs.items() if k not in ("at_bind", "block_local")}
            if BLOCK_LOCAL and fn is module.entry:
                local = block_local(fn, storage(replace(fn, attrs={**own, **listed}))[1])
                listed |= {"block_local": local} if local else {}
            kept_apart = replace(fn, attrs={**own, **listed})
            buffers = plan(kept_apart, {f.name: f for f in module.functions})
            arena = max((b.offset + b.size for b in buffers), default=0)
            values = {
                **own,
                "arena_bytes": arena,
                **listed,
                "buffers": [[b.name, b.offset, b.size] for b in buffers],
            }
            # In the order the checker's replay writes them: the function's own keys where
            # they were, then the new ones sorted.
            order = [k for k in fn.attrs if k in values]
            order += sorted(k for k in values if k not in fn.attrs)
            attrs = {k: values[k] for k in order}
            obligations.append(
                memory_obligation(self.name, kept_apart, buffers, arena, len(obligations))
            )
            steps.append(Step("attrs", fn.name, attrs=attrs))
            functions.append(replace(fn, attrs=attrs))
        return PassResult(Module(functions, module.filename), obligations, bool(obligations), steps)
