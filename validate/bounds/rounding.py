"""Rounding-error pieces shared by the family rules: one rounding, sequential sums, overflow."""

from __future__ import annotations

import math

from gdv.ir.dtypes import DType
from gdv.validate.bounds.model import MAX_FINITE, Err, Lin, lin_add
from gdv.validate.bounds.registry import Context

EXACT_WIDENING = frozenset(
    {
        (DType.F16, DType.F32),
        (DType.F16, DType.F64),
        (DType.BF16, DType.F32),
        (DType.BF16, DType.F64),
        (DType.F32, DType.F64),
    }
)
"""(from, to) float pairs where every value of `from` is a value of `to`: converting is exact."""


def exact_conversion(ctx: Context, src: DType, dst: DType) -> bool:
    s, d = ctx.fmt(src), ctx.fmt(dst)
    return s == d or (s, d) in EXACT_WIDENING


def one_rounding(
    ctx: Context, dtype: DType, m_exact: float, m_computed: float, *, eta: bool = True
) -> tuple[dict[str, float], float]:
    """|fl(z) - z| <= u |z| + eta for one rounding to `dtype` of a z with |z| <= m_computed
    whose exact counterpart has |z| <= m_exact: (first-order form, rigorous value).
    `eta=False` for sums and differences, exact when subnormal."""
    lin: dict[str, float] = {ctx.u_sym(dtype): m_exact}
    total = ctx.u(dtype) * m_computed
    if eta:
        lin[ctx.eta_sym(dtype)] = 1.0
        total += ctx.eta(dtype)
    return lin, total


def overflow_reason(ctx: Context, dtype: DType, m_computed: float, what: str) -> str | None:
    """Why a rounded result of magnitude up to `m_computed` may overflow to infinity, or None."""
    if not (dtype.is_float or dtype.is_float8):
        return None
    limit = MAX_FINITE[ctx.fmt(dtype)]  # float8: beyond max it saturates or overflows
    if not m_computed < limit:
        return (
            f"{what} may overflow {ctx.fmt(dtype)}: values up to {m_computed:.3g} exceed "
            f"{limit:.3g}"
        )
    return None


def gamma(n: float, u: float) -> float:
    """Higham's gamma_n = n u / (1 - n u); infinite when n u >= 1."""
    return math.inf if n * u >= 1 else n * u / (1 - n * u)


def _pairs(n: int, r: float) -> float:
    """sum_{k=2..n} min(k, r): the partial sums' magnitudes in units of the largest term, when
    the terms' absolute values add up to at most r of those units."""
    if r >= n:
        return n * (n + 1) / 2 - 1
    m = max(1, math.floor(r))
    return (m * (m + 1) / 2 - 1) + (n - m) * r


def binade(x: float) -> float:
    """The largest power of two <= x (0 for x <= 0, x itself when infinite): a z with
    |z| <= x rounds with error at most u binade(x) (half an ulp of z's binade, Higham 2002
    section 2.1: |fl(z) - z| <= u 2^e for 2^e <= |z| < 2^(e+1)), up to twice better than u x."""
    if not x > 0 or math.isinf(x):
        return max(x, 0.0)
    return math.ldexp(1.0, math.frexp(x)[1] - 1)


BINADE_TERMS = 2**16
"""Sums up to this many terms get the per-binade bound term by term (a loop at bound time)."""


def _binade_pairs(n: int, p: float, s: float, grow: float, squares: bool = False) -> float:
    """sum_{k=2..n} binade(min(k p, s) exp((k-2) grow)) (of the squares with `squares`), each
    argument rounded up first (binade is monotone, so an upper bound of the argument keeps the
    result an upper bound)."""
    total = 0.0
    for k in range(2, n + 1):
        z = binade(min(k * p, s) * math.exp((k - 2) * grow) * (1 + 1e-12))
        total += z * z if squares else z
    # Powers of two within about 2^20 of each other (Z_n / Z_2 <= n e^(n u) / 2): every
    # partial sum is exact in float64.
    return total


def sequential_sum(
    ctx: Context,
    n: int,
    dtype: DType,
    p_exact: float,
    p_computed: float,
    elements: int,
    s_exact: float = math.inf,
    s_computed: float = math.inf,
) -> tuple[dict[str, float], float]:
    """The rounding error of `acc = t[0]; acc = acc + t[k]` over n terms in `dtype`, each term
    |t| <= p_computed (its exact counterpart <= p_exact): (first-order form, rigorous value).

    Rigorous: the error is sum_{k=2..n} s_k d_k / (1 + d_k) for the computed partial sums s_k,
    |s_k| <= k P (1 + u)^(k-1), so it is at most u/(1-u) (1 + gamma_{n-1}) P (n(n+1)/2 - 1):
    half of the textbook gamma_{n-1} n P. When the terms' absolute values are known to add up
    to at most S (`s_exact`, `s_computed`: an l1 fact), |s_k| <= min(k P, S) instead.
    Sharper, for n <= BINADE_TERMS: the error is also sum_k z_k d_k for the sums before rounding,
    |z_k| <= Z_k = min(k P, S) (1+u)^(k-2), and each rounding is at most u binade(Z_k) (see
    `binade`); the smaller of the two is used.
    No eta: a subnormal sum is exact.
    Probabilistic companion (ctx.lam set), in Higham and Mary's (2019) model: each rounding's
    delta is mean-zero given the earlier ones, |delta| <= u. The error is exactly
    sum_{k=2..n} z_k delta_k, z_k = s^_{k-1} + t_k the k-th sum before rounding, a martingale
    whose k-th step is at most u Z_k in size, Z_k = min(k P, S)(1 + gamma_{n-1}) bounding |z_k|.
    Azuma-Hoeffding: |error| <= lambda u sqrt(sum_k Z_k^2) (binade(Z_k) in place of Z_k for
    n <= BINADE_TERMS: each step is also within u binade(Z_k)), failing with probability at most
    2 exp(-lambda^2 / 2) per sum (Higham and Mary's Theorem 3.1 argument, lambda sqrt(n-1) u
    n P with the same failure per term, is larger by about sqrt 3). The smaller of it and the
    rigorous bound is used; each sum that uses it is one event for the failure probability."""
    if n <= 1:
        return {}, 0.0
    u = ctx.u(dtype)
    g = gamma(n - 1, u)
    if math.isinf(g) or not (math.isfinite(p_exact) and math.isfinite(p_computed)):
        return {}, math.inf  # (a term without a finite bound: inf / inf would be NaN below)
    s_exact, s_computed = min(s_exact, n * p_exact), min(s_computed, n * p_computed)
    lin_pairs = _pairs(n, s_exact / p_exact) if p_exact > 0 else 0.0
    pairs = _pairs(n, s_computed / p_computed) if p_computed > 0 else 0.0
    lin = {ctx.u_sym(dtype): p_exact * lin_pairs}
    total = u / (1 - u) * (1 + g) * p_computed * pairs
    if n <= BINADE_TERMS:
        fine = u * _binade_pairs(n, p_computed, s_computed, u)
        if fine < total:
            lin = {ctx.u_sym(dtype): _binade_pairs(n, p_exact, s_exact, 0.0)}
            total = fine
    if ctx.lam is not None:
        lam = ctx.lam
        lin_sq = _squares(n, s_exact / p_exact) if p_exact > 0 else 0.0
        sq = _squares(n, s_computed / p_computed, u) if p_computed > 0 else 0.0
        total_prob = lam * u * p_computed * math.sqrt(sq)
        lin_prob = lam * p_exact * math.sqrt(lin_sq)
        if n <= BINADE_TERMS:  # each step within u binade(Z_k), as in the rigorous bound
            fine = lam * u * math.sqrt(_binade_pairs(n, p_computed, s_computed, u, squares=True))
            if fine < total_prob:
                total_prob = fine
                lin_prob = lam * math.sqrt(_binade_pairs(n, p_exact, s_exact, 0.0, squares=True))
        if total_prob < total:
            ctx.prob_events += elements
            return {ctx.u_sym(dtype): lin_prob}, total_prob
    return lin, total


def _squares(n: int, r: float, u: float = 0.0) -> float:
    """An upper bound on sum_{k=2..n} min(k, r)^2 (1+u)^(2(k-2)): the squared bounds on the
    sums before rounding, |z_k| <= min(k, r) P (1+u)^(k-2) (see `_pairs`)."""
    if n > 2**16:  # every growth factor at its largest
        if r >= n:
            plain = n * (n + 1) * (2 * n + 1) / 6 - 1
        else:
            m = max(1, math.floor(r))
            plain = (m * (m + 1) * (2 * m + 1) / 6 - 1) + (n - m) * r * r
        return plain * math.exp(2 * (n - 2) * u) * (1 + 1e-12)
    # exp(2 (k-2) u) >= (1+u)^(2(k-2)); fsum and the margin cover the float64 arithmetic.
    terms = (min(k, r) ** 2 * math.exp(2 * (k - 2) * u) for k in range(2, n + 1))
    return math.fsum(terms) * (1 + 1e-12)


def combine(*parts: tuple[Lin, float]) -> Err:
    """The sum of (first-order form, rigorous value) parts as an `Err`."""
    return Err.make(lin_add(*(p[0] for p in parts)), math.fsum(p[1] for p in parts))


ORDERS = ("sequential", "blocked", "pairwise", "split-k")
"""Reduction orders a schedule may fix (IR_SPEC.md's own order is `sequential`)."""


def order_depth(order: str, n: int, block: int = 1) -> int:
    """The most additions any term goes through on its way to the result: `sequential`
    n - 1; `blocked` (sequential sums of `block` terms, then of the ceil(n/block) block sums)
    block - 1 + ceil(n/block) - 1; `pairwise` ceil(log2 n); `split-k` (`block` sequential
    partial sums of ceil(n/block) terms, then summed sequentially) ceil(n/block) - 1 + block - 1.
    """
    if n <= 1:
        return 0
    if order == "sequential":
        return n - 1
    if order == "pairwise":
        return math.ceil(math.log2(n))
    if block < 1:
        raise ValueError(f"{order} needs a block size >= 1, got {block}")
    if order == "blocked":
        return min(block, n) - 1 + math.ceil(n / block) - 1
    if order == "split-k":
        parts = min(block, n)
        return math.ceil(n / parts) - 1 + parts - 1
    raise ValueError(f"unknown reduction order {order!r} (one of {', '.join(ORDERS)})")


def ordered_sum(
    ctx: Context,
    order: str,
    n: int,
    dtype: DType,
    p_exact: float,
    p_computed: float,
    elements: int,
    block: int = 1,
) -> tuple[dict[str, float], float]:
    """The rounding error of summing n terms |t| <= P in `order` (see `order_depth`):
    every term is multiplied by at most d factors (1 + delta), so |error| <= gamma_d n P
    (Higham 2002, section 4.2), first order d n P u. For `sequential` the sharper
    `sequential_sum` applies. This is what a pass that reorders a reduction under a `real`
    claim reports as the bound's change."""
    if order == "sequential":
        return sequential_sum(ctx, n, dtype, p_exact, p_computed, elements)
    d = order_depth(order, n, block)
    if d == 0:
        return {}, 0.0
    u = ctx.u(dtype)
    g = gamma(d, u)
    return {ctx.u_sym(dtype): d * n * p_exact}, g * n * p_computed
