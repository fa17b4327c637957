"""Convolution: conv2d (cross-correlation, NCHW x OIHW), with an optional epilogue.

`epilogue = "E"` (since gdv 0.8, issue 16; a compatible addition) names a function of the
module applied to each output: out[n,o,i,j] = E(sum, e_0[o], ..., e_m[o]), the sum being the
conv's, the e_k the operands after the weight (each of shape [O], or a scalar read as itself).
E takes the result's dtype first, then one rank-0 parameter per extra operand, returns the
result's dtype and holds only scalar elementwise ops and constants, as a kernel's epilogue does
(`gdv.ir.ops.kernel.check_kernel_bodies` checks it). `fuse-conv-epilogues` puts a conv's
elementwise consumer there (a depthwise conv's bias and activation) on CPU targets.
"""

from __future__ import annotations

from typing import Any

from gdv.ir.ops import (
    AttrSpec,
    OpSpec,
    OpTypeError,
    kind_int,
    kind_int_list,
    kind_int_pairs,
    register,
)
from gdv.ir.ops._rules import check_length
from gdv.ir.ops.kernel import kind_string
from gdv.ir.types import TensorType


def conv2d_output_hw(x: TensorType, w: TensorType, attrs: dict[str, Any]) -> tuple[int, int]:
    (pt, pb), (pl, pr) = attrs["padding"]
    (sh, sw), (dh, dw) = attrs["stride"], attrs["dilation"]
    eff_h = x.shape[2] + pt + pb - dh * (w.shape[2] - 1) - 1
    eff_w = x.shape[3] + pl + pr - dw * (w.shape[3] - 1) - 1
    return eff_h // sh + 1, eff_w // sw + 1


def _infer_conv2d(
    types: list[TensorType], attrs: dict[str, Any], written: TensorType
) -> TensorType:
    x, w, *extra = types
    if x.rank != 4:
        raise OpTypeError(f"conv2d input must be N,C,H,W (rank 4), operand 1 is {x}", 0)
    if w.rank != 4:
        raise OpTypeError(f"conv2d weight must be O,C/groups,KH,KW (rank 4), operand 2 is {w}", 1)
    if w.dtype != x.dtype:
        raise OpTypeError(f"operand 2 is {w}, expected dtype {x.dtype} like operand 1 ({x})", 1)
    if not (x.dtype.is_float or x.dtype.is_int):
        raise OpTypeError(f"conv2d takes float or integer operands, operand 1 is {x}", 0)
    check_length(attrs["stride"], 2, "stride", "[sh, sw]")
    check_length(attrs["dilation"], 2, "dilation", "[dh, dw]")
    check_length(attrs["padding"], 2, "padding", "[[top, bottom], [left, right]]")
    for name in ("stride", "dilation"):
        if any(v < 1 for v in attrs[name]):
            raise OpTypeError(f"{name} {attrs[name]} must be >= 1", attr=name)
    if any(v < 0 for pair in attrs["padding"] for v in pair):
        raise OpTypeError(f"padding {attrs['padding']} has a negative entry", attr="padding")
    g = attrs["groups"]
    n, c = x.shape[0], x.shape[1]
    o = w.shape[0]
    if g < 1 or c % g or o % g:
        raise OpTypeError(
            f"groups {g} must be >= 1 and divide both C ({c}) and O ({o})", attr="groups"
        )
    if w.shape[1] != c // g:
        raise OpTypeError(
            f"operand 2 is {w}, expected dim 1 = C/groups = {c // g} (operand 1 is {x})", 1
        )
    (pt, pb), (pl, pr) = attrs["padding"]
    kh = attrs["dilation"][0] * (w.shape[2] - 1) + 1
    kw = attrs["dilation"][1] * (w.shape[3] - 1) + 1
    if x.shape[2] + pt + pb < kh or x.shape[3] + pl + pr < kw:
        raise OpTypeError(
            f"the dilated kernel ({kh}x{kw}) is larger than the padded input "
            f"({x.shape[2] + pt + pb}x{x.shape[3] + pl + pr}) of {x}",
            1,
        )
    if extra and "epilogue" not in attrs:
        raise OpTypeError("conv2d takes operands after the weight only with an epilogue", 2)
    for k, e in enumerate(extra, start=2):
        if e.shape not in ((), (o,)):
            raise OpTypeError(
                f"operand {k + 1} is {e}, expected a scalar or one value per output channel "
                f"(shape [{o}]) for the epilogue",
                k,
            )
    oh, ow = conv2d_output_hw(x, w, attrs)
    return TensorType(x.dtype, (n, o, oh, ow))


register(
    OpSpec(
        "conv2d",
        "conv",
        2,
        None,
        (
            AttrSpec("stride", kind_int_list),
            AttrSpec("padding", kind_int_pairs),
            AttrSpec("dilation", kind_int_list),
            AttrSpec("groups", kind_int),
            AttrSpec("epilogue", kind_string, required=False),
        ),
        _infer_conv2d,
        "cross-correlation of x padded with +0.0 (every padded position takes part in the sum "
        "as 0.0 * w): out[n,o,i,j] = sum over c in group(o), kh, kw (in that order, a left fold "
        "starting at the first product) of xp[n,c,i*sh+kh*dh,j*sw+kw*dw] * w[o,c',kh,kw]; "
        "epilogue = E (since gdv 0.8): out[n,o,i,j] = E(that sum, e_k[o] for each operand e_k "
        "after the weight, a scalar e_k[] where it has rank 0).",
        int_legal=True,
    )
)
