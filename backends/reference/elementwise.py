"""Kernels of the elementwise family: arithmetic, comparisons, select, convert, constant, iota."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gdv.backends.reference.arith import (
    clear_sign,
    flip_sign,
    float_max,
    float_min,
    via_f64,
)
from gdv.backends.reference.literals import constant_array
from gdv.backends.reference.registry import Context, kernel
from gdv.backends.reference.special import erf
from gdv.ir.core import Op
from gdv.ir.dtypes import DType, from_numpy
from gdv.ir.numerics import convert_array
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops.elementwise import is_signed

# --- float unary ------------------------------------------------------------------------------


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1.0 / np.sqrt(x)  # two float64 roundings, then one to the dtype: within an ulp


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))  # exp(-x) = inf gives 0.0, as the limit


# Each is evaluated in float64 and rounded once to the dtype. sqrt and floor are then exact
# (correctly rounded, resp. exact); the transcendentals are within an ulp or so of the truth
# (numpy's float64 functions, within a few float64 ulps: rounded once to f32, f16 or bf16 that
# is the correctly rounded result except where the exact value lies within a few float64 ulps
# of a rounding boundary; tests/validate/bounds/test_transcendental_ulps.py measures it
# against mpmath).
_UNARY_F64: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": _rsqrt,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "erf": erf,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "floor": np.floor,
}


def _unary_f64(fn: Callable[[np.ndarray], np.ndarray]):
    def run(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
        return via_f64(fn, ctx.storage(op.type.dtype), args[0])

    return run


for _name, _fn in _UNARY_F64.items():
    kernel(OPS[_name])(_unary_f64(_fn))


@kernel(OPS["neg"])
def _neg(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    return flip_sign(args[0])


@kernel(OPS["abs"])
def _abs(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    return clear_sign(args[0])


@kernel(OPS["relu"])
def _relu(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    # max(x, +0.0): relu(-0.0) = +0.0 and relu(NaN) = NaN come with float_max.
    x = args[0]
    return float_max(x, np.zeros_like(x))


# --- binary -----------------------------------------------------------------------------------

# Float: one float64 operation rounded once (correctly rounded for add, sub, mul, div; pow is a
# transcendental). Integers: numpy's operations in the dtype itself, which wrap.
_BINARY_F64: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "pow": np.power,
}
_BINARY_INT: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "max": np.maximum,  # exact on integers
    "min": np.minimum,
}


def _binary(name: str):
    f64_fn = _BINARY_F64.get(name)
    int_fn = _BINARY_INT.get(name)

    def run(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
        a, b = args
        dtype = ctx.storage(op.type.dtype)
        if dtype.is_float:
            if name == "max":
                return float_max(a, b)
            if name == "min":
                return float_min(a, b)
            return via_f64(f64_fn, dtype, a, b)
        if name == "div":
            return int_quotient(np.asarray(a), np.asarray(b), dtype)
        assert int_fn is not None, f"{name} on {dtype}"
        return np.asarray(int_fn(a, b), dtype=dtype.np)

    return run


for _name in ("add", "sub", "mul", "div", "max", "min", "pow"):
    kernel(OPS[_name])(_binary(_name))


def int_quotient(a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
    """Integer `div` (IR_SPEC.md section 4): a / b truncated toward zero in the dtype's own
    integers (never through a float), div(a, 0) = 0, div(INT_MIN, -1) = INT_MIN (wraps)."""
    zero = b == 0
    minus_one = (b == -1) if is_signed(dtype) else np.zeros_like(zero)
    safe = np.where(zero | minus_one, np.ones_like(b), b)
    q = np.floor_divide(a, safe)  # floor; one step up where a remainder is left and signs differ
    r = np.remainder(a, safe)
    if is_signed(dtype):
        q = q + ((r != 0) & ((a < 0) != (safe < 0))).astype(q.dtype)
        # -a on the unsigned bits wraps: INT_MIN by -1 gives INT_MIN
        u = np.dtype(f"u{dtype.itemsize}")
        neg = (u.type(0) - np.asarray(a).astype(u)).astype(dtype.np)
        q = np.where(minus_one, neg, q)
    return np.where(zero, np.zeros_like(q), q).astype(dtype.np)


# --- bitwise ops and shifts (integers; and, or, xor, not also i1) -----------------------------

_BITWISE: dict[str, Callable[..., np.ndarray]] = {
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
    "bitwise_not": np.invert,  # on numpy booleans: logical not
}


def _bitwise(name: str):
    fn = _BITWISE[name]

    def run(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
        return np.asarray(fn(*args), dtype=op.type.dtype.np)

    return run


for _name in _BITWISE:
    kernel(OPS[_name])(_bitwise(_name))


def _shift(left: bool):
    def run(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
        a, b = (np.asarray(x) for x in args)
        dtype = op.type.dtype
        signed = is_signed(dtype)
        # The amount read with the dtype's signedness; in range when 0 <= b < bits.
        amount = b.astype(np.int64 if signed else np.uint64)
        inside = (amount >= 0) & (amount < dtype.bits)
        u = np.dtype(f"u{dtype.itemsize}")
        step = np.where(inside, amount, amount.dtype.type(0)).astype(u)
        if left:  # on the unsigned bits: wraps, never overflows
            moved = np.left_shift(a.view(u), step).astype(u)
            return np.where(inside, moved, u.type(0)).astype(u).view(dtype.np)
        if signed:  # numpy's right_shift of a signed integer is x // 2**s: arithmetic
            moved = np.right_shift(a, step.astype(dtype.np))
            fill = np.where(a < 0, dtype.np.type(-1), dtype.np.type(0))
        else:
            moved = np.right_shift(a, step.astype(dtype.np))
            fill = np.zeros_like(a)
        return np.where(inside, moved, fill).astype(dtype.np)

    return run


kernel(OPS["shift_left"])(_shift(left=True))
kernel(OPS["shift_right"])(_shift(left=False))


def _remainder(name: str):
    int_fn = np.fmod if name == "rem" else np.remainder  # C's sign of a; Python's sign of b

    def run(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
        a, b = (np.asarray(x) for x in args)
        dtype = ctx.storage(op.type.dtype)
        if dtype.is_float:  # exact in float64, so exact once rounded back
            return via_f64(np.fmod, dtype, a, b)
        zero = b == 0
        one = np.ones_like(b)
        # b = -1 divides everything (INT_MIN by -1 included): 0, with no overflowing quotient
        safe = np.where(zero | (b == -1) if is_signed(dtype) else zero, one, b)
        r = np.asarray(int_fn(a, safe), dtype=dtype.np)
        if is_signed(dtype):
            r = np.where(b == -1, np.zeros_like(r), r)
        return np.where(zero, a, r).astype(dtype.np)

    return run


for _name in ("rem", "mod"):
    kernel(OPS[_name])(_remainder(_name))

_CMP: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
}


@kernel(OPS["cmp"])
def _cmp(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    a, b = args
    dtype = from_numpy(a.dtype)
    if dtype is not None and dtype.is_float:
        # IEEE comparisons in float64 (exact widening): NaN unordered, -0.0 == +0.0.
        a, b = a.astype(np.float64), b.astype(np.float64)
    # Integers compare natively; on booleans numpy orders False < True.
    return np.asarray(_CMP[op.attrs["dir"]](a, b), dtype=np.bool_)


@kernel(OPS["select"])
def _select(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    c, a, b = args
    return np.where(c, a, b)


@kernel(OPS["convert"])
def _convert(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    x = args[0]
    src = from_numpy(x.dtype)
    assert src is not None, x.dtype
    # In ideal mode both float sides are f64, so float -> float is the identity while
    # float -> int still truncates and saturates.
    return convert_array(x, src, ctx.storage(op.type.dtype), op.attrs.get("saturate", True))


# --- generators -------------------------------------------------------------------------------


@kernel(OPS["constant"])
def _constant(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    return constant_array(op.attrs["value"], ctx.storage(op.type.dtype), op.type.shape)


@kernel(OPS["iota"])
def _iota(op: Op, args: list[np.ndarray], ctx: Context) -> np.ndarray:
    shape = op.type.shape
    axis = op.attrs["axis"]
    index = np.arange(shape[axis], dtype=np.int64).reshape(
        [shape[axis] if d == axis else 1 for d in range(len(shape))]
    )
    value = convert_array(index, DType.I64, ctx.storage(op.type.dtype))
    return np.array(np.broadcast_to(value, shape), order="C")
