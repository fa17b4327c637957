"""Reductions: left folds in row-major order, empty reductions, IEEE corners, and a property
test against a slow pure-Python fold."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import load_module

from gdv.backends.reference import apply, bit_equal, describe_difference
from gdv.ir.dtypes import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, DType
from gdv.ir.numerics import literal_to_array

slow = load_module("backends/reference/slow_reference.py")


def check(got: np.ndarray, want: np.ndarray) -> None:
    assert bit_equal(got, want), describe_difference(got, want)


def arr(values, dtype: DType) -> np.ndarray:
    flat = [literal_to_array(v, dtype) for v in np.ravel(np.array(values, dtype=object))]
    return np.array(flat, dtype=dtype.np).reshape(np.shape(values))


def reduce(kind: str, x: np.ndarray, axes: list[int], mode: str = "exact") -> np.ndarray:
    return apply(f"reduce_{kind}", [x], {"axes": axes}, mode=mode)


def test_sum_folds_left_not_pairwise() -> None:
    # Left fold in f32: 1e8 + 1 rounds back to 1e8 every time. A pairwise or blocked sum adds
    # the ones first and gets 1e8 + 16.
    x = np.array([1e8] + [1.0] * 16, np.float32)
    check(reduce("sum", x, [0]), np.float32(1e8).reshape(()))
    assert np.float32(1e8) != np.float32(1e8 + 16)
    # the [1e8, 1, -1e8, 1] pattern: left fold 1, exact 2, pairwise 0
    check(reduce("sum", np.array([1e8, 1, -1e8, 1], np.float32), [0]), np.array(1, np.float32))


def test_sum_starts_from_the_first_element() -> None:
    # acc = x[0], so a sum of -0.0s is -0.0 (0.0 + -0.0 would be +0.0).
    check(reduce("sum", np.array([-0.0, -0.0], np.float32), [0]), np.array(-0.0, np.float32))
    check(reduce("sum", np.array([-0.0], np.float16), [0]), np.array(-0.0, np.float16))
    check(reduce("sum", np.array([-0.0, 0.0], np.float64), [0]), np.array(0.0))


def test_bf16_sum_rounds_every_step() -> None:
    # 1 + 2^-8 is a tie that rounds to 1, twice; the exact sum 1 + 2^-7 is a bf16 value.
    x = arr([1.0, 2**-8, 2**-8], DType.BF16)
    check(reduce("sum", x, [0]), arr(1.0, DType.BF16))
    check(reduce("sum", x[::-1].copy(), [0]), arr(1 + 2**-7, DType.BF16))
    check(reduce("sum", x, [0], mode="ideal"), np.array(1 + 2**-7))


def test_multi_axis_order_is_row_major_whatever_the_axes_order() -> None:
    # Reduced positions of x[2, 3] over both axes are visited x[0,0], x[0,1], x[0,2], x[1,0]...
    x = np.array([[1e8, 1, 1], [-1e8, 1, 1]], np.float32)  # row-major: 1e8,1,1,-1e8,1,1 -> 2
    check(reduce("sum", x, [0, 1]), np.array(2, np.float32))
    check(reduce("sum", x, [1, 0]), np.array(2, np.float32))
    # column-major would give 1e8 - 1e8 + 1 + 1 + 1 + 1 = 4
    x3 = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    check(reduce("sum", x3, [2, 0]), x3.sum(axis=(0, 2)).astype(np.int32))


def test_integer_sums_wrap() -> None:
    check(reduce("sum", np.array([100, 100, 100], np.int8), [0]), np.array(44, np.int8))
    big = np.array([2**62, 2**62, 2**62], np.int64)
    check(reduce("sum", big, [0]), np.array(-(2**62), np.int64))


@pytest.mark.parametrize("dtype", [d for d in ALL_DTYPES if not d.is_bool], ids=str)
def test_empty_reductions(dtype: DType) -> None:
    x = np.zeros((3, 0), dtype=dtype.np)
    if dtype.is_float:
        want = {"sum": 0.0, "max": -math.inf, "min": math.inf}
    else:
        want = {"sum": 0, "max": dtype.int_min, "min": dtype.int_max}
    for kind, value in want.items():
        got = reduce(kind, x, [1])
        check(got, np.full((3,), value, dtype=dtype.np))
        if kind == "sum" and dtype.is_float:
            assert not np.signbit(got.astype(np.float64)).any()  # +0.0
    # all axes of an empty tensor: a scalar
    check(reduce("max", np.zeros((0, 2), dtype.np), [0, 1]), np.array(want["max"], dtype.np))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_max_min_nan_and_zeros(dtype: DType) -> None:
    x = arr(
        [[-0.0, 0.0, -0.0], [0.0, -0.0, -0.0], [-0.0, -0.0, -0.0], [1.0, math.nan, -1.0]], dtype
    )
    check(reduce("max", x, [1]), arr([0.0, 0.0, -0.0, math.nan], dtype))
    check(reduce("min", x, [1]), arr([-0.0, -0.0, -0.0, math.nan], dtype))
    y = arr([[-math.inf, -math.inf], [math.inf, 3.0]], dtype)
    check(reduce("max", y, [1]), arr([-math.inf, math.inf], dtype))
    check(reduce("min", y, [1]), arr([-math.inf, 3.0], dtype))


def test_integer_max_min() -> None:
    x = np.array([[-128, 5, 127], [3, 3, 3]], np.int8)
    check(reduce("max", x, [1]), np.array([127, 3], np.int8))
    check(reduce("min", x, [0]), np.array([-128, 3, 3], np.int8))


# --- property test against the slow fold -------------------------------------------------


def _values(dtype: DType, rng: np.random.Generator, shape: tuple[int, ...], specials: bool):
    n = math.prod(shape)
    if dtype.is_int:
        lo, hi = max(dtype.int_min, -(2**40)), min(dtype.int_max, 2**40)
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype.np)
    top = 8 if dtype is DType.F16 else 30  # no overflow to inf in the sums
    mags = np.exp2(rng.uniform(-12, top, n)) * rng.choice([-1.0, 1.0], n)
    pool = [0.0, -0.0, 1.0, -1.0]
    if specials:
        pool += [math.nan, math.inf, -math.inf]
    pick = rng.random(n) < 0.25
    mags[pick] = rng.choice(pool, int(pick.sum()))
    return arr(mags.tolist(), dtype).reshape(shape)


@given(
    dtype=st.sampled_from([d for d in ALL_DTYPES if not d.is_bool]),
    shape=st.lists(st.integers(0, 4), min_size=1, max_size=3),
    data=st.data(),
    seed=st.integers(0, 2**32 - 1),
)
def test_reductions_match_the_slow_fold(dtype: DType, shape, data, seed: int) -> None:
    rng = np.random.default_rng(seed)
    axes = data.draw(st.lists(st.sampled_from(range(len(shape))), unique=True, max_size=3))
    for kind in ("sum", "max", "min"):
        x = _values(dtype, rng, tuple(shape), specials=kind != "sum")
        want = slow.reduce(x, axes, kind, dtype)
        check(reduce(kind, x, axes), want)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_integer_sums_match_the_slow_fold_with_wrapping(dtype: DType) -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(dtype.int_min, dtype.int_max, size=(5, 7), endpoint=True, dtype=dtype.np)
    check(reduce("sum", x, [1]), slow.reduce(x, [1], "sum", dtype))
