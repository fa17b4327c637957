"""The C target's fast kernels are bit-exact to the reference backend (issue 5, item 3).

Contractions (backends/c/matmul.py: packed, blocked, vector micro-kernel), elementwise nests and
reductions with interleaved outputs (backends/c/nest.py) change only how the work is scheduled,
never a result. Hypothesis draws shapes that do not divide the micro-tile or the cache blocks
(including 0 and 1), batch dims, several reduce dims listed in either order, transposed and
strided operands, output layouts that need a workspace, fused prologues, vector widths of 16,
32 and 64 bytes, small cache blocks (so partial sums cross reduce blocks and rows and columns
split into several blocks), and values with NaN, infinities, signed zeros, subnormals and
magnitudes whose sums cancel (so any reordered or identity-started fold shows).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends import c, reference
from gdv.backends.c import matmul
from gdv.backends.c.nest import SIMD_MAX_STRIDE
from gdv.backends.c.simd import BLOCKING_ENV, VECTOR_BYTES_ENV
from gdv.ir import products
from gdv.ir.core import Module
from gdv.passes.manager import PassManager
from gdv.passes.schedule_kernels import ScheduleKernels
from gdv.passes.select_products import SelectProducts

SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 5e-324, -1e-45, 3.4e38, 0.5]
NP = {"f32": np.float32, "f64": np.float64}


def _values(seed: int, dtype: str, shape: tuple[int, ...], scale: float, share: float):
    """Normal values times `scale`, a `share` of them replaced by special values."""
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore"):
        x = np.asarray(rng.standard_normal(shape) * scale).astype(NP[dtype])
        special = np.array(SPECIAL, dtype=np.float64).astype(NP[dtype])
    mask = rng.random(shape) < share
    x[mask] = special[rng.integers(0, len(special), shape)][mask]
    return x


@contextlib.contextmanager
def _env(**values: str | None):
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def scheduled(module: Module) -> Module:
    """`module` scheduled as the C pipeline schedules it, with the numbers of the capability
    descriptor in the current environment (`GDV_C_VECTOR_BYTES`, `GDV_C_BLOCKING`): products
    get their `strategy = "product"` attributes from select-products, which the printer
    follows. Other kernels keep their (unscheduled) nests, as the tests wrote them."""
    params = c.schedule_parameters()
    params.pop("fma")  # for reassociate-reductions, which these tests do not run
    passes = [ScheduleKernels(vector_bytes=params["vector_bytes"]), SelectProducts(**params)]
    done = PassManager(passes).run(module).module
    fns = []
    for before, after in zip(module.functions, done.functions, strict=True):
        pairs = zip(before.ops, after.ops, strict=True)
        ops = [b if "strategy" not in a.attrs else a for b, a in pairs]
        fns.append(dataclasses.replace(before, ops=ops))
    return Module(fns, module.filename)


def _check(text: str, inputs: dict[str, np.ndarray], **env: str | None) -> str:
    """Run `text` (scheduled: `scheduled`) on both backends and compare bit for bit; the C
    source."""
    module = parse(text)
    with _env(**env):
        module = scheduled(module)
        source = c.lower(module)
        got = c.run(module, inputs)
    want = reference.run(module, inputs)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert reference.bit_equal(g, w), (
            f"result {k}:\n{reference.describe_difference(g, w)}\n{text}"
        )
    return source


def _ty(dtype: str, shape) -> str:
    return f"{dtype}[{','.join(map(str, shape))}]"


# --- contractions -----------------------------------------------------------------------------

BODIES = {
    # name: (body ops using %pa, %pb, %pc; whether %pc is used)
    "plain": ("%q = mul(%pa, %pb)", False),
    "swapped": ("%q = mul(%pb, %pa)", False),
    "prologue": ("%s = add(%pa, %pc)\n  %t = relu(%s)\n  %q = mul(%t, %pb)", True),
    "both sides": (
        "%s = sub(%pa, %pc)\n  %t = neg(%pb)\n  %u = max(%t, %pc)\n  %q = mul(%u, %s)", True
    ),
    "constant": ("%h = constant() {value = 0.5}\n  %s = mul(%pa, %h)\n  %q = mul(%pb, %s)", False),
}  # fmt: skip


@st.composite
def contractions(draw, big: bool = False):
    """A contraction kernel's text and inputs (see the module docstring)."""
    dtype = draw(st.sampled_from(["f32", "f64"]))
    size = st.integers(0, 70) if not big else st.sampled_from([97, 131, 67, 40])
    roles = {"i": draw(size), "j": draw(size), "k": draw(size)}
    if draw(st.booleans()):
        roles["b"] = draw(st.integers(0, 3))
    if draw(st.booleans()):
        roles["l"] = draw(st.integers(0, 4))  # a second reduce dim
    names = draw(st.permutations(list(roles)))
    dim = {r: d for d, r in enumerate(names)}
    n = len(names)
    space = [roles[r] for r in names]
    out_roles = draw(st.permutations([r for r in ("b", "i", "j") if r in roles]))
    red_roles = draw(st.permutations([r for r in ("k", "l") if r in roles]))
    k_stride, k_offset = draw(st.sampled_from([(1, 0), (1, 0), (2, 1), (3, 0)]))

    def row(r: str, coef: int = 1, const: int = 0) -> list[int]:
        return [coef if d == dim[r] else 0 for d in range(n)] + [const]

    def operand(rs: list[str]) -> tuple[list[list[int]], tuple[int, ...]]:
        order = draw(st.permutations(rs))  # a transposed layout when not in the given order
        rows, shape = [], []
        for r in order:
            if r == "k":
                rows.append(row(r, k_stride, k_offset))
                shape.append(max(0, k_stride * (roles[r] - 1) + k_offset + 1))
            else:
                rows.append(row(r))
                shape.append(roles[r])
        return rows, tuple(shape)

    extra = [r for r in ("b", "l") if r in roles]
    amap, ashape = operand(["i", "k", *extra])
    bmap, bshape = operand(["k", "j", *extra])
    body_name = draw(st.sampled_from(sorted(BODIES)))
    ops, uses_c = BODIES[body_name]
    cmap, cshape = operand([draw(st.sampled_from(["k", "i"]))])
    maps = [amap, bmap] + ([cmap] if uses_c else [])
    shapes = [ashape, bshape] + ([cshape] if uses_c else [])
    rshape = tuple(roles[r] for r in out_roles)
    out = [dim[r] for r in out_roles]
    red = [dim[r] for r in red_roles]
    names_in = ["a", "b", "c"][: len(maps)]
    params = ", ".join(f"%{v}: {_ty(dtype, s)}" for v, s in zip(names_in, shapes, strict=True))
    bparams = ", ".join(f"%p{v}: {dtype}[]" for v in names_in)
    ops = "\n  ".join(
        line if " : " in line else f"{line} : {dtype}[]" for line in ops.split("\n  ")
    )
    text = (
        f"func @main({params}) -> {_ty(dtype, rshape)} {{\n"
        f'  %r = kernel({", ".join("%" + v for v in names_in)}) {{body = "f", space = {space}, '
        f'maps = {maps}, out = {out}, reduce = {red}, combiner = "add"}} : {_ty(dtype, rshape)}\n'
        f"  return %r\n}}\nfunc @f({bparams}) -> {dtype}[] {{\n  {ops}\n  return %q\n}}"
    )
    scale = draw(st.sampled_from([1.0, 1e-3, 1e30]))
    share = draw(st.sampled_from([0.0, 0.0, 0.05, 0.3]))
    seed = draw(st.integers(0, 2**32 - 1))
    inputs = {
        v: _values(seed + k, dtype, s, scale, share)
        for k, (v, s) in enumerate(zip(names_in, shapes, strict=True))
    }
    return text, inputs


def _is_contraction(text: str) -> bool:
    module = parse(text)
    op = module.entry.ops[0]
    return products.find(op.attrs, op.type.dtype, module.function(op.attrs["body"])) is not None


@settings(max_examples=45)
@given(
    case=contractions(),
    vector=st.sampled_from(["64", "32", "16"]),
    blocking=st.sampled_from([None, "8,16,32", "5,3,17", "64,32,64"]),
)
def test_contractions_bit_exact(case, vector: str, blocking: str | None) -> None:
    text, inputs = case
    _check(text, inputs, **{VECTOR_BYTES_ENV: vector, BLOCKING_ENV: blocking})


@settings(max_examples=4)
@given(case=contractions(big=True))
def test_bigger_contractions_bit_exact(case) -> None:
    text, inputs = case
    _check(text, inputs)


def _matmul_text(dtype: str, m: int, n: int, k: int, body: str = "%q = mul(%x, %y)") -> str:
    return (
        f"func @main(%a: {dtype}[{m},{k}], %b: {dtype}[{k},{n}]) -> {dtype}[{m},{n}] {{\n"
        f'  %r = kernel(%a, %b) {{body = "f", space = [{m}, {n}, {k}], '
        f"maps = [[[1, 0, 0, 0], [0, 0, 1, 0]], [[0, 0, 1, 0], [0, 1, 0, 0]]], out = [0, 1], "
        f'reduce = [2], combiner = "add"}} : {dtype}[{m},{n}]\n  return %r\n}}\n'
        f"func @f(%x: {dtype}[], %y: {dtype}[]) -> {dtype}[] {{\n  {body} : {dtype}[]\n"
        "  return %q\n}"
    )


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_default_blocking_crosses_reduce_blocks(dtype: str) -> None:
    """K beyond the default reduce block, M over several row blocks and threads, N over a
    column block: the partial sums go through the result in order."""
    m, n, k = 97, 131, 1100
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((m, k)) * 1e3).astype(NP[dtype])
    b = rng.standard_normal((k, n)).astype(NP[dtype])
    source = _check(_matmul_text(dtype, m, n, k), {"a": a, "b": b})
    assert "micro-kernel" in source


@pytest.mark.parametrize("vector", ["64", "16"])
@pytest.mark.parametrize("m", [1, 3, 8, 16, 17])
def test_few_rows_read_both_factors_in_place(m: int, vector: str) -> None:
    """A product with at most DIRECT_MAX_ROWS rows hands full column slivers of B and full row
    slivers of A to the micro-kernel in place (K crossing reduce blocks, edge slivers packed,
    NaN, infinities and signed zeros among the values); more rows, or a factor not adjacent
    along what the micro-kernel steps through, packs."""
    n, k = 45, 1100
    rng = np.random.default_rng(m)
    a = (rng.standard_normal((m, k)) * 1e3).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    b[3, :4] = [np.nan, np.inf, -np.inf, -0.0]
    a[0, 7] = -0.0
    a[-1, 9] = np.inf
    source = _check(_matmul_text("f32", m, n, k), {"a": a, "b": b}, **{VECTOR_BYTES_ENV: vector})
    few = m <= matmul.DIRECT_MAX_ROWS
    # (the row factor also when there are few columns: n = 45)
    rows_in_place = few or n <= matmul.IN_PLACE_ROWS_MAX_COLS
    assert rows_in_place
    assert ("column slivers of Y are read in place" in source) == few
    assert ("row slivers of X are read in place" in source) == rows_in_place
    # B^T stored [n, k]: a column of B is a row of the operand, one step of j moves k elements.
    text = (
        _matmul_text("f32", m, n, k)
        .replace(f"%b: f32[{k},{n}]", f"%b: f32[{n},{k}]")
        .replace("[[0, 0, 1, 0], [0, 1, 0, 0]]", "[[0, 1, 0, 0], [0, 0, 1, 0]]")
    )
    source = _check(text, {"a": a, "b": np.ascontiguousarray(b.T)})
    assert "micro-kernel" in source and "column slivers of Y are read in place" not in source
    assert ("row slivers of X are read in place" in source) == rows_in_place
    # A^T stored [k, m]: one step of k moves m elements, so A is packed (unless m is 1).
    text = (
        _matmul_text("f32", m, n, k)
        .replace(f"%a: f32[{m},{k}]", f"%a: f32[{k},{m}]")
        .replace("[[1, 0, 0, 0], [0, 0, 1, 0]]", "[[0, 0, 1, 0], [1, 0, 0, 0]]")
    )
    source = _check(text, {"a": np.ascontiguousarray(a.T), "b": b})
    assert ("row slivers of X are read in place" in source) == (m == 1)
    assert ("column slivers of Y are read in place" in source) == few


def test_many_rows_and_columns_pack_the_row_factor() -> None:
    """More than DIRECT_MAX_ROWS rows and more than IN_PLACE_ROWS_MAX_COLS columns: both
    factors are packed (the edge slivers too); bit-exact."""
    m, n, k = 17, matmul.IN_PLACE_ROWS_MAX_COLS + 3, 300
    rng = np.random.default_rng(5)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    a[2, 3], b[4, 5] = -0.0, np.inf
    source = _check(_matmul_text("f32", m, n, k), {"a": a, "b": b})
    assert "micro-kernel" in source and "read in place" not in source


def test_fold_starts_from_the_first_product_not_plus_zero() -> None:
    """All products -0.0: a fold started from +0.0 gives +0.0; the IR's gives -0.0. And an empty
    reduction gives +0.0."""
    a = np.full((17, 3), -0.0, np.float32)
    a[0, :] = 1.0
    b = np.full((3, 33), 0.0, np.float32)
    b[:, 5] = -0.0
    _check(_matmul_text("f32", 17, 33, 3), {"a": a, "b": b})
    got = c.run(scheduled(parse(_matmul_text("f32", 17, 33, 3))), {"a": a, "b": b})[0]
    assert np.signbit(got[1, 0]) and not np.signbit(got[0, 0])
    empty = c.run(
        scheduled(parse(_matmul_text("f32", 3, 4, 0))),
        {"a": np.zeros((3, 0), np.float32), "b": np.zeros((0, 4), np.float32)},
    )[0]
    assert not np.signbit(empty).any() and (empty == 0).all()


def test_sequential_order_is_kept_where_reassociation_would_differ() -> None:
    """1e8 + 1 - 1e8 ... : folded left in f32 the ones vanish; a pairwise or blocked sum would
    keep some. One row, many columns, so vector lanes hold different outputs, never one sum."""
    k = 600
    a = np.ones((1, k), np.float32)
    b = np.tile(np.array([[1e8], [1.0], [1.0], [-1e8]], np.float32), (k // 4, 40))
    module = scheduled(parse(_matmul_text("f32", 1, 40, k)))
    got = c.run(module, {"a": a, "b": b})[0]
    want = np.float32(0.0)
    for v in b[:, 0]:
        want = np.float32(want + v)
    assert got[0, 0] == want
    _check(_matmul_text("f32", 1, 40, k), {"a": a, "b": b}, **{BLOCKING_ENV: "7,16,16"})


def test_recognised_and_refused_shapes() -> None:
    """Which kernels take the packed path: add folds of a product whose factors split the out
    dims; not max folds, not sums of non-products, not matrix-vector products."""
    assert _is_contraction(_matmul_text("f32", 4, 5, 6))
    assert _is_contraction(_matmul_text("f64", 4, 5, 6, "%q = mul(%y, %x)"))
    assert not _is_contraction(_matmul_text("f32", 4, 5, 6, "%q = add(%x, %y)"))
    assert not _is_contraction(_matmul_text("f32", 4, 5, 6).replace('"add"', '"max"'))
    gemv = (
        "func @main(%a: f32[4,6], %v: f32[6]) -> f32[4] {\n"
        '  %r = kernel(%a, %v) {body = "f", space = [4, 6], maps = [[[1, 0, 0], [0, 1, 0]], '
        '[[0, 1, 0]]], out = [0], reduce = [1], combiner = "add"} : f32[4]\n  return %r\n}\n'
        "func @f(%x: f32[], %y: f32[]) -> f32[] {\n  %q = mul(%x, %y) : f32[]\n  return %q\n}"
    )
    assert not _is_contraction(gemv)
    rng = np.random.default_rng(2)
    _check(
        gemv,
        {"a": rng.standard_normal((4, 6)).astype(np.float32), "v": np.ones(6, np.float32)},
    )


# --- reductions and elementwise nests -----------------------------------------------------------

REDUCE_BODIES = {
    "value": ("", "%pa"),
    "square": ("%q = mul(%pa, %pa)", "%q"),
    "centred": ("%q = sub(%pa, %pb)", "%q"),  # x - m[out]: softmax's and layer_norm's shape
}


@st.composite
def reductions(draw):
    """A reduction kernel (add / max / min over one or more dims in a listed order)."""
    dtype = draw(st.sampled_from(["f32", "f64", "i32"]))
    rank = draw(st.sampled_from([2, 2, 3]))
    shape = [draw(st.sampled_from([0, 1, 2, 5, 17, 40, 70])) for _ in range(rank)]
    if rank == 3:
        shape = [min(s, 17) for s in shape]
    red = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    out = [d for d in range(rank) if d not in red]
    combiner = draw(st.sampled_from(["add", "max", "min"]))
    ops, ret = REDUCE_BODIES[draw(st.sampled_from(sorted(REDUCE_BODIES)))]
    unit = [[int(j == d) for j in range(rank)] + [0] for d in range(rank)]
    maps = [unit]
    shapes = [tuple(shape)]
    if "%pb" in ops:
        maps.append([unit[d] for d in out])
        shapes.append(tuple(shape[d] for d in out))
    names = ["a", "b"][: len(maps)]
    rshape = tuple(shape[d] for d in out)
    order = draw(st.permutations(list(range(rank))))
    params = ", ".join(f"%{v}: {_ty(dtype, s)}" for v, s in zip(names, shapes, strict=True))
    bparams = ", ".join(f"%p{v}: {dtype}[]" for v in names)
    op_line = f"  {ops} : {dtype}[]\n" if ops else ""
    text = (
        f"func @main({params}) -> {_ty(dtype, rshape)} {{\n"
        f'  %r = kernel({", ".join("%" + v for v in names)}) {{body = "f", space = {shape}, '
        f'maps = {maps}, out = {out}, reduce = {red}, combiner = "{combiner}", '
        f"order = {list(order)}}} : {_ty(dtype, rshape)}\n"
        f"  return %r\n}}\nfunc @f({bparams}) -> {dtype}[] {{\n{op_line}  return {ret}\n}}"
    )
    seed = draw(st.integers(0, 2**32 - 1))
    if dtype == "i32":
        rng = np.random.default_rng(seed)
        inputs = {
            v: rng.integers(-(2**31), 2**31, s, dtype=np.int64).astype(np.int32)
            for v, s in zip(names, shapes, strict=True)
        }
    else:
        scale = draw(st.sampled_from([1.0, 1e30]))
        share = draw(st.sampled_from([0.0, 0.1, 0.5]))
        inputs = {
            v: _values(seed + k, dtype, s, scale, share)
            for k, (v, s) in enumerate(zip(names, shapes, strict=True))
        }
    return text, inputs


@settings(max_examples=45)
@given(case=reductions(), vector=st.sampled_from(["64", "32", "16"]))
def test_reductions_bit_exact(case, vector: str) -> None:
    text, inputs = case
    _check(text, inputs, **{VECTOR_BYTES_ENV: vector})


def test_max_min_in_lanes_equal_the_ordered_fold_on_zeros_and_nans() -> None:
    """Rows of signed zeros with a NaN here and there, folded along the contiguous dim (the lanes
    path, which reorders: exact for max and min only)."""
    rng = np.random.default_rng(3)
    x = np.where(rng.random((9, 70)) < 0.5, -0.0, 0.0).astype(np.float32)
    x[2, 69] = np.nan
    x[4, 0] = np.nan
    x[5, :] = -0.0
    x[6, :] = 0.0
    x[6, 40] = -0.0
    for combiner in ("max", "min"):
        text = (
            "func @main(%a: f32[9,70]) -> f32[9] {\n"
            '  %r = kernel(%a) {body = "f", space = [9, 70], maps = [[[1, 0, 0], [0, 1, 0]]], '
            f'out = [0], reduce = [1], combiner = "{combiner}"}} : f32[9]\n  return %r\n}}\n'
            "func @f(%pa: f32[]) -> f32[] {\n  return %pa\n}"
        )
        source = _check(text, {"a": x})
        assert "lane[" in source


@settings(max_examples=40)
@given(
    dtype=st.sampled_from(["f32", "f64"]),
    cols=st.integers(1, 75),
    seed=st.integers(0, 2**32 - 1),
)
def test_max_min_lanes_on_integer_keys_match_the_fold(dtype: str, cols: int, seed: int) -> None:
    """f32/f64 max and min in lanes fold each value's integer key (its place in the total
    order, NaN past every end): infinities, both zeros, subnormals, and NaNs of either sign and
    any payload give the reference's result (all NaNs one value)."""
    rng = np.random.default_rng(seed)
    width = {"f32": np.uint32, "f64": np.uint64}[dtype]
    with np.errstate(over="ignore"):  # beyond f32: infinities, wanted too
        x = (rng.standard_normal((7, cols)) * 10.0 ** rng.integers(-40, 40, (7, cols))).astype(
            NP[dtype]
        )
    special = np.array([0.0, -0.0, np.inf, -np.inf, 5e-324, -5e-324], np.float64).astype(NP[dtype])
    pick = rng.random(x.shape)
    x[pick < 0.3] = special[rng.integers(0, len(special), x.shape)][pick < 0.3]
    bits = x.view(width)
    nan = rng.random(x.shape) < 0.04
    sign = width(1) << width(8 * x.itemsize - 1)
    payload = rng.integers(1, 1 << 20, x.shape).astype(width)
    expo = np.array([0x7F800000], np.uint32)[0] if dtype == "f32" else width(0x7FF0000000000000)
    nans = expo | payload | np.where(rng.random(x.shape) < 0.5, sign, width(0))
    bits[nan] = nans[nan]
    for combiner in ("max", "min"):
        text = (
            f"func @main(%a: {dtype}[7,{cols}]) -> {dtype}[7] {{\n"
            f'  %r = kernel(%a) {{body = "f", space = [7, {cols}], maps = [[[1, 0, 0], '
            f'[0, 1, 0]]], out = [0], reduce = [1], combiner = "{combiner}"}} : {dtype}[7]\n'
            f"  return %r\n}}\nfunc @f(%pa: {dtype}[]) -> {dtype}[] {{\n  return %pa\n}}"
        )
        source = _check(text, {"a": x})
        # rows no further apart than SIMD_MAX_STRIDE fold side by side in lanes instead
        assert (f"gdv_key_{combiner}_" in source) == (cols > SIMD_MAX_STRIDE)


@pytest.mark.parametrize("op", ["reduce_max", "reduce_min", "reduce_sum"])
@pytest.mark.parametrize("window", [2, 3])
def test_pooling_windows_fold_in_vector_lanes(op: str, window: int) -> None:
    """A pooling window (reshape then reduce over the window axes) folds adjacent outputs
    together in vector lanes although their inputs are `window` apart; each output still folds
    its window in order, so signed zeros, NaN, infinities and cancelling sums are exact."""
    h, w = 4 * window, 37 * window
    rng = np.random.default_rng(window)
    x = (rng.standard_normal((2, 3, h, w)) * 1e8).astype(np.float32)
    pick = rng.random(x.shape)
    x[pick < 0.2] = -0.0
    x[(pick > 0.2) & (pick < 0.3)] = 0.0
    x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    oh, ow = h // window, w // window
    text = (
        f"func @main(%x: f32[2,3,{h},{w}]) -> f32[2,3,{oh},{ow}] {{\n"
        f"  %v = reshape(%x) : f32[2,3,{oh},{window},{ow},{window}]\n"
        f"  %p = {op}(%v) {{axes = [3, 5]}} : f32[2,3,{oh},{ow}]\n  return %p\n}}"
    )
    source = _check(text, {"x": x})
    pool = source[source.index("outputs interleaved") :]
    assert "#pragma omp simd" in pool.split("\n}\n")[0]


def test_sum_along_rows_keeps_each_rows_order() -> None:
    """1e8, 1, 1, -1e8 repeated along each row: the left fold loses the ones, any reassociation
    keeps some. Rows are interleaved, never split."""
    row = np.tile(np.array([1e8, 1.0, 1.0, -1e8], np.float32), 64)
    x = np.stack([row, np.roll(row, 1), np.roll(row, 2)] * 11)
    text = (
        f"func @main(%a: f32[{x.shape[0]},{x.shape[1]}]) -> f32[{x.shape[0]}] {{\n"
        f'  %r = kernel(%a) {{body = "f", space = [{x.shape[0]}, {x.shape[1]}], '
        f'maps = [[[1, 0, 0], [0, 1, 0]]], out = [0], reduce = [1], combiner = "add"}} : '
        f"f32[{x.shape[0]}]\n  return %r\n}}\nfunc @f(%pa: f32[]) -> f32[] {{\n  return %pa\n}}"
    )
    _check(text, {"a": x})


ELEMENTWISE = ["add", "sub", "mul", "div", "max", "min"]


@settings(max_examples=15)
@given(
    dtype=st.sampled_from(["f32", "f64"]),
    rows=st.sampled_from([0, 1, 3, 17]),
    cols=st.sampled_from([0, 1, 15, 16, 33, 70]),
    transposed=st.booleans(),
    name=st.sampled_from(ELEMENTWISE),
    seed=st.integers(0, 2**32 - 1),
    vector=st.sampled_from(["64", "32", "16"]),
)
def test_elementwise_nests_bit_exact(dtype, rows, cols, transposed, name, seed, vector) -> None:
    """A fused elementwise body (op, sqrt, relu, a broadcast row, a per-row factor computed
    once per row before the inner loop) over contiguous and transposed operands: neither the
    `omp simd` loop nor the hoisting changes anything."""
    bmap = "[[0, 1, 0], [1, 0, 0]]" if transposed else "[[1, 0, 0], [0, 1, 0]]"
    bshape = (cols, rows) if transposed else (rows, cols)
    t = _ty(dtype, (rows, cols))
    text = (
        f"func @main(%a: {t}, %b: {_ty(dtype, bshape)}, %c: {_ty(dtype, (cols,))}, "
        f"%d: {_ty(dtype, (rows,))}) -> {t} {{\n"
        f'  %r = kernel(%a, %b, %c, %d) {{body = "f", space = [{rows}, {cols}], maps = '
        f"[[[1, 0, 0], [0, 1, 0]], {bmap}, [[0, 1, 0]], [[1, 0, 0]]], out = [0, 1], "
        f'reduce = [], combiner = "none"}} : {t}\n  return %r\n}}\n'
        f"func @f(%x: {dtype}[], %y: {dtype}[], %z: {dtype}[], %e: {dtype}[]) -> {dtype}[] {{\n"
        f"  %u = {name}(%x, %y) : {dtype}[]\n  %v = sqrt(%u) : {dtype}[]\n"
        f"  %w = relu(%v) : {dtype}[]\n  %q = mul(%w, %z) : {dtype}[]\n"
        f"  %h = sqrt(%e) : {dtype}[]\n  %g = add(%h, %e) : {dtype}[]\n"
        f"  %o = mul(%q, %g) : {dtype}[]\n  return %o\n}}"
    )
    inputs = {
        "a": _values(seed, dtype, (rows, cols), 1.0, 0.2),
        "b": _values(seed + 1, dtype, bshape, 1.0, 0.2),
        "c": _values(seed + 2, dtype, (cols,), 1.0, 0.2),
        "d": _values(seed + 3, dtype, (rows,), 1.0, 0.2),
    }
    source = _check(text, inputs, **{VECTOR_BYTES_ENV: vector})
    if rows and cols > 1 and not transposed:  # the per-row factor sits before the vector loop
        assert source.index("/* %g */") < source.index("#pragma omp simd")


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("dtype", ["f32", "f64", "i32"])
def test_fold_starts_change_no_value(axis: int, dtype: str) -> None:
    """Lines of all -0.0, all negative, all positive, all -inf / +inf, one NaN, and extents 1
    and 0, along either dim (interleaved outputs, strided chains, max/min lanes): a fold that
    started from +0.0, or from anything but the combiner's absorbing value, shows."""
    np_t = {"f32": np.float32, "f64": np.float64, "i32": np.int32}[dtype]
    for extent in (37, 1, 0):
        lines = [
            np.full(extent, -0.0),
            -np.arange(1, extent + 1, dtype=np.float64),
            np.arange(1, extent + 1, dtype=np.float64),
            np.full(extent, -np.inf),
            np.full(extent, np.inf),
            np.where(np.arange(extent) == extent // 2, np.nan, 1.0),
        ]
        if dtype == "i32":
            lines = [
                np.full(extent, -(2**31)),
                np.full(extent, 2**31 - 1),
                -np.arange(1, extent + 1),
                np.arange(1, extent + 1),
            ]
        x = np.stack(lines).astype(np_t)
        if axis == 0:
            x = np.ascontiguousarray(x.T)
        shape = list(x.shape)
        out = 1 - axis
        for combiner in ("add", "max", "min"):
            text = (
                f"func @main(%a: {_ty(dtype, shape)}) -> {dtype}[{shape[out]}] {{\n"
                f'  %r = kernel(%a) {{body = "f", space = {shape}, maps = [[[1, 0, 0], '
                f'[0, 1, 0]]], out = [{out}], reduce = [{axis}], combiner = "{combiner}"}} : '
                f"{dtype}[{shape[out]}]\n  return %r\n}}\n"
                f"func @f(%pa: {dtype}[]) -> {dtype}[] {{\n  return %pa\n}}"
            )
            _check(text, {"a": x})


def test_converting_prologue_packs_in_the_accumulation_dtype() -> None:
    """f64 operands converted to f32 in the body, multiplied and summed in f32 (as a dot with
    acc = f32 lowers): the packing converts, the micro-kernel folds in f32."""
    m, n, k = 37, 45, 300
    text = (
        f"func @main(%a: f64[{m},{k}], %b: f64[{k},{n}]) -> f32[{m},{n}] {{\n"
        f'  %r = kernel(%a, %b) {{body = "f", space = [{m}, {n}, {k}], '
        f"maps = [[[1, 0, 0, 0], [0, 0, 1, 0]], [[0, 0, 1, 0], [0, 1, 0, 0]]], out = [0, 1], "
        f'reduce = [2], combiner = "add"}} : f32[{m},{n}]\n  return %r\n}}\n'
        "func @f(%x: f64[], %y: f64[]) -> f32[] {\n  %u = convert(%x) : f32[]\n"
        "  %v = convert(%y) : f32[]\n  %q = mul(%u, %v) : f32[]\n  return %q\n}"
    )
    inputs = {"a": _values(5, "f64", (m, k), 1e3, 0.05), "b": _values(6, "f64", (k, n), 1.0, 0.05)}
    source = _check(text, inputs, **{BLOCKING_ENV: "64,16,32"})
    assert "contraction" in source
