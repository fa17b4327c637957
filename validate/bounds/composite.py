"""Bound rules of the composite family: each composite is bounded through the ops it means
exactly (its `decompose`, IR_SPEC.md section 4), so its bound is that of its decomposition.

The relational facts of the decomposition keep it tight where intervals alone would not:
softmax's `x - max(x)` is <= 0 (fact `max0`), so `exp` stays in [0, 1] and one of its terms is
1 (fact `max1`), so the sum is >= 1 and the division never comes near 0; `log_softmax`'s log
argument is likewise >= 1. layer_norm's `d * d` is a square (nonnegative)."""

from __future__ import annotations

import itertools
import math

from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops import get
from gdv.validate.bounds.model import TB, Err
from gdv.validate.bounds.registry import Context, apply_op, rule

_counter = itertools.count()


def fresh(base: str) -> str:
    """A name for a decomposition's value: '#' cannot appear in IR names, so these never
    collide with the program's."""
    return f"{base}#{next(_counter)}"


def run_decomposition(op: Op, ctx: Context) -> list[tuple[Op, TB]]:
    """Each op of `op`'s decomposition with its bound, each by its own rule."""
    spec = get(op.name)
    assert spec is not None and spec.decompose is not None
    return [(sub, apply_op(sub, ctx)) for sub in spec.decompose(op, fresh)]


@rule(OPS["matmul"])
def _matmul(op: Op, args: list[TB], ctx: Context) -> TB:
    return run_decomposition(op, ctx)[-1][1]


LIPSCHITZ = {"softmax": 0.5, "log_softmax": 2.0, "gelu": 1.13}
"""sup |d out_i| / max_j |d x_j| of the exact functions, over all inputs: softmax's Jacobian
diag(p) - p p^T has rows of 1-norm 2 p_i (1 - p_i) <= 1/2; log_softmax's rows
e_i - p have 1-norm <= 2; gelu' = Phi(x) + x phi(x) peaks at 1.1289 (x = sqrt 2), the tanh
form's at 1.1290 (tests/validate/bounds/test_composites.py checks both on a fine grid)."""

GELU_MIN = -0.1701
"""Both gelu forms stay above this (-0.16997 and -0.17004 at x near -0.75)."""


@rule(OPS["softmax"], OPS["log_softmax"], OPS["gelu"])
def _lipschitz_composite(op: Op, args: list[TB], ctx: Context) -> TB:
    through = run_decomposition(op, ctx)[-1][1]
    found = _split_exact_input(op, args[0], ctx)
    split, rounding = found if found is not None else (None, None)
    best = through if split is None or split.err.total >= through.err.total else split
    if op.name == "softmax":
        best = _softmax_l1(op, args[0], best, ctx, rounding)
    return best


def _softmax_l1(op: Op, x: TB, p: TB, ctx: Context, rounding: Err | None) -> TB:
    """Record softmax's rows' l1 facts: sum p = 1 exactly; sum |p^ - p| is at most n times
    p's elementwise bound, and never more than sum p^ + sum p <= (1+u)/(1-gamma_{n-1}) + n eta
    + 1 (p^_i <= e^_i / s^ (1+u) + eta, and the computed sum of the nonnegative e^ is
    s^ >= sum e^ (1 - gamma_{n-1})). With `rounding` (a bound on |p^_i - softmax(x^)_i| for
    every exact input x^ among the computed ones), also at most n rounding + E for inputs within
    E of the exact ones: the exact softmax moves a row by at most E in l1 norm, since its
    Jacobian diag(p) - p p^T sends d to the p-weighted deviations p_i (d_i - sum_j p_j d_j),
    whose l1 norm, the mean absolute deviation of d under p, is at most (max d - min d) / 2 <= E
    (integrated along the segment from x to x^; masked -inf entries move nowhere)."""
    from gdv.validate.bounds.model import Err
    from gdv.validate.bounds.rounding import gamma

    axis = op.attrs["axis"]
    n = x.type.shape[axis]
    u = ctx.u(op.type.dtype)
    g = gamma(n - 1, u)
    if not p.err.finite or g >= 1:
        return p
    cap = 1 + (1 + u) / (1 - g) + n * ctx.eta(op.type.dtype) + 1e-12  # + eta per division
    spread = p.err.scale(n)  # sum of n errors, each within p's bound
    if rounding is not None and x.err.finite and not (x.specials - {"-inf"}):
        moved = x.err + rounding.scale(n)
        spread = moved if moved.total < spread.total else spread
    le = spread if spread.total < cap else Err.make({}, cap)
    err = p.err if p.err.total <= le.total else le
    return p.with_(err=err, facts={"l1": {axis: (1.0, le)}})


def _pieces(lo: float, hi: float) -> list[tuple[float, float]]:
    """[lo, hi] cut at 0, +-k/4 up to 4 and +-2^k beyond: narrow pieces keep gelu's interval
    arithmetic tight (tanh's saturation only shows on pieces away from 0)."""
    cuts = {0.0} | {s * k / 4 for k in range(1, 17) for s in (1, -1)}
    cuts |= {s * 2.0**k for k in range(3, 64) for s in (1, -1)}
    inner = sorted(c for c in cuts if lo < c < hi)
    ends = [lo, *inner, hi]
    return list(zip(ends[:-1], ends[1:], strict=True))


def _split_exact_input(op: Op, x: TB, ctx: Context) -> tuple[TB, Err] | None:
    """|f^(x^) - f(x)| <= |f^(x^) - f(x^)| + L |x^ - x|: the rounding of the decomposition
    evaluated on an *exact* input ranging over the computed (and exact) values, plus the
    exact function's Lipschitz constant times the input error. Elementwise composites (gelu)
    evaluate the decomposition piece by piece and take the worst piece; softmax and
    log_softmax, whose rows mix, in one piece. Returns the bound and its rounding part."""
    from gdv.validate.bounds.model import Err, hull, is_empty, lin_add, lin_scale, make_tb

    lip = LIPSCHITZ[op.name]
    name = op.operands[0]
    base = x.both
    if not x.err.finite or is_empty(*base):
        return None
    if op.name == "gelu" and x.specials:
        return None
    parts = _pieces(*base) if op.name == "gelu" else [base]
    saved = ctx.values[name]
    results = []
    try:
        for lo, hi in parts:
            ctx.values[name] = make_tb(x.type, (lo, hi), Err.zero(), specials=x.specials)
            results.append(run_decomposition(op, ctx)[-1][1])
    finally:
        ctx.values[name] = saved
    rounding = results[0].err
    for r in results[1:]:
        rounding = rounding.max(r.err)
    if not rounding.finite:
        return None
    err = Err.make(
        lin_add(lin_scale(x.err.lin, lip), rounding.lin), lip * x.err.total + rounding.total
    )
    exact = hull(*(r.exact for r in results))
    computed = hull(*(r.computed for r in results))
    if op.name == "gelu":
        exact = (max(exact[0], GELU_MIN), exact[1])
    specials = frozenset().union(*(r.specials for r in results))
    return make_tb(op.type, exact, err, computed, specials), rounding


@rule(OPS["layer_norm"])
def _layer_norm(op: Op, args: list[TB], ctx: Context) -> TB:
    steps = run_decomposition(op, ctx)
    through = steps[-1][1]
    closed = _layer_norm_closed(op, args, steps, ctx)
    best = through if closed is None or closed.err.total >= through.err.total else closed
    capped = _layer_norm_cap(op, args, steps, ctx)
    if capped is not None and capped.err.total < best.err.total:
        best = capped
    n = math.prod(op.type.shape[a] for a in op.attrs["axes"])
    if len(op.attrs["axes"]) == 1 and best.err.finite:
        # sum y_i^2 = n v / (v + eps) <= n, so sum |y_i| <= n and each row of
        # y * gamma + beta has l1 norm <= n (max|gamma| + max|beta|).
        _, gamma_tb, beta_tb = args
        l1 = n * (max(abs(gamma_tb.lo), abs(gamma_tb.hi)) + max(abs(beta_tb.lo), abs(beta_tb.hi)))
        best = best.with_(facts={"l1": {op.attrs["axes"][0]: (l1, best.err.scale(n))}})
    return best


def _layer_norm_cap(op: Op, args: list[TB], steps: list[tuple[Op, TB]], ctx: Context) -> TB | None:
    """Whatever the input's error, layer_norm's output is bounded on both sides, so the error is
    at most the two bounds added: exact |y| <= sqrt(n-1) (Samuelson), so |out| <= sqrt(n-1) G
    + B (G, B the largest |gamma|, |beta|); computed, with the sums of squares of nonnegative
    terms rounding down by at most (1-u)^(n+1) and w^ = fl(v^ + eps^) >= (v^ + eps^)(1-u),
    |d^_i| r^ <= sqrt(n) (1 + theta) / (1-u)^((n+2)/2) (theta: rsqrt's relative error), and
    the affine part adds two roundings. It keeps layer norms from compounding upstream errors
    in deep programs. None when it does not apply (eps^ <= 2 eta, n u >= 1/2)."""
    from gdv.validate.bounds.elementwise import transcendental_error
    from gdv.validate.bounds.model import MAX_FINITE, Err, mag, make_tb

    x, gamma_tb, beta_tb = args
    dtype = op.type.dtype
    n = math.prod(x.type.shape[a] for a in op.attrs["axes"])
    eps = steps[8][1]
    u, eta = ctx.u(dtype), ctx.eta(dtype)
    if n < 1 or n * u >= 0.5 or eps.clo <= 2 * eta:
        return None
    _, rel, absolute = transcendental_error(ctx, "rsqrt", dtype, 1.0, 1.0)
    g, b = mag(*gamma_tb.computed), mag(*beta_tb.computed)
    # rsqrt's absolute part, relative to r >= 1/sqrt(w^) with w^ <= the largest finite value.
    theta = rel + absolute * math.sqrt(MAX_FINITE[ctx.fmt(dtype)])
    # One more (1 - u)^(1/2) than the text above: n itself rounds to the dtype when n > 2^p.
    y_c = math.sqrt(n) * (1 + theta) * (1 + u) / (1 - u) ** ((n + 3) / 2)
    computed_max = ((y_c * g) * (1 + u) + eta + b) * (1 + u)
    exact_max = math.sqrt(max(n - 1, 0)) * mag(*gamma_tb.exact) + mag(*beta_tb.exact)
    if not math.isfinite(computed_max):
        return None
    cap = exact_max + computed_max
    # A row holding a special value has an infinite or NaN mean, so it is NaN on both sides.
    specials = x.specials | gamma_tb.specials | beta_tb.specials
    return make_tb(
        op.type,
        (-exact_max, exact_max),
        Err.make({}, cap),
        (-computed_max, computed_max),
        frozenset({"nan"}) if specials else frozenset(),
    )


def _layer_norm_closed(
    op: Op, args: list[TB], steps: list[tuple[Op, TB]], ctx: Context
) -> TB | None:
    """layer_norm's closed form, in the style of Blanchard, Higham and Mary's analysis: the
    decomposition bounds rsqrt(v + eps) as if v could be anything in its interval independently
    of d, which near v = 0 multiplies the error by eps^-3/2; here d and v stay linked.

    Per row of n elements: d = x - m with error Ed (from the decomposition's first ops), v =
    |d|^2/n, y = d / sqrt(v + eps). With s = Ed / sqrt(eps), g = gamma_{n+1}:
      rho = |w^ - w| / w <= g (1+s)^2 + s + s^2 + (2 eta (1+g) + e_eps) / eps
                            + u ((1+g)(1+s)^2 + (2 eta (1+g) + eps + e_eps) / eps)
    for w = v + eps (using |v~ - v| <= (2 sqrt v + Ed) Ed for v~ = |d^|^2/n, and
    sup_v (sqrt v + E)^2/(v + eps) <= (1 + E/sqrt eps)^2); then r^ = rsqrt(w^) has relative
    error sigma <= (1 - rho)^(-1/2) (1 + theta) - 1, theta the ulp assumption, and
      |y^ - y| <= Ed (1 + sigma) / sqrt(eps) + Y sigma + u (Y + Ed / sqrt(eps))(1 + sigma) + eta
    with |y| <= Y = min(sqrt(n - 1), max|d| / sqrt(eps)) (Samuelson's inequality). The affine
    part (y * gamma) + beta goes through the mul and add rules. None when it does not apply.

    The mean's error is one shift of the whole row, and a row of d sums to 0 exactly, so it
    moves the variance only to second order: with m^ = m + delta (|delta| <= Dm, the mean's
    bound) and x^_i = x_i + e_i (|e_i| <= ex), d^_i = (d_i + e_i - delta)(1 + eps_i), i.e.
    d^ - d = -delta 1 + r with r_i = eps_i d_i + f_i, |f_i| <= F = ex (1+u) + u Dm. Then
    n (v~ - v) = 2 d.r + |r|^2 - 2 delta sum r + n delta^2 (d.1 = 0), and with |d|^2 = n v,
    |sum eps_i d_i| <= u sqrt(n) |d|:
      |v~ - v| <= 2 u v + 2 sqrt(v) F + (u sqrt(v) + F + Dm)^2,
    so |v~ - v| / w <= 2u + F / sqrt(eps) + (u + (F + Dm) / sqrt(eps))^2 (sup over v >= 0),
    used in place of s + s^2 when smaller (and v~/w <= 1 + that in place of (1+s)^2). Likewise
    |d^_i - d_i| <= D0 + u |d_i| with D0 = (Dm + ex)(1 + u), so the first term of the bound on
    |y^ - y| becomes D0 (1 + sigma) / sqrt(eps) + u Y (1 + sigma), and the final rounding's
    u (Y (1+u) + D0 / sqrt(eps))(1 + sigma)."""
    from gdv.validate.bounds.elementwise import _add_sub, _mul, transcendental_error
    from gdv.validate.bounds.model import Err, lin_add, lin_scale, mag, make_tb

    x, gamma_tb, beta_tb = args
    dtype = op.type.dtype
    n = math.prod(x.type.shape[a] for a in op.attrs["axes"])
    d = steps[4][1]
    eps = steps[8][1]
    assert steps[4][0].name == "sub" and steps[8][0].name == "constant"
    p = ctx.fmt(dtype).significand_bits
    if x.specials or not d.err.finite or n > 2**p or n < 1 or eps.lo <= 0:
        return None
    u, eta = ctx.u(dtype), ctx.eta(dtype)
    us, etas = ctx.u_sym(dtype), ctx.eta_sym(dtype)
    # rsqrt's relative error (the ulp assumption on the target, then the rounding).
    _, rsqrt_rel, rsqrt_abs = transcendental_error(ctx, "rsqrt", dtype, 1.0, 1.0)
    ed = d.err.total
    dmax = mag(*d.exact)
    half = (x.hi - x.lo) / 2
    v_max = min(dmax * dmax, half * half)  # Popoviciu: a variance is <= (range/2)^2
    eps_lo, eps_hi, e_eps = eps.lo, eps.hi, eps.err.total
    root = math.sqrt(eps_lo)
    s = ed / root
    mean, ex = steps[2][1], x.err.total
    assert steps[2][0].name == "div" and steps[4][0].operands[0] == op.operands[0]
    dm = mean.err.total
    f = ex * (1 + u) + u * dm
    shift = 2 * u + f / root + (u + (f + dm) / root) ** 2
    rv = min(s + s * s, shift)  # >= |v~ - v| / w
    g = (n + 1) * u / (1 - (n + 1) * u)
    rho = (
        g * (1 + rv)
        + rv
        + (2 * eta * (1 + g) + e_eps) / eps_lo
        + u * ((1 + g) * (1 + rv) + (2 * eta * (1 + g) + eps_hi + e_eps) / eps_lo)
    )
    if not rho < 0.5:
        return None
    theta = rsqrt_rel + rsqrt_abs * math.sqrt((v_max + eps_hi) * (1 + rho))
    sigma = (1 - rho) ** -0.5 * (1 + theta) - 1
    y_max = min(math.sqrt(n - 1), dmax / root)
    d0 = (dm + ex) * (1 + u)
    total = min(
        ed * (1 + sigma) / root + y_max * sigma + u * (y_max + ed / root) * (1 + sigma),
        (d0 / root + u * y_max) * (1 + sigma)
        + y_max * sigma
        + u * (y_max * (1 + u) + d0 / root) * (1 + sigma),
    )
    total += eta
    if shift < s + s * s:  # the mean's error enters the variance at second order only
        s_lin = lin_scale(lin_add(mean.err.lin, x.err.lin), 1 / root)
        rho_lin = lin_add(
            {us: (n + 1) + 3 + eps_hi / eps_lo, etas: 2 / eps_lo},
            lin_scale(x.err.lin, 1 / root),
            lin_scale(eps.err.lin, 1 / eps_lo),
        )
    else:
        s_lin = lin_scale(d.err.lin, 1 / root)
        rho_lin = lin_add(
            {us: (n + 1) + 1 + eps_hi / eps_lo, etas: 2 / eps_lo},
            s_lin,
            lin_scale(eps.err.lin, 1 / eps_lo),
        )
    theta_lin, _, _ = transcendental_error(ctx, "rsqrt", dtype, 1.0, 1.0)
    root_w = math.sqrt(v_max + eps_hi)
    theta_lin = {s: v * (root_w if s.startswith("eta") else 1.0) for s, v in theta_lin[0].items()}
    sigma_lin = lin_add(lin_scale(rho_lin, 0.5), theta_lin)
    lin = lin_add(s_lin, lin_scale(sigma_lin, y_max), {us: 2 * y_max, etas: 1.0})
    y = make_tb(op.type, (-y_max, y_max), Err.make(lin, total))
    names = [fresh(f"{op.result}.{w}") for w in ("y", "gamma", "beta", "scaled")]
    g_tb = gamma_tb.with_(type=op.type, facts={})
    b_tb = beta_tb.with_(type=op.type, facts={})
    scaled = _mul(Op(names[3], "mul", names[:2], {}, op.type), [y, g_tb], ctx)
    return _add_sub(Op(op.result, "add", [names[3], names[2]], {}, op.type), [scaled, b_tb], ctx)
