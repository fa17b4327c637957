"""The sub-byte integer dtypes i4, u4, i2, u2 (IR_SPEC.md section 8: storage only, one value per
byte) mean the same on the reference backend (ml_dtypes), in the SMT semantics (evaluated on
concrete values) and on the C target, and that meaning is the spec's, computed here in Python
integers independently of all three: every value converted out (to f32, f16, i8, u8, i32, i1,
a float8 and the other sub-byte dtypes), and converted in from integers (wrapping modulo 2^n)
and floats (truncated and saturated, NaN -> 0) at every boundary, plus random values.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import from_float

from gdv.api import parse
from gdv.backends import c, reference
from gdv.ir.diagnostics import IRError
from gdv.ir.dtypes import SMALL_INT_DTYPES, DType
from gdv.validate.equivalence import check_equivalence
from gdv.validate.evaluate import evaluate

IDS = [str(d) for d in SMALL_INT_DTYPES]


def wrap(v: int, d: DType) -> int:
    """v modulo 2^n in d's range."""
    return (v - d.int_min) % (1 << d.bits) + d.int_min


def values(d: DType) -> list[int]:
    return list(range(d.int_min, d.int_max + 1))


def run_all(text: str, inputs: dict[str, np.ndarray]) -> dict[str, list[np.ndarray]]:
    module = parse(text)
    return {
        "reference": reference.run(module, inputs),
        "smt": evaluate(module.entry, inputs),
        "c": c.run(module, inputs),
    }


@pytest.mark.parametrize("d", SMALL_INT_DTYPES, ids=IDS)
def test_every_value_converts_out_exactly(d: DType) -> None:
    vs = values(d)
    n = len(vs)
    outs = ["f32", "f16", "i8", "u8", "i32", "i1", "f8e4m3fn"]
    others = [o for o in SMALL_INT_DTYPES if o is not d]
    body = "".join(f"  %{t} = convert(%x) : {t}[{n}]\n" for t in outs)
    body += "".join(f"  %o{k} = convert(%x) : {o}[{n}]\n" for k, o in enumerate(others))
    results = ", ".join([f"{t}[{n}]" for t in outs] + [f"{o}[{n}]" for o in others])
    names = ", ".join([f"%{t}" for t in outs] + [f"%o{k}" for k in range(len(others))])
    text = f"func @main(%x: {d}[{n}]) -> ({results}) {{\n{body}  return {names}\n}}\n"
    x = np.array(vs, dtype=np.int64).astype(d.np)
    assert [int(v) for v in x.astype(np.int64)] == vs  # ml_dtypes holds each value
    for name, got in run_all(text, {"x": x}).items():
        f32, f16, i8, u8, i32, i1, f8, *small = got
        assert f32.astype(np.float64).tolist() == [float(v) for v in vs], name
        assert f16.astype(np.float64).tolist() == [float(v) for v in vs], name
        assert i8.astype(np.int64).tolist() == vs, name
        assert u8.astype(np.int64).tolist() == [v % 256 for v in vs], name
        assert i32.astype(np.int64).tolist() == vs, name
        assert i1.tolist() == [v != 0 for v in vs], name
        assert f8.astype(np.float64).tolist() == [float(v) for v in vs], name  # all exact
        for o, arr in zip(others, small, strict=True):
            assert arr.astype(np.int64).tolist() == [wrap(v, o) for v in vs], (name, o)


def float_edges(d: DType) -> list[float]:
    out = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e30, -1e30]
    for v in (d.int_min, d.int_max, 0):
        out += [v - 1.0, v - 0.5, v - 1e-3, float(v), v + 1e-3, v + 0.5, v + 1.0, v + 1.5]
    return out


INT_EDGES = [0, 1, -1, 7, 8, -8, -9, 15, 16, 17, 255, 256, -128, 127, 2**31 - 1, -(2**31)]


@pytest.mark.parametrize("d", SMALL_INT_DTYPES, ids=IDS)
def test_floats_and_integers_convert_in_as_the_spec_says(d: DType) -> None:
    fx = np.array(float_edges(d), dtype=np.float32)
    ix = np.array(INT_EDGES, dtype=np.int32)
    bx = np.array([True, False])
    e8 = fx.astype(DType.F8E5M2.np)
    nf, ni = fx.size, ix.size
    text = (
        f"func @main(%f: f32[{nf}], %i: i32[{ni}], %b: i1[2], %e: f8e5m2[{nf}])"
        f" -> ({d}[{nf}], {d}[{ni}], {d}[2], {d}[{nf}]) {{\n"
        f"  %a = convert(%f) : {d}[{nf}]\n  %j = convert(%i) : {d}[{ni}]\n"
        f"  %k = convert(%b) : {d}[2]\n  %g = convert(%e) : {d}[{nf}]\n"
        "  return %a, %j, %k, %g\n}\n"
    )
    want_f = [from_float(float(v), d) for v in fx]
    want_i = [wrap(int(v), d) for v in ix]
    want_e = [from_float(float(v), d) for v in e8.astype(np.float64)]
    for name, (a, j, k, g) in run_all(text, {"f": fx, "i": ix, "b": bx, "e": e8}).items():
        assert a.astype(np.int64).tolist() == want_f, (name, fx.tolist())
        assert j.astype(np.int64).tolist() == want_i, name
        assert k.astype(np.int64).tolist() == [1 if d.int_max >= 1 else 0, 0], name
        assert g.astype(np.int64).tolist() == want_e, name


@pytest.mark.parametrize("d", SMALL_INT_DTYPES, ids=IDS)
@given(data=st.data())
def test_random_values_convert_in_on_reference_and_smt(d: DType, data) -> None:
    fs = data.draw(st.lists(st.floats(-40, 40, width=32), min_size=6, max_size=6))
    ints = data.draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=6, max_size=6))
    text = (
        f"func @main(%f: f32[6], %i: i32[6]) -> ({d}[6], {d}[6]) {{\n"
        f"  %a = convert(%f) : {d}[6]\n  %j = convert(%i) : {d}[6]\n  return %a, %j\n}}\n"
    )
    module = parse(text)
    inputs = {"f": np.array(fs, np.float32), "i": np.array(ints, np.int32)}
    for got in (reference.run(module, inputs), evaluate(module.entry, inputs)):
        assert got[0].astype(np.int64).tolist() == [from_float(float(v), d) for v in inputs["f"]]
        assert got[1].astype(np.int64).tolist() == [wrap(v, d) for v in ints]


def test_a_wrapping_claim_is_proved_and_a_saturating_one_refuted() -> None:
    """i32 -> i4 keeps the low 4 bits: through u4 (the same bits) it is the same; through i8 it
    is too (wrap twice). Claiming i4 -> i32 -> u4 -> i32 is i4 -> i32 is false exactly for the
    negative values: refuted."""
    a = parse("func @main(%x: i32[2]) -> i4[2] {\n  %y = convert(%x) : i4[2]\n  return %y\n}\n")
    b = parse(
        "func @main(%x: i32[2]) -> i4[2] {\n  %u = convert(%x) : u4[2]\n"
        "  %w = convert(%u) : i8[2]\n  %y = convert(%w) : i4[2]\n  return %y\n}\n"
    )
    assert check_equivalence(a, b, timeout=60).verdict == "equivalent"
    c1 = parse("func @main(%x: i4[2]) -> i32[2] {\n  %y = convert(%x) : i32[2]\n  return %y\n}\n")
    c2 = parse(
        "func @main(%x: i4[2]) -> i32[2] {\n  %u = convert(%x) : u4[2]\n"
        "  %y = convert(%u) : i32[2]\n  return %y\n}\n"
    )
    bad = check_equivalence(c1, c2, timeout=60)
    assert bad.verdict == "not-equivalent"
    x = bad.counterexample.inputs["x"][bad.counterexample.index]
    assert int(x) < 0


@pytest.mark.parametrize("body", ["%y = add(%x, %x) : i4[4]", "%y = neg(%x) : i4[4]"])
def test_arithmetic_on_a_sub_byte_integer_is_refused_by_name(body: str) -> None:
    text = f"func @main(%x: i4[4]) -> i4[4] {{\n  {body}\n  return %y\n}}\n"
    with pytest.raises(IRError, match="on i4: i4 is a storage-only dtype"):
        parse(text)


def test_the_compiled_pipeline_runs_sub_byte_integers_bit_exact(tmp_path) -> None:
    """Through every pass to C: inputs as ml_dtypes holds them (the low bits), moved by a
    transpose, converted both ways and fused into kernels, bit-exact to the reference."""
    import gdv

    src = tmp_path / "i4.gdv"
    src.write_text(
        "func @main(%x: f32[4,8], %q: i4[8,4]) -> (u4[8,4], f32[4,4], i2[4,8]) {\n"
        "  %a = convert(%x) : u4[4,8]\n"
        "  %t = transpose(%a) {perm = [1, 0]} : u4[8,4]\n"
        "  %c = convert(%q) : f32[8,4]\n"
        "  %d = dot(%x, %c) {lhs_batch = [], rhs_batch = [], lhs_contract = [1], "
        "rhs_contract = [0]} : f32[4,4]\n"
        "  %r = transpose(%q) {perm = [1, 0]} : i4[4,8]\n"
        "  %s = convert(%r) : i2[4,8]\n"
        "  return %t, %d, %s\n}\n"
    )
    exe = gdv.compile(str(src), jobs=1, cache_dir=str(tmp_path))
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4, 8)) * 10).astype(np.float32)
    x[0, :3] = [np.nan, -np.inf, 15.5]
    q = rng.integers(-8, 8, (8, 4)).astype(DType.I4.np)
    got = exe(x=x, q=q)
    want = reference.run(exe.source, {"x": x, "q": q})
    for g, r in zip(got, want, strict=True):
        assert np.array_equal(g.astype(np.float64), r.astype(np.float64), equal_nan=True)
