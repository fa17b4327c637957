"""C for conv2d (NCHW input, OIHW weights, cross-correlation), as the reference computes it:
the input is padded with +0.0 (0 for integers) and every padded position takes part as
0.0 * w; per output element the products, each rounded to the dtype, are folded left from the
first over c (within the output channel's group), then kh, then kw. An empty window gives 0.
The products and sums are the elementwise family's `scalar` code, so f16/bf16 values (bit
patterns) are multiplied and added in double and rounded once per step, as the reference does."""

from __future__ import annotations

from gdv.backends.c import matmul
from gdv.backends.c.elementwise import scalar
from gdv.backends.c.emit import CTYPE, Program, comment, ctype, strides, value_literal
from gdv.backends.c.registry import lowering
from gdv.backends.c.simd import blocking_override, l1_l2, vector_bytes, vector_registers
from gdv.ir import products
from gdv.ir.core import Function, Op, Param
from gdv.ir.dtypes import DType
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.types import TensorType

_PRODUCT_MIN_MACS = 1 << 12
"""Smaller convolutions keep the plain loop nest (packing would cost more than it saves)."""


def _as_product(prog: Program, op: Op) -> bool:
    """An f32/f64 conv2d with one group as the contraction kernel it is, run by the packed
    product of `backends/c/matmul.py`:

        r[n, o, y, x] = fold_add over (c, i, j) in row-major order of
                        xp[n, c, y*sh + i*dh, x*sw + j*dw] * w[o, c, i, j]

    where xp is the input padded with +0.0 (written first into a buffer of its own, so padded
    positions take part as 0.0 * w exactly as in the reference). The fold runs over (c, i, j)
    in the spec's order, one multiply and one add per step: bit-exact to the loop nest below.
    Returns False (nothing emitted) when the conv is not one."""
    types = prog.entry.types()
    xt, wt = (types[o] for o in op.operands)
    dtype = op.type.dtype
    if dtype not in (DType.F32, DType.F64) or xt.dtype != dtype or wt.dtype != dtype:
        return False
    if op.attrs["groups"] != 1 or op.type.num_elements == 0:
        return False
    n, c, h, wd = xt.shape
    o, _, kh, kw = wt.shape
    _, _, oh, ow = op.type.shape
    if n * o * oh * ow * c * kh * kw < _PRODUCT_MIN_MACS:
        return False
    (pt, pb), (pl, pr) = op.attrs["padding"]
    sh, sw = op.attrs["stride"]
    dh, dw = op.attrs["dilation"]
    padded = TensorType(dtype, (n, c, h + pt + pb, wd + pl + pr))
    source = op.operands[0]
    if (pt, pb, pl, pr) != (0, 0, 0, 0):
        source = _pad_input(prog, op, xt, padded, (pt, pl))

    # Space: 0 n, 1 o, 2 y, 3 x | 4 c, 5 i, 6 j; map rows: coefficients then the constant.
    def row(*coef: int) -> list[int]:
        return [*coef, 0]

    maps = [
        [
            row(1, 0, 0, 0, 0, 0, 0),
            row(0, 0, 0, 0, 1, 0, 0),
            row(0, 0, sh, 0, 0, dh, 0),
            row(0, 0, 0, sw, 0, 0, dw),
        ],
        [
            row(0, 1, 0, 0, 0, 0, 0),
            row(0, 0, 0, 0, 1, 0, 0),
            row(0, 0, 0, 0, 0, 1, 0),
            row(0, 0, 0, 0, 0, 0, 1),
        ],
    ]
    scalar_t = TensorType(dtype, ())
    body = Function(
        "conv2d.product",
        [Param("x", scalar_t), Param("w", scalar_t)],
        [scalar_t],
        [Op("p", "mul", ["x", "w"], {}, scalar_t)],
        ["p"],
    )
    attrs = {
        "body": body.name,
        "space": [n, o, oh, ow, c, kh, kw],
        "maps": maps,
        "out": [0, 1, 2, 3],
        "reduce": [4, 5, 6],
        "combiner": "add",
    }
    found = products.find(attrs, dtype, body)
    if found is None:
        return False
    # This product is the printer's own (no pass scheduled it): it sizes it for the host, with
    # the numbers select-products gets from the descriptor, and records every choice.
    vb = vector_bytes()
    plan = products.plan(
        attrs, dtype, body, found, vb, vector_registers(vb), l1_l2(), blocking_override()
    )
    attrs = {**attrs, "vector": max(1, vb // dtype.itemsize), **plan}
    prog.record(op, "strategy", "convolution as packed product", "conv.py: f32/f64 conv2d")
    prog.record(op, "vector-bytes", vb, "the host's width (a conv2d has no vector attribute)")
    prog.record(op, "micro-tile", plan["micro"], "gdv.ir.products.micro_tile for the host")
    prog.record(
        op, "blocking", plan["blocks"], "gdv.ir.products.blocking: [MC, KC, NC] from the caches"
    )
    prog.record(op, "threads", plan["split"], "gdv.ir.products.split")
    kernel = Op(op.result, "kernel", [source, op.operands[1]], attrs, op.type, op.loc)
    kernel.name_loc = op.name_loc
    matmul.emit(prog, kernel, [padded, wt], body)
    return True


def _pad_input(
    prog: Program, op: Op, xt: TensorType, padded: TensorType, before: tuple[int, int]
) -> str:
    """Copy the conv's input into a zero-filled padded buffer; the buffer's value name."""
    t = CTYPE[xt.dtype]
    n, c, h, wd = xt.shape
    _, _, hp, wp = padded.shape
    pt, pl = before
    zero = value_literal(0, xt.dtype)
    name = prog.new_function()
    prog.functions.append(
        f"""/* conv2d %{comment(op.result)}: its input padded with +0.0 */
static void {name}(const {t} *restrict x, {t} *restrict xp)
{{
  for (int64_t e = 0; e < INT64_C({padded.num_elements}); e++) xp[e] = {zero};
  for (int64_t p = 0; p < INT64_C({n * c}); p++)
    for (int64_t y = 0; y < INT64_C({h}); y++)
      memcpy(xp + (p * INT64_C({hp}) + y + INT64_C({pt})) * INT64_C({wp}) + INT64_C({pl}),
             x + (p * INT64_C({h}) + y) * INT64_C({wd}), sizeof({t}) * (size_t)INT64_C({wd}));
}}
"""
    )
    # A value name no program can spell (IR names have no spaces): no clash with the program's.
    value = f"conv2d padded input {len(prog.functions)}"
    prog.new_slot(value, padded)
    prog.record(op, "scratch-buffer", padded.num_elements, "the padded input, outside the plan")
    prog.body.append(f"  {name}({prog.var(op.operands[0])}, {prog.var(value)});")
    assert strides(padded)[0] == c * hp * wp
    return value


@lowering(OPS["conv2d"])
def _conv2d(prog: Program, op: Op) -> None:
    if _as_product(prog, op):
        return
    types = prog.entry.types()
    xt, wt = (types[o] for o in op.operands)
    dtype = op.type.dtype
    t = ctype(dtype, op, prog.module)
    if dtype.is_bool:
        raise prog.error(op, "conv2d of i1 values has no C lowering")
    n, c, h, wd = xt.shape
    o, cg, kh, kw = wt.shape
    og = o // op.attrs["groups"]
    (pt, _), (pl, _) = op.attrs["padding"]
    sh, sw = op.attrs["stride"]
    dh, dw = op.attrs["dilation"]
    _, _, oh, ow = op.type.shape
    scalar_t = TensorType(dtype, ())
    mul = scalar(prog, Op("p", "mul", ["a", "b"], {}, scalar_t), ["xv", "wv"], [dtype, dtype])
    add = scalar(prog, Op("s", "add", ["a", "b"], {}, scalar_t), ["acc", "p"], [dtype, dtype])
    zero = value_literal(0, dtype)
    name = prog.new_function()
    body = f"""/* conv2d %{comment(op.result)} */
static void {name}(const {t} *restrict x, const {t} *restrict w, {t} *restrict r)
{{
  for (int64_t in = 0; in < {n}; in++)
    for (int64_t io = 0; io < {o}; io++)
      for (int64_t oy = 0; oy < {oh}; oy++)
        for (int64_t ox = 0; ox < {ow}; ox++) {{
          {t} acc = {zero};
          int first = 1;
          for (int64_t ci = 0; ci < {cg}; ci++)
            for (int64_t i = 0; i < {kh}; i++)
              for (int64_t j = 0; j < {kw}; j++) {{
                const int64_t y = oy * {sh} + i * {dh} - {pt};
                const int64_t z = ox * {sw} + j * {dw} - {pl};
                const int64_t cx = (io / {max(1, og)}) * {cg} + ci;
                const {t} xv = (y >= 0 && y < {h} && z >= 0 && z < {wd})
                    ? x[((in * {c} + cx) * {h} + y) * {wd} + z] : {zero};
                const {t} wv = w[((io * {cg} + ci) * {kh} + i) * {kw} + j];
                const {t} p = {mul};
                if (first) {{ acc = p; first = 0; }}
                else acc = {add};
              }}
          r[((in * {o} + io) * {oh} + oy) * {ow} + ox] = acc;
        }}
}}
"""
    prog.functions.append(body)
    prog.new_slot(op.result, op.type)
    args = ", ".join([prog.var(v) for v in op.operands] + [prog.var(op.result)])
    prog.body.append(f"  {name}({args});  /* %{comment(op.result)} */")
