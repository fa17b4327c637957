"""C for the elementwise family: the scalar code of every op a kernel body may hold, and the
ops themselves when they stand outside kernels (as one-op loop nests), constants and iota.

Meaning, exactly as the reference backend (`backends/reference/elementwise.py`):
- add sub mul div sqrt on f32/f64: C's IEEE operations in the dtype (one rounding each; the
  compiler runs with -ffp-contract=off and without -ffast-math, FLT_EVAL_METHOD is 0), which
  equal the reference's f64-then-round-once results.
- integer add sub mul wrap: computed in uint64_t (every operand converted to uint64_t first,
  which C defines as modulo 2^64, so neither C's promotion of 8- and 16-bit operands to int
  nor signed overflow, undefined in C, is ever reached), then converted to the dtype (modulo
  2^n: C defines it for the unsigned dtypes, GCC and Clang for the signed ones). max/min and
  cmp compare in C's own types: the promotions keep every value, so unsigned dtypes compare
  unsigned.
- max/min: NaN if either is NaN, max(-0.0, +0.0) = +0.0, min gives -0.0 (helpers below, the
  reference's `float_max`/`float_min` step by step); relu is max(x, +0.0). Against a body
  constant that is not NaN, one compare gives the same bits (`_extreme_with_constant`).
- neg flips the sign (C's unary minus), abs clears it (fabs), floor is exact (floor).
- transcendentals (exp log tanh erf sin cos pow tan asin acos atan sinh cosh asinh acosh atanh,
  rsqrt = 1/sqrt, sigmoid = 1/(1+exp(-x))):
  their last bits are implementation-defined (IR_SPEC.md section 3). f32 results of exp, tanh,
  erf and sigmoid use gdv's own branch-free f32 functions (backends/c/vmath.py: gdv_vexpf,
  gdv_vtanhf, gdv_verff, gdv_vsigmoidf), which vectorise in `omp simd` loops (16 lanes with
  AVX-512) where libm calls do not; measured on every f32 input they are within 1 ulp of the
  exact value, tanh (chosen for speed) within 2.43 (vmath.F32_MAX_ULP), so they differ from
  the reference (float64, rounded once) by at most 1 or 2 ulp (tanh 3), and agree with it bit
  for bit nearly always (tanh on 96% of inputs). f16 and bf16 results
  of the same four are computed in double with gdv's double functions (within 1 ulp of
  double) and rounded once: the correctly rounded value on every input tested. The others
  (and every f64 result) are computed in double with libm and rounded once to the dtype, as
  the reference evaluates them in float64 (the libm functions used are recorded in the
  capability descriptor); f64 results may differ from numpy's in the last place. With
  GDV_C_F32_IN_DOUBLE=1 (F32_DOUBLE_ENV) f32 results of the four take the f16/bf16 path.
- integer div: C's `/` (truncating toward zero) only on a nonzero divisor other than a signed
  -1: a zero divisor gives 0, a signed -1 the negation on the unsigned bits (INT_MIN wraps to
  itself; INT_MIN / -1 is undefined in C), `_quotient_scalar`.
- bitwise_and/or/xor/not: C's `& | ^ ~` (i1: on 0/1, not as `^ 1`); shift_left/shift_right:
  the stated rule for amounts outside [0, bits) checked first, then `<<` on the unsigned type,
  `>>` on a nonnegative value (`_bitwise_scalar`).
- convert: float->float rounds to nearest-even (C casts), float->int truncates and saturates
  with NaN -> 0 (helper; a C cast of an out-of-range float is undefined, so only in-range
  values reach one), int->float rounds to nearest-even (C casts, unsigned ones from their
  unsigned value), int->int wraps modulo 2^n (C casts), to i1 is `x != 0`.
- f16 and bf16 (IR_SPEC.md section 7, as the reference's `via_f64` and `Working`): values are
  bit patterns (`uint16_t`); each op widens its operands exactly to double, computes there and
  rounds once to the dtype with the exact helpers below (`gdv_round_f16`, `gdv_round_bf16`: the
  double's bits rounded to nearest-even by integer arithmetic, subnormals, overflow to inf,
  NaN kept). For add sub mul div sqrt that is the correctly rounded result (53 >= 2p + 2);
  neg and abs flip or clear the sign bit; max/min compare the widened values and return one of
  the operands' bit patterns; int->f16/bf16 rounds the integer once (`gdv_i2f16`, `gdv_i2bf16`).
  No _Float16 or __bf16: their arithmetic and conversions are the compiler's choice.
"""

from __future__ import annotations

import math
import os

from gdv.backends.c import float8, narrow
from gdv.backends.c.emit import (
    CTYPE,
    NARROW,
    SUFFIX,
    Program,
    attr_literal,
    comment,
    ctype,
    load,
    store,
    strides,
    value_literal,
)
from gdv.backends.c.registry import Unsupported, lowering
from gdv.backends.c.vmath import FAST, FASTF, REQUIRES
from gdv.backends.c.vmath import HELPERS as VMATH
from gdv.ir.core import Op
from gdv.ir.dtypes import INT_DTYPES, SMALL_INT_DTYPES, DType
from gdv.ir.numerics import literal_to_array
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops import OpSpec
from gdv.ir.ops.elementwise import is_signed, iter_leaves

F32_DOUBLE_ENV = "GDV_C_F32_IN_DOUBLE"
"""Set to 1, f32 exp, tanh, erf and sigmoid are computed as for f16 and bf16 (gdv's double
functions, rounded once), which makes whole programs bit-exact to the reference backend nearly
always: tests compare them so, the f32 functions being checked on their own."""

LIBM = {
    "exp": "exp",
    "log": "log",
    "tanh": "tanh",
    "erf": "erf",
    "sin": "sin",
    "cos": "cos",
    "tan": "tan",
    "asin": "asin",
    "acos": "acos",
    "atan": "atan",
    "sinh": "sinh",
    "cosh": "cosh",
    "asinh": "asinh",
    "acosh": "acosh",
    "atanh": "atanh",
    "pow": "pow",
    "rsqrt": "sqrt",
    "sigmoid": "exp",
}
"""The double-precision libm function each transcendental op calls."""


def _float_extreme(kind: str, dtype: DType) -> str:
    """`gdv_{kind}_{s}(a, b)`: IR_SPEC's max (min) on the bits, without a branch. `a` when it
    is NaN or the larger (smaller), else `b` (so a NaN `b` is the result when `a` is not, its
    bits kept); when the two compare equal, `a & b` (`a | b`) of their bits: the same bits for
    equal nonzero values, +0.0 (-0.0) for the two zeros. Three compares, a blend and a masked
    and (or) per vector: a loop of them vectorises (a max pool's), and its scalar remainder
    runs no branches either. tests/backends/c/test_extremes.py checks every pair of special
    values against the reference."""
    t, s = CTYPE[dtype], SUFFIX[dtype]
    it = "int32_t" if dtype is DType.F32 else "int64_t"
    cmp, bitop = (">", "&") if kind == "max" else ("<", "|")
    return (
        f"static inline {t} gdv_{kind}_{s}({t} a, {t} b)\n"
        "{\n"
        f"  {it} ia, ib;\n"
        "  memcpy(&ia, &a, sizeof ia);\n"
        "  memcpy(&ib, &b, sizeof ib);\n"
        f"  {it} r = (a {cmp} b || a != a) ? ia : ib;\n"
        f"  r = a == b ? (ia {bitop} ib) : r;\n"
        f"  {t} f;\n"
        "  memcpy(&f, &r, sizeof f);\n"
        "  return f;\n"
        "}\n"
    )


def _float_to_int(dst: DType) -> str:
    t, s = CTYPE[dst], SUFFIX[dst]
    if dst.is_unsigned:
        top, bottom, held = f"UINT64_C({dst.int_max})", "UINT64_C(0)", "uint64_t"
    else:  # -2^63 has no decimal literal of type long long
        top, bottom, held = f"{dst.int_max}LL", f"({dst.int_min + 1}LL - 1)", "int64_t"
    return (
        f"static inline {t} gdv_f2{s}(double x)\n"
        "{\n"
        "  double t = trunc(x);\n"
        "  if (isnan(t)) return 0;\n"
        f"  if (t >= (double){top}) return ({t}){top};\n"
        f"  if (t <= (double){bottom}) return ({t}){bottom};\n"
        f"  return ({t})({held})t;\n"
        "}\n"
    )


class Literal(str):
    """The C literal of a body `constant` (what `scalar` returns for one), carrying its value:
    the callers keep it in place of a variable (`bind_scalar`), so an op reading it sees the
    constant (`_extreme_with_constant`)."""

    value: float

    def __new__(cls, text: str, value: float) -> Literal:
        lit = super().__new__(cls, text)
        lit.value = value
        return lit


def _extreme_with_constant(kind: str, args: list[str]) -> str | None:
    """f32/f64 max (min) of a value and a constant that is not NaN as one compare, or None.

    With c not NaN, IR_SPEC's max(a, c) = max(c, a) is a when a is NaN, the larger otherwise,
    +0.0 over -0.0: `a <= c ? c : a` (a NaN compares false and stays; a = -0.0 against c = +0.0
    gives c), or `a < c ? c : a` when c is -0.0 (so that a = +0.0 stays). min mirrors it: `a > c
    ? c : a`, or `a >= c ? c : a` when c is -0.0. Equal nonzero values have equal bits. Two
    vector instructions instead of the order keys' dozen (the clip of relu6 after every conv);
    tests/backends/c/test_extremes.py checks both sides of every special value."""
    consts = [k for k, a in enumerate(args) if isinstance(a, Literal) and a.value == a.value]
    if not consts:
        return None
    c = args[consts[-1]]
    a = args[1 - consts[-1]]
    negative_zero = c.value == 0.0 and math.copysign(1.0, c.value) < 0
    if kind == "max":
        rel = "<" if negative_zero else "<="
    else:
        rel = ">=" if negative_zero else ">"
    return f"(({a}) {rel} ({c}) ? ({c}) : ({a}))"


def _narrow_extreme(kind: str, dtype: DType) -> str:
    s = SUFFIX[dtype]
    cmp = ">" if kind == "max" else "<"
    zero = "signbit(y)" if kind == "max" else "signbit(x)"
    return (
        f"static inline uint16_t gdv_{kind}_{s}(uint16_t a, uint16_t b)\n"
        "{\n"
        f"  const double x = gdv_widen_{s}(a), y = gdv_widen_{s}(b);\n"
        f"  uint16_t r = x {cmp} y ? a : b;\n"
        f"  if (x == y && {zero}) r = a;\n"
        "  if (isnan(y)) r = b;\n"
        "  if (isnan(x)) r = a;\n"
        "  return r;\n"
        "}\n"
    )


def _order_key(kind: str, dtype: DType) -> str:
    """`gdv_key_{kind}_{s}(x)`: x's place in the total order -inf < ... < -0.0 < +0.0 < ... <
    +inf as a signed integer of its width (the bits, the magnitude bits flipped when negative),
    a NaN mapped past every other key on the side `kind` keeps (max: the largest integer,
    min: the smallest). An integer max (min) of keys is then IR_SPEC's float max (min), NaN
    and signed zeros included, and vectorises as one instruction."""
    s = SUFFIX[dtype]
    bits, it = (32, "int32_t") if dtype is DType.F32 else (64, "int64_t")
    top = f"INT{bits}_MAX"
    inf = "0x7f800000" if bits == 32 else "INT64_C(0x7ff0000000000000)"
    nan_key = top if kind == "max" else f"INT{bits}_MIN"
    return (
        f"static inline {it} gdv_key_{kind}_{s}({CTYPE[dtype]} x)\n"
        "{\n"
        f"  {it} b;\n"
        "  memcpy(&b, &x, sizeof b);\n"
        f"  const {it} k = b ^ ((b >> {bits - 1}) & {top});\n"
        f"  return (b & {top}) > {inf} ? {nan_key} : k;\n"
        "}\n"
    )


def _order_unkey(dtype: DType) -> str:
    """`gdv_unkey_{s}(k)`: the float whose key is k (a NaN key gives a NaN)."""
    s = SUFFIX[dtype]
    bits, it = (32, "int32_t") if dtype is DType.F32 else (64, "int64_t")
    t = CTYPE[dtype]
    return (
        f"static inline {t} gdv_unkey_{s}({it} k)\n"
        "{\n"
        f"  const {it} b = k ^ ((k >> {bits - 1}) & INT{bits}_MAX);\n"
        f"  {t} x;\n"
        "  memcpy(&x, &b, sizeof x);\n"
        "  return x;\n"
        "}\n"
    )


def _floor_rem(dtype: DType) -> str:
    t, s = CTYPE[dtype], SUFFIX[dtype]
    return (
        f"static inline {t} gdv_floor_rem_{s}({t} r, {t} b)\n"
        "{\n"
        f"  return (r != 0 && ((r < 0) != (b < 0))) ? ({t})(r + b) : r;\n"
        "}\n"
    )


NARROW_HELPER = "gdv_narrow"
"""The helper block every f16/bf16 program needs (emit.load / emit.store call it)."""

HELPERS: dict[str, str] = {NARROW_HELPER: narrow.helpers()}
"""C helper functions by name, emitted once each when a program uses them, in this order (a
helper comes after the ones it calls)."""
for _d in (DType.F32, DType.F64):
    for _k in ("max", "min"):
        HELPERS[f"gdv_{_k}_{SUFFIX[_d]}"] = _float_extreme(_k, _d)
        HELPERS[f"gdv_key_{_k}_{SUFFIX[_d]}"] = _order_key(_k, _d)
    HELPERS[f"gdv_unkey_{SUFFIX[_d]}"] = _order_unkey(_d)
for _d in NARROW:
    for _k in ("max", "min"):
        HELPERS[f"gdv_{_k}_{SUFFIX[_d]}"] = _narrow_extreme(_k, _d)
for _d in (*INT_DTYPES, *SMALL_INT_DTYPES):
    HELPERS[f"gdv_f2{SUFFIX[_d]}"] = _float_to_int(_d)
for _d in (_d for _d in DType if _d.is_int and is_signed(_d)):
    HELPERS[f"gdv_floor_rem_{SUFFIX[_d]}"] = _floor_rem(_d)
HELPERS.update(VMATH)
HELPERS.update(float8.HELPERS)

_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_ARITH = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


def _via_double(expr: str, dtype: DType) -> str:
    if dtype in NARROW:
        return store(expr, dtype)
    return f"(({CTYPE[dtype]})({expr}))" if dtype is DType.F32 else f"({expr})"


def convert_helpers(src: DType, dst: DType) -> set[str]:
    """The helpers `convert_expr(_, src, dst)` calls."""
    out = set()
    if src.is_small_int:
        return convert_helpers(DType.I8 if src.int_min < 0 else DType.U8, dst)
    if dst.is_small_int:
        if src.is_float8:
            return {float8.helper(src), f"gdv_f2{SUFFIX[dst]}"}
        return {f"gdv_f2{SUFFIX[dst]}", *convert_helpers(src, DType.F64)} if src.is_float else out
    if src.is_float8 or dst.is_float8:
        wide_src = DType.F64 if src.is_float8 else src
        wide_dst = DType.F64 if dst.is_float8 else dst
        out |= {float8.helper(d) for d in (src, dst) if d.is_float8}
        return out | (convert_helpers(wide_src, wide_dst) if wide_src != wide_dst else set())
    if src in NARROW or dst in NARROW:
        out.add(NARROW_HELPER)
    if src.is_float and dst.is_int:
        out.add(f"gdv_f2{SUFFIX[dst]}")
    return out


def convert_expr(x: str, src: DType, dst: DType, saturate: bool = True) -> str:
    """C for `convert` of the C expression `x` from `src` to `dst` (stored values, both sides);
    the helpers it needs are `convert_helpers(src, dst)`. float8 goes through double: decoded
    exactly, encoded once from the exact value (an integer beyond 2^53 rounds on its way to
    double, but it overflows every float8 either way)."""
    if src is dst:
        return f"({x})"
    if src.is_small_int:  # its low n bits, read with its signedness, as an i8 or u8
        mask, sign = (1 << src.bits) - 1, 1 << (src.bits - 1)
        low = f"((uint8_t)({x}) & {mask}u)"
        if src.int_min < 0:
            return convert_expr(f"((int8_t)((int)({low} ^ {sign}u) - {sign}))", DType.I8, dst)
        return convert_expr(low, DType.U8, dst, saturate)
    if dst.is_small_int:  # the value's low n bits (of its two's complement), the others 0
        mask = (1 << dst.bits) - 1
        if src.is_float8:
            value = f"gdv_f2{SUFFIX[dst]}({float8.decode(x, src)})"
        elif src.is_float:
            value = f"gdv_f2{SUFFIX[dst]}((double){load(x, src)})"
        else:  # integers and i1: the value modulo 2^n
            value = f"({x})"
        return f"((uint8_t)((uint8_t)({value}) & {mask}u))"
    if src.is_float8:
        return convert_expr(float8.decode(x, src), DType.F64, dst, saturate)
    if dst.is_float8:
        wide = x if src is DType.F64 else convert_expr(x, src, DType.F64)
        return float8.encode(wide, dst, saturate)
    if dst is DType.I1:
        return f"((uint8_t)({load(x, src)} != 0))"  # NaN != 0; -0.0 == 0
    if src.is_float and not dst.is_float:
        return f"gdv_f2{SUFFIX[dst]}((double){load(x, src)})"
    if not src.is_float and not dst.is_float:
        return f"(({CTYPE[dst]})({x}))"  # modulo 2^n
    if dst in NARROW:
        if src.is_unsigned:
            return f"gdv_u2{SUFFIX[dst]}((uint64_t)({x}))"
        if not src.is_float:
            return f"gdv_i2{SUFFIX[dst]}((int64_t)({x}))"
        return store(f"(double){load(x, src)}", dst)  # one rounding from the exact value
    if src in NARROW:
        return f"(({CTYPE[dst]}){load(x, src)})"  # exact in double; f32: one rounding
    return f"(({CTYPE[dst]})({x}))"  # float<->float, int->float: round to nearest-even


def _fast(prog: Program, name: str, x: str) -> str | None:
    """C computing transcendental `name` of the double expression `x` with gdv's own
    vectorisable double functions (backends/c/vmath.py), or None where it has none; the result
    is within a few double ulps, for results rounded once to f16 or bf16 (f32 results use the
    f32 functions unless F32_DOUBLE_ENV says otherwise, `scalar`)."""
    fn = FAST.get("exp" if name == "sigmoid" else name)
    if fn is None:
        return None
    prog.helpers.update(REQUIRES[fn])
    if name == "sigmoid":
        return f"1.0 / (1.0 + {fn}(-{x}))"
    return f"{fn}({x})"


def _narrow_scalar(prog: Program, name: str, op: Op, args: list[str], dtype: DType) -> str:
    """C for float op `name` on f16/bf16 bit patterns `args`: computed in double from the
    exact widened values, rounded once to `dtype` (the reference's via_f64)."""
    s = SUFFIX[dtype]
    x = [load(a, dtype) for a in args]
    if name in ("max", "min"):
        prog.helpers.add(f"gdv_{name}_{s}")
        return f"gdv_{name}_{s}({args[0]}, {args[1]})"
    if name == "relu":
        prog.helpers.add(f"gdv_max_{s}")
        return f"gdv_max_{s}({args[0]}, ((uint16_t)0x0000u))"
    if name == "neg":
        return f"((uint16_t)(({args[0]}) ^ 0x8000u))"
    if name == "abs":
        return f"((uint16_t)(({args[0]}) & 0x7fffu))"
    if name in _ARITH:
        return store(f"{x[0]} {_ARITH[name]} {x[1]}", dtype)
    if name in ("sqrt", "floor"):
        return store(f"{name}({x[0]})", dtype)
    return store(_in_double(prog, name, x, fast=True), dtype)


def _in_double(prog: Program, name: str, x: list[str], fast: bool) -> str:
    """The double-precision C expression of transcendental `name` on the double expressions
    `x`: gdv's vectorisable function when `fast` and it has one, else libm."""
    expr = _fast(prog, name, x[0]) if fast else None
    if expr is not None:
        return expr
    prog.libm.add(LIBM[name])
    if name == "rsqrt":
        return f"1.0 / sqrt({x[0]})"
    if name == "sigmoid":
        return f"1.0 / (1.0 + exp(-{x[0]}))"
    if name == "pow":
        return f"pow({x[0]}, {x[1]})"
    return f"{LIBM[name]}({x[0]})"


_BITWISE = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}


def _bitwise_scalar(name: str, dtype: DType, args: list[str]) -> str:
    """C for a bitwise op or shift on integers (i1: 0/1 in a uint8_t), with no undefined or
    implementation-defined step but the final conversion to a signed type, which GCC and Clang
    define as modulo 2^n: a shift amount outside [0, bits) never reaches `<<` or `>>` (the
    amount read as uint64_t: a negative one is then huge), `<<` runs on the unsigned type of
    the width, and a negative signed `a >> b` is computed as ~(~a >> b), on a nonnegative
    value (IR_SPEC.md: arithmetic for signed, logical for unsigned dtypes)."""
    t, a = CTYPE[dtype], args[0]
    if name in _BITWISE:
        return f"(({t})(({a}) {_BITWISE[name]} ({args[1]})))"
    if name == "bitwise_not":
        return f"((uint8_t)(({a}) ^ 1u))" if dtype.is_bool else f"(({t})~({a}))"
    b, w = args[1], dtype.bits
    inside = f"((uint64_t)({b}) < {w}u)"
    if name == "shift_left":
        ut = f"uint{w}_t"
        return f"({inside} ? ({t})({ut})(({ut})({a}) << ({b})) : ({t})0)"
    if not is_signed(dtype):
        return f"({inside} ? ({t})(({a}) >> ({b})) : ({t})0)"
    moved = f"(({a}) < 0 ? ~(~({a}) >> ({b})) : ({a}) >> ({b}))"
    return f"({inside} ? ({t}){moved} : ({t})(({a}) < 0 ? -1 : 0))"


def _remainder_scalar(prog: Program, name: str, dtype: DType, args: list[str]) -> str:
    """C for rem and mod. Integers: C's `%` (the sign of a) never sees a zero divisor (the
    result is a) nor a signed -1 (the result is 0: INT_MIN % -1 is undefined in C); mod adds b
    where a nonzero remainder's sign differs from b's. Floats (rem): C's fmod, which is exact
    (f16/bf16: on the widened values, so exact again once rounded back)."""
    a, b = args
    if dtype.is_float:
        if dtype in NARROW:
            return store(f"fmod({load(a, dtype)}, {load(b, dtype)})", dtype)
        prog.libm.add("fmod")
        return f"fmod{'' if dtype is DType.F64 else 'f'}(({a}), ({b}))"
    t = CTYPE[dtype]
    minus_one = f" || ({b}) == ({t})-1" if is_signed(dtype) else ""
    r = f"(({b}) == 0{minus_one} ? ({t})0 : ({t})(({a}) % ({b})))"
    if name == "mod" and is_signed(dtype):
        # r's sign differs from b's: r + b (|r| < |b|, so it cannot overflow)
        r = f"gdv_floor_rem_{SUFFIX[dtype]}({r}, ({b}))"
        prog.helpers.add(f"gdv_floor_rem_{SUFFIX[dtype]}")
    return f"(({b}) == 0 ? ({a}) : {r})"


def _quotient_scalar(dtype: DType, args: list[str]) -> str:
    """C for integer div: `/` never sees a zero divisor (the result is 0) nor a signed -1 (the
    result is -a computed on uint64_t, so INT_MIN / -1 = INT_MIN, where C's is undefined)."""
    a, b = args
    t = CTYPE[dtype]
    q = f"({t})(({a}) / ({b}))"
    if is_signed(dtype):
        q = f"(({b}) == ({t})-1 ? ({t})((uint64_t)0 - (uint64_t)({a})) : {q})"
    return f"(({b}) == 0 ? ({t})0 : {q})"


def scalar(prog: Program, op: Op, args: list[str], arg_dtypes: list[DType]) -> str:
    """The C expression computing body op `op` (rank 0) on the C expressions `args`.

    Operands and result are stored values (`CTYPE`): f16/bf16 bit patterns are widened and the
    result rounded inside the expression, so callers load, store and fold it unchanged."""
    name, dtype = op.name, op.type.dtype
    rule = SCALAR.get(OPS.get(name))  # type: ignore[arg-type]
    # Not `rule is not scalar`: the name `scalar` may be rebound (a test's wrapper).
    if rule is None or isinstance(rule, Unsupported):
        raise prog.error(op, rule.reason if isinstance(rule, Unsupported) else "no C scalar code")
    for d in [dtype, *arg_dtypes]:
        ctype(d, op, prog.module)
        if d in NARROW:
            prog.helpers.add(NARROW_HELPER)
    if name == "constant":
        leaves = list(iter_leaves(op.attrs["value"]))
        value = literal_to_array(leaves[0], dtype)[()]
        return Literal(attr_literal(leaves[0], dtype), float(value) if dtype.is_float else value)
    if name == "convert":
        src = arg_dtypes[0]
        prog.helpers.update(convert_helpers(src, dtype))
        return convert_expr(args[0], src, dtype, op.attrs.get("saturate", True))
    if name == "select":
        return f"(({args[0]}) ? ({args[1]}) : ({args[2]}))"
    if name == "cmp":
        a, b = (load(x, d) for x, d in zip(args, arg_dtypes, strict=True))
        return f"((uint8_t)({a} {_CMP[op.attrs['dir']]} {b}))"
    t = CTYPE[dtype]
    if name in _BITWISE or name in ("bitwise_not", "shift_left", "shift_right"):
        return _bitwise_scalar(name, dtype, args)
    if name in ("rem", "mod"):
        return _remainder_scalar(prog, name, dtype, args)
    if not dtype.is_float:  # integer add sub mul div max min
        a, b = args
        if name == "div":
            return _quotient_scalar(dtype, args)
        if name in ("max", "min"):
            rel = ">" if name == "max" else "<"
            return f"(({a}) {rel} ({b}) ? ({a}) : ({b}))"
        return f"(({t})((uint64_t)({a}) {_ARITH[name]} (uint64_t)({b})))"
    if dtype in NARROW:
        return _narrow_scalar(prog, name, op, args, dtype)
    f = "" if dtype is DType.F64 else "f"
    if name in _ARITH:
        return f"(({args[0]}) {_ARITH[name]} ({args[1]}))"
    if name in ("max", "min"):
        one = _extreme_with_constant(name, args)
        if one is not None:
            return one
        prog.helpers.add(f"gdv_{name}_{SUFFIX[dtype]}")
        return f"gdv_{name}_{SUFFIX[dtype]}({args[0]}, {args[1]})"
    if name == "relu":
        zero = Literal(value_literal(0.0, dtype), 0.0)
        return _extreme_with_constant("max", [args[0], zero])  # type: ignore[return-value]
    if name == "neg":
        return f"(-({args[0]}))"
    if name in ("abs", "sqrt", "floor"):
        fn = {"abs": "fabs", "sqrt": "sqrt", "floor": "floor"}[name]
        return f"{fn}{f}({args[0]})"
    # Transcendentals: f32 exp, tanh, erf and sigmoid with gdv's f32 functions; the others in
    # double, rounded once to the dtype (libm; f64 always libm).
    if dtype is DType.F32 and name in FASTF and os.environ.get(F32_DOUBLE_ENV) != "1":
        prog.helpers.update(REQUIRES[FASTF[name]])
        return f"{FASTF[name]}({args[0]})"
    x = [f"(double)({a})" for a in args]
    return _via_double(_in_double(prog, name, x, fast=dtype is DType.F32), dtype)


SCALAR: dict[OpSpec, object] = {}
"""The C scalar column (tests/test_registry.py checks it for every op a kernel body may hold):
per op spec, `scalar` (which computes it) or an explicit `Unsupported` entry with the reason."""
for _name in (
    "neg abs exp log sqrt rsqrt tanh sigmoid erf sin cos floor relu add sub mul div max min "
    "pow cmp select convert constant tan asin acos atan sinh cosh asinh acosh atanh "
    "bitwise_and bitwise_or bitwise_xor bitwise_not shift_left shift_right rem mod"
).split():
    SCALAR[OPS[_name]] = scalar


# --- the ops outside kernels -----------------------------------------------------------------


def _elementwise(prog: Program, op: Op) -> None:
    """A lone elementwise op: a loop nest over its shape with the op as the body."""
    from gdv.backends.c.nest import Nest, emit_nest

    types = prog.entry.types()
    operand_types = [types[o] for o in op.operands]
    n = op.type.rank
    maps = [[[int(i == d) for i in range(n)] + [0] for d in range(n)] for _ in op.operands]

    def body(loads: list[str], lines: list[str], indent: str) -> str:
        return scalar(prog, op, loads, [t.dtype for t in operand_types])

    nest = Nest(list(op.type.shape), maps, list(range(n)), [], "none", {})
    emit_nest(prog, op, nest, operand_types, body, f"{op.name} %{comment(op.result)}")


# Every op with operands that has scalar code stands alone as a one-op nest.
lowering(*(s for s, r in SCALAR.items() if r is scalar and s.min_operands > 0))(_elementwise)


def bind_scalar(
    prog: Program,
    op: Op,
    env: dict[str, tuple[str, DType]],
    lines: list[str],
    indent: str,
    var: str,
) -> None:
    """Body op `op` (rank 0) on the values `env` holds (name -> C expression, dtype): a
    `const` variable `var` is declared to its C expression and `env` maps the result to it; a
    constant's literal goes into `env` itself, so the ops reading it see the value."""
    expr = scalar(prog, op, [env[o][0] for o in op.operands], [env[o][1] for o in op.operands])
    if isinstance(expr, Literal):
        env[op.result] = (expr, op.type.dtype)
        return
    t = ctype(op.type.dtype, op, prog.module)
    lines.append(f"{indent}const {t} {var} = {expr};  /* %{comment(op.result)} */")
    env[op.result] = (var, op.type.dtype)


@lowering(OPS["constant"])
def _constant(prog: Program, op: Op) -> None:
    dtype = op.type.dtype
    t = ctype(dtype, op, prog.module)
    prog.new_slot(op.result, op.type)
    out = prog.var(op.result)
    count = op.type.num_elements
    value = op.attrs["value"]
    note = f"  /* constant %{comment(op.result)} */"
    if not isinstance(value, list):
        lit = attr_literal(value, dtype)
        prog.body.append(f"  for (int64_t i = 0; i < {count}; i++) {out}[i] = {lit};{note}")
        return
    leaves = [literal_to_array(v, dtype)[()] for v in iter_leaves(value)]
    name = f"gdv_c{len(prog.functions)}"
    items = ",\n  ".join(value_literal(v, dtype) for v in leaves)  # type: ignore[arg-type]
    prog.functions.append(f"static const {t} {name}[{max(1, count)}] = {{\n  {items}\n}};\n")
    prog.body.append(f"  memcpy({out}, {name}, sizeof({t}) * {count});{note}")


@lowering(OPS["iota"])
def _iota(prog: Program, op: Op) -> None:
    dtype = op.type.dtype
    ctype(dtype, op, prog.module)
    prog.new_slot(op.result, op.type)
    out = prog.var(op.result)
    axis = op.attrs["axis"]
    stride, size = strides(op.type)[axis], op.type.shape[axis]
    index = f"((int64_t)((i / {stride}) % {max(1, size)}))"
    value = index if dtype is DType.I64 else convert_expr(index, DType.I64, dtype)
    prog.helpers.update(convert_helpers(DType.I64, dtype))
    prog.body.append(
        f"  for (int64_t i = 0; i < {op.type.num_elements}; i++) {out}[i] = {value};"
        f"  /* iota %{comment(op.result)} */"
    )
