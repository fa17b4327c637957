"""C for the contract family: a `dot` left outside a kernel (the pipeline makes dots kernels at
-O1 and above) is one plain sequential fold per output element, exactly as IR_SPEC.md section 3
and the reference say: p[k] = convert(a[k], acc) * convert(b[k], acc), rounded in the `acc`
dtype (wrapping for integers); acc = p[first]; acc = acc + p[next] over the contraction
positions in row-major order of the contracting dims as `lhs_contract` lists them; the result
is convert(acc). An empty contraction gives 0 (+0.0). The conversions, products and sums are
the elementwise family's C code (`convert_expr`, `scalar`), so f16/bf16 accumulations round
once per step in their dtype as the reference's `Working` does."""

from __future__ import annotations

from gdv.backends.c.elementwise import convert_expr, convert_helpers, scalar
from gdv.backends.c.emit import Program, comment, ctype, strides, value_literal
from gdv.backends.c.registry import lowering
from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.types import TensorType


def _index(rows: list[str], st: list[int]) -> str:
    """C for the flat row-major index whose dim d is read at loop variable rows[d]."""
    return " + ".join(
        ["INT64_C(0)"] + [f"INT64_C({s}) * {v}" for v, s in zip(rows, st, strict=True)]
    )


@lowering(OPS["dot"])
def _dot(prog: Program, op: Op) -> None:
    a_t, b_t = (prog.entry.types()[o] for o in op.operands)
    src, res = a_t.dtype, op.type.dtype
    acc = op.attrs.get("acc") or res
    ta, tr, tacc = (ctype(d, op, prog.module) for d in (src, res, acc))
    lb, rb = list(op.attrs["lhs_batch"]), list(op.attrs["rhs_batch"])
    lc, rc = list(op.attrs["lhs_contract"]), list(op.attrs["rhs_contract"])
    a_free = [d for d in range(a_t.rank) if d not in lb and d not in lc]
    b_free = [d for d in range(b_t.rank) if d not in rb and d not in rc]
    # Loop variables: o0.. over the result dims (batch, A's free, B's free), c0.. over the
    # contracting dims in lhs_contract's order (outermost first: row-major).
    a_rows, b_rows = [""] * a_t.rank, [""] * b_t.rank
    for j, (da, db) in enumerate(zip(lb, rb, strict=True)):
        a_rows[da] = b_rows[db] = f"o{j}"
    for j, d in enumerate(a_free):
        a_rows[d] = f"o{len(lb) + j}"
    for j, d in enumerate(b_free):
        b_rows[d] = f"o{len(lb) + len(a_free) + j}"
    for j, (da, db) in enumerate(zip(lc, rc, strict=True)):
        a_rows[da] = b_rows[db] = f"c{j}"
    scalar_t = TensorType(acc, ())
    prog.helpers.update(convert_helpers(src, acc) | convert_helpers(acc, res))
    xa, xb = convert_expr("x", src, acc), convert_expr("y", src, acc)
    mul = scalar(prog, Op("p", "mul", ["a", "b"], {}, scalar_t), ["xa", "xb"], [acc, acc])
    add = scalar(prog, Op("s", "add", ["a", "b"], {}, scalar_t), ["s", "p"], [acc, acc])
    name = prog.new_function()
    lines = [
        f"/* dot %{comment(op.result)} */",
        f"static void {name}(const {ta} *restrict a, const {ta} *restrict b, {tr} *restrict r)",
        "{",
    ]
    ind = "  "
    for j, size in enumerate(op.type.shape):
        lines.append(f"{ind}for (int64_t o{j} = 0; o{j} < INT64_C({size}); o{j}++)")
        ind += "  "
    lines += [f"{ind}{{", f"{ind}  {tacc} s = {value_literal(0, acc)};", f"{ind}  int first = 1;"]
    inner = ind + "  "
    for j, d in enumerate(lc):
        lines.append(f"{inner}for (int64_t c{j} = 0; c{j} < INT64_C({a_t.shape[d]}); c{j}++)")
        inner += "  "
    lines += [
        f"{inner}{{",
        f"{inner}  const {ta} x = a[{_index(a_rows, strides(a_t))}];",
        f"{inner}  const {ta} y = b[{_index(b_rows, strides(b_t))}];",
        f"{inner}  const {tacc} xa = {xa}, xb = {xb};",
        f"{inner}  const {tacc} p = {mul};",
        f"{inner}  if (first) {{ s = p; first = 0; }}",
        f"{inner}  else s = {add};",
        f"{inner}}}",
    ]
    out = _index([f"o{j}" for j in range(op.type.rank)], strides(op.type))
    result = value_literal(0, res) + " : " + convert_expr("s", acc, res)
    lines += [f"{ind}  r[{out}] = first ? {result};", f"{ind}}}", "}", ""]
    prog.functions.append("\n".join(lines))
    prog.new_slot(op.result, op.type)
    args = [prog.var(o) for o in op.operands] + [prog.var(op.result)]
    prog.body.append(f"  {name}({', '.join(args)});  /* %{comment(op.result)} */")
