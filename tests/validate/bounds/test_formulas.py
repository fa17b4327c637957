"""The symbolic formulas (validate/bounds/formulas.py) and the numeric rules agree: on concrete
operands with first-order errors, each rule's coefficients of u, eta, u_f64 and eta_f64 equal
the formula's with the sizes and operand bounds substituted."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdv.ir.core import Op
from gdv.ir.dtypes import DType
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.types import TensorType
from gdv.validate.bounds import RULES
from gdv.validate.bounds import formulas as F
from gdv.validate.bounds.model import Err, mag, make_tb, mig
from gdv.validate.bounds.registry import Context

U = 2.0**-24


def _operand(shape: tuple[int, ...], lo: float, hi: float, alpha: float):
    return make_tb(TensorType(DType.F32, shape), (lo, hi), Err.make({"u_f32": alpha}, alpha * U))


def _op(name: str, shape: tuple[int, ...], n_operands: int, **attrs) -> Op:
    return Op("r", name, ["a", "b"][:n_operands], attrs, TensorType(DType.F32, shape))


def _coefficients(expr, values: dict) -> dict[str, float]:
    """The coefficient of each roundoff symbol in a formula that is linear in them."""
    syms = {"u_f32": F.u, "eta_f32": F.eta, "u_f64": F.u_f64, "eta_f64": F.eta_f64}
    zero = {s: 0 for s in syms.values()}
    out = {}
    for name, s in syms.items():
        value = float(expr.subs(values).subs({**zero, s: 1}).doit())
        if value:
            out[name] = value
    return out


# Ranges at least 0.1 wide: on a point range the exact/computed cap (model.make_tb) is the
# smaller bound and replaces the first-order form.
ranges = st.tuples(st.floats(0.1, 4.0), st.floats(0.1, 4.0)).map(lambda t: (t[0], t[0] + t[1]))
alphas = st.floats(0.0, 100.0)


@pytest.mark.parametrize(
    "name", ["add", "sub", "mul", "div", "exp", "neg", "abs", "relu", "max", "transpose"]
)
@given(ra=ranges, rb=ranges, alpha=alphas, beta=alphas, sign=st.booleans())
def test_elementwise_rule_matches_formula(name, ra, rb, alpha, beta, sign) -> None:
    lo, hi = (-ra[1], ra[0]) if sign and name != "exp" else (ra[0], ra[1])
    a = _operand((3,), lo, hi, alpha)
    b = _operand((3,), rb[0], rb[1], beta)  # positive: a valid divisor
    two = name in ("add", "sub", "mul", "div", "max")
    attrs = {"perm": [0]} if name == "transpose" else {}
    op = _op(name, (3,), 2 if two else 1, **attrs)
    result = RULES[OPS[name]](op, [a, b] if two else [a], Context())
    values = {
        F.e_a: alpha * F.u,
        F.e_b: beta * F.u,
        F.a_max: mag(*a.exact),
        F.b_max: mag(*b.exact),
        F.b_min: mig(*b.exact),
        F.hi: a.hi,
        F.m: mag(*result.exact),
        F.k: 4,
    }
    want = _coefficients(F.formula(OPS[name]), values)
    got = {s: c for s, c in result.err.lin.items() if c}
    assert want.keys() == got.keys(), (want, got)
    for s in want:
        assert got[s] == pytest.approx(want[s], rel=1e-9), (s, want, got)


@given(r=ranges, alpha=alphas, n=st.integers(2, 300))
def test_reduce_sum_matches_formula(r, alpha, n) -> None:
    x = _operand((2, n), -r[1], r[0], alpha)
    op = Op("r", "reduce_sum", ["a"], {"axes": [1]}, TensorType(DType.F32, (2,)))
    result = RULES[OPS["reduce_sum"]](op, [x], Context())
    want = _coefficients(
        F.formula(OPS["reduce_sum"]), {F.e_a: alpha * F.u, F.a_max: mag(*x.exact), F.n: n}
    )
    assert result.err.lin["u_f32"] == pytest.approx(want["u_f32"], rel=1e-9)


@given(ra=ranges, rb=ranges, alpha=alphas, beta=alphas, k=st.integers(2, 300))
def test_dot_matches_formula(ra, rb, alpha, beta, k) -> None:
    a = _operand((2, k), -ra[1], ra[0], alpha)
    b = _operand((k, 3), -rb[1], rb[0], beta)
    attrs = {"lhs_batch": [], "rhs_batch": [], "lhs_contract": [1], "rhs_contract": [0]}
    op = Op("r", "dot", ["a", "b"], attrs, TensorType(DType.F32, (2, 3)))
    result = RULES[OPS["dot"]](op, [a, b], Context())
    values = {
        F.e_a: alpha * F.u,
        F.e_b: beta * F.u,
        F.a_max: mag(*a.exact),
        F.b_max: mag(*b.exact),
        F.K: k,
    }
    want = _coefficients(F.formula(OPS["dot"]), values)
    for s, c in want.items():
        assert result.err.lin[s] == pytest.approx(c, rel=1e-9), s
    assert math.isfinite(result.err.total)


def test_formulas_name_the_sizes() -> None:
    assert F.K in F.formula(OPS["dot"]).free_symbols
    assert F.n in F.formula(OPS["reduce_sum"]).free_symbols
