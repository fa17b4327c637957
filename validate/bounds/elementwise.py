"""Bound rules of the elementwise family (IR_SPEC.md section 4).

Notation: a, b exact operands with error bounds ea, eb; A = max|a| over the exact interval;
"both" intervals hold exact and computed values (mean-value arguments range over them).

- neg, abs, relu, max, min, select (stable condition): exact ops, 1-Lipschitz: e = max(ea, eb).
- floor: exact op, but a jump: e = 0 when ea = 0, else ea + 1.
- add, sub: e = ea + eb + u |a +- b|; no eta (Hauser: subnormal sums are exact).
- mul: e = A eb + B ea + ea eb + u |ab| + eta; a square `mul(x, x)` is known nonnegative.
- div: e = ea / |b| + A eb / (|b| |b^|) + u |a/b| + eta; infinite when b's interval holds 0;
  no u term when b is a constant power of two (only a subnormal quotient rounds). Integer div:
  exact on exact operands (else infinite: a jump), within [-max |a|, max |a|].
- sqrt: correctly rounded; e = ea / (2 sqrt(min b)) + u |sqrt a| + eta (sqrt(ea) at 0: Hoelder).
- exp, log, rsqrt, tanh, sigmoid, erf, sin, cos, pow, tan, asin, acos, atan, sinh, cosh, asinh,
  acosh, atanh: the named ulp assumption,
  |f^(x) - f(x)| <= k ulp(f(x)) <= 2k u |f(x)| + 2k eta, plus sup|f'| ea by the mean value
  theorem (sup over the hull of exact and computed arguments, so it is rigorous). Outside a
  function's domain (asin, acos of |x| > 1; acosh below 1; atanh at or beyond +-1; tan over an
  interval that may hold a pole; log, sqrt, rsqrt as below) the result may be NaN or unbounded:
  the bound is infinite, with the reason. Where sup|f'| is unbounded on the interval (asin at
  +-1, acosh at 1) with an inexact operand, the bound is the function's range width if it has
  one (asin, acos, atan), else infinite.
- cmp: exact; it may flip when an operand has an error and the operand intervals overlap.
- bitwise_and/or/xor/not, shift_left/right: exact on exact operands (an inexact integer operand
  may change any bit: infinite; i1: a flip, 1); the interval from the operands' signs and
  magnitudes (`_bitwise_range`).
- rem, mod: exact, but a jump wherever a / b crosses an integer (an inexact operand:
  infinite); |result| < max |b| with a's sign (rem) or b's (mod); a zero divisor gives a.
- convert: float->float rounds when narrowing (identity under the `real` reading); to float8
  one rounding with u = 2^-(M+1) and half the least subnormal, infinite where |x| may reach
  max (saturation or overflow); from float8 exact;
  float->int truncates both sides (a jump of 1 once there is any error); int->int may wrap.
- constant, iota: the rounding of each literal or index to the dtype, computed exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from gdv.ir.core import Op
from gdv.ir.dtypes import DType
from gdv.ir.numerics import literal_to_array
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops.elementwise import TRANSCENDENTAL, is_signed, iter_leaves
from gdv.ir.targets import target_info
from gdv.validate.bounds.model import (
    EMPTY,
    ETA,
    TB,
    UNIT_ROUNDOFF,
    Err,
    down,
    eta_symbol,
    hull,
    i_add,
    i_mul,
    i_neg,
    is_empty,
    lin_add,
    lin_scale,
    mag,
    make_tb,
    mig,
    u_symbol,
    up,
)
from gdv.validate.bounds.registry import Context, rule
from gdv.validate.bounds.rounding import (
    combine,
    exact_conversion,
    one_rounding,
    overflow_reason,
)

Interval = tuple[float, float]


def finish(
    op: Op,
    ctx: Context,
    exact: Interval,
    err: Err,
    m_pre: float,
    computed: Interval | None = None,
    specials: frozenset[str] = frozenset(),
    facts: dict | None = None,
) -> TB:
    """The result bound, or an infinite one when a value up to `m_pre` may overflow.
    An operand's infinite bound keeps its reason (the first cause)."""
    why = overflow_reason(ctx, op.type.dtype, m_pre, op.name)
    if why is not None and err.finite:
        err = Err.infinite(why)
    return make_tb(op.type, exact, err, computed, specials, facts)


def rounded(pre: Interval, u: float, eta: float) -> Interval:
    """The computed interval of fl(z) for z in `pre`, fl within relative `u` and absolute
    `eta`: fl is monotone, so fl(z) lies between fl(pre's ends), each within u |end| + eta of
    the end; and it keeps the sign, so a nonnegative z gives a nonnegative result."""
    if is_empty(*pre):
        return EMPTY
    a, b = pre
    lo, hi = down(a - u * abs(a) - eta), up(b + u * abs(b) + eta)
    if a >= 0:
        lo = max(lo, 0.0)
    if b <= 0:
        hi = min(hi, 0.0)
    return lo, hi


def int_result(op: Op, ctx: Context, exact: Interval, err: Err, specials=frozenset()) -> TB:
    """An integer result: exact unless it may wrap around, which is reported; with an error
    already present a wrap makes the bound infinite."""
    dtype = op.type.dtype
    wraps = dtype.is_int or dtype.is_small_int
    if wraps and (exact[0] < dtype.int_min or exact[1] > dtype.int_max):
        ctx.note(
            f"%{op.result} = {op.name}: {dtype} wrap-around possible (values may reach "
            f"[{exact[0]:.6g}, {exact[1]:.6g}])"
        )
        if err.total > 0:
            err = Err.infinite(f"{op.name} may wrap around {dtype} on an inexact operand")
        exact = (float(dtype.int_min), float(dtype.int_max))
    return make_tb(op.type, exact, err, specials=specials)


# --- exact unary ops --------------------------------------------------------------------------


def _swap_inf(s: frozenset[str]) -> frozenset[str]:
    swap = {"-inf": "+inf", "+inf": "-inf", "nan": "nan"}
    return frozenset(swap[x] for x in s)


@rule(OPS["neg"])
def _neg(op: Op, args: list[TB], ctx: Context) -> TB:
    x = args[0]
    return make_tb(op.type, i_neg(x.exact), x.err, i_neg(x.computed), _swap_inf(x.specials))


@rule(OPS["abs"])
def _abs(op: Op, args: list[TB], ctx: Context) -> TB:
    x = args[0]

    def absi(i: Interval) -> Interval:
        return EMPTY if is_empty(*i) else (mig(*i), mag(*i))

    specials = frozenset("+inf" if s == "-inf" else s for s in x.specials)
    return make_tb(op.type, absi(x.exact), x.err, absi(x.computed), specials)


@rule(OPS["relu"])
def _relu(op: Op, args: list[TB], ctx: Context) -> TB:
    x = args[0]

    def relu_i(i: Interval, zero: bool) -> Interval:
        r = EMPTY if is_empty(*i) else (max(i[0], 0.0), max(i[1], 0.0))
        return hull(r, (0.0, 0.0)) if zero else r

    zero = "-inf" in x.specials  # relu(-inf) = 0
    return make_tb(
        op.type, relu_i(x.exact, zero), x.err, relu_i(x.computed, zero), x.specials - {"-inf"}
    )


@rule(OPS["floor"])
def _floor(op: Op, args: list[TB], ctx: Context) -> TB:
    x = args[0]
    # floor is exact, but a jump: any error can move the result by one more.
    err = Err.zero() if x.err.total == 0 else Err.make(x.err.lin, x.err.total + 1.0)
    if not x.err.finite:
        err = x.err

    def fl(i: Interval) -> Interval:
        # an infinite end stays infinite (an unbounded operand: sqrt of a range below zero)
        return EMPTY if is_empty(*i) else tuple(x if math.isinf(x) else math.floor(x) for x in i)

    return make_tb(op.type, fl(x.exact), err, fl(x.computed), x.specials)


# --- smooth unary ops -------------------------------------------------------------------------


def _sin_range(lo: float, hi: float) -> Interval:
    """The range of sin over [lo, hi]: endpoints, plus +-1 where a peak lies inside."""
    if is_empty(lo, hi):
        return EMPTY
    if hi - lo >= 2 * math.pi:
        return (-1.0, 1.0)
    vals = [math.sin(lo), math.sin(hi)]
    slack = 1e-9  # a peak just outside counts as inside: widening is sound
    for peak, v in ((math.pi / 2, 1.0), (-math.pi / 2, -1.0)):
        k = math.ceil((lo - slack - peak) / (2 * math.pi))
        if peak + 2 * math.pi * k <= hi + slack:
            vals.append(v)
    return max(-1.0, down(min(vals))), min(1.0, up(max(vals)))


def _cos_range(lo: float, hi: float) -> Interval:
    if is_empty(lo, hi):
        return EMPTY
    return _sin_range(lo + math.pi / 2, hi + math.pi / 2) if hi - lo < 2 * math.pi else (-1, 1)


def _tan_pole(lo: float, hi: float) -> str | None:
    """Why tan is unbounded on [lo, hi] (a pole pi/2 + k pi inside, or near), or None."""
    if hi - lo >= math.pi - 1e-6:
        return f"tan over an interval wider than pi ([{lo:.3g}, {hi:.3g}]) holds a pole"
    slack = 1e-9 * max(1.0, abs(lo), abs(hi))  # a pole just outside counts as inside: sound
    k = math.ceil((lo - slack - math.pi / 2) / math.pi)
    if math.pi / 2 + math.pi * k <= hi + slack:
        return f"tan over [{lo:.3g}, {hi:.3g}] may meet a pole (pi/2 + k pi): unbounded"
    return None


def _tan_dsup(lo: float, hi: float) -> float:
    # tan' = 1 + tan^2, largest at an end on a branch without a pole
    return up(1 + max(math.tan(lo) ** 2, math.tan(hi) ** 2))


def _inside(name: str, lo: float, hi: float, a: float, b: float, open_: bool = False):
    """A domain check: None when [lo, hi] lies in [a, b] (the open interval with `open_`)."""
    ok = (a < lo and hi < b) if open_ else (a <= lo and hi <= b)
    if ok:
        return None
    where = f"({a:g}, {b:g})" if open_ else f"[{a:g}, {b:g}]"
    return f"{name} of values that may lie outside {where} ([{lo:.3g}, {hi:.3g}])"


def _one_minus_sq(m: float) -> float:
    # (1 - m)(1 + m), not 1 - m*m: no cancellation near |m| = 1 (1 - m is exact there)
    return (1 - m) * (1 + m)


def _inv_sqrt_sup(g: Callable[[float], float]):
    """sup of 1 / sqrt(g) over the interval where g(t) > 0 at its smallest; inf where g <= 0."""

    def sup(t: float) -> float:
        v = g(t)
        return up(1 / math.sqrt(v)) if v > 0 else math.inf

    return sup


def _safe(f: Callable[[float], float]) -> Callable[[float], float]:
    """f, +-inf where it overflows (sinh, cosh)."""

    def g(x: float) -> float:
        try:
            return f(x)
        except OverflowError:
            return math.copysign(math.inf, x) if f is math.sinh else math.inf

    return g


def _cosh_range(lo: float, hi: float) -> Interval:
    if is_empty(lo, hi):
        return EMPTY
    c = _safe(math.cosh)
    return max(1.0, down(c(mig(lo, hi)))), up(c(mag(lo, hi)))


_HALF_PI = (down(math.pi / 2), up(math.pi / 2))
"""An interval holding pi/2 (atan(+inf))."""


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x > -700 else 0.0


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _mono(f: Callable[[float], float], increasing: bool = True):
    def image(lo: float, hi: float) -> Interval:
        if is_empty(lo, hi):
            return EMPTY
        a, b = (f(lo), f(hi)) if increasing else (f(hi), f(lo))
        return down(a), up(b)

    return image


def _nearest_zero_sup(g: Callable[[float], float]):
    """sup of g(x) for g even and decreasing in |x|: at the point nearest 0."""
    return lambda lo, hi: up(g(mig(lo, hi)))


def _rsqrt_dsup(lo: float, hi: float) -> float:
    # lo^1.5 underflows to 0 for lo below about 1e-216 (the derivative is then unbounded).
    d = lo * math.sqrt(lo) if lo > 0 else 0.0
    return up(0.5 / d) if d > 0 else math.inf


def _sqrt_dsup(lo: float, hi: float) -> float:
    return up(0.5 / math.sqrt(lo)) if lo > 0 else math.inf


@rule(OPS["sqrt"])
def _sqrt_rule(op: Op, args: list[TB], ctx: Context) -> TB:
    return _smooth(op, args[0], ctx, "sqrt")


@rule(*(s for s in TRANSCENDENTAL.specs() if s.max_operands == 1))
def _transcendental(op: Op, args: list[TB], ctx: Context) -> TB:
    return _smooth(op, args[0], ctx, op.name)


# name -> (image, sup|f'|, domain check (both-hull -> reason or None), specials map, clip)
_SMOOTH: dict[str, tuple] = {
    "exp": (
        _mono(_exp),
        lambda lo, hi: up(_exp(hi)),
        lambda lo, hi: None,
        {"-inf": None, "+inf": "+inf", "nan": "nan"},
        (0.0, math.inf),
    ),
    "log": (
        _mono(math.log),
        lambda lo, hi: up(1 / lo),
        lambda lo, hi: None if lo > 0 else f"log of values that may be <= 0 (down to {lo:.3g})",
        {"+inf": "+inf", "nan": "nan", "-inf": "nan"},
        (-math.inf, math.inf),
    ),
    "sqrt": (
        _mono(math.sqrt),
        _sqrt_dsup,
        lambda lo, hi: None if lo >= 0 else f"sqrt of values that may be < 0 (down to {lo:.3g})",
        {"+inf": "+inf", "nan": "nan", "-inf": "nan"},
        (0.0, math.inf),
    ),
    "rsqrt": (
        _mono(lambda x: 1 / math.sqrt(x), increasing=False),
        _rsqrt_dsup,
        lambda lo, hi: (
            None
            if lo > 0
            else f"rsqrt of values that may be <= 0 (down to {lo:.3g}): unbounded near 0"
        ),
        {"+inf": "zero", "nan": "nan", "-inf": "nan"},
        (0.0, math.inf),
    ),
    "tanh": (
        _mono(math.tanh),
        _nearest_zero_sup(lambda m: 1 - math.tanh(m) ** 2),
        lambda lo, hi: None,
        {"-inf": "-one", "+inf": "one", "nan": "nan"},
        (-math.inf, math.inf),
    ),
    "sigmoid": (
        _mono(_sigmoid),
        _nearest_zero_sup(lambda m: _sigmoid(m) * (1 - _sigmoid(m))),
        lambda lo, hi: None,
        {"-inf": "zero", "+inf": "one", "nan": "nan"},
        (0.0, math.inf),
    ),
    "erf": (
        _mono(math.erf),
        _nearest_zero_sup(lambda m: 2 / math.sqrt(math.pi) * math.exp(-m * m)),
        lambda lo, hi: None,
        {"-inf": "-one", "+inf": "one", "nan": "nan"},
        (-math.inf, math.inf),
    ),
    "sin": (
        _sin_range,
        lambda lo, hi: mag(*_cos_range(lo, hi)),
        lambda lo, hi: None,
        {"-inf": "nan", "+inf": "nan", "nan": "nan"},
        (-math.inf, math.inf),
    ),
    "cos": (
        _cos_range,
        lambda lo, hi: mag(*_sin_range(lo, hi)),
        lambda lo, hi: None,
        {"-inf": "nan", "+inf": "nan", "nan": "nan"},
        (-math.inf, math.inf),
    ),
    "tan": (
        _mono(math.tan),
        _tan_dsup,
        _tan_pole,
        {"-inf": "nan", "+inf": "nan", "nan": "nan"},
        (-math.inf, math.inf),
    ),
    "asin": (
        _mono(math.asin),
        lambda lo, hi: _inv_sqrt_sup(_one_minus_sq)(mag(lo, hi)),
        lambda lo, hi: _inside("asin", lo, hi, -1.0, 1.0),
        {"-inf": "nan", "+inf": "nan", "nan": "nan"},
        (-math.inf, math.inf),
    ),
    "acos": (
        _mono(math.acos, increasing=False),
        lambda lo, hi: _inv_sqrt_sup(_one_minus_sq)(mag(lo, hi)),
        lambda lo, hi: _inside("acos", lo, hi, -1.0, 1.0),
        {"-inf": "nan", "+inf": "nan", "nan": "nan"},
        (0.0, math.inf),
    ),
    "atan": (
        _mono(math.atan),
        _nearest_zero_sup(lambda m: 1 / (1 + m * m)),
        lambda lo, hi: None,
        {"-inf": (-_HALF_PI[1], -_HALF_PI[0]), "+inf": _HALF_PI, "nan": "nan"},
        (-math.inf, math.inf),
    ),
    "sinh": (
        _mono(_safe(math.sinh)),
        lambda lo, hi: up(_safe(math.cosh)(mag(lo, hi))),
        lambda lo, hi: None,
        {"-inf": "-inf", "+inf": "+inf", "nan": "nan"},
        (-math.inf, math.inf),
    ),
    "cosh": (
        _cosh_range,
        lambda lo, hi: up(abs(_safe(math.sinh)(mag(lo, hi)))),
        lambda lo, hi: None,
        {"-inf": "+inf", "+inf": "+inf", "nan": "nan"},
        (0.0, math.inf),
    ),
    "asinh": (
        _mono(math.asinh),
        lambda lo, hi: _inv_sqrt_sup(lambda m: 1 + m * m)(mig(lo, hi)),
        lambda lo, hi: None,
        {"-inf": "-inf", "+inf": "+inf", "nan": "nan"},
        (-math.inf, math.inf),
    ),
    "acosh": (
        _mono(math.acosh),
        lambda lo, hi: _inv_sqrt_sup(lambda m: (m - 1) * (m + 1))(lo),
        lambda lo, hi: _inside("acosh", lo, hi, 1.0, math.inf),
        {"-inf": "nan", "+inf": "+inf", "nan": "nan"},
        (0.0, math.inf),
    ),
    "atanh": (
        _mono(math.atanh),
        lambda lo, hi: up(1 / _one_minus_sq(mag(lo, hi))),
        lambda lo, hi: _inside("atanh", lo, hi, -1.0, 1.0, open_=True),
        {"-inf": "nan", "+inf": "nan", "nan": "nan"},
        (-math.inf, math.inf),
    ),
}


_BOUNDED = {
    "tanh": 2.0,
    "sigmoid": 1.0,
    "erf": 2.0,
    "sin": 2.0,
    "cos": 2.0,
    "asin": 3.1416,  # pi, rounded up
    "acos": 3.1416,
    "atan": 3.1416,
}
"""Functions with bounded range: name -> the range's width."""


def transcendental_error(
    ctx: Context, name: str, dtype: DType, m_exact: float, m_pre: float
) -> tuple[tuple[dict[str, float], float], float, float]:
    """The error of one evaluation of transcendental `name` on the reference target, for
    results |f| <= m_exact (exact input) / m_pre (computed input): ((first-order form,
    rigorous value), relative part, absolute part).

    The assumption (recorded): float64 evaluation within k ulp of the exact value, of the same
    sign, so |y64 - f| <= 2k u64 |f| + 2k eta64; the reference then rounds once to the dtype
    (|fl(y64) - y64| <= u |y64| + eta), so f32, f16 and bf16 pay u + 2k u64, not 2k u. On the
    C target f32 exp, tanh, erf and sigmoid are gdv's f32 functions (`C_F32_ULPS`), which pay
    2k u with their measured k (below 1): any target's own f32 functions are in its ulp table
    (`gdv.ir.targets.TargetInfo.f32_ulps`)."""
    own = target_info(ctx.target).f32_ulps
    if ctx.fmt(dtype) is DType.F32 and name in own:
        # gdv's f32 function: |y - f| <= k ulp(f) <= 2k (u |f| + eta), measured on every input
        k = own[name]
        ctx.assume(
            f"{ctx.target}-f32-ulp:{name}",
            f"target {ctx.target}: f32 {name} returns a value within {k:g} ulp of the exact "
            "result, of the same sign (gdv's f32 function, measured on every f32 input with "
            "and without FMA)",
        )
        u, eta = ctx.u(dtype), ctx.eta(dtype)
        lin = {ctx.u_sym(dtype): 2 * k * m_exact, ctx.eta_sym(dtype): 2 * k}
        return (lin, 2 * k * (u * m_pre + eta)), 2 * k * u, 2 * k * eta
    k = ctx.ulps
    ctx.assume(
        f"transcendental-ulp:{name}",
        f"{name} returns a value within {k:g} ulp of the exact result, of the same sign "
        f"(reference target: evaluated in float64 within that, then rounded once to the dtype)",
    )
    wide = DType.F64
    u64, eta64 = UNIT_ROUNDOFF[wide], ETA[wide]
    lin64 = {u_symbol(wide): 2 * k * m_exact, eta_symbol(wide): 2 * k}
    if ctx.fmt(dtype) is wide:
        return (lin64, 2 * k * (u64 * m_pre + eta64)), 2 * k * u64, 2 * k * eta64
    u, eta = ctx.u(dtype), ctx.eta(dtype)
    m64 = m_pre * (1 + 2 * k * u64) + 2 * k * eta64
    total = 2 * k * (u64 * m_pre + eta64) + u * m64 + eta
    lin = lin_add(lin64, {ctx.u_sym(dtype): m_exact, ctx.eta_sym(dtype): 1.0})
    rel = u + 2 * k * u64 * (1 + u)
    return (lin, total), rel, eta + 2 * k * eta64 * (1 + u)


def _smooth(op: Op, x: TB, ctx: Context, name: str) -> TB:
    image, dsup, domain, special_map, clip = _SMOOTH[name]
    dtype = op.type.dtype
    both = x.both
    if not is_empty(*both) and x.err.finite:
        why = domain(*both)
        if why is not None:
            return make_tb(op.type, (-math.inf, math.inf), Err.infinite(f"{name}: {why}"))
    if not x.err.finite:
        return make_tb(op.type, (-math.inf, math.inf), x.err)
    exact = image(*x.exact)
    pre = image(*x.computed)
    specials: set[str] = set()
    extra: list[Interval] = []
    for s in x.specials:
        mapped = special_map[s]
        if mapped in ("+inf", "-inf", "nan"):
            specials.add(mapped)
        elif isinstance(mapped, tuple):  # a finite limit known only to an interval (atan)
            extra.append(mapped)
        elif mapped is not None or s == "-inf":
            value = {None: 0.0, "zero": 0.0, "one": 1.0, "-one": -1.0}[mapped]
            extra.append((value, value))
    exact = hull(exact, *extra)
    pre = hull(pre, *extra)
    # Propagated error: sup |f'| over the hull of exact and computed arguments.
    if x.err.total == 0:
        prop = ({}, 0.0)
    elif name == "sqrt" and both[0] <= 0:
        prop = ({}, math.sqrt(x.err.total))  # sqrt is 1/2-Hoelder: |sqrt a - sqrt b| <= sqrt|a-b|
    else:
        prop = (lin_scale(x.err.lin, dsup(*x.exact)), dsup(*both) * x.err.total)
        if name in _BOUNDED:
            # A bounded function never moves by more than its range's width.
            width = _BOUNDED[name]
            if prop[1] > width:
                prop = ({}, width)
        if not math.isfinite(prop[1]):  # sup |f'| unbounded: asin at +-1, acosh at 1, ...
            return make_tb(
                op.type,
                (-math.inf, math.inf),
                Err.infinite(f"{name}: unbounded derivative on an inexact operand near {both}"),
            )
    # The op's own error.
    if name == "sqrt":
        own = one_rounding(ctx, dtype, mag(*exact), mag(*pre))
    else:
        own, rel, absolute = transcendental_error(ctx, name, dtype, mag(*exact), mag(*pre))
    err = combine(prop, own)
    if name == "sqrt":
        rel, absolute = ctx.u(dtype), ctx.eta(dtype)
    computed = rounded(pre, rel, absolute)
    computed = (max(computed[0], clip[0]), min(computed[1], clip[1]))
    facts = {}
    if name == "exp" and "max0" in x.facts:
        # exp(0) = 1 where the maximum sits; computed within the ulp assumption.
        facts = {"max1": x.facts["max0"], "max1_slack": own[1]}
    return finish(op, ctx, exact, err, mag(*computed), computed, frozenset(specials), facts)


# --- binary ops ---------------------------------------------------------------------------------


def _specials_add(a: frozenset[str], b: frozenset[str]) -> frozenset[str]:
    s = set(a | b)
    if ("+inf" in a and "-inf" in b) or ("-inf" in a and "+inf" in b):
        s.add("nan")
    return frozenset(s)


def _max0_pattern(op: Op, ctx: Context) -> tuple[int, ...] | None:
    """The axes when `op` is sub(x, broadcast(reduce_max(x))) along them (softmax's shift)."""
    b = ctx.producers.get(op.operands[1])
    if b is None or b.name != "broadcast":
        return None
    m = ctx.producers.get(b.operands[0])
    if m is None or m.name != "reduce_max" or m.operands[0] != op.operands[0]:
        return None
    axes = list(m.attrs["axes"])
    kept = [d for d in range(op.type.rank) if d not in axes]
    if list(b.attrs["dims"]) != kept:
        return None
    return tuple(axes)


@rule(OPS["add"], OPS["sub"])
def _add_sub(op: Op, args: list[TB], ctx: Context) -> TB:
    a, b = args
    sub = op.name == "sub"
    bn_exact = i_neg(b.exact) if sub else b.exact
    bn_comp = i_neg(b.computed) if sub else b.computed
    bs = _swap_inf(b.specials) if sub else b.specials
    specials = _specials_add(a.specials, bs)
    exact = i_add(a.exact, bn_exact)
    pre = i_add(a.computed, bn_comp)
    prop = a.err + b.err
    if not op.type.dtype.is_float:
        return int_result(op, ctx, exact, prop, specials)
    facts = {}
    computed = None
    if sub and (axes := _max0_pattern(op, ctx)) is not None:
        # x - max(x): the computed max is one of the computed x (max is exact), so both sides
        # are <= 0, and 0 where the maximum sits.
        exact = (exact[0], min(exact[1], 0.0))
        pre = (pre[0], min(pre[1], 0.0))
        computed = (-math.inf, 0.0)
        facts = {"max0": axes}
        # Where x is special the row's max is too: inf - inf is NaN, finite - (+inf) is -inf;
        # x finite with m = -inf cannot happen (m >= x).
        specials = frozenset(
            ({"nan"} if a.specials else set()) | ({"-inf"} if a.specials - {"nan"} else set())
        )
    own = one_rounding(ctx, op.type.dtype, mag(*exact), mag(*pre), eta=False)
    err = prop + combine(own) if prop.finite else prop
    r = rounded(pre, ctx.u(op.type.dtype), 0.0)
    computed = r if computed is None else (r[0], min(r[1], computed[1]))
    return finish(op, ctx, exact, err, mag(*pre), computed, specials, facts)


def _square(i: Interval) -> Interval:
    if is_empty(*i):
        return EMPTY
    return down(mig(*i) * mig(*i)), up(mag(*i) * mag(*i))


def _mul_specials(op: Op, a: TB, b: TB) -> tuple[frozenset[str], str | None]:
    """The specials of a product, or a reason the two programs may disagree on them."""
    out: set[str] = set()
    for x, y in ((a, b), (b, a)):
        if "nan" in x.specials:
            out.add("nan")
        infs = x.specials & {"-inf", "+inf"}
        if infs:
            lo, hi = y.both
            if lo <= 0 <= hi:
                return frozenset(), "an infinite factor times a value of unknown sign or zero"
            out |= {"-inf", "+inf"}
    return frozenset(out), None


@rule(OPS["mul"])
def _mul(op: Op, args: list[TB], ctx: Context) -> TB:
    a, b = args
    specials, why = _mul_specials(op, a, b)
    if why is not None:
        return make_tb(op.type, (-math.inf, math.inf), Err.infinite(f"mul: {why}"))
    square = op.operands[0] == op.operands[1]
    if square:
        exact, pre = _square(a.exact), _square(a.computed)
    else:
        exact, pre = i_mul(a.exact, b.exact), i_mul(a.computed, b.computed)
    A, B = mag(*a.exact), mag(*b.exact)
    if a.err.finite and b.err.finite:
        # |a^ b^ - a b| <= A eb + B ea + ea eb
        prop = Err.make(
            lin_add(lin_scale(b.err.lin, A), lin_scale(a.err.lin, B)),
            A * b.err.total + B * a.err.total + a.err.total * b.err.total,
        )
    else:
        prop = a.err if not a.err.finite else b.err
    if not op.type.dtype.is_float:
        return int_result(op, ctx, exact, prop, specials)
    own = one_rounding(ctx, op.type.dtype, mag(*exact), mag(*pre))
    err = prop + combine(own) if prop.finite else prop
    u, eta = ctx.u(op.type.dtype), ctx.eta(op.type.dtype)
    return finish(op, ctx, exact, err, mag(*pre), rounded(pre, u, eta), specials)


def _power_of_two(op: Op, b: TB, ctx: Context) -> bool:
    """The divisor is a float constant whose every element is a power of two (of either sign),
    stored exactly (no error)."""
    producer = ctx.producers.get(op.operands[1])
    if not op.type.dtype.is_float or producer is None or producer.name != "constant":
        return False
    if b.err.total != 0 or b.specials:
        return False
    for leaf in iter_leaves(producer.attrs["value"]):
        if isinstance(leaf, bool) or not math.isfinite(leaf) or leaf == 0:
            return False
        if math.frexp(abs(float(leaf)))[0] != 0.5 or float(leaf) != leaf:
            return False
    return True


@rule(OPS["div"])
def _div(op: Op, args: list[TB], ctx: Context) -> TB:
    a, b = args
    if op.type.dtype.is_int:
        return _int_div(op, a, b)
    if (a.specials | b.specials) - {"nan"}:
        return make_tb(
            op.type,
            (-math.inf, math.inf),
            Err.infinite("div with infinite operand values is not analysed"),
        )
    lo, hi = b.both
    if not is_empty(lo, hi) and lo <= 0 <= hi:
        return make_tb(
            op.type,
            (-math.inf, math.inf),
            Err.infinite(f"div by an interval that may hold 0 ([{lo:.3g}, {hi:.3g}])"),
        )
    if not a.err.finite or not b.err.finite:
        return make_tb(op.type, (-math.inf, math.inf), a.err if not a.err.finite else b.err)

    def recip(i: Interval) -> Interval:
        return EMPTY if is_empty(*i) else (down(1 / i[1]), up(1 / i[0]))

    exact = i_mul(a.exact, recip(b.exact))
    pre = i_mul(a.computed, recip(b.computed))
    A = mag(*a.exact)
    mb, mb_both = mig(*b.exact), mig(*b.both)
    # |a^/b^ - a/b| <= ea/|b^| + |a| |b - b^| / (|b| |b^|)
    prop = Err.make(
        lin_add(lin_scale(a.err.lin, 1 / mb), lin_scale(b.err.lin, A / (mb * mb))),
        a.err.total / mb_both + A * b.err.total / (mb * mb_both),
    )
    own = one_rounding(ctx, op.type.dtype, mag(*exact), mag(*pre))
    if _power_of_two(op, b, ctx):
        # a / 2^k is a's significand with another exponent: exact unless it lands among the
        # subnormals, where it rounds by at most eta.
        own = ({ctx.eta_sym(op.type.dtype): 1.0}, ctx.eta(op.type.dtype))
    specials = frozenset({"nan"}) & (a.specials | b.specials)
    u, eta = ctx.u(op.type.dtype), ctx.eta(op.type.dtype)
    return finish(op, ctx, exact, prop + combine(own), mag(*pre), rounded(pre, u, eta), specials)


@rule(OPS["max"], OPS["min"])
def _max_min(op: Op, args: list[TB], ctx: Context) -> TB:
    a, b = args
    f = max if op.name == "max" else min

    def ext(x: Interval, y: Interval) -> Interval:
        if is_empty(*x) or is_empty(*y):
            return hull(x, y)  # where one side is special (e.g. -inf), the other shows through
        return f(x[0], y[0]), f(x[1], y[1])

    # Where one side is the neutral infinity (-inf for max, +inf for min), the other shows
    # through unchanged.
    neutral = "-inf" if op.name == "max" else "+inf"
    exact, computed = ext(a.exact, b.exact), ext(a.computed, b.computed)
    for x, y in ((a, b), (b, a)):
        if neutral in x.specials:
            exact, computed = hull(exact, y.exact), hull(computed, y.computed)
    # max and min are exact and 1-Lipschitz in each argument.
    return make_tb(op.type, exact, a.err.max(b.err), computed, a.specials | b.specials)


@rule(OPS["pow"])
def _pow(op: Op, args: list[TB], ctx: Context) -> TB:
    a, b = args
    if a.specials or b.specials:
        return make_tb(
            op.type,
            (-math.inf, math.inf),
            Err.infinite("pow with special operand values is not analysed"),
        )
    alo, ahi = a.both
    if not a.err.finite or not b.err.finite:
        return make_tb(op.type, (-math.inf, math.inf), a.err if not a.err.finite else b.err)
    if alo <= 0:
        return make_tb(
            op.type,
            (-math.inf, math.inf),
            Err.infinite(f"pow with a base that may be <= 0 (down to {alo:.3g})"),
        )

    def image(ai: Interval, bi: Interval) -> Interval:
        e = i_mul((math.log(ai[0]), math.log(ai[1])), bi)
        return down(_exp(e[0])), up(_exp(e[1]))

    exact, pre = image(a.exact, b.exact), image(a.computed, b.computed)

    def partials(ai: Interval, bi: Interval) -> tuple[float, float]:
        log_a = (down(math.log(ai[0])), up(math.log(ai[1])))
        # d/da a^b = b a^(b-1);  d/db a^b = a^b ln a
        da = mag(*bi) * _exp(i_mul((bi[0] - 1, bi[1] - 1), log_a)[1])
        db = _exp(i_mul(bi, log_a)[1]) * mag(*log_a)
        return up(da), up(db)

    da, db = partials(a.exact, b.exact)
    da_b, db_b = partials(a.both, b.both)
    prop = Err.make(
        lin_add(lin_scale(a.err.lin, da), lin_scale(b.err.lin, db)),
        da_b * a.err.total + db_b * b.err.total,
    )
    own, _, _ = transcendental_error(ctx, "pow", op.type.dtype, mag(*exact), mag(*pre))
    return finish(op, ctx, exact, prop + combine(own), up(mag(*pre) + own[1]), (0.0, math.inf))


# --- comparisons and selection ----------------------------------------------------------------


def _cmp_constant(direction: str, a: Interval, b: Interval) -> bool | None:
    """The comparison's value when it is the same for every a in `a`, b in `b`."""
    if is_empty(*a) or is_empty(*b):
        return None
    table = {
        "lt": (a[1] < b[0], a[0] >= b[1]),
        "le": (a[1] <= b[0], a[0] > b[1]),
        "gt": (a[0] > b[1], a[1] <= b[0]),
        "ge": (a[0] >= b[1], a[1] < b[0]),
        "eq": (False, a[1] < b[0] or b[1] < a[0]),
        "ne": (a[1] < b[0] or b[1] < a[0], False),
    }
    always, never = table[direction]
    return True if always else (False if never else None)


@rule(OPS["cmp"])
def _cmp(op: Op, args: list[TB], ctx: Context) -> TB:
    a, b = args
    if not a.err.finite or not b.err.finite:
        return make_tb(op.type, (0.0, 1.0), Err.make({}, 1.0))
    const = _cmp_constant(op.attrs["dir"], a.both, b.both)
    exact_const = _cmp_constant(op.attrs["dir"], a.exact, b.exact)
    stable = const is not None or (a.err.total == 0 and b.err.total == 0)
    err = Err.zero() if stable else Err.make({}, 1.0)
    if not stable:
        ctx.note(
            f"%{op.result} = cmp: may differ from the exact comparison (operands within "
            f"rounding error of each other)"
        )
    if exact_const is not None and not (a.specials or b.specials):
        v = float(exact_const)
        return make_tb(op.type, (v, v), err, (0.0, 1.0))
    return make_tb(op.type, (0.0, 1.0), err, (0.0, 1.0))


@rule(OPS["select"])
def _select(op: Op, args: list[TB], ctx: Context) -> TB:
    c, a, b = args
    specials = a.specials | b.specials
    if c.lo == c.hi == 1.0 and c.err.total == 0:
        return a.with_(facts={})
    if c.lo == c.hi == 0.0 and c.err.total == 0:
        return b.with_(facts={})
    exact = hull(a.exact, b.exact)
    err = a.err.max(b.err)
    if c.err.total > 0:
        # A flipped condition picks the other operand: |a^ - b| <= ea + |a - b|.
        if specials:
            err = Err.infinite("select on a condition that may flip, between special values")
        else:
            span = exact[1] - exact[0] if not is_empty(*exact) else 0.0
            err = Err.make(err.lin, err.total + up(span))
    return make_tb(op.type, exact, err, hull(a.computed, b.computed), specials)


# --- bitwise ops and shifts ---------------------------------------------------------------------

BITWISE_OPS = (
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_not",
    "shift_left",
    "shift_right",
)


def _bitwise_range(name: str, dtype: DType, xs: list[Interval]) -> Interval:
    """An interval holding `name` of any integers in the intervals `xs` (exact: the ops are)."""
    full = (float(dtype.int_min), float(dtype.int_max))
    if any(is_empty(*x) for x in xs):
        return EMPTY
    lo = [max(int(math.ceil(x[0])), dtype.int_min) for x in xs]
    hi = [min(int(math.floor(x[1])), dtype.int_max) for x in xs]
    if all(a == b and abs(a) <= 2**53 for a, b in zip(lo, hi, strict=True)):
        # constants (ends exact in float64, so one integer each): the value itself
        from gdv.backends.reference import apply

        args = [np.array([v], dtype=dtype.np) for v in lo]
        v = float(apply(name, args)[0])
        return v, v
    if dtype.is_bool:
        return 0.0, 1.0
    if name == "bitwise_not":  # ~x = -x - 1 (signed), max - x (unsigned): decreasing
        top = -1 if is_signed(dtype) else dtype.int_max
        return float(top - hi[0]), float(top - lo[0])
    if name == "bitwise_and":
        # the result's bits are a subset of a nonnegative operand's: within [0, its max]
        nonneg = [h for a, h in zip(lo, hi, strict=True) if a >= 0]
        return (0.0, float(min(nonneg))) if nonneg else full
    if name in ("bitwise_or", "bitwise_xor"):
        if min(lo) >= 0:  # no bit above the larger operand's top bit
            return 0.0, float((1 << max(hi).bit_length()) - 1)
        return full
    if name == "shift_right":  # toward 0 for a >= 0, toward -1 for a < 0
        return float(min(lo[0], 0)), float(max(hi[0], 0))
    return full  # shift_left: any bits may reach the top


@rule(*(OPS[n] for n in BITWISE_OPS))
def _bitwise(op: Op, args: list[TB], ctx: Context) -> TB:
    """Exact on exact operands; one inexact operand may change any bit (i1: flip)."""
    dtype = op.type.dtype
    err = Err.zero()
    if any(a.err.total > 0 or not a.err.finite for a in args):
        err = (
            Err.make({}, 1.0)
            if dtype.is_bool
            else Err.infinite(f"{op.name} of an inexact integer operand: any bit may differ")
        )
    return make_tb(op.type, _bitwise_range(op.name, dtype, [a.exact for a in args]), err)


def _int_div(op: Op, a: TB, b: TB) -> TB:
    """Integer div: exact on exact operands, a jump wherever a / b crosses an integer (an
    inexact operand: infinite); |a / b| <= |a| truncated, a zero divisor gives 0 and INT_MIN
    by -1 gives INT_MIN, all within [-max |a|, max |a|]."""
    if any(x.err.total > 0 or not x.err.finite for x in (a, b)):
        why = "div of an inexact integer operand: a jump wherever a / b crosses an integer"
        return make_tb(op.type, (-math.inf, math.inf), Err.infinite(why))
    if is_empty(*a.exact) or is_empty(*b.exact):
        return make_tb(op.type, EMPTY, Err.zero())
    m = mag(*a.exact)
    lo = -m if a.exact[0] < 0 or b.exact[0] < 0 else 0.0
    hi = m if a.exact[1] > 0 or b.exact[0] < 0 and a.exact[0] < 0 else 0.0
    return make_tb(op.type, (lo, hi), Err.zero())


# --- rem, mod ------------------------------------------------------------------------------------


@rule(OPS["rem"], OPS["mod"])
def _remainder(op: Op, args: list[TB], ctx: Context) -> TB:
    """Exact (a float rem never rounds), but a jump wherever a / b crosses an integer: an
    inexact operand gives an infinite bound. |result| < max |b|, with a's sign (rem) or b's
    (mod); a divisor interval holding 0 may give a itself (integers) or NaN (floats)."""
    a, b = args
    dtype = op.type.dtype
    if any(x.err.total > 0 or not x.err.finite for x in args):
        why = f"{op.name} of an inexact operand: a jump wherever a / b crosses an integer"
        return make_tb(op.type, (-math.inf, math.inf), Err.infinite(why))
    if is_empty(*a.exact) or is_empty(*b.exact):
        return make_tb(op.type, EMPTY, Err.zero())
    lo_b, hi_b = b.exact
    zero_divisor = lo_b <= 0 <= hi_b
    if dtype.is_float and (a.specials or b.specials or zero_divisor):
        why = f"{op.name} with a divisor that may be 0 or special operand values is not analysed"
        return make_tb(op.type, (-math.inf, math.inf), Err.infinite(why))
    m = mag(lo_b, hi_b)  # |result| < |b| <= m (ints: <= m - 1)
    if dtype.is_int:
        m = max(m - 1, 0.0)
    sign = a.exact if op.name == "rem" else b.exact  # the result's sign is this operand's
    lo = max(-m, a.exact[0]) if op.name == "rem" else -m
    hi = min(m, a.exact[1]) if op.name == "rem" else m
    lo = 0.0 if sign[0] >= 0 else min(lo, 0.0)
    hi = 0.0 if sign[1] <= 0 else max(hi, 0.0)
    exact = (lo, hi)
    if zero_divisor and dtype.is_int:
        exact = hull(exact, a.exact)  # x rem 0 = x mod 0 = x
    return make_tb(op.type, exact, Err.zero())


# --- convert -----------------------------------------------------------------------------------


@rule(OPS["convert"])
def _convert(op: Op, args: list[TB], ctx: Context) -> TB:
    x = args[0]
    src, dst = x.dtype, op.type.dtype
    if dst.is_bool:
        # x != 0: flips only when an error can cross 0; NaN != 0 is true on both sides.
        lo, hi = x.both
        flip = x.err.total > 0 and lo <= 0 <= hi
        err = Err.make({}, 1.0) if flip else Err.zero()
        if not is_empty(*x.exact) and (x.lo > 0 or x.hi < 0) and not x.specials:
            return make_tb(op.type, (1.0, 1.0), err)
        if x.lo == x.hi == 0 and not x.specials:
            return make_tb(op.type, (0.0, 0.0), err)
        return make_tb(op.type, (0.0, 1.0), err)
    if src.is_float8 and dst.is_float:  # exact: every float8 value is one of every float
        return make_tb(op.type, x.exact, x.err, x.computed, x.specials)
    # to float8 (IR_SPEC.md section 8; beyond max: infinite) or between floats: one rounding
    if dst.is_float8 or (src.is_float and dst.is_float):
        exact = not dst.is_float8 and exact_conversion(ctx, src, dst)
        if exact or not x.err.finite:
            return make_tb(op.type, x.exact, x.err, x.computed, x.specials)
        own = one_rounding(ctx, dst, mag(*x.exact), mag(*x.computed))
        return finish(
            op,
            ctx,
            x.exact,
            x.err + combine(own),
            mag(*x.computed),
            rounded(x.computed, ctx.u(dst), ctx.eta(dst)),
            x.specials,
        )
    if src.is_float or src.is_float8:  # float -> int: truncate, saturate, NaN -> 0, both sides

        def trunc(i: Interval) -> Interval:
            if is_empty(*i):
                return EMPTY
            return (
                max(float(dst.int_min), math.trunc(max(i[0], -1e300))),
                min(float(dst.int_max), math.trunc(min(i[1], 1e300))),
            )

        exact = trunc(x.exact)
        if x.specials:
            exact = hull(exact, (float(dst.int_min), float(dst.int_max)))
        err = Err.zero() if x.err.total == 0 else Err.make(x.err.lin, x.err.total + 1.0)
        if not x.err.finite:
            err = x.err
        return make_tb(op.type, exact, err)
    if dst.is_float:  # int (or i1) -> float: exact up to 2^p, then rounds
        p = ctx.fmt(dst).significand_bits
        m = mag(*x.exact)
        m_c = mag(*x.computed)
        if m_c <= 2.0**p:
            return make_tb(op.type, x.exact, x.err)
        own = one_rounding(ctx, dst, m, m_c, eta=False)
        return finish(op, ctx, x.exact, x.err + combine(own), m_c)
    return int_result(op, ctx, x.exact, x.err)


# --- generators --------------------------------------------------------------------------------


@rule(OPS["constant"])
def _constant(op: Op, args: list[TB], ctx: Context) -> TB:
    dtype = op.type.dtype
    lo, hi = math.inf, -math.inf
    specials: set[str] = set()
    worst = Fraction(0)
    worst_mag = 0.0
    seen: set = set()
    for leaf in iter_leaves(op.attrs["value"]):
        key = (type(leaf), leaf)
        if key in seen:
            continue
        seen.add(key)
        if isinstance(leaf, float) and not math.isfinite(leaf):
            specials.add("nan" if math.isnan(leaf) else ("+inf" if leaf > 0 else "-inf"))
            continue
        exact = Fraction(leaf) if not isinstance(leaf, bool) else Fraction(int(leaf))
        lo, hi = min(lo, down(float(exact))), max(hi, up(float(exact)))
        if dtype.is_float:
            stored = literal_to_array(leaf, ctx.fmt(dtype))
            v = float(np.asarray(stored, dtype=np.float64))
            if not math.isfinite(v):  # the exact literal is finite, the stored one is not
                return make_tb(
                    op.type,
                    (-math.inf, math.inf),
                    Err.infinite(f"constant: a literal overflows {ctx.fmt(dtype)} to infinity"),
                )
            d = abs(Fraction(v) - exact)
            if d > worst:
                worst, worst_mag = d, abs(float(exact))
    if not dtype.is_float or worst == 0:
        return make_tb(op.type, (lo, hi), Err.zero(), specials=frozenset(specials))
    # The literal's rounding, exactly; written as c * u so its first order shows.
    err_value = up(float(worst))
    u = ctx.u(dtype)
    err = (
        Err.make({ctx.u_sym(dtype): err_value / u}, err_value)
        if worst_mag
        else Err.make({}, err_value)
    )
    return make_tb(op.type, (lo, hi), err, specials=frozenset(specials))


@rule(OPS["iota"])
def _iota(op: Op, args: list[TB], ctx: Context) -> TB:
    n = op.type.shape[op.attrs["axis"]]
    top = float(max(n - 1, 0))
    exact = (0.0, top) if n > 0 else EMPTY
    dtype = op.type.dtype
    if dtype.is_float:
        if top <= 2.0 ** ctx.fmt(dtype).significand_bits:
            return make_tb(op.type, exact, Err.zero())
        own = one_rounding(ctx, dtype, top, top, eta=False)
        return finish(op, ctx, exact, combine(own), top)
    return int_result(op, ctx, exact, Err.zero())
