"""Triton expressions for the ops a kernel body holds (IR_SPEC.md sections 3 and 4), each exact
to the spec: one IEEE operation per op, rounded to nearest-even, no contraction (every compile
and launch has `enable_fp_fusion=False`).

Where Triton's own operator is not the spec's, a helper says so: `/` and `tl.sqrt` are
approximate on NVIDIA GPUs (`tl.div_rn`, `tl.sqrt_rn` are IEEE); unary minus is `0 - x`
(wrong for +0.0, so `neg` is `x * -1.0`, exact); `tl.maximum` does not order -0.0 below +0.0
and float-to-int casts do not saturate (helpers below); `i1` compares signed (true < false), so
booleans are compared as integers.

Transcendentals are computed in f32 only: on a GPU by libdevice (CUDA's documented maximum ulp
errors are the target's ulp table, `gdv.ir.targets`), under the Triton interpreter by the
reference backend's functions (libdevice has no interpreter implementation), see
`gdv.backends.triton.runtime.math_functions`.
"""

from __future__ import annotations

import math

from gdv.backends.reference.literals import literal
from gdv.backends.triton.emit import TL, BodyWriter
from gdv.backends.triton.registry import body
from gdv.ir.core import Op
from gdv.ir.dtypes import DType
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops import names_where

TRANSCENDENTALS = names_where(lambda s: s.transcendental, "Ops computed by the math library.")
MATH_NAMES = ("exp", "log", "tanh", "erf", "sin", "cos", "pow", "rsqrt", "sigmoid")
"""The transcendentals the artifact binds (`_exp`, ...: libdevice or the interpreter's)."""

HELPERS = {
    "_fmax": """@triton.jit
def _fmax(a, b):
    # max of IR_SPEC: NaN if either is NaN, max(-0.0, +0.0) = +0.0
    nan = (a != a) | (b != b)
    pick_a = (a > b) | ((a == b) & (b.to(tl.int32, bitcast=True) < 0))
    return tl.where(nan, a + b, tl.where(pick_a, a, b))
""",
    "_fmin": """@triton.jit
def _fmin(a, b):
    # min of IR_SPEC: NaN if either is NaN, min(-0.0, +0.0) = -0.0
    nan = (a != a) | (b != b)
    pick_a = (a < b) | ((a == b) & (a.to(tl.int32, bitcast=True) < 0))
    return tl.where(nan, a + b, tl.where(pick_a, a, b))
""",
    "_relu": """@triton.jit
def _relu(x):
    # max(x, +0.0): relu(-0.0) = +0.0, relu(NaN) = NaN
    return tl.where(x != x, x, tl.where(x > 0.0, x, 0.0))
""",
    "_f32_to_i32": """@triton.jit
def _f32_to_i32(x):
    # truncate toward zero, saturate, NaN -> 0 (a plain cast is undefined out of range)
    hi = x >= 2147483648.0
    lo = x < -2147483648.0
    y = tl.where((x != x) | hi | lo, 0.0, x).to(tl.int32)
    return tl.where(hi, 2147483647, tl.where(lo, -2147483648, y))
""",
    "_f32_to_i64": """@triton.jit
def _f32_to_i64(x):
    # truncate toward zero, saturate, NaN -> 0 (a plain cast is undefined out of range)
    hi = x >= 9223372036854775808.0
    lo = x < -9223372036854775808.0
    y = tl.where((x != x) | hi | lo, 0.0, x).to(tl.int64)
    return tl.where(hi, 9223372036854775807, tl.where(lo, -9223372036854775808, y))
""",
}
"""Helper functions an artifact holds when a kernel calls them."""


def _helper(w: BodyWriter, name: str, *args: str) -> str:
    w.prog.helpers.add(name)
    return f"{name}({', '.join(args)})"


def scalar_literal(value, dtype: DType) -> str:
    """Python source for `value` rounded once to `dtype` (exact: an f32 is an f64)."""
    x = literal(value, dtype).item()
    if dtype.is_bool:
        return "1" if x else "0"
    if dtype.is_float:
        x = float(x)
        if math.isnan(x):
            return 'float("nan")'
        if math.isinf(x):
            return 'float("inf")' if x > 0 else 'float("-inf")'
        return repr(x)
    return repr(int(x))


def full(w: BodyWriter, value: str, dtype: DType) -> str:
    return f"tl.full([LANES], {value}, {TL[dtype]})"


@body(OPS["constant"])
def _constant(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    return full(w, scalar_literal(op.attrs["value"], op.type.dtype), op.type.dtype)


_INFIX = {"add": "+", "sub": "-", "mul": "*"}


@body(OPS["add"], OPS["sub"], OPS["mul"])
def _arith(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    return f"({args[0]} {_INFIX[op.name]} {args[1]})"


@body(OPS["div"])
def _div(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    return f"tl.div_rn({args[0]}, {args[1]})"


@body(OPS["max"], OPS["min"])
def _max_min(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    if dtypes[0].is_float:
        return _helper(w, "_fmax" if op.name == "max" else "_fmin", *args)
    return f"tl.{'maximum' if op.name == 'max' else 'minimum'}({args[0]}, {args[1]})"


@body(OPS["neg"])
def _neg(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    return f"({args[0]} * -1.0)"  # exact, and -(+0.0) = -0.0 (Triton's unary minus is 0 - x)


@body(OPS["abs"])
def _abs(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    return f"tl.abs({args[0]})"


@body(OPS["floor"])
def _floor(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    return f"tl.floor({args[0]})"


@body(OPS["sqrt"])
def _sqrt(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    return f"tl.sqrt_rn({args[0]})"


@body(OPS["relu"])
def _relu(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    return _helper(w, "_relu", args[0])


@body(*(OPS[name] for name in MATH_NAMES))
def _transcendental(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    if op.type.dtype is not DType.F32:
        raise w.error(
            op,
            f"is computed by libdevice in f32 only; its error on {op.type.dtype} results is "
            "not in the target's ulp table",
        )
    return f"_{op.name}({', '.join(args)})"


_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


@body(OPS["cmp"])
def _cmp(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    a, b = args
    if dtypes[0].is_bool:  # Triton compares i1 as signed (true < false): compare 0/1 ints
        a, b = f"{a}.to(tl.int32)", f"{b}.to(tl.int32)"
    return f"({a} {_CMP[op.attrs['dir']]} {b})"


@body(OPS["select"])
def _select(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    return f"tl.where({args[0]}, {args[1]}, {args[2]})"


@body(OPS["convert"])
def _convert(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    (x,), src, dst = args, dtypes[0], op.type.dtype
    if src is dst:
        return x
    if dst.is_bool:
        return f"({x} != 0)"
    if src.is_bool:
        return f"tl.where({x}, 1, 0).to({TL[dst]})"
    if src.is_float and not dst.is_float:
        return _helper(w, f"_f32_to_{dst.value}", x)
    return f"{x}.to({TL[dst]})"  # int -> int wraps; int -> f32 rounds to nearest-even
