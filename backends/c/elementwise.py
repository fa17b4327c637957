"""C for the elementwise family: the scalar code of every op a kernel body may hold, and the
ops themselves when they stand outside kernels (as one-op loop nests), constants and iota.

Meaning, exactly as the reference backend (`backends/reference/elementwise.py`):
- add sub mul div sqrt on f32/f64: C's IEEE operations in the dtype (one rounding each; the
  compiler runs with -ffp-contract=off and without -ffast-math, FLT_EVAL_METHOD is 0), which
  equal the reference's f64-then-round-once results.
- integer add sub mul wrap: computed in uint64_t, then converted to the dtype (GCC and Clang
  define that conversion as modulo 2^n).
- max/min: NaN if either is NaN, max(-0.0, +0.0) = +0.0, min gives -0.0 (helpers below, the
  reference's `float_max`/`float_min` step by step); relu is max(x, +0.0).
- neg flips the sign (C's unary minus), abs clears it (fabs), floor is exact (floor).
- transcendentals (exp log tanh erf sin cos pow, rsqrt = 1/sqrt, sigmoid = 1/(1+exp(-x))) go
  through libm in double and are rounded once to the dtype, as the reference evaluates them in
  float64: the libm functions used are recorded in the capability descriptor. Their last bits
  are implementation-defined (IR_SPEC.md section 3), so f64 results may differ from numpy's in
  the last place; f32 results almost always agree bit for bit.
- convert: float->float rounds to nearest-even (C casts), float->int truncates and saturates
  with NaN -> 0 (helper), int->float rounds to nearest-even (C casts), int->int wraps, to i1
  is `x != 0`.
"""

from __future__ import annotations

from gdv.backends.c.emit import (
    CTYPE,
    SUFFIX,
    Program,
    attr_literal,
    comment,
    ctype,
    strides,
    value_literal,
)
from gdv.backends.c.registry import lowering
from gdv.ir.core import Op
from gdv.ir.dtypes import DType
from gdv.ir.numerics import literal_to_array
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops.elementwise import iter_leaves

LIBM = {
    "exp": "exp",
    "log": "log",
    "tanh": "tanh",
    "erf": "erf",
    "sin": "sin",
    "cos": "cos",
    "pow": "pow",
    "rsqrt": "sqrt",
    "sigmoid": "exp",
}
"""The double-precision libm function each transcendental op calls."""


def _float_extreme(kind: str, dtype: DType) -> str:
    t, s = CTYPE[dtype], SUFFIX[dtype]
    cmp = ">" if kind == "max" else "<"
    # Equal values differ only for zeros: max keeps `a` when `b` is -0.0, min when `a` is.
    zero = "signbit(b)" if kind == "max" else "signbit(a)"
    return (
        f"static inline {t} gdv_{kind}_{s}({t} a, {t} b)\n"
        "{\n"
        f"  {t} r = a {cmp} b ? a : b;\n"
        f"  if (a == b && {zero}) r = a;\n"
        "  if (isnan(b)) r = b;\n"
        "  if (isnan(a)) r = a;\n"
        "  return r;\n"
        "}\n"
    )


def _float_to_int(dst: DType) -> str:
    t, s = CTYPE[dst], SUFFIX[dst]
    return (
        f"static inline {t} gdv_f2{s}(double x)\n"
        "{\n"
        "  double t = trunc(x);\n"
        "  if (isnan(t)) return 0;\n"
        f"  if (t >= (double){dst.int_max}LL) return ({t}){dst.int_max}LL;\n"
        f"  if (t <= (double)({dst.int_min + 1}LL - 1)) return ({t})({dst.int_min + 1}LL - 1);\n"
        f"  return ({t})(int64_t)t;\n"
        "}\n"
    )


HELPERS: dict[str, str] = {}
"""C helper functions by name, emitted once each when a program uses them."""
for _d in (DType.F32, DType.F64):
    for _k in ("max", "min"):
        HELPERS[f"gdv_{_k}_{SUFFIX[_d]}"] = _float_extreme(_k, _d)
for _d in (DType.I64, DType.I32, DType.I8):
    HELPERS[f"gdv_f2{SUFFIX[_d]}"] = _float_to_int(_d)

_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_ARITH = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


def _via_double(expr: str, dtype: DType) -> str:
    return f"(({CTYPE[dtype]})({expr}))" if dtype is DType.F32 else f"({expr})"


def convert_expr(x: str, src: DType, dst: DType) -> str:
    """C for `convert` of the C expression `x` from `src` to `dst` (both supported dtypes)."""
    if dst is DType.I1:
        return f"((uint8_t)(({x}) != 0))"
    if src.is_float and not dst.is_float:
        return f"gdv_f2{SUFFIX[dst]}((double)({x}))"
    if not src.is_float and not dst.is_float:
        return f"(({CTYPE[dst]})(int64_t)({x}))"
    return f"(({CTYPE[dst]})({x}))"  # float<->float, int->float: round to nearest-even


def scalar(prog: Program, op: Op, args: list[str], arg_dtypes: list[DType]) -> str:
    """The C expression computing body op `op` (rank 0) on the C expressions `args`."""
    name, dtype = op.name, op.type.dtype
    for d in [dtype, *arg_dtypes]:
        ctype(d, op, prog.module)
    if name == "constant":
        leaves = list(iter_leaves(op.attrs["value"]))
        return attr_literal(leaves[0], dtype)
    if name == "convert":
        src = arg_dtypes[0]
        if src.is_float and not dtype.is_float and not dtype.is_bool:
            prog.helpers.add(f"gdv_f2{SUFFIX[dtype]}")
        return convert_expr(args[0], src, dtype)
    if name == "select":
        return f"(({args[0]}) ? ({args[1]}) : ({args[2]}))"
    if name == "cmp":
        return f"((uint8_t)(({args[0]}) {_CMP[op.attrs['dir']]} ({args[1]})))"
    t = CTYPE[dtype]
    if not dtype.is_float:  # integer add sub mul max min
        a, b = args
        if name in ("max", "min"):
            rel = ">" if name == "max" else "<"
            return f"(({a}) {rel} ({b}) ? ({a}) : ({b}))"
        return f"(({t})((uint64_t)(int64_t)({a}) {_ARITH[name]} (uint64_t)(int64_t)({b})))"
    f = "" if dtype is DType.F64 else "f"
    if name in _ARITH:
        return f"(({args[0]}) {_ARITH[name]} ({args[1]}))"
    if name in ("max", "min"):
        prog.helpers.add(f"gdv_{name}_{SUFFIX[dtype]}")
        return f"gdv_{name}_{SUFFIX[dtype]}({args[0]}, {args[1]})"
    if name == "relu":
        prog.helpers.add(f"gdv_max_{SUFFIX[dtype]}")
        return f"gdv_max_{SUFFIX[dtype]}({args[0]}, {value_literal(0.0, dtype)})"
    if name == "neg":
        return f"(-({args[0]}))"
    if name in ("abs", "sqrt", "floor"):
        fn = {"abs": "fabs", "sqrt": "sqrt", "floor": "floor"}[name]
        return f"{fn}{f}({args[0]})"
    # Transcendentals: libm in double, rounded once to the dtype.
    prog.libm.add(LIBM[name])
    x = [f"(double)({a})" for a in args]
    if name == "rsqrt":
        return _via_double(f"1.0 / sqrt({x[0]})", dtype)
    if name == "sigmoid":
        return _via_double(f"1.0 / (1.0 + exp(-{x[0]}))", dtype)
    if name == "pow":
        return _via_double(f"pow({x[0]}, {x[1]})", dtype)
    return _via_double(f"{LIBM[name]}({x[0]})", dtype)


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


_LONE = (
    "neg abs exp log sqrt rsqrt tanh sigmoid erf sin cos floor relu add sub mul div max min "
    "pow cmp select convert"
).split()
lowering(*(OPS[name] for name in _LONE))(_elementwise)


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
    prog.body.append(
        f"  for (int64_t i = 0; i < {op.type.num_elements}; i++) {out}[i] = {value};"
        f"  /* iota %{comment(op.result)} */"
    )
