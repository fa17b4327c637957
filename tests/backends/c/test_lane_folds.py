"""Reductions over small windows read at a short stride (a pool written as a reduction over a
reshape, as `examples/conv_block.gdv` does): each vector lane is one output folding its few
positions in order inside the `omp simd` loop (`nest.LANE_FOLD_MAX_POSITIONS`). The results
must be the reference's bits, NaN, infinities and signed zeros among the values, for max, min
and sum (whose fold order shows in the bits), with windows that do and do not fill a vector."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends import c, reference
from gdv.backends.c import nest
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline

from .test_stride2_rows import SPECIAL


def _pool(kind: str, n: int, ch: int, oh: int, ow: int, kh: int, kw: int) -> str:
    """`kind` over kh x kw windows at stride (kh, kw) of f32[n, ch, oh kh, ow kw]."""
    h, w = oh * kh, ow * kw
    return (
        f"func @main(%x: f32[{n},{ch},{h},{w}]) -> f32[{n},{ch},{oh},{ow}] {{\n"
        f"  %win = reshape(%x) : f32[{n},{ch},{oh},{kh},{ow},{kw}]\n"
        f"  %p = reduce_{kind}(%win) {{axes = [3, 5]}} : f32[{n},{ch},{oh},{ow}]\n"
        "  return %p\n}\n"
    )


def _compiled(text: str, level: int = 2):
    return PassManager(pipeline("c", level, **c.schedule_parameters())).run(parse(text)).module


def _in_lanes(module) -> bool:
    return any(ch["choice"] == "folds in lanes" for ch in c.printer_choices(module))


def _values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = rng.standard_normal(shape).astype(np.float32)
    mask = rng.random(shape) < 0.2
    special = np.array(SPECIAL, dtype=np.float32)
    x[mask] = special[rng.integers(0, len(special), shape)][mask]
    return x


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["max", "min", "sum"]),
    st.integers(1, 2),
    st.integers(1, 5),
    st.integers(1, 6),
    st.integers(1, 40),
    st.sampled_from([(2, 2), (1, 2), (2, 3), (3, 3), (4, 4)]),
    st.integers(0, 2**31 - 1),
)
def test_small_window_folds_give_the_reference_bits(
    kind: str, n: int, ch: int, oh: int, ow: int, window: tuple[int, int], seed: int
) -> None:
    kh, kw = window
    text = _pool(kind, n, ch, oh, ow, kh, kw)
    module = _compiled(text)
    x = _values(np.random.default_rng(seed), (n, ch, oh * kh, ow * kw))
    got = c.run(module, {"x": x})[0]
    want = reference.run(parse(text), {"x": x})[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


def test_the_conv_block_pool_folds_in_lanes_without_an_accumulator_array() -> None:
    """The 2x2 max pool over 8x16x64x64 (stride-2 reads, 4 positions an output) runs in lanes;
    the C of its kernel keeps one accumulator per lane, not a block of them."""
    module = _compiled(_pool("max", 8, 16, 32, 32, 2, 2))
    assert _in_lanes(module)
    source = c.lower(module)
    head = source.index("outputs interleaved")
    kernel = source[head : source.index("\n}\n", head)]
    assert "#pragma omp simd" in kernel and "acc[" not in kernel
    assert "acc = gdv_max_f32(acc, val);" in kernel


def test_windows_past_the_limit_or_read_at_stride_one_keep_the_vector_loop() -> None:
    """A 5x5 window (25 positions) is over LANE_FOLD_MAX_POSITIONS; a reduction whose
    adjacent outputs read adjacent elements (a sum over rows) is not a strided window."""
    assert 25 > nest.LANE_FOLD_MAX_POSITIONS
    assert not _in_lanes(_compiled(_pool("max", 1, 4, 8, 32, 5, 5)))
    rows = """func @main(%x: f32[4, 3, 64]) -> f32[4, 64] {
  %s = reduce_sum(%x) {axes = [1]} : f32[4, 64]
  return %s
}
"""
    assert not _in_lanes(_compiled(rows))


@pytest.mark.parametrize("limit", [0, 16])
def test_either_way_the_same_bits(monkeypatch: pytest.MonkeyPatch, limit: int) -> None:
    """The printer's two forms of the same kernel agree bit for bit (a sum, whose order
    shows)."""
    monkeypatch.setattr(nest, "LANE_FOLD_MAX_POSITIONS", limit)
    text = _pool("sum", 2, 3, 7, 37, 2, 3)
    module = _compiled(text)
    assert _in_lanes(module) == (limit >= 6)
    x = _values(np.random.default_rng(limit), (2, 3, 14, 111))
    got = c.run(module, {"x": x})[0]
    assert reference.bit_equal(got, reference.run(parse(text), {"x": x})[0])


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f64", "i32", "i8"])
@pytest.mark.parametrize("kind", ["max", "sum"])
def test_other_dtypes_fold_in_lanes_to_the_reference_bits(dtype: str, kind: str) -> None:
    import ml_dtypes

    text = _pool(kind, 2, 3, 4, 14, 2, 3).replace("f32", dtype)
    module = _compiled(text)
    assert _in_lanes(module)
    npd = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f64": np.float64}
    npd |= {"i32": np.int32, "i8": np.int8}
    rng = np.random.default_rng(len(dtype) + len(kind))
    x = (rng.standard_normal((2, 3, 8, 42)) * 10).astype(npd[dtype])
    got = c.run(module, {"x": x})[0]
    assert reference.bit_equal(got, reference.run(parse(text), {"x": x})[0])
