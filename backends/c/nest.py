"""One C function per loop nest: the `kernel` op's meaning (ir/ops/kernel.py) as nested loops.

The out dims run in the schedule's `order` (tiled by `tile`, remainders handled by a `min`
bound, the outermost loop under `#pragma omp parallel for` when it is a `parallel` dim and the
nest is large enough); for each output element the reduce dims then run innermost, in the
row-major order of `reduce` as listed, folding left from the first value with the combiner
(acc = body(first); acc = combine(acc, body(next))), exactly as the reference backend does.
An empty fold gives the combiner's identity. `accumulators = A > 1` folds A consecutive blocks
apart and then folds their results in order, as the reference does. The reduce dims are never
reordered or tiled, so the schedule never changes a result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gdv.backends.c.emit import CTYPE, Program, comment, ctype, identity, strides
from gdv.ir.core import Op
from gdv.ir.ops.kernel import COMBINER_OP
from gdv.ir.types import TensorType

Body = Callable[[list[str], list[str], str], str]
"""(C expressions of the loaded operand scalars, lines to append to, indent) -> the C
expression of the body's value."""

PARALLEL_MIN_POINTS = 1 << 15
"""Nests with fewer points than this run on one thread (thread start-up would dominate)."""


@dataclass
class Nest:
    """An affine loop nest: the `kernel` op's attributes."""

    space: list[int]
    maps: list[list[list[int]]]
    out: list[int]
    reduce: list[int]
    combiner: str
    schedule: dict[str, Any]


def _flat_index(rows: list[list[int]], t: TensorType, n: int) -> str:
    """C for the row-major flat index of `t` read at `rows . i + c` (i = i0, i1, ...)."""
    st = strides(t)
    coef = [0] * n
    const = 0
    for d, row in enumerate(rows):
        for j in range(n):
            coef[j] += st[d] * row[j]
        const += st[d] * row[-1]
    terms = [f"INT64_C({const})"] + [f"INT64_C({c}) * i{j}" for j, c in enumerate(coef) if c]
    return " + ".join(terms)


def combine_expr(prog: Program, combiner: str, dtype: Any, a: str, b: str) -> str:
    """C for the combiner applied to `a` and `b`: the elementwise op it folds with."""
    from gdv.backends.c.elementwise import scalar

    fake = Op("acc", COMBINER_OP[combiner], ["a", "b"], {}, TensorType(dtype, ()))
    return scalar(prog, fake, [a, b], [dtype, dtype])


def emit_nest(
    prog: Program,
    op: Op,
    nest: Nest,
    operand_types: list[TensorType],
    body: Body,
    note: str,
) -> None:
    """Emit the C function of `nest` computing `op`'s result into a new buffer, and its call."""
    result = op.type
    dtype = result.dtype
    t = ctype(dtype, op, prog.module)
    for ot in operand_types:
        ctype(ot.dtype, op, prog.module)
    name = prog.new_function()
    n = len(nest.space)
    params = [f"const {CTYPE[ot.dtype]} *restrict a{k}" for k, ot in enumerate(operand_types)]
    params.append(f"{t} *restrict r")
    lines = [f"/* {note} */", f"static void {name}({', '.join(params)})", "{"]
    order = [d for d in nest.schedule.get("order", list(range(n))) if d in nest.out]
    tile = nest.schedule.get("tile") or list(nest.space)
    parallel = set(nest.schedule.get("parallel", []))
    points = math.prod(nest.space)
    ind = "  "
    tiled = [d for d in order if 0 < tile[d] < nest.space[d]]
    first_loop = True

    def pragma(d: int) -> None:
        nonlocal first_loop
        if first_loop and d in parallel and points >= PARALLEL_MIN_POINTS:
            lines.append("#pragma omp parallel for")
        first_loop = False

    for d in tiled:
        pragma(d)
        lines.append(
            f"{ind}for (int64_t t{d} = 0; t{d} < INT64_C({nest.space[d]}); "
            f"t{d} += INT64_C({tile[d]}))"
        )
        ind += "  "
    for d in order:
        pragma(d)
        if d in tiled:
            hi = f"(t{d} + INT64_C({tile[d]}) < INT64_C({nest.space[d]}) ? t{d} + "
            hi += f"INT64_C({tile[d]}) : INT64_C({nest.space[d]}))"
            lines.append(f"{ind}for (int64_t i{d} = t{d}; i{d} < {hi}; i{d}++)")
        else:
            lines.append(f"{ind}for (int64_t i{d} = 0; i{d} < INT64_C({nest.space[d]}); i{d}++)")
        ind += "  "
    lines.append(f"{ind[:-2]}{{" if order else f"{ind}{{")
    if not order:
        ind += "  "
    out_st = strides(result)
    out_index = " + ".join(
        ["INT64_C(0)"] + [f"INT64_C({out_st[p]}) * i{d}" for p, d in enumerate(nest.out)]
    )

    def point(indent: str, acc: str | None, first: str | None) -> None:
        loads = []
        for k, ot in enumerate(operand_types):
            lines.append(
                f"{indent}const {CTYPE[ot.dtype]} x{k} = a{k}[{_flat_index(nest.maps[k], ot, n)}];"
            )
            loads.append(f"x{k}")
        value = body(loads, lines, indent)
        if acc is None:
            lines.append(f"{indent}r[{out_index}] = {value};")
            return
        lines.append(f"{indent}const {t} val = {value};")
        step = combine_expr(prog, nest.combiner, dtype, acc, "val")
        lines.append(f"{indent}if ({first}) {{ {acc} = val; {first} = 0; }}")
        lines.append(f"{indent}else {acc} = {step};")

    if not nest.reduce:
        point(ind, None, None)
    else:
        ident = identity(nest.combiner, dtype)
        blocks = nest.schedule.get("accumulators", 1)
        if blocks > 1:
            (d,) = nest.reduce
            size = nest.space[d] // blocks
            lines.append(f"{ind}{t} acc = {ident};")
            lines.append(f"{ind}for (int64_t b = 0; b < INT64_C({blocks}); b++) {{")
            inner = ind + "  "
            lines.append(f"{inner}{t} part = {ident};")
            lines.append(f"{inner}int first = 1;")
            lines.append(
                f"{inner}for (int64_t i{d} = b * INT64_C({size}); "
                f"i{d} < (b + 1) * INT64_C({size}); i{d}++) {{"
            )
            point(inner + "  ", "part", "first")
            lines.append(f"{inner}}}")
            whole = combine_expr(prog, nest.combiner, dtype, "acc", "part")
            lines.append(f"{inner}acc = b == 0 ? part : {whole};")
            lines.append(f"{ind}}}")
        else:
            lines.append(f"{ind}{t} acc = {ident};")
            lines.append(f"{ind}int first = 1;")
            inner = ind
            for d in nest.reduce:
                lines.append(
                    f"{inner}for (int64_t i{d} = 0; i{d} < INT64_C({nest.space[d]}); i{d}++)"
                )
                inner += "  "
            lines.append(f"{inner[:-2]}{{")
            point(inner, "acc", "first")
            lines.append(f"{inner[:-2]}}}")
        lines.append(f"{ind}r[{out_index}] = acc;")
    lines.append(f"{ind[:-2]}}}")
    lines.append("}")
    prog.functions.append("\n".join(lines) + "\n")
    prog.new_slot(op.result, op.type)
    args = [prog.var(o) for o in op.operands] + [prog.var(op.result)]
    prog.body.append(f"  {name}({', '.join(args)});  /* %{comment(op.result)} */")
