"""fuse-kernels copies a small, cheap producer read by several kernels into each of them
(layer_norm's x - mean into its variance and its normalisation), one proved fusion per copy; it
keeps a producer that is returned, one read by a kernel over a larger space (a product), one
with a long body, and a transcendental (softmax's exp). The fused programs run
bit-exact to the unfused ones on the reference backend, and on the C target with the tiled
reduction (a transcendental body evaluated a tile at a time) bit-exact to the same program with
the tiling off."""

# ruff: noqa: E501  (IR programs written out line by line)

from __future__ import annotations

import numpy as np
import pytest

from gdv.api import parse
from gdv.backends import c, reference
from gdv.backends.c import nest
from gdv.backends.c.simd import vector_bytes
from gdv.driver import CompileOptions, compile_module
from gdv.passes import fuse_kernels


def _compile(text: str):
    comp = compile_module(text, CompileOptions(target="reference", use_cache=False))
    assert comp.verdict == "proved"
    return comp


def _kernels(comp) -> list:
    return [op for op in comp.module.entry.ops if op.name == "kernel"]


def _body_ops(comp, op) -> list[str]:
    return [b.name for b in comp.module.function(op.attrs["body"]).ops]


def _same_on_reference(comp, text: str, inputs: dict) -> None:
    want = reference.run(parse(text), inputs)
    for got, ref in zip(reference.run(comp.module, inputs), want, strict=True):
        assert reference.bit_equal(got, ref)


SOFTMAX = """func @main(%x: f32[6,40]) -> f32[6,40] {
  %y = softmax(%x) {axis = 1} : f32[6,40]
  return %y
}
"""

LOGSUMEXP = """func @main(%x: f32[6,40]) -> f32[6] {
  %m = reduce_max(%x) {axes = [1]} : f32[6]
  %mb = broadcast(%m) {dims = [0]} : f32[6,40]
  %s = sub(%x, %mb) : f32[6,40]
  %e = exp(%s) : f32[6,40]
  %t = reduce_sum(%e) {axes = [1]} : f32[6]
  %l = log(%t) : f32[6]
  %y = add(%m, %l) : f32[6]
  return %y
}
"""


def test_softmax_keeps_its_exp_as_one_tensor() -> None:
    """exp(x - m) feeds the sum and the division; a transcendental is not computed twice."""
    comp = _compile(SOFTMAX)
    kernels = _kernels(comp)
    assert len(kernels) == 4, [k.result for k in kernels]
    assert sum("exp" in _body_ops(comp, k) for k in kernels) == 1
    x = np.random.default_rng(0).standard_normal((6, 40)).astype(np.float32) * 30
    x[1, :5] = [np.inf, -np.inf, np.nan, -0.0, 0.0]
    _same_on_reference(comp, SOFTMAX, {"x": x})


def test_layer_norm_copies_x_minus_mean() -> None:
    text = """func @main(%x: f32[5,24], %g: f32[24], %b: f32[24]) -> f32[5,24] {
  %y = layer_norm(%x, %g, %b) {axes = [1], eps = 1e-05} : f32[5,24]
  return %y
}
"""
    comp = _compile(text)
    kernels = _kernels(comp)
    sums = [k for k in kernels if k.attrs["combiner"] == "add"]
    assert len(sums) == 2 and "sub" in _body_ops(comp, sums[1])  # the variance reads x itself
    assert not [k for k in kernels if _body_ops(comp, k) == ["sub"]]  # no x - mean tensor
    rng = np.random.default_rng(1)
    inputs = {
        "x": (rng.standard_normal((5, 24)) * 1e3).astype(np.float32),
        "g": rng.standard_normal(24).astype(np.float32),
        "b": rng.standard_normal(24).astype(np.float32),
    }
    _same_on_reference(comp, text, inputs)


@pytest.mark.parametrize(
    "text, kept",
    [
        (  # returned: it stays a tensor
            """func @main(%x: f32[4,8]) -> (f32[4,8], f32[4]) {
  %e = exp(%x) : f32[4,8]
  %s = reduce_sum(%e) {axes = [1]} : f32[4]
  %d = mul(%e, %x) : f32[4,8]
  %t = reduce_sum(%d) {axes = [1]} : f32[4]
  return %e, %t
}
""",
            "exp",
        ),
        (  # read by a product over a larger space: each element would be computed 5 times
            """func @main(%x: f32[4,8], %w: f32[8,5]) -> (f32[4,5], f32[4]) {
  %e = exp(%x) : f32[4,8]
  %p = matmul(%e, %w) : f32[4,5]
  %s = reduce_sum(%e) {axes = [1]} : f32[4]
  return %p, %s
}
""",
            "exp",
        ),
    ],
)
def test_producers_that_are_not_copied(text: str, kept: str) -> None:
    comp = _compile(text)
    assert any(_body_ops(comp, k) == [kept] for k in _kernels(comp))
    rng = np.random.default_rng(2)
    inputs = {
        p.name: rng.standard_normal(p.type.shape).astype(np.float32)
        for p in parse(text).entry.params
    }
    _same_on_reference(comp, text, inputs)


def test_long_producers_are_not_copied(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no op allowed in a copy, layer_norm's x - mean (and its splat constant) stay tensors."""
    text = """func @main(%x: f32[5,24], %g: f32[24], %b: f32[24]) -> f32[5,24] {
  %y = layer_norm(%x, %g, %b) {axes = [1], eps = 1e-05} : f32[5,24]
  return %y
}
"""
    copied = len(_kernels(_compile(text)))
    monkeypatch.setattr(fuse_kernels, "DUPLICATE_MAX_OPS", 0)
    assert len(_kernels(_compile(text))) > copied


@pytest.mark.parametrize("cols", [7, 40, 64, 100])
def test_tiled_reduction_of_a_transcendental_keeps_the_fold_order(
    monkeypatch: pytest.MonkeyPatch, cols: int
) -> None:
    """log-sum-exp's sum(exp(x - m)) along rows of widely spread values (the order of a float
    sum changes its result): the tile-at-a-time evaluation gives the same bits as one position
    at a time, and stays within the reference's transcendental tolerance."""
    text = LOGSUMEXP.replace("40", str(cols))
    comp = _compile(text)
    rng = np.random.default_rng(cols)
    x = (rng.standard_normal((6, cols)) * 40).astype(np.float32)
    x[2, :3] = [np.nan, 0.0, -0.0]
    x[3, :] = -np.inf
    source = c.lower(comp.module)
    width = max(4, 2 * vector_bytes() // 4)
    assert ("tile[q][w]" in source) == (cols >= width)
    tiled = c.run(comp.module, {"x": x})[0]
    monkeypatch.setattr(nest, "TILE_BODIES", False)
    assert "tile[q][w]" not in c.lower(comp.module)
    plain = c.run(comp.module, {"x": x})[0]
    assert reference.bit_equal(tiled, plain)
    want = reference.run(parse(text), {"x": x})[0]
    close = np.isclose(tiled, want, rtol=1e-5, atol=1e-30) | (np.isnan(tiled) & np.isnan(want))
    assert close.all()


BATCH_NORM = """func @main(%x: f32[1,8,12,12], %v: f32[8], %g: f32[8]) -> f32[1,8,12,12] {
  %e = constant() {value = 1e-05} : f32[8]
  %a = add(%v, %e) : f32[8]
  %r = rsqrt(%a) : f32[8]
  %rb = broadcast(%r) {dims = [1]} : f32[1,8,12,12]
  %gb = broadcast(%g) {dims = [1]} : f32[1,8,12,12]
  %y = mul(%x, %rb) : f32[1,8,12,12]
  %z = mul(%y, %gb) : f32[1,8,12,12]
  return %z
}
"""


@pytest.mark.parametrize("target", ["reference", "c"])
def test_a_transcendental_is_not_fused_into_a_larger_space(target: str) -> None:
    """batch norm's rsqrt(var + eps) over the channels stays a kernel of its own (8 values)
    instead of running at each of the 1152 points of the normalisation that reads it; the
    broadcast and the rest fuse as before. Bit for bit the reference."""
    comp = compile_module(BATCH_NORM, CompileOptions(target=target, use_cache=False))
    assert comp.verdict == "proved"
    kernels = _kernels(comp)
    with_rsqrt = [k for k in kernels if "rsqrt" in _body_ops(comp, k)]
    assert [k.attrs["space"] for k in with_rsqrt] == [[8]]
    assert any(k.attrs["space"] == [1, 8, 12, 12] for k in kernels)
    rng = np.random.default_rng(1)
    inputs = {
        "x": rng.standard_normal((1, 8, 12, 12)).astype(np.float32),
        "v": np.abs(rng.standard_normal(8)).astype(np.float32),
        "g": rng.standard_normal(8).astype(np.float32),
    }
    want = reference.run(parse(BATCH_NORM), inputs)[0]
    got = comp(**inputs)[0] if target == "c" else reference.run(comp.module, inputs)[0]
    if target == "reference":
        assert reference.bit_equal(got, want)
    else:  # rsqrt's last bits are the C library's
        np.testing.assert_allclose(got, want, rtol=1e-6)


AFFINE_NORM = """func @main(%x: f32[1,8,12,12], %v: f32[8], %g: f32[8], %m: f32[8], %b: f32[8], %w: f32[8,8]) -> (f32[1,8,12,12], f32[8,8]) {
  %eps = constant() {value = 1e-05} : f32[8]
  %one = constant() {value = 1.0} : f32[8]
  %ve = add(%v, %eps) : f32[8]
  %sd = sqrt(%ve) : f32[8]
  %inv = div(%one, %sd) : f32[8]
  %alpha = mul(%inv, %g) : f32[8]
  %ma = mul(%m, %alpha) : f32[8]
  %beta = sub(%b, %ma) : f32[8]
  %ab = broadcast(%alpha) {dims = [1]} : f32[1,8,12,12]
  %bb = broadcast(%beta) {dims = [1]} : f32[1,8,12,12]
  %y = mul(%x, %ab) : f32[1,8,12,12]
  %z = add(%y, %bb) : f32[1,8,12,12]
  %wr = relu(%w) : f32[8,8]
  %p = dot(%wr, %w) {lhs_batch = [], rhs_batch = [], lhs_contract = [1], rhs_contract = [0]} : f32[8,8]
  return %z, %p
}
"""


@pytest.mark.parametrize("target", ["reference", "c"])
def test_per_channel_arithmetic_is_not_fused_into_a_broadcast(target: str) -> None:
    """batch norm as torch's CPU kernel computes it: beta = b - m * alpha (8 values, read once)
    stays a kernel of its own instead of running at each of the 1152 points of x * alpha +
    beta, so the normalisation reads two values per channel and computes one multiply and one
    add per element; the relu before the product still fuses into the product (a reducing
    consumer packs it). Bit for bit the reference."""
    comp = compile_module(AFFINE_NORM, CompileOptions(target=target, use_cache=False))
    assert comp.verdict == "proved"
    kernels = _kernels(comp)
    big = [k for k in kernels if k.attrs["space"] == [1, 8, 12, 12]]
    assert len(big) == 1 and sorted(_body_ops(comp, big[0])) == ["add", "mul"], [
        _body_ops(comp, k) for k in big
    ]
    assert any(k.attrs["space"] == [8] and "sub" in _body_ops(comp, k) for k in kernels)
    product = [k for k in kernels if k.attrs["reduce"]]
    assert len(product) == 1 and "relu" in _body_ops(comp, product[0])
    rng = np.random.default_rng(2)
    inputs = {
        "x": rng.standard_normal((1, 8, 12, 12)).astype(np.float32),
        "v": np.abs(rng.standard_normal(8)).astype(np.float32),
        **{k: rng.standard_normal(8).astype(np.float32) for k in ("g", "m", "b")},
        "w": rng.standard_normal((8, 8)).astype(np.float32),
    }
    want = reference.run(parse(AFFINE_NORM), inputs)
    got = comp(**inputs) if target == "c" else reference.run(comp.module, inputs)
    for g, w in zip(got, want, strict=True):
        assert reference.bit_equal(g, w)


MASK = """func @main(%s: f32[2,3,4,4], %m: f32[4]) -> f32[2,3,4,4] {
  %mb = broadcast(%m) {dims = [1]} : f32[4,4]
  %big = constant() {value = -1e9} : f32[4,4]
  %k = mul(%mb, %big) : f32[4,4]
  %kb = broadcast(%k) {dims = [2, 3]} : f32[2,3,4,4]
  %y = add(%s, %kb) : f32[2,3,4,4]
  return %y
}
"""


def test_a_producer_that_broadcasts_fuses_into_a_broadcast() -> None:
    """An attention mask built from a [T] mask (a [T, T] producer reading a smaller operand)
    fuses into the scores' consumer, which then reads the [T] mask itself (constant along the
    product's rows: it can become the product's epilogue)."""
    comp = _compile(MASK)
    kernels = _kernels(comp)
    assert len(kernels) == 1 and kernels[0].attrs["space"] == [2, 3, 4, 4]
    assert sorted(_body_ops(comp, kernels[0])) == ["add", "constant", "mul"]
    rng = np.random.default_rng(3)
    inputs = {
        "s": rng.standard_normal((2, 3, 4, 4)).astype(np.float32),
        "m": rng.standard_normal(4).astype(np.float32),
    }
    _same_on_reference(comp, MASK, inputs)
