"""The analytical model of `gdv.ir.products` (micro-kernel shape and cache blocking): the
constraints its docstrings state hold for every machine description, and its choices for the
four host classes of backends/c/isa.py are the ones the README's table gives."""

from __future__ import annotations

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
    if kc > 16:  # not held up by the floor: the two slivers take at most half of L1
        assert (mr + nr) * kc * elem <= l1 // 2
        assert (mr + nr) * (kc + 8) * elem > l1 // 2 or kc == 1024
    if nc > nr:
        assert kc * nc * elem <= l2 // 2
    if mc > mr:
        assert mc * kc * elem <= l2 // 4


def test_the_four_host_classes() -> None:
    """f32 on a 48 KiB L1d / 2 MiB L2 core: (vector bytes, registers, chains) -> MR x NR and
    (KC, MC, NC), the numbers the README and `micro_tile`'s docstring quote."""
    caches = (48 << 10, 2 << 20)
    table = {
        "avx512": ((64, 32, 8), (16, 16), (192, 672, 1360)),
        "avx2": ((32, 16, 8), (14, 8), (272, 476, 960)),
        "sse2": ((16, 16, 8), (14, 4), (336, 378, 780)),
        "neon": ((16, 32, 6), (12, 4), (384, 336, 680)),
    }
    for machine, tile, blocks in table.values():
        mr, nv, vl = products.micro_tile(4, 1 << 30, 1 << 30, *machine)
        assert (mr, nv * vl) == tile
        assert products.blocking(4, mr, nv * vl, caches) == blocks


def test_rows_that_divide_evenly_are_preferred() -> None:
    """On 16 registers 14 rows is the tallest tile; a problem of 13 * 20 rows gets 13 (no edge
    sliver), one of 1024 rows keeps 14 (2 rows of edge beat 10 more slivers)."""
    assert products.micro_tile(4, 13 * 20, 512, 32, 16, 8)[0] == 13
    assert products.micro_tile(4, 1024, 512, 32, 16, 8)[0] == 14
