"""The analytical model of `gdv.ir.products` (micro-kernel shape and cache blocking): the
constraints its docstrings state hold for every machine description, and its choices for the
four host classes of backends/c/isa.py are the ones the README's table gives."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdv.ir import products

WIDTHS = st.sampled_from([16, 32, 64])
ELEMS = st.sampled_from([4, 8])


@given(
    elem=ELEMS,
    vb=WIDTHS,
    registers=st.integers(4, 64),
    chains=st.integers(1, 16),
    rows=st.integers(1, 5000),
    cols=st.integers(1, 5000),
)
def test_micro_tile_fits_the_registers(
    elem: int, vb: int, registers: int, chains: int, rows: int, cols: int
) -> None:
    mr, nv, vl = products.micro_tile(elem, rows, cols, vb, registers, chains)
    assert vl == vb // elem
    assert 1 <= mr and 1 <= nv <= 4
    # MR x NV accumulators + NV B vectors + 1 broadcast fit (a register file too small for
    # even one row keeps the 1 x 1 tile).
    assert mr * nv + nv + 1 <= max(registers, 3)
    assert mr <= rows
    if rows >= chains and registers - 2 >= chains:
        # Enough independent add chains, and no more than twice as many.
        assert chains <= mr * nv <= 2 * chains
    if rows < min(chains, registers - 2):
        # A short product keeps its rows and widens them until it has the chains, unless
        # 4 vectors, the registers or the columns stop it first.
        assert mr == rows
        capped = nv == 4 or (mr * (nv + 1) + nv + 2 > registers) or nv * vl >= cols
        assert mr * nv >= chains or capped


@given(
    elem=ELEMS,
    mr=st.integers(1, 32),
    nr=st.sampled_from([2, 4, 8, 16, 32, 64]),
    l1=st.sampled_from([16 << 10, 32 << 10, 48 << 10, 64 << 10]),
    l2=st.sampled_from([256 << 10, 1 << 20, 2 << 20]),
)
def test_blocking_fits_the_caches(elem: int, mr: int, nr: int, l1: int, l2: int) -> None:
    kc, mc, nc = products.blocking(elem, mr, nr, (l1, l2))
    assert kc % 8 == 0 and 16 <= kc <= 1024
    assert mc % mr == 0 and nc % nr == 0 and mc >= mr and nc >= nr
    # the KC of both slivers filling L1 (unless held up by the floor), 8 steps more not fitting
    both = max(16, min(1024, l1 // ((mr + nr) * elem) // 8 * 8))
    assert (mr + nr) * both * elem <= l1 or both == 16
    assert (mr + nr) * (both + 8) * elem > l1 or both == 1024
    # an A sliver at least as wide as the B sliver alone in three quarters of L1, where that
    # is longer (KC_A_RESIDENT)
    alone = min(1024, 3 * l1 // (4 * mr * elem) // 8 * 8)
    assert 4 * mr * alone * elem <= 3 * l1
    assert 4 * mr * (alone + 8) * elem > 3 * l1 or alone == 1024
    assert kc == (max(both, alone) if mr >= nr else both)
    # MC and NC come from the KC of both slivers
    if nc > nr:  # the B panel fits L2, and one more sliver would not
        assert both * nc * elem <= l2 < both * (nc + nr) * elem
    if mc > mr:  # the A block fits half of L2, and one more sliver would not
        assert mc * both * elem <= l2 // 2 < both * (mc + mr) * elem


def test_the_four_host_classes() -> None:
    """f32 on a 48 KiB L1d / 2 MiB L2 core: (vector bytes, registers, chains) -> MR x NR and
    (KC, MC, NC), the numbers the README and `micro_tile`'s docstring quote."""
    caches = (48 << 10, 2 << 20)
    table = {
        "avx512": ((64, 32, 8), (16, 16), (576, 672, 1360)),
        "avx2": ((32, 16, 8), (6, 16), (552, 474, 944)),
        "sse2": ((16, 16, 8), (6, 8), (872, 300, 600)),
        "neon": ((16, 32, 6), (12, 4), (768, 336, 680)),
    }
    for machine, tile, blocks in table.values():
        mr, nv, vl = products.micro_tile(4, 1 << 30, 1 << 30, *machine)
        assert (mr, nv * vl) == tile
        assert products.blocking(4, mr, nv * vl, caches) == blocks


def test_rows_that_divide_evenly_are_preferred() -> None:
    """On 32 registers 16 rows is the tallest tile; a problem of 15 * 20 rows gets 15 (no edge
    sliver), one of 1024 rows keeps 16 (the 64 slivers divide it)."""
    assert products.micro_tile(4, 15 * 20, 512, 64, 32, 8) == (15, 1, 16)
    assert products.micro_tile(4, 1024, 512, 64, 32, 8) == (16, 1, 16)


@given(rows=st.integers(8, 5000), cols=st.integers(1, 5000), vb=st.sampled_from([16, 32]))
def test_sixteen_registers_take_two_vectors_a_row(rows: int, cols: int, vb: int) -> None:
    """16 registers cannot hold 2 x 8 accumulators in one column: 6 rows of two vectors (12
    accumulators, 8 loads a step), unless the columns fit one vector; then a column of up to
    14 rows, as on wider register files."""
    mr, nv, vl = products.micro_tile(4, rows, cols, vb, 16, 8)
    if cols > vb // 4:
        assert (mr, nv) == (6, 2)
    else:
        assert nv == 1 and 8 <= mr <= 14


def test_an_empty_product_still_gets_a_tile() -> None:
    """A product of 0 rows (a size-0 batch) gets a tile of at least one row on every register
    file: the two-vector rule of 16 registers applies to rows that fill it, not to none."""
    for vb, registers in ((64, 32), (32, 16), (16, 16)):
        for cols in (0, 512):
            mr, nv, _ = products.micro_tile(4, 0, cols, vb, registers, 8)
            assert mr >= 1 and nv >= 1


@given(
    rows=st.integers(1, 40),
    cols=st.integers(1, 5000),
    vb=WIDTHS,
    registers=st.sampled_from([16, 32]),
)
def test_wide_tiles_for_streamed_weights(rows: int, cols: int, vb: int, registers: int) -> None:
    """A product of few rows whose column factor is larger than L2 reads 4 vectors (256 bytes
    of AVX-512) of it per step, with as many rows as the registers hold besides; only where 4
    vectors make 256 bytes and at least 4 rows fit; otherwise the usual tile."""
    wide = products.wide_tile(rows, cols, vb // 4, vb, registers)
    usual = products.micro_tile(4, rows, cols, vb, registers, 8)
    got = products.micro_tile(4, rows, cols, vb, registers, 8, streamed=True)
    assert got == (wide or usual)
    nv = min(4, -(-cols // (vb // 4)))
    if wide is None:
        cap = (registers - 1 - nv) // nv
        assert rows > products.WIDE_ROWS_MAX or 4 * vb < products.WIDE_BYTES or cap < 4
        return
    mr, nv, vl = wide
    assert rows <= products.WIDE_ROWS_MAX and vb * 4 >= products.WIDE_BYTES
    assert mr * nv + nv + 1 <= registers and 1 <= mr <= rows
    # never more row slivers than 4 vectors a row would take, and 3 only for fewer
    four = min(rows, (registers - 5) // 4)
    assert -(-rows // mr) <= -(-rows // four)
    assert nv != 3 or -(-rows // mr) < -(-rows // four) or -(-cols // vl) == 3


@pytest.mark.parametrize(
    ("rows", "want"), [(16, (8, 3, 16)), (12, (6, 4, 16)), (7, (7, 3, 16)), (4, (4, 4, 16))]
)
def test_wide_tiles_take_three_vectors_where_that_saves_a_sliver(rows: int, want: tuple) -> None:
    """AVX-512, 32 registers: 4 vectors a row hold 6 rows, 3 hold 9; 16 rows take two slivers
    of 8 instead of three (6 + 6 + 4), 12 rows two of 6 either way (4 vectors kept)."""
    assert products.wide_tile(rows, 1536, 16, 64, 32) == want


def test_the_plan_widens_only_streamed_weights() -> None:
    """plan(): 12 tokens times a 384 x 1536 f32 weight (2.4 MB, more than the 1 MiB L2) on
    AVX-512 get 6 x 64; times a 784 x 128 weight (400 KB) the narrow 12 x 16; AVX2 gets its usual
    6 x 16 (4 vectors a row do not fit its registers with 4 rows)."""
    from gdv.api import parse
    from gdv.passes.lower_to_kernels import LowerToKernels
    from gdv.passes.manager import PassManager

    def tile(k: int, n: int, vb: int, registers: int) -> list[int]:
        text = (
            f"func @main(%x: f32[12,{k}], %w: f32[{k},{n}]) -> f32[12,{n}] {{\n"
            f"  %y = dot(%x, %w) {{lhs_contract = [1], rhs_contract = [0], lhs_batch = [], "
            f"rhs_batch = []}} : f32[12,{n}]\n  return %y\n}}"
        )
        module = PassManager([LowerToKernels()]).run(parse(text)).module
        (op,) = module.entry.ops
        body = next(f for f in module.functions if f.name == op.attrs["body"])
        p = products.find(op.attrs, op.type.dtype, body)
        caches = (32 << 10, 1 << 20)
        return products.plan(op.attrs, op.type.dtype, body, p, vb, registers, caches)["micro"]

    assert tile(384, 1536, 64, 32) == [6, 64]
    assert tile(784, 128, 64, 32) == [12, 16]
    assert tile(384, 1536, 32, 16) == [6, 16]


@given(
    elem=ELEMS,
    mr=st.integers(1, 32),
    nr=st.sampled_from([4, 8, 16, 32, 48]),
    l1=st.sampled_from([16384, 32768, 49152]),
    reduce=st.integers(1, 20000),
)
def test_reduce_blocks_are_the_models_count_of_equal_length(
    elem: int, mr: int, nr: int, l1: int, reduce: int
) -> None:
    """With K given, KC gives the same number of reduce blocks as the model's KC (one when K
    is at most a quarter longer), of equal length but the last, which is shorter by less
    than 8 steps a block; MC and NC are the model's."""
    model = products.blocking(elem, mr, nr, (l1, 1 << 21))
    kc, mc, nc = products.blocking(elem, mr, nr, (l1, 1 << 21), reduce=reduce)
    assert (mc, nc) == model[1:]
    blocks = -(-reduce // kc)
    if reduce <= model[0] + model[0] // products.KC_STRETCH:
        assert blocks == 1
        return
    assert blocks == -(-reduce // model[0])
    assert kc % 8 == 0 and kc <= model[0]
    assert reduce - (blocks - 1) * kc > kc - 8 * blocks
