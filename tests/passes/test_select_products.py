"""`select-products` (passes/select_products.py): products get their strategy and sizes as
schedule attributes, the ones the C printer chose itself before (the host's numbers from the
capability descriptor), with a coverage claim per product that proves, and that a blocking
skipping a remainder would refute; and a compiled
example's bundle, select-products' stage included, passes `gdv evidence verify`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends import c
from gdv.backends.c import simd
from gdv.cli import main
from gdv.driver import CompileOptions, compile_module, write_evidence
from gdv.ir import products
from gdv.ir.core import Op
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pass_names, pipeline
from gdv.validate.discharge import discharge
from gdv.validate.schedules import DimLoop, coverage_violation, nest_of, product_nest

REPO = Path(__file__).resolve().parents[2]

MLP = REPO / "examples" / "mlp.gdv"


def _products(module) -> list[Op]:
    return [op for op in module.entry.ops if op.attrs.get("strategy") == "product"]


def test_it_runs_for_compiled_targets_from_o1() -> None:
    """-O1 and -O2 of a compiled target schedule and select products (the printer decides
    nothing at any level); an interpreter and -O0 do not."""
    for level in (1, 2):
        names = pass_names("c", level)
        assert names.index("select-products") == names.index("schedule-kernels") + 1
    assert "select-products" not in pass_names("c", 0)
    assert "select-products" not in pass_names("reference", 2)
    assert "schedule-kernels" not in pass_names("reference", 1)


def test_the_sizes_are_the_hosts() -> None:
    """With the descriptor's numbers, each product's micro-tile and blocks are what
    `simd.micro_tile` and `simd.blocking` give on this host (the printer's choices before)."""
    params = c.schedule_parameters()
    module = PassManager(pipeline("c", 2, **params)).run(parse(MLP.read_text())).module
    found = _products(module)
    assert len(found) == 2
    for op in found:
        size = op.type.dtype.itemsize
        _, m, n, k = products.sizes(op.attrs, products.recorded(op.attrs))
        mr, nv, vl = simd.micro_tile(size, m, n, op.attrs["vector"] * size)
        kc, mc, nc = simd.blocking(size, mr, nv * vl, reduce=k)
        assert op.attrs["micro"] == [mr, nv * vl]
        assert op.attrs["blocks"] == [mc, kc, nc]


@pytest.mark.parametrize(
    ("k", "kc"), [(128, 128), (147, 147), (160, 160), (161, 88), (300, 104), (384, 128), (385, 104)]
)
def test_a_reduction_a_little_longer_than_kc_runs_as_one_block(k: int, kc: int) -> None:
    """KC 128 (imposed through the cache sizes: 16 x 16 tiles, the A sliver in three quarters
    of an 11 KiB L1d, `products.KC_A_RESIDENT`): K up to 160 runs
    as one reduce block (`products.KC_STRETCH`), a longer one in as many blocks as KC 128
    gives, of equal length rounded up to a multiple of 8 (`products.BALANCED_KC`)."""
    text = (
        f"func @main(%a: f32[64,{k}], %b: f32[{k},256]) -> f32[64,256] {{\n"
        "  %y = matmul(%a, %b) : f32[64,256]\n  return %y\n}\n"
    )
    passes = pipeline("c", 2, vector_bytes=64, vector_registers=32, cache_bytes=(11264, 1 << 20))
    (op,) = _products(PassManager(passes).run(parse(text)).module)
    assert op.attrs["micro"] == [16, 16]
    assert op.attrs["blocks"][1] == kc
    blocks = -(-k // kc)
    assert blocks == -(-k // 128) or k <= 160, "as many blocks as KC 128 gives"
    assert kc % 8 == 0 or blocks == 1


def test_the_coverage_claims_prove(tmp_path: Path) -> None:
    result = PassManager(pipeline("c", 2, vector_bytes=32)).run(parse(MLP.read_text()))
    ours = [o for o in result.obligations if o.id.startswith("select-products/")]
    assert len(ours) == 2 and all(o.kind == "coverage" for o in ours)
    outcomes = discharge(ours, jobs=1, cache_dir=tmp_path)
    assert [o.status for o in outcomes] == ["proved", "proved"]


def _violated(loops: list[DimLoop]) -> bool:
    s = z3.Solver()
    s.add(coverage_violation(loops))
    return s.check() == z3.sat


def test_a_wrong_blocking_is_refuted() -> None:
    attrs = {
        "space": [37, 45, 300],
        "out": [0, 1],
        "reduce": [2],
        "batch": [],
        "rows": [0],
        "cols": [1],
        "micro": [12, 8],
        "blocks": [24, 128, 40],
        "strategy": "product",
    }
    loops = nest_of(attrs)
    assert loops == product_nest(attrs) and not _violated(loops)
    for k, loop in enumerate(loops):
        if loop.extent % loop.tile == 0:
            continue
        # blocks that skip the remainder: floor(extent / block) blocks
        skipped = [*loops]
        skipped[k] = dataclasses.replace(loop, count=loop.extent // loop.tile)
        assert _violated(skipped), loop
    # a reduce loop one block short misses the last positions of every fold
    late = [*loops]
    late[3] = dataclasses.replace(loops[3], count=loops[3].tiles - 1)
    assert _violated(late)


def test_attributes_set_without_a_product_are_rejected() -> None:
    text = (
        "func @main(%a: f32[4,6], %b: f32[6,5]) -> f32[4,5] {\n"
        '  %r = kernel(%a, %b) {body = "f", space = [4, 5, 6], maps = [[[1, 0, 0, 0], '
        "[0, 0, 1, 0]], [[0, 0, 1, 0], [0, 1, 0, 0]]], out = [0, 1], reduce = [2], "
        'combiner = "add", micro = [4, 8]} : f32[4,5]\n  return %r\n}\n'
        "func @f(%x: f32[], %y: f32[]) -> f32[] {\n  %q = mul(%x, %y) : f32[]\n  return %q\n}\n"
    )
    with pytest.raises(Exception, match='strategy = "product" only'):
        parse(text)


def test_the_mlp_bundle_verifies(tmp_path: Path, capsys) -> None:
    comp = compile_module(str(MLP), CompileOptions(jobs=1, use_cache=False))
    assert comp.verdict == "proved"
    mlp_bundle = write_evidence(comp, str(tmp_path / "mlp.evidence"))
    m = json.loads((mlp_bundle / "manifest.json").read_text())
    stage = next(s for s in m["stages"] if s["pass"] == "select-products")
    assert stage["certificate"] is not None
    steps = json.loads((mlp_bundle / stage["certificate"]["file"]).read_text())["steps"]
    assert len(steps) == 2 and all(s["attrs"]["strategy"] == "product" for s in steps)
    assert len(_products(comp.module)) == 2
    choices = {(ch["kernel"], ch["choice"]) for ch in c.printer_choices(comp.module)}
    assert not any(choice in ("strategy", "micro-tile", "blocking") for _, choice in choices)
    rc = main(["evidence", "verify", str(mlp_bundle), "--jobs", "1"])
    captured = capsys.readouterr()
    assert rc == 0, captured.out + captured.err


LINEAR = """func @main(%x: f32[M, K], %w: f32[N, K]) -> f32[M, N] {
  %t = transpose(%w) {perm = [1, 0]} : f32[K, N]
  %y = matmul(%x, %t) : f32[M, N]
  return %y
}
"""


def _linear(m: int, k: int, n: int, transposed: bool = True) -> str:
    text = (
        LINEAR
        if transposed
        else LINEAR.replace("%w: f32[N, K]", "%w: f32[K, N]")
        .replace("  %t = transpose(%w) {perm = [1, 0]} : f32[K, N]\n", "")
        .replace("%x, %t", "%x, %w")
    )
    return text.replace("M", str(m)).replace("K", str(k)).replace("N", str(n))


def _product_roles(text: str, level: int = 2, bound: tuple[str, ...] = ()) -> dict:
    comp = compile_module(text, CompileOptions(target="c", level=level, jobs=1, bound=bound))
    assert comp.verdict == "proved"
    (k,) = [o for o in comp.module.entry.ops if o.name == "kernel"]
    return comp, k.attrs


def test_few_tokens_times_a_transposed_weight_run_the_weight_as_rows() -> None:
    # x @ W^T with 12 rows of x: W's rows become the product's rows (read in place along k).
    _, a = _product_roles(_linear(12, 64, 96))
    assert (a["rows"], a["cols"], a["row_factor"]) == ([1], [0], 1)
    # Not when W is [K, N] (its columns are read in place as they are), nor with many rows.
    _, b = _product_roles(_linear(12, 64, 96, transposed=False))
    assert (b["rows"], b["cols"], b["row_factor"]) == ([0], [1], 0)
    _, c = _product_roles(_linear(64, 64, 96))
    assert (c["rows"], c["cols"]) == ([0], [1])


def test_a_bound_weight_keeps_the_roles_that_fill_the_lanes() -> None:
    """With W bound (`CompileOptions.bound`: packed once, at bind time) x @ W^T keeps the
    tokens as rows and W's columns in the lanes, as with W stored [K, N]; the other parameter
    bound changes nothing."""
    _, a = _product_roles(_linear(12, 64, 96), bound=("w",))
    assert (a["rows"], a["cols"], a["row_factor"]) == ([0], [1], 0)
    _, b = _product_roles(_linear(12, 64, 96), bound=("x",))
    assert (b["rows"], b["cols"], b["row_factor"]) == ([1], [0], 1)


@given(
    st.integers(1, 16),
    st.integers(1, 80),
    st.integers(17, 70),
    st.sampled_from([2, 3]),
    st.integers(0, 1000),
)
def test_a_bound_weight_is_bit_exact_on_c_called_and_bound(m, k, n, level, seed) -> None:
    """The plan for a bound W: bit for bit the reference's, called with W and bound to it, and
    the same bits as the plan that reads W's rows in place (the fold order per output is one)."""
    from gdv.backends import reference

    comp, _ = _product_roles(_linear(m, k, n), level, bound=("w",))
    plain, _ = _product_roles(_linear(m, k, n), level)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    want = reference.run(comp.module, {"x": x, "w": w})[0]
    assert reference.bit_equal(comp(x=x, w=w)[0], want)
    assert reference.bit_equal(comp.bind(w=w)(x=x)[0], want)
    assert reference.bit_equal(plain.bind(w=w)(x=x)[0], want)


@given(
    st.integers(1, 16),
    st.integers(1, 80),
    st.integers(17, 70),
    st.sampled_from([2, 3]),
    st.integers(0, 1000),
)
def test_weights_as_rows_is_bit_exact_on_c(m: int, k: int, n: int, level: int, seed: int):
    from gdv.backends import reference

    comp, a = _product_roles(_linear(m, k, n), level)
    if level == 3 and m == 1 and "strategy" not in a:
        # -O3 leaves a matrix-vector product a reduction nest only where it sums in lanes
        assert a["lanes"] > 1
    else:
        # (with k = 1, W^T is W reshaped: its columns are contiguous and read in place as they are)
        assert a["rows"] == ([1] if k > 1 else [0])
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    got = comp(x=x, w=w)[0]
    assert reference.bit_equal(got, reference.run(comp.module, {"x": x, "w": w})[0])


@pytest.mark.parametrize(
    ("m", "k", "n", "want"), [(512, 576, 49, "rows"), (49, 576, 512, "columns")]
)
def test_threads_split_the_factor_whose_packing_is_larger(m: int, k: int, n: int, want: str):
    """Each thread packs the whole factor it does not split: with more rows than columns (a late
    CNN layer as a product: output channels by a 7x7 image) the rows are split, so each thread
    packs half the weights instead of all of them; with more columns, the columns."""
    from gdv.backends import reference

    comp, a = _product_roles(_linear(m, k, n, transposed=False))
    assert (a["rows"], a["cols"], a["split"]) == ([0], [1], want)
    rng = np.random.default_rng(m)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    got = comp(x=x, w=w)[0]
    assert reference.bit_equal(got, reference.run(comp.module, {"x": x, "w": w})[0])


# --- lanes_as_cols: a column dim filling few vector lanes runs as the rows ------------------

AVX512 = {"vector_bytes": 64, "vector_registers": 32, "chains": 8}
"""The descriptor's numbers of an AVX-512 host, given explicitly: the choice depends on the
lanes, and the tests must not depend on the host running them."""


def _conv(c_in: int, side: int, c_out: int) -> str:
    return (
        f"func @main(%x: f32[1,{c_in},{side},{side}], %w: f32[{c_out},{c_in},3,3]) -> "
        f"f32[1,{c_out},{side},{side}] {{\n"
        f"  %y = conv2d(%x, %w) {{stride = [1, 1], padding = [[1, 1], [1, 1]], "
        f"dilation = [1, 1], groups = 1}} : f32[1,{c_out},{side},{side}]\n  return %y\n}}\n"
    )


def _scheduled(text: str, level: int = 2):
    module = PassManager(pipeline("c", level, **AVX512)).run(parse(text)).module
    (k,) = _products(module)
    return module, k.attrs


def test_a_late_conv_runs_its_positions_as_rows() -> None:
    """A 3x3 conv at 7 x 7 (49 positions: 4 vectors of 16 lanes, 77% of them used) folding
    256 * 9 = 2304 positions runs the positions as the rows and the output channels in the
    lanes; at 14 x 14 (196 positions, 94% of the lanes), or folding 128 * 9 = 1152, the output
    channels stay the rows."""
    _, a = _scheduled(_conv(256, 7, 64))
    assert (a["rows"], a["cols"]) == ([2, 3], [1])
    assert a["micro"][1] == 16
    _, b = _scheduled(_conv(256, 14, 64))
    assert (b["rows"], b["cols"]) == ([1], [2, 3])
    _, c_ = _scheduled(_conv(128, 7, 64))
    assert (c_["rows"], c_["cols"]) == ([1], [2, 3])


def test_the_swap_follows_the_tile_work() -> None:
    """`lanes_as_cols` swaps exactly when the swapped tiles cover at most LANES_GAIN of the
    kept ones' padded work, and never below SWAP_MIN_REDUCE folded positions."""
    from gdv.passes import select_products as sp

    kept = products.Product(0, [], [0], [1])
    swapped = products.Product(1, [], [1], [0])
    attrs = {"space": [64, 49, 2304], "reduce": [2]}
    op = Op("r", "kernel", [], attrs, None)
    assert sp.padded_work(attrs, kept, [16, 16]) == 64 * 64
    assert sp.padded_work(attrs, swapped, [13, 16]) == 52 * 64
    assert sp.lanes_as_cols(op, kept, swapped, ([16, 16], [13, 16]))
    assert not sp.lanes_as_cols(op, kept, swapped, ([16, 16], [16, 16]))  # 64 * 64 either way
    short = Op("r", "kernel", [], {"space": [64, 49, 2047], "reduce": [2]}, None)
    assert not sp.lanes_as_cols(short, kept, swapped, ([16, 16], [13, 16]))


@settings(max_examples=10)
@given(
    st.integers(17, 70),
    st.integers(17, 60),
    st.sampled_from([2048, 2051]),
    st.booleans(),
    st.sampled_from([2, 3]),
    st.integers(0, 1000),
)
def test_swapped_products_are_bit_exact_on_c(
    m: int, n: int, k: int, transposed: bool, level: int, seed: int
) -> None:
    """Whichever roles the rule picks, the C program's result is the reference's, bit for bit,
    with the factors passed and with the weights bound (their panels packed once)."""
    from gdv.backends import reference

    module, a = _scheduled(_linear(m, k, n, transposed), level)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k) if transposed else (k, n)).astype(np.float32)
    want = reference.run(module, {"x": x, "w": w})[0]
    exe = c.Executable(module)
    assert reference.bit_equal(exe({"x": x, "w": w})[0], want)
    assert reference.bit_equal(exe.bind({"w": w})({"x": x})[0], want)


def test_the_swap_happens_for_a_product_with_few_columns() -> None:
    """The hypothesis test above covers swapped products: 64 rows by 49 columns folding 2048
    swaps (rows 49 by 64 columns), where 64 by 64 columns would not."""
    _, a = _scheduled(_linear(64, 2048, 49, transposed=False))
    assert (a["rows"], a["cols"]) == ([1], [0])
    _, b = _scheduled(_linear(64, 2048, 64, transposed=False))
    assert (b["rows"], b["cols"]) == ([0], [1])


@pytest.mark.parametrize(
    ("m", "k", "n", "side", "l2", "want"),
    [
        (128, 1152, 784, None, 1 << 20, "columns"),  # more columns: the columns
        (128, 1152, 784, "rows", 1 << 20, "rows"),  # a 576 KiB weight in 8 row slivers
        (128, 1152, 784, "rows", 4 << 20, "columns"),  # ... under a quarter of a 4 MiB L2
        (112, 1152, 784, "rows", 1 << 20, "columns"),  # ... in 7 row slivers
        (64, 576, 3136, "rows", 1 << 20, "columns"),  # a 144 KiB weight
        (512, 1152, 256, None, 1 << 20, "rows"),  # more rows: the rows
        (512, 1152, 256, "columns", 1 << 20, "columns"),  # a 1.1 MiB weight in the columns
        (512, 1152, 112, "columns", 1 << 20, "rows"),  # ... in 7 column slivers
        (1024, 1024, 1024, None, 1 << 20, "rows"),  # square, both packed: X's side
        (1024, 1024, 2048, None, 1 << 20, "rows"),  # N = 2M (SPLIT_X_PACK_RATIO)
        (1024, 1024, 2056, None, 1 << 20, "columns"),  # ... N beyond it
        (196, 64, 384, "columns", 1 << 20, "rows"),  # a small weight Y, X packed per call
        (1024, 1024, 1024, "rows", 64 << 20, "columns"),  # X a small weight: the larger side
        (1025, 1024, 1024, "rows", 64 << 20, "rows"),  # ... more rows
    ],
)
def test_threads_split_a_models_large_weight(m, k, n, side, l2, want) -> None:
    """A factor reading a model's weight of at least `SPLIT_WEIGHT_MIN_L2` of L2, in at least
    `SPLIT_WEIGHT_MIN_SLIVERS` slivers of a 16 x 16 tile, has its side split, so that each
    thread streams only its part of the weight; else the rows when M >= N /
    `SPLIT_X_PACK_RATIO` (each thread packs the whole factor it does not split, and X's packing
    costs more), or the larger side when X reads the weight."""
    from gdv.ir import products

    comp, a = _product_roles(_linear(m, k, n, transposed=False))
    body = comp.module.function(a["body"])
    p = products.recorded(a)
    assert products.split(a, p, body, side, (32 << 10, l2), 4, (16, 16)) == want


@pytest.mark.parametrize(
    ("coefs", "want"),
    [
        ([1, 0, 1], True),  # a 3-tap window at stride 1: rows i and i + 1 share 2 elements
        ([2, 0, 1], True),  # ... at stride 2: they share 1
        ([3, 0, 1], False),  # ... at stride 3: no overlap, a flattened read (3 * i + k)
        ([0, 3, 1], False),  # a column dim moving by the reduce dim's whole span (3 * j + k)
        ([0, 1, 3], True),  # j + 3 * k: j = 3, k = 0 meets j = 0, k = 1
        ([0, 1, -1], True),  # a column dim against a reversed tap
        ([0, 0, 1], False),  # along the reduce dim only
    ],
)
def test_a_window_is_a_read_whose_neighbouring_rows_overlap(coefs, want) -> None:
    """`products.windowed` on a one-dim operand read at sum(coefs * (i, j, k)) over the space
    [i: 7, j: 5, k: 3], i a row dim, j a column dim, k reduced."""
    from types import SimpleNamespace

    from gdv.ir import products

    attrs = {"space": [7, 5, 3], "reduce": [2], "maps": [[coefs]]}
    p = products.Product(row_factor=0, batch=[], rows=[0], cols=[1])
    body = SimpleNamespace(params=[SimpleNamespace(name="x")], ops=[])
    assert products.windowed(attrs, p, body, "x") is want
