"""The examples compute what their comments say: each is run on the reference backend and
compared with an independent float64 numpy formulation of the same workload."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from gdv.api import load
from gdv.backends import reference

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run(name: str, seed: int = 11) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    module = load(str(EXAMPLES / name))
    inputs = reference.random_inputs(module.entry, seed)
    (out,) = reference.run(module, inputs)
    return out, {k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()}


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * gamma + beta


def test_mlp() -> None:
    out, d = _run("mlp.gdv")
    h = np.maximum(d["x"] @ d["w1"] + d["b1"], 0.0)
    np.testing.assert_allclose(out, h @ d["w2"] + d["b2"], rtol=1e-4, atol=1e-5)


def test_attention() -> None:
    out, d = _run("attention.gdv")
    x = d["x"]
    h = _layer_norm(x, d["gamma"], d["beta"])

    def heads(t: np.ndarray) -> np.ndarray:  # [S, D] -> [H, S, Dh]
        return t.reshape(16, 4, 16).transpose(1, 0, 2)

    q, k, v = heads(h @ d["wq"]), heads(h @ d["wk"]), heads(h @ d["wv"])
    s = q @ k.transpose(0, 2, 1) / math.sqrt(16)
    s = np.where(np.tril(np.ones((16, 16), dtype=bool)), s, -np.inf)  # causal
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    o = (p @ v).transpose(1, 0, 2).reshape(16, 64)
    np.testing.assert_allclose(out, x + o @ d["wo"], rtol=1e-4, atol=1e-5)


def test_layernorm_gelu() -> None:
    out, d = _run("layernorm_gelu.gdv")
    x = d["x"]
    u = _layer_norm(x, d["gamma"], d["beta"]) @ d["w1"] + d["b1"]
    g = 0.5 * u * (1 + np.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
    np.testing.assert_allclose(out, x + g @ d["w2"] + d["b2"], rtol=1e-4, atol=1e-5)


def test_conv_block() -> None:
    out, d = _run("conv_block.gdv")
    xp = np.pad(d["x"], ((0, 0), (0, 0), (1, 1), (1, 1)))
    c = np.zeros((2, 16, 32, 32))
    for i in range(3):
        for j in range(3):
            c += np.einsum("nchw,oc->nohw", xp[:, :, i : i + 32, j : j + 32], d["w"][:, :, i, j])
    r = np.maximum(c + d["b"][None, :, None, None], 0.0)
    pooled = r.reshape(2, 16, 16, 2, 16, 2).max(axis=(3, 5))
    np.testing.assert_allclose(out, pooled, rtol=1e-4, atol=1e-5)


def test_bf16_matmul() -> None:
    out, d = _run("bf16_matmul.gdv")
    assert out.dtype == np.float32
    # bf16 products are exact in f32; only the f32 sums round.
    np.testing.assert_allclose(out, d["a"] @ d["b"] + d["bias"], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("name", ["mlp.gdv", "attention.gdv"])
def test_a_wrong_formulation_is_noticed(name: str) -> None:
    # The comparisons above can fail: perturbing one weight moves the output.
    module = load(str(EXAMPLES / name))
    inputs = reference.random_inputs(module.entry, 11)
    (base,) = reference.run(module, inputs)
    key = "w2" if name == "mlp.gdv" else "wo"
    inputs[key] = inputs[key].copy()
    inputs[key][0, 0] += np.float32(0.5)
    (moved,) = reference.run(module, inputs)
    assert np.abs(moved - base).max() > 1e-3
