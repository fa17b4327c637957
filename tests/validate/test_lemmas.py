"""Each real-theory lemma holds on concrete data (exact rationals; floats for exp), and the
lemmas are what make the real proofs of reorderings go through."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gdv.api import parse
from gdv.validate.equivalence import build_query, check_equivalence
from gdv.validate.lemmas import LEMMAS, UNROLL_MAX

rationals = st.fractions(min_value=-1000, max_value=1000, max_denominator=1000)


def left_fold_sum(xs: list[Fraction]) -> Fraction:
    acc = Fraction(0)
    for x in xs:
        acc += x
    return acc


@st.composite
def blocks(draw):
    t = draw(st.integers(1, 6))
    b = draw(st.integers(1, 6))
    return t, b, draw(st.lists(rationals, min_size=t * b, max_size=t * b))


@given(blocks())
def test_split(tb):
    """sum_{k<K} f(k) = sum_{i<K/T} sum_{j<T} f(i*T + j)."""
    t, b, f = tb
    assert left_fold_sum(f) == left_fold_sum(
        [left_fold_sum([f[i * t + j] for j in range(t)]) for i in range(b)]
    )


@given(blocks())
def test_nest(tb):
    """sum_{k<A*B} f(k) = sum_{j<B} sum_{i<A} f(i*B + j): the other order of two axes."""
    bb, a, f = tb
    assert left_fold_sum(f) == left_fold_sum(
        [left_fold_sum([f[i * bb + j] for i in range(a)]) for j in range(bb)]
    )


@given(st.lists(rationals, max_size=12), rationals)
def test_scale(g, c):
    """sum c*g = c * sum g; sum g/c = (sum g)/c, with x/0 = 0 as the real theory reads it."""

    def div(x: Fraction, y: Fraction) -> Fraction:
        return Fraction(0) if y == 0 else x / y

    assert left_fold_sum([c * x for x in g]) == c * left_fold_sum(g)
    assert left_fold_sum([div(x, c) for x in g]) == div(left_fold_sum(g), c)


@given(st.lists(rationals, min_size=1, max_size=UNROLL_MAX))
def test_unroll(f):
    """A short sum is its terms added in order."""
    total = f[0]
    for x in f[1:]:
        total = total + x
    assert left_fold_sum(f) == total


@given(st.floats(-50, 50), st.floats(-50, 50))
def test_exp_diff(a, b):
    """exp(a - b) = exp(a) / exp(b) (checked in f64, to within rounding)."""
    assert math.isclose(math.exp(a - b), math.exp(a) / math.exp(b), rel_tol=1e-12)


@given(st.floats(-700, 700))
def test_exp_pos(x):
    assert np.exp(np.float64(x)) > 0


def test_every_lemma_has_a_property_test():
    tested = {"split", "nest", "scale", "unroll", "exp-diff", "exp-pos"}
    assert set(LEMMAS) == tested


def _fn(text: str):
    return parse(text).entry


BLOCKS_SRC = """func @main(%x: f32[64]) -> f32[] {
  %r = reduce_sum(%x) {axes = [0]} : f32[]
  return %r
}"""
BLOCKS_TGT = """func @main(%x: f32[64]) -> f32[] {
  %y = reshape(%x) : f32[8,8]
  %p = reduce_sum(%y) {axes = [1]} : f32[8]
  %r = reduce_sum(%p) {axes = [0]} : f32[]
  return %r
}"""


def test_block_sums_prove_over_the_reals_through_split_only():
    q = build_query(_fn(BLOCKS_SRC), _fn(BLOCKS_TGT), 0, "real")
    assert "split" in {name for name, _ in q.lemmas}
    assert check_equivalence(_fn(BLOCKS_SRC), _fn(BLOCKS_TGT), "real").verdict == "equivalent"
    # Without the lemma instances the same query is not a proof.
    import z3

    s = z3.Solver()
    s.set("timeout", 2000)
    lemma_ids = {f.get_id() for _, f in q.lemmas}
    s.add(*[a for a in q.assertions if a.get_id() not in lemma_ids])
    assert s.check() != z3.unsat


def test_lemma_instances_are_in_the_smtlib_text():
    import z3

    text = build_query(_fn(BLOCKS_SRC), _fn(BLOCKS_TGT), 0, "real").smt2()
    assert text.startswith("(set-logic ALL)")
    assert "fold.sum.real" in text
    s = z3.Solver()
    s.set("timeout", 10000)
    s.from_string(text)  # the stored text alone is the proof obligation
    assert s.check() == z3.unsat
