"""conv2d on the C target as a packed matrix product, decided by passes (issue 15): at -O1/-O2
`lower-to-kernels` turns an f32/f64 conv2d with one group into a `pad` (when padded) and a
contraction kernel, with an `fp` equivalence obligation, and `select-products` runs the kernel
as a product; the C printer only follows the attributes (no temporary kernel, no scratch
buffer, no choice of its own). Checked: the obligation proves for several geometries; the C
result is bit-exact to the reference backend under hypothesis-drawn geometry (kernel size,
stride, dilation, asymmetric padding, channels, batch) and values (NaN, infinities, signed
zeros, subnormals, cancelling magnitudes), with the size threshold lowered so small cases take
the product path too; the threshold keeps the op (and the printer's plain loop nest), integer
convs are no product, grouped ones are; the conv_block example's evidence bundle verifies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends import c, reference
from gdv.driver import CompileOptions, compile_module
from gdv.ir.core import Module
from gdv.passes import lower_to_kernels
from gdv.passes.lower_to_kernels import LowerToKernels
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline
from gdv.validate.discharge import discharge

SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3e38, -3e38, 1.0, -1.0])
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "conv_block.gdv"


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


def _compiled(module: Module, level: int = 2) -> Module:
    return PassManager(pipeline("c", level)).run(module).module


def _ops(module: Module) -> list[str]:
    return [op.name for op in module.entry.ops]


def _attrs(s: tuple[int, int], p: tuple[int, int, int, int], d: tuple[int, int], g: int) -> str:
    return (
        f"stride = [{s[0]}, {s[1]}], padding = [[{p[0]}, {p[1]}], [{p[2]}, {p[3]}]], "
        f"dilation = [{d[0]}, {d[1]}], groups = {g}"
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
        mp.setattr(lower_to_kernels, "CONV_MIN_MACS", 0)
        compiled = _compiled(module)
    assert "conv2d" not in _ops(compiled)
    (kernel,) = [op for op in compiled.entry.ops if op.name == "kernel"]
    assert kernel.attrs["strategy"] == "product"
    assert ("pad" in _ops(compiled)) == (attrs.count("[0, 0]") != 2)
    source = c.lower(compiled)
    assert "contraction" in source and "padded input" not in source
    rng = np.random.default_rng(seed)
    npdt = np.float32 if dtype == "f32" else np.float64
    inputs = {"x": _values(rng, xs, npdt, share), "w": _values(rng, ws, npdt, share)}
    (got,) = c.run(compiled, inputs)
    (want,) = reference.run(module, inputs)
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


CONFIGS = [
    # dtype, x, w, stride, padding (top, bottom, left, right), dilation
    ("f32", (2, 3, 8, 8), (4, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ("f32", (1, 2, 9, 7), (3, 2, 2, 3), (2, 1), (0, 2, 1, 0), (1, 2)),
    ("f64", (1, 3, 7, 7), (2, 3, 3, 2), (1, 2), (0, 0, 0, 0), (2, 1)),
    ("f64", (2, 1, 6, 5), (3, 1, 1, 1), (2, 2), (2, 1, 0, 1), (1, 1)),
]


def _config(cfg) -> tuple[str, tuple, tuple, tuple, str]:
    dtype, xs, ws, s, p, d = cfg
    oh = (xs[2] + p[0] + p[1] - (ws[2] - 1) * d[0] - 1) // s[0] + 1
    ow = (xs[3] + p[2] + p[3] - (ws[3] - 1) * d[1] - 1) // s[1] + 1
    return dtype, xs, ws, (xs[0], ws[0], oh, ow), _attrs(s, p, d, 1)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda cfg: f"{cfg[0]}-{cfg[3]}-{cfg[4]}-{cfg[5]}")
def test_the_rewrite_is_proved_and_the_product_bit_exact(cfg) -> None:
    dtype, xs, ws, out, attrs = _config(cfg)
    module = parse(_program(dtype, xs, ws, out, attrs))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lower_to_kernels, "CONV_MIN_MACS", 0)
        result = PassManager([LowerToKernels()]).run(module)
        compiled = _compiled(module)
    (ob,) = result.obligations
    assert (ob.id, ob.theory) == ("lower-to-kernels/conv2d/equivalence", "fp")
    assert [o.name for o in ob.src.ops] == ["conv2d"]
    padded = "[0, 0], [0, 0]" not in attrs
    assert [o.name for o in ob.tgt.ops] == ["pad", "kernel"] if padded else ["kernel"]
    (out_,) = discharge([ob], jobs=1, use_cache=False)
    assert out_.status == "proved", out_.reason
    kernel = result.module.entry.ops[-1]
    assert kernel.attrs["reduce"] == [4, 5, 6] and kernel.attrs["combiner"] == "add"
    rng = np.random.default_rng(7)
    npdt = np.float32 if dtype == "f32" else np.float64
    inputs = {"x": _values(rng, xs, npdt, 0.1), "w": _values(rng, ws, npdt, 0.1)}
    want = reference.run(module, inputs)[0]
    assert reference.bit_equal(reference.run(result.module, inputs)[0], want)
    assert reference.bit_equal(c.run(compiled, inputs)[0], want)


def test_threshold_selects_the_path() -> None:
    small = parse(_program("f32", (1, 1, 3, 3), (1, 1, 2, 2), (1, 1, 2, 2), _plain()))
    big = parse(_program("f32", (2, 3, 32, 32), (16, 3, 3, 3), (2, 16, 30, 30), _plain()))
    assert _ops(_compiled(small)) == ["conv2d"]
    assert "contraction" not in c.lower(_compiled(small))
    compiled = _compiled(big)
    assert _ops(compiled) == ["kernel"]  # no padding: no pad
    assert "contraction" in c.lower(compiled)
    rng = np.random.default_rng(1)
    inputs = {"x": _values(rng, (2, 3, 32, 32), np.float32, 0.05),
              "w": _values(rng, (16, 3, 3, 3), np.float32, 0.05)}  # fmt: skip
    assert reference.bit_equal(c.run(compiled, inputs)[0], reference.run(big, inputs)[0])


def test_grouped_integer_and_unoptimised_convs() -> None:
    """-O0 keeps the op; an integer conv becomes a kernel that is no product, a grouped one a
    product written channels-last and copied back (both: test_conv_kernels.py)."""
    attrs = "stride = [1, 1], padding = [[1, 1], [1, 1]], dilation = [1, 1], groups = 2"
    grouped = parse(_program("f32", (2, 4, 16, 16), (8, 2, 3, 3), (2, 8, 16, 16), attrs))
    ints = parse(_program("i32", (2, 3, 32, 32), (16, 3, 3, 3), (2, 16, 30, 30), _plain()))
    plain = parse(_program("f32", (2, 3, 32, 32), (16, 3, 3, 3), (2, 16, 30, 30), _plain()))
    for module, level in ((grouped, 2), (ints, 2), (plain, 0)):
        compiled = _compiled(module, level)
        want = {id(ints): ["kernel"], id(grouped): ["pad", "kernel", "reshape", "kernel"]}
        assert _ops(compiled) == want.get(id(module), ["conv2d"])
        assert ("contraction" in c.lower(compiled)) == (module is grouped)
    rng = np.random.default_rng(2)
    inputs = {"x": _values(rng, (2, 4, 16, 16), np.float32, 0.05),
              "w": _values(rng, (8, 2, 3, 3), np.float32, 0.05)}  # fmt: skip
    got = c.run(_compiled(grouped), inputs)[0]
    assert reference.bit_equal(got, reference.run(grouped, inputs)[0])


def _plain() -> str:
    return "stride = [1, 1], padding = [[0, 0], [0, 0]], dilation = [1, 1], groups = 1"


@pytest.mark.parametrize("hw", [12, 16, 32])
def test_images_run_as_batch_and_tiles_are_stored_in_place(hw: int) -> None:
    """N images of [C_out, H, W]: the image dim runs as a batch dim, so each image's product is
    [C_out] x [H*W] laid out like the result and written in place, not through a workspace.
    Where W is a multiple of the sliver width (NR), a sliver of positions is one row segment,
    packed by offset from its first position's table entry. The padded input is the pad op's
    buffer, in the memory plan."""
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
    compiled = _compiled(module)
    assert _ops(compiled) == ["pad", "kernel"]
    source = c.lower(compiled)
    head = next(line for line in source.splitlines() if "contraction" in line)
    assert f"M=8 N={hw * hw} K=27 batch=2" in head, head
    assert "ws = malloc" not in source
    assert f"%y.pad : f32[2,3,{hw + 2},{hw + 2}], planned" in source
    nr = int(head.split("packed ")[1].split("x")[1].split()[0])
    assert ("[j0] + INT64_C(1) * jj + " in source) == (hw % nr == 0), (hw, nr)
    # Otherwise a full sliver is checked at run time, and copied from its first entry when
    # it does not cross a row of the image.
    assert ("int64_t cut = 1;" in source) == (hw % nr != 0), (hw, nr)
    got = c.run(compiled, inputs)[0]
    assert reference.bit_equal(got, reference.run(module, inputs)[0])
    choices = {ch["choice"] for ch in c.printer_choices(compiled)}
    assert not choices & {"strategy", "micro-tile", "blocking", "threads", "scratch-buffer"}


def test_the_conv_block_bundle_verifies(tmp_path: Path) -> None:
    """Compiled and verified each in a fresh process, as they are used: the SMT index terms
    (gdv.validate.semantics.index) order their atoms by Z3 term id, which depends on what the
    process encoded before, so a bundle written after other conv encodings in this process
    may store a query with the summands of an index in another order than the checker's."""
    comp = compile_module(str(EXAMPLE), CompileOptions(jobs=1, use_cache=False))
    assert comp.verdict == "proved"
    ops = _ops(comp.module)
    assert "conv2d" not in ops and "pad" in ops
    choices = {ch["choice"] for ch in c.printer_choices(comp.module)}
    assert not choices & {"strategy", "micro-tile", "blocking", "threads", "scratch-buffer"}
    bundle = tmp_path / "conv_block.evidence"
    gdv = [sys.executable, "-m", "gdv"]
    made = subprocess.run(
        [*gdv, "compile", str(EXAMPLE), "--no-cache", "--jobs", "1", "--emit-evidence",
         str(bundle)], capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    checked = subprocess.run(
        [*gdv, "evidence", "verify", str(bundle), "--jobs", "1"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "verified:" in checked.stdout


@pytest.mark.parametrize(("cout", "hw"), [(37, 5), (40, 15), (24, 16)])
def test_weights_of_a_small_image_are_read_in_place(cout: int, hw: int) -> None:
    """A conv over a small image (at most `IN_PLACE_ROWS_MAX_COLS` output positions) reads its
    weight rows in place, contiguous along (C, KH, KW), instead of packing them every call;
    row counts that leave an edge sliver and reductions longer than one KC block; bit-exact."""
    from gdv.backends.c import matmul

    cin = 80  # K = 720: more than one KC block (KC 512 with a 64 KiB L1d)
    text = _program(
        "f32", (1, cin, hw, hw), (cout, cin, 3, 3), (1, cout, hw, hw),
        "stride = [1, 1], padding = [[1, 1], [1, 1]], dilation = [1, 1], groups = 1",
    )  # fmt: skip
    module = parse(text)
    compiled = _compiled(module)
    in_place = [ch for ch in c.printer_choices(compiled) if ch["choice"] == "in-place factors"]
    assert hw * hw <= matmul.IN_PLACE_ROWS_MAX_COLS
    assert in_place and "rows" in in_place[0]["value"], in_place
    rng = np.random.default_rng(cout)
    # (specials in one output channel only: a NaN in most sums would hide a misread weight)
    x = rng.standard_normal((1, cin, hw, hw)).astype(np.float32)
    w = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32)
    w[1, 0, 0, 0], w[2, 5, 1, 1], x[0, 3, 0, 0] = np.inf, np.nan, -0.0
    got = c.run(compiled, {"x": x, "w": w})[0]
    want = reference.run(module, {"x": x, "w": w})[0]
    assert np.isfinite(want).mean() > 0.8
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize(
    ("xs", "ws", "stride", "pads"),
    [
        # 64 x 64 -> 32 x 32: output rows of 32 positions, every full sliver inside one row
        ((1, 3, 64, 64), (8, 3, 3, 3), (2, 2), (1, 1, 1, 1)),
        # one output row: the positions flatten to one stride of 2
        ((1, 2, 1, 80), (5, 2, 1, 3), (1, 2), (0, 0, 0, 1)),
        # a 7 x 7 kernel at stride 2 with padding 3, two images
        ((2, 3, 40, 32), (6, 3, 7, 7), (2, 2), (3, 3, 3, 3)),
    ],
)
@pytest.mark.parametrize("level", [2, 3])
def test_stride_2_input_slivers_are_packed_by_shuffles(dtype, xs, ws, stride, pads, level) -> None:
    """A full sliver of a stride-2 convolution's input positions is packed with two vector
    loads and a shuffle (`strided_y` in backends/c/matmul.py): the same values as the
    reference, NaN, infinities and signed zeros included, bit for bit."""
    n, _, h, wd = xs
    oh = (h + pads[0] + pads[1] - ws[2]) // stride[0] + 1
    ow = (wd + pads[2] + pads[3] - ws[3]) // stride[1] + 1
    attrs = _attrs(stride, pads, (1, 1), 1)
    module = parse(_program(dtype, xs, ws, (n, ws[0], oh, ow), attrs))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lower_to_kernels, "CONV_MIN_MACS", 0)
        compiled = _compiled(module, level)
    assert "__builtin_shuffle" in c.lower(compiled)
    rng = np.random.default_rng(3)
    npdt = np.float32 if dtype == "f32" else np.float64
    inputs = {"x": _values(rng, xs, npdt, 0.05), "w": _values(rng, ws, npdt, 0.0)}
    (got,) = c.run(compiled, inputs)
    (want,) = reference.run(compiled, inputs)
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)
