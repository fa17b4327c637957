"""The abstract value of a tensor in error analysis, and the arithmetic the rules share.

A tensor is abstracted as a whole, never per element (DESIGN.md, Error bounds):

- `lo, hi`: an interval holding every *exact* finite element value, the exact value being the
  program evaluated in real arithmetic (IR_SPEC.md section 5, the `real` reading);
- `clo, chi`: an interval holding every *computed* finite element value;
- `err`: a bound on |computed - exact| for every element, as an `Err`;
- `specials`: the non-finite values (`-inf`, `+inf`, `nan`) an element may take. Where an
  element is special, the exact and the computed program agree on it (a rule that cannot keep
  that promise returns an infinite bound instead).

Rounding follows the standard model with gradual underflow: the round-to-nearest-even result
of an exact z is z(1 + d) + e with |d| <= u, |e| <= eta, d * e = 0, where u = 2^-p is the unit
roundoff and eta half the smallest subnormal. Sums and differences need no eta (a subnormal
sum is exact, Hauser 1996).

An `Err` keeps the first-order part of the bound symbolic: a linear form over the symbols
u_<dtype> and eta_<dtype>, with coefficients that already hold the sizes and the declared
ranges; everything of higher order (products of errors, gamma's denominators, remainders of
Taylor expansions, discontinuity jumps) is evaluated at the actual unit roundoffs and kept as
one number, `rest`. `total` (= first order + rest) is the rigorous bound. Bound arithmetic
itself runs in float64 on nonnegative quantities; `SAFETY` covers its own rounding.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import ml_dtypes
import numpy as np
import sympy

from gdv.ir.dtypes import FLOAT8_DTYPES, DType
from gdv.ir.types import TensorType

UNIT_ROUNDOFF: dict[DType, float] = {
    DType.F64: 2.0**-53,
    DType.F32: 2.0**-24,
    DType.F16: 2.0**-11,
    DType.BF16: 2.0**-8,
}
"""u = 2^-p, p the significand precision with the hidden bit."""
for _d in FLOAT8_DTYPES:  # float8 (IR_SPEC.md section 8): only `convert` rounds to it
    UNIT_ROUNDOFF[_d] = 2.0**-_d.float8.precision

ETA: dict[DType, float] = {
    DType.F64: 2.0**-1074,  # half of it, 2^-1075, is below float64's range: round up
    DType.F32: 2.0**-150,
    DType.F16: 2.0**-25,
    DType.BF16: 2.0**-134,
}
"""Half the smallest positive subnormal (f64: the whole one): a bound on the absolute error of
rounding in the subnormal range."""
for _d in FLOAT8_DTYPES:
    ETA[_d] = 2.0 ** (_d.float8.emin - _d.float8.mantissa_bits - 1)

MAX_FINITE: dict[DType, float] = {
    DType.F64: float(np.finfo(np.float64).max),
    DType.F32: float(np.finfo(np.float32).max),
    DType.F16: float(np.finfo(np.float16).max),
    DType.BF16: float(ml_dtypes.finfo(ml_dtypes.bfloat16).max),
    **{_d: float(_d.float8.max) for _d in FLOAT8_DTYPES},
}

SAFETY = 1.0 + 2.0**-30
"""Every reported bound is multiplied by this: each rule does fewer than a few hundred float64
operations on nonnegative numbers, each off by at most 2^-53 relatively, so even 10^6 ops of
bound arithmetic stay below 2^-30 in total."""


def u_symbol(dtype: DType) -> str:
    return f"u_{dtype}"


def eta_symbol(dtype: DType) -> str:
    return f"eta_{dtype}"


SYMBOL_VALUES: dict[str, float] = {
    **{u_symbol(d): v for d, v in UNIT_ROUNDOFF.items()},
    **{eta_symbol(d): v for d, v in ETA.items()},
}
"""The value of every symbol an error bound may hold."""

Lin = Mapping[str, float]
"""A linear form: symbol name -> nonnegative coefficient."""


def lin_add(*forms: Lin) -> dict[str, float]:
    out: dict[str, float] = {}
    for f in forms:
        for k, v in f.items():
            out[k] = out.get(k, 0.0) + v
    return out


def lin_scale(form: Lin, c: float) -> dict[str, float]:
    if c == 0:
        return {}
    return {k: v * c for k, v in form.items()}


def lin_value(form: Lin) -> float:
    return math.fsum(v * SYMBOL_VALUES[k] for k, v in form.items())


def lin_max(a: Lin, b: Lin) -> dict[str, float]:
    """A form >= both (coefficients are nonnegative, so coefficient-wise max suffices)."""
    return {k: max(a.get(k, 0.0), b.get(k, 0.0)) for k in set(a) | set(b)}


@dataclass(frozen=True)
class Err:
    """A bound on an absolute error: `lin` (first order, symbolic) plus `rest` (higher order,
    numeric); `total` is their value at the actual unit roundoffs. An infinite bound carries
    the reason."""

    lin: Mapping[str, float] = field(default_factory=dict)
    total: float = 0.0
    reason: str | None = None

    @staticmethod
    def make(lin: Lin, total: float, reason: str | None = None) -> Err:
        """An error with first-order part `lin` and rigorous value `total` (raised to the
        first-order value when below it, so `rest` is never negative)."""
        lin = {k: v for k, v in lin.items() if v != 0}
        if math.isnan(total) or math.isinf(total):
            return Err.infinite(reason or "the bound is not finite")
        if any(not math.isfinite(v) for v in lin.values()):
            return Err.infinite(reason or "the bound is not finite")
        return Err(lin, max(total, lin_value(lin)), None)

    @staticmethod
    def infinite(reason: str) -> Err:
        return Err({}, math.inf, reason)

    @staticmethod
    def zero() -> Err:
        return Err({}, 0.0)

    @property
    def finite(self) -> bool:
        return math.isfinite(self.total)

    @property
    def rest(self) -> float:
        return max(0.0, self.total - lin_value(self.lin)) if self.finite else math.inf

    def __add__(self, other: Err) -> Err:
        if not self.finite or not other.finite:
            return self if not self.finite else other
        return Err.make(lin_add(self.lin, other.lin), self.total + other.total)

    def scale(self, c: float) -> Err:
        """c * self for c >= 0."""
        if not self.finite:
            return self
        return Err.make(lin_scale(self.lin, c), self.total * c)

    def max(self, other: Err) -> Err:
        if not self.finite or not other.finite:
            return self if not self.finite else other
        return Err.make(lin_max(self.lin, other.lin), max(self.total, other.total))

    def sympy(self) -> sympy.Expr:
        """The bound as an expression over the unit roundoffs; `rest` as a number. Each
        coefficient is shown to 6 significant digits, rounded up, so the expression is still
        an upper bound."""
        if not self.finite:
            return sympy.oo
        terms = [
            _decimal_up(v * SAFETY) * sympy.Symbol(k, positive=True)
            for k, v in sorted(self.lin.items())
        ]
        if self.rest > 0:
            terms.append(_decimal_up(self.rest * SAFETY))
        return sympy.Add(*terms) if terms else sympy.Integer(0)

    @property
    def value(self) -> float:
        """The rigorous bound, with the allowance for the bound arithmetic's own rounding."""
        return self.total * SAFETY


def _decimal_up(x: float, digits: int = 6) -> sympy.Float:
    """x >= 0 rounded up to `digits` significant decimal digits."""
    if x == 0:
        return sympy.Float(0)
    exponent = math.floor(math.log10(x)) - (digits - 1)
    mantissa = math.ceil(x / 10.0**exponent * (1 + 1e-15))
    return sympy.Float(f"{mantissa}e{exponent}", digits + 2)


# --- intervals --------------------------------------------------------------------------------

EMPTY = (math.inf, -math.inf)


def down(x: float) -> float:
    """A float <= x (outward rounding of interval ends computed in float64). A zero end stays
    zero: interval ends are zero only as exact zeros (a zero factor, an exact cancellation) or
    as products below 2^-1074, too small to change any sign test the rules make on them."""
    if math.isinf(x) or math.isnan(x) or x == 0:
        return x
    return x - abs(x) * 2.0**-50 - 1e-300


def up(x: float) -> float:
    """A float >= x (see `down`)."""
    if math.isinf(x) or math.isnan(x) or x == 0:
        return x
    return x + abs(x) * 2.0**-50 + 1e-300


def is_empty(lo: float, hi: float) -> bool:
    return lo > hi


def hull(*intervals: tuple[float, float]) -> tuple[float, float]:
    lo = min((i[0] for i in intervals if not is_empty(*i)), default=math.inf)
    hi = max((i[1] for i in intervals if not is_empty(*i)), default=-math.inf)
    return lo, hi


def mag(lo: float, hi: float) -> float:
    """max |x| over the interval (0 when empty)."""
    return 0.0 if is_empty(lo, hi) else max(abs(lo), abs(hi))


def mig(lo: float, hi: float) -> float:
    """min |x| over the interval."""
    if is_empty(lo, hi) or lo <= 0 <= hi:
        return 0.0
    return min(abs(lo), abs(hi))


def i_add(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    if is_empty(*a) or is_empty(*b):
        return EMPTY
    return down(a[0] + b[0]), up(a[1] + b[1])


def i_neg(a: tuple[float, float]) -> tuple[float, float]:
    return EMPTY if is_empty(*a) else (-a[1], -a[0])


def i_mul(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    if is_empty(*a) or is_empty(*b):
        return EMPTY
    ps = [x * y for x in a for y in b]
    ps = [0.0 if math.isnan(p) else p for p in ps]  # 0 * inf: the ends are finite reals
    return down(min(ps)), up(max(ps))


def i_scale(a: tuple[float, float], n: float) -> tuple[float, float]:
    """n * a for n >= 0."""
    return i_mul(a, (n, n))


def widen(a: tuple[float, float], e: float) -> tuple[float, float]:
    if is_empty(*a):
        return EMPTY
    return down(a[0] - e), up(a[1] + e)


# --- the abstract tensor ----------------------------------------------------------------------

SPECIALS = frozenset({"-inf", "+inf", "nan"})


@dataclass(frozen=True)
class TB:
    """A tensor's bound: exact and computed intervals, error, specials, facts (module doc)."""

    type: TensorType
    lo: float
    hi: float
    clo: float
    chi: float
    err: Err
    specials: frozenset[str] = frozenset()
    facts: Mapping[str, Any] = field(default_factory=dict)
    """Relational facts that intervals cannot hold, used by later rules: `max0` (axes along
    which the maximum, exact and computed, is 0), `max1` (axes along which some element is 1
    exactly and at least 1 - `max1_slack` computed), `l1` ({axis: (L, Le)}: every fiber along
    the axis has sum |x| <= L and sum |x^ - x| <= Le, an `Err`)."""

    @property
    def exact(self) -> tuple[float, float]:
        return (self.lo, self.hi)

    @property
    def computed(self) -> tuple[float, float]:
        return (self.clo, self.chi)

    @property
    def both(self) -> tuple[float, float]:
        """The hull of exact and computed values: mean-value arguments range over it."""
        return hull(self.exact, self.computed)

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    def with_(self, **changes: Any) -> TB:
        return replace(self, **changes)


def make_tb(
    type_: TensorType,
    exact: tuple[float, float],
    err: Err,
    computed: tuple[float, float] | None = None,
    specials: frozenset[str] = frozenset(),
    facts: Mapping[str, Any] | None = None,
) -> TB:
    """A bound whose computed interval is `exact` widened by the error, narrowed to `computed`
    when a rule knows better (e.g. a square is never negative)."""
    lo, hi = exact
    clo, chi = widen(exact, err.total) if err.finite else (-math.inf, math.inf)
    if is_empty(lo, hi):
        clo, chi = EMPTY
    if computed is not None and not is_empty(clo, chi):
        clo, chi = max(clo, computed[0]), min(chi, computed[1])
        # Exact values in [lo, hi] and computed ones in [clo, chi] are never further apart than
        # the two intervals' extremes (softmax's outputs: at most about 1 whatever the input).
        cap = up(max(chi - lo, hi - clo))
        if err.finite and cap < err.total:
            err = Err.make({}, cap)
    return TB(type_, lo, hi, clo, chi, err, frozenset(specials), dict(facts or {}))
