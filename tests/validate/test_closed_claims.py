"""Claims about programs without inputs (what `fold-constants` makes) are decided element by
element by Z3's simplifier over the SMT meaning, not by a solver search (issue 19: T5's
16x16 integer table converted to f32 and divided by 8.0 timed out at 10 s). The decision
must agree with the reference meaning on concrete values, and a wrong fold must never pass."""

from __future__ import annotations

import time

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends import reference
from gdv.passes.fold_constants import FoldConstants
from gdv.validate.counterexample import same_bits
from gdv.validate.discharge import obligation_queries
from gdv.validate.equivalence import build_query, check_equivalence


def table(values) -> str:
    return "[" + ", ".join("[" + ", ".join(repr(v) for v in row) + "]" for row in values) + "]"


def program(body: str, result: str) -> str:
    return f"func @main() -> {result} {{\n{body}}}\n"


def t5_pair(tweak: float = 0.0):
    rng = np.random.default_rng(5)
    ints = rng.integers(0, 32, (16, 16))
    src = program(
        f"  %t = constant() {{value = {table(ints.tolist())}}} : i32[16,16]\n"
        "  %f = convert(%t) : f32[16,16]\n"
        "  %e = constant() {value = 8.0} : f32[16,16]\n"
        "  %d = div(%f, %e) : f32[16,16]\n"
        "  return %d\n",
        "f32[16,16]",
    )
    folded = (ints / 8.0).astype(np.float32)
    folded[3, 7] += np.float32(tweak)
    tgt = program(
        f"  %c = constant() {{value = {table(folded.astype(float).tolist())}}} : f32[16,16]\n"
        "  return %c\n",
        "f32[16,16]",
    )
    return parse(src), parse(tgt)


def test_the_t5_table_fold_is_proved_at_once_with_a_false_query() -> None:
    src, tgt = t5_pair()
    start = time.perf_counter()
    result = check_equivalence(src, tgt, "fp", timeout=10.0)
    assert result.verdict == "equivalent"
    assert time.perf_counter() - start < 5.0  # was a 10 s timeout: unknown
    query = build_query(src.entry, tgt.entry, 0)
    assert query.trivial


def test_a_wrong_fold_of_the_table_is_refuted() -> None:
    src, tgt = t5_pair(tweak=0.125)
    result = check_equivalence(src, tgt, "fp", timeout=10.0)
    assert result.verdict == "not-equivalent"
    assert not build_query(src.entry, tgt.entry, 0).trivial


def test_signed_zeros_differ_and_nans_are_one_value() -> None:
    # SMT `=` (IR_SPEC.md section 5): +0.0 and -0.0 differ, every NaN is one value
    neg = program(
        "  %a = constant() {value = [0.0, 1.0]} : f32[2]\n  %n = neg(%a) : f32[2]\n  return %n\n",
        "f32[2]",
    )
    wrong = program("  %c = constant() {value = [0.0, -1.0]} : f32[2]\n  return %c\n", "f32[2]")
    right = program("  %c = constant() {value = [-0.0, -1.0]} : f32[2]\n  return %c\n", "f32[2]")
    assert check_equivalence(parse(neg), parse(wrong)).verdict == "not-equivalent"
    assert check_equivalence(parse(neg), parse(right)).verdict == "equivalent"
    nan = program(
        "  %a = constant() {value = [0.0]} : f32[1]\n  %d = div(%a, %a) : f32[1]\n  return %d\n",
        "f32[1]",
    )
    folded = program("  %c = constant() {value = [nan]} : f32[1]\n  return %c\n", "f32[1]")
    assert check_equivalence(parse(nan), parse(folded)).verdict == "equivalent"


def test_a_transcendental_is_never_decided_by_one_evaluation() -> None:
    # its last bits are not fixed (an uninterpreted function in the SMT meaning): one value
    # for exp(1) is no proof, whatever the reference computes
    exp = program(
        "  %a = constant() {value = [1.0]} : f32[1]\n  %e = exp(%a) : f32[1]\n  return %e\n",
        "f32[1]",
    )
    value = float(reference.run(parse(exp), {})[0][0])
    folded = program(f"  %c = constant() {{value = [{value!r}]}} : f32[1]\n  return %c\n", "f32[1]")
    assert not build_query(parse(exp).entry, parse(folded).entry, 0).trivial
    assert check_equivalence(parse(exp), parse(folded), timeout=2.0).verdict != "equivalent"


def test_fold_constants_obligation_queries_are_false_for_the_checker_too() -> None:
    src, _ = t5_pair()
    result = FoldConstants().run(src)
    assert result.obligations
    for ob in result.obligations:
        (text,) = obligation_queries(ob)
        assert " ".join(text.split()).endswith("(assert false) (check-sat)"), text


OPS = ("add", "sub", "mul", "div", "max", "min")
F32 = st.floats(width=32, allow_nan=True, allow_infinity=True)


@given(
    op=st.sampled_from(OPS),
    a=st.lists(F32, min_size=4, max_size=4),
    b=st.lists(F32, min_size=4, max_size=4),
    flip=st.integers(0, 4),
)
def test_closed_decision_agrees_with_the_reference(op, a, b, flip) -> None:
    """The fold the reference computes is proved; the same with one element's bits changed
    (flip < 4) is not. Either way the verdict matches the reference's bit comparison."""
    src = parse(
        program(
            f"  %a = constant() {{value = {a!r}}} : f32[4]\n"
            f"  %b = constant() {{value = {b!r}}} : f32[4]\n"
            f"  %r = {op}(%a, %b) : f32[4]\n  return %r\n",
            "f32[4]",
        )
    )
    (want,) = reference.run(src, {})
    got = want.copy()
    if flip < 4:
        bits = got.view(np.uint32)
        bits[flip] ^= np.uint32(1)
    tgt = parse(
        program(
            f"  %c = constant() {{value = {[float(x) for x in got]!r}}} : f32[4]\n  return %c\n",
            "f32[4]",
        )
    )
    (folded,) = reference.run(tgt, {})
    verdict = check_equivalence(src, tgt, timeout=10.0).verdict
    equal = bool(same_bits(want, folded).all())
    assert verdict == ("equivalent" if equal else "not-equivalent")
    # decided by evaluation exactly when it holds (a difference goes to the solver)
    assert build_query(src.entry, tgt.entry, 0).trivial is equal
