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
from gdv.validate import equivalence
from gdv.validate.counterexample import same_bits
from gdv.validate.discharge import discharge, obligation_queries
from gdv.validate.equivalence import CLOSED_REASON, build_query, check_equivalence


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


def small_fold(tweak: float = 0.0, with_input: bool = False):
    """A 2x2 integer table converted and divided by 8.0, against its fold (one element moved
    by `tweak`); `with_input`: both sides also take an f32 input they do not read."""
    sig = "%x: f32[2,2]" if with_input else ""
    src = (
        f"func @main({sig}) -> f32[2,2] {{\n"
        "  %t = constant() {value = [[1, 2], [3, 5]]} : i32[2,2]\n"
        "  %f = convert(%t) : f32[2,2]\n"
        "  %e = constant() {value = 8.0} : f32[2,2]\n"
        "  %d = div(%f, %e) : f32[2,2]\n  return %d\n}\n"
    )
    last = 0.625 + tweak
    tgt = (
        f"func @main({sig}) -> f32[2,2] {{\n"
        f"  %c = constant() {{value = [[0.125, 0.25], [0.375, {last!r}]]}} : f32[2,2]\n"
        "  return %c\n}\n"
    )
    return parse(src), parse(tgt)


def test_a_claim_with_an_input_is_never_decided_by_evaluation() -> None:
    """The same true fold, but the claim quantifies over an input (unread): a search, never
    the evaluation; the solver still proves it and refutes the wrong one."""
    src, tgt = small_fold(with_input=True)
    for kwargs in ({}, {"abstract": True}):
        assert not build_query(src.entry, tgt.entry, 0, **kwargs).closed
    result = check_equivalence(src, tgt, "fp", timeout=10.0)
    assert result.verdict == "equivalent" and result.reason != CLOSED_REASON
    assert "closed" not in [q.stage for q in result.queries]
    wrong_src, wrong_tgt = small_fold(tweak=0.125, with_input=True)
    assert check_equivalence(wrong_src, wrong_tgt, "fp", timeout=10.0).verdict == "not-equivalent"
    # without the input it is decided by evaluation, but not with a fixed output position
    src, tgt = small_fold()
    assert build_query(src.entry, tgt.entry, 0).closed
    assert not build_query(src.entry, tgt.entry, 0, fixed={0: 1}).closed
    assert not build_query(src.entry, tgt.entry, 0, abstract=True).closed


def test_the_method_is_recorded_with_the_proof() -> None:
    src, tgt = small_fold()
    result = check_equivalence(src, tgt, "fp", timeout=10.0)
    assert result.verdict == "equivalent" and result.reason == CLOSED_REASON
    assert [q.stage for q in result.queries] == ["closed"]
    folds = FoldConstants().run(src).obligations
    assert folds
    for out in discharge(folds, jobs=1, use_cache=False):
        assert out.status == "proved" and out.reason == CLOSED_REASON, out.obligation.id


def test_a_simplifier_fault_alone_never_proves_a_wrong_fold(monkeypatch) -> None:
    """Both halves must agree: with Z3's simplifier made to call every closed claim equal,
    the reference interpreter still sees the wrong element, so the solver decides (and
    refutes); with the interpreter made to agree, the simplifier still does not."""
    src, tgt = small_fold(tweak=0.125)
    monkeypatch.setattr(equivalence, "_closed_and_equal", lambda *a: True)
    assert not build_query(src.entry, tgt.entry, 0).closed
    assert check_equivalence(src, tgt, "fp", timeout=10.0).verdict == "not-equivalent"
    monkeypatch.undo()
    monkeypatch.setattr(equivalence, "_reference_agrees", lambda *a: True)
    assert not build_query(src.entry, tgt.entry, 0).closed
    assert check_equivalence(src, tgt, "fp", timeout=10.0).verdict == "not-equivalent"
