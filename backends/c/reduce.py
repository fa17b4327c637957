"""C for reduce_sum, reduce_max and reduce_min outside kernels: a loop nest whose body is the
element itself, folded left over the reduced axes in row-major order from the first element
(backends/c/nest.py), the empty fold giving 0, -inf / the dtype's minimum, +inf / its maximum.

cumsum and cumprod: a loop along the axis (backwards when `reverse`) per position of the other
dims, carrying the accumulator; each step is the `add` or `mul` expression of the dtype
(`scalar`, so f16/bf16 round once per step as the IR says), stored after the step, or before it
when `exclusive` (the first position then gets 0 or 1).

argsort: a stable merge sort of each row's positions (see `_argsort`)."""

from __future__ import annotations

import math

from gdv.backends.c.emit import (
    COMPUTE_CTYPE,
    NARROW,
    Program,
    comment,
    ctype,
    load,
    value_literal,
)
from gdv.backends.c.nest import Nest, emit_nest
from gdv.backends.c.registry import lowering
from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops.reduce import REDUCTIONS, SCAN_STEP, SCANS
from gdv.ir.types import TensorType

_COMBINER = {s.name: s.combiner.op for s in REDUCTIONS.specs()}


@lowering(*REDUCTIONS.specs())
def _reduce(prog: Program, op: Op) -> None:
    (src,) = op.operands
    x = prog.entry.types()[src]
    n = x.rank
    axes = sorted(op.attrs["axes"])
    kept = [d for d in range(n) if d not in axes]
    rows = [[int(j == d) for j in range(n)] + [0] for d in range(n)]
    if x.dtype.is_bool:
        raise prog.error(op, "a reduction of i1 values has no C lowering")
    nest = Nest(list(x.shape), [rows], kept, axes, _COMBINER[op.name], {})
    emit_nest(
        prog, op, nest, [x], lambda loads, lines, indent: loads[0], f"{op.name} %{comment(src)}"
    )


@lowering(*SCANS.specs())
def _scan(prog: Program, op: Op) -> None:
    from gdv.backends.c.elementwise import scalar

    (src,) = op.operands
    x = prog.entry.types()[src]
    dtype = x.dtype
    t = ctype(dtype, op, prog.module)
    axis = op.attrs["axis"]
    n = x.shape[axis]
    outer = math.prod(x.shape[:axis])
    inner = math.prod(x.shape[axis + 1 :])
    exclusive = bool(op.attrs.get("exclusive", False))
    reverse = bool(op.attrs.get("reverse", False))
    prog.new_slot(op.result, op.type)
    if op.type.num_elements == 0:
        prog.body.append(f"  /* {op.name} %{comment(op.result)}: no elements */")
        return
    step_op = Op("acc", SCAN_STEP[op.name], ["acc", "v"], {}, TensorType(dtype, ()))
    step = scalar(prog, step_op, ["acc", "v"], [dtype, dtype])
    empty = value_literal(0 if op.name == "cumsum" else 1, dtype)
    k = f"INT64_C({n - 1}) - s" if reverse else "s"
    at = f"(o * INT64_C({n}) + ({k})) * INT64_C({inner}) + j"
    name = prog.new_function()
    lines = [
        f"/* {op.name} %{comment(op.result)} */",
        f"static void {name}(const {t} *restrict a0, {t} *restrict r)",
        "{",
        f"  for (int64_t o = 0; o < INT64_C({outer}); o++)",
        f"    for (int64_t j = 0; j < INT64_C({inner}); j++) {{",
        "      int64_t s = 0;",
        f"      {t} acc = a0[{at}];",
        f"      r[{at}] = {empty if exclusive else 'acc'};",
        f"      for (s = 1; s < INT64_C({n}); s++) {{",
        f"        const {t} v = a0[{at}];",
    ]
    if exclusive:
        lines += [f"        r[{at}] = acc;", f"        acc = {step};"]
    else:
        lines += [f"        acc = {step};", f"        r[{at}] = acc;"]
    lines += ["      }", "    }", "}", ""]
    prog.functions.append("\n".join(lines))
    args = [prog.var(src), prog.var(op.result)]
    prog.body.append(f"  {name}({', '.join(args)});  /* %{comment(op.result)} */")


@lowering(OPS["argsort"])
def _argsort(prog: Program, op: Op) -> None:
    """A stable bottom-up merge sort of the positions of each row (O(n log n), a scratch of
    2n positions on the heap; -1 when it cannot be had): a run's element is taken from the
    right run only when its value comes strictly before (NaN above every number), so equal
    values keep position order."""
    from gdv.backends.c.elementwise import NARROW_HELPER
    from gdv.backends.c.matmul import _runtime_includes

    (src,) = op.operands
    x = prog.entry.types()[src]
    dtype = x.dtype
    t = ctype(dtype, op, prog.module)
    ct = COMPUTE_CTYPE[dtype]
    if dtype in NARROW:
        prog.helpers.add(NARROW_HELPER)
    axis = op.attrs["axis"]
    n = x.shape[axis]
    outer = math.prod(x.shape[:axis])
    inner = math.prod(x.shape[axis + 1 :])
    descending = bool(op.attrs.get("descending", False))
    prog.new_slot(op.result, op.type)
    if op.type.num_elements == 0:
        prog.body.append(f"  /* argsort %{comment(op.result)}: no elements */")
        return
    _runtime_includes(prog)
    rel = ">" if descending else "<"
    before = "(a " + rel + " b)"
    if dtype.is_float:  # a NaN is above every number
        above = "(isnan(a) && !isnan(b))" if descending else "(!isnan(a) && isnan(b))"
        before = f"({before} || {above})"
    at = f"base + {{}} * INT64_C({inner})"
    name = prog.new_function()
    lines = [
        f"/* argsort %{comment(op.result)} */",
        f"static int {name}(const {t} *restrict a0, int64_t *restrict r)",
        "{",
        f"  int64_t *buf = malloc(sizeof(int64_t) * (size_t)INT64_C({2 * n}));",
        "  if (!buf) return 1;",
        f"  for (int64_t o = 0; o < INT64_C({outer}); o++)",
        f"    for (int64_t j = 0; j < INT64_C({inner}); j++) {{",
        f"      const int64_t base = o * INT64_C({n * inner}) + j;",
        f"      int64_t *from = buf, *to = buf + INT64_C({n});",
        f"      for (int64_t s = 0; s < INT64_C({n}); s++) from[s] = s;",
        f"      for (int64_t w = 1; w < INT64_C({n}); w *= 2) {{",
        f"        for (int64_t lo = 0; lo < INT64_C({n}); lo += 2 * w) {{",
        f"          const int64_t mid = lo + w < INT64_C({n}) ? lo + w : INT64_C({n});",
        f"          const int64_t hi = lo + 2 * w < INT64_C({n}) ? lo + 2 * w : INT64_C({n});",
        "          int64_t p = lo, q = mid, d = lo;",
        "          while (p < mid && q < hi) {",
        f"            const {ct} a = {load('a0[' + at.format('from[q]') + ']', dtype)};",
        f"            const {ct} b = {load('a0[' + at.format('from[p]') + ']', dtype)};",
        f"            to[d++] = {before} ? from[q++] : from[p++];",
        "          }",
        "          while (p < mid) to[d++] = from[p++];",
        "          while (q < hi) to[d++] = from[q++];",
        "        }",
        "        int64_t *swap = from;",
        "        from = to;",
        "        to = swap;",
        "      }",
        f"      for (int64_t s = 0; s < INT64_C({n}); s++) r[{at.format('s')}] = from[s];",
        "    }",
        "  free(buf);",
        "  return 0;",
        "}",
        "",
    ]
    prog.functions.append("\n".join(lines))
    args = [prog.var(src), prog.var(op.result)]
    prog.body.append(
        f"  if ({name}({', '.join(args)}) != 0) return -1;  /* %{comment(op.result)}; "
        "-1: out of memory */"
    )
