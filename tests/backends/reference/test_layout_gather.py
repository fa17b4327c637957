"""Layout and gather kernels against hand-computed values."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from gdv.backends.reference import apply, bit_equal, describe_difference
from gdv.ir.dtypes import DType
from gdv.ir.numerics import literal_to_array
from gdv.ir.types import TensorType


def check(got: np.ndarray, want: np.ndarray) -> None:
    assert bit_equal(got, want), describe_difference(got, want)


def t(dtype: DType, *shape: int) -> TensorType:
    return TensorType(dtype, shape)


X = np.arange(6, dtype=np.int32).reshape(2, 3)  # [[0 1 2] [3 4 5]]


def test_broadcast_places_operand_dims() -> None:
    got = apply("broadcast", [X], {"dims": [0, 2]}, t(DType.I32, 2, 4, 3))
    assert got.shape == (2, 4, 3)
    check(got[:, 1, :], X)
    check(got[:, 3, :], X)
    # a size-1 operand dim stretches
    col = np.array([[7], [8]], np.int32)
    check(
        apply("broadcast", [col], {"dims": [0, 1]}, t(DType.I32, 2, 3)),
        np.array([[7, 7, 7], [8, 8, 8]], np.int32),
    )
    check(
        apply("broadcast", [np.array(1.5, np.float32)], {"dims": []}, t(DType.F32, 2)),
        np.array([1.5, 1.5], np.float32),
    )


def test_reshape_and_transpose() -> None:
    check(
        apply("reshape", [X], type=t(DType.I32, 3, 2)), np.array([[0, 1], [2, 3], [4, 5]], np.int32)
    )
    x3 = np.arange(24, dtype=np.int8).reshape(2, 3, 4)
    got = apply("transpose", [x3], {"perm": [2, 0, 1]})
    assert got.shape == (4, 2, 3)
    # result dim i is operand dim perm[i]: got[k, i, j] = x3[i, j, k]
    assert got[3, 1, 2] == x3[1, 2, 3]
    check(got, np.ascontiguousarray(np.moveaxis(x3, 2, 0)))


def test_slice_with_stride() -> None:
    x = np.arange(10, dtype=np.int64)
    check(
        apply("slice", [x], {"start": [1], "limit": [8], "stride": [3]}),
        np.array([1, 4, 7], np.int64),
    )
    check(
        apply("slice", [X], {"start": [1, 0], "limit": [2, 3], "stride": [1, 2]}),
        np.array([[3, 5]], np.int32),
    )
    check(apply("slice", [x], {"start": [4], "limit": [4], "stride": [1]}), np.zeros(0, np.int64))


def test_concat() -> None:
    a = np.array([[1.0, -0.0]], np.float32)
    b = np.array([[math.nan, 2.0], [3.0, 4.0]], np.float32)
    check(
        apply("concat", [a, b, a], {"axis": 0}),
        np.array([[1, -0.0], [math.nan, 2], [3, 4], [1, -0.0]], np.float32),
    )


def test_pad_value_is_rounded_once_to_the_dtype() -> None:
    x = np.array([[1.0]], np.float32)
    got = apply("pad", [x], {"low": [1, 0], "high": [0, 2], "value": -0.0})
    check(got, np.array([[-0.0, -0.0, -0.0], [1.0, -0.0, -0.0]], np.float32))
    q = Fraction(1) + Fraction(1, 2**8) + Fraction(1, 2**40)  # once to bf16: 1 + 2^-7
    xb = literal_to_array(2.0, DType.BF16).reshape(1)
    got = apply("pad", [xb], {"low": [1], "high": [1], "value": q})
    assert [float(v) for v in got] == [1 + 2**-7, 2.0, 1 + 2**-7]
    got = apply("pad", [np.array([1], np.int8)], {"low": [0], "high": [1], "value": -128})
    check(got, np.array([1, -128], np.int8))
    # a large integer literal for a float dtype (inexact in f64 and in f32)
    got = apply("pad", [x[0]], {"low": [1], "high": [0], "value": 2**60 + 2**36 + 1})
    check(got, np.array([2.0**60 + 2.0**37, 1.0], np.float32))
    # ideal mode: the literal is rounded to f64 instead
    got = apply("pad", [xb], {"low": [1], "high": [0], "value": Fraction(1, 3)}, mode="ideal")
    check(got, np.array([1 / 3, 2.0]))


def test_take_clamps_indices() -> None:
    table = np.array([10, 11, 12, 13], np.int32)
    idx = np.array([[-5, 0], [3, 100]], np.int8)
    check(apply("take", [table, idx], {"axis": 0}), np.array([[10, 10], [13, 13]], np.int32))
    # i8 indices clamped to a size beyond i8's range must not wrap
    big = np.arange(300, dtype=np.int64)
    check(apply("take", [big, np.array([127, -128], np.int8)], {"axis": 0}), np.array([127, 0]))
    # int64 extremes
    ext = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max], np.int64)
    check(apply("take", [table, ext], {"axis": 0}), np.array([10, 13], np.int32))


def test_take_along_an_inner_axis() -> None:
    table = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([3, -1, 1], np.int32)
    got = apply("take", [table, idx], {"axis": 1})
    check(got, table[:, [3, 0, 1]])
    empty = apply("take", [np.zeros((2, 0), np.float16), np.zeros((0,), np.int32)], {"axis": 1})
    check(empty, np.zeros((2, 0), np.float16))
    booleans = np.array([True, False])
    check(
        apply("take", [booleans, np.array([1, 5], np.int32)], {"axis": 0}), np.array([False, False])
    )


def test_layout_ops_keep_rank_zero() -> None:
    """A rank-0 operand stays rank 0 (numpy's ascontiguousarray would make it [1])."""
    from gdv.backends.reference import apply

    x = np.array(2.5, dtype=np.float32)
    assert apply("transpose", [x], {"perm": []}).shape == ()
    assert apply("slice", [x], {"start": [], "limit": [], "stride": []}).shape == ()
