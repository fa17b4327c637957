"""conv2d lowered to kernels beyond the single-group float product (issue 16, part 2):
depthwise convs (one output channel per group), integer and 16-bit float convs become a `pad`
and a reduction kernel that the C printer runs as a nest folding a block of adjacent outputs
in vector lanes (each output's products folded over (c, kh, kw) in the conv2d's order, so
exact); groups of several output channels become a kernel written channels-last, a reshape and
a copy kernel back (a product in f32/f64); resnet-like strided and padded float convs (7x7 s2
p3, 3x3 s2 p1, 1x1 s2, 1x1 s1) run as products. Checked: the rewrite's `fp` obligation proves
(and a wrong channel map is refuted); the C result is bit-exact to the reference backend under
hypothesis-drawn geometry (groups, input and output channels per group, kernel size, stride,
dilation, asymmetric padding, size-1 dims, widths that leave a remainder of the lane block)
and values (NaN, infinities, signed zeros, subnormals; integer wrap-around); the depthwise
kernel's C is the vector-lane nest, not the scalar conv2d loop."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends import c, reference
from gdv.backends.c import conv
from gdv.backends.c.simd import vector_bytes
from gdv.ir.core import Module
from gdv.passes import lower_to_kernels
from gdv.passes.lower_to_kernels import LowerToKernels
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline
from gdv.validate.discharge import discharge

SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3e38, -3e38, 1.0, -1.0]
NUMPY = {
    "f32": np.float32,
    "f64": np.float64,
    "f16": np.float16,
    "i32": np.int32,
    "i8": np.int8,
    "i64": np.int64,
}


def _values(rng: np.random.Generator, shape: tuple, dtype: str, share: float) -> np.ndarray:
    npdt = NUMPY[dtype]
    if dtype.startswith("i"):
        info = np.iinfo(npdt)  # the full range: products and sums wrap
        return rng.integers(info.min, info.max, shape, dtype=npdt, endpoint=True)
    x = (rng.standard_normal(shape) * rng.choice([1.0, 1e-3, 1e4])).astype(npdt)
    mask = rng.random(shape) < share
    with np.errstate(over="ignore"):  # 3e38 is inf in f16
        special = np.array(SPECIAL, dtype=np.float64).astype(npdt)
    x[mask] = special[rng.integers(0, len(SPECIAL), shape)][mask]
    return x


def _program(dtype: str, x: tuple, w: tuple, out: tuple, attrs: str) -> str:
    def ty(s: tuple) -> str:
        return f"{dtype}[{','.join(map(str, s))}]"

    return (
        f"func @main(%x: {ty(x)}, %w: {ty(w)}) -> {ty(out)} {{\n"
        f"  %y = conv2d(%x, %w) {{{attrs}}} : {ty(out)}\n  return %y\n}}\n"
    )


def _geometry(
    x: tuple, o: int, k: tuple, s: tuple, p: tuple, d: tuple, groups: int
) -> tuple[tuple, tuple, tuple, str]:
    n, cin, h, wd = x
    oh = (h + p[0] + p[1] - (k[0] - 1) * d[0] - 1) // s[0] + 1
    ow = (wd + p[2] + p[3] - (k[1] - 1) * d[1] - 1) // s[1] + 1
    attrs = (
        f"stride = [{s[0]}, {s[1]}], padding = [[{p[0]}, {p[1]}], [{p[2]}, {p[3]}]], "
        f"dilation = [{d[0]}, {d[1]}], groups = {groups}"
    )
    return x, (o, cin // groups, *k), (n, o, oh, ow), attrs


def _compiled(module: Module) -> Module:
    return PassManager(pipeline("c", 2)).run(module).module


def _kernels(module: Module) -> list:
    return [op for op in module.entry.ops if op.name == "kernel"]


@st.composite
def grouped(draw):
    """A grouped conv (1-3 input and 1-3 output channels per group, depthwise most often), or
    a single-group conv in a dtype that never runs as a product."""
    dtype = draw(st.sampled_from(["f32", "f64", "f16", "i32", "i8"]))
    single = draw(st.booleans()) and dtype not in ("f32", "f64")
    groups = 1 if single else draw(st.integers(2, 5))
    cg = draw(st.integers(1, 3))
    o = draw(st.integers(1, 4)) if single else groups * draw(st.sampled_from([1, 1, 2, 3]))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    s = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    p = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, (kh - 1) * d[0] + 1 - p[0] - p[1]), 9))
    wd = draw(st.integers(max(1, (kw - 1) * d[1] + 1 - p[2] - p[3]), 40))
    n = draw(st.integers(1, 2))
    return dtype, _geometry((n, groups * cg, h, wd), o, (kh, kw), s, p, d, groups)


@settings(max_examples=40)
@given(grouped(), st.integers(0, 2**32 - 1), st.sampled_from([0.0, 0.1]))
def test_grouped_and_nest_convs_are_bit_exact(case, seed, share) -> None:
    dtype, (xs, ws, out, attrs) = case
    module = parse(_program(dtype, xs, ws, out, attrs))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lower_to_kernels, "CONV_MIN_MACS", 0)  # small products lowered too
        mp.setattr(lower_to_kernels, "NEST_MAX_STRIDE", 3)  # strided nests too
        mp.setattr(lower_to_kernels, "NEST_MAX_PLANE_BYTES", -1)  # small depthwise planes too
        compiled = _compiled(module)
    assert "conv2d" not in [op.name for op in compiled.entry.ops]
    conv = _kernels(compiled)[0]
    product = dtype in ("f32", "f64") and ws[0] > int(attrs.split("groups = ")[1])
    assert (conv.attrs.get("strategy") == "product") == product  # depthwise: never
    rng = np.random.default_rng(seed)
    inputs = {"x": _values(rng, xs, dtype, share), "w": _values(rng, ws, dtype, share)}
    (got,) = c.run(compiled, inputs)
    (want,) = reference.run(module, inputs)
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


DEPTHWISE = [
    # dtype, x, stride, padding (top, bottom, left, right), dilation, input channels per group
    ("f32", (1, 8, 12, 20), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ("f32", (2, 6, 9, 17), (2, 2), (1, 0, 1, 2), (1, 1), 1),
    ("f64", (1, 4, 7, 7), (1, 2), (2, 2, 2, 2), (2, 1), 1),
    ("f32", (1, 6, 8, 8), (1, 1), (0, 0, 0, 0), (1, 1), 2),
    ("i32", (1, 3, 6, 9), (1, 1), (1, 1, 0, 0), (1, 1), 3),
    ("f16", (1, 2, 5, 6), (1, 1), (1, 1, 1, 1), (1, 1), 1),
]


@pytest.mark.parametrize("cfg", DEPTHWISE, ids=lambda cfg: f"{cfg[0]}-{cfg[1]}-{cfg[2]}-{cfg[5]}")
def test_the_rewrite_is_proved(cfg) -> None:
    dtype, xs, s, p, d, cg = cfg
    groups = xs[1] // cg
    xs_, ws, out, attrs = _geometry(xs, groups, (3, 3), s, p, d, groups)
    module = parse(_program(dtype, xs_, ws, out, attrs))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lower_to_kernels, "NEST_MAX_STRIDE", 2)
        mp.setattr(lower_to_kernels, "NEST_MAX_PLANE_BYTES", -1)  # small planes lowered too
        result = PassManager([LowerToKernels()]).run(module)
    (ob,) = result.obligations
    assert (ob.id, ob.theory) == ("lower-to-kernels/conv2d/equivalence", "fp")
    padded = any(p)
    assert [o.name for o in ob.tgt.ops] == (["pad", "kernel"] if padded else ["kernel"])
    (done,) = discharge([ob], jobs=1, use_cache=False)
    assert done.status == "proved", done.reason
    (kernel,) = _kernels(result.module)
    assert kernel.attrs["reduce"] == [4, 5, 6] and kernel.attrs["space"][4] == cg
    rng = np.random.default_rng(3)
    inputs = {"x": _values(rng, xs_, dtype, 0.1), "w": _values(rng, ws, dtype, 0.1)}
    want = reference.run(module, inputs)[0]
    assert reference.bit_equal(reference.run(result.module, inputs)[0], want)


def test_strided_nest_convs_keep_the_op() -> None:
    """By default (NEST_MAX_STRIDE = 1) a strided depthwise conv stays an op: measured slower
    as the lane nest."""
    xs, ws, out, attrs = _geometry((1, 8, 12, 12), 8, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 8)
    module = parse(_program("f32", xs, ws, out, attrs))
    assert [op.name for op in _compiled(module).entry.ops] == ["conv2d"]


def test_a_wrong_channel_map_is_refuted() -> None:
    """The obligation can fail: a kernel reading input channel c instead of Cg*o + c."""
    xs, ws, out, attrs = _geometry((1, 4, 6, 6), 4, (3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 4)
    module = parse(_program("f32", xs, ws, out, attrs))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lower_to_kernels, "NEST_MAX_PLANE_BYTES", -1)  # lowered, not kept an op
        (ob,) = PassManager([LowerToKernels()]).run(module).obligations
    (kernel,) = [o for o in ob.tgt.ops if o.name == "kernel"]
    maps = [[list(r) for r in m] for m in kernel.attrs["maps"]]
    assert maps[0][1][1] == 1  # the channel row reads o (Cg = 1)
    maps[0][1][1] = 0
    kernel.attrs["maps"] = maps
    (done,) = discharge([ob], jobs=1, use_cache=False)
    assert done.status == "refuted"


@pytest.mark.parametrize(
    "dtype, x, k, pad",
    [
        ("f32", (1, 30, 28, 28), (5, 5), 2),  # 30 channels: no whole vectors of them
        # planes the 16 KB bound lowered: mobilenet_v2's 112x112 (114 x 114 x 4 = 52 KB), a
        # plane of exactly 64 KB (128 x 128 x 4) and an f64 one (82 x 82 x 8 = 53.8 KB)
        ("f32", (1, 3, 112, 112), (3, 3), 1),
        ("f32", (1, 2, 126, 126), (3, 3), 1),
        ("f64", (1, 2, 80, 80), (3, 3), 1),
    ],
)
def test_small_plane_depthwise_stays_an_op_run_a_plane_at_a_time(dtype, x, k, pad) -> None:
    """A stride-1 depthwise conv whose padded plane fits NEST_MAX_PLANE_BYTES stays an op,
    which the C target folds a plane at a time from a padded copy (no pad op in the plan)."""
    c_in = x[1]
    xs, ws, out, attrs = _geometry(x, c_in, k, (1, 1), (pad,) * 4, (1, 1), c_in)
    plane = (x[2] + 2 * pad) * (x[3] + 2 * pad) * (8 if dtype == "f64" else 4)
    assert plane <= lower_to_kernels.NEST_MAX_PLANE_BYTES
    module = parse(_program(dtype, xs, ws, out, attrs))
    compiled = _compiled(module)
    assert [op.name for op in compiled.entry.ops] == ["conv2d"]
    assert "each plane padded" in c.lower(compiled)
    rng = np.random.default_rng(6)
    inputs = {"x": _values(rng, xs, dtype, 0.05), "w": _values(rng, ws, dtype, 0.05)}
    assert reference.bit_equal(c.run(compiled, inputs)[0], reference.run(module, inputs)[0])


@settings(max_examples=40)
@given(
    st.sampled_from([(3, 3), (5, 5), (3, 5), (1, 1)]),
    st.tuples(*[st.integers(0, 3)] * 4),
    st.tuples(st.integers(1, 2), st.integers(1, 2)),
    st.tuples(st.integers(5, 12), st.integers(5, 110)),
    st.sampled_from([1, 2]),
    st.sampled_from(["f32", "f64"]),
    st.integers(0, 2**32 - 1),
)
def test_depthwise_planes_are_bit_exact(k, p, d, hw, stride, dtype, seed):
    """A depthwise conv op folds each plane from a padded buffer (`conv._plane`): at stride 2
    from four phase buffers (every other row and column) when the window is wide or the rows
    short (else row by row, `_direct`); rows of at least ROWS_MIN_WIDTH outputs straight into
    the result, shorter ones through a buffer. Odd and even sizes, asymmetric padding,
    dilation, and NaN, infinities, signed zeros and subnormals in inputs and weights give the
    reference's bits."""
    h, wd = hw
    if (k[0] - 1) * d[0] + 1 > h + p[0] + p[1] or (k[1] - 1) * d[1] + 1 > wd + p[2] + p[3]:
        return
    xs, ws, out, attrs = _geometry((1, 6, h, wd), 6, k, (stride, stride), p, d, 6)
    module = parse(_program(dtype, xs, ws, out, attrs))
    compiled = _compiled(module)
    assert [op.name for op in compiled.entry.ops] == ["conv2d"]
    source = c.lower(compiled)
    phases = stride == 2 and (k[1] > conv.PHASE_MAX_KW or out[3] < conv.PHASE_MIN_WIDTH)
    assert ("split into 2 x 2 phase buffers" in source) == phases
    planes = stride == 1 or phases
    rows = planes and out[3] >= conv.ROWS_MIN_WIDTH
    assert ("a row of outputs at a time" in source) == rows
    lanes = vector_bytes() // np.dtype(NUMPY[dtype]).itemsize
    vector = (
        planes
        and not rows
        and dtype == "f32"
        and vector_bytes() in (conv.VECTOR_FOLD_BYTES, conv.VECTOR_FOLD_UNALIGNED_BYTES)
        and k[0] * k[1] >= conv.VECTOR_FOLD_MIN_TAPS
    )
    assert (f"in {vector_bytes() // 4}-lane vectors" in source) == vector
    if planes and not rows:
        # the flattened loop runs whole vectors (no scalar remainder); the extra positions
        # read the buffers' zeroed tail and are dropped. In vector types, each iteration
        # folds `step / lanes` vectors side by side, and the loop runs whole iterations.
        bound = re.search(r"for \(int64_t q = 0; q < (\d+); q(\+\+| \+= (\d+))\)", source)
        assert bound and int(bound.group(1)) % lanes == 0
        step = int(bound.group(3) or 1)
        assert (step > 1) == vector and int(bound.group(1)) % step == 0
        if vector:
            assert step // lanes <= conv.VECTOR_FOLD_MAX_UNROLL
    rng = np.random.default_rng(seed)
    inputs = {"x": _values(rng, xs, dtype, 0.1), "w": _values(rng, ws, dtype, 0.1)}
    got, want = c.run(compiled, inputs)[0], reference.run(module, inputs)[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


WIDE_WINDOWS = [
    # x, kernel, stride, padding, dilation: efficientnet_b0's 5x5 at stride 1 and 2, odd sizes
    # and asymmetric padding, a dilated 5x5, a 7x7 over a plane narrower than the window
    ((1, 5, 11, 13), (5, 5), 1, (2, 2, 2, 2), (1, 1)),
    ((1, 7, 14, 14), (5, 5), 2, (1, 2, 2, 1), (1, 1)),
    ((2, 3, 9, 23), (5, 5), 1, (0, 3, 1, 2), (1, 2)),
    ((1, 4, 6, 5), (7, 7), 1, (3, 3, 3, 3), (1, 1)),
]


@pytest.mark.parametrize("isa", ["native", "avx2"])
@pytest.mark.parametrize(
    "cfg", WIDE_WINDOWS, ids=lambda cfg: f"{cfg[0][2]}x{cfg[0][3]}-k{cfg[1][0]}"
)
def test_wide_depthwise_windows_fold_in_vector_types(cfg, isa, monkeypatch) -> None:
    """An f32 depthwise plane of a 5x5 or wider window folds in GCC vector types
    (`conv._vector_fold`): with 64-byte vectors a tap's inputs are shifted out of two aligned
    vectors, with 32-byte vectors (AVX2) loaded unaligned. The reference's bits with NaN,
    infinities, signed zeros and subnormals in inputs and weights. A shuffle one lane off, or
    a load one element off, gives other bits, which this test sees."""
    from gdv.backends.c import isa as isas

    if isa != "native" and isas.runnable(isas.ISAS[isa], set(c.toolchain.isa_features())):
        pytest.skip(f"this host cannot run {isa} code")
    monkeypatch.setenv(isas.ISA_ENV, isa)
    xs, k, s, p, d = cfg
    xs, ws, out, attrs = _geometry(xs, xs[1], k, (s, s), p, d, xs[1])
    module = parse(_program("f32", xs, ws, out, attrs))
    compiled = _compiled(module)
    assert [op.name for op in compiled.entry.ops] == ["conv2d"]
    vb = vector_bytes()
    wide = vb in (conv.VECTOR_FOLD_BYTES, conv.VECTOR_FOLD_UNALIGNED_BYTES)
    source = c.lower(compiled)
    assert (f"in {vb // 4}-lane vectors" in source) == wide
    shuffled = wide and vb == conv.VECTOR_FOLD_BYTES
    assert ("__builtin_shuffle" in source) == shuffled
    rng = np.random.default_rng(sum(xs) + k[0])
    inputs = {"x": _values(rng, xs, "f32", 0.1), "w": _values(rng, ws, "f32", 0.1)}
    want = reference.run(module, inputs)[0]
    got = c.run(compiled, inputs)[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)
    if not wide:
        return
    fold = conv._vector_fold

    def off_by_one(*args):
        # every shuffle takes the next lane of the pair, or every load starts one element on:
        # each shifted tap reads its neighbour
        def later(m: re.Match) -> str:
            return "(gdv_pm){" + ", ".join(str(int(v) + 1) for v in m.group(1).split(",")) + "}"

        def further(m: re.Match) -> str:
            return f"{m.group(1)}{int(m.group(2)) + 1})"

        text = fold(*args)
        if shuffled:
            return re.sub(r"\(gdv_pm\)\{([^}]*)\}", later, text)
        return re.sub(r"(gdv_pfu \*\)\(pb\[\d+\] \+ q \+ )(\d+)\)", further, text)

    monkeypatch.setattr(conv, "_vector_fold", off_by_one)
    bad = c.run(_compiled(module), inputs)[0]
    assert not reference.bit_equal(bad, want)


@st.composite
def channel_blocked(draw):
    """An f32 depthwise conv of 16, 32 or 48 channels (whole vectors of 16 lanes and of 8) and
    a small plane: square and oblong windows up to 5 x 5 (1 x 1 too), strides and dilations of
    1 and 2 on each axis apart, asymmetric padding, batch 1 or 2, and planes whose positions (in
    and out) and taps leave a remainder of the transposes' groups of lanes. At most 18 x 21
    padded and 14 x 17 out: (378 + 238) vectors of 64 bytes, within CHANNEL_BLOCK_MAX_BYTES."""
    kh, kw = draw(st.sampled_from([(1, 1), (3, 3), (5, 5), (3, 5), (2, 1)]))
    s = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    p = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, (kh - 1) * d[0] + 1 - p[0] - p[1]), 14))
    wd = draw(st.integers(max(1, (kw - 1) * d[1] + 1 - p[2] - p[3]), 17))
    c_in = 16 * draw(st.integers(1, 3))
    n = draw(st.integers(1, 2))
    return _geometry((n, c_in, h, wd), c_in, (kh, kw), s, p, d, c_in)


@pytest.mark.parametrize("isa", ["native", "avx2"])
@settings(max_examples=25)
@given(channel_blocked(), st.integers(0, 2**32 - 1))
def test_channel_blocked_depthwise_is_bit_exact(isa, geometry, seed) -> None:
    """An f32 depthwise conv op whose channels fill whole vectors folds `lanes` channels a
    vector, channels-last (`conv._channel_blocks`: transposed in, folded, transposed out), with
    16 lanes on AVX-512 and 8 on AVX2; every output still folds its taps left in IR order, so
    with NaN, infinities, signed zeros and subnormals in inputs and weights, at any stride,
    dilation and padding, it gives the reference's bits. (Vectors of 16 bytes, SSE2 and NEON,
    keep the plane fold, which must give the same bits.)"""
    from gdv.backends.c import isa as isas

    if isa != "native" and isas.runnable(isas.ISAS[isa], set(c.toolchain.isa_features())):
        pytest.skip(f"this host cannot run {isa} code")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(isas.ISA_ENV, isa)
        xs, ws, out, attrs = geometry
        module = parse(_program("f32", xs, ws, out, attrs))
        compiled = _compiled(module)
        assert [op.name for op in compiled.entry.ops] == ["conv2d"]
        source = c.lower(compiled)
        blocked = vector_bytes() in conv.CHANNEL_BLOCK_BYTES
        assert (f"{vector_bytes() // 4} channels a vector" in source) == blocked
        rng = np.random.default_rng(seed)
        inputs = {"x": _values(rng, xs, "f32", 0.1), "w": _values(rng, ws, "f32", 0.1)}
        got, want = c.run(compiled, inputs)[0], reference.run(module, inputs)[0]
        assert reference.bit_equal(got, want), reference.describe_difference(got, want)


CHANNEL_BLOCKED = [
    # efficientnet_b0's 5x5 over 7x7 and mobilenet_v2's 3x3 at stride 2 over 14x14 (fewer
    # channels); an oblong plane with asymmetric padding and dilation
    ((1, 32, 7, 7), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
    ((1, 48, 14, 14), (3, 3), (2, 2), (0, 1, 0, 1), (1, 1)),
    ((2, 16, 9, 13), (3, 5), (1, 2), (1, 2, 0, 3), (2, 1)),
]


@pytest.mark.parametrize("isa", ["native", "avx2"])
@pytest.mark.parametrize("cfg", CHANNEL_BLOCKED, ids=lambda cfg: f"{cfg[0][2]}x{cfg[0][3]}")
@pytest.mark.parametrize("mutation", ["stage", "tap"])
def test_channel_blocks_are_checked_against_the_reference(cfg, isa, mutation, monkeypatch):
    """The channel-blocked fold gives the reference's bits; with one transpose stage's shuffle
    masks exchanged (lanes of two channels or positions swapped) or one tap's input read one
    position on, it does not, which this comparison sees."""
    from gdv.backends.c import isa as isas

    if isa != "native" and isas.runnable(isas.ISAS[isa], set(c.toolchain.isa_features())):
        pytest.skip(f"this host cannot run {isa} code")
    monkeypatch.setenv(isas.ISA_ENV, isa)
    if vector_bytes() not in conv.CHANNEL_BLOCK_BYTES:
        pytest.skip("no channel blocks for this vector width")
    xs, k, s, p, d = cfg
    xs, ws, out, attrs = _geometry(xs, xs[1], k, s, p, d, xs[1])
    module = parse(_program("f32", xs, ws, out, attrs))
    compiled = _compiled(module)
    source = c.lower(compiled)
    assert f"{vector_bytes() // 4} channels a vector" in source
    rng = np.random.default_rng(sum(xs) + k[0])
    inputs = {"x": _values(rng, xs, "f32", 0.1), "w": _values(rng, ws, "f32", 0.1)}
    want = reference.run(module, inputs)[0]
    got = c.run(compiled, inputs)[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)
    if mutation == "stage":
        transpose = conv._transpose

        def swapped(lanes: int, ind: str) -> list[str]:
            lines = transpose(lanes, ind)
            at = [i for i, line in enumerate(lines) if "__builtin_shuffle" in line][-2:]
            lo, hi = (lines[i].split("(gdv_cm)")[1] for i in at)
            lines[at[0]] = lines[at[0]].replace(lo, hi)
            lines[at[1]] = lines[at[1]].replace(hi, lo)
            return lines

        monkeypatch.setattr(conv, "_transpose", swapped)
    else:
        blocks = conv._channel_blocks

        def misread(*args):
            text = blocks(*args)
            assert "q[1] * wv[1]" in text  # one output a step: tap 1 of output 0 at q[1]
            return text.replace("q[1] * wv[1]", "q[2] * wv[1]")

        monkeypatch.setattr(conv, "CHANNEL_BLOCK_MAX_ROW", {64: 1, 32: 1})
        monkeypatch.setattr(conv, "_channel_blocks", misread)
    bad = c.run(_compiled(module), inputs)[0]
    assert not reference.bit_equal(bad, want)


@pytest.mark.parametrize(
    "channels, hw, blocked",
    [(32, 24, True), (32, 25, False), (24, 7, False), (16, 1, True)],
)
def test_channel_blocks_need_whole_vectors_and_a_small_plane(channels, hw, blocked) -> None:
    """With 64-byte vectors: 32 channels of 24 x 24 (3x3, padding 1: 26 x 26 + 24 x 24 vectors,
    1252 x 64 bytes) fold in channel blocks; 25 x 25 (1354 vectors) is over
    CHANNEL_BLOCK_MAX_BYTES and 24 channels are not whole vectors of 16, so both keep the
    plane fold; a 1 x 1 plane (every tap but the centre in the padding) is blocked too. Each
    gives the reference's bits."""
    if vector_bytes() != 64:
        pytest.skip("the cases are sized for 16-lane vectors")
    xs, ws, out, attrs = _geometry((1, channels, hw, hw), channels, (3, 3), (1, 1), (1,) * 4,
                                   (1, 1), channels)  # fmt: skip
    assert ((hw + 2) ** 2 + hw * hw) * 64 <= conv.CHANNEL_BLOCK_MAX_BYTES or not blocked
    module = parse(_program("f32", xs, ws, out, attrs))
    compiled = _compiled(module)
    assert [op.name for op in compiled.entry.ops] == ["conv2d"]
    source = c.lower(compiled)
    assert ("16 channels a vector" in source) == blocked
    assert ("each plane padded" in source) == (not blocked)
    rng = np.random.default_rng(hw)
    inputs = {"x": _values(rng, xs, "f32", 0.05), "w": _values(rng, ws, "f32", 0.05)}
    got, want = c.run(compiled, inputs)[0], reference.run(module, inputs)[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


def test_depthwise_c_is_vector_lanes_not_the_scalar_nest() -> None:
    # a padded plane above NEST_MAX_PLANE_BYTES (130 x 130 f32): lowered, not kept an op
    xs, ws, out, attrs = _geometry((1, 8, 128, 128), 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 8)
    module = parse(_program("f32", xs, ws, out, attrs))
    compiled = _compiled(module)
    assert [op.name for op in compiled.entry.ops] == ["pad", "kernel"]
    source = c.lower(compiled)
    assert "/* conv2d" not in source  # the op's scalar loop (backends/c/conv.py)
    head = source.index("body @main.k0: outputs interleaved")
    function = source[head : source.index("\n}\n", head)]
    assert "#pragma omp simd" in function and "acc[q] = ((acc[q]) + (val))" in function
    rng = np.random.default_rng(5)
    inputs = {"x": _values(rng, xs, "f32", 0.05), "w": _values(rng, ws, "f32", 0.05)}
    assert reference.bit_equal(c.run(compiled, inputs)[0], reference.run(module, inputs)[0])


RESNET = [
    # x, output channels, kernel, stride, padding: resnet18's stem, a downsampling 3x3, the
    # 1x1 downsample shortcut, and a 1x1 stride-1 channel mix
    ((1, 3, 32, 32), 64, (7, 7), (2, 2), (3, 3, 3, 3)),
    ((1, 16, 14, 14), 32, (3, 3), (2, 2), (1, 1, 1, 1)),
    ((1, 16, 14, 14), 32, (1, 1), (2, 2), (0, 0, 0, 0)),
    ((2, 24, 7, 7), 40, (1, 1), (1, 1), (0, 0, 0, 0)),
]


@pytest.mark.parametrize("cfg", RESNET, ids=lambda cfg: f"{cfg[2]}-s{cfg[3][0]}")
def test_resnet_convs_run_as_proved_products(cfg) -> None:
    xs, o, k, s, p = cfg
    xs_, ws, out, attrs = _geometry(xs, o, k, s, p, (1, 1), 1)
    module = parse(_program("f32", xs_, ws, out, attrs))
    (ob,) = PassManager([LowerToKernels()]).run(module).obligations
    (done,) = discharge([ob], jobs=1, use_cache=False)
    assert done.status == "proved", done.reason
    compiled = _compiled(module)
    (kernel,) = _kernels(compiled)
    assert kernel.attrs["strategy"] == "product"
    rng = np.random.default_rng(11)
    inputs = {"x": _values(rng, xs_, "f32", 0.05), "w": _values(rng, ws, "f32", 0.05)}
    assert reference.bit_equal(c.run(compiled, inputs)[0], reference.run(module, inputs)[0])


CHANNEL_GROUPS = [
    # dtype, x, output channels, groups, stride, padding, dilation
    ("f32", (2, 8, 10, 9), 12, 4, (2, 1), (0, 1, 1, 0), (1, 1)),
    ("f64", (1, 6, 7, 7), 6, 2, (1, 1), (1, 1, 1, 1), (2, 1)),
    ("i32", (1, 4, 5, 6), 8, 2, (1, 1), (0, 0, 0, 0), (1, 1)),
]


@pytest.mark.parametrize("cfg", CHANNEL_GROUPS, ids=lambda cfg: f"{cfg[0]}-{cfg[1]}-g{cfg[3]}")
def test_groups_of_several_output_channels_are_proved(cfg) -> None:
    """G groups of Og > 1 output channels: a kernel over (n, g, m, y, x | c, i, j) written as
    [N, OH, OW, G, Og], a reshape to [N, OH, OW, O] and a copy kernel back to [N, O, OH, OW]."""
    dtype, xs, o, groups, s, p, d = cfg
    xs_, ws, out, attrs = _geometry(xs, o, (3, 3), s, p, d, groups)
    module = parse(_program(dtype, xs_, ws, out, attrs))
    result = PassManager([LowerToKernels()]).run(module)
    (ob,) = result.obligations
    padded = any(p)
    names = ["kernel", "reshape", "kernel"]
    assert [o.name for o in ob.tgt.ops] == (["pad", *names] if padded else names)
    (done,) = discharge([ob], jobs=1, use_cache=False)
    assert done.status == "proved", done.reason
    kernel = _kernels(result.module)[0]
    assert kernel.attrs["space"][1:3] == [groups, o // groups]
    assert kernel.attrs["out"] == [0, 3, 4, 1, 2]
    rng = np.random.default_rng(4)
    inputs = {"x": _values(rng, xs_, dtype, 0.1), "w": _values(rng, ws, dtype, 0.1)}
    want = reference.run(module, inputs)[0]
    assert reference.bit_equal(reference.run(result.module, inputs)[0], want)
    got = c.run(_compiled(module), inputs)[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


def test_a_bundle_with_depthwise_and_grouped_convs_verifies(tmp_path: Path) -> None:
    """The certificate steps of both lowerings (pad, kernel; pad, kernel, reshape, copy kernel)
    replay in the independent checker, each in a fresh process as they are used."""
    # a padded plane above NEST_MAX_PLANE_BYTES: the depthwise conv is lowered, not kept an op
    x1, w1, o1, a1 = _geometry((1, 6, 128, 128), 6, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 6)
    _, w2, o2, a2 = _geometry(o1, 4, (3, 3), (1, 1), (1, 0, 0, 1), (1, 1), 2)
    ty = lambda s: f"f32[{','.join(map(str, s))}]"  # noqa: E731
    text = (
        f"func @main(%x: {ty(x1)}, %w: {ty(w1)}, %v: {ty(w2)}) -> {ty(o2)} {{\n"
        f"  %d = conv2d(%x, %w) {{{a1}}} : {ty(o1)}\n"
        f"  %g = conv2d(%d, %v) {{{a2}}} : {ty(o2)}\n  return %g\n}}\n"
    )
    source = tmp_path / "groups.gdv"
    source.write_text(text)
    bundle = tmp_path / "groups.evidence"
    gdv = [sys.executable, "-m", "gdv"]
    made = subprocess.run(
        [*gdv, "compile", str(source), "--no-cache", "--jobs", "1", "--emit-evidence",
         str(bundle)], capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    checked = subprocess.run(
        [*gdv, "evidence", "verify", str(bundle), "--jobs", "1"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "verified:" in checked.stdout
    ir = (bundle / "ir").glob("*.gdv")
    final = max(ir).read_text()
    assert "conv2d" not in final and "reshape" in final


@pytest.mark.parametrize("isa", ["native", "avx2"])
@pytest.mark.parametrize("width", [32, 48])
def test_row_aligned_slivers_are_packed_in_vector_lanes(
    isa: str, width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 3x3 stride-1 conv whose output width is a multiple of NR: no sliver of its input
    positions crosses a row, so each full sliver's reduce step is a copy of NR adjacent
    elements at the table's first entry, under `omp simd` (GCC had left it as scalar moves:
    about 15% of a 64-channel conv's `perf` samples under AVX2's former 8-column slivers).
    Bit-exact against the reference, specials included."""
    from gdv.backends.c import isa as isas

    if isa != "native" and isas.runnable(isas.ISAS[isa], set(c.toolchain.isa_features())):
        pytest.skip(f"this host cannot run {isa} code")
    monkeypatch.setenv(isas.ISA_ENV, isa)
    xs, ws, out, attrs = _geometry((1, 8, 12, width), 24, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1)
    module = parse(_program("f32", xs, ws, out, attrs))
    passes = pipeline("c", 2, False, **c.schedule_parameters())
    compiled = PassManager(passes).run(module).module
    (kernel,) = _kernels(compiled)
    assert kernel.attrs["strategy"] == "product"
    nr = kernel.attrs["micro"][1]
    assert width % nr == 0
    source = c.lower(compiled)
    copy = (
        rf"#pragma omp simd\n\s*for \(int64_t jj = 0; jj < {nr}; jj\+\+\) \{{\n"
        r"\s*const int64_t j = j0 \+ jj;\n"
        r"\s*const float x0 = a0\[o0 \+ t0j\[j0\] \+ INT64_C\(1\) \* jj \+ t0k\[k\]\];"
    )
    assert re.search(copy, source), "the full sliver's copy is not in vector lanes"
    rng = np.random.default_rng(width)
    inputs = {"x": _values(rng, xs, "f32", 0.05), "w": _values(rng, ws, "f32", 0.05)}
    assert reference.bit_equal(c.run(compiled, inputs)[0], reference.run(module, inputs)[0])


@settings(max_examples=40)
@given(
    st.sampled_from([(3, 3), (1, 1), (2, 3), (3, 1), (3, 2)]),
    st.tuples(*[st.integers(0, 3)] * 4),
    st.integers(3, 14),
    st.integers(31, 300),
    st.integers(1, 2),
    st.sampled_from([2, 3, 5]),
    st.integers(0, 2**32 - 1),
)
def test_strided_depthwise_rows_in_vector_lanes(k, p, h, wd, n, ch, seed) -> None:
    """An f32 depthwise conv at stride 2 with a window at most PHASE_MAX_KW wide and rows of
    PHASE_MIN_WIDTH outputs or more folds each row in blocks of 16 lanes where vectors are 64
    bytes (`conv._strided_vectors`; else `_direct`): masked loads at the row's ends, a masked
    store for the last block, up to STRIDED_MAX_BLOCKS blocks. Odd and even widths, asymmetric
    padding, rows that are all padding, NaN, infinities, signed zeros and subnormals: the
    reference's bits."""
    if k[0] > h + p[0] + p[1]:
        return
    xs, ws, out, attrs = _geometry((n, ch, h, wd), ch, k, (2, 2), p, (1, 1), ch)
    module = parse(_program("f32", xs, ws, out, attrs))
    compiled = _compiled(module)
    assert [op.name for op in compiled.entry.ops] == ["conv2d"]
    source = c.lower(compiled)
    rows = conv.PHASE_MIN_WIDTH <= out[3] <= 16 * conv.STRIDED_MAX_BLOCKS
    vectors = vector_bytes() == 64 and rows
    assert ("rows in blocks of 16 lanes" in source) == vectors
    rng = np.random.default_rng(seed)
    inputs = {"x": _values(rng, xs, "f32", 0.1), "w": _values(rng, ws, "f32", 0.1)}
    got, want = c.run(compiled, inputs)[0], reference.run(module, inputs)[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


@pytest.mark.parametrize("isa", ["native", "avx2"])
def test_strided_depthwise_lanes_without_avx512(isa, monkeypatch) -> None:
    """The same blocks of 16 lanes compiled for a host without AVX-512F (the masked loads and
    stores then go lane by lane) give the same bits; and a shuffle taking the odd elements
    instead of the even ones gives other bits, which this test sees."""
    from gdv.backends.c import isa as isas

    if isa != "native" and isas.runnable(isas.ISAS[isa], set(c.toolchain.isa_features())):
        pytest.skip(f"this host cannot run {isa} code")
    monkeypatch.setenv(isas.ISA_ENV, isa)
    monkeypatch.setattr(conv, "vector_bytes", lambda *a: 64)
    xs, ws, out, attrs = _geometry((1, 3, 9, 75), 3, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 3)
    module = parse(_program("f32", xs, ws, out, attrs))
    compiled = _compiled(module)
    source = c.lower(compiled)
    assert "rows in blocks of 16 lanes" in source and "gdv_storem16(" in source
    rng = np.random.default_rng(11)
    inputs = {"x": _values(rng, xs, "f32", 0.1), "w": _values(rng, ws, "f32", 0.1)}
    want = reference.run(module, inputs)[0]
    got = c.run(compiled, inputs)[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)
    strided = conv._strided_vectors

    def odd(*args, **kwargs):
        text = strided(*args, **kwargs)
        return text.replace("even = {0, 2, 4,", "even = {1, 3, 5,") if text else text

    monkeypatch.setattr(conv, "_strided_vectors", odd)
    wrong = c.run(_compiled(module), inputs)[0]
    assert not reference.bit_equal(wrong, want)


@pytest.mark.parametrize(("h", "wd", "pad"), [(0, 40, 2), (0, 34, 2), (1, 40, 1)])
def test_strided_depthwise_rows_of_padding_only(h, wd, pad) -> None:
    """An input of no rows (or one), padded: every output row, or most, reads only the
    padding; the blocks of 16 lanes read no input there and give the reference's bits (0.0 *
    w for each tap, signed zeros in the weights included). Few special weights: a NaN or
    infinite one would make its channel's outputs NaN whatever the input rows held."""
    xs, ws, out, attrs = _geometry((2, 3, h, wd), 3, (3, 3), (2, 2), (pad,) * 4, (1, 1), 3)
    module = parse(_program("f32", xs, ws, out, attrs))
    compiled = _compiled(module)
    if vector_bytes() == 64:
        assert "rows in blocks of 16 lanes" in c.lower(compiled)
    rng = np.random.default_rng(h + wd)
    inputs = {"x": _values(rng, xs, "f32", 0.1), "w": _values(rng, ws, "f32", 0.0)}
    inputs["w"][0, 0, 0, :] = [-0.0, 0.0, -1.0]
    got, want = c.run(compiled, inputs)[0], reference.run(module, inputs)[0]
    assert got.size > 0
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)
