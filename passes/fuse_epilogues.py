"""`fuse-epilogues`: a product kernel's elementwise consumer becomes the product's epilogue
(IR_SPEC.md, the loop stage's `epilogue`):

    %p = kernel(xs) {strategy = "product", body = f, ...}     // read once, by %c
    %c = kernel(.., %p, ..) {reduce = [], body = g}            // %p at c's own index
 -> %c = kernel(xs, ..) {strategy = "product", body = f', epilogue = e, ...}

with e(acc, xs.., ..) = g(.., acc, ..): the consumer's body applied to each folded value, its
other operands read at the product's out index (their maps over the consumer's loop dims
become maps over the product's out dims, 0 on its reduce dims). f' is f taking the appended
operands too (and ignoring them). A product that already has an epilogue gets the composition.

The consumer then runs on each tile of the product while the tile is in cache (a conv's bias
and activation, a residual add) instead of over the whole tensor afterwards: one pass over
memory less, and one intermediate tensor less in the plan. Values and rounding are the same ops
on the same elements, so each fusion carries an exact (`fp`) equivalence obligation, with the
bodies in scope.

Conditions: the product's result is read only by the consumer (and not returned), at the
consumer's own index (identity map, every time it is read); the consumer reduces nothing and has
the product's dtype and shape; its other operands are constant along the product's rows or its
columns (a per-channel bias or scale, a scalar), or vary along both with their last dim along
the product's innermost column dim (a residual: `RESIDUALS`); the fused bodies stay below
`MAX_BODY_OPS`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.obligation import Obligation
from gdv.ir.types import TensorType
from gdv.passes.base import (
    Pass,
    PassResult,
    Step,
    fresh_function,
    readers_and_types,
    rewrite_each_function,
)
from gdv.passes.fuse_kernels import MAX_BODY_OPS, _renamed_ops, identity_map
from gdv.passes.lower_to_kernels import rewrite_obligation


def lift_row(row: list[int], out: list[int], n: int) -> list[int]:
    """A map row over the consumer's loop dims (= the product's out dims, in order) as a row
    over the product's n loop dims: 0 on its reduce dims."""
    lifted = [0] * n + [row[-1]]
    for j, d in enumerate(out):
        lifted[d] = row[j]
    return lifted


RESIDUALS = True
"""A consumer's operand that varies along both the product's rows and its columns (a residual
add) fuses too, when its last dim runs along the product's innermost column dim: the epilogue
reads it one row of the finished row panel at a time, beside the output it writes. (When the
epilogue ran tile by tile, 16 x 16, it read 16 lines per tile out of cache, and a 64-channel
56x56 3x3 conv with bias, residual and relu ran 3-15% slower fused.) Measured on the 2-core
Zen 4 host (-O3, bound, ONNX path, two threads, both builds in one process, alternating blocks
of 5 calls with the two-vCPU probe of `benchmarks/two_threads.py` before each, medians, apart ->
fused, 2026-12-07, the same output bits): resnet18 18.162 -> 17.909 ms when the two vCPUs
shared a cache (333 blocks), 19.866 -> 19.498 when they did not (142), 44 -> 37 timed ops;
mobilenet_v2 4.560 -> 4.505 (540) and 7.191 -> 7.100 (416). A first form without the
last-dim condition (it also fused resnet18's last residual add, whose conv runs the channels
as its columns, reading the residual a column at a time) measured resnet18 17.743 -> 17.638 and
20.110 -> 20.054, mobilenet_v2 4.217 -> 4.178 and 6.991 -> 6.834, efficientnet_b0 6.670 ->
6.677 and 9.927 -> 9.900. The 2-layer BERT and MiniLM have no such consumer (their residual
adds feed a layer norm's row group)."""


def fusible_consumer(p: Op, c: Op, types: dict) -> bool:
    """Whether `c` may become product `p`'s epilogue (the uses of `p` are checked apart)."""
    a = c.attrs
    if c.name != "kernel" or a["reduce"] or a["combiner"] != "none" or "row_group" in a:
        return False
    if "fill" in a or "fill" in p.attrs:  # reads outside an operand: left as written
        return False
    if c.type.dtype != p.type.dtype or c.type.shape != p.type.shape:
        return False
    n = len(a["space"])
    reads = [m for v, m in zip(c.operands, a["maps"], strict=True) if v == p.result]
    if not (reads and n == p.type.rank and all(identity_map(m, n) for m in reads)):
        return False
    # The consumer's loop dim j is the product's out dim p.attrs["out"][j].
    position = {d: j for j, d in enumerate(p.attrs["out"])}
    rows = [position[d] for d in p.attrs["rows"]]
    cols = [position[d] for d in p.attrs["cols"]]
    for v, m in zip(c.operands, a["maps"], strict=True):
        if v == p.result:
            continue
        along = {j for row in m for j in range(n) if row[j]}
        if along & set(rows) and along & set(cols):
            # A tensor varying along both (a residual) is read row by row beside each finished
            # row panel; only where its rows run along the product's innermost column dim
            # (`RESIDUALS`): a transposed one would be read a column at a time.
            if not (RESIDUALS and m[-1] == [int(j == cols[-1]) for j in range(n + 1)]):
                return False
    return True


def epilogue_function(
    name: str,
    acc_type: TensorType,
    p_params: list[Param],
    old: Function | None,
    consumer: Function,
    reads: list[bool],
) -> Function:
    """The fused epilogue: (acc, the product's operands, the consumer's other operands) ->
    the consumer's body with its reads of the product (`reads[k]`) taken from `old`'s value
    (the product's existing epilogue) or from acc."""
    acc = Param("acc", acc_type)
    names: dict[str, str] = {}
    params = [acc]
    ops: list[Op] = []
    value = acc.name
    p_names = [f"p{k}.{q.name}" for k, q in enumerate(p_params)]
    params += [Param(v, q.type) for v, q in zip(p_names, p_params, strict=True)]
    if old is not None:
        old_names = {old.params[0].name: acc.name}
        old_names |= {q.name: v for q, v in zip(old.params[1:], p_names, strict=True)}
        ops += _renamed_ops(old.ops, old_names, "o.")
        value = old_names[old.returns[0]]
    for q, is_p in zip(consumer.params, reads, strict=True):
        if is_p:
            names[q.name] = value
        else:
            names[q.name] = f"c.{q.name}"
            params.append(Param(names[q.name], q.type))
    ops += _renamed_ops(consumer.ops, names, "c.")
    return Function(name, params, [acc_type], ops, [names[consumer.returns[0]]])


def widened_body(name: str, body: Function, extra: list[Param]) -> Function:
    """`body` taking `extra` parameters too, unused."""
    have = {q.name for q in body.params}
    params = list(body.params)
    for k, q in enumerate(extra):
        v = f"e{k}.{q.name}"
        while v in have:
            v += "_"
        have.add(v)
        params.append(Param(v, q.type))
    return Function(name, params, list(body.results), list(body.ops), list(body.returns))


@dataclass(frozen=True)
class FuseEpilogues(Pass):
    name = "fuse-epilogues"
    stage_in = "loop"

    def run(self, module: Module) -> PassResult:
        return rewrite_each_function(module, self._fuse_one)

    def _fuse_one(
        self,
        fn: Function,
        ops: list[Op],
        functions: dict[str, Function],
        taken: set[str],
        index: int,
        steps: list[Step],
    ) -> Obligation | None:
        """Fuse the first product and consumer pair of `ops` in place; its obligation, or
        None."""
        readers, types = readers_and_types(fn, ops)
        for p in ops:
            if p.name != "kernel" or p.attrs.get("strategy") != "product":
                continue
            if p.result in fn.returns or len(readers.get(p.result, [])) != 1:
                continue
            if any(p.attrs["space"][d] == 0 for d in p.attrs["reduce"]):
                continue  # an empty fold: no epilogue (IR_SPEC.md; found by gdv fuzz)
            (c,) = readers[p.result]
            if not fusible_consumer(p, c, types):
                continue
            p_body, c_body = functions[p.attrs["body"]], functions[c.attrs["body"]]
            old = functions[p.attrs["epilogue"]] if "epilogue" in p.attrs else None
            if len(p_body.ops) + len(c_body.ops) + (len(old.ops) if old else 0) > MAX_BODY_OPS:
                continue
            reads = [v == p.result for v in c.operands]
            extra = [x for x, r in zip(c.operands, reads, strict=True) if not r]
            extra_maps = [
                [lift_row(row, p.attrs["out"], len(p.attrs["space"])) for row in m]
                for m, r in zip(c.attrs["maps"], reads, strict=True)
                if not r
            ]
            extra_params = [q for q, r in zip(c_body.params, reads, strict=True) if not r]
            body = widened_body(fresh_function(f"{fn.name}.b", taken), p_body, extra_params)
            p_params = old.params[1:] if old is not None else p_body.params
            epi = epilogue_function(
                fresh_function(f"{fn.name}.e", taken),
                TensorType(p.type.dtype, ()),
                list(p_params),
                old,
                c_body,
                reads,
            )
            functions[body.name] = body
            functions[epi.name] = epi
            attrs = {
                **p.attrs,
                "body": body.name,
                "epilogue": epi.name,
                "maps": [*p.attrs["maps"], *extra_maps],
            }
            # The product's location: its work is the fold (a profile names the conv's line).
            fused = Op(c.result, "kernel", [*p.operands, *extra], attrs, c.type, p.loc or c.loc)
            scope = [p_body, c_body, body, epi] + ([old] if old is not None else [])
            ob = rewrite_obligation(
                self.name, "product-epilogue", index, [p, c], [fused], (c.result, c.result),
                types, scope,
            )  # fmt: skip
            pos = ops.index(c)
            ops[pos] = fused
            steps.append(
                Step(
                    "rewrite", fn.name, pos, c.result, c.result, [c.result], index,
                    [body.name, epi.name],
                )
            )  # fmt: skip
            ops.remove(p)
            steps.append(Step("remove", fn.name, removed=[p.result]))
            return ob
        return None
