"""Hypothesis strategies for random well-typed gdv modules, built from the op registry.

Every op in `gdv.ir.ops.REGISTRY` has an entry in `OP_GENERATORS`: a function that draws the
op's operand types, its attributes and (for ops whose rule reads it) a written result type. The
result type then comes from the op's own type rule, and operands are existing values of the
right type or fresh parameters. `tests/ir/test_random_modules.py` fails when an op has no
generator, so a new op cannot be forgotten.

Load this file by path (pytest runs with --import-mode=importlib): see `load_strategies` in the
tests that use it.
"""

from __future__ import annotations

import dataclasses
import math
import string
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from gdv.ir import ops as op_registry
from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.dtypes import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, DType
from gdv.ir.ops.collective import COLLECTIVES
from gdv.ir.ops.control import CONTROL
from gdv.ir.ops.elementwise import (
    BINARY_DOCS,
    BITWISE_DOCS,
    CMP_DIRECTIONS,
    INT_BINARY,
    SHIFT_DOCS,
    UNARY_FLOAT_DOCS,
)
from gdv.ir.ops.reduce import REDUCE_DOCS, SCAN_STEP
from gdv.ir.parser import MAX_NAME_LENGTH, float_literal
from gdv.ir.types import TensorType

NAME_CHARS = string.ascii_letters + string.digits + "_."
KEY_FIRST = string.ascii_letters + "_"
KEY_CHARS = KEY_FIRST + string.digits

# --- names -----------------------------------------------------------------------------------

names = st.one_of(
    st.text(NAME_CHARS, min_size=1, max_size=8),
    st.text(NAME_CHARS, min_size=MAX_NAME_LENGTH - 2, max_size=MAX_NAME_LENGTH),
    st.integers(0, 99).map(str),
    st.sampled_from(["return", "func", "true", "inf", "nan", "f32", "1.5e3", "...", "_", "main"]),
)
"""Value and function names: `[A-Za-z0-9_.]+`, at most 128 characters."""

attr_keys = st.one_of(
    st.text(KEY_FIRST, min_size=1, max_size=1).flatmap(
        lambda c: st.text(KEY_CHARS, max_size=10).map(lambda rest: c + rest)
    ),
    # Words that are tokens elsewhere are still keys here (the lexer is contextual).
    st.sampled_from(["true", "false", "return", "func", "inf", "nan", "f32", "bf16", "dims"]),
).filter(lambda k: k not in ("mesh", "sharding", "out_shardings"))
"""Attribute keys; the three that mean something on functions and parameters (docs/IR_SPEC.md
section 7, meshes) are left out of random ones."""

# --- literals --------------------------------------------------------------------------------

SPECIAL_FLOATS = [
    0.0,
    -0.0,
    math.inf,
    -math.inf,
    math.nan,
    5e-324,  # the smallest f64 subnormal
    -2.2250738585072014e-308,
    1.7976931348623157e308,
    1e-45,
    65504.0,
    3.4028234663852886e38,
]
DECIMAL_LITERALS = [
    "0.1",  # not an f64: kept exact
    "-1e-400",  # below every dtype: -0.0
    "1e400",  # above every dtype: inf
    "1.5e-350",  # below f64 but written: kept exact
    "123456789012345678901234567890.5",
    "-0.000000000000000000000000000000000000000000001",
    "3.14159265358979323846264338327950288419716939937510",
]

float_values = st.one_of(
    st.sampled_from(SPECIAL_FLOATS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(DECIMAL_LITERALS).map(float_literal),
    st.builds(
        lambda m, e: float_literal(f"{m}e{e}"),
        st.integers(-(10**20), 10**20),
        st.integers(-420, 420),
    ),
)
"""Python floats and exact Fractions, as the parser produces them from literals."""

int_values = st.one_of(
    st.integers(-5, 5),
    st.integers(),
    st.sampled_from([2**63 - 1, -(2**63), 2**64, -(10**300), 10**3999]),
)

scalar_attr_values = st.one_of(
    int_values,
    float_values,
    st.booleans(),
    st.text(max_size=12),
    st.sampled_from(
        ["", "\x1b[31m", "\\", '"', "\n\t\r", "\u00e9\u4e2d\U0001f600", "\x00", "\ud800"]
    ),
    st.sampled_from(ALL_DTYPES),
)
attr_values = st.recursive(
    scalar_attr_values, lambda inner: st.lists(inner, max_size=3), max_leaves=8
)
"""Any attribute value the grammar can write (parameter and function attributes)."""


def literal_for(dtype: DType) -> st.SearchStrategy:
    """A literal that `dtype` accepts (IR_SPEC.md section 2)."""
    if dtype.is_bool:
        return st.one_of(st.booleans(), st.sampled_from([0, 1]))
    if dtype.is_int:
        return st.one_of(
            st.integers(dtype.int_min, dtype.int_max),
            st.sampled_from([dtype.int_min, dtype.int_max, 0, max(-1, dtype.int_min)]),
        )
    return st.one_of(float_values, st.integers(-(10**30), 10**30))


# --- shapes and types ------------------------------------------------------------------------

dims = st.one_of(st.integers(1, 3), st.sampled_from([0, 1]))


def shapes(min_rank: int = 0, max_rank: int = 4) -> st.SearchStrategy:
    return st.lists(dims, min_size=min_rank, max_size=max_rank).map(tuple)


FORCED_DTYPE: list[DType | None] = [None]
"""Set FORCED_DTYPE[0] to make every dtype choice that allows it pick that dtype (the dtype
coverage test uses it to ask each generator for each dtype in turn)."""


def dtype_choice(allowed) -> st.SearchStrategy:
    forced = FORCED_DTYPE[0]
    return st.just(forced) if forced in allowed else st.sampled_from(list(allowed))


def types(dtypes=ALL_DTYPES, min_rank: int = 0, max_rank: int = 4) -> st.SearchStrategy:
    return st.builds(TensorType, dtype_choice(dtypes), shapes(min_rank, max_rank))


NUMERIC = [d for d in ALL_DTYPES if not d.is_bool]

# --- per-op generators -----------------------------------------------------------------------
# Each takes `draw` and returns (operand types, attributes, written result type or None). The
# written type matters only to rules that read it (convert, reshape, constant, iota, broadcast,
# dot and matmul's float result); the result type printed is what the rule infers.

Drawn = tuple[list[TensorType], dict[str, Any], TensorType | None]
Generator = Callable[[Callable], Drawn]


def _unary_float(draw) -> Drawn:
    return [draw(types(FLOAT_DTYPES))], {}, None


def _binary(name: str) -> Generator:
    allowed = NUMERIC if name in (*INT_BINARY, "rem") else FLOAT_DTYPES
    allowed = INT_DTYPES if name == "mod" else allowed

    def gen(draw) -> Drawn:
        t = draw(types(allowed))
        return [t, t], {}, None

    return gen


def _bitwise(name: str) -> Generator:
    # integers (and i1 but for the shifts); bitwise_not has one operand
    allowed = INT_DTYPES if name in SHIFT_DOCS else [*INT_DTYPES, DType.I1]

    def gen(draw) -> Drawn:
        t = draw(types(allowed))
        return [t] * (1 if name == "bitwise_not" else 2), {}, None

    return gen


def _cmp(draw) -> Drawn:
    t = draw(types())
    return [t, t], {"dir": draw(st.sampled_from(CMP_DIRECTIONS))}, None


def _select(draw) -> Drawn:
    t = draw(types())
    return [t.with_dtype(DType.I1), t, t], {}, None


def _convert(draw) -> Drawn:
    t = draw(types())
    return [t], {}, t.with_dtype(draw(dtype_choice(ALL_DTYPES)))


def _nested(draw, shape: tuple[int, ...], leaf: st.SearchStrategy) -> Any:
    if not shape:
        return draw(leaf)
    return [_nested(draw, shape[1:], leaf) for _ in range(shape[0])]


def _constant(draw) -> Drawn:
    t = draw(types(max_rank=3))
    leaf = literal_for(t.dtype)
    zero = [i for i, d in enumerate(t.shape) if d == 0]
    # A nested list spells a shape only when its first zero dim (if any) is the last dim.
    listable = t.rank > 0 and (not zero or zero[0] == t.rank - 1)
    if listable and draw(st.booleans()):
        value = _nested(draw, t.shape, leaf)
    else:
        value = draw(leaf)
    return [], {"value": value}, t


def _iota(draw) -> Drawn:
    t = draw(types(NUMERIC, min_rank=1))
    return [], {"axis": draw(st.integers(0, t.rank - 1))}, t


def _broadcast(draw) -> Drawn:
    result = draw(types(min_rank=0))
    kept = sorted(draw(st.sets(st.integers(0, result.rank - 1)))) if result.rank else []
    shape = [draw(st.sampled_from([1, result.shape[d]])) for d in kept]
    return [result.with_shape(shape)], {"dims": kept}, result


def _factor(draw, n: int) -> tuple[int, ...]:
    """A random shape with `n` elements."""
    if n == 0:
        return (*draw(shapes(max_rank=2)), 0)
    out: list[int] = []
    rest = n
    while rest > 1:
        divisors = [d for d in range(2, rest + 1) if rest % d == 0]
        d = draw(st.sampled_from(divisors))
        out.append(d)
        rest //= d
    for _ in range(draw(st.integers(0, 2))):
        out.insert(draw(st.integers(0, len(out))), 1)
    return tuple(out)


def _reshape(draw) -> Drawn:
    t = draw(types())
    return [t], {}, t.with_shape(_factor(draw, t.num_elements))


def _transpose(draw) -> Drawn:
    t = draw(types())
    return [t], {"perm": draw(st.permutations(list(range(t.rank))))}, None


def _slice(draw) -> Drawn:
    t = draw(types())
    start, limit, stride = [], [], []
    for size in t.shape:
        a = draw(st.integers(0, size))
        start.append(a)
        limit.append(draw(st.integers(a, size)))
        stride.append(draw(st.integers(1, 3)))
    return [t], {"start": start, "limit": limit, "stride": stride}, None


def _concat(draw) -> Drawn:
    t = draw(types(min_rank=1))
    axis = draw(st.integers(0, t.rank - 1))
    n = draw(st.integers(1, 4))
    operands = []
    for _ in range(n):
        shape = list(t.shape)
        shape[axis] = draw(dims)
        operands.append(t.with_shape(shape))
    return operands, {"axis": axis}, None


def _pad(draw) -> Drawn:
    t = draw(types())
    low = [draw(st.integers(0, 2)) for _ in t.shape]
    high = [draw(st.integers(0, 2)) for _ in t.shape]
    return [t], {"low": low, "high": high, "value": draw(literal_for(t.dtype))}, None


def _reduce(draw) -> Drawn:
    t = draw(types(NUMERIC))
    axes = draw(st.permutations(list(range(t.rank))))
    return [t], {"axes": list(axes[: draw(st.integers(0, t.rank))])}, None


def _scan(draw) -> Drawn:
    t = draw(types(NUMERIC, min_rank=1))
    attrs: dict[str, Any] = {"axis": draw(st.integers(0, t.rank - 1))}
    for flag in ("exclusive", "reverse"):
        value = draw(st.sampled_from([None, False, True]))
        if value is not None:
            attrs[flag] = value
    return [t], attrs, None


def _argsort(draw) -> Drawn:
    t = draw(types(NUMERIC, min_rank=1))
    attrs: dict[str, Any] = {"axis": draw(st.integers(0, t.rank - 1))}
    descending = draw(st.sampled_from([None, False, True]))
    if descending is not None:
        attrs["descending"] = descending
    return [t], attrs, None


def _dot(draw) -> Drawn:
    dtype = draw(dtype_choice(NUMERIC))
    batch = draw(st.lists(dims, max_size=2))
    contract = draw(st.lists(dims, max_size=2))
    a_free = draw(st.lists(dims, max_size=2))
    b_free = draw(st.lists(dims, max_size=2))

    def layout(free: list[int]) -> tuple[list[int], list[int], list[int]]:
        roles = [("b", i) for i in range(len(batch))] + [("c", i) for i in range(len(contract))]
        roles += [("f", i) for i in range(len(free))]
        order = draw(st.permutations(roles))
        shape = [{"b": batch, "c": contract, "f": free}[r][i] for r, i in order]
        return (
            shape,
            [order.index(("b", i)) for i in range(len(batch))],
            [order.index(("c", i)) for i in range(len(contract))],
        )

    a_shape, lb, lc = layout(a_free)
    b_shape, rb, rc = layout(b_free)
    attrs: dict[str, Any] = {
        "lhs_batch": lb,
        "rhs_batch": rb,
        "lhs_contract": lc,
        "rhs_contract": rc,
    }
    if dtype.is_float:
        written = draw(dtype_choice(FLOAT_DTYPES))
        if draw(st.booleans()):
            attrs["acc"] = draw(dtype_choice(FLOAT_DTYPES))
    else:
        written = dtype
        if draw(st.booleans()):
            attrs["acc"] = dtype
    result = TensorType(written, (*batch, *a_free, *b_free))
    return [TensorType(dtype, tuple(a_shape)), TensorType(dtype, tuple(b_shape))], attrs, result


def _take(draw) -> Drawn:
    table = draw(types(min_rank=1))
    axis = draw(st.integers(0, table.rank - 1))
    idx = draw(types(INT_DTYPES, max_rank=2))
    if table.shape[axis] == 0 and idx.num_elements:
        idx = idx.with_shape((*idx.shape[:-1], 0)) if idx.rank else idx.with_shape((0,))
    return [table, idx], {"axis": axis}, None


def _conv2d(draw) -> Drawn:
    dtype = draw(dtype_choice(NUMERIC))
    groups = draw(st.integers(1, 2))
    c = groups * draw(st.integers(0, 2))
    o = groups * draw(st.integers(0, 2))
    stride = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    dilation = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    padding = [[draw(st.integers(0, 2)), draw(st.integers(0, 2))] for _ in range(2)]
    k = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    hw = []
    for i in range(2):
        need = dilation[i] * (k[i] - 1) + 1 - sum(padding[i])
        hw.append(max(need, 0) + draw(st.integers(0, 3)))
    x = TensorType(dtype, (draw(dims), c, hw[0], hw[1]))
    w = TensorType(dtype, (o, c // groups, k[0], k[1]))
    attrs = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    return [x, w], attrs, None


def _matmul(draw) -> Drawn:
    dtype = draw(dtype_choice(NUMERIC))
    batch = draw(st.lists(dims, max_size=2))
    m, k, n = draw(dims), draw(dims), draw(dims)
    a = TensorType(dtype, (*batch, m, k))
    b = TensorType(dtype, (*batch, k, n))
    written = draw(dtype_choice(FLOAT_DTYPES)) if dtype.is_float else dtype
    return [a, b], {}, TensorType(written, (*batch, m, n))


def _axis_float(draw) -> Drawn:
    t = draw(types(FLOAT_DTYPES, min_rank=1))
    return [t], {"axis": draw(st.integers(0, t.rank - 1))}, None


def _layer_norm(draw) -> Drawn:
    x = draw(types(FLOAT_DTYPES))
    axes = sorted(draw(st.sets(st.integers(0, x.rank - 1)))) if x.rank else []
    norm = x.with_shape([x.shape[a] for a in axes])
    eps = draw(st.one_of(float_values, st.integers(0, 10)))
    return [x, norm, norm], {"axes": axes, "eps": eps}, None


def _gelu(draw) -> Drawn:
    return (
        [draw(types(FLOAT_DTYPES))],
        {"approximate": draw(st.sampled_from(["none", "tanh"]))},
        None,
    )


def _kernel(draw) -> Drawn:
    """A loop-stage kernel whose affine maps stay inside its operands for the whole space."""
    dtype = draw(dtype_choice(ALL_DTYPES))
    space = draw(st.lists(dims, max_size=3))
    loops = list(range(len(space)))
    reduce = (
        [] if dtype.is_bool else sorted(draw(st.sets(st.sampled_from(loops or [0]))) & set(loops))
    )
    out = list(draw(st.permutations([d for d in loops if d not in reduce])))
    combiner = draw(st.sampled_from(["add", "max", "min"])) if reduce else "none"
    operand_types, maps = [], []
    for _ in range(draw(st.integers(0, 2))):
        rows, shape = [], []
        for _ in range(draw(st.integers(0, 2))):
            coefs = [draw(st.integers(-1, 2)) for _ in space]
            lo = sum(min(0, c * (n - 1)) for c, n in zip(coefs, space, strict=True))
            hi = sum(max(0, c * (n - 1)) for c, n in zip(coefs, space, strict=True))
            if 0 in space:  # nothing is read: any map will do
                lo, hi = 0, draw(st.integers(0, 2))
            rows.append([*coefs, -lo + draw(st.integers(0, 1))])
            shape.append(hi - lo + 2)
        maps.append(rows)
        operand_types.append(TensorType(dtype, tuple(shape)))
    attrs: dict[str, Any] = {
        "body": draw(st.sampled_from(["main.k0", "k1", "f"])),
        "space": space,
        "maps": maps,
        "out": out,
        "reduce": reduce,
        "combiner": combiner,
    }
    if draw(st.booleans()):
        attrs["tile"] = [draw(st.integers(1, 4)) for _ in space]
        attrs["order"] = list(draw(st.permutations(loops)))
        attrs["vector"] = draw(st.integers(1, 8))
        attrs["parallel"] = out[: draw(st.integers(0, len(out)))]
        even = len(reduce) == 1 and space[reduce[0]] % 2 == 0
        attrs["accumulators"] = draw(st.integers(1, 2)) if even else 1
    return operand_types, attrs, TensorType(dtype, ())


def _collective(name: str) -> Generator:
    """A collective over a group of at most 4 members (the written type is the one the type
    rule infers for a group of 2; the mesh-level check is not the type rule's)."""

    def gen(draw) -> Drawn:
        allowed = (
            NUMERIC if name in ("all_reduce", "reduce_scatter", "carry_reduce") else ALL_DTYPES
        )
        dtype = draw(dtype_choice(allowed))
        shape = [2 * draw(st.integers(1, 3)) for _ in range(draw(st.integers(1, 3)))]
        x = TensorType(dtype, tuple(shape))
        attrs: dict[str, Any] = {"axes": ["data"]}
        out = list(shape)
        if name in ("all_gather", "reduce_scatter", "shard_slice"):
            attrs["dim"] = draw(st.integers(0, len(shape) - 1))
            out[attrs["dim"]] = (
                out[attrs["dim"]] * 2 if name == "all_gather" else out[attrs["dim"]] // 2
            )
        if name in ("all_reduce", "reduce_scatter"):
            attrs["combiner"] = draw(st.sampled_from(["add", "max", "min"]))
            attrs["order"] = draw(st.sampled_from(["rank", "tree", "ring"]))
        if name == "all_to_all":
            attrs["split_dim"] = draw(st.integers(0, len(shape) - 1))
            attrs["concat_dim"] = draw(st.integers(0, len(shape) - 1))
            if attrs["split_dim"] != attrs["concat_dim"]:
                out[attrs["split_dim"]] //= 2
                out[attrs["concat_dim"]] *= 2
        if name == "collective_permute":
            attrs["pairs"] = draw(st.sampled_from([[], [[0, 1]], [[0, 1], [1, 0]]]))
        if name == "carry_reduce":
            attrs["dims"] = draw(
                st.lists(st.sampled_from(range(len(shape))), min_size=1, unique=True)
            )
            attrs["combiner"] = draw(st.sampled_from(["add", "max", "min"]))
            out = [n for d, n in enumerate(shape) if d not in attrs["dims"]]
        return [x], attrs, x.with_shape(tuple(out))

    return gen


# The control flow ops name functions of the module: `with_bodies` adds them (identity bodies,
# so each result has its operand's type, a scan's outputs being its scanned operands again).


def _if(draw) -> Drawn:
    args = draw(st.lists(types(), min_size=1, max_size=3))
    k = draw(st.integers(0, len(args) - 1))
    attrs = {"then": "then", "else": "else", "result": k}
    return [TensorType(DType.I1, ()), *args], attrs, args[k]


def _while(draw) -> Drawn:
    args = draw(st.lists(types(), min_size=1, max_size=3))
    k = draw(st.integers(0, len(args) - 1))
    trips = draw(st.sampled_from((0, 1, 3, 100, 2**31 - 1)))
    attrs = {"cond": "cond", "body": "body", "max_trips": trips, "result": k}
    return args, attrs, args[k]


def _scan_op(draw) -> Drawn:
    states = draw(st.lists(types(), min_size=0, max_size=2))
    length = draw(dims)
    xs = [
        TensorType(t.dtype, (length, *t.shape))
        for t in draw(st.lists(types(max_rank=3), min_size=1, max_size=2))
    ]
    args = [*states, *xs]
    k = draw(st.integers(0, len(args) - 1))
    attrs = {"body": "body", "num_scan_inputs": len(xs), "result": k}
    return args, attrs, args[k]


COLLECTIVE_OPS = tuple(COLLECTIVES)
UNDRAWN = (*COLLECTIVE_OPS, *CONTROL)
"""Ops `op_instances()` never draws by itself: the collectives (SPMD functions only) and the
control flow ops (they name other functions; tests/backends/reference/test_control.py draws
those with their bodies)."""
"""Valid only in an SPMD function: `functions()` draws them only when asked by name."""

OP_GENERATORS: dict[str, Generator] = {
    **{name: _unary_float for name in UNARY_FLOAT_DOCS},
    **{name: _binary(name) for name in BINARY_DOCS},
    **{name: _bitwise(name) for name in (*BITWISE_DOCS, *SHIFT_DOCS)},
    "rem": _binary("rem"),
    "mod": _binary("mod"),
    "cmp": _cmp,
    "select": _select,
    "convert": _convert,
    "constant": _constant,
    "iota": _iota,
    "broadcast": _broadcast,
    "reshape": _reshape,
    "transpose": _transpose,
    "slice": _slice,
    "concat": _concat,
    "pad": _pad,
    **{name: _reduce for name in REDUCE_DOCS},
    **{name: _scan for name in SCAN_STEP},
    "argsort": _argsort,
    "dot": _dot,
    "take": _take,
    "conv2d": _conv2d,
    "matmul": _matmul,
    "softmax": _axis_float,
    "log_softmax": _axis_float,
    "layer_norm": _layer_norm,
    "gelu": _gelu,
    "kernel": _kernel,
    **{name: _collective(name) for name in COLLECTIVE_OPS},
    "if": _if,
    "while": _while,
    "scan": _scan_op,
}


# --- functions and modules -------------------------------------------------------------------


@st.composite
def op_instances(draw, name: str | None = None) -> tuple[list[TensorType], Op]:
    """One op of the registry (all of them when `name` is None): its operand types and the op,
    with operand names left empty for the function builder to fill in."""
    if name is None:
        name = draw(st.sampled_from(sorted(set(op_registry.REGISTRY) - set(UNDRAWN))))
    spec = op_registry.REGISTRY[name]
    operand_types, attrs, written = OP_GENERATORS[name](draw)
    result = spec.infer(operand_types, attrs, written or draw(types()))
    # Attributes in a random order: the printer's canonical order must not depend on it.
    items = draw(st.permutations(list(attrs.items())))
    return operand_types, Op("", name, [], dict(items), result)


@st.composite
def functions(draw, name: str, op_names: list[str] | None = None) -> Function:
    """A function of random ops whose operands are earlier values or fresh parameters."""
    used: set[str] = set()

    def fresh() -> str:
        name = draw(names)
        while name in used:  # keep it valid: at most 128 characters of [A-Za-z0-9_.]
            name = name[:120] + f".{len(used)}"
        return name

    params: list[Param] = []
    values: list[tuple[str, TensorType]] = []
    ops: list[Op] = []
    for _ in range(draw(st.integers(0, 2))):  # parameters nothing uses
        p = Param(fresh(), draw(types()), draw(param_attrs()))
        used.add(p.name)
        params.append(p)
        values.append((p.name, p.type))
    chosen = op_names if op_names is not None else [None] * draw(st.integers(0, 5))
    for op_name in chosen:
        operand_types, op = draw(op_instances(op_name))
        for t in operand_types:
            same = [n for n, v in values if v == t]
            if same and draw(st.booleans()):
                op.operands.append(draw(st.sampled_from(same)))
            else:
                p = Param(fresh(), t, draw(param_attrs()))
                used.add(p.name)
                params.append(p)
                values.append((p.name, t))
                op.operands.append(p.name)
        op.result = fresh()
        used.add(op.result)
        ops.append(op)
        values.append((op.result, op.type))
    n_returns = draw(st.integers(0, min(3, len(values))))
    returns = [draw(st.sampled_from(values)) for _ in range(n_returns)]
    parenthesized = len(returns) != 1 or draw(st.booleans())
    attrs = draw(st.dictionaries(attr_keys, attr_values, max_size=2)) if draw(st.booleans()) else {}
    return Function(
        name=name,
        params=params,
        results=[t for _, t in returns],
        ops=ops,
        returns=[n for n, _ in returns],
        attrs=attrs,
        results_parenthesized=parenthesized,
    )


@st.composite
def param_attrs(draw) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    if draw(st.booleans()):
        lo = draw(st.one_of(st.floats(-1e6, 1e6), st.integers(-100, 100), float_values))
        hi = draw(st.one_of(st.floats(-1e6, 1e6), st.integers(-100, 100), float_values))
        if any(isinstance(v, float) and math.isnan(v) for v in (lo, hi)):
            lo, hi = -1.0, 1.0
        attrs["range"] = sorted([lo, hi])
    if draw(st.integers(0, 3)) == 0:
        keys = attr_keys.filter(lambda k: k != "range")
        attrs.update(draw(st.dictionaries(keys, attr_values, max_size=2)))
    return attrs


@st.composite
def modules(draw, max_functions: int = 3) -> Module:
    """A module of 1..max_functions functions with distinct names; @main when more than one."""
    n = draw(st.integers(1, max_functions))
    fn_names = [draw(names)] if n == 1 else ["main"]
    while len(fn_names) < n:
        candidate = draw(names)
        if candidate not in fn_names:
            fn_names.append(candidate)
    fn_names = draw(st.permutations(fn_names))
    return Module(with_bodies([draw(functions(name)) for name in fn_names]), "<random>")


def with_bodies(fns: list[Function]) -> list[Function]:
    """`fns` plus a body function for every kernel whose body is not among them (the verifier
    checks kernel bodies at every stage): it returns its first operand of the kernel's dtype,
    or a zero. A kernel whose body name is taken by a function that does not fit is pointed at
    a body of its own. Each control flow op gets functions of its own too (`_control_bodies`)."""
    calls = any(op.name in ("kernel", *CONTROL) for f in fns for op in f.ops)
    if calls and all(f.name != "main" for f in fns):  # several functions need an entry
        fns = [dataclasses.replace(fns[0], name="main"), *fns[1:]]
    out = list(fns)
    taken = {f.name for f in fns}
    for fn in fns:
        types = fn.types()
        for k, op in enumerate(fn.ops):
            if op.name in CONTROL:
                fn.ops[k], made = _control_bodies(op, [types[o] for o in op.operands], taken)
                out += made
                continue
            if op.name != "kernel":
                continue
            body = op.attrs["body"]
            if body in taken:
                # a name the parser accepts (MAX_NAME_LENGTH) whatever the function's name
                body = f"body.{len(taken)}.{k}"
                while body in taken:
                    body += "_"
                fn.ops[k] = Op(op.result, op.name, op.operands, {**op.attrs, "body": body}, op.type)
            taken.add(body)
            params = [
                Param(f"a{i}", TensorType(types[o].dtype, ())) for i, o in enumerate(op.operands)
            ]
            want = TensorType(op.type.dtype, ())
            same = [p for p in params if p.type == want]
            if same:
                ops, ret = [], same[0].name
            else:
                zero = False if want.dtype.is_bool else 0
                ops, ret = [Op("z", "constant", [], {"value": zero}, want)], "z"
            out.append(Function(body, params, [want], ops, [ret]))
    return out


def _control_bodies(op: Op, types: list[TensorType], taken: set[str]) -> tuple[Op, list]:
    """`op` with fresh function names, and those functions: identity bodies (a while's
    condition a constant true), so each result has its operand's type."""
    from gdv.ir.ops.control import FUNCTION_ATTRS, slice_type

    attrs, made = dict(op.attrs), []
    for attr in FUNCTION_ATTRS[op.name]:
        name = next(f"{attr}.{n}" for n in range(len(taken) + 1) if f"{attr}.{n}" not in taken)
        taken.add(name)
        attrs[attr] = name
        if op.name == "if":
            params = [Param(f"a{i}", t) for i, t in enumerate(types[1:])]
        elif op.name == "scan":
            ns = len(types) - op.attrs["num_scan_inputs"]
            ins = types[:ns] + [slice_type(t) for t in types[ns:]]
            params = [Param(f"a{i}", t) for i, t in enumerate(ins)]
        else:
            params = [Param(f"a{i}", t) for i, t in enumerate(types)]
        if attr == "cond":
            true = Op("t", "constant", [], {"value": True}, TensorType(DType.I1, ()))
            made.append(Function(name, params, [true.type], [true], ["t"]))
        else:
            made.append(
                Function(name, params, [p.type for p in params], [], [p.name for p in params])
            )
    return Op(op.result, op.name, op.operands, attrs, op.type), made
