"""The constants the composite rules rest on, checked numerically, and the composites' closed
forms against their plain decompositions."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends.reference.special import erf
from gdv.validate.bounds import analyze
from gdv.validate.bounds.composite import GELU_MIN, LIPSCHITZ


def _gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "none":
        return 0.5 * x * (1 + erf(x * 0.7071067811865476))
    return 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))


def test_gelu_lipschitz_constant_and_minimum() -> None:
    # Step 1e-5: the derivative moves by at most sup|gelu''| * 1e-5 < 1e-5 between points.
    x = np.linspace(-12.0, 12.0, 2_400_001)
    for approximate in ("none", "tanh"):
        y = _gelu(x, approximate)
        slopes = np.abs(np.diff(y) / np.diff(x))
        assert slopes.max() + 1e-4 < LIPSCHITZ["gelu"]
        assert y.min() > GELU_MIN + 1e-5


@given(st.integers(0, 2**32 - 1), st.integers(2, 40), st.floats(1e-6, 10.0))
def test_softmax_and_log_softmax_lipschitz(seed: int, n: int, scale: float) -> None:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-20, 20, n)
    dx = rng.uniform(-1, 1, n) * scale * 1e-3

    def softmax(v: np.ndarray) -> np.ndarray:
        e = np.exp(v - v.max())
        return e / e.sum()

    e = np.max(np.abs(dx))
    assert np.max(np.abs(softmax(x + dx) - softmax(x))) <= LIPSCHITZ["softmax"] * e * (1 + 1e-6)
    ls = np.log(softmax(x + dx)) - np.log(softmax(x))
    assert np.max(np.abs(ls)) <= LIPSCHITZ["log_softmax"] * e * (1 + 1e-6) + 1e-12


def _bound(body: str, dt: str = "f32", shape: str = "[16,64]") -> float:
    text = (
        f"func @main(%x: {dt}{shape} {{range = [-3.0, 3.0]}}, %g: {dt}[64] "
        f"{{range = [0.5, 1.5]}}, %b: {dt}[64] {{range = [-0.1, 0.1]}}) -> {dt}{shape} {{\n"
        f"  {body}\n  return %y\n}}\n"
    )
    return analyze(parse(text)).outputs[0].abs


def _decomposed(op_text: str) -> float:
    from gdv.ir.ops import REGISTRY

    module = parse(
        "func @main(%x: f32[16,64] {range = [-3.0, 3.0]}, %g: f32[64] {range = [0.5, 1.5]}, "
        "%b: f32[64] {range = [-0.1, 0.1]}) -> f32[16,64] {\n  " + op_text + "\n  return %y\n}\n"
    )
    fn = module.entry
    (op,) = fn.ops
    names = iter(range(10**6))
    fn.ops = REGISTRY[op.name].decompose(op, lambda base: f"{base}_{next(names)}")
    return analyze(module).outputs[0].abs


def test_closed_forms_beat_the_plain_decompositions() -> None:
    ln = "%y = layer_norm(%x, %g, %b) {axes = [1], eps = 1e-05} : f32[16,64]"
    assert _bound(ln) < _decomposed(ln) / 100
    for form in ("tanh", "none"):
        gelu = f'%y = gelu(%x) {{approximate = "{form}"}} : f32[16,64]'
        assert _bound(gelu) < _decomposed(gelu)
    # softmax's decomposition is already tight (max subtraction facts); never worse.
    sm = "%y = softmax(%x) {axis = 1} : f32[16,64]"
    assert _bound(sm) <= _decomposed(sm)


def test_layer_norm_output_bound_caps_any_input_error() -> None:
    """However inexact the input, the output's error is at most its two sides' bounds."""
    module = parse(
        "func @main(%x: bf16[4,64,16] {range = [-100.0, 100.0]}, %g: bf16[64] "
        "{range = [0.5, 1.5]}, %b: bf16[64] {range = [-0.1, 0.1]}) -> bf16[4,64] {\n"
        "  %s = reduce_sum(%x) {axes = [2]} : bf16[4,64]\n"
        "  %y = layer_norm(%s, %g, %b) {axes = [1], eps = 1e-05} : bf16[4,64]\n"
        "  return %y\n}\n"
    )
    result = analyze(module)
    assert result.values["s"].err.total > 10  # the input is far from exact
    side = 63**0.5 * 1.5 + 0.1
    assert result.outputs[0].abs <= 2 * side * 1.15  # bf16: (1 - 2^-8)^-33 and two roundings
