"""Issue #7's aim on the attention example, as a test that fails both ways: an input built by
hand (the structure the search's `rows` and `rank1` families aim at) reaches an error within
10x of the rigorous bound and of the probabilistic companion, and the bound still holds on it.

The construction: weights whose columns are all alike (W_q and W_v along sign pattern s, W_k and
W_o all at their upper end), gamma at its upper end, beta along s; the last row of x at the
range's ends along s (a large query, q = 12.8), the other rows near-constant, alternately
c_A + a s and c_B - a s with a^2 near layer_norm's eps. Each near-constant row's mean rounds
(c_A, c_B chosen so that it rounds up and down), and layer_norm passes that on as a shift of
its row amplified by 1/sqrt(v + eps); W_k sums the shift into every key, so the scores of the
last query err by about +E on the A rows and -E on the B rows while their values lie on
opposite sides (+-|W_v s . h|): softmax moves weight between them, and W_o sums that move over
the whole row of the output."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gdv.api import load
from gdv.validate.bounds import analyze
from gdv.validate.bounds.measure import _axis_signs, output_errors

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "attention.gdv"


def _mean_rounding(rows: np.ndarray) -> np.ndarray:
    """The f32 left-to-right mean of each row minus its exact mean."""
    acc = np.zeros(rows.shape[0], dtype=np.float32)
    for j in range(rows.shape[1]):
        acc = (acc + rows[:, j]).astype(np.float32)
    mean = (acc / np.float32(rows.shape[1])).astype(np.float32)
    return mean.astype(np.float64) - rows.astype(np.float64).mean(axis=1)


def witness() -> dict[str, np.ndarray]:
    s = _axis_signs(64, 0)
    a = 0.0032  # a^2 ~ eps = 1e-5: the shift's amplification against the values' size
    centres = np.random.default_rng(0).uniform(1.0, 2.0 - 2 * a, 4000)
    up = _mean_rounding((centres[:, None] + a * s).astype(np.float32))
    down = _mean_rounding((centres[:, None] - a * s).astype(np.float32))
    c_a, c_b = centres[np.argmax(up)], centres[np.argmin(down)]
    x = np.array([c_a + a * s if r % 2 == 0 else c_b - a * s for r in range(16)])
    x[15] = 2.0 * s
    inputs = {
        "x": x,
        "gamma": np.full(64, 1.5),
        "beta": 0.1 * s,
        "wq": 0.125 * np.outer(s, np.ones(64)),
        "wk": np.full((64, 64), 0.125),
        "wv": 0.125 * np.outer(s, np.ones(64)),
        "wo": np.full((64, 64), 0.125),
    }
    return {k: v.astype(np.float32) for k, v in inputs.items()}


def test_attention_bounds_within_10x_of_a_witness() -> None:
    module = load(str(EXAMPLE))
    inputs = witness()
    for p in module.entry.params:
        lo, hi = p.range
        assert lo <= inputs[p.name].min() and inputs[p.name].max() <= hi, p.name
    ((measured, _),) = output_errors(module, inputs)
    out = analyze(module).outputs[0]
    ideal = analyze(module, ideal=True).outputs[0].abs
    assert measured <= out.abs + ideal, (measured, out.abs)
    assert out.abs <= 10 * measured, (measured, out.abs)
    assert out.prob_abs <= 10 * measured, (measured, out.prob_abs)
