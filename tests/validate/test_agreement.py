"""The SMT meaning, evaluated on concrete values, equals the reference backend bit for bit.

For every op of the registry (transcendentals excepted: their last bits are
implementation-defined, so the SMT meaning leaves them uninterpreted) and every dtype it
allows, hypothesis draws a well-typed op and inputs rich in NaN, +-0, +-inf, subnormals and
f16/bf16 rounding ties; the SMT terms (folds unrolled) are simplified to values and compared
with `gdv.backends.reference` bit for bit. A new op without a case here fails the test.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdv.ir.core import Function, Op, Param
from gdv.ir.dtypes import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, DType
from gdv.ir.ops import REGISTRY
from gdv.ir.ops.elementwise import TRANSCENDENTAL
from gdv.ir.ops.kernel import kernel_bodies
from gdv.ir.types import TensorType
from gdv.ir.verifier import verify_function
from gdv.validate.counterexample import same_bits
from gdv.validate.evaluate import evaluate
from gdv.validate.semantics import load_all
from gdv.validate.semantics.registry import SEMANTICS

load_all()
NUMERIC = FLOAT_DTYPES + INT_DTYPES
_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def _uses_transcendental(name: str) -> bool:
    """A transcendental op, or a composite whose decomposition applies one."""
    if name in TRANSCENDENTAL:
        return True
    spec = REGISTRY[name]
    if spec.decompose is None:
        return False
    attrs = {
        "softmax": {"axis": 1},
        "log_softmax": {"axis": 1},
        "layer_norm": {"axes": [1], "eps": 1e-5},
        "gelu": {"approximate": "none"},
    }.get(name, {})
    operands = ["x", "g", "b"][: spec.min_operands]
    counter = iter(range(1_000_000))
    op = Op("r", name, operands, attrs, TensorType(DType.F32, (2, 3)))
    ops = spec.decompose(op, lambda h: f"{h}.{next(counter)}")
    return any(_uses_transcendental(o.name) for o in ops)


CHECKED = sorted(
    n
    for n in REGISTRY
    # Collectives mean something only across the ranks of an SPMD function: their agreement
    # test is tests/validate/test_spmd.py (test_every_collective_means_in_smt_...).
    if not _uses_transcendental(n) and REGISTRY[n].family != "collective"
)


# --- values ---------------------------------------------------------------------------------


def _specials(dtype: DType) -> list[float]:
    fi = ml_dtypes.finfo(dtype.np)
    tiny = float(fi.smallest_subnormal)
    vals = [0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.5, -2.5, math.inf, -math.inf, math.nan]
    vals += [tiny, -tiny, float(fi.max), -float(fi.max), float(fi.tiny), 3 * tiny]
    if dtype in (DType.F32, DType.F64):
        # Halfway between neighbours of f16 and bf16: rounding ties when converted.
        for narrow in (DType.F16, DType.BF16):
            base = np.array([1.0, 3.0, 1000.0, 0.1, -7.0], dtype=narrow.np)
            mids = base.astype(np.float64) + _ulp(narrow, base) / 2
            vals += [float(m) for m in mids]
    return vals


def _ulp(dtype: DType, x: np.ndarray) -> np.ndarray:
    bits = x.astype(dtype.np).view(_UINT[dtype.itemsize])
    up = (bits + 1).view(dtype.np).astype(np.float64)
    return np.abs(up - x.astype(dtype.np).astype(np.float64))


def element(dtype: DType) -> st.SearchStrategy:
    """One element of `dtype`, as a Python value that numpy converts exactly."""
    if dtype.is_bool:
        return st.booleans()
    if dtype.is_int:
        return st.one_of(
            st.sampled_from([0, 1, -1, 2, dtype.int_min, dtype.int_max, -7, 100]),
            st.integers(dtype.int_min, dtype.int_max),
        )
    raw = st.integers(0, 2**dtype.bits - 1).map(
        lambda b: np.array(b, dtype=_UINT[dtype.itemsize]).view(dtype.np)[()]
    )
    return st.one_of(st.sampled_from(_specials(dtype)), raw)


@st.composite
def array(draw, t: TensorType) -> np.ndarray:
    n = math.prod(t.shape)
    vals = draw(st.lists(element(t.dtype), min_size=n, max_size=n))
    with np.errstate(all="ignore"):
        # Elements are rounded to the dtype once (the specials are f64 midpoints).
        return np.array([np.array(v).astype(t.dtype.np) for v in vals], dtype=t.dtype.np).reshape(
            t.shape
        )


def literal(draw, dtype: DType) -> Any:
    """An attribute literal for `dtype` (IR literals: int, float or bool)."""
    if dtype.is_bool:
        return draw(st.booleans())
    if dtype.is_int:
        return draw(st.integers(dtype.int_min, dtype.int_max))
    return draw(
        st.one_of(
            st.sampled_from([0.0, -0.0, 1.0, math.inf, -math.inf, math.nan, 0.1, 1e-40, 65520.0]),
            st.integers(-3, 3),
            st.floats(allow_nan=True, allow_infinity=True),
        )
    )


# --- one well-typed op per case -------------------------------------------------------------

Case = tuple[list[TensorType], str, dict[str, Any], TensorType]
"""(operand types, op name, attrs, result type)."""


def shape(draw, rank: int | None = None, max_dim: int = 3) -> tuple[int, ...]:
    r = draw(st.integers(0, 3)) if rank is None else rank
    return tuple(draw(st.integers(1, max_dim)) for _ in range(r))


def c_unary(draw, name: str) -> Case:
    t = TensorType(draw(st.sampled_from(FLOAT_DTYPES)), shape(draw))
    return [t], name, {}, t


def c_binary(draw, name: str) -> Case:
    dts = NUMERIC if name in ("add", "sub", "mul", "max", "min") else FLOAT_DTYPES
    t = TensorType(draw(st.sampled_from(dts)), shape(draw))
    return [t, t], name, {}, t


def c_remainder(draw, name: str) -> Case:
    """rem on floats and integers, mod on integers; divisors 0, -1 (with INT_MIN), +-inf."""
    t = TensorType(draw(st.sampled_from(NUMERIC if name == "rem" else INT_DTYPES)), shape(draw))
    return [t, t], name, {}, t


def c_bitwise(draw, name: str) -> Case:
    """and, or, xor, not on integers and i1; shifts on integers, the amounts (drawn like any
    element: 0, 1, 2, -1, -7, 100, the extremes, random) often negative or past the width."""
    dts = INT_DTYPES if name.startswith("shift") else [*INT_DTYPES, DType.I1]
    t = TensorType(draw(st.sampled_from(dts)), shape(draw))
    return [t] * (1 if name == "bitwise_not" else 2), name, {}, t


def c_cmp(draw, name: str) -> Case:
    t = TensorType(draw(st.sampled_from(ALL_DTYPES)), shape(draw))
    d = draw(st.sampled_from(["lt", "le", "gt", "ge", "eq", "ne"]))
    return [t, t], name, {"dir": d}, t.with_dtype(DType.I1)


def c_select(draw, name: str) -> Case:
    t = TensorType(draw(st.sampled_from(ALL_DTYPES)), shape(draw))
    return [t.with_dtype(DType.I1), t, t], name, {}, t


def c_convert(draw, name: str) -> Case:
    s = (8,)  # many elements per example: 64 dtype pairs share the examples
    a, b = draw(st.sampled_from(ALL_DTYPES)), draw(st.sampled_from(ALL_DTYPES))
    return [TensorType(a, s)], name, {}, TensorType(b, s)


def c_constant(draw, name: str) -> Case:
    t = TensorType(draw(st.sampled_from(ALL_DTYPES)), shape(draw))
    if draw(st.booleans()):
        return [], name, {"value": literal(draw, t.dtype)}, t

    def nest(dims: tuple[int, ...]) -> Any:
        if not dims:
            return literal(draw, t.dtype)
        return [nest(dims[1:]) for _ in range(dims[0])]

    return [], name, {"value": nest(t.shape)}, t


def c_iota(draw, name: str) -> Case:
    t = TensorType(draw(st.sampled_from(NUMERIC)), shape(draw, draw(st.integers(1, 3)), 5))
    return [], name, {"axis": draw(st.integers(0, t.rank - 1))}, t


def c_broadcast(draw, name: str) -> Case:
    out = shape(draw, draw(st.integers(1, 3)))
    dims = sorted(draw(st.sets(st.integers(0, len(out) - 1))))
    xs = tuple(draw(st.sampled_from([1, out[d]])) for d in dims)
    dt = draw(st.sampled_from(ALL_DTYPES))
    return [TensorType(dt, xs)], name, {"dims": dims}, TensorType(dt, out)


def c_reshape(draw, name: str) -> Case:
    dt = draw(st.sampled_from(ALL_DTYPES))
    n = draw(st.sampled_from([1, 2, 4, 6, 8, 12]))
    divs = [d for d in range(1, n + 1) if n % d == 0]
    a = draw(st.sampled_from(divs))
    b = draw(st.sampled_from(divs))
    return [TensorType(dt, (a, n // a))], name, {}, TensorType(dt, (n // b, b, 1))


def c_transpose(draw, name: str) -> Case:
    t = TensorType(draw(st.sampled_from(ALL_DTYPES)), shape(draw))
    perm = draw(st.permutations(list(range(t.rank))))
    return [t], name, {"perm": perm}, t.with_shape([t.shape[p] for p in perm])


def c_slice(draw, name: str) -> Case:
    t = TensorType(draw(st.sampled_from(ALL_DTYPES)), shape(draw, None, 5))
    start, limit, stride = [], [], []
    for n in t.shape:
        a = draw(st.integers(0, n))
        b = draw(st.integers(a, n))
        start.append(a)
        limit.append(b)
        stride.append(draw(st.integers(1, 3)))
    out = [-(-(b - a) // s) for a, b, s in zip(start, limit, stride, strict=True)]
    attrs = {"start": start, "limit": limit, "stride": stride}
    return [t], name, attrs, t.with_shape(out)


def c_concat(draw, name: str) -> Case:
    dt = draw(st.sampled_from(ALL_DTYPES))
    base = shape(draw, draw(st.integers(1, 3)))
    axis = draw(st.integers(0, len(base) - 1))
    ts = []
    for _ in range(draw(st.integers(1, 3))):
        s = list(base)
        s[axis] = draw(st.integers(0, 3))
        ts.append(TensorType(dt, tuple(s)))
    out = list(base)
    out[axis] = sum(t.shape[axis] for t in ts)
    return ts, name, {"axis": axis}, TensorType(dt, tuple(out))


def c_pad(draw, name: str) -> Case:
    t = TensorType(draw(st.sampled_from(ALL_DTYPES)), shape(draw))
    low = [draw(st.integers(0, 2)) for _ in t.shape]
    high = [draw(st.integers(0, 2)) for _ in t.shape]
    out = [lo + n + hi for lo, n, hi in zip(low, t.shape, high, strict=True)]
    attrs = {"low": low, "high": high, "value": literal(draw, t.dtype)}
    return [t], name, attrs, t.with_shape(out)


def c_reduce(draw, name: str) -> Case:
    t = TensorType(draw(st.sampled_from(NUMERIC)), shape(draw, None, 3))
    axes = (
        list(draw(st.permutations(list(draw(st.sets(st.integers(0, max(t.rank - 1, 0))))))))
        if t.rank
        else []
    )
    out = [n for d, n in enumerate(t.shape) if d not in axes]
    return [t], name, {"axes": axes}, t.with_shape(out)


def c_scan(draw, name: str) -> Case:
    t = TensorType(draw(st.sampled_from(NUMERIC)), shape(draw, draw(st.integers(1, 3)), 5))
    attrs: dict[str, Any] = {"axis": draw(st.integers(0, t.rank - 1))}
    for flag in ("exclusive", "reverse"):
        value = draw(st.sampled_from([None, False, True]))
        if value is not None:
            attrs[flag] = value
    return [t], name, attrs, t


def c_argsort(draw, name: str) -> Case:
    # at most 6 along the axis: the nested unrolled folds grow with its square
    t = TensorType(draw(st.sampled_from(NUMERIC)), shape(draw, draw(st.integers(1, 3)), 6))
    attrs: dict[str, Any] = {"axis": draw(st.integers(0, t.rank - 1))}
    descending = draw(st.sampled_from([None, False, True]))
    if descending is not None:
        attrs["descending"] = descending
    return [t], name, attrs, t.with_dtype(DType.I64)


def c_dot(draw, name: str) -> Case:
    dt = draw(st.sampled_from(NUMERIC))
    nb, nc = draw(st.integers(0, 1)), draw(st.integers(0, 2))
    na, nbf = draw(st.integers(0, 1)), draw(st.integers(0, 1))
    batch = [draw(st.integers(1, 2)) for _ in range(nb)]
    contract = [draw(st.integers(0, 3)) for _ in range(nc)]
    af = [draw(st.integers(1, 2)) for _ in range(na)]
    bf = [draw(st.integers(1, 2)) for _ in range(nbf)]
    # A: batch, free, contract (contract reversed order in B to exercise the pairing).
    a = TensorType(dt, (*batch, *af, *contract))
    b = TensorType(dt, (*batch, *reversed(contract), *bf))
    attrs: dict[str, Any] = {
        "lhs_batch": list(range(nb)),
        "rhs_batch": list(range(nb)),
        "lhs_contract": list(range(nb + na, nb + na + nc)),
        "rhs_contract": list(reversed(range(nb, nb + nc))),
    }
    res = dt
    if dt.is_float:
        if draw(st.booleans()):
            attrs["acc"] = draw(st.sampled_from(FLOAT_DTYPES))
        res = draw(st.sampled_from(FLOAT_DTYPES))
    return [a, b], name, attrs, TensorType(res, (*batch, *af, *bf))


def c_take(draw, name: str) -> Case:
    t = TensorType(draw(st.sampled_from(ALL_DTYPES)), shape(draw, draw(st.integers(1, 2))))
    axis = draw(st.integers(0, t.rank - 1))
    idx = TensorType(draw(st.sampled_from(INT_DTYPES)), shape(draw, draw(st.integers(0, 2))))
    out = t.shape[:axis] + idx.shape + t.shape[axis + 1 :]
    return [t, idx], name, {"axis": axis}, t.with_shape(out)


def c_conv2d(draw, name: str) -> Case:
    dt = draw(st.sampled_from(NUMERIC))
    groups = draw(st.integers(1, 2))
    c = groups * draw(st.integers(1, 2))
    o = groups * draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    h, w = draw(st.integers(2, 4)), draw(st.integers(2, 4))
    pad = [[draw(st.integers(0, 1)) for _ in range(2)] for _ in range(2)]
    stride = [draw(st.integers(1, 2)) for _ in range(2)]
    dil = [draw(st.integers(1, 2)) for _ in range(2)]
    eh = h + pad[0][0] + pad[0][1] - dil[0] * (kh - 1) - 1
    ew = w + pad[1][0] + pad[1][1] - dil[1] * (kw - 1) - 1
    if eh < 0 or ew < 0:
        dil = [1, 1]
        eh = h + pad[0][0] + pad[0][1] - kh
        ew = w + pad[1][0] + pad[1][1] - kw
    x = TensorType(dt, (1, c, h, w))
    wt = TensorType(dt, (o, c // groups, kh, kw))
    attrs = {"stride": stride, "padding": pad, "dilation": dil, "groups": groups}
    out = TensorType(dt, (1, o, eh // stride[0] + 1, ew // stride[1] + 1))
    return [x, wt], name, attrs, out


def c_matmul(draw, name: str) -> Case:
    dt = draw(st.sampled_from(NUMERIC))
    batch = shape(draw, draw(st.integers(0, 1)), 2)
    m, k, n = draw(st.integers(1, 2)), draw(st.integers(0, 3)), draw(st.integers(1, 2))
    res = draw(st.sampled_from(FLOAT_DTYPES)) if dt.is_float else dt
    return (
        [TensorType(dt, (*batch, m, k)), TensorType(dt, (*batch, k, n))],
        name,
        {},
        TensorType(res, (*batch, m, n)),
    )


KERNEL_BODIES: dict[str, Function] = {}
"""Bodies of the kernels c_kernel draws, put in scope while a kernel case runs."""


def c_kernel(draw, name: str) -> Case:
    """A kernel reading two operands through permuted, reversed and broadcast affine maps,
    with a binary body and, over a drawn subset of its loop dims, a fold."""
    dt = draw(st.sampled_from(NUMERIC))
    space = list(shape(draw, draw(st.integers(1, 3))))
    n = len(space)
    reduce = sorted(draw(st.sets(st.integers(0, n - 1))))
    out = list(draw(st.permutations([d for d in range(n) if d not in reduce])))
    maps, types = [], []
    for _ in range(2):
        dims = draw(st.permutations(list(range(n))))[: draw(st.integers(0, n))]
        rows = []
        for d in dims:
            row = [0] * (n + 1)
            if draw(st.booleans()):
                row[d] = 1
            else:  # read backwards: coefficient -1, constant extent - 1
                row[d], row[n] = -1, space[d] - 1
            rows.append(row)
        maps.append(rows)
        types.append(TensorType(dt, tuple(space[d] for d in dims)))
    body_op = draw(st.sampled_from(["add", "sub", "mul", "max", "min"]))
    body_name = f"k.{body_op}.{dt}"
    scalar = TensorType(dt, ())
    KERNEL_BODIES[body_name] = Function(
        body_name,
        [Param("a", scalar), Param("b", scalar)],
        [scalar],
        [Op("r", body_op, ["a", "b"], {}, scalar)],
        ["r"],
    )
    attrs = {
        "body": body_name,
        "space": space,
        "maps": maps,
        "out": out,
        "reduce": reduce,
        "combiner": draw(st.sampled_from(["add", "max", "min"])) if reduce else "none",
    }
    return types, name, attrs, TensorType(dt, tuple(space[d] for d in out))


def _binary_body(name: str, op: str, types: list[TensorType], n_out: int = 1) -> str:
    """A function `name(a, b) -> (op(a, b), ...)` of `types`, in scope for the control cases
    (its name says its types, so a later draw never replaces it by another)."""
    t = types[0]
    tag = f"{name}.{op}.{t.dtype}.{'x'.join(map(str, t.shape))}.{len(types)}.{n_out}"
    params = [Param(f"a{i}", u) for i, u in enumerate(types)]
    ops = [Op("r", op, ["a0", "a1"], {}, t)]
    KERNEL_BODIES[tag] = Function(tag, params, [t] * n_out, ops, ["r"] * n_out)
    return tag


BINARY_BODY = ["add", "sub", "mul", "max", "min"]


def c_if(draw, name: str) -> Case:
    """if(c, a, b): then op1(a, b), else op2(a, b)."""
    t = TensorType(draw(st.sampled_from(NUMERIC)), shape(draw))
    then = _binary_body("then", draw(st.sampled_from(BINARY_BODY)), [t, t])
    other = _binary_body("else", draw(st.sampled_from(BINARY_BODY)), [t, t])
    attrs = {"then": then, "else": other, "result": 0}
    return [TensorType(DType.I1, ()), t, t], name, attrs, t


def c_while(draw, name: str) -> Case:
    """while(x, i, n) {cond: i < n; body: (op(x, x), i + 1, n)} with max_trips 0 .. 5; any of
    the three results."""
    t = TensorType(draw(st.sampled_from(NUMERIC)), shape(draw))
    i32 = TensorType(DType.I32, ())
    op = draw(st.sampled_from(BINARY_BODY))
    tag = f"while.{op}.{t.dtype}.{'x'.join(map(str, t.shape))}"
    params = [Param("x", t), Param("i", i32), Param("n", i32)]
    KERNEL_BODIES[tag + ".cond"] = Function(
        tag + ".cond", params, [TensorType(DType.I1, ())],
        [Op("p", "cmp", ["i", "n"], {"dir": "lt"}, TensorType(DType.I1, ()))], ["p"],
    )  # fmt: skip
    KERNEL_BODIES[tag + ".body"] = Function(
        tag + ".body", params, [t, i32, i32],
        [Op("y", op, ["x", "x"], {}, t), Op("one", "constant", [], {"value": 1}, i32),
         Op("j", "add", ["i", "one"], {}, i32)],
        ["y", "j", "n"],
    )  # fmt: skip
    k = draw(st.integers(0, 2))
    attrs = {
        "cond": tag + ".cond",
        "body": tag + ".body",
        "max_trips": draw(st.integers(0, 5)),
        "result": k,
    }
    return [t, i32, i32], name, attrs, [t, i32, i32][k]


def c_scan_op(draw, name: str) -> Case:
    """scan(s, xs): (s, x) -> (op(s, x), op(s, x)), over a length 0 .. 3; the final state or
    the stacked outputs."""
    t = TensorType(draw(st.sampled_from(NUMERIC)), shape(draw, max_dim=2))
    length = draw(st.integers(0, 3))
    xs = TensorType(t.dtype, (length, *t.shape))
    body = _binary_body("scan", draw(st.sampled_from(BINARY_BODY)), [t, t], n_out=2)
    k = draw(st.integers(0, 1))
    attrs = {"body": body, "num_scan_inputs": 1, "result": k}
    return [t, xs], name, attrs, [t, xs][k]


CASES: dict[str, Callable[[Any, str], Case]] = {
    **{n: c_unary for n in ("neg", "abs", "sqrt", "floor", "relu")},
    **{n: c_binary for n in ("add", "sub", "mul", "div", "max", "min")},
    **dict.fromkeys(
        ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left", "shift_right"),
        c_bitwise,
    ),
    "rem": c_remainder,
    "mod": c_remainder,
    "cmp": c_cmp,
    "select": c_select,
    "convert": c_convert,
    "constant": c_constant,
    "iota": c_iota,
    "broadcast": c_broadcast,
    "reshape": c_reshape,
    "transpose": c_transpose,
    "slice": c_slice,
    "concat": c_concat,
    "pad": c_pad,
    **{n: c_reduce for n in ("reduce_sum", "reduce_max", "reduce_min")},
    **{n: c_scan for n in ("cumsum", "cumprod")},
    "argsort": c_argsort,
    "dot": c_dot,
    "take": c_take,
    "conv2d": c_conv2d,
    "matmul": c_matmul,
    "kernel": c_kernel,
    "if": c_if,
    "while": c_while,
    "scan": c_scan_op,
}


def test_every_op_has_an_smt_rule():
    missing = [n for n, s in REGISTRY.items() if s not in SEMANTICS]
    assert not missing, f"ops without an SMT rule: {missing}"


def test_every_op_without_a_transcendental_has_an_agreement_case():
    assert set(CASES) == set(CHECKED), set(CASES) ^ set(CHECKED)


@pytest.mark.slow
@pytest.mark.parametrize("name", CHECKED)
@given(data=st.data())
def test_smt_meaning_agrees_with_the_reference(name: str, data: st.DataObject) -> None:
    from gdv.backends import reference

    assert name in CASES, f"no agreement case for op {name}: add one"
    types, op_name, attrs, result = CASES[name](data.draw, name)
    params = [Param(f"p{i}", t) for i, t in enumerate(types)]
    op = Op("r", op_name, [p.name for p in params], attrs, result)
    fn = Function("main", params, [result], [op], ["r"])
    verify_function(fn)
    inputs = {p.name: data.draw(array(p.type), label=p.name) for p in params}
    with kernel_bodies(KERNEL_BODIES.values()):
        want = reference.run(fn, inputs)[0]
        got = evaluate(fn, inputs)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    bad = ~same_bits(got, want)
    assert not bad.any(), (
        f"{op_name} {attrs} : {result}: SMT {got[bad]} vs reference {want[bad]} at "
        f"{np.argwhere(bad)[:4].tolist()}"
    )
