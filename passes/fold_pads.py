"""`fold-pads`: a kernel reads a `pad`'s operand itself, with the pad's value outside its
bounds (the kernel's `fill` attribute, IR_SPEC.md section 7), and the pad goes.

`lower-to-kernels` turns a conv2d into a `pad` of its input and a contraction reading the
padded copy, and the ONNX importer a max pool into a `-inf` pad and window maxima.
onnxruntime's convolutions and pools read their padding in place; folded, the kernel reads the
unpadded input through the same maps shifted by the pad's low side, and every read outside the
input gives the pad's value: the same element at every point, so the same meaning.

A pad is folded into a kernel (without a `fill` yet) that reads it, at every operand that
reads it, when:
- the pad's result is read by that kernel alone and is not returned;
- the pad's operand is a value the function computes and does not return (so the memory plan
  places it in the arena, which the C target's masked reads need);
- the kernel is a loop nest (`NESTS`), or a product of `f32` with vectors of at least
  `FOLD_MIN_VECTOR_BYTES` where:
  - the pad is its column factor's operand (not the row factor's), read once;
  - the innermost column dim walks its last dim at stride 1 (a stride-1 convolution's input
    positions; at stride 2 the masked reads cost more than the pad: `FOLD_STRIDES`), over rows
    at least a micro-tile wide (`FOLD_MIN_WIDTH_TILES`).

Each fold carries an exact (`fp`) equivalence obligation, the pad and the kernel against the
new kernel (same result name), and its certificate is that rewrite and the pad's removal.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gdv.ir import products
from gdv.ir.core import Function, Module, Op
from gdv.ir.dtypes import DType
from gdv.ir.obligation import Obligation
from gdv.ir.ops.kernel import bodies_used
from gdv.passes.base import Pass, PassResult, Step
from gdv.passes.lower_to_kernels import rewrite_obligation


def uses(fn: Function) -> dict[str, int]:
    """How many times each value is read in `fn`: as an operand (once per operand slot) or
    returned."""
    count: dict[str, int] = {}
    for o in fn.ops:
        for v in o.operands:
            count[v] = count.get(v, 0) + 1
    for v in fn.returns:
        count[v] = count.get(v, 0) + 1
    return count


FOLD_MIN_VECTOR_BYTES = 64
"""A product folds a pad only with vectors of at least this many bytes (its `vector` lanes
times 4): the C target reads a filled column factor in place only there (masked runs; with
narrower vectors it packs the column slivers, and a guarded packing cost more than the pad)."""


FOLD_STRIDES = (1,)
"""The strides (of the innermost column dim along the operand's last dim) at which a pad folds.
resnet18 at two threads (-O3, bound, both builds in one process, interleaved blocks of 20
calls with the two-vCPU probe before each, 2026-12-07): folded at stride 2 too, its stride-2
convs took 0.026-0.043 ms more in near rounds (most of their column slivers read through
masks), while their pads took 0.019-0.025 ms."""


FOLD_MIN_WIDTH_TILES = 1
"""A pad folds only where the image rows (the innermost column dim's extent) are at least this
many micro-tiles' NR columns wide: with narrower rows every column sliver holds padding lanes, all
read through masks. resnet18 at two threads (as for `FOLD_STRIDES`): its layer 3 convs (14
wide, NR 16) took 0.015-0.029 ms more folded, their pads 0.008."""


NESTS = True
"""Whether pads fold into loop nests (kernels that are no product) too: the C nest printer
reads a filled operand through a guard per read. resnet18 at two threads (-O3, bound, both
builds in one process, interleaved blocks of 20 calls with the two-vCPU probe before each,
2026-12-07): its max pool's -inf pad (0.103 ms in near rounds, 0.162 in far ones) goes, and
the max pool's row group, reading the stem's output through guards, takes 0.091 -> 0.165 ms
near and 0.471 -> 0.235 far. Since the C printer runs such a loop's interior without the
guards (`peeled_segments`) and max as three compares, the max pool's kernels take 0.096 ms
against 0.162 with the printer before both (resnet18, the same module printed by both, in one
process, profiled medians of 50 calls each, 2026-12-07). mobilenet_v2 and efficientnet_b0
have no pad that a nest reads (their depthwise convs pad inside the op)."""


def foldable(
    op: Op,
    ks: list[int],
    pad: Op,
    count: dict[str, int],
    stored: set[str],
    bodies: dict[str, Function],
) -> bool:
    """Whether pad `pad`, operands `ks` of kernel `op` (all its reads), folds into it (module
    docstring); `stored`: the values the plan will place in the arena (not parameters, not
    returned)."""
    if not (
        op.name == "kernel"
        and "fill" not in op.attrs
        and pad.name == "pad"
        and pad.operands[0] in stored
        and count.get(pad.result) == len(ks)
        and all(op.operands[k] == pad.result for k in ks)
        and op.attrs["body"] in bodies
    ):
        return False
    if op.attrs.get("strategy") != "product":
        return NESTS
    (k,) = ks
    if op.type.dtype is not DType.F32 or op.attrs.get("vector", 1) * 4 < FOLD_MIN_VECTOR_BYTES:
        return False
    body = bodies[op.attrs["body"]]
    x, y = products.factors(op.attrs, body)
    if k not in products.factor_operands(body, y) or k in products.factor_operands(body, x):
        return False
    # the innermost column dim walks the operand's last dim at a stride of FOLD_STRIDES, over
    # at least FOLD_MIN_WIDTH_TILES micro-tiles' width of columns
    inner = op.attrs["cols"][-1]
    return (
        op.attrs["maps"][k][-1][inner] in FOLD_STRIDES
        and op.attrs["space"][inner] >= FOLD_MIN_WIDTH_TILES * op.attrs["micro"][1]
    )


def folded(op: Op, ks: list[int], pad: Op) -> Op:
    """Kernel `op` reading pad `pad`'s operand in place of operands `ks`, with its value as
    their fill outside it (maps shifted back by the low padding)."""
    maps = list(op.attrs["maps"])
    low = pad.attrs["low"]
    operands = list(op.operands)
    locs = list(op.operand_locs)
    for k in ks:
        maps[k] = [[*row[:-1], row[-1] - lo] for row, lo in zip(maps[k], low, strict=True)]
        operands[k] = pad.operands[0]
        if len(locs) == len(operands) and pad.operand_locs:
            locs[k] = pad.operand_locs[0]
    fills = [[k, pad.attrs["value"]] for k in ks]
    return Op(
        op.result,
        "kernel",
        operands,
        {**op.attrs, "maps": maps, "fill": fills},
        op.type,
        op.loc,
        operand_locs=locs,
    )


@dataclass(frozen=True)
class FoldPads(Pass):
    name = "fold-pads"
    stage_in = "loop"

    def run(self, module: Module) -> PassResult:
        bodies = bodies_used(module.functions)
        functions: list[Function] = []
        obligations: list[Obligation] = []
        steps: list[Step] = []
        for fn in module.functions:
            if fn.name in bodies:
                functions.append(fn)
                continue
            types = fn.types()
            ops = list(fn.ops)
            count = uses(fn)
            stored = {o.result for o in ops} - set(fn.returns)
            bodies = {f.name: f for f in module.functions}
            pos = 0
            while pos < len(ops):
                op = ops[pos]
                producers = {o.result: (i, o) for i, o in enumerate(ops)}
                hit = None
                for v in dict.fromkeys(op.operands):
                    ks = [k for k, u in enumerate(op.operands) if u == v]
                    if v in producers and foldable(op, ks, producers[v][1], count, stored, bodies):
                        hit = ks, producers[v]
                        break
                if hit is None:
                    pos += 1
                    continue
                ks, (at, pad) = hit
                new = folded(op, ks, pad)
                ops[pos] = new
                steps.append(
                    Step("rewrite", fn.name, pos, op.result, op.result, [op.result],
                         len(obligations))
                )  # fmt: skip
                obligations.append(
                    rewrite_obligation(
                        self.name,
                        "fold-pad",
                        len(obligations),
                        [pad, op],
                        [new],
                        (op.result, op.result),
                        types,
                        [f for f in module.functions if f.name == op.attrs["body"]]
                        + [f for f in module.functions if f.name == op.attrs.get("epilogue")],
                    )
                )
                del ops[at]
                steps.append(Step("remove", fn.name, removed=[pad.result]))
                pos = pos - 1 if at < pos else pos
            functions.append(replace(fn, ops=ops))
        return PassResult(Module(functions, module.filename), obligations, bool(obligations), steps)
