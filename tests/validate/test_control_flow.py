"""The SMT meaning of `if`, `while` and `scan` (IR_SPEC.md section 9): on concrete values it
agrees with the reference backend bit for bit; `gdv tv` proves loops with differently written
but equivalent bodies equal (unrolled for a small `max_trips`, by the induction rule for a large
one), refutes a body changed in one value with a counterexample when unrolled, and never says
equivalent when the change sits beyond the unrolled trips; a planted unsound key for the
induction rule (max_trips alone) is shown to make that last check fail."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gdv.backends.reference import bit_equal, run
from gdv.ir.ops.kernel import kernel_bodies
from gdv.ir.parser import parse
from gdv.ir.verifier import verify
from gdv.validate.equivalence import check_equivalence
from gdv.validate.evaluate import evaluate, evaluate_symbolic
from gdv.validate.semantics import control

f32 = np.float32

PROGRAM = """
func @main(%c: i1[], %x: f32[2], %n: i32[], %xs: f32[3,2]) -> (f32[2], f32[2], i32[], f32[3,2]) {
  %r = if(%c, %x) {then = "twice", else = "neg", result = 0} : f32[2]
  %z = constant() {value = 0} : i32[]
  %w = while(%x, %z, %n) {cond = "below", body = "step", max_trips = 5, result = 0} : f32[2]
  %k = while(%x, %z, %n) {cond = "below", body = "step", max_trips = 5, result = 1} : i32[]
  %ys = scan(%x, %xs) {body = "acc", num_scan_inputs = 1, result = 1} : f32[3,2]
  return %r, %w, %k, %ys
}
func @twice(%a: f32[2]) -> f32[2] {
  %b = add(%a, %a) : f32[2]
  return %b
}
func @neg(%a: f32[2]) -> f32[2] {
  %b = neg(%a) : f32[2]
  return %b
}
func @below(%x: f32[2], %i: i32[], %n: i32[]) -> i1[] {
  %p = cmp(%i, %n) {dir = "lt"} : i1[]
  return %p
}
func @step(%x: f32[2], %i: i32[], %n: i32[]) -> (f32[2], i32[], i32[]) {
  %h = constant() {value = 0.75} : f32[2]
  %y = mul(%x, %h) : f32[2]
  %y2 = add(%y, %x) : f32[2]
  %one = constant() {value = 1} : i32[]
  %j = add(%i, %one) : i32[]
  return %y2, %j, %n
}
func @acc(%s: f32[2], %x: f32[2]) -> (f32[2], f32[2]) {
  %t = mul(%s, %x) : f32[2]
  %u = add(%t, %x) : f32[2]
  return %u, %t
}
"""


def _floats(n: int):
    return st.lists(st.floats(width=32), min_size=n, max_size=n).map(lambda v: np.array(v, f32))


@settings(max_examples=15)
@given(c=st.booleans(), x=_floats(2), n=st.integers(-2, 7), xs=_floats(6))
def test_smt_meaning_agrees_with_the_reference(c: bool, x, n: int, xs) -> None:
    module = verify(parse(PROGRAM))
    inputs = {"c": np.array(c), "x": x, "n": np.array(n, np.int32), "xs": xs.reshape(3, 2)}
    want = run(module, inputs)
    with kernel_bodies(module.functions):
        concrete = evaluate(module.entry, inputs)
        symbolic = evaluate_symbolic(module.entry, inputs)  # the encoding proofs use
    for got in (concrete, symbolic):
        for g, w in zip(got, want, strict=True):
            assert bit_equal(g, w), (g, w)


LOOP = """
func @main(%x: f32[2], %n: i32[]) -> f32[2] {
  %z = constant() {value = 0} : i32[]
  %r = while(%x, %z, %n) {cond = "COND", body = "BODY", max_trips = TRIPS, result = 0} : f32[2]
  return %r
}
func @c_lt(%x: f32[2], %i: i32[], %n: i32[]) -> i1[] {
  %p = cmp(%i, %n) {dir = "lt"} : i1[]
  return %p
}
func @c_gt(%x: f32[2], %i: i32[], %n: i32[]) -> i1[] {
  %p = cmp(%n, %i) {dir = "gt"} : i1[]
  return %p
}
func @b_mul(%x: f32[2], %i: i32[], %n: i32[]) -> (f32[2], i32[], i32[]) {
  %two = constant() {value = 2.0} : f32[2]
  %y = mul(%x, %two) : f32[2]
  %one = constant() {value = 1} : i32[]
  %j = add(%i, %one) : i32[]
  return %y, %j, %n
}
func @b_add(%x: f32[2], %i: i32[], %n: i32[]) -> (f32[2], i32[], i32[]) {
  %y = add(%x, %x) : f32[2]
  %one = constant() {value = 1} : i32[]
  %j = add(%one, %i) : i32[]
  return %y, %j, %n
}
func @b_odd(%x: f32[2], %i: i32[], %n: i32[]) -> (f32[2], i32[], i32[]) {
  %y0 = add(%x, %x) : f32[2]
  %k = constant() {value = 7.25} : f32[2]
  %e = cmp(%x, %k) {dir = "eq"} : i1[2]
  %three = constant() {value = 3.0} : f32[2]
  %y3 = mul(%x, %three) : f32[2]
  %y = select(%e, %y3, %y0) : f32[2]
  %one = constant() {value = 1} : i32[]
  %j = add(%i, %one) : i32[]
  return %y, %j, %n
}
"""
"""@b_odd is @b_add except where an element is exactly 7.25 (drawn inputs almost never are, so
only the solver finds it)."""


def _loop(cond: str, body: str, trips: int, keep: tuple[str, ...]):
    text = LOOP.replace("COND", cond).replace("BODY", body).replace("TRIPS", str(trips))
    module = parse(text)
    # Only the functions this side calls: tv shares functions by name between the two sides.
    module.functions = [f for f in module.functions if f.name in ("main", cond, body, *keep)]
    return verify(module)


@pytest.mark.parametrize("trips", [3, 1000])
def test_equivalent_bodies_written_differently_prove(trips: int) -> None:
    a = _loop("c_lt", "b_mul", trips, ())
    b = _loop("c_gt", "b_add", trips, ())
    r = check_equivalence(a, b, "fp", timeout=60)
    assert r.verdict == "equivalent", r.reason


def test_a_body_changed_in_one_value_is_refuted_when_unrolled() -> None:
    a = _loop("c_lt", "b_add", 3, ())
    b = _loop("c_gt", "b_odd", 3, ())
    r = check_equivalence(a, b, "fp", timeout=60)
    assert r.verdict == "not-equivalent", r.reason
    cex = r.counterexample
    assert cex is not None
    x, n = cex.inputs["x"], int(cex.inputs["n"])
    assert n >= 1 and 7.25 in [float(v) * 2**t for v in x for t in range(3)]


def _changed_beyond_unrolling() -> tuple:
    return _loop("c_lt", "b_add", 1000, ()), _loop("c_gt", "b_odd", 1000, ())


def test_a_body_changed_in_one_value_is_not_proved_by_induction() -> None:
    a, b = _changed_beyond_unrolling()
    r = check_equivalence(a, b, "fp", timeout=60)
    assert r.verdict != "equivalent", r.reason


def test_a_planted_unsound_induction_key_would_be_caught(monkeypatch) -> None:
    """Keying the loop classes by max_trips (and types) alone, without proving the cond and
    body functions equal, makes the check above say `equivalent`: so that test fails on it."""

    def by_trips_only(ctx, cond, body, trips, types):
        classes = control.classes(ctx)
        for c in classes:
            if c.trips == trips and c.types == types:
                return c
        found = control.LoopClass(len(classes), cond, body, trips, types)
        classes.append(found)
        return found

    monkeypatch.setattr(control, "loop_class", by_trips_only)
    a, b = _changed_beyond_unrolling()
    r = check_equivalence(a, b, "fp", timeout=60)
    assert r.verdict == "equivalent"


def test_loop_classes_need_a_proof_not_an_unknown(monkeypatch) -> None:
    """A class proof that answers `unknown` (here: every proof) puts the loops in two classes."""
    from gdv.validate import equivalence

    real = equivalence.check_equivalence
    monkeypatch.setattr(control, "CLASS_TIMEOUT", 1e-9)
    a = _loop("c_lt", "b_mul", 1000, ())
    b = _loop("c_gt", "b_add", 1000, ())
    r = real(a, b, "fp", timeout=60)
    assert r.verdict != "equivalent"


def test_gdv_tv_on_loops(tmp_path, capsys) -> None:
    """The command line: equivalent loops exit 0; the one-value change exits 1 (unrolled) with
    a counterexample, and not 0 beyond the unrolled trips."""
    from gdv.ir.printer import print_module

    def write(name: str, module) -> str:
        path = tmp_path / name
        path.write_text(print_module(module))
        return str(path)

    from gdv.cli import main

    for trips in (3, 1000):
        a = write(f"a{trips}.gdv", _loop("c_lt", "b_mul", trips, ()))
        b = write(f"b{trips}.gdv", _loop("c_gt", "b_add", trips, ()))
        odd = write(f"odd{trips}.gdv", _loop("c_gt", "b_odd", trips, ()))
        assert main(["tv", a, b]) == 0
        assert "equivalent" in capsys.readouterr().out
        code = main(["tv", a, odd])
        out = capsys.readouterr().out
        if trips == 3:
            assert code == 1 and "Source value" in out and "Target value" in out, out
        else:
            assert code in (1, 2), out


BIG = """
func @main(%s: f32[], %xs: f32[L], %x: f32[N]) -> (f32[], f32[N]) {
  %r = scan(%s, %xs) {body = "acc", num_scan_inputs = 1, result = 0} : f32[]
  %w = while(%x) {cond = "yes", body = "dbl", max_trips = 100, result = 0} : f32[N]
  return %r, %w
}
func @acc(%s: f32[], %x: f32[]) -> (f32[], f32[]) {
  %t = add(%s, %x) : f32[]
  return %t, %t
}
func @yes(%a: f32[N]) -> i1[] {
  %t = constant() {value = true} : i1[]
  return %t
}
func @dbl(%a: f32[N]) -> f32[N] {
  %b = add(%a, %a) : f32[N]
  return %b
}
"""


@pytest.mark.parametrize(
    "length, n, message",
    [
        (2000, 4, "3:3: error: scan over 2000 steps is not encoded for proofs (at most 1024"),
        (20, 300, "4:3: error: while with max_trips 100 (over 64) over 300 operand elements is"),
    ],
)
def test_claims_too_large_to_encode_are_refused_by_name(tmp_path, capsys, length, n, message):
    from gdv.cli import main

    path = tmp_path / "big.gdv"
    path.write_text(BIG.replace("L", str(length)).replace("N", str(n)))
    assert main(["tv", str(path), str(path)]) == 3
    assert f"big.gdv:{message}" in capsys.readouterr().err


FOREVER = """
func @main(%x: f32[2]) -> f32[2] {
  %r = while(%x) {cond = "always", body = "BODY", max_trips = 2147483647, result = 0} : f32[2]
  return %r
}
func @always(%x: f32[2]) -> i1[] {
  %t = constant() {value = true} : i1[]
  return %t
}
func @BODY(%x: f32[2]) -> f32[2] {
  %k = constant() {value = K} : f32[2]
  %y = mul(%x, %k) : f32[2]
  return %y
}
"""


def test_a_loop_of_2_to_the_31_trips_is_never_replayed() -> None:
    """A while whose condition always holds runs max_trips = 2^31 - 1 trips: replaying it on
    the reference backend (the probe, a model's confirmation) would take hours, so its cost
    counts the trips and it is never replayed: the pair is decided by the induction rule
    (equivalent bodies) or left unknown (a body that differs)."""
    a = verify(parse(FOREVER.replace("BODY", "double").replace("K", "2.0")))
    b = parse(FOREVER.replace("BODY", "twice").replace("K", "2.0"))
    b.functions[2].ops = (
        parse("func @twice(%x: f32[2]) -> f32[2] {\n  %y = add(%x, %x) : f32[2]\n  return %y\n}\n")
        .functions[0]
        .ops
    )
    c = verify(parse(FOREVER.replace("BODY", "triple").replace("K", "3.0")))
    assert check_equivalence(a, verify(b), "fp", timeout=30).verdict == "equivalent"
    assert check_equivalence(a, c, "fp", timeout=30).verdict == "unknown"
