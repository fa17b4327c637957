"""C for the loop stage's `kernel` op: one C function per kernel, its scalar body inlined op by
op with the C code of `backends/c/elementwise.py`. A kernel with `strategy = "product"` (set
by the `select-products` pass, with its roles, micro-tile, blocks and thread split) becomes a
packed, register-blocked matrix product (`backends/c/matmul.py`); every other kernel is a loop
nest (`backends/c/nest.py`). Both keep the IR's fold order exactly; the printer chooses
neither."""

from __future__ import annotations

from gdv.backends.c import matmul
from gdv.backends.c.elementwise import bind_scalar
from gdv.backends.c.emit import CTYPE, Program, attr_literal, comment, ctype
from gdv.backends.c.nest import Nest, emit_nest
from gdv.backends.c.registry import lowering
from gdv.ir.core import Function, Op
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops.kernel import BODY_OPS, fills_of

SCHEDULE_KEYS = ("tile", "order", "vector", "parallel", "accumulators", "lanes", "row_group")


def body_code(prog: Program, body: Function):
    """The nest body computing `body` (rank-0 ops) from the loaded operand scalars."""

    def emit(loads: list[str], lines: list[str], indent: str) -> str:
        env = {p.name: (x, p.type.dtype) for p, x in zip(body.params, loads, strict=True)}
        for k, b in enumerate(body.ops):
            if b.name not in BODY_OPS or b.type.rank != 0:
                raise prog.error(b, "only scalar elementwise ops may appear in a kernel body")
            bind_scalar(prog, b, env, lines, indent, f"s{k}")
        (name,) = body.returns
        return env[name][0]

    return emit


@lowering(OPS["kernel"])
def _kernel(prog: Program, op: Op) -> None:
    body = prog.module.function(op.attrs["body"])
    if body is None:
        raise prog.error(op, "its body function is not in the module")
    types = prog.entry.types()
    operand_types = [types[o] for o in op.operands]
    for t in [op.type, *operand_types]:
        ctype(t.dtype, op, prog.module)
    assert all(t.dtype in CTYPE for t in operand_types)
    nest = Nest(
        list(op.attrs["space"]),
        op.attrs["maps"],
        list(op.attrs["out"]),
        list(op.attrs["reduce"]),
        op.attrs["combiner"],
        {k: op.attrs[k] for k in SCHEDULE_KEYS if k in op.attrs},
        {k: attr_literal(v, operand_types[k].dtype) for k, v in fills_of(op.attrs).items()},
        local={
            k: prog.local[v][0] for k, v in [*enumerate(op.operands), (-1, op.result)]
            if v in prog.local
        },
    )  # fmt: skip
    if op.attrs.get("strategy") == "product":
        matmul.emit(prog, op, operand_types, body)
        return
    if "contract" in op.attrs:
        raise prog.error(
            op, 'contract = "fma" runs only in a product (strategy = "product") on this target'
        )
    if "epilogue" in op.attrs:
        raise prog.error(
            op,
            'an epilogue runs only in a product (strategy = "product") on this target '
            "(compile at -O1 or above: select-products makes the kernel one)",
        )
    note = f"kernel %{comment(op.result)} body @{comment(op.attrs['body'])}"
    emit_nest(prog, op, nest, operand_types, body_code(prog, body), note, function=body)
