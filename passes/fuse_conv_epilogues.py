"""`fuse-conv-epilogues`: a conv2d op's elementwise consumer becomes the conv's epilogue
(IR_SPEC.md, conv2d's `epilogue`, since gdv 0.8):

    %d = conv2d(x, w, es..) {epilogue? = e0, ...}   // read once, by %c
    %c = kernel(.., %d, ..) {reduce = [], body = g}  // %d at c's own index
 -> %c = conv2d(x, w, es.., fs..) {epilogue = e, ...}

with e(acc, es.., fs..) = g(.., e0(acc, es..) or acc, ..): the consumer's body applied to each
output of the conv, its other operands `fs` read at the output's channel (one value per output
channel, or a scalar). The conv2d ops left at the loop stage are the ones `lower-to-kernels`
keeps (depthwise convs, the squeeze-excite block's 1x1 convs over one position); their
activation then runs on each plane of outputs while it is in cache, instead of in a kernel of
its own (efficientnet_b0's SiLU after every depthwise conv) or in the packing of the next
product, once per element it packs (mobilenet_v2's ReLU6 before every projection, which then
reads the conv's output in place). `fuse-kernels` leaves such a consumer out of a reducing
kernel for this pass (`FuseKernels.conv_epilogues`). Values and rounding are the same ops on
the same elements, so each fusion carries an exact (`fp`) equivalence obligation, with the
bodies in scope.

Conditions: the conv's result is read only by the consumer (and not returned), at the
consumer's own index every time; the consumer reduces nothing, has the conv's type, and reads
its other operands as described; the fused epilogue stays below `MAX_BODY_OPS`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gdv.ir.core import Function, Module, Op
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
from gdv.passes.dedupe_operands import deduped_body, splat_constants
from gdv.passes.fuse_epilogues import epilogue_function
from gdv.passes.fuse_kernels import MAX_BODY_OPS, conv_consumer
from gdv.passes.lower_to_kernels import rewrite_obligation


@dataclass(frozen=True)
class FuseConvEpilogues(Pass):
    name = "fuse-conv-epilogues"
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
        """Fuse the first conv2d and consumer pair of `ops` in place; its obligation, or
        None."""
        readers, types = readers_and_types(fn, ops)
        producers = {o.result: o for o in ops}
        for d in ops:
            if d.name != "conv2d" or d.result in fn.returns:
                continue
            if len(readers.get(d.result, [])) != 1:
                continue
            (c,) = readers[d.result]
            if not conv_consumer(d, c, types, functions):
                continue
            c_body = functions[c.attrs["body"]]
            old = functions[d.attrs["epilogue"]] if "epilogue" in d.attrs else None
            if len(c_body.ops) + (len(old.ops) if old else 0) > MAX_BODY_OPS:
                continue
            # A splat constant the consumer reads (relu6's 0 and 6) becomes a constant of the
            # epilogue, a literal to the printer (as `dedupe-operands` does for kernels).
            constants = splat_constants(c, producers)
            keep = [k for k in range(len(c.operands)) if k not in constants]
            sunk = deduped_body(c_body.name, c_body, keep, {}, constants)
            operands = [c.operands[k] for k in keep]
            reads = [v == d.result for v in operands]
            extra = [x for x, r in zip(operands, reads, strict=True) if not r]
            epi = epilogue_function(
                fresh_function(f"{fn.name}.c", taken),
                TensorType(d.type.dtype, ()),
                list(old.params[1:]) if old is not None else [],
                old,
                sunk,
                reads,
            )
            functions[epi.name] = epi
            attrs = {**d.attrs, "epilogue": epi.name}
            # The conv's location: its work is the fold (a profile names the conv's line).
            fused = Op(c.result, "conv2d", [*d.operands, *extra], attrs, c.type, d.loc or c.loc)
            scope = [c_body, epi] + ([old] if old is not None else [])
            read = list({k.result: k for k in constants.values()}.values())
            ob = rewrite_obligation(
                self.name, "conv-epilogue", index, [*read, d, c], [fused], (c.result, c.result),
                types, scope,
            )  # fmt: skip
            pos = ops.index(c)
            ops[pos] = fused
            steps.append(
                Step("rewrite", fn.name, pos, c.result, c.result, [c.result], index, [epi.name])
            )
            ops.remove(d)
            steps.append(Step("remove", fn.name, removed=[d.result]))
            return ob
        return None
