"""The closed forms that tighten the bounds, each against measured errors on inputs made to hit
its weak spot (the adversarial families and the hill climb of validate/bounds/measure.py), in
low precision where rounding is large, with exact and with inexact operands."""

from __future__ import annotations

import functools

import pytest

from gdv.api import parse
from gdv.validate.bounds import analyze
from gdv.validate.bounds.measure import KINDS, make_inputs, output_errors, worst_error


@functools.cache
def _analysed(text: str):
    module = parse(text)
    return module, analyze(module), analyze(module, ideal=True)


def _check(text: str, kinds=KINDS, seeds=range(3), budget: int = 60) -> float:
    """The worst measured error over families and a search; fails when it beats the bound.
    Returns measured / bound, the fraction of the bound the inputs reach."""
    module, rigorous, ideal = _analysed(text)
    bound, slack = rigorous.outputs[0].abs, ideal.outputs[0].abs
    worst = 0.0
    for kind in kinds:
        for seed in seeds:
            try:
                inputs = make_inputs(module.entry, kind, seed)
            except ValueError:
                continue
            ((measured, _),) = output_errors(module, inputs)
            assert measured <= bound + slack, (kind, seed, measured, bound)
            worst = max(worst, measured)
    found, how, _ = worst_error(module, 0, budget=budget, seed=1)
    assert found <= bound + slack, (how, found, bound)
    return max(worst, found) / bound


def _layer_norm(dt: str, n: int, eps: str, inexact: bool) -> str:
    x = f"%x: {dt}[32,{n}] {{range = [-3.0, 3.0]}}, %w: {dt}[32,{n}] {{range = [-0.01, 0.01]}}"
    g = f"%g: {dt}[{n}] {{range = [0.5, 1.5]}}, %b: {dt}[{n}] {{range = [-0.1, 0.1]}}"
    arg = "%s" if inexact else "%x"
    pre = f"%s = add(%x, %w) : {dt}[32,{n}]\n  " if inexact else ""
    return (
        f"func @main({x}, {g}) -> {dt}[32,{n}] {{\n  {pre}"
        f"%y = layer_norm({arg}, %g, %b) {{axes = [1], eps = {eps}}} : {dt}[32,{n}]\n"
        f"  return %y\n}}\n"
    )


@pytest.mark.parametrize("dt", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("n", [16, 128])
@pytest.mark.parametrize("eps", ["1e-05", "0.001"])
@pytest.mark.parametrize("inexact", [False, True])
def test_layer_norm_mean_shift_closed_form(dt: str, n: int, eps: str, inexact: bool) -> None:
    """The mean's rounding shifts a whole row and moves the variance at second order only:
    near-constant rows whose spread is near sqrt(eps) (families `flat`, `constant`, `scaled`)
    are where that matters."""
    text = _layer_norm(dt, n, eps, inexact)
    _check(text, kinds=("random", "constant", "flat", "scaled", "signs"))


@pytest.mark.parametrize("n", [2, 3, 7, 50])
@pytest.mark.parametrize("r", [0.5, 1.0, 2.5, 6.0, 100.0])
def test_sum_of_squared_partial_sums(n: int, r: float) -> None:
    from gdv.validate.bounds.rounding import _squares

    exact = sum(min(k, r) ** 2 for k in range(2, n + 1))
    assert exact <= _squares(n, r) <= exact * (1 + 1e-9) + 1e-12


@pytest.mark.parametrize(("dt", "n"), [("bf16", 200), ("f16", 256), ("f16", 512)])
@pytest.mark.parametrize("dot", [False, True])
def test_probabilistic_sum_holds_on_random_inputs(dt: str, n: int, dot: bool) -> None:
    """The martingale bound lambda u sqrt(sum Z_k^2) on 4000 random sums in low precision, where
    rounding errors are as random as the model assumes: none may exceed it (the failure
    probability is far below 1/4000), and it is not vacuous (the worst is within 20x of it),
    and it is below the rigorous bound."""
    rows = 4000
    body = (
        f"%p = mul(%x, %w) : {dt}[{rows},{n}]\n  %y = reduce_sum(%p) {{axes = [1]}} : {dt}[{rows}]"
        if dot
        else f"%y = reduce_sum(%x) {{axes = [1]}} : {dt}[{rows}]"
    )
    text = (
        f"func @main(%x: {dt}[{rows},{n}] {{range = [0.5, 2.0]}}, %w: {dt}[{rows},{n}] "
        f"{{range = [0.5, 2.0]}}) -> {dt}[{rows}] {{\n  {body}\n  return %y\n}}\n"
    )
    module, rigorous, _ = _analysed(text)
    out = rigorous.outputs[0]
    assert out.prob_abs < out.abs
    assert rigorous.prob_failure < 1e-3
    for seed in range(2):
        inputs = make_inputs(module.entry, "random", seed)
        ((measured, _),) = output_errors(module, inputs)
        assert measured <= out.prob_abs, (measured, out.prob_abs)
        assert out.prob_abs <= 20 * measured, (measured, out.prob_abs)


def test_probabilistic_failure_counts_each_sum_once() -> None:
    """The union bound is over sums (one Azuma event each), not over their terms."""
    import math

    from gdv.validate.bounds.registry import DEFAULT_LAMBDA

    text = (
        "func @main(%x: f32[10,1000] {range = [0.5, 2.0]}) -> f32[10] {\n"
        "  %y = reduce_sum(%x) {axes = [1]} : f32[10]\n  return %y\n}\n"
    )
    _, result, _ = _analysed(text)
    per_sum = 2 * math.exp(-(DEFAULT_LAMBDA**2) * (1 - 2.0**-24) ** 2 / 2)
    assert result.prob_failure == pytest.approx(10 * per_sum)


def test_softmax_moves_a_row_by_at_most_the_input_error_in_l1() -> None:
    """sum_i |softmax(x + d)_i - softmax(x)_i| <= max |d_i|, on adversarial rows: near ties,
    one dominant entry, d at the corners of the cube (where the worst is), wide and narrow."""
    import numpy as np

    def softmax(v: np.ndarray) -> np.ndarray:
        e = np.exp(v - v.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    rng = np.random.default_rng(0)
    worst = 0.0
    for n in (2, 3, 5, 16, 64):
        for spread in (1e-3, 1.0, 10.0, 300.0):
            x = rng.uniform(-spread, spread, (2000, n))
            x[:500, 1] = x[:500, 0]  # exact ties
            for e in (1e-6, 1e-2, 1.0, 5.0):
                d = e * np.where(rng.random((2000, n)) < 0.5, -1.0, 1.0)
                moved = np.abs(softmax(x + d) - softmax(x)).sum(axis=-1)
                assert moved.max() <= e * (1 + 1e-9) + 1e-15
                worst = max(worst, moved.max() / e)
    assert worst > 0.9  # the constant 1 is reached: the check is not vacuous


def _attention_head(dt: str) -> str:
    return (
        f"func @main(%q: {dt}[32,16] {{range = [-2.0, 2.0]}}, %k: {dt}[16,32] "
        f"{{range = [-2.0, 2.0]}}, %v: {dt}[32,16] {{range = [-3.0, 1.0]}}) -> {dt}[32,16] {{\n"
        f"  %s = matmul(%q, %k) : {dt}[32,32]\n"
        f"  %qp = iota() {{axis = 0}} : i32[32,32]\n  %kp = iota() {{axis = 1}} : i32[32,32]\n"
        f'  %keep = cmp(%kp, %qp) {{dir = "le"}} : i1[32,32]\n'
        f"  %ninf = constant() {{value = -inf}} : {dt}[32,32]\n"
        f"  %m = select(%keep, %s, %ninf) : {dt}[32,32]\n"
        f"  %p = softmax(%m) {{axis = 1}} : {dt}[32,32]\n"
        f"  %y = matmul(%p, %v) : {dt}[32,16]\n  return %y\n}}\n"
    )


@pytest.mark.parametrize("dt", ["bf16", "f16", "f32"])
def test_softmax_l1_through_attention_head(dt: str) -> None:
    """Scores with rounding errors into softmax, then a convex combination of values: the l1
    fact (E + n rounding) bounds what the combination can move."""
    _check(_attention_head(dt), budget=150)


def _softmax_of_scores(dt: str) -> str:
    return (
        f"func @main(%q: {dt}[64,16] {{range = [-2.0, 2.0]}}, %k: {dt}[16,8] "
        f"{{range = [-2.0, 2.0]}}) -> {dt}[64,8] {{\n"
        f"  %s = matmul(%q, %k) : {dt}[64,8]\n"
        f"  %y = softmax(%s) {{axis = 1}} : {dt}[64,8]\n  return %y\n}}\n"
    )


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_softmax_row_l1_fact_holds(dt: str) -> None:
    """The rows' l1 fact itself: sum_i |p^_i - p_i| measured on every row, against the fact's
    bound, on the families and on inputs that tie the scores (equal q rows, equal k columns:
    ties broken only by rounding)."""
    import numpy as np

    from gdv.backends import reference
    from gdv.ir.numerics import float_to_float

    module, rigorous, ideal = _analysed(_softmax_of_scores(dt))
    bound = rigorous.values["y"].facts["l1"][1][1].total
    slack = 8 * ideal.outputs[0].abs
    dtype = module.entry.params[0].type.dtype
    rng = np.random.default_rng(3)
    worst = 0.0
    for trial in range(60):
        kind = KINDS[trial % len(KINDS)]
        try:
            inputs = make_inputs(module.entry, kind, trial)
        except ValueError:
            continue
        if trial % 2:  # tied scores: every column of k the same, up to one ulp-sized nudge
            col = rng.uniform(-2, 2, (16, 1)) * np.ones((1, 8))
            col = col * (1 + 2.0**-7 * rng.integers(-1, 2, (1, 8)))
            inputs["k"] = float_to_float(np.clip(col, -2, 2), dtype).astype(dtype.np)
        exact = reference.run(module, inputs, mode="exact")[0].astype(np.float64)
        real = reference.run(module, inputs, mode="ideal")[0].astype(np.float64)
        moved = np.abs(exact - real).sum(axis=1).max()
        assert moved <= bound + slack, (kind, moved, bound)
        worst = max(worst, moved)
    assert worst > bound / 100, (worst, bound)  # the fact is not vacuous here


@pytest.mark.parametrize("dt", ["bf16", "f16", "f32"])
def test_one_rounding_within_half_ulp_of_its_binade(dt: str) -> None:
    """|fl(z) - z| <= u binade(M) for |z| <= M: z drawn densely just below and above powers
    of two (the worst spots), and at random, each rounded by the reference's conversion."""
    import numpy as np

    from gdv.ir.dtypes import DType
    from gdv.ir.numerics import float_to_float
    from gdv.validate.bounds.model import UNIT_ROUNDOFF
    from gdv.validate.bounds.rounding import binade

    dtype = DType(dt)
    u = UNIT_ROUNDOFF[dtype]
    rng = np.random.default_rng(0)
    e = rng.integers(-10, 10, 200000).astype(np.float64)
    z = np.ldexp(1.0, e.astype(int)) * (1 + rng.uniform(-4 * u, 4 * u, e.size))
    z = np.concatenate([z, rng.uniform(-100, 100, 200000)])
    rounded = float_to_float(z, dtype).astype(np.float64)
    bound = np.array([binade(abs(v)) for v in z]) * u
    assert (np.abs(rounded - z) <= bound).all()
    assert (np.abs(rounded - z) > 0.9 * bound).any()  # attained: the bound is the right one


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("n", [3, 16, 100])
@pytest.mark.parametrize("lo", [0.5, 0.97])
def test_binade_sum_bound_on_sums_near_powers_of_two(dt: str, n: int, lo: float) -> None:
    """Sums whose partial sums sit just below powers of two (terms near 1, or near lo..1):
    every rounding is at its binade's largest; the per-binade bound must still hold."""
    text = (
        f"func @main(%x: {dt}[256,{n}] {{range = [{lo}, 1.0]}}) -> {dt}[256] {{\n"
        f"  %y = reduce_sum(%x) {{axes = [1]}} : {dt}[256]\n  return %y\n}}\n"
    )
    _check(text, budget=60)


@pytest.mark.parametrize("dt", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("divisor", ["64", "0.25", "-1024.0", "3.0"])
@pytest.mark.parametrize("inexact", [False, True])
def test_division_by_a_power_of_two(dt: str, divisor: str, inexact: bool) -> None:
    """x / 2^k is exact but in the subnormals (the `tiny` family reaches them); 3 is not a
    power of two and keeps its rounding."""
    pre = f"%s = add(%x, %w) : {dt}[64,8]\n  " if inexact else ""
    arg = "%s" if inexact else "%x"
    text = (
        f"func @main(%x: {dt}[64,8] {{range = [-1.0, 1.0]}}, %w: {dt}[64,8] "
        f"{{range = [-1e-3, 1e-3]}}) -> {dt}[64,8] {{\n  {pre}"
        f"%c = constant() {{value = {divisor}}} : {dt}[64,8]\n"
        f"  %y = div({arg}, %c) : {dt}[64,8]\n  return %y\n}}\n"
    )
    _check(text, budget=40)
    _, rigorous, _ = _analysed(text)
    if not inexact and divisor != "3.0":
        assert rigorous.outputs[0].abs < 1e-6  # eta only
