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
