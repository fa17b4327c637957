"""Elementwise ops, conversions and generators (`constant`, `iota`).

Elementwise ops take operands of one shape; there is no implicit broadcasting.
"""

from __future__ import annotations

from typing import Any

from gdv.ir.dtypes import DType
from gdv.ir.ops import (
    REGISTRY,
    AttrSpec,
    OpSpec,
    OpTypeError,
    kind_bool,
    kind_choice,
    kind_int,
    kind_number_or_nested,
    names_where,
    register,
)
from gdv.ir.ops._rules import check_axis, check_literal, require_float, same_shape_operands
from gdv.ir.types import TensorType

TRIG_OPS = ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")
"""The inverse and hyperbolic trig functions and tan (since gdv 0.6, issue 19)."""

UNARY_FLOAT_DOCS = {
    "neg": "-x (flips the sign bit; NaN stays NaN)",
    "abs": "|x| (clears the sign bit)",
    "exp": "e^x (transcendental: last bits implementation-defined)",
    "log": "ln x (transcendental)",
    "sqrt": "sqrt(x), correctly rounded",
    "rsqrt": "1/sqrt(x) (transcendental)",
    "tanh": "tanh x (transcendental)",
    "sigmoid": "1/(1+exp(-x)) as one op (transcendental)",
    "erf": "erf x (transcendental)",
    "sin": "sin x (transcendental)",
    "cos": "cos x (transcendental)",
    "tan": "tan x (transcendental)",
    "asin": "arcsin x in [-pi/2, pi/2]; NaN for |x| > 1 (transcendental)",
    "acos": "arccos x in [0, pi]; NaN for |x| > 1 (transcendental)",
    "atan": "arctan x in [-pi/2, pi/2] (transcendental)",
    "sinh": "sinh x (transcendental)",
    "cosh": "cosh x (transcendental)",
    "asinh": "arsinh x (transcendental)",
    "acosh": "arcosh x >= 0; NaN for x < 1 (transcendental)",
    "atanh": "artanh x; +-inf at +-1, NaN for |x| > 1 (transcendental)",
    "floor": "the largest integer <= x, exact",
    "relu": "max(x, 0.0) with relu(-0.0) = +0.0 and relu(NaN) = NaN",
}

TRANSCENDENTAL_OPS = (
    "exp",
    "log",
    "rsqrt",
    "tanh",
    "sigmoid",
    "erf",
    "sin",
    "cos",
    "pow",
    *TRIG_OPS,
)
"""Ops whose last-bit results are implementation-defined (IR_SPEC.md section 3): the specs
below get `transcendental=True` from this list; everyone else asks the specs."""

BINARY_DOCS = {
    "add": "a + b (ints wrap)",
    "sub": "a - b (ints wrap)",
    "mul": "a * b (ints wrap)",
    "div": "a / b. Floats: rounded to nearest-even. Integers (since gdv 0.6, issue 19): the "
    "quotient truncated toward zero (C's /), read with the dtype's signedness; div(a, 0) = 0 "
    "and div(INT_MIN, -1) = INT_MIN (it wraps), so a = b * div(a, b) + rem(a, b) always",
    "max": "max(a, b); NaN if either is NaN; max(-0.0, +0.0) = +0.0",
    "min": "min(a, b); NaN if either is NaN; min(-0.0, +0.0) = -0.0",
    "pow": "a^b (floats only, transcendental)",
}
INT_BINARY_OPS = ("add", "sub", "mul", "div", "max", "min")
COMMUTATIVE_OPS = ("add", "mul", "max", "min")
"""Symmetric in their operands as IR_SPEC.md section 5 compares values: IEEE `+` and `*`
(all NaNs one value), and `max`/`min`, whose NaN and signed-zero cases are symmetric too
(`max(-0.0, +0.0) = max(+0.0, -0.0) = +0.0`, `min` gives -0.0 in either order; the reference
and SMT meanings implement exactly that, and tests/test_registry.py proves it)."""


def _unary_float(name: str):
    def infer(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
        require_float(types[0], 0, name)
        return types[0]

    return infer


def _binary(name: str):
    def infer(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
        same_shape_operands(types)
        t = types[0]
        int_legal = REGISTRY[name].int_legal
        if t.dtype.is_float or (t.dtype.is_int and int_legal):
            return t
        allowed = "float or integer" if int_legal else "float"
        raise OpTypeError(f"{name} takes {allowed} operands, operand 1 is {t}", 0)

    return infer


for _name, _doc in UNARY_FLOAT_DOCS.items():
    register(
        OpSpec(
            _name,
            "elementwise",
            1,
            1,
            (),
            _unary_float(_name),
            _doc,
            transcendental=_name in TRANSCENDENTAL_OPS,
            body_legal=True,
        )
    )
for _name, _doc in BINARY_DOCS.items():
    register(
        OpSpec(
            _name,
            "elementwise",
            2,
            2,
            (),
            _binary(_name),
            _doc,
            transcendental=_name in TRANSCENDENTAL_OPS,
            body_legal=True,
            int_legal=_name in INT_BINARY_OPS,
            commutative=_name in COMMUTATIVE_OPS,
        )
    )

TRANSCENDENTAL = names_where(lambda s: s.transcendental, "Ops whose last bits are not fixed.")
"""Ops whose last-bit results are implementation-defined (IR_SPEC.md section 3), from the
specs' `transcendental` trait (a live set of names)."""
INT_BINARY = names_where(lambda s: s.name in BINARY_DOCS and s.int_legal, "Integer arithmetic.")
"""The binary arithmetic ops that take integers (wrapping), from the `int_legal` trait."""

BITWISE_DOCS = {
    "bitwise_and": "a & b on the two's-complement bits (i1: logical and)",
    "bitwise_or": "a | b on the two's-complement bits (i1: logical or)",
    "bitwise_xor": "a ^ b on the two's-complement bits (i1: logical xor)",
    "bitwise_not": "~x, every bit flipped (i1: logical not)",
}
"""Bitwise ops on integers and i1 (since gdv 0.6, issue 19)."""
SHIFT_DOCS = {
    "shift_left": "a << b: the bits of a moved b places up, zeros shifted in (wraps); 0 when "
    "the amount b is negative or at least the bit width",
    "shift_right": "a >> b: the bits of a moved b places down, filled with the sign bit for "
    "signed dtypes (arithmetic) and with zeros for unsigned ones (logical); when the amount b "
    "is negative or at least the bit width, the fill everywhere (-1 for a negative signed a, "
    "else 0)",
}
"""Shifts on integers (since gdv 0.6, issue 19). The amount is operand 2, of the same dtype,
read with that dtype's signedness."""


def is_signed(dtype: DType) -> bool:
    """Whether an integer dtype is signed (two's complement with negative values)."""
    return dtype.int_min < 0


def _bitwise(name: str):
    def infer(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
        same_shape_operands(types)
        t = types[0]
        if t.dtype.is_int or (t.dtype.is_bool and name in BITWISE_DOCS):
            return t
        allowed = "integer or i1" if name in BITWISE_DOCS else "integer"
        what = f"an {allowed} operand" if len(types) == 1 else f"{allowed} operands"
        raise OpTypeError(f"{name} takes {what}, operand 1 is {t}", 0)

    return infer


for _name, _doc in {**BITWISE_DOCS, **SHIFT_DOCS}.items():
    _n = 1 if _name == "bitwise_not" else 2
    register(
        OpSpec(
            _name,
            "elementwise",
            _n,
            _n,
            (),
            _bitwise(_name),
            _doc,
            body_legal=True,
            int_legal=True,
        )
    )

REMAINDER_DOCS = {
    "rem": "a - b * trunc(a / b), exactly: the sign of a (C's % and fmod, ONNX Mod with "
    "fmod = 1). Integers: rem(a, 0) = a, rem(INT_MIN, -1) = 0. Floats: exact (never rounds); "
    "NaN when a is infinite, b is zero or either is NaN; a when b is infinite; a zero result "
    "has a's sign",
    "mod": "a - b * floor(a / b), integers only: the sign of b (Python's %, ONNX Mod with "
    "fmod = 0); mod(a, 0) = a, mod(INT_MIN, -1) = 0",
}
"""Remainders (since gdv 0.6, issue 19). A zero divisor gives the dividend, as SMT-LIB's
bvsrem and bvsmod do: every op stays total (IR_SPEC.md section 3)."""


def _remainder(name: str):
    def infer(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
        same_shape_operands(types)
        t = types[0]
        if t.dtype.is_int or (t.dtype.is_float and name == "rem"):
            return t
        allowed = "float or integer" if name == "rem" else "integer"
        raise OpTypeError(f"{name} takes {allowed} operands, operand 1 is {t}", 0)

    return infer


for _name, _doc in REMAINDER_DOCS.items():
    register(
        OpSpec(
            _name,
            "elementwise",
            2,
            2,
            (),
            _remainder(_name),
            _doc,
            body_legal=True,
            int_legal=True,
        )
    )

CMP_DIRECTIONS = ("lt", "le", "gt", "ge", "eq", "ne")


def _infer_cmp(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
    same_shape_operands(types)
    return types[0].with_dtype(DType.I1)


register(
    OpSpec(
        "cmp",
        "elementwise",
        2,
        2,
        (AttrSpec("dir", kind_choice(*CMP_DIRECTIONS)),),
        _infer_cmp,
        "a DIR b elementwise as i1; IEEE comparison: NaN compares false except `ne`, which is "
        "true; -0.0 equals +0.0. On i1, false < true.",
        body_legal=True,
        int_legal=True,
    )
)


def _infer_select(
    types: list[TensorType], attrs: dict[str, Any], written: TensorType
) -> TensorType:
    c, a, b = types
    if c.dtype is not DType.I1:
        raise OpTypeError(f"select's condition must be i1, operand 1 is {c}", 0)
    if b != a:
        raise OpTypeError(f"operand 3 is {b}, expected {a} like operand 2", 2)
    if c.shape != a.shape:
        raise OpTypeError(
            f"condition is {c}, expected shape [{','.join(map(str, a.shape))}] like operand 2",
            0,
        )
    return a


register(
    OpSpec(
        "select",
        "elementwise",
        3,
        3,
        (),
        _infer_select,
        "c ? a : b elementwise",
        body_legal=True,
        int_legal=True,
    )
)


def _infer_convert(
    types: list[TensorType], attrs: dict[str, Any], written: TensorType
) -> TensorType:
    if "saturate" in attrs and not written.dtype.is_float8:
        raise OpTypeError(
            f"saturate applies to a float8 result only, the result dtype is {written.dtype}",
            attr="saturate",
        )
    return types[0].with_dtype(written.dtype)


register(
    OpSpec(
        "convert",
        "elementwise",
        1,
        1,
        (AttrSpec("saturate", kind_bool, required=False),),
        _infer_convert,
        "to the written dtype: float->float rounds to nearest-even; float->int truncates toward "
        "zero and saturates, NaN -> 0; int->float rounds to nearest-even; int->int wraps "
        "(two's complement); to i1: x != 0; from i1: false -> 0, true -> 1. float8 "
        "(IR_SPEC.md section 8): from float8 as its exact value; to float8 rounds once to "
        "nearest-even, `saturate` (default true, float8 results only) sends values beyond "
        "+-max (infinities too) to +-max, otherwise they overflow to inf (f8e5m2) or NaN.",
        body_legal=True,
        int_legal=True,
        storage_legal=True,
    )
)


def _nested_shape(value: Any) -> tuple[int, ...] | None:
    """The shape of a nested list literal, or None when it is ragged."""
    if not isinstance(value, list):
        return ()
    if not value:
        return (0,)
    inner = [_nested_shape(v) for v in value]
    if any(s is None or s != inner[0] for s in inner):
        return None
    return (len(value), *inner[0])


def iter_leaves(value: Any):
    if isinstance(value, list):
        for v in value:
            yield from iter_leaves(v)
    else:
        yield value


def _infer_constant(
    types: list[TensorType], attrs: dict[str, Any], written: TensorType
) -> TensorType:
    value = attrs["value"]
    if isinstance(value, list):
        shape = _nested_shape(value)
        if shape is None:
            raise OpTypeError("value is a ragged nested list", attr="value")
        if shape != written.shape:
            raise OpTypeError(
                f"value has shape [{','.join(map(str, shape))}], expected "
                f"[{','.join(map(str, written.shape))}] like the result type {written}",
                attr="value",
            )
    for leaf in iter_leaves(value):
        check_literal(leaf, written.dtype, "value")
    return written


register(
    OpSpec(
        "constant",
        "elementwise",
        0,
        0,
        (AttrSpec("value", kind_number_or_nested),),
        _infer_constant,
        "a tensor of the written type: `value` is a scalar (splat) or a nested list of the "
        "result's shape; float literals round to nearest-even in the dtype.",
        body_legal=True,
        int_legal=True,
    )
)


def _infer_iota(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
    check_axis(attrs["axis"], written.rank, "axis")
    if written.dtype.is_bool:
        raise OpTypeError(f"iota's result must be a float or integer type, got {written}")
    return written


register(
    OpSpec(
        "iota",
        "elementwise",
        0,
        0,
        (AttrSpec("axis", kind_int),),
        _infer_iota,
        "element = its index along `axis`, converted to the dtype as `convert` from i64 does.",
        int_legal=True,
    )
)
