"""A product's edge tiles (backends/c/matmul.py): the columns past the last full sliver of a
tile with full rows run with vectors along the rows (`column_kernel`), the rows past the last
full sliver of a tile with full columns run only those rows (`micro_kernel`'s `a_step`), and
the corner goes through a full-size tile. Each element keeps its chain of steps, so every
product equals the reference bit for bit: with and without fused multiply-adds (-O3, -O2),
f32 and f64, its factors packed per call, read in place or packed when bound, and with sizes
drawn so that every path runs (the printer records which ones it emitted)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gdv.backends import c, reference
from gdv.ir.parser import parse
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline

# X^T @ W: the row factor is read with a stride (packed per call, never in place).
TRANSPOSED = """func @main(%x: T[{k},{m}], %w: T[{k},{n}]) -> T[{m},{n}] {{
  %y = dot(%x, %w) {{lhs_contract = [0], rhs_contract = [0], lhs_batch = [],
      rhs_batch = []}} : T[{m},{n}]
  return %y
}}
"""
# A 1x1 convolution: the weights are the rows, read in place (contiguous in the reduce
# dim) unless they are bound, when they are packed once.
CONV = """func @main(%x: T[1,{k},{h},{h}], %w: T[{m},{k},1,1]) -> T[1,{m},{h},{h}] {{
  %y = conv2d(%x, %w) {{stride = [1, 1], padding = [[0, 0], [0, 0]], dilation = [1, 1],
      groups = 1}} : T[1,{m},{h},{h}]
  return %y
}}
"""


def _run(text: str, level: int, bind: bool, seed: int) -> tuple[list, list, set[str]]:
    module = PassManager(pipeline("c", level, **c.schedule_parameters())).run(parse(text)).module
    exe = c.Executable(module)
    rng = np.random.default_rng(seed)
    inputs = {
        p.name: rng.standard_normal(p.type.shape).astype(p.type.dtype.np)
        for p in module.entry.params
    }
    want = reference.run(module, inputs)
    if bind:
        got = exe.bind({"w": inputs["w"]})({"x": inputs["x"]})
    else:
        got = exe(inputs)
    choices = {ch["choice"] for ch in c.printer_choices(module)}
    return got, want, choices


def _same(got: list, want: list) -> None:
    for g, w in zip(got, want, strict=True):
        assert reference.bit_equal(g, w), reference.describe_difference(g, w)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("level", [2, 3])
@pytest.mark.parametrize("bind", [False, True])
def test_a_1x1_conv_at_7x7(dtype: str, level: int, bind: bool) -> None:
    """320 channels from 96 at 7 x 7: 49 positions, so the last column sliver has 1 column
    (f32) or 1 (f64, 8 lanes); the column kernels run when the weights are packed and the
    tile's rows are whole vectors (16 on AVX-512; not AVX2's 6-row tile)."""
    text = CONV.format(k=96, m=320, h=7).replace("T[", f"{dtype}[")
    got, want, choices = _run(text, level, bind, 0)
    _same(got, want)
    module = PassManager(pipeline("c", level, **c.schedule_parameters())).run(parse(text)).module
    (op,) = [o for o in module.entry.ops if o.attrs.get("strategy") == "product"]
    mr = op.attrs["micro"][0]
    if bind and mr % op.attrs["vector"] == 0:  # column kernels need whole vectors of rows
        assert "edge columns" in choices


@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 70),
    n=st.integers(1, 70),
    k=st.sampled_from([1, 3, 64, 300]),
    dtype=st.sampled_from(["f32", "f64"]),
    level=st.sampled_from([2, 3]),
    seed=st.integers(0, 2**16),
)
def test_every_edge_of_a_transposed_product(m, n, k, dtype, level, seed) -> None:
    text = TRANSPOSED.format(k=k, m=m, n=n).replace("T[", f"{dtype}[")
    got, want, _ = _run(text, level, False, seed)
    _same(got, want)


def test_both_edge_paths_are_emitted() -> None:
    """200 x 49 from a transposed factor: an edge of rows (200 is no multiple of the tile's
    rows) and, where the tile's rows are whole vectors, an edge of columns."""
    text = TRANSPOSED.format(k=64, m=200, n=49).replace("T[", "f32[")
    got, want, choices = _run(text, 3, False, 1)
    _same(got, want)
    module = PassManager(pipeline("c", 3, **c.schedule_parameters())).run(parse(text)).module
    (op,) = [o for o in module.entry.ops if o.name == "kernel"]
    mr, nr = op.attrs["micro"]
    assert ("edge rows" in choices) == (200 % mr != 0)
    assert ("edge columns" in choices) == (mr % op.attrs["vector"] == 0 and 49 % nr != 0)
    assert "edge rows" in choices or "edge columns" in choices


def test_the_edge_of_rows_is_one_kernel_of_its_own_rows() -> None:
    """The only partial row sliver of a product is its last (M mod MR rows): it runs as one
    micro-kernel of exactly those rows (`EDGE_ROWS_EXACT`), not as a ladder of 8, 4, 2 and 1
    rows whose smallest pieces keep one or two accumulator chains (resnet18's layer 4: 49
    positions in 13-row slivers end in 10 rows, which ran as 8 + 2)."""
    from gdv.backends.c import matmul

    for m in range(40, 90):
        text = TRANSPOSED.format(k=64, m=m, n=48).replace("T[", "f32[")
        module = PassManager(pipeline("c", 3, **c.schedule_parameters())).run(parse(text)).module
        (op,) = [o for o in module.entry.ops if o.name == "kernel"]
        mr, nr = op.attrs["micro"]
        rem = m % mr
        if rem > 2 and rem not in matmul.EDGE_ROWS:
            break
    else:
        pytest.fail("no size from 40 to 89 rows leaves an edge outside EDGE_ROWS")
    source = c.lower(module)
    ladder = source[source.index("/* an edge of rows: its rows only */") :]
    assert ladder.index(f"(mr - ii >= {rem})") < ladder.index("(mr - ii >= 1)")
    assert f"_{rem}x{nr}_" in ladder.split("\n", 3)[2]  # the first rung calls the rem-row kernel
    got, want, choices = _run(text, 3, False, m)
    _same(got, want)
    assert "edge rows" in choices
