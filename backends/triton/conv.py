"""The Triton kernel of a `conv2d` that stays an op at the loop stage (lower-to-kernels keeps a
small or strided convolution that is not a product): one lane per output element, its products
folded left exactly as IR_SPEC says (over the input channels of the output channel's group,
then KH, then KW, starting from the first product; a padded tap is +0.0 (0) and takes part,
so 0.0 * inf gives NaN), each product and sum rounded to the dtype."""

from __future__ import annotations

import math

from gdv.backends.triton.elementwise import call, round_to
from gdv.backends.triton.emit import (
    INDEX_LIMIT,
    POINTER,
    TL,
    TORCH,
    KernelInfo,
    Program,
    check_dtype,
    comment,
    compute,
)
from gdv.backends.triton.registry import host
from gdv.ir.core import Op
from gdv.ir.dtypes import DType
from gdv.ir.ops import REGISTRY as OPS

CONV_LANES = 128
"""Outputs per program."""


@host(OPS["conv2d"])
def _conv2d(prog: Program, op: Op) -> None:
    types = prog.types()
    if "epilogue" in op.attrs:
        raise prog.error(op, "a conv2d with an epilogue has no Triton lowering")
    xt, wt = (types[o] for o in op.operands)
    dtype = op.type.dtype
    for t in (xt, wt, op.type):
        check_dtype(prog.module, op, t.dtype)
        if t.num_elements > INDEX_LIMIT:
            raise prog.error(op, f"a tensor of {t.num_elements} elements exceeds 32-bit indices")
    if xt.dtype is not dtype or wt.dtype is not dtype:
        raise prog.error(op, "a convolution whose operands and result differ in dtype")
    if dtype.is_bool:
        raise prog.error(op, "a convolution of i1 values has no meaning")
    n, c, h, w = xt.shape
    o, cg, kh, kw = wt.shape
    g = op.attrs["groups"]
    og = o // g
    (pt, _), (pl, _) = op.attrs["padding"]
    sh, sw = op.attrs["stride"]
    dh, dw = op.attrs["dilation"]
    _, _, oh, ow = op.type.shape
    total = op.type.num_elements
    taps = cg * kh * kw
    name = f"_k{len(prog.infos)}"
    note = (
        f"conv2d %{comment(op.result)}: x {list(xt.shape)}, w {list(wt.shape)}, stride "
        f"{[sh, sw]}, padding {op.attrs['padding']}, dilation {[dh, dw]}, groups {g}"
    )
    zero = "0.0" if dtype.is_float else "0"

    def load(ptr: str, offset: str, mask: str) -> str:
        text = f"tl.load({ptr} + ({offset}), mask={mask}, other={zero})"
        if dtype is DType.BF16:
            return call(prog, "_widen_bf16", text)
        if compute(dtype) is not dtype:
            return f"{text}.to({TL[compute(dtype)]})"
        return text

    def product(t: str, indent: str) -> list[str]:
        return [
            f"{indent}ci = {t} // {kh * kw}",
            f"{indent}ki = ({t} // {kw}) % {kh}",
            f"{indent}kj = {t} % {kw}",
            f"{indent}yy = oy * {sh} + ki * {dh} - {pt}",
            f"{indent}xx = ox * {sw} + kj * {dw} - {pl}",
            f"{indent}inb = m & (yy >= 0) & (yy < {h}) & (xx >= 0) & (xx < {w})",
            f"{indent}xv = "
            + load("x0", f"((bn * {c} + grp * {cg} + ci) * {h} + yy) * {w} + xx", "inb"),
            f"{indent}wv = " + load("x1", f"((oc * {cg} + ci) * {kh} + ki) * {kw} + kj", "m"),
            f"{indent}p = {round_to(prog, dtype, 'xv * wv')}",
        ]

    lines = [
        "@triton.jit",
        f"def {name}(y, x0, x1, LANES: tl.constexpr):",
        f"    # {note}",
        "    pid = tl.program_id(0)",
        f"    i = pid * {CONV_LANES} + tl.arange(0, {CONV_LANES})",
        f"    m = i < {total}",
        f"    bn = i // {o * oh * ow}",
        f"    oc = (i // {oh * ow}) % {o}",
        f"    oy = (i // {ow}) % {oh}",
        f"    ox = i % {ow}",
        f"    grp = oc // {og}",
    ]
    if taps == 0:
        lines.append(f"    acc = tl.full([{CONV_LANES}], {zero}, {TL[compute(dtype)]})")
    else:
        lines += product("0", "    ")
        lines.append("    acc = p")
        if taps > 1:
            lines.append(f"    for t in range(1, {taps}):")
            lines += product("t", "        ")
            lines.append(f"        acc = {round_to(prog, dtype, 'acc + p')}")
    result = "acc"
    if dtype is DType.BF16:
        result = call(prog, "_narrow_bf16", result)
    elif compute(dtype) is not dtype:
        result = f"{result}.to({TL[dtype]})"
    lines.append(f"    tl.store(y + i, {result}, mask=m)")
    prog.kernels.append("\n".join(lines) + "\n")
    grid = max(1, math.ceil(total / CONV_LANES))
    num_warps = 4
    signature = {"y": POINTER[dtype], "x0": POINTER[dtype], "x1": POINTER[dtype]}
    signature["LANES"] = "constexpr"
    prog.infos.append(KernelInfo(name, signature, CONV_LANES, num_warps, grid, note))
    prog.choose(
        op,
        "launch",
        {"grid": grid, "lanes": CONV_LANES, "num_warps": num_warps},
        "a convolution kept as an op: one lane per output element, its taps folded in order",
    )
    y = prog.var(op.result)
    prog.launcher.append(f"    # {note}")
    prog.launcher.append(
        f"    {y} = torch.empty({tuple(op.type.shape)}, dtype={TORCH[dtype]}, device=device)"
    )
    if total:
        args = ", ".join([y, *[prog.var(v) for v in op.operands]])
        prog.launcher.append(
            f"    {name}[({grid},)]({args}, LANES={CONV_LANES}, num_warps={num_warps}, **LAUNCH)"
        )
