"""A convolution's input read in place by the micro-kernel (`matmul.IMPLICIT_COLUMNS`, issue
16; with 64-byte vectors, stride 1 and 2): a full column sliver whose NR output positions
are one run of an input row, or two runs (it crosses one row end), is not packed; the
micro-kernel loads row k of the sliver at the input plus the reduce position's table entry,
blending the two runs' loads by lane (at stride 2, each vector one two-source shuffle of two
loads). Same values in the same lanes, so every output must keep the reference's bits.
Hypothesis draws geometries whose slivers take each mode (one run, two runs, three or more runs
packed, edge slivers), strides 1 and 2, output channels that leave an edge of rows, several
reduce and column blocks, both vector widths (32-byte ones pack: `IMPLICIT_MIN_BYTES`), and
the weights bound (packed at bind time, the path -O3 models take) or not."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends import c, reference
from gdv.backends.c import matmul
from gdv.backends.c.simd import BLOCKING_ENV, VECTOR_BYTES_ENV
from gdv.passes import lower_to_kernels
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline

from .test_conv_product import _values
from .test_fast_kernels import _env


def _conv(
    n: int, cin: int, cout: int, h: int, w: int, k: tuple, pad: tuple, dil: tuple, stride: int = 1
) -> str:
    kh, kw = k
    oh = (h + pad[0] + pad[1] - (kh - 1) * dil[0] - 1) // stride + 1
    ow = (w + pad[2] + pad[3] - (kw - 1) * dil[1] - 1) // stride + 1
    return (
        f"func @main(%x: f32[{n},{cin},{h},{w}], %w: f32[{cout},{cin},{kh},{kw}]) "
        f"-> f32[{n},{cout},{oh},{ow}] {{\n"
        f"  %y = conv2d(%x, %w) {{stride = [{stride}, {stride}], "
        f"padding = [[{pad[0]}, {pad[1]}], "
        f"[{pad[2]}, {pad[3]}]], dilation = [{dil[0]}, {dil[1]}], groups = 1}} "
        f": f32[{n},{cout},{oh},{ow}]\n  return %y\n}}\n"
    )


def _executable(text: str, vector: str, blocking: str | None) -> tuple:
    env = _env(**{VECTOR_BYTES_ENV: vector, BLOCKING_ENV: blocking})
    with env, pytest.MonkeyPatch.context() as mp:
        mp.setattr(lower_to_kernels, "CONV_MIN_MACS", 0)
        passes = pipeline("c", 2, **c.schedule_parameters())  # the vector bytes set above
        module = PassManager(passes).run(parse(text)).module
        return module, c.Executable(module), c.lower(module)


@st.composite
def geometry(draw):
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pad = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers((kh - 1) * dil[0] + 1, 9))
    # widths under, around and over one sliver (16 columns): three runs, two, one
    w = draw(st.sampled_from([5, 7, 9, 14, 15, 17, 24, 31, 40]))
    w = max(w, (kw - 1) * dil[1] + 1)
    return draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(1, 19)), h, w, (
        kh, kw), pad, dil, draw(st.integers(1, 2))  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(
    g=geometry(),
    vector=st.sampled_from(["64", "32"]),
    blocking=st.sampled_from([None, "8,5,32", "16,20,48"]),
    bind=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
    share=st.sampled_from([0.0, 0.1]),
)
def test_convolutions_reading_their_input_in_place_are_bit_exact(
    g, vector: str, blocking: str | None, bind: bool, seed: int, share: float
) -> None:
    n, cin, cout, h, w, k, pad, dil, stride = g
    text = _conv(n, cin, cout, h, w, k, pad, dil, stride)
    module, exe, source = _executable(text, vector, blocking)
    (kernel,) = [op for op in module.entry.ops if op.name == "kernel"]
    assert kernel.attrs["strategy"] == "product"
    rng = np.random.default_rng(seed)
    inputs = {
        "x": _values(rng, (n, cin, h, w), np.float32, share),
        "w": _values(rng, (cout, cin, *k), np.float32, share),
    }
    (want,) = reference.run(parse(text), inputs)
    run = exe.bind({"w": inputs["w"]}) if bind else exe
    (got,) = run({"x": inputs["x"]}) if bind else run(inputs)
    assert reference.bit_equal(got, want), reference.describe_difference(got, want) + source


def _choices(module) -> set[str]:
    return {ch["choice"] for ch in c.printer_choices(module)}


def test_32_byte_vectors_keep_packing() -> None:
    """AVX2's tiles pack every sliver (`IMPLICIT_MIN_BYTES`)."""
    text = _conv(1, 3, 20, 40, 40, (3, 3), (1, 1, 1, 1), (1, 1))
    module, _, source = _executable(text, "32", None)
    assert "implicit columns" not in _choices(module) and "_r1" not in source


@pytest.mark.parametrize(
    ("h", "w", "stride"),
    [(40, 40, 1), (60, 6, 1), (40, 40, 2), (60, 12, 2)],
    ids=["rows-of-40", "rows-of-6", "rows-of-20-stride-2", "rows-of-6-stride-2"],
)
def test_in_place_slivers_compute_the_packed_bits(h: int, w: int, stride: int) -> None:
    """3x3 convs, 64-byte vectors, 20 output channels (more than the few-rows paths take):
    rows of 40 or 20 outputs make slivers of one run and of two, which are read in place
    (the choice recorded); rows of 6 make slivers of three runs, which must stay packed. Every
    case computes the bits it computes with the in-place path switched off, the weights bound
    (packed at bind time, as -O3 models run) or not."""
    text = _conv(1, 3, 20, h, w, (3, 3), (1, 1, 1, 1), (1, 1), stride)
    module, exe, source = _executable(text, "64", None)
    assert "implicit columns" in _choices(module)
    assert "_r1" in source and "_r2" in source
    rng = np.random.default_rng(7)
    inputs = {
        "x": _values(rng, (1, 3, h, w), np.float32, 0.1),
        "w": _values(rng, (20, 3, 3, 3), np.float32, 0.1),
    }
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(matmul, "IMPLICIT_COLUMNS", False)
        packed_module, packed, packed_source = _executable(text, "64", None)
        assert "implicit columns" not in _choices(packed_module) and "_r2" not in packed_source
    for bound in (False, True):
        a = exe.bind({"w": inputs["w"]})({"x": inputs["x"]}) if bound else exe(inputs)
        b = packed.bind({"w": inputs["w"]})({"x": inputs["x"]}) if bound else packed(inputs)
        assert reference.bit_equal(a[0], b[0]), reference.describe_difference(a[0], b[0])


def test_stride_two_reads_in_place_only_with_64_byte_vectors() -> None:
    """Stride 2 moves two elements a column: with 64-byte vectors the slivers are read in place
    through a two-source shuffle (`_s2`, the bits of the packed path); with 32-byte ones, and
    for a 1x1 conv (its columns need no table), they are packed."""
    text = _conv(1, 3, 20, 40, 40, (3, 3), (1, 1, 1, 1), (1, 1), 2)
    module, exe, source = _executable(text, "64", None)
    assert "implicit columns" in _choices(module) and "_r1_s2" in source
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(matmul, "IMPLICIT_STRIDE2_BYTES", 0)
        _, packed, packed_source = _executable(text, "64", None)
    assert "_s2" not in packed_source
    rng = np.random.default_rng(11)
    inputs = {
        "x": _values(rng, (1, 3, 40, 40), np.float32, 0.1),
        "w": _values(rng, (20, 3, 3, 3), np.float32, 0.1),
    }
    a, b = exe(inputs)[0], packed(inputs)[0]
    assert reference.bit_equal(a, b), reference.describe_difference(a, b)
    module, _, source = _executable(text, "32", None)
    assert "implicit columns" not in _choices(module) and "_r1" not in source
    pointwise = _conv(1, 8, 8, 20, 20, (1, 1), (0, 0, 0, 0), (1, 1))
    module, _, source = _executable(pointwise, "64", None)
    assert "implicit columns" not in _choices(module) and "_r1" not in source
