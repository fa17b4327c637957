"""An elementwise kernel reading a filled operand (a pad folded into it, `fold-pads`) through
guards on its innermost index alone runs that loop in segments: the edges with every guard, the
interior without the ones that hold there (`backends/c/nest.py`, `peeled_segments`). The
segments against the guards evaluated point by point; the C target against the reference, bit
for bit, on padded 2-D pools of every shape, stride and combiner, summed or not, in every nest
form the printer has (merged dims, peeled loops, row groups, staged stride-2 rows, reducing
nests); and the guards gone from a max pool's interior loop."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from support import sprinkle_specials

from gdv.backends import c, reference
from gdv.backends.c.nest import Nest, peeled_segments
from gdv.ir.dtypes import DType
from gdv.ir.ops.kernel import leaving_dims
from gdv.ir.parser import parse
from gdv.ir.types import TensorType
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline


def _holds(row: list[int], index: list[int], size: int) -> bool:
    return 0 <= sum(c * i for c, i in zip(row, index, strict=False)) + row[-1] < size


@given(
    extent=st.integers(1, 40),
    rows=st.lists(
        st.tuples(st.integers(-1, 3), st.integers(0, 2), st.integers(-6, 6), st.integers(1, 40)),
        min_size=1,
        max_size=3,
    ),
)
def test_segments_cover_the_loop_and_the_interior_guards_hold(extent, rows) -> None:
    """Operand k reads dim 0 of a 1-D operand at c * i1 + o * i0 + b (i0 of extent 3 outside,
    i1 the innermost loop): each guard the interior drops holds at every interior point, for
    every i0, and the segments cover 0 .. extent - 1 once, in order."""
    space = [3, extent]
    maps = [[[o, cf, b]] for cf, o, b, _ in rows]
    types = [TensorType(DType.F32, (size,)) for *_, size in rows]
    nest = Nest(space, maps, [0, 1], [], "none", {}, {k: "0.0f" for k in range(len(rows))})
    segments = peeled_segments(nest, types, 1)
    # brute force: where the guards on i1 alone hold
    alone = [
        (row, t.shape[0])
        for (row,), t in zip(maps, types, strict=True)
        if row[0] == 0 and row[1] and 0 in leaving_dims([row], space, t.shape)
    ]
    where = [i for i in range(extent) if all(_holds(r, [0, i], size) for r, size in alone)]
    if not alone or any(r[1] < 0 for r, _ in alone) or len(where) in (0, extent):
        assert segments is None
        return
    assert segments is not None
    assert segments[0][0] == 0 and segments[-1][1] == extent
    assert all(a[1] == b[0] for a, b in zip(segments, segments[1:], strict=False))
    interior = [s for s in segments if s[2].inside]
    assert len(interior) == 1 and len(segments) >= 2
    lo, hi, inner = interior[0]
    assert (lo, hi) == (where[0], where[-1] + 1), "the interior is exactly where they hold"
    for k, d in inner.inside:
        assert d in leaving_dims(maps[k], space, types[k].shape)
        assert maps[k][d][0] == 0, "a guard that also depends on i0 is never dropped"
        for i0 in range(3):
            for i1 in range(lo, hi):
                assert _holds(maps[k][d], [i0, i1], types[k].shape[d])
    for _, _, edge in segments:
        assert edge.inside in (frozenset(), inner.inside)


def _inputs(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return sprinkle_specials(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def test_a_max_pools_interior_reads_without_guards() -> None:
    """resnet18's max pool along W: the folded pad's guards leave the interior loop, and stay
    on the edges."""
    text = _windows((2, 5, 4, 112), (0, 1), (0, 1), (1, 3), (1, 1), "max", "-inf", False)
    module = PassManager(pipeline("c", 3, **c.schedule_parameters())).run(parse(text)).module
    assert any("fill" in op.attrs for op in module.entry.ops), "the pad was not folded"
    lines = c.lower(module).split("\n")

    def loop(header: str) -> list[str]:
        start = next(k for k, ln in enumerate(lines) if ln.strip() == header)
        end = next(k for k in range(start, len(lines)) if lines[k].strip() == "}")
        return lines[start:end]

    guard = "INT64_C(1) * i3) < UINT64_C(112)"
    interior = loop("for (int64_t i3 = INT64_C(1); i3 < INT64_C(111); i3++)")
    assert not any(guard in ln for ln in interior)
    for edge in ("0); i3 < INT64_C(1)", "111); i3 < INT64_C(112)"):
        assert any(guard in ln for ln in loop(f"for (int64_t i3 = INT64_C({edge}; i3++)"))
    x = _inputs((2, 5, 4, 112), 3)
    got = c.run(module, {"x": x})
    want = reference.run(parse(text), {"x": x})
    assert reference.bit_equal(got[0], want[0]), reference.describe_difference(got[0], want[0])


def _windows(shape, low, high, k, s, op: str, fill: str, reduce: bool) -> str:
    """y = neg(x) padded by (low, high) on H and W, the k[0] x k[1] windows at strides s combined
    by `op` in window order (as the ONNX importer writes a pool), and with `reduce` summed
    over W."""
    n, ch, h, w = shape
    ph, pw = h + low[0] + high[0], w + low[1] + high[1]
    oh, ow = (ph - k[0]) // s[0] + 1, (pw - k[1]) // s[1] + 1
    t = f"f32[{n},{ch},{oh},{ow}]"
    lines = [
        f"func @main(%x: f32[{n},{ch},{h},{w}]) -> "
        + (f"f32[{n},{ch},{oh}]" if reduce else t)
        + " {",
        f"  %y = neg(%x) : f32[{n},{ch},{h},{w}]",
        f"  %p = pad(%y) {{low = [0, 0, {low[0]}, {low[1]}], high = [0, 0, {high[0]}, "
        f"{high[1]}], value = {fill}}} : f32[{n},{ch},{ph},{pw}]",
    ]
    acc = None
    for a in range(k[0]):
        for b in range(k[1]):
            lim = [a + (oh - 1) * s[0] + 1, b + (ow - 1) * s[1] + 1]
            lines.append(
                f"  %s{a}_{b} = slice(%p) {{start = [0, 0, {a}, {b}], limit = [{n}, {ch}, "
                f"{lim[0]}, {lim[1]}], stride = [1, 1, {s[0]}, {s[1]}]}} : {t}"
            )
            if acc is None:
                acc = f"%s{a}_{b}"
            else:
                lines.append(f"  %m{a}_{b} = {op}({acc}, %s{a}_{b}) : {t}")
                acc = f"%m{a}_{b}"
    if reduce:
        lines.append(f"  %r = reduce_sum({acc}) {{axes = [3]}} : f32[{n},{ch},{oh}]")
        acc = "%r"
    lines += [f"  return {acc}", "}", ""]
    return "\n".join(lines)


@given(
    n=st.integers(1, 2),
    ch=st.integers(1, 4),
    h=st.integers(1, 9),
    w=st.integers(1, 36),
    low=st.tuples(st.integers(0, 2), st.integers(0, 2)),
    high=st.tuples(st.integers(0, 2), st.integers(0, 2)),
    k=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    s=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    op=st.sampled_from(["max", "min", "add"]),
    reduce=st.booleans(),
    level=st.sampled_from([2, 3]),
)
def test_padded_pools_in_every_nest_form_match_the_reference(
    n, ch, h, w, low, high, k, s, op, reduce, level
) -> None:
    """Pads folded into nests of every form the printer has (merged dims, peeled loops, row
    groups, stride-2 staging, reducing nests) give the reference's bits."""
    if h + low[0] + high[0] < k[0] or w + low[1] + high[1] < k[1]:
        return
    fill = {"max": "-inf", "min": "inf", "add": "0.0"}[op]
    text = _windows((n, ch, h, w), low, high, k, s, op, fill, reduce)
    module = PassManager(pipeline("c", level, **c.schedule_parameters())).run(parse(text)).module
    x = _inputs((n, ch, h, w), n + ch * 3 + h * 7 + w * 11)
    got = c.run(module, {"x": x})
    want = reference.run(parse(text), {"x": x})
    for g, wt in zip(got, want, strict=True):
        assert reference.bit_equal(g, wt), reference.describe_difference(g, wt)
