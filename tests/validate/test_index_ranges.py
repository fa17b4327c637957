"""`Idx.in_range` (validate/semantics/index.py): the range test of an affine index, which
conv2d's padded reads and `pad` both build. It moves the form's constant onto the bounds, so
`e - p` in [0, h) and `e` in [p, p + h) are one Z3 term (a conv lowered to a `pad` and a kernel
then proves by congruence instead of by a search over every index); its value on concrete
indices is the plain `lo <= value < hi`."""

from __future__ import annotations

import z3
from hypothesis import given
from hypothesis import strategies as st

from gdv.validate.semantics.index import Idx


def _value(cond: z3.BoolRef, env: dict[str, int], atoms: dict[str, z3.ArithRef]) -> bool:
    sub = [(atoms[k], z3.IntVal(v)) for k, v in env.items()]
    return z3.is_true(z3.simplify(z3.substitute(cond, *sub)))


@given(
    st.integers(0, 40),  # extent of i
    st.integers(0, 6),  # extent of k
    st.integers(1, 3),  # stride
    st.integers(-5, 5),  # constant offset
    st.integers(-8, 8),  # lo
    st.integers(0, 60),  # width of the range
    st.data(),
)
def test_in_range_is_the_range_test_on_every_index(n, m, s, c, lo, width, data) -> None:
    i, k = z3.Int("i"), z3.Int("k")
    e = Idx.var(i, 0, max(n - 1, 0)) * s + Idx.var(k, 0, max(m - 1, 0)) + c
    cond = e.in_range(lo, lo + width)
    iv = data.draw(st.integers(0, max(n - 1, 0)))
    kv = data.draw(st.integers(0, max(m - 1, 0)))
    value = iv * s + kv + c
    assert _value(cond, {"i": iv, "k": kv}, {"i": i, "k": k}) == (lo <= value < lo + width)


@given(st.integers(1, 5), st.integers(1, 40), st.integers(1, 3))
def test_a_shifted_range_is_the_same_term(p: int, h: int, s: int) -> None:
    """conv2d reads its input at `o*s + a - p` when that is in [0, h); the lowered kernel reads
    the padded input at `o*s + a`, which `pad` tests against [p, p + h)."""
    o, a = z3.Int("o"), z3.Int("a")
    e = Idx.var(o, 0, h + 2 * p) * s + Idx.var(a, 0, 4)
    assert (e - p).in_range(0, h).eq(e.in_range(p, p + h))
