"""`dedupe-operands`: a kernel that reads one value several times under the same indexing map
reads it once (a fused GELU reads its input five times).

Each repeated operand is dropped and the kernel's new body reads the earlier operand's
parameter in its place: the same element of the same value, so the kernel's meaning is
unchanged. Every rewritten kernel carries an exact (`fp`) equivalence obligation, the old
kernel with its old body against the new kernel (same result name) with its new body; bodies no
kernel uses afterwards are dropped. The C target loads each operand of a kernel once per point,
so this is where the number of loads is decided (the printer no longer merges operands).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gdv.ir.core import Function, Module, Op
from gdv.ir.obligation import Obligation
from gdv.ir.ops.kernel import bodies_used
from gdv.passes.base import Pass, PassResult, Step, drop_unused_bodies, fresh_function
from gdv.passes.lower_to_kernels import rewrite_obligation


def repeats(op: Op) -> tuple[list[int], dict[int, int]]:
    """The operands of kernel `op` to keep (the first read of each value under each map) and,
    per dropped operand, the kept operand it repeats."""
    first: dict[tuple, int] = {}
    keep: list[int] = []
    same: dict[int, int] = {}
    for k, (name, rows) in enumerate(zip(op.operands, op.attrs["maps"], strict=True)):
        key = (name, repr(rows))
        if key in first:
            same[k] = first[key]
        else:
            first[key] = k
            keep.append(k)
    return keep, same


def deduped_body(name: str, body: Function, keep: list[int], same: dict[int, int]) -> Function:
    """`body` renamed `name`, reading each dropped parameter's kept twin instead."""
    rename = {body.params[k].name: body.params[j].name for k, j in same.items()}
    ops = [
        Op(b.result, b.name, [rename.get(o, o) for o in b.operands], dict(b.attrs), b.type, b.loc)
        for b in body.ops
    ]
    return replace(
        body,
        name=name,
        params=[body.params[k] for k in keep],
        ops=ops,
        returns=[rename.get(r, r) for r in body.returns],
    )


@dataclass(frozen=True)
class DedupeOperands(Pass):
    name = "dedupe-operands"
    stage_in = "loop"

    def run(self, module: Module) -> PassResult:
        used_before = bodies_used(module.functions)
        functions = {f.name: f for f in module.functions}
        taken = set(functions)
        obligations: list[Obligation] = []
        steps: list[Step] = []
        for fn in module.functions:
            if fn.name in used_before:
                continue
            types = fn.types()
            ops = list(fn.ops)
            for pos, op in enumerate(ops):
                if op.name != "kernel" or op.attrs["body"] not in functions:
                    continue
                keep, same = repeats(op)
                if not same:
                    continue
                old_body = functions[op.attrs["body"]]
                name = fresh_function(f"{fn.name}.u", taken)
                body = deduped_body(name, old_body, keep, same)
                functions[name] = body
                locs = op.operand_locs
                new = Op(
                    op.result,
                    "kernel",
                    [op.operands[k] for k in keep],
                    {**op.attrs, "body": name, "maps": [op.attrs["maps"][k] for k in keep]},
                    op.type,
                    op.loc,
                    operand_locs=[locs[k] for k in keep] if len(locs) == len(op.operands) else [],
                )
                ops[pos] = new
                steps.append(
                    Step("rewrite", fn.name, pos, op.result, op.result, [op.result],
                         len(obligations), [name])
                )  # fmt: skip
                obligations.append(
                    rewrite_obligation(
                        self.name,
                        "merge-repeated",
                        len(obligations),
                        [op],
                        [new],
                        (op.result, op.result),
                        types,
                        [old_body, body],
                    )
                )
            functions[fn.name] = replace(fn, ops=ops)
        kept = drop_unused_bodies(module, functions, taken, steps)
        return PassResult(Module(kept, module.filename), obligations, bool(obligations), steps)
