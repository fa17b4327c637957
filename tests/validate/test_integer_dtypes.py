"""Every integer dtype (i8 i16 i32 i64, u8 u16 u32 u64) means the same on the reference backend,
in the SMT semantics (evaluated on concrete values) and on the C target, and that meaning is
IR_SPEC's: each result is compared with one computed here in Python integers and Fractions,
independently of all three.

The values are the edges: the dtype's minimum and maximum and their neighbours, 0, 1, and
pairs whose sum, difference and product wrap; floats converted in are NaN, infinities, signed
zeros, fractions below 0 and just below, at and above the dtype's maximum (float -> unsigned
saturates to [0, 2^n - 1], which numpy's own casts leave undefined).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import from_float

from gdv.api import parse
from gdv.backends import c, reference
from gdv.ir.dtypes import FLOAT_DTYPES, INT_DTYPES, DType
from gdv.ir.numerics import literal_to_array
from gdv.validate.evaluate import evaluate

DIRS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
ALL = [*FLOAT_DTYPES, *INT_DTYPES, DType.I1]


def wrap(v: int, d: DType) -> int:
    """v modulo 2^n in d's range."""
    return (v - d.int_min) % (1 << d.bits) + d.int_min


def pairs(d: DType) -> list[tuple[int, int]]:
    lo, hi = d.int_min, d.int_max
    out = [(hi, 1), (lo, 1), (hi, hi), (0, hi), (lo, hi), (1, 0), (hi // 2 + 1, 2), (lo + 1, lo)]
    out += [(hi - 1, hi), (3, 5)]
    if d.is_signed:
        out += [(-1, lo), (lo, -1), (-7, 3)]
    return out


FLOATS = [math.nan, -math.inf, math.inf, -0.0, 0.0, -0.5, -0.9999, 0.9999, -1.0, -1e30, 1e30]


def float_inputs(d: DType) -> list[float]:
    """NaN, infinities, zeros, fractions and values around d's extremes (as f64)."""
    out = list(FLOATS)
    for edge in (d.int_min, d.int_max):
        out += [float(edge), float(edge) - 1.0, float(edge) + 1.0, float(edge) + 0.5]
    # 3/4 of the maximum: for u64 above 2^63, beyond any int64 (a conversion through int64
    # gives 2^63 or 0 there)
    out += [float(d.int_max) * 0.75, float(d.int_max) * 2, 2.0**63, 2.0**64, -(2.0**63)]
    return out


def to_float(v: int, d: DType) -> float:
    """The integer v rounded once to float dtype d (from the exact value: the literal path)."""
    return float(literal_to_array(Fraction(v), d))


def program(d: DType, n: int, m: int) -> str:
    t, b = f"{d}[{n}]", f"i1[{n}]"
    ops: list[tuple[str, str]] = []
    for name in ("add", "sub", "mul", "max", "min"):
        ops.append((f"{name}(%x, %y)", t))
    for k in DIRS:
        ops.append((f'cmp(%x, %y) {{dir = "{k}"}}', b))
    ops.append(("select(%p, %x, %y)", t))
    for e in ALL:
        ops.append(("convert(%x)", f"{e}[{n}]"))
    for e in (DType.F64, DType.F32, DType.F16, DType.BF16):
        ops.append((f"convert(%f{e})", f"{d}[{m}]"))
    ops.append(("convert(%b)", f"{d}[2]"))
    for r in ("reduce_sum", "reduce_max", "reduce_min"):
        ops.append((f"{r}(%x) {{axes = [0]}}", f"{d}[]"))
        ops.append((f"{r}(%e) {{axes = [1]}}", f"{d}[2]"))
    ops.append((
        "dot(%x, %y) {lhs_batch = [], rhs_batch = [], lhs_contract = [0], rhs_contract = [0]}",
        f"{d}[]",
    ))  # fmt: skip
    ops.append(("take(%tab, %x) {axis = 0}", f"f32[{n}]"))
    ops.append(("iota() {axis = 0}", f"{d}[{n}]"))
    params = [f"%x: {t}", f"%y: {t}", f"%p: {b}", "%b: i1[2]", f"%e: {d}[2,0]", "%tab: f32[5]"]
    params += [f"%f{e}: {e}[{m}]" for e in (DType.F64, DType.F32, DType.F16, DType.BF16)]
    lines = [f"func @main({', '.join(params)}) -> ({', '.join(ty for _, ty in ops)}) {{"]
    lines += [f"  %r{k} = {text} : {ty}" for k, (text, ty) in enumerate(ops)]
    lines += ["  return " + ", ".join(f"%r{k}" for k in range(len(ops))), "}"]
    return "\n".join(lines)


def expected(d: DType, x: list[int], y: list[int], p: list[bool], fs: dict) -> list:
    """Each result of `program` in Python numbers."""
    out: list = [
        [wrap(a + b, d) for a, b in zip(x, y, strict=True)],
        [wrap(a - b, d) for a, b in zip(x, y, strict=True)],
        [wrap(a * b, d) for a, b in zip(x, y, strict=True)],
        [max(a, b) for a, b in zip(x, y, strict=True)],
        [min(a, b) for a, b in zip(x, y, strict=True)],
    ]
    for op in DIRS.values():
        out.append([eval(f"{a} {op} {b}") for a, b in zip(x, y, strict=True)])  # noqa: S307
    out.append([a if c else b for a, b, c in zip(x, y, p, strict=True)])
    for e in ALL:
        if e.is_bool:
            out.append([a != 0 for a in x])
        elif e.is_float:
            out.append([to_float(a, e) for a in x])
        else:
            out.append([wrap(a, e) for a in x])
    for e in (DType.F64, DType.F32, DType.F16, DType.BF16):
        out.append([from_float(float(v), d) for v in fs[e]])
    out.append([0, 1])  # convert of [false, true]
    total = 0
    for a in x:
        total = wrap(total + a, d)
    out += [total, [0, 0], max(x), [d.int_min] * 2, min(x), [d.int_max] * 2]
    dot = 0
    for a, b in zip(x, y, strict=True):
        dot = wrap(dot + wrap(a * b, d), d)
    out.append(dot)
    out.append([float(10 * min(max(a, 0), 4)) for a in x])  # table[k] = 10 k, k clamped
    out.append(list(range(len(x))))
    return out


@pytest.mark.parametrize("d", INT_DTYPES, ids=str)
def test_reference_smt_and_c_agree_with_the_spec(d: DType) -> None:
    x, y = (list(v) for v in zip(*pairs(d), strict=True))
    n = len(x)
    fl = float_inputs(d)
    m = len(fl)
    module = parse(program(d, n, m))
    p = [k % 3 == 0 for k in range(n)]
    with np.errstate(all="ignore"):
        fs = {e: np.array(fl, dtype=np.float64).astype(e.np) for e in FLOAT_DTYPES}
    inputs = {
        "x": np.array(x, dtype=d.np),
        "y": np.array(y, dtype=d.np),
        "p": np.array(p),
        "b": np.array([False, True]),
        "e": np.zeros((2, 0), dtype=d.np),
        "tab": np.arange(5, dtype=np.float32) * 10,
        **{f"f{e}": fs[e] for e in (DType.F64, DType.F32, DType.F16, DType.BF16)},
    }
    want = expected(d, x, y, p, fs)
    results = {
        "reference": reference.run(module, inputs),
        "smt": evaluate(module.entry, inputs),
        "c": c.run(module, inputs),
    }
    types = module.entry.results
    for k, (w, t) in enumerate(zip(want, types, strict=True)):
        wa = np.array(w, dtype=t.dtype.np).reshape(t.shape)
        for who, outs in results.items():
            assert reference.bit_equal(outs[k], wa), (
                f"{who}, result {k} ({module.entry.ops[k].name} : {t}): "
                f"{reference.describe_difference(outs[k], wa)}"
            )


def test_the_values_reach_every_edge() -> None:
    """The cases above do wrap, saturate and compare across the sign bit (a test that cannot
    fail is a defect: this checks the inputs are the ones the docstring promises)."""
    for d in INT_DTYPES:
        x, y = zip(*pairs(d), strict=True)
        assert any(wrap(a + b, d) != a + b for a, b in zip(x, y, strict=True))
        assert any(wrap(a * b, d) != a * b for a, b in zip(x, y, strict=True))
        assert d.int_max in x and d.int_min in x
        fl = float_inputs(d)
        assert any(from_float(v, d) == d.int_max and v > d.int_max for v in fl)
        assert any(math.isnan(v) for v in fl)
        if d.is_unsigned:
            assert any(-1 < v < 0 for v in fl) and any(v <= -1 for v in fl)


@settings(max_examples=40)
@given(data=st.data(), d=st.sampled_from(INT_DTYPES))
def test_random_values_reference_and_smt_agree_with_python(data, d: DType) -> None:
    """Hypothesis over the whole range of each integer dtype: wrapping arithmetic, ordered
    comparisons and conversions to every integer dtype and to f64 and f32, on the reference
    and in the SMT semantics, against Python's integers."""
    n = 4
    value = st.one_of(st.integers(d.int_min, d.int_max), st.sampled_from([d.int_min, d.int_max]))
    x = data.draw(st.lists(value, min_size=n, max_size=n))
    y = data.draw(st.lists(value, min_size=n, max_size=n))
    t = f"{d}[{n}]"
    targets = [*INT_DTYPES, DType.F64, DType.F32]
    ops = [(f"{k}(%x, %y)", t) for k in ("add", "sub", "mul", "max", "min")]
    ops.append(('cmp(%x, %y) {dir = "lt"}', f"i1[{n}]"))
    ops += [("convert(%x)", f"{e}[{n}]") for e in targets]
    text = "\n".join(
        [f"func @main(%x: {t}, %y: {t}) -> ({', '.join(ty for _, ty in ops)}) {{"]
        + [f"  %r{k} = {op} : {ty}" for k, (op, ty) in enumerate(ops)]
        + ["  return " + ", ".join(f"%r{k}" for k in range(len(ops))), "}"]
    )
    module = parse(text)
    pairs_ = list(zip(x, y, strict=True))
    want: list = [
        [wrap(a + b, d) for a, b in pairs_],
        [wrap(a - b, d) for a, b in pairs_],
        [wrap(a * b, d) for a, b in pairs_],
        [max(a, b) for a, b in pairs_],
        [min(a, b) for a, b in pairs_],
        [a < b for a, b in pairs_],
    ]
    want += [[wrap(a, e) if e.is_int else to_float(a, e) for a in x] for e in targets]
    inputs = {"x": np.array(x, dtype=d.np), "y": np.array(y, dtype=d.np)}
    results = {"reference": reference.run(module, inputs), "smt": evaluate(module.entry, inputs)}
    for who, outs in results.items():
        for k, (w, ty) in enumerate(zip(want, module.entry.results, strict=True)):
            wa = np.array(w, dtype=ty.dtype.np)
            diff = reference.describe_difference(outs[k], wa)
            assert reference.bit_equal(outs[k], wa), f"{who}, result {k}: {diff}"
