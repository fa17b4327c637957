"""A conv2d op's epilogue (`fuse-conv-epilogues`, IR_SPEC's conv2d `epilogue`) on the C target:
a depthwise conv's bias and activation (relu6, SiLU, a scale by a scalar parameter) fused into
the conv, on every way the printer folds a conv (channel blocks, the plane fold's rows, its
buffer and its vector types, strided rows in blocks of 16 lanes, the strided direct fold, the
row-at-a-time nest), gives the bits
of the same program compiled without the fusion (a kernel of its own for the activation), NaN,
infinities, signed zeros and subnormals included, and for the exact activations (relu6, the
scale) the reference's bits too (sigmoid's last bit is the target's: IR_SPEC section 3); and
the program's next conv reads the conv's output in place."""

# ruff: noqa: E501  (IR programs written out line by line)

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends import c, reference
from gdv.backends.c import conv
from gdv.passes import fuse_kernels, pipelines
from gdv.passes.fuse_kernels import FuseKernels
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline

SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3e38, -3e38, 1.0, -1.0, 6.0, -6.0]

ACTIVATIONS = {
    "relu6": [
        "  %lo = constant() {value = 0.0} : T",
        "  %hi = constant() {value = 6.0} : T",
        "  %m = max(%a, %lo) : T",
        "  %r = min(%m, %hi) : T",
    ],
    "silu": ["  %g = sigmoid(%a) : T", "  %r = mul(%a, %g) : T"],
    "scale": ["  %sb = broadcast(%s) {dims = []} : T", "  %r = mul(%a, %sb) : T"],
}


def _program(x: tuple, k: tuple, stride: int, pad: int, act: str) -> tuple[str, tuple]:
    n, ch, h, w = x
    oh = (h + 2 * pad - k[0]) // stride + 1
    ow = (w + 2 * pad - k[1]) // stride + 1
    out = f"f32[{n},{ch},{oh},{ow}]"
    body = [
        f"func @main(%x: f32[{n},{ch},{h},{w}], %w: f32[{ch},1,{k[0]},{k[1]}], %b: f32[{ch}], "
        f"%s: f32[]) -> {out} {{",
        f"  %c = conv2d(%x, %w) {{stride = [{stride}, {stride}], padding = [[{pad}, {pad}], "
        f"[{pad}, {pad}]], dilation = [1, 1], groups = {ch}}} : T",
        "  %bb = broadcast(%b) {dims = [1]} : T",
        "  %a = add(%c, %bb) : T",
        *ACTIVATIONS[act],
        "  return %r",
        "}",
    ]
    return "\n".join(body).replace(": T", f": {out}") + "\n", (n, ch, oh, ow)


def _values(rng: np.random.Generator, shape: tuple, share: float) -> np.ndarray:
    x = (rng.standard_normal(shape) * rng.choice([1.0, 1e-3, 30.0])).astype(np.float32)
    mask = rng.random(shape) < share
    special = np.array(SPECIAL, dtype=np.float32)
    x[mask] = special[rng.integers(0, len(SPECIAL), shape)][mask]
    return x


@pytest.fixture(autouse=True)
def _transcendentals_fused(monkeypatch):
    """SiLU is fused here too (by default a consumer with a transcendental stays a kernel,
    `TRANSCENDENTAL_IN_CONVS`), so that every epilogue the printer may meet is checked; and
    the pass runs whatever the vector width (by default only with 64-byte vectors)."""
    monkeypatch.setattr(fuse_kernels, "TRANSCENDENTAL_IN_CONVS", True)
    monkeypatch.setattr(pipelines, "CONV_EPILOGUE_MIN_VECTOR_BYTES", 0)


def _compiled(source: str):
    return PassManager(pipeline("c", 2)).run(parse(source)).module


def _unfused(source: str):
    """The program compiled without `fuse-conv-epilogues` (and `fuse-kernels` fusing freely)."""
    passes = [
        FuseKernels() if isinstance(p, FuseKernels) else p
        for p in pipeline("c", 2)
        if p.name != "fuse-conv-epilogues"
    ]
    return PassManager(passes).run(parse(source)).module


def _check(source: str, compiled, inputs: dict, act: str) -> None:
    got = c.run(compiled, inputs)[0]
    plain = c.run(_unfused(source), inputs)[0]
    assert reference.bit_equal(got, plain), reference.describe_difference(got, plain)
    if act != "silu":
        want = reference.run(parse(source), inputs)[0]
        assert reference.bit_equal(got, want), reference.describe_difference(got, want)


# (input shape, kernel, stride, padding): the printer's ways of folding a depthwise conv
PATHS = {
    "channel blocks": ((1, 32, 7, 7), (3, 3), 1, 1),
    "plane rows": ((1, 3, 50, 50), (3, 3), 1, 1),
    "plane buffer": ((2, 5, 9, 11), (3, 3), 1, 1),
    "plane vectors": ((1, 3, 12, 12), (5, 5), 1, 2),
    "strided rows": ((1, 4, 33, 33), (3, 3), 2, 1),
    "strided direct": ((1, 2, 7, 300), (3, 3), 2, 1),
    "row nest": ((1, 2, 12, 12), (9, 9), 1, 4),
}


@pytest.mark.parametrize("stores", ["chosen", "all", "none"])
@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
@pytest.mark.parametrize("path", sorted(PATHS))
def test_fused_activation_is_bit_exact(path, act, stores, monkeypatch) -> None:
    """`stores`: the printer's choice of where E runs (`conv.EPILOGUE_IN_STORES`), or E as each
    output is stored on every way that has stores, or over each plane on every way."""
    if stores != "chosen":
        every = {k: stores == "all" for k in conv.EPILOGUE_IN_STORES}
        monkeypatch.setattr(conv, "EPILOGUE_IN_STORES", every)
    x, k, stride, pad = PATHS[path]
    source, _ = _program(x, k, stride, pad, act)
    compiled = _compiled(source)
    (op,) = compiled.entry.ops
    assert op.name == "conv2d" and "epilogue" in op.attrs, [o.name for o in compiled.entry.ops]
    # the conv's function computes the activation: relu6's 6, the sigmoid, the scalar operand
    mark = {"relu6": "0x1.8000000000000p+2f", "silu": "gdv_vsigmoidf(", "scale": "e1[0]"}[act]
    conv_fn = c.lower(compiled).split("/* conv2d %")[1]
    assert mark in conv_fn.split("\n}\n")[0]
    rng = np.random.default_rng(7)
    ch = x[1]
    for share in (0.0, 0.15):
        inputs = {
            "x": _values(rng, x, share),
            "w": _values(rng, (ch, 1, *k), share),
            "b": _values(rng, (ch,), share),
            "s": np.float32(rng.choice([0.5, -2.0, np.inf, np.nan, -0.0])),
        }
        _check(source, compiled, inputs, act)


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(sorted(ACTIVATIONS)),
    st.integers(1, 2),
    st.sampled_from([1, 3, 16, 32]),
    st.integers(1, 20),
    st.integers(1, 60),
    st.sampled_from([(1, 1), (3, 3), (5, 5), (3, 1)]),
    st.integers(1, 2),
    st.integers(0, 2),
    st.integers(0, 2**32 - 1),
)
def test_fused_activation_matches_the_reference(act, n, ch, h, w, k, stride, pad, seed) -> None:
    """Any depthwise geometry (whichever way the printer folds it), any activation of the
    three: the C target's bits are the unfused program's (and the reference's, but for
    sigmoid's last bit)."""
    if h + 2 * pad < k[0] or w + 2 * pad < k[1]:
        return  # no output position: the type rule rejects it
    source, _ = _program((n, ch, h, w), k, stride, pad, act)
    compiled = _compiled(source)
    assert [o.name for o in compiled.entry.ops] == ["conv2d"]
    rng = np.random.default_rng(seed)
    inputs = {
        "x": _values(rng, (n, ch, h, w), 0.1),
        "w": _values(rng, (ch, 1, *k), 0.1),
        "b": _values(rng, (ch,), 0.1),
        "s": np.float32(rng.standard_normal()),
    }
    _check(source, compiled, inputs, act)


@pytest.mark.parametrize("isa", ["avx2", "sse2"])
def test_fused_activation_on_narrower_vectors(isa) -> None:
    """The same fused convs printed for AVX2 and SSE2 vectors (8 and 4 lanes: channel blocks
    of 8 channels on AVX2) give the reference's bits where this host runs them."""
    from gdv.backends.c import isa as isas

    if isas.runnable(isas.ISAS[isa], set(c.toolchain.isa_features())):
        pytest.skip(f"this host cannot run {isa} code")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(isas.ISA_ENV, isa)
        for x, k, stride, pad in PATHS.values():
            source, _ = _program(x, k, stride, pad, "relu6")
            compiled = _compiled(source)
            rng = np.random.default_rng(3)
            inputs = {
                "x": _values(rng, x, 0.1),
                "w": _values(rng, (x[1], 1, *k), 0.1),
                "b": _values(rng, (x[1],), 0.1),
                "s": np.float32(1.5),
            }
            _check(source, compiled, inputs, "relu6")


def test_the_next_conv_reads_the_output_in_place() -> None:
    """mobilenet_v2's pattern: a depthwise conv, its relu6, a 1x1 projection to 16 channels.
    The relu6 goes into the depthwise conv (its splat constants as literals of the epilogue),
    so the projection's column factor is the conv's output itself, read in place (no
    prologue computed in its packing), and the result is the reference's."""
    source = """func @main(%x: f32[1,32,20,20], %w: f32[32,1,3,3], %p: f32[16,32,1,1]) -> f32[1,16,20,20] {
  %c = conv2d(%x, %w) {stride = [1, 1], padding = [[1, 1], [1, 1]], dilation = [1, 1], groups = 32} : f32[1,32,20,20]
  %lo = constant() {value = 0.0} : f32[1,32,20,20]
  %hi = constant() {value = 6.0} : f32[1,32,20,20]
  %m = max(%c, %lo) : f32[1,32,20,20]
  %r = min(%m, %hi) : f32[1,32,20,20]
  %y = conv2d(%r, %p) {stride = [1, 1], padding = [[0, 0], [0, 0]], dilation = [1, 1], groups = 1} : f32[1,16,20,20]
  return %y
}
"""
    compiled = _compiled(source)
    conv, product = compiled.entry.ops
    assert conv.name == "conv2d" and len(conv.operands) == 2  # 0 and 6 are literals
    assert product.attrs.get("strategy") == "product" and conv.result in product.operands
    epi = compiled.function(conv.attrs["epilogue"])
    assert sorted(o.attrs["value"] for o in epi.ops if o.name == "constant") == [0.0, 6.0]
    text = c.lower(compiled)
    assert "full column slivers of Y are read in place" in text
    rng = np.random.default_rng(11)
    inputs = {
        "x": _values(rng, (1, 32, 20, 20), 0.1),
        "w": _values(rng, (32, 1, 3, 3), 0.1),
        "p": _values(rng, (16, 32, 1, 1), 0.0),
    }
    got, want = c.run(compiled, inputs)[0], reference.run(parse(source), inputs)[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


def test_a_transcendental_activation_stays_a_kernel(monkeypatch) -> None:
    """By default SiLU (a sigmoid) is not fused into the conv: it measured slower there."""
    monkeypatch.setattr(fuse_kernels, "TRANSCENDENTAL_IN_CONVS", False)
    source, _ = _program((1, 16, 9, 9), (3, 3), 1, 1, "silu")
    compiled = _compiled(source)
    assert [o.name for o in compiled.entry.ops] == ["conv2d", "kernel"]
    assert "epilogue" not in compiled.entry.ops[0].attrs
    source, _ = _program((1, 16, 9, 9), (3, 3), 1, 1, "relu6")
    assert [o.name for o in _compiled(source).entry.ops] == ["conv2d"]


@settings(max_examples=20, deadline=None)
@given(
    st.integers(17, 64),
    st.integers(16, 70),
    st.integers(16, 40),
    st.sampled_from(["relu6", "scale"]),
    st.integers(0, 2**32 - 1),
)
def test_projections_read_their_input_in_place(m, hw, k, act, seed) -> None:
    """A 1x1 conv of 17 to 64 output channels over the output of a fused depthwise conv reads
    its input's full column slivers in place (`COLUMNS_IN_PLACE_MAX_ROWS`), edge tiles of rows
    and columns included, and gives the reference's bits."""
    source = f"""func @main(%x: f32[1,{k},{hw},1], %w: f32[{k},1,1,1], %b: f32[{k}], %s: f32[], %p: f32[{m},{k},1,1]) -> f32[1,{m},{hw},1] {{
  %c = conv2d(%x, %w) {{stride = [1, 1], padding = [[0, 0], [0, 0]], dilation = [1, 1], groups = {k}}} : T
  %bb = broadcast(%b) {{dims = [1]}} : T
  %a = add(%c, %bb) : T
{chr(10).join(ACTIVATIONS[act])}
  %y = conv2d(%r, %p) {{stride = [1, 1], padding = [[0, 0], [0, 0]], dilation = [1, 1], groups = 1}} : f32[1,{m},{hw},1]
  return %y
}}
""".replace(": T", f": f32[1,{k},{hw},1]")
    compiled = _compiled(source)
    conv, product = compiled.entry.ops  # m k hw >= 17 * 16 * 16 >= CONV_MIN_MACS: a product
    assert conv.name == "conv2d" and product.attrs.get("strategy") == "product"
    assert "full column slivers of Y are read in place" in c.lower(compiled)
    rng = np.random.default_rng(seed)
    inputs = {
        "x": _values(rng, (1, k, hw, 1), 0.05),
        "w": _values(rng, (k, 1, 1, 1), 0.05),
        "b": _values(rng, (k,), 0.05),
        "s": np.float32(rng.standard_normal()),
        "p": _values(rng, (m, k, 1, 1), 0.0),
    }
    got, want = c.run(compiled, inputs)[0], reference.run(parse(source), inputs)[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


@pytest.mark.parametrize(
    "x, k, pad",
    [
        ((0, 16, 5, 5), (3, 3), 1),  # batch 0: nothing to fold, nothing to map
        ((1, 4, 3, 3), (0, 3), 1),  # an empty window: every sum is +0.0, E(+0.0) still applies
    ],
)
def test_empty_shapes_with_an_epilogue(x, k, pad) -> None:
    source, _ = _program(x, k, 1, pad, "relu6")
    compiled = _compiled(source)
    (op,) = compiled.entry.ops
    assert op.name == "conv2d" and "epilogue" in op.attrs
    rng = np.random.default_rng(2)
    inputs = {
        "x": _values(rng, x, 0.0),
        "w": _values(rng, (x[1], 1, *k), 0.0),
        "b": (rng.standard_normal(x[1]) * 8).astype(np.float32),
        "s": np.float32(1.0),
    }
    _check(source, compiled, inputs, "relu6")
