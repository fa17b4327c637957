"""Reduction orders a schedule may choose: each order's bound holds for sums simulated in that
order in bf16 (50000 rows, so the search comes close to the worst case), and the depths are
right."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gdv.ir.dtypes import DType
from gdv.ir.numerics import float_to_float
from gdv.validate.bounds.registry import Context
from gdv.validate.bounds.rounding import order_depth, ordered_sum

BF16 = DType.BF16


def _rn(x: np.ndarray) -> np.ndarray:
    return float_to_float(x, BF16).astype(np.float64)


def _simulate(x: np.ndarray, order: str, block: int) -> np.ndarray:
    """Row sums of x (float64 values of bf16 numbers), every addition rounded to bf16."""

    def seq(cols: np.ndarray) -> np.ndarray:
        acc = cols[:, 0]
        for k in range(1, cols.shape[1]):
            acc = _rn(acc + cols[:, k])
        return acc

    if order == "sequential":
        return seq(x)
    if order == "pairwise":
        cols = x
        while cols.shape[1] > 1:
            half = cols.shape[1] // 2
            pairs = _rn(cols[:, : 2 * half : 2] + cols[:, 1 : 2 * half : 2])
            cols = np.concatenate([pairs, cols[:, 2 * half :]], axis=1)
        return cols[:, 0]
    if order == "blocked":
        sums = [seq(x[:, i : i + block]) for i in range(0, x.shape[1], block)]
        return seq(np.stack(sums, axis=1))
    parts = min(block, x.shape[1])
    size = math.ceil(x.shape[1] / parts)
    sums = [seq(x[:, i : i + size]) for i in range(0, x.shape[1], size)]
    return seq(np.stack(sums, axis=1))


@pytest.mark.parametrize(
    "order,block", [("sequential", 1), ("pairwise", 1), ("blocked", 4), ("split-k", 3)]
)
@pytest.mark.parametrize("n", [5, 16, 33])
def test_order_bound_holds_in_simulation(order: str, block: int, n: int) -> None:
    rng = np.random.default_rng(n)
    x = _rn(rng.uniform(0.5, 1.0, (50000, n)))
    exact = x.sum(axis=1)  # float64 sums of n bf16 values are exact
    measured = float(np.max(np.abs(_simulate(x, order, block) - exact)))
    _, bound = ordered_sum(Context(), order, n, BF16, 1.0, 1.0, 50000, block)
    assert measured <= bound, (order, n, measured, bound)
    assert bound <= 40 * measured  # and not absurdly loose


def test_depths() -> None:
    assert order_depth("sequential", 1024) == 1023
    assert order_depth("pairwise", 1024) == 10
    assert order_depth("pairwise", 1025) == 11
    assert order_depth("blocked", 1024, 32) == 31 + 31
    assert order_depth("split-k", 1024, 4) == 255 + 3
    with pytest.raises(ValueError, match="unknown reduction order"):
        order_depth("random", 8)


def test_pairwise_beats_sequential_for_long_sums() -> None:
    ctx = Context()
    seq = ordered_sum(ctx, "sequential", 4096, DType.F32, 1.0, 1.0, 1)[1]
    pair = ordered_sum(ctx, "pairwise", 4096, DType.F32, 1.0, 1.0, 1)[1]
    assert pair < seq / 100


@pytest.mark.parametrize("order", ["sequential", "pairwise"])
def test_a_sum_of_terms_without_a_finite_bound_is_unbounded_not_nan(order: str) -> None:
    # terms of an f64 matmul whose inputs may reach the largest f64: their bound is infinite,
    # and s / p was inf / inf = NaN (a crash in `gdv bounds`, found by gdv fuzz)
    ctx = Context()
    lin, total = ordered_sum(ctx, order, 4, DType.F32, math.inf, math.inf, 12)
    assert total == math.inf
    assert not any(math.isnan(v) for v in lin.values())
