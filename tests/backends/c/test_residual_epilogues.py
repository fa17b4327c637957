"""A residual add fused into a product's epilogue (`fuse-epilogues`, `RESIDUALS`): the epilogue
reads a whole tensor beside each finished row panel. The C target against the reference, bit
for bit, on convolutions with bias, residual and relu and on batched products with a residual,
at every shape the strategies below draw (edge slivers, both thread splits, several reduce
blocks, strides and padding), with special values (`support.special_values`) in the residual;
and the fusion happening where the conditions hold."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from support import sprinkle_specials

from gdv.backends import c, reference
from gdv.ir.parser import parse
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline


def _conv_block(n, cin, cout, h, w, k, s, p) -> str:
    """relu(conv2d(x, w) + b + q)."""
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    t = f"f32[{n},{cout},{oh},{ow}]"
    return f"""func @main(%x: f32[{n},{cin},{h},{w}], %w: f32[{cout},{cin},{k},{k}], %b: f32[{cout}], %q: {t}) -> {t} {{
  %c = conv2d(%x, %w) {{stride = [{s}, {s}], padding = [[{p}, {p}], [{p}, {p}]], dilation = [1, 1], groups = 1}} : {t}
  %bb = broadcast(%b) {{dims = [1]}} : {t}
  %cb = add(%c, %bb) : {t}
  %cq = add(%cb, %q) : {t}
  %r = relu(%cq) : {t}
  return %r
}}
"""  # noqa: E501


def _batched(b: int, m: int, k: int, n: int, transposed: bool) -> str:
    """relu(x @ w + q), q read as given or as the transpose of a [b, n, m] parameter."""
    q = (
        f"%qt: f32[{b},{n},{m}]) -> f32[{b},{m},{n}] {{\n"
        f"  %q = transpose(%qt) {{perm = [0, 2, 1]}} : f32[{b},{m},{n}]"
        if transposed
        else f"%q: f32[{b},{m},{n}]) -> f32[{b},{m},{n}] {{"
    )
    return f"""func @main(%x: f32[{b},{m},{k}], %w: f32[{b},{k},{n}], {q}
  %y = matmul(%x, %w) : f32[{b},{m},{n}]
  %s = add(%y, %q) : f32[{b},{m},{n}]
  %r = relu(%s) : f32[{b},{m},{n}]
  return %r
}}
"""


def _check(text: str, level: int, special: str) -> list:
    """Compile `text` at -O`level` (no proofs: the printer is what is tested), run it on random
    inputs with specials in `special`, compare with the reference; the products with an
    epilogue."""
    source = parse(text)
    module = PassManager(pipeline("c", level, **c.schedule_parameters())).run(source).module
    ins = reference.random_inputs(source.entry, 7)
    ins[special] = sprinkle_specials(ins[special].copy())
    got = c.run(module, ins)
    # the final module, as the C target runs it (-O3 reassociates; -O2 is the program's bits)
    want = reference.run(module if level == 3 else source, ins)
    for g, wt in zip(got, want, strict=True):
        assert reference.bit_equal(g, wt), reference.describe_difference(g, wt)
    return [
        op
        for op in module.entry.ops
        if op.attrs.get("strategy") == "product" and "epilogue" in op.attrs
    ]


@given(
    n=st.integers(1, 2),
    cin=st.integers(1, 12),
    cout=st.integers(1, 40),
    h=st.integers(3, 9),
    w=st.integers(3, 40),
    k=st.sampled_from([1, 3]),
    s=st.integers(1, 2),
    level=st.sampled_from([2, 3]),
)
def test_convolutions_with_a_fused_residual_match_the_reference(
    n, cin, cout, h, w, k, s, level
) -> None:
    _check(_conv_block(n, cin, cout, h, w, k, s, k // 2), level, "q")


def test_a_resnet_blocks_residual_runs_in_the_convs_epilogue() -> None:
    """A layer-1 sized block (64 channels, 56 x 56, both threads, reduce blocks of 192): the
    bias, the residual and the relu are the conv's epilogue, and its bits the reference's."""
    text = _conv_block(1, 64, 64, 56, 56, 3, 1, 1)
    for level in (2, 3):
        (op,) = _check(text, level, "q")
        assert "q" in op.operands and op.attrs["split"] != "none"
        assert op.attrs["blocks"][1] < 64 * 9, "one reduce block only: the tiles never reload"


@given(
    b=st.integers(1, 3),
    m=st.integers(1, 40),
    k=st.integers(1, 300),
    n=st.integers(1, 40),
    level=st.sampled_from([2, 3]),
)
def test_batched_products_with_a_fused_residual_match_the_reference(b, m, k, n, level) -> None:
    _check(_batched(b, m, k, n, False), level, "q")


def test_a_residual_read_transposed_stays_apart() -> None:
    """A residual whose last dim does not run along the product's columns would be read a
    column at a time: it stays in a kernel of its own, and the results are the same."""
    assert _check(_batched(2, 48, 64, 48, False), 2, "q"), "the plain residual fuses"
    for op in _check(_batched(2, 48, 64, 48, True), 2, "qt"):
        assert "qt" not in op.operands
