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


@pytest.mark.parametrize(("dt", "n"), [("bf16", 100), ("f16", 128), ("f16", 512)])
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
