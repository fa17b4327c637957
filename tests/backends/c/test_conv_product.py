"""conv2d on the C target as a packed matrix product (backends/c/conv.py, `_as_product`):
bit-exact to the reference backend under hypothesis-drawn geometry (kernel size, stride,
dilation, asymmetric padding, channels, batch) and values (NaN, infinities, signed zeros,
subnormals, cancelling magnitudes), with the size threshold lowered so small cases take the
product path too; and the threshold really does select the path."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends import c, reference
from gdv.backends.c import conv

SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3e38, -3e38, 1.0, -1.0])


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype, share: float) -> np.ndarray:
    x = (rng.standard_normal(shape) * rng.choice([1.0, 1e-3, 1e20])).astype(dtype)
    mask = rng.random(shape) < share
    x[mask] = SPECIAL.astype(dtype)[rng.integers(0, len(SPECIAL), shape)][mask]
    return x


def _program(dtype: str, x: tuple, w: tuple, out: tuple, attrs: str) -> str:
    def ty(s: tuple) -> str:
        return f"{dtype}[{','.join(map(str, s))}]"

    return (
        f"func @main(%x: {ty(x)}, %w: {ty(w)}) -> {ty(out)} {{\n"
        f"  %y = conv2d(%x, %w) {{{attrs}}} : {ty(out)}\n  return %y\n}}\n"
    )


@st.composite
def geometry(draw):
    n, cin, cout = draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(1, 5))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sh, sw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = [draw(st.integers(0, 2)) for _ in range(4)]
    h = draw(st.integers((kh - 1) * dh + 1, 9))
    wd = draw(st.integers((kw - 1) * dw + 1, 9))
    oh = (h + pads[0] + pads[1] - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + pads[2] + pads[3] - (kw - 1) * dw - 1) // sw + 1
    attrs = (
        f"stride = [{sh}, {sw}], padding = [[{pads[0]}, {pads[1]}], [{pads[2]}, {pads[3]}]], "
        f"dilation = [{dh}, {dw}], groups = 1"
    )
    return (n, cin, h, wd), (cout, cin, kh, kw), (n, cout, oh, ow), attrs


@given(geometry(), st.sampled_from(["f32", "f64"]), st.integers(0, 2**32 - 1),
       st.sampled_from([0.0, 0.1]))  # fmt: skip
def test_product_path_is_bit_exact(g, dtype, seed, share) -> None:
    xs, ws, out, attrs = g
    module = parse(_program(dtype, xs, ws, out, attrs))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(conv, "_PRODUCT_MIN_MACS", 0)
        assert "contraction" in c.lower(module)
        lowered = c.Executable(module)
    rng = np.random.default_rng(seed)
    npdt = np.float32 if dtype == "f32" else np.float64
    inputs = {"x": _values(rng, xs, npdt, share), "w": _values(rng, ws, npdt, share)}
    (got,) = lowered(inputs)
    (want,) = reference.run(module, inputs)
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


def test_threshold_selects_the_path() -> None:
    small = parse(_program("f32", (1, 1, 3, 3), (1, 1, 2, 2), (1, 1, 2, 2), _plain()))
    big = parse(_program("f32", (2, 3, 32, 32), (16, 3, 3, 3), (2, 16, 30, 30), _plain()))
    assert "contraction" not in c.lower(small)
    assert "contraction" in c.lower(big)
    rng = np.random.default_rng(1)
    inputs = {"x": _values(rng, (2, 3, 32, 32), np.float32, 0.05),
              "w": _values(rng, (16, 3, 3, 3), np.float32, 0.05)}  # fmt: skip
    assert reference.bit_equal(c.run(big, inputs)[0], reference.run(big, inputs)[0])


def test_grouped_and_integer_convs_keep_the_loop_nest() -> None:
    attrs = "stride = [1, 1], padding = [[1, 1], [1, 1]], dilation = [1, 1], groups = 2"
    grouped = parse(_program("f32", (2, 4, 16, 16), (8, 2, 3, 3), (2, 8, 16, 16), attrs))
    assert "contraction" not in c.lower(grouped)
    ints = parse(_program("i32", (2, 3, 32, 32), (16, 3, 3, 3), (2, 16, 30, 30), _plain()))
    assert "contraction" not in c.lower(ints)


def _plain() -> str:
    return "stride = [1, 1], padding = [[0, 0], [0, 0]], dilation = [1, 1], groups = 1"


@pytest.mark.parametrize("hw", [12, 16, 32])
def test_images_run_as_batch_and_tiles_are_stored_in_place(hw: int) -> None:
    """N images of [C_out, H, W]: the image dim runs as a batch dim, so each image's product is
    [C_out] x [H*W] laid out like the result and written in place, not through a workspace.
    Where W is a multiple of the sliver width (NR), a sliver of positions is one row segment,
    packed by offset from its first position's table entry."""
    text = _program(
        "f32", (2, 3, hw, hw), (8, 3, 3, 3), (2, 8, hw, hw),
        "stride = [1, 1], padding = [[1, 1], [1, 1]], dilation = [1, 1], groups = 1",
    )  # fmt: skip
    rng = np.random.default_rng(hw)
    inputs = {
        "x": _values(rng, (2, 3, hw, hw), np.float32, 0.1),
        "w": _values(rng, (8, 3, 3, 3), np.float32, 0.1),
    }
    module = parse(text)
    source = c.lower(module)
    head = next(line for line in source.splitlines() if "contraction" in line)
    assert f"M=8 N={hw * hw} K=27 batch=2" in head, head
    assert "ws = malloc" not in source
    nr = int(head.split("packed ")[1].split("x")[1].split()[0])
    assert ("[j0] + INT64_C(1) * jj" in source) == (hw % nr == 0), (hw, nr)
    got = c.run(module, inputs)[0]
    assert reference.bit_equal(got, reference.run(module, inputs)[0])
