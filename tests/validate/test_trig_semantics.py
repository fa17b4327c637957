"""The SMT meaning of tan, asin, acos, atan, sinh, cosh, asinh, acosh and atanh (issue 19).

They are transcendentals (IR_SPEC.md section 3): their last bits are implementation-defined, so
the SMT meaning is an uninterpreted function per (op, dtype), deterministic and otherwise
unknown. What that must give, checked here with the solver: an op equals itself on the same
operand (proved); two different ops, or one op on two dtypes, are never proved equal; and no
value the reference computes for one input proves a fold of it (the reference's last bits are
one implementation's, not the meaning's). The reference meaning itself is checked against
mpmath (tests/validate/bounds/test_transcendental_ulps.py, tests/backends/reference).
"""

from __future__ import annotations

import numpy as np
import pytest

from gdv.api import parse
from gdv.backends import reference
from gdv.ir.ops.elementwise import TRANSCENDENTAL, TRIG_OPS
from gdv.validate.equivalence import check_equivalence


def _unary(op: str, dt: str = "f32", pre: str = "") -> str:
    return (
        f"func @main(%x: {dt}[4]) -> {dt}[4] {{\n{pre}  %y = {op}(%x) : {dt}[4]\n  return %y\n}}\n"
    )


def test_the_trig_ops_are_transcendental() -> None:
    assert set(TRIG_OPS) <= set(TRANSCENDENTAL)
    assert len(set(TRIG_OPS)) == 9


@pytest.mark.parametrize("theory", ["fp", "real"])
@pytest.mark.parametrize("op", TRIG_OPS)
def test_an_op_equals_itself(op: str, theory: str) -> None:
    a = parse(_unary(op))
    assert check_equivalence(a, parse(_unary(op)), theory, timeout=5.0).verdict == "equivalent"


@pytest.mark.parametrize("theory", ["fp", "real"])
@pytest.mark.parametrize("op", TRIG_OPS)
def test_an_op_never_equals_another(op: str, theory: str) -> None:
    other = TRIG_OPS[(TRIG_OPS.index(op) + 1) % len(TRIG_OPS)]
    result = check_equivalence(parse(_unary(op)), parse(_unary(other)), theory, timeout=5.0)
    assert result.verdict != "equivalent", (op, other)


def test_tan_is_not_sin_over_cos() -> None:
    """tan is its own function: not proved equal to sin(x) / cos(x) (which rounds twice more)."""
    quotient = (
        "func @main(%x: f32[4]) -> f32[4] {\n  %s = sin(%x) : f32[4]\n  %c = cos(%x) : f32[4]\n"
        "  %y = div(%s, %c) : f32[4]\n  return %y\n}\n"
    )
    result = check_equivalence(parse(_unary("tan")), parse(quotient), timeout=5.0)
    assert result.verdict != "equivalent"


@pytest.mark.parametrize("op", TRIG_OPS)
def test_a_trig_op_is_never_decided_by_one_evaluation(op: str) -> None:
    value = {"acosh": 1.5}.get(op, 0.5)
    src = (
        f"func @main() -> f32[1] {{\n  %a = constant() {{value = [{value}]}} : f32[1]\n"
        f"  %e = {op}(%a) : f32[1]\n  return %e\n}}\n"
    )
    (computed,) = reference.run(parse(src), {})
    assert np.isfinite(computed).all()
    folded = (
        f"func @main() -> f32[1] {{\n  %c = constant() {{value = [{float(computed[0])!r}]}} : "
        "f32[1]\n  return %c\n}\n"
    )
    assert check_equivalence(parse(src), parse(folded), timeout=2.0).verdict != "equivalent"


def test_one_op_on_two_dtypes_is_two_functions() -> None:
    """asin in f32 and asin in f64 (then rounded) are different uninterpreted functions."""
    direct = parse(_unary("asin"))
    wide = parse(
        "func @main(%x: f32[4]) -> f32[4] {\n  %w = convert(%x) : f64[4]\n"
        "  %a = asin(%w) : f64[4]\n  %y = convert(%a) : f32[4]\n  return %y\n}\n"
    )
    assert check_equivalence(direct, wide, timeout=5.0).verdict != "equivalent"
