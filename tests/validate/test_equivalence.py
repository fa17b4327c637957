"""Equivalence checking: verdicts, counterexamples, signatures, SMT-LIB text."""

from __future__ import annotations

import numpy as np
import pytest

from gdv.api import parse
from gdv.ir.diagnostics import IRError
from gdv.validate.counterexample import same_bits
from gdv.validate.equivalence import check_equivalence, query_smt2


def fn(text: str):
    return parse(text).entry


X_PLUS_ZERO = """func @main(%x: f32[4]) -> f32[4] {
  %c = constant() {value = 0.0} : f32[4]
  %y = add(%x, %c) : f32[4]
  return %y
}"""
X_TIMES_ONE = X_PLUS_ZERO.replace("0.0", "1.0").replace("add", "mul")
IDENTITY = "func @main(%x: f32[4]) -> f32[4] {\n  return %x\n}"


def test_x_plus_zero_is_refuted_with_a_replayed_counterexample():
    from gdv.backends import reference

    r = check_equivalence(fn(X_PLUS_ZERO), fn(IDENTITY))
    assert r.verdict == "not-equivalent"
    cex = r.counterexample
    a = reference.run(fn(X_PLUS_ZERO), cex.inputs)[0]
    b = reference.run(fn(IDENTITY), cex.inputs)[0]
    assert not same_bits(a, b).all()
    assert not same_bits(np.asarray(cex.value_a), np.asarray(cex.value_b))


def test_x_times_one_is_equivalent_in_both_theories():
    for theory in ("fp", "real"):
        assert check_equivalence(fn(X_TIMES_ONE), fn(IDENTITY), theory).verdict == "equivalent"


def test_x_plus_zero_is_equivalent_over_the_reals():
    assert check_equivalence(fn(X_PLUS_ZERO), fn(IDENTITY), "real").verdict == "equivalent"


def test_signature_mismatch_is_an_input_error():
    other = "func @main(%x: f32[5]) -> f32[5] {\n  return %x\n}"
    with pytest.raises(IRError, match="signature mismatch"):
        check_equivalence(fn(IDENTITY), fn(other))
    two = "func @main(%x: f32[4], %y: f32[4]) -> f32[4] {\n  return %x\n}"
    with pytest.raises(IRError, match="2 parameter"):
        check_equivalence(fn(IDENTITY), fn(two))


def test_query_text_is_smtlib_with_logic_all():
    text = query_smt2(fn(X_PLUS_ZERO), fn(IDENTITY))
    assert text.startswith("(set-logic ALL)\n")
    assert "(check-sat)" in text
    import z3

    s = z3.Solver()
    s.from_string(text)
    assert s.check() == z3.sat


def test_decoding_a_model_is_vectorised_for_big_inputs():
    import time

    import z3

    from gdv.ir.dtypes import DType
    from gdv.ir.types import TensorType
    from gdv.validate.counterexample import decode_input
    from gdv.validate.encode import input_function
    from gdv.validate.semantics.values import Values

    t = TensorType(DType.F32, (4096, 4096))
    f = input_function(Values("fp"), "x", t)
    s = z3.Solver()
    s.add(f(3, 5) == z3.FPVal(1.5, z3.Float32()), z3.fpIsNaN(f(0, 0)))
    s.add(z3.fpIsNegative(f(4095, 4095)), z3.fpIsZero(f(4095, 4095)))
    s.add(f(7000, 1) == z3.FPVal(2.0, z3.Float32()))  # outside the shape: ignored
    assert s.check() == z3.sat
    start = time.perf_counter()
    x = decode_input(s.model(), f, t)
    assert time.perf_counter() - start < 5.0
    assert x.shape == t.shape and x.dtype == np.float32
    assert x[3, 5] == 1.5 and np.isnan(x[0, 0])
    assert x[4095, 4095] == 0 and np.signbit(x[4095, 4095])


def test_a_query_past_its_deadline_is_interrupted_and_answers_unknown(monkeypatch):
    """The wall-clock guard behind z3's own timeout: with the slack at zero the deadline (1 s)
    fires long before z3's 30 s timeout would, and the check answers unknown, not a proof."""
    import time

    import z3

    from gdv.validate import equivalence

    monkeypatch.setattr(equivalence, "DEADLINE_SLACK", 0.0)
    x, y, z = z3.Ints("x y z")
    s = z3.Solver()
    s.add(x * x * x + y * y * y == z * z * z, x > 1, y > 1, z > 1, x * y * z > 10**9)
    start = time.perf_counter()
    r = equivalence.check_within(s, 30.0)
    assert r == z3.unknown
    assert time.perf_counter() - start < 10
