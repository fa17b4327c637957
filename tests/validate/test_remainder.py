"""rem and mod (issue 19) in every layer, against an oracle written from IR_SPEC.md's rule with
Python integers and fractions (not numpy, not C):

- rem(a, b) = a - b * trunc(a / b) (the sign of a; C's % and fmod), mod(a, b) = a - b *
  floor(a / b) (integers; the sign of b, Python's %); a zero divisor gives a; INT_MIN by -1
  gives 0 (no overflow: the formula's exact value).
- float rem is exact: NaN when a is infinite, b is zero or either is NaN; a when b is infinite;
  a zero result has a's sign.

The reference meets the oracle on every i8 pair and on edge and random pairs of the other
dtypes; the SMT meaning (`evaluate`) and the C target meet the reference on them.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from gdv.api import parse
from gdv.backends import c, reference
from gdv.ir.core import Function, Op, Param
from gdv.ir.dtypes import FLOAT_DTYPES, INT_DTYPES, DType
from gdv.ir.types import TensorType
from gdv.validate.counterexample import same_bits
from gdv.validate.evaluate import evaluate


def int_oracle(name: str, a: int, b: int) -> int:
    if b == 0:
        return a
    if name == "mod":
        return a - b * (a // b)  # Python's // floors
    q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)  # toward zero
    return a - b * q


def float_oracle(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or b == 0:
        return math.nan
    if math.isinf(b):
        return a
    fa, fb = Fraction(a), Fraction(b)
    q = abs(fa) // abs(fb) * (1 if (fa < 0) == (fb < 0) else -1)
    r = fa - fb * q
    return math.copysign(0.0, a) if r == 0 else float(r)


def test_the_oracles_say_what_the_spec_says() -> None:
    assert int_oracle("rem", -7, 3) == -1 and int_oracle("mod", -7, 3) == 2
    assert int_oracle("rem", 7, -3) == 1 and int_oracle("mod", 7, -3) == -2
    assert int_oracle("rem", -128, -1) == 0 and int_oracle("mod", 5, 0) == 5
    assert float_oracle(5.5, 2.0) == 1.5 and float_oracle(-5.5, 2.0) == -1.5
    assert math.copysign(1, float_oracle(-4.0, 2.0)) == -1 and float_oracle(3.0, -math.inf) == 3
    assert math.isnan(float_oracle(math.inf, 1.0)) and math.isnan(float_oracle(1.0, -0.0))


def _int_pairs(dtype: DType) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of 8-bit values, else edge values and random pairs: Python integers taken
    into the dtype's range modulo 2^bits (so negative draws are large unsigned values)."""
    m = 1 << dtype.bits

    def wrap(vs) -> np.ndarray:
        out = [int(v) % m for v in vs]
        if dtype.int_min < 0:
            out = [v - m if v > dtype.int_max else v for v in out]
        return np.array(out, dtype=object).astype(dtype.np)

    if dtype.bits <= 8:
        a, b = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128))
        return wrap(a.ravel()), wrap(b.ravel())
    lo, hi = dtype.int_min, dtype.int_max
    e = [0, 1, -1, 2, -2, 3, -3, 7, -7, lo, hi, lo + 1, hi - 1, 100, -100]
    a, b = (
        list(x.ravel()) for x in np.meshgrid(np.array(e, dtype=object), np.array(e, dtype=object))
    )
    rng = np.random.default_rng(19)
    ra = [int(v) * 3 for v in rng.integers(-(2**62), 2**62, 400)]
    rb = [int(v) for v in rng.integers(-1000, 1000, 400)]
    return wrap(a + ra + ra[:100]), wrap(b + rb + ra[100:200])


def _float_pairs(dtype: DType) -> tuple[np.ndarray, np.ndarray]:
    info = ml_dtypes.finfo(dtype.np)
    tiny, big = float(info.smallest_subnormal), float(info.max)
    e = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -3.0, 5.5, -5.5, math.inf, -math.inf, math.nan]
    e += [tiny, -tiny, 3 * tiny, big, -big, 0.1, 1e4]
    a, b = (m.ravel() for m in np.meshgrid(e, e))
    rng = np.random.default_rng(7)
    ra = rng.standard_normal(300) * 10.0 ** rng.integers(-3, 4, 300)
    rb = rng.standard_normal(300) * 10.0 ** rng.integers(-3, 2, 300)
    with np.errstate(over="ignore"):
        return (
            np.concatenate([a, ra]).astype(dtype.np),
            np.concatenate([b, rb]).astype(dtype.np),
        )


def _fn(name: str, dtype: DType, n: int) -> Function:
    t = TensorType(dtype, (n,))
    params = [Param("a", t), Param("b", t)]
    return Function("main", params, [t], [Op("r", name, ["a", "b"], {}, t)], ["r"])


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
@pytest.mark.parametrize("name", ["rem", "mod"])
def test_integers_meet_the_oracle_in_every_layer(name: str, dtype: DType) -> None:
    a, b = _int_pairs(dtype)
    got = reference.apply(name, [a, b])
    want = np.array(
        [int_oracle(name, int(x), int(y)) for x, y in zip(a, b, strict=True)], dtype=object
    )  # Python integers: u64 values above 2^63 stay exact
    bad = got.astype(object) != want
    assert not bad.any(), (name, dtype, a[bad][:4], b[bad][:4], got[bad][:4])
    k = slice(0, 300) if dtype.bits <= 8 else slice(None)  # the SMT side element by element
    smt = evaluate(_fn(name, dtype, a[k].size), {"a": a[k], "b": b[k]})[0]
    assert np.array_equal(smt, got[k]), (name, dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_float_rem_meets_the_oracle_in_every_layer(dtype: DType) -> None:
    a, b = _float_pairs(dtype)
    got = reference.apply("rem", [a, b])
    pairs = zip(a.astype(float), b.astype(float), strict=True)
    want = np.array([float_oracle(x, y) for x, y in pairs], dtype=np.float64).astype(dtype.np)
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)
    smt = evaluate(_fn("rem", dtype, 361), {"a": a[:361], "b": b[:361]})[0]
    assert same_bits(smt, got[:361]).all(), a[:361][~same_bits(smt, got[:361])]


def test_c_meets_the_reference() -> None:
    """Every i8 pair and the edges of the other dtypes, rem and mod; float rem on its edges
    and random pairs, bit for bit (fmod is exact)."""
    for dtype in (*INT_DTYPES, *FLOAT_DTYPES):
        a, b = _int_pairs(dtype) if dtype.is_int else _float_pairs(dtype)
        t = f"{dtype}[{a.size}]"
        names = ["rem", "mod"] if dtype.is_int else ["rem"]
        body = [f"  %r{k} = {n}(%a, %b) : {t}" for k, n in enumerate(names)]
        rets = ", ".join(f"%r{k}" for k in range(len(names)))
        text = "\n".join(
            [f"func @main(%a: {t}, %b: {t}) -> ({', '.join([t] * len(names))}) {{", *body]
            + [f"  return {rets}", "}"]
        )
        module = parse(text)
        got = c.run(module, {"a": a, "b": b})
        want = reference.run(module, {"a": a, "b": b})
        for name, g, w in zip(names, got, want, strict=True):
            assert reference.bit_equal(g, w), (name, dtype, reference.describe_difference(g, w))
