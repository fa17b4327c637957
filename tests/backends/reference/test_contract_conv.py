"""dot and conv2d: summation order, accumulation dtypes, IEEE corners, and property tests
against slow pure-Python definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import load_module

from gdv.backends.reference import apply, bit_equal, describe_difference
from gdv.ir.dtypes import DType
from gdv.ir.numerics import literal_to_array
from gdv.ir.types import TensorType

slow = load_module("backends/reference/slow_reference.py")


def check(got: np.ndarray, want: np.ndarray) -> None:
    assert bit_equal(got, want), describe_difference(got, want)


def arr(values, dtype: DType) -> np.ndarray:
    flat = [literal_to_array(v, dtype) for v in np.ravel(np.array(values, dtype=object))]
    return np.array(flat, dtype=dtype.np).reshape(np.shape(values))


def dims(lb=(), rb=(), lc=(1,), rc=(0,), **extra) -> dict:
    return {
        "lhs_batch": list(lb),
        "rhs_batch": list(rb),
        "lhs_contract": list(lc),
        "rhs_contract": list(rc),
        **extra,
    }


# --- dot --------------------------------------------------------------------------------------


def test_dot_accumulates_sequentially() -> None:
    # Row 0: 1e8 then sixteen 1s, each lost to rounding in f32: 1e8. A blocked or pairwise
    # order (as BLAS uses) or an FMA chain would keep some of them.
    a = np.array([[1e8] + [1.0] * 16, [1.0] * 16 + [1e8]], np.float32)
    b = np.ones((17, 1), np.float32)
    got = apply("dot", [a, b], dims())
    check(got, np.array([[1e8], [1e8 + 16]], np.float32))
    exact_then_rounded = np.float32(1e8 + 16)
    assert got[0, 0] != exact_then_rounded  # the case does depend on the order
    ones_first = np.float32(np.float32(16) + np.float32(1e8))
    assert got[0, 0] != ones_first


def test_dot_starts_from_the_first_product() -> None:
    a = np.array([[-0.0, -0.0]], np.float32)
    b = np.array([[1.0], [1.0]], np.float32)
    check(apply("dot", [a, b], dims()), np.array([[-0.0]], np.float32))
    # empty contraction: +0.0
    e = apply("dot", [np.zeros((2, 0), np.float32), np.zeros((0, 3), np.float32)], dims())
    check(e, np.zeros((2, 3), np.float32))
    assert not np.signbit(e).any()


def test_dot_products_round_before_the_sum() -> None:
    # No FMA: (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 rounds in f32 to 1 + 2^-11 (the 2^-24 is a
    # tie-breaker lost), then - (1 + 2^-11) gives exactly 0; a fused multiply-add keeps 2^-24.
    v = 1 + 2**-12
    a = np.array([[v, -1.0]], np.float32)
    b = np.array([[v], [1 + 2**-11]], np.float32)
    check(apply("dot", [a, b], dims()), np.array([[0.0]], np.float32))


def test_dot_contracting_dims_in_lhs_contract_order() -> None:
    # a[i, j] . b[i, j] summed over (i, j); with lhs_contract [0, 1] the order is a[0,0],
    # a[0,1], a[1,0], a[1,1]; with [1, 0] it is a[0,0], a[1,0], a[0,1], a[1,1].
    a = np.array([[1e8, 1.0], [-1e8, 1.0]], np.float32)
    b = np.ones((2, 2), np.float32)
    row = apply("dot", [a, b], dims(lc=(0, 1), rc=(0, 1)))
    col = apply("dot", [a, b], dims(lc=(1, 0), rc=(1, 0)))
    check(row, np.array(1.0, np.float32))  # 1e8 + 1 = 1e8; - 1e8 = 0; + 1 = 1
    check(col, np.array(2.0, np.float32))  # 1e8 - 1e8 = 0; + 1 + 1 = 2


def test_dot_batch_and_free_dims_layout() -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(-3, 4, (3, 2, 4)).astype(np.int32)  # [K=3, B=2, M=4]
    b = rng.integers(-3, 4, (2, 5, 3)).astype(np.int32)  # [B=2, N=5, K=3]
    got = apply("dot", [a, b], dims(lb=(1,), rb=(0,), lc=(0,), rc=(2,)))
    assert got.shape == (2, 4, 5)
    check(got, np.einsum("kbm,bnk->bmn", a, b).astype(np.int32))  # exact in integers


def test_integer_dot_wraps() -> None:
    a = np.array([[100, 100]], np.int8)
    b = np.array([[2], [1]], np.int8)
    check(apply("dot", [a, b], dims()), np.array([[44]], np.int8))  # 200 -> -56; -56+100 = 44


def test_dot_acc_dtype() -> None:
    bf = DType.BF16
    a = arr([[1.0, 2**-8, 2**-8]], bf)
    b = arr([[1.0], [1.0], [1.0]], bf)
    # accumulate in bf16: every add rounds; in f32: exact
    check(apply("dot", [a, b], dims()), arr([[1.0]], bf))
    check(apply("dot", [a, b], dims(acc=DType.F32)), arr([[1 + 2**-7]], bf))
    # bf16 operands, f32 result: acc defaults to the result dtype
    f32_out = apply("dot", [a, b], dims(), TensorType(DType.F32, (1, 1)))
    check(f32_out, np.array([[1 + 2**-7]], np.float32))
    # acc narrower than the operands: operands are rounded to it first (once, from f64)
    x = np.array([[1 + 2**-8 + 2**-40]])
    y = np.array([[1.0]])
    check(apply("dot", [x, y], dims(acc=DType.BF16)), np.array([[1 + 2**-7]]))


def test_dot_ideal_mode() -> None:
    a = np.array([[1e8] + [1.0] * 16], np.float32)
    b = np.ones((17, 1), np.float32)
    check(apply("dot", [a, b], dims(), mode="ideal"), np.array([[1e8 + 16]]))


def _floats(dtype: DType, rng: np.random.Generator, shape) -> np.ndarray:
    top = 3 if dtype is DType.F16 else 20
    n = math.prod(shape)
    v = np.exp2(rng.uniform(-8, top, n)) * rng.choice([-1.0, 1.0], n)
    zeros = rng.random(n) < 0.15
    v[zeros] = rng.choice([0.0, -0.0], int(zeros.sum()))
    return arr(v.tolist(), dtype).reshape(shape)


@given(
    dtype=st.sampled_from([DType.F32, DType.F16, DType.BF16, DType.F64, DType.I8, DType.I32]),
    acc=st.sampled_from([None, DType.F32, DType.BF16, DType.F64]),
    batch=st.integers(0, 2),
    m=st.integers(0, 3),
    n=st.integers(0, 3),
    k=st.lists(st.integers(0, 3), min_size=0, max_size=2),
    seed=st.integers(0, 2**32 - 1),
)
def test_dot_matches_the_slow_definition(dtype, acc, batch, m, n, k, seed) -> None:
    rng = np.random.default_rng(seed)
    # A = [K0, batch, M, K1...] and B = [batch, K..., N] to exercise the transposes.
    a_shape = [*k[:1], batch, m, *k[1:]]
    b_shape = [batch, *k, n]
    nk = len(k)
    lc = [0] + list(range(3, 3 + nk - 1)) if nk else []
    attrs = dims(lb=(1 if nk else 0,), rb=(0,), lc=lc, rc=list(range(1, 1 + nk)))
    if not nk:
        a_shape = [batch, m]
    if dtype.is_int:
        a = rng.integers(dtype.int_min, dtype.int_max, a_shape, endpoint=True).astype(dtype.np)
        b = rng.integers(dtype.int_min, dtype.int_max, b_shape, endpoint=True).astype(dtype.np)
        acc = None
    else:
        a, b = _floats(dtype, rng, a_shape), _floats(dtype, rng, b_shape)
    if acc is not None:
        attrs["acc"] = acc
    got = apply("dot", [a, b], attrs)
    want = slow.dot(a, b, attrs, dtype, acc or dtype)
    check(got, want)


# --- conv2d -----------------------------------------------------------------------------------


def conv_attrs(stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1) -> dict:
    return {
        "stride": list(stride),
        "padding": [list(p) for p in padding],
        "dilation": list(dilation),
        "groups": groups,
    }


def test_conv2d_small_by_hand() -> None:
    x = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)
    w = np.array([[[[1, 0], [0, -1]]]], np.float32)
    # out[i, j] = x[i, j] - x[i+1, j+1] = -4 everywhere
    check(apply("conv2d", [x, w], conv_attrs()), np.full((1, 1, 2, 2), -4.0, np.float32))
    # padding 1 all round, stride 2: out[i, j] = x[2i-1, 2j-1] - x[2i, 2j], with x = 0 outside.
    # At (0, 0) the products are +0.0 (padding * 1), 0 * 0 twice, then x[0,0] * -1 = -0.0:
    # +0.0 + -0.0 = +0.0.
    got = apply("conv2d", [x, w], conv_attrs(stride=(2, 2), padding=((1, 1), (1, 1))))
    check(got, np.array([[[[0.0, -2.0], [-6.0, -4.0]]]], np.float32))


def test_conv2d_folds_from_the_first_product() -> None:
    # Every product is 0 * -1 = -0.0 (padded positions too): the fold keeps -0.0, where a sum
    # started from +0.0 would give +0.0.
    x = np.zeros((1, 2, 2, 2), np.float32)
    w = np.full((1, 2, 2, 2), -1.0, np.float32)
    got = apply("conv2d", [x, w], conv_attrs(padding=((1, 0), (0, 1))))
    check(got, np.full((1, 1, 2, 2), -0.0, np.float32))


def test_conv2d_padding_takes_part_so_zero_times_inf_is_nan() -> None:
    x = np.ones((1, 1, 1, 1), np.float32)
    w = np.array([[[[math.inf, 1.0]]]], np.float32)
    got = apply("conv2d", [x, w], conv_attrs(padding=((0, 0), (1, 0))))
    # out[0] = xp[-1]*inf + xp[0]*1 = 0*inf + 1 = NaN
    assert got.shape == (1, 1, 1, 1) and math.isnan(got[0, 0, 0, 0])


def test_conv2d_sums_c_then_kh_then_kw() -> None:
    # Channel order decides the f32 result: terms 1e8 (c0), 1 (c1), -1e8 (c0, kw=1), 1 (c1, kw=1)
    # in order c, kh, kw: 1e8 [c0,kw0], -1e8 [c0,kw1], 1 [c1,kw0], 1 [c1,kw1] -> 2.
    # Had kw been outer: 1e8, 1, -1e8, 1 -> 1.
    x = np.array([[[[1e8, -1e8]], [[1.0, 1.0]]]], np.float32)  # N=1, C=2, H=1, W=2
    w = np.ones((1, 2, 1, 2), np.float32)
    check(apply("conv2d", [x, w], conv_attrs()), np.array([[[[2.0]]]], np.float32))


def test_integer_conv_wraps() -> None:
    x = np.full((1, 1, 1, 3), 100, np.int8)
    w = np.ones((1, 1, 1, 3), np.int8)
    check(apply("conv2d", [x, w], conv_attrs()), np.array([[[[44]]]], np.int8))


CONFIGS = [
    dict(),
    dict(padding=((1, 2), (0, 1))),
    dict(stride=(2, 3)),
    dict(dilation=(2, 1), padding=((2, 2), (1, 1))),
    dict(groups=2),
    dict(groups=2, stride=(2, 1), dilation=(1, 2), padding=((1, 0), (2, 1))),
]


@pytest.mark.parametrize("dtype", [DType.F32, DType.BF16, DType.F16, DType.I32], ids=str)
@pytest.mark.parametrize("config", range(len(CONFIGS)))
def test_conv2d_matches_the_naive_loops(dtype: DType, config: int) -> None:
    rng = np.random.default_rng(config)
    attrs = conv_attrs(**CONFIGS[config])
    g = attrs["groups"]
    x_shape, w_shape = (2, 2 * g, 5, 6), (2 * g, 2, 3, 2)
    if dtype.is_int:
        x = rng.integers(-50, 50, x_shape).astype(dtype.np)
        w = rng.integers(-50, 50, w_shape).astype(dtype.np)
    else:
        x, w = _floats(dtype, rng, x_shape), _floats(dtype, rng, w_shape)
    check(apply("conv2d", [x, w], attrs), slow.conv2d(x, w, attrs, dtype))


@given(
    dtype=st.sampled_from([DType.F32, DType.BF16, DType.F64, DType.I8]),
    n=st.integers(0, 2),
    cg=st.integers(0, 2),
    og=st.integers(1, 2),
    groups=st.integers(1, 2),
    hw=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    k=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    stride=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    pad=st.tuples(*[st.integers(0, 2)] * 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_conv2d_property(dtype, n, cg, og, groups, hw, k, stride, dilation, pad, seed) -> None:
    attrs = conv_attrs(stride, ((pad[0], pad[1]), (pad[2], pad[3])), dilation, groups)
    for d in range(2):
        if hw[d] + pad[2 * d] + pad[2 * d + 1] < dilation[d] * (k[d] - 1) + 1:
            return  # kernel larger than the padded input: rejected by the type rule
    rng = np.random.default_rng(seed)
    x_shape, w_shape = (n, cg * groups, *hw), (og * groups, cg, *k)
    if dtype.is_int:
        x = rng.integers(-128, 128, x_shape).astype(dtype.np)
        w = rng.integers(-128, 128, w_shape).astype(dtype.np)
    else:
        x, w = _floats(dtype, rng, x_shape), _floats(dtype, rng, w_shape)
    check(apply("conv2d", [x, w], attrs), slow.conv2d(x, w, attrs, dtype))
