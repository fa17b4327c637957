"""The first-order part of each core rule as one sympy expression over the sizes, the operand
bounds and the unit roundoff: the rules in readable form, with sizes and ranges still symbols.

The rules themselves compute with numbers (a whole program folds sizes and ranges in as it
goes); `tests/validate/bounds/test_formulas.py` checks that each rule's first-order
coefficients equal these expressions' on concrete operands, so the two cannot drift apart.

Symbols: `a_max`, `b_max` (largest |operand|), `b_min` (smallest |divisor|), `hi` (largest
argument), `e_a`, `e_b` (operand error bounds), `K` (contraction length), `n` (reduced
count), `u`, `eta` (the result dtype's unit roundoff and underflow unit), `u_f64`, `eta_f64`,
`k` (the transcendental ulp assumption), `m` (largest |result|), `j` (a summation index);
`Binade(x)` is the largest power of two <= x.
"""

from __future__ import annotations

import sympy

from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops import OpSpec
from gdv.validate.bounds.rounding import binade

a_max, b_max, b_min, hi, e_a, e_b, m = sympy.symbols(
    "a_max b_max b_min hi e_a e_b m", nonnegative=True
)
K, n = sympy.symbols("K n", positive=True, integer=True)
j = sympy.Symbol("j", positive=True, integer=True)  # a summation index


class Binade(sympy.Function):
    """The largest power of two <= x (`rounding.binade`): u Binade(|z|) bounds z's rounding."""

    @classmethod
    def eval(cls, x: sympy.Expr) -> sympy.Expr | None:
        if x.is_Number:
            return sympy.Rational(binade(float(x)))
        return None


u, eta, u_f64, eta_f64, k = sympy.symbols("u eta u_f64 eta_f64 k", positive=True)

TRANSCENDENTAL_OWN = m * (u + 2 * k * u_f64) + eta + 2 * k * eta_f64
"""One transcendental evaluation on the reference target (f32, f16, bf16 results): float64
within k ulp, then one rounding."""

FORMULAS: dict[OpSpec, sympy.Expr] = {
    # add/sub: the operands' errors, then one rounding of the sum (no eta: Hauser).
    OPS["add"]: e_a + e_b + u * m,
    OPS["sub"]: e_a + e_b + u * m,
    # mul: |a^ b^ - a b| <= A eb + B ea + ea eb; one rounding.
    OPS["mul"]: a_max * e_b + b_max * e_a + u * m + eta,
    # div: ea/|b| + A eb/|b|^2 (first order); one rounding.
    OPS["div"]: e_a / b_min + a_max * e_b / b_min**2 + u * m + eta,
    # exp: sup exp' = exp(hi) times the argument's error, then the evaluation.
    OPS["exp"]: sympy.exp(hi) * e_a + TRANSCENDENTAL_OWN,
    # reduce_sum: n ea, then Higham's recursive sum with partial sums |s_j| <= j A, each
    # rounding within half an ulp of its binade.
    OPS["reduce_sum"]: n * e_a + u * sympy.Sum(Binade(j * a_max), (j, 2, n)),
    # dot (acc = result dtype): K (A eb + B ea), K product roundings, the recursive sum.
    OPS["dot"]: K * (a_max * e_b + b_max * e_a)
    + K * (u * a_max * b_max + eta)
    + u * sympy.Sum(Binade(j * a_max * b_max), (j, 2, K)),
    # exact data movement and exact 1-Lipschitz ops: the operand's error.
    OPS["neg"]: e_a,
    OPS["abs"]: e_a,
    OPS["relu"]: e_a,
    OPS["transpose"]: e_a,
    OPS["reshape"]: e_a,
    OPS["broadcast"]: e_a,
    OPS["reduce_max"]: e_a,
    OPS["max"]: sympy.Max(e_a, e_b),
}


def formula(spec: OpSpec) -> sympy.Expr | None:
    """The first-order error formula of `spec`'s rule, where one is written down."""
    return FORMULAS.get(spec)
