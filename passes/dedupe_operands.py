"""`dedupe-operands`: a kernel that reads one value several times under the same indexing map
reads it once (a fused GELU reads its input five times).

Each repeated operand is dropped and the kernel's new body reads the earlier operand's
parameter in its place: the same element of the same value, so the kernel's meaning is
unchanged. Every rewritten kernel carries an exact (`fp`) equivalence obligation, the old
kernel with its old body against the new kernel (same result name) with its new body; bodies no
kernel uses afterwards are dropped. The C target loads each operand of a kernel once per point,
so this is where the number of loads is decided (the printer no longer merges operands).

An operand that is a splat `constant` (a scalar `value`, the 0 and 6 of every relu6 clip,
shared by all the kernels after CSE) is not read at all: the new body computes it with a
rank-0 `constant` of the same value, and the claim's source holds the constant op, so the
obligation is still exact equivalence. A constant in the body is a literal to the C printer,
which then prints max/min against it as one compare (`backends/c/elementwise.py`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

from gdv.ir.core import Function, Module, Op
from gdv.ir.obligation import Obligation
from gdv.ir.ops.kernel import bodies_used
from gdv.passes.base import Pass, PassResult, Step, drop_unused_bodies, fresh_function
from gdv.passes.lower_to_kernels import rewrite_obligation


def splat_constants(op: Op, producers: dict[str, Op]) -> dict[int, Op]:
    """The operands of kernel `op` that a `constant` with a scalar (splat) value computes, by
    position, with that constant op."""
    out = {}
    for k, name in enumerate(op.operands):
        p = producers.get(name)
        if p is not None and p.name == "constant" and not isinstance(p.attrs["value"], list):
            out[k] = p
    return out


def repeats(op: Op, skip: Collection[int] = ()) -> tuple[list[int], dict[int, int]]:
    """The operands of kernel `op` to keep (the first read of each value under each map) and,
    per dropped operand, the kept operand it repeats; operands in `skip` are neither."""
    first: dict[tuple, int] = {}
    keep: list[int] = []
    same: dict[int, int] = {}
    for k, (name, rows) in enumerate(zip(op.operands, op.attrs["maps"], strict=True)):
        if k in skip:
            continue
        key = (name, repr(rows))
        if key in first:
            same[k] = first[key]
        else:
            first[key] = k
            keep.append(k)
    return keep, same


def deduped_body(
    name: str,
    body: Function,
    keep: list[int],
    same: dict[int, int],
    constants: dict[int, Op] | None = None,
) -> Function:
    """`body` renamed `name`, reading each dropped parameter's kept twin instead, and computing
    each parameter in `constants` (position -> splat `constant` op) as a rank-0 constant."""
    rename = {body.params[k].name: body.params[j].name for k, j in same.items()}
    sunk = [
        Op(body.params[k].name, "constant", [], {"value": c.attrs["value"]}, body.params[k].type)
        for k, c in sorted((constants or {}).items())
    ]
    ops = sunk + [
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
            producers = {o.result: o for o in ops}
            for pos, op in enumerate(ops):
                if op.name != "kernel" or op.attrs["body"] not in functions or "fill" in op.attrs:
                    continue
                constants = splat_constants(op, producers)
                keep, same = repeats(op, constants)
                if not same and not constants:
                    continue
                old_body = functions[op.attrs["body"]]
                name = fresh_function(f"{fn.name}.u", taken)
                body = deduped_body(name, old_body, keep, same, constants)
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
                read = list({c.result: c for c in constants.values()}.values())
                obligations.append(
                    rewrite_obligation(
                        self.name,
                        "sink-constants" if constants else "merge-repeated",
                        len(obligations),
                        [*read, op],
                        [new],
                        (op.result, op.result),
                        types,
                        [old_body, body],
                    )
                )
            functions[fn.name] = replace(fn, ops=ops)
        kept = drop_unused_bodies(module, functions, taken, steps)
        return PassResult(Module(kept, module.filename), obligations, bool(obligations), steps)
