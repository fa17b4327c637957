"""bitwise_and/or/xor/not, shift_left and shift_right (issue 19) in every layer, against an
oracle written with Python integers from IR_SPEC.md's rule (not numpy, not C):

- shift amounts are read with the dtype's signedness; an amount outside [0, bits) (negative or
  at least the width) gives 0 for shift_left and the fill for shift_right (-1 for a negative
  signed operand, else 0); inside, shift_left wraps and shift_right is arithmetic on signed
  dtypes, logical on unsigned ones.

The reference meets the oracle on every i8 pair (exhaustively) and on edge and random pairs of
i32 and i64; the SMT meaning (`evaluate`) and the C target meet the reference on the edge pairs
(C also on every i8 pair); the bound's interval holds every result it was asked about, and the
solver proves and refutes claims about the ops as the oracle says.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends import c, reference
from gdv.ir.core import Function, Op, Param
from gdv.ir.dtypes import INT_DTYPES, DType
from gdv.ir.ops.elementwise import is_signed
from gdv.ir.types import TensorType
from gdv.validate.bounds import analyze
from gdv.validate.counterexample import same_bits
from gdv.validate.equivalence import check_equivalence
from gdv.validate.evaluate import evaluate

BINARY = ("bitwise_and", "bitwise_or", "bitwise_xor", "shift_left", "shift_right")
ALL = (*BINARY, "bitwise_not")


def _wrap(v: int, dtype: DType) -> int:
    """v modulo 2^bits, in the dtype's range."""
    m = v % (1 << dtype.bits)
    return m - (1 << dtype.bits) if is_signed(dtype) and m > dtype.int_max else m


def oracle(name: str, a: int, b: int, dtype: DType) -> int:
    if name == "bitwise_and":
        return _wrap(a & b, dtype)
    if name == "bitwise_or":
        return _wrap(a | b, dtype)
    if name == "bitwise_xor":
        return _wrap(a ^ b, dtype)
    if name == "bitwise_not":
        return _wrap(~a, dtype)
    inside = 0 <= b < dtype.bits
    if name == "shift_left":
        return _wrap(a << b, dtype) if inside else 0
    if not inside:
        return -1 if a < 0 else 0
    return a >> b  # Python's >> on ints is arithmetic (floor), the unsigned ones are >= 0


def _edges(dtype: DType) -> list[int]:
    lo, hi, w = dtype.int_min, dtype.int_max, dtype.bits
    vals = [0, 1, -1, 2, -2, 3, 7, -7, lo, hi, lo + 1, hi - 1, w - 1, w, w + 1, -w, 100]
    return sorted({v for v in vals if lo <= v <= hi})


def _pairs(dtype: DType) -> tuple[np.ndarray, np.ndarray]:
    if dtype.bits <= 8:
        a, b = np.meshgrid(np.arange(dtype.int_min, dtype.int_max + 1), np.arange(-128, 128))
        b = np.where(b < dtype.int_min, b + 256, b)  # unsigned amounts after the u8 merge
        return a.ravel().astype(dtype.np), b.ravel().astype(dtype.np)
    e = _edges(dtype)
    a, b = (list(m.ravel()) for m in np.meshgrid(np.array(e, object), np.array(e, object)))
    rng = np.random.default_rng(19)
    span = dtype.int_max - dtype.int_min + 1
    ra = [dtype.int_min + int(v) * 7 % span for v in rng.integers(0, 2**62, 300)]
    rb = [
        v % span if v < dtype.int_min else v
        for v in map(int, rng.integers(-2, dtype.bits + 2, 300))
    ]
    return _as(a + ra, dtype), _as(b + rb, dtype)


def _as(values, dtype: DType) -> np.ndarray:
    """Python integers in the dtype's range as an array of it (u64 above 2^63 included)."""
    return np.array([int(v) for v in values], dtype=object).astype(dtype.np)


def _one_op(name: str, dtype: DType, n: int) -> Function:
    t = TensorType(dtype, (n,))
    k = 1 if name == "bitwise_not" else 2
    params = [Param(p, t) for p in ("a", "b")[:k]]
    return Function("main", params, [t], [Op("r", name, [p.name for p in params], {}, t)], ["r"])


def _text(name: str, dtype: DType, n: int) -> str:
    t = f"{dtype}[{n}]"
    if name == "bitwise_not":
        return f"func @main(%a: {t}) -> {t} {{\n  %r = {name}(%a) : {t}\n  return %r\n}}\n"
    return f"func @main(%a: {t}, %b: {t}) -> {t} {{\n  %r = {name}(%a, %b) : {t}\n  return %r\n}}\n"


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
@pytest.mark.parametrize("name", ALL)
def test_reference_is_the_oracle(name: str, dtype: DType) -> None:
    a, b = _pairs(dtype)
    args = [a] if name == "bitwise_not" else [a, b]
    got = reference.apply(name, args)
    want = [oracle(name, int(x), int(y), dtype) for x, y in zip(a, b, strict=True)]
    assert got.dtype == dtype.np
    bad = got.astype(object) != np.array(want, dtype=object)
    assert not bad.any(), (name, dtype, a[bad][:4], b[bad][:4], got[bad][:4])


def test_the_oracle_says_what_the_spec_says() -> None:
    """A few values by hand (the oracle itself could be wrong)."""
    i8 = DType.I8
    assert oracle("shift_left", 1, 7, i8) == -128 and oracle("shift_left", 1, 8, i8) == 0
    assert oracle("shift_left", 3, -1, i8) == 0 and oracle("shift_left", -1, 1, i8) == -2
    assert oracle("shift_right", -128, 7, i8) == -1 and oracle("shift_right", -128, 8, i8) == -1
    assert oracle("shift_right", 127, 100, i8) == 0 and oracle("shift_right", -5, 1, i8) == -3
    assert oracle("shift_right", 64, -1, i8) == 0 and oracle("bitwise_not", -128, 0, i8) == 127


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
@pytest.mark.parametrize("name", ALL)
def test_smt_meaning_is_the_reference(name: str, dtype: DType) -> None:
    e = _edges(dtype)
    a, b = (_as(m.ravel(), dtype) for m in np.meshgrid(np.array(e, object), np.array(e, object)))
    fn = _one_op(name, dtype, a.size)
    inputs = {"a": a, "b": b} if name != "bitwise_not" else {"a": a}
    want = reference.run(fn, inputs)[0]
    got = evaluate(fn, inputs)[0]
    assert same_bits(got, want).all(), (name, dtype, a[got != want], b[got != want])


@pytest.mark.parametrize("name", ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"))
def test_on_i1_they_are_the_logical_ops(name: str) -> None:
    a, b = np.array([False, False, True, True]), np.array([False, True, False, True])
    fn = {"bitwise_and": np.logical_and, "bitwise_or": np.logical_or}
    fn |= {"bitwise_xor": np.logical_xor, "bitwise_not": lambda x, y: np.logical_not(x)}
    want = fn[name](a, b)
    args = {"a": a} if name == "bitwise_not" else {"a": a, "b": b}
    f = _one_op(name, DType.I1, 4)
    assert np.array_equal(reference.run(f, args)[0], want)
    assert np.array_equal(evaluate(f, args)[0], want)
    assert np.array_equal(c.run(parse(_text(name, DType.I1, 4)), args)[0], want)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_c_is_the_reference(dtype: DType) -> None:
    """One program with every op (one compile per dtype): every i8 pair, edge and random
    pairs for the wider dtypes."""
    a, b = _pairs(dtype)
    t = f"{dtype}[{a.size}]"
    body = [f"  %r{k} = {n}(%a, %b) : {t}" for k, n in enumerate(BINARY)]
    body.append(f"  %r{len(BINARY)} = bitwise_not(%a) : {t}")
    rets = ", ".join(f"%r{k}" for k in range(len(ALL)))
    text = "\n".join(
        [f"func @main(%a: {t}, %b: {t}) -> ({', '.join([t] * len(ALL))}) {{", *body]
        + [f"  return {rets}", "}"]
    )
    module = parse(text)
    got = c.run(module, {"a": a, "b": b})
    want = reference.run(module, {"a": a, "b": b})
    for name, g, w in zip(ALL, got, want, strict=True):
        bad = g != w
        assert not bad.any(), (name, dtype, a[bad][:4], b[bad][:4], g[bad][:4], w[bad][:4])


@settings(max_examples=40)
@given(
    dtype=st.sampled_from(INT_DTYPES),
    name=st.sampled_from(ALL),
    data=st.data(),
)
def test_the_bound_holds_the_results(dtype: DType, name: str, data) -> None:
    """For drawn operand ranges, every result of drawn operands in them lies in the bound's
    interval (the ops are exact: the error is 0)."""
    ranges, values = [], []
    for _ in range(1 if name == "bitwise_not" else 2):
        lo = data.draw(st.integers(dtype.int_min, dtype.int_max))
        hi = data.draw(st.integers(lo, min(dtype.int_max, lo + data.draw(st.integers(0, 300)))))
        ranges.append((lo, hi))
        values.append(data.draw(st.lists(st.integers(lo, hi), min_size=8, max_size=8)))
    t = f"{dtype}[8]"
    params = ", ".join(
        f"%{p}: {t} {{range = [{lo}, {hi}]}}" for p, (lo, hi) in zip("ab", ranges, strict=False)
    )
    operands = ", ".join(f"%{p}" for p in "ab"[: len(ranges)])
    text = f"func @main({params}) -> {t} {{\n  %r = {name}({operands}) : {t}\n  return %r\n}}\n"
    out = analyze(parse(text)).outputs[0]
    assert out.abs == 0
    lo, hi = out.interval
    args = [_as(v, dtype) for v in values]
    got = reference.apply(name, args).astype(np.float64)
    assert lo <= got.min() and got.max() <= hi, (name, dtype, ranges, out.interval, got)


def test_claims_about_shifts_are_decided_by_the_solver() -> None:
    """x << 1 equals x + x (both wrap) for every i32; x >> 31 equals x >> 32 (the sign fill:
    -1 for negative x, 0 otherwise); x << 32 is 0 (an amount at the width), so not x: refuted."""

    def prog(body: str) -> str:
        return (
            "func @main(%x: i32[4]) -> i32[4] {\n  %c1 = constant() {value = 1} : i32[4]\n"
            "  %c31 = constant() {value = 31} : i32[4]\n  %c32 = constant() {value = 32} : "
            f"i32[4]\n  %c0 = constant() {{value = 0}} : i32[4]\n{body}  return %r\n}}\n"
        )

    shl1 = prog("  %r = shift_left(%x, %c1) : i32[4]\n")
    twice = prog("  %r = add(%x, %x) : i32[4]\n")
    assert check_equivalence(parse(shl1), parse(twice), timeout=10).verdict == "equivalent"
    sr31 = prog("  %r = shift_right(%x, %c31) : i32[4]\n")
    sr32 = prog("  %r = shift_right(%x, %c32) : i32[4]\n")
    assert check_equivalence(parse(sr31), parse(sr32), timeout=10).verdict == "equivalent"
    shl32 = prog("  %r = shift_left(%x, %c32) : i32[4]\n")
    zero = prog("  %r = add(%c0, %c0) : i32[4]\n")
    ident = prog("  %r = add(%x, %c0) : i32[4]\n")
    assert check_equivalence(parse(shl32), parse(zero), timeout=10).verdict == "equivalent"
    assert check_equivalence(parse(shl32), parse(ident), timeout=10).verdict == "not-equivalent"
