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
from gdv.backends.triton.emit import TL, BodyWriter, compute
from gdv.backends.triton.registry import body
from gdv.ir.core import Op
from gdv.ir.dtypes import DType
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops import names_where

TRANSCENDENTALS = names_where(lambda s: s.transcendental, "Ops computed by the math library.")
MATH_NAMES = tuple(sorted(TRANSCENDENTALS))
"""The transcendentals the artifact binds (`_exp`, ...: libdevice or the interpreter's), from
the ops' `transcendental` trait."""

_INT_RANGE = {DType.I64: 64, DType.I32: 32, DType.I8: 8}
_BITS = {DType.F64: "tl.int64", DType.F32: "tl.int32"}


def helper_source(name: str) -> str:
    """The source of helper `name` (`_fmax_f32`, `_round_bf16`, `_cvt_f64_i32`, ...)."""
    kind, _, rest = name[1:].partition("_")
    if kind in ("fmax", "fmin"):
        bits = _BITS[DType(rest)]
        sign = "b" if kind == "fmax" else "a"
        order = ">" if kind == "fmax" else "<"
        what = "max(-0.0, +0.0) = +0.0" if kind == "fmax" else "min(-0.0, +0.0) = -0.0"
        return f"""@triton.jit
def {name}(a, b):
    # {kind[1:]} of IR_SPEC: NaN if either is NaN, {what}
    nan = (a != a) | (b != b)
    pick_a = (a {order} b) | ((a == b) & ({sign}.to({bits}, bitcast=True) < 0))
    return tl.where(nan, a + b, tl.where(pick_a, a, b))
"""
    if kind == "relu":
        return f"""@triton.jit
def {name}(x):
    # max(x, +0.0): relu(-0.0) = +0.0, relu(NaN) = NaN
    return tl.where(x != x, x, tl.where(x > 0.0, x, 0.0))
"""
    if name == "_widen_bf16":
        return """@triton.jit
def _widen_bf16(v):
    # bf16 -> f32 on the bits (exact; the Triton interpreter's cast loses subnormals)
    return (v.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)
"""
    if name == "_narrow_bf16":
        return """@triton.jit
def _narrow_bf16(x):
    # an f32 holding a bf16 value -> bf16 on the bits (exact)
    return (x.to(tl.int32, bitcast=True) >> 16).to(tl.int16).to(tl.bfloat16, bitcast=True)
"""
    if name == "_round_bf16":
        return """@triton.jit
def _round_bf16(x):
    # an f32 value rounded to nearest-even in bf16 on its bits (the Triton interpreter's cast
    # truncates), held in f32 again; NaN -> the quiet NaN
    bits = x.to(tl.int32, bitcast=True)
    r = (bits + (32767 + ((bits >> 16) & 1))) & -65536
    r = tl.where(x != x, 2143289344, r)
    return r.to(tl.float32, bitcast=True)
"""
    if kind == "round":
        return f"""@triton.jit
def {name}(x):
    # an f32 value rounded to nearest-even in {rest}, held in f32 again (exactly)
    return x.to({TL[DType(rest)]}, fp_downcast_rounding="rtne").to(tl.float32)
"""
    if kind == "odd":
        return f"""@triton.jit
def {name}(x):
    # f64 -> f32 rounded to odd: rounding that to a 16-bit float once more is the correctly
    # rounded result of x (f32 has at least p + 2 bits for p = 11 and 8)
    r = x.to(tl.float32)
    back = r.to(tl.float64)
    bits = r.to(tl.int32, bitcast=True)
    fix = (back != x) & ((bits & 1) == 0) & (x == x)
    bits = tl.where(fix, tl.where(tl.abs(x) > tl.abs(back), bits + 1, bits - 1), bits)
    return bits.to(tl.float32, bitcast=True)
"""
    if kind == "cvt":
        src, dst = (DType(t) for t in rest.split("_"))
        n = _INT_RANGE[dst]
        hi, lo = 2 ** (n - 1), -(2 ** (n - 1))
        return f"""@triton.jit
def {name}(x):
    # {src} -> {dst}: toward zero, saturating, NaN -> 0 (a plain cast is undefined out of range)
    hi = x >= {float(hi)!r}
    lo = x < {float(lo)!r}
    y = tl.where((x != x) | hi | lo, 0.0, x).to({TL[dst]})
    return tl.where(hi, {hi - 1}, tl.where(lo, {lo}, y))
"""
    raise KeyError(name)


def call(prog, name: str, *args: str) -> str:
    """A call of helper `name`, which the artifact then holds."""
    prog.helpers.setdefault(name, helper_source(name))
    return f"{name}({', '.join(args)})"


def _helper(w: BodyWriter, name: str, *args: str) -> str:
    return call(w.prog, name, *args)


def round_to(prog, dtype: DType, expr: str) -> str:
    """`expr` (held in the compute dtype) rounded to `dtype` where that is narrower."""
    if compute(dtype) is dtype:
        return expr
    return call(prog, f"_round_{dtype.value}", expr)


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


def full(shape: str, value: str, dtype: DType) -> str:
    """A block of `shape` (Python source, e.g. `[1, 1]`) holding `value` in `dtype`."""
    return f"tl.full({shape}, {value}, {TL[compute(dtype)]})"


@body(OPS["constant"])
def _constant(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    return full(w.ones, scalar_literal(op.attrs["value"], op.type.dtype), op.type.dtype)


_INFIX = {"add": "+", "sub": "-", "mul": "*"}


@body(OPS["add"], OPS["sub"], OPS["mul"])
def _arith(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    return f"({args[0]} {_INFIX[op.name]} {args[1]})"


@body(OPS["div"])
def _div(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    if not dtypes[0].is_float:  # Triton's `//` on a zero divisor or INT_MIN by -1 is the GPU's
        raise w.error(op, "on integers has no Triton lowering yet (the C target has)")
    if compute(dtypes[0]) is DType.F64:
        return f"({args[0]} / {args[1]})"  # div.rn.f64: f64 division is IEEE
    return f"tl.div_rn({args[0]}, {args[1]})"  # f32 `/` is approximate on NVIDIA GPUs


@body(OPS["max"], OPS["min"])
def _max_min(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    if dtypes[0].is_float:
        kind = "_fmax" if op.name == "max" else "_fmin"
        return _helper(w, f"{kind}_{compute(dtypes[0]).value}", *args)
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
    if compute(dtypes[0]) is DType.F64:
        return f"tl.sqrt({args[0]})"  # sqrt.rn.f64
    return f"tl.sqrt_rn({args[0]})"  # f32 tl.sqrt is approximate on NVIDIA GPUs


@body(OPS["relu"])
def _relu(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    return _helper(w, "_relu_any", args[0])


@body(*(OPS[name] for name in MATH_NAMES))
def _transcendental(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    if op.type.dtype is not DType.F32:
        raise w.error(
            op,
            f"is computed by libdevice in f32 only; its error on {op.type.dtype} results is "
            "not in the target's ulp table",
        )
    return f"_{op.name}({', '.join(args)})"


@body(
    *(
        OPS[n]
        for n in (
            "bitwise_and bitwise_or bitwise_xor bitwise_not shift_left shift_right rem mod".split()
        )
    )
)
def _bitwise(w: BodyWriter, op: Op, args: list[str], dtypes: list[DType]) -> str:
    # Refused by name: Triton's `<<` and `>>` follow the hardware for amounts outside
    # [0, bits), and `%` on a zero divisor, not IR_SPEC's rules; no lowering has been checked
    # on a GPU yet.
    raise w.error(
        op, "has no Triton lowering yet (bitwise ops, shifts, rem, mod: the C target has)"
    )


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
    cs, cd = compute(src), compute(dst)
    if src is dst:
        return x
    if dst.is_bool:
        return f"({x} != 0)"
    if src.is_bool:
        one = "1.0, 0.0" if dst.is_float else "1, 0"
        return f"tl.where({x}, {one}).to({TL[cd]})"
    if src.is_float and not dst.is_float:
        return _helper(w, f"_cvt_{cs.value}_{dst.value}", x)
    if dst.is_float and cd is not dst:  # to f16 or bf16: one rounding of the exact value
        if src.is_float:
            exact = x if cs is DType.F32 else _helper(w, "_odd_f64", x)
        elif src is DType.I8 or dst is DType.F16:
            # i8 is exact in f32; an integer beyond f32's 24 bits is beyond f16's range
            exact = f"{x}.to(tl.float32)"
        elif src is DType.I32:
            exact = _helper(w, "_odd_f64", f"{x}.to(tl.float64)")  # i32 is exact in f64
        else:
            raise w.error(op, f"from {src} to {dst} (two roundings) is not implemented yet")
        return _helper(w, f"_round_{dst.value}", exact)
    return f"{x}.to({TL[cd]})"  # int -> int wraps; to f32 or f64 rounds to nearest-even
