"""torch.export programs imported by gdv.frontends.torch, run on the reference backend, against
torch's eager output.

Each case says how it compares: `EXACT` (the same bits, NaNs alike) where gdv computes in
torch's order (elementwise ops, data movement, f16/bf16 ops through f32 as torch's CPU kernels
do), else a tolerance (reductions, contractions and transcendentals, whose order or last bits
torch leaves to its kernels)."""

from __future__ import annotations

import math
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import gdv  # noqa: E402
from gdv.backends import reference  # noqa: E402
from gdv.cli import main  # noqa: E402
from gdv.frontends.torch import Unsupported, import_program, to_numpy  # noqa: E402
from gdv.ir.diagnostics import IRError  # noqa: E402
from gdv.ir.printer import print_module  # noqa: E402

nn = torch.nn
F = torch.nn.functional
EXACT = None
"""Tolerance marker: bit-exact."""


class Fn(nn.Module):
    """A module computing `fn(*inputs)`."""

    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: Any) -> Any:
        return self.fn(*xs)


def run_both(module: Any, *inputs: Any) -> tuple[list[np.ndarray], list[np.ndarray], Any]:
    """(gdv's outputs, torch's outputs, the imported Module) for `module` on `inputs`."""
    module = module.eval()
    ep = torch.export.export(module, tuple(inputs))
    m, weights = import_program(ep)
    names = [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    feed = {name: to_numpy(x) for name, x in zip(names, inputs, strict=True)}
    feed.update(weights)
    got = reference.run(m, feed)
    with torch.no_grad():
        want = module(*inputs)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    return got, [to_numpy(w) for w in want], m


def check(module: Any, *inputs: Any, tol: float | None = EXACT) -> Any:
    got, want, m = run_both(module, *inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if tol is EXACT:
            gb, wb = _bits(g), _bits(w)
            assert np.array_equal(gb, wb), f"not bit-exact: max diff {_maxdiff(g, w)}"
        else:
            assert _maxdiff(g, w) <= tol, f"max diff {_maxdiff(g, w)} > {tol}"
    return m


def _bits(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "b" or a.dtype.kind in "iu":
        return a
    wide = a.astype(np.float64)
    nan = np.isnan(wide)
    raw = np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}")).copy()
    raw[nan] = 0
    return raw


def _maxdiff(g: np.ndarray, w: np.ndarray) -> float:
    g64, w64 = g.astype(np.float64), w.astype(np.float64)
    same = (np.isnan(g64) & np.isnan(w64)) | (g64 == w64)
    d = np.where(same, 0.0, np.abs(g64 - w64))
    return float(d.max()) if d.size else 0.0


def rand(*shape: int, dtype: Any = None, seed: int = 0, lo: float = -2, hi: float = 2) -> Any:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(*shape, generator=g, dtype=torch.float64) * (hi - lo) + lo
    return x.to(dtype or torch.float32)


# --- elementwise ------------------------------------------------------------------------------

ELEMENTWISE = [
    ("add", lambda x, y: x + y, EXACT),
    # torch fuses x + alpha * y into one fused multiply-add; gdv rounds the product first
    ("add_alpha", lambda x, y: torch.add(x, y, alpha=3), 1e-6),
    ("sub", lambda x, y: x - y, EXACT),
    ("mul", lambda x, y: x * y, EXACT),
    ("div", lambda x, y: x / y, EXACT),
    ("maximum", torch.maximum, EXACT),
    ("minimum", torch.minimum, EXACT),
    ("scalar_ops", lambda x, y: (x * 0.1 + 3) / 7 - y * 2.5, EXACT),
    ("rsub", lambda x, y: 1.5 - x, EXACT),
    ("where", lambda x, y: torch.where(x > y, x, y * 2), EXACT),
    ("compare", lambda x, y: (x < y, x <= 0.5, x == y, x != y, x >= y, x > 0), EXACT),
    ("clamp", lambda x, y: (x.clamp(-0.5, 0.5), x.clamp(min=0.1), x.clamp(max=0.2)), EXACT),
    ("neg_abs_relu", lambda x, y: (-x, x.abs(), torch.relu(x), F.relu(y)), EXACT),
    ("floor_ceil", lambda x, y: (torch.floor(x * 3), torch.ceil(y * 3)), EXACT),
    # torch's vectorised f32 sqrt (AVX-512 here) is not correctly rounded: 1 ulp apart
    ("sqrt", lambda x, y: torch.sqrt(x.abs()), 2.5e-7),
    ("pow_2", lambda x, y: x**2, EXACT),
    ("pow_3", lambda x, y: x**3, EXACT),
    ("reciprocal", lambda x, y: torch.reciprocal(x), EXACT),
    ("hardtanh", lambda x, y: F.hardtanh(x), EXACT),
    ("leaky_relu", lambda x, y: F.leaky_relu(x, 0.2), EXACT),
    (
        "logic",
        lambda x, y: ((x > 0) & (y > 0), (x > 0) | (y > 0), ~(x > 0), (x > 0) ^ (y > 0)),
        EXACT,
    ),
    ("exp", lambda x, y: torch.exp(x), 1e-6),
    ("log", lambda x, y: torch.log(x.abs() + 0.5), 1e-6),
    ("tanh_sigmoid", lambda x, y: (torch.tanh(x), torch.sigmoid(y)), 1e-6),
    ("erf", lambda x, y: torch.erf(x), 1e-6),
    ("sin_cos", lambda x, y: (torch.sin(x), torch.cos(y)), 1e-6),
    ("rsqrt", lambda x, y: torch.rsqrt(x.abs() + 0.1), 1e-5),
    ("tan_atan", lambda x, y: (torch.tan(x), torch.atan(y * 10)), 1e-6),
    (
        "asin_acos_atanh",
        lambda x, y: (torch.asin(x * 0.3), torch.acos(y * 0.3), torch.atanh(x * 0.3)),
        1e-6,
    ),
    ("sinh_cosh", lambda x, y: (torch.sinh(x), torch.cosh(y)), 1e-6),
    ("asinh_acosh", lambda x, y: (torch.asinh(x * 5), torch.acosh(y.abs() + 1)), 1e-6),
    ("pow_frac", lambda x, y: torch.pow(x.abs(), 1.7), 1e-6),
    ("silu", lambda x, y: F.silu(x), 1e-6),
]


@pytest.mark.parametrize("name,fn,tol", ELEMENTWISE, ids=[c[0] for c in ELEMENTWISE])
def test_elementwise_f32(name: str, fn: Any, tol: float | None) -> None:
    check(Fn(fn), rand(3, 5, seed=1), rand(3, 5, seed=2), tol=tol)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_narrow_floats_go_through_f32_like_torch(dtype: str) -> None:
    # torch's CPU kernels compute f16/bf16 in f32 with the scalar kept in f32: bit-exact here.
    dt = getattr(torch, dtype)
    fn = Fn(lambda x, y: ((x + y) * y - x / y) * 0.1 + torch.maximum(x, y) - 3)
    m = check(fn, rand(4, 6, dtype=dt, seed=3), rand(4, 6, dtype=dt, seed=4))
    assert f"{'f16' if dtype == 'float16' else 'bf16'}[4,6]" in print_module(m)


def test_f64_and_integers() -> None:
    check(
        Fn(lambda x, y: x * y + 1.0 / 3.0),
        rand(3, 4, dtype=torch.float64),
        rand(3, 4, seed=2, dtype=torch.float64),
    )
    i = torch.arange(-6, 6, dtype=torch.int64).reshape(3, 4)
    check(Fn(lambda a, b: (a * b + 3 - a, -a, a.abs(), torch.maximum(a, b))), i, i.flip(0))
    i32 = i.to(torch.int32)
    check(Fn(lambda a: (a + 1, a.to(torch.float32) * 0.5, a.to(torch.int8))), i32)
    i8 = i.to(torch.int8)
    check(Fn(lambda a: (a * 3, a > 0)), i8)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_remainders_on_integers(dtype: str) -> None:
    dt = getattr(torch, dtype)
    a = torch.tensor([[7, -7, 7, -7], [-128, 127, 0, 100]], dtype=dt)
    b = torch.tensor([[3, 3, -3, -3], [-1, 5, 9, -7]], dtype=dt)
    check(Fn(lambda x, y: (torch.fmod(x, y), torch.remainder(x, y), x % y, torch.fmod(x, 4))), a, b)


def test_float_remainder_is_refused_by_name() -> None:
    msg = refusal(Fn(lambda x, y: torch.remainder(x, y)), rand(3), rand(3, seed=2))
    assert "aten.remainder.Tensor" in msg and "remainder on f32" in msg, msg


def test_fmod_on_floats() -> None:
    a = torch.tensor([5.5, -5.5, 1e-30, -4.0, 3.0, 1e4])
    b = torch.tensor([2.0, 2.0, 1.0, 2.0, -0.75, 3.3])
    check(Fn(lambda x, y: torch.fmod(x, y)), a, b)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_bitwise_ops_on_integers(dtype: str) -> None:
    dt = getattr(torch, dtype)
    a = torch.tensor([[0, 1, -1, 7], [-128, 127, 85, -86]], dtype=dt)
    b = torch.tensor([[3, -2, 5, 127], [1, -128, -86, 85]], dtype=dt)
    check(Fn(lambda x, y: (x & y, x | y, x ^ y, ~x, (x & 3) | y)), a, b)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_shifts_on_integers_with_amounts_out_of_range(dtype: str) -> None:
    """torch's rule for negative amounts and amounts at least the width is the IR's."""
    dt = getattr(torch, dtype)
    bits = torch.iinfo(dt).bits
    a = torch.tensor([1, -8, -1, 64, 5, 7, -128, 100], dtype=dt)
    b = torch.tensor([1, bits, 127, -1, -3, 2, bits - 1, bits + 1], dtype=dt)
    check(Fn(lambda x, y: (x << y, x >> y, x << 2, x >> 1)), a, b)


def test_uint8_and_int16_wrap_and_compare_like_torch() -> None:
    """torch's u8 and i16 (gdv 0.6, issue 19): arithmetic wraps, comparisons and max are
    unsigned for u8, conversions wrap (to integers) or round (to floats), bit for bit."""
    u = torch.tensor([[255, 0, 128, 1], [7, 200, 100, 254]], dtype=torch.uint8)
    check(
        Fn(lambda a, b: (a + b, a - b, a * b, torch.maximum(a, b), a < b, -a, a.to(torch.int8))),
        u,
        u.flip(1),
    )
    s = torch.tensor([32767, -32768, -1, 300], dtype=torch.int16)
    check(Fn(lambda a: (a + 1, a * 2, a.to(torch.uint8), a.to(torch.float16), a.abs())), s)
    m = check(Fn(lambda a: a.to(torch.float32) * 0.5), u)
    assert "u8[2,4]" in print_module(m)


F8 = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]


@pytest.mark.parametrize("name", F8)
def test_float8_conversions_match_torch_bit_for_bit(name: str) -> None:
    """torch's float8 dtypes: `.to()` rounds to nearest-even, saturating into e4m3fn (inf
    too) and overflowing elsewhere (NaN codes compared as one value); from float8 exactly;
    a float8 input moved by transpose and reshape."""
    d = getattr(torch, name)
    codes = torch.arange(256, dtype=torch.uint8).view(d).to(torch.float32)
    finite = codes[torch.isfinite(codes)].sort().values
    mids = (finite[1:] + finite[:-1]) / 2
    top = float(finite.max())
    edges = [top * 1.03, top * 1.07, -top * 3, float("inf"), -float("inf"), float("nan"), -0.0]
    x = torch.cat([codes, mids, torch.tensor(edges, dtype=torch.float32)])
    w = torch.arange(256, dtype=torch.uint8).view(d).reshape(16, 16)
    got, want, m = run_both(
        Fn(lambda a, b: (a.to(d), b.t().reshape(8, 32), b.to(torch.float16))), x, w
    )
    for g, r in zip(got, want, strict=True):
        assert g.dtype == r.dtype
        gw, rw = g.astype(np.float64), r.astype(np.float64)
        same = (np.isnan(gw) & np.isnan(rw)) | (
            np.ascontiguousarray(g).view(np.uint8 if g.itemsize == 1 else np.uint16)
            == np.ascontiguousarray(r).view(np.uint8 if r.itemsize == 1 else np.uint16)
        )
        assert same.all(), (name, np.argwhere(~same).tolist()[:5])
    assert "f8e" in print_module(m)


def test_float8_arithmetic_is_refused_by_name() -> None:
    """`a == a` on a float8 tensor is a comparison of float8 values: refused ("storage
    only"), not converted silently."""
    x = torch.ones(4, dtype=torch.float8_e5m2)
    with pytest.raises(IRError, match="storage only"):
        run_both(Fn(lambda a: a == a), x)


def test_any_and_all_of_nothing_are_false_and_true() -> None:
    """any over an empty dim is false and all is true, as torch says: folded in u8, whose
    empty max and min are 0 and 255 (i8's empty max, -128, read as a boolean was true)."""
    x = torch.zeros((3, 0), dtype=torch.bool)
    check(Fn(lambda a: (torch.any(a, dim=1), torch.all(a, dim=1))), x)
    y = torch.tensor([[True, False], [False, False]])
    check(Fn(lambda a: (torch.any(a, dim=1), torch.all(a, dim=1))), y)


def test_conversions() -> None:
    x = rand(3, 4) * 10
    check(
        Fn(
            lambda a: (
                a.to(torch.int32),
                a.to(torch.float16),
                a.to(torch.bfloat16),
                a.double(),
                a.bool(),
            )
        ),
        x,
    )
    b = x > 0
    check(Fn(lambda m: (m.to(torch.float32), m.long() + 1)), b)


# --- layout -----------------------------------------------------------------------------------

LAYOUT = [
    ("view", lambda x: x.view(4, 6).reshape(2, 12)),
    ("permute", lambda x: x.permute(2, 0, 1)),
    ("transpose", lambda x: x.transpose(0, 2)),
    ("unsqueeze_squeeze", lambda x: x.unsqueeze(1).unsqueeze(-1).squeeze(1).squeeze(-1)),
    ("expand", lambda x: x[:, :1, :].expand(2, 5, 4)),
    ("slice", lambda x: (x[:, 1:3], x[..., ::2], x[1:, :, 1::3], x[:, -2:])),
    ("select", lambda x: (x[1], x[:, 2], x[..., -1])),
    ("cat", lambda x: torch.cat([x, x * 2], dim=1)),
    ("split", lambda x: torch.split(x, 2, dim=1)),
    ("chunk", lambda x: torch.chunk(x, 2, dim=2)),
    ("pad", lambda x: F.pad(x, (1, 2, 0, 1), value=0.5)),
    ("flatten", lambda x: torch.flatten(x, 1)),
    ("t", lambda x: x[0].t()),
]


@pytest.mark.parametrize("name,fn", LAYOUT, ids=[c[0] for c in LAYOUT])
def test_layout_bit_exact(name: str, fn: Any) -> None:
    check(Fn(fn), rand(2, 3, 4, seed=5))


def test_index_and_embedding() -> None:
    table = rand(10, 4, seed=6)
    idx = torch.tensor([[1, 9, 0], [4, 4, 7]])
    check(
        Fn(lambda t, i: (t[i], F.embedding(i, t), t[:, [3, 0]], t[i, (i > 3).long()])), table, idx
    )
    check(nn.Embedding(12, 5), torch.tensor([[0, 11, 3]]))
    neg = torch.tensor([-1, 2, -10])
    check(Fn(lambda t, i: t[i]), table, neg)


def test_int_index_arithmetic_folds_at_import() -> None:
    # arange and the masks built from it are evaluated at import time: no iota in the IR.
    m = check(Fn(lambda x: x * (torch.arange(5) < 3).to(torch.float32)), rand(2, 5))
    text = print_module(m)
    assert "iota" not in text and "cmp" not in text


def test_creation() -> None:
    check(
        Fn(lambda x: (x + torch.ones_like(x), torch.full((2, 2), 1.5), torch.zeros(3))), rand(2, 2)
    )
    check(Fn(lambda x: x + torch.arange(0.1, 1.3, 0.3)), rand(3, 4))
    check(
        Fn(lambda x: x + torch.arange(-1.0, 2.0, 0.1)[:4].to(torch.bfloat16)),
        rand(3, 4, dtype=torch.bfloat16),
    )


# --- reductions -------------------------------------------------------------------------------

REDUCE = [
    ("sum_dim", lambda x: x.sum(1), 1e-6),
    ("sum_all", lambda x: x.sum(), 1e-5),
    ("sum_keepdim", lambda x: x.sum((0, 2), keepdim=True), 1e-5),
    ("mean", lambda x: x.mean(-1), 1e-6),
    ("amax_amin", lambda x: (x.amax(1), x.amin((0, 2), keepdim=True)), EXACT),
    ("max_dim_values", lambda x: x.max(dim=1, keepdim=True).values, EXACT),
    ("any_all", lambda x: ((x > 1.5).any(1), (x > -1.9).all()), EXACT),
    ("vector_norm", lambda x: torch.linalg.vector_norm(x, dim=-1), 1e-6),
    ("normalize", lambda x: F.normalize(x, dim=-1), 1e-6),
]


@pytest.mark.parametrize("name,fn,tol", REDUCE, ids=[c[0] for c in REDUCE])
def test_reductions(name: str, fn: Any, tol: float | None) -> None:
    check(Fn(fn), rand(3, 7, 5, seed=7), tol=tol)


ARG = [
    ("argmax_all", lambda x: torch.argmax(x)),
    ("argmax_all_keepdim", lambda x: torch.argmax(x, keepdim=True)),
    ("argmax_dim", lambda x: torch.argmax(x, 1)),
    ("argmin_negative_dim_keepdim", lambda x: torch.argmin(x, -1, keepdim=True)),
    ("max_dim_indices", lambda x: torch.max(x, 1).indices),
    ("min_dim_values_and_indices", lambda x: tuple(torch.min(x, 0, keepdim=True))),
]
"""Index results: the first extreme, a NaN counting as the extreme, +0.0 tying with -0.0."""


SORTS = [
    ("topk", lambda x: torch.topk(x, 2)),
    ("topk_smallest_dim0", lambda x: torch.topk(x, 3, dim=0, largest=False)),
    ("sort", lambda x: torch.sort(x, dim=1)),
    ("sort_descending_dim0", lambda x: torch.sort(x, 0, descending=True)),
    ("argsort", lambda x: torch.argsort(x, -1)),
    ("argsort_stable_descending", lambda x: torch.argsort(x, dim=0, stable=True, descending=True)),
]
"""Sorting: a NaN is above every number. torch orders equal values in an unspecified way (its
topk does not keep the lower index first), so these inputs have no ties, except the stable sorts
of `test_stable_sort_keeps_ties_in_index_order`."""


@pytest.mark.parametrize("name,fn", SORTS, ids=[c[0] for c in SORTS])
def test_sorts_on_nan_and_inf(name: str, fn: Any) -> None:
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[1.0, nan, 3.0, -2.0], [0.5, -1.0, inf, 2.0], [1e30, 7.0, -1e30, 5.0]])
    check(Fn(fn), x)
    check(Fn(fn), torch.tensor([[3, 1, 4, 9], [-7, 2, 0, 5], [8, -3, 6, 1]], dtype=torch.int32))


def test_stable_sort_keeps_ties_in_index_order() -> None:
    x = torch.tensor([[3.0, 1.0, 3.0, 1.0, 3.0], [0.0, -0.0, 2.0, -0.0, 0.0]])
    check(Fn(lambda x: torch.sort(x, stable=True, dim=1, descending=True)), x)
    check(Fn(lambda x: torch.sort(x, stable=True, dim=1)), x)


CUMULATIVE = [
    ("cumsum", lambda x: torch.cumsum(x, 1)),
    ("cumprod_negative_dim", lambda x: torch.cumprod(x, -1)),
    ("cumsum_dim0_to_f64", lambda x: torch.cumsum(x, 0, dtype=torch.float64)),
]
"""Running folds: torch's float sum starts from +0.0, so a leading -0.0 becomes +0.0."""


@pytest.mark.parametrize("name,fn", CUMULATIVE, ids=[c[0] for c in CUMULATIVE])
def test_cumulative_on_nan_inf_and_signed_zeros(name: str, fn: Any) -> None:
    nan, inf = float("nan"), float("inf")
    x = torch.tensor(
        [[1.0, nan, 3.0, -0.0], [-0.0, -0.0, inf, 2.0], [1e30, 1e30, -1e30, 5.0],
         [-0.0, 1.0, -1.0, -0.0]]
    )  # fmt: skip
    check(Fn(fn), x)


def test_cumulative_integers_promote_and_narrow_floats_accumulate_in_f32() -> None:
    ints = torch.tensor([[3, 1, 3], [-7, -7, 2]], dtype=torch.int32)
    check(Fn(lambda x: torch.cumsum(x, 1)), ints)  # an i64 result, as torch's
    check(Fn(lambda x: torch.cumprod(x, 0)), ints.to(torch.int8))
    check(Fn(lambda x: torch.cumsum(x, 1)), rand(4, 300, seed=3).half() * 10)
    check(Fn(lambda x: torch.cumprod(x, 1)), rand(4, 30, seed=4).bfloat16())
    check(Fn(lambda x: torch.cumsum(x, 0)), torch.tensor(3.5))


@pytest.mark.parametrize("name,fn", ARG, ids=[c[0] for c in ARG])
def test_arg_extremes_on_ties_nan_inf_and_signed_zeros(name: str, fn: Any) -> None:
    nan, inf = float("nan"), float("inf")
    x = torch.tensor(
        [[1.0, nan, 3.0, nan], [-0.0, 0.0, -inf, -inf], [2.0, 5.0, 5.0, 1.0], [inf, inf, 0, -0.0]]
    )
    check(Fn(fn), x)
    check(Fn(fn), torch.tensor([[3, 1, 3], [-7, -7, 2]], dtype=torch.int32))


# --- composites and contractions --------------------------------------------------------------


def test_linear_and_matmul() -> None:
    check(nn.Linear(8, 5), rand(4, 8), tol=1e-6)
    check(nn.Linear(8, 5, bias=False), rand(2, 3, 8), tol=1e-6)
    check(Fn(lambda a, b: (a @ b, torch.bmm(a, b))), rand(2, 3, 4), rand(2, 4, 5), tol=1e-6)
    check(Fn(lambda a, b: a @ b), rand(3, 4), rand(4), tol=1e-6)
    check(
        Fn(lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0)),
        rand(5),
        rand(3, 4),
        rand(4, 5),
        tol=1e-6,
    )


def test_convolution() -> None:
    torch.manual_seed(1)
    conv = nn.Conv2d(4, 6, 3, stride=(1, 2), padding=1, dilation=(2, 1), groups=2)
    check(conv, rand(2, 4, 7, 9), tol=1e-5)
    check(nn.Conv1d(3, 5, 4, padding=2, bias=False), rand(2, 3, 10), tol=1e-5)


def test_cnn_batch_norm_and_pools() -> None:
    torch.manual_seed(2)
    bn = nn.BatchNorm2d(3)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    x = rand(2, 3, 7, 9, seed=13)
    check(bn, x, tol=1e-6)
    check(nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True), x)  # bit-exact: a max
    check(nn.MaxPool2d((2, 3), dilation=(1, 2)), x)
    check(nn.AvgPool2d(3, stride=2, padding=1), x, tol=1e-6)
    check(nn.AvgPool2d(2, ceil_mode=True, count_include_pad=False), x, tol=1e-6)
    check(nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True), x, tol=1e-6)
    check(nn.AdaptiveAvgPool2d((1, 3)), x, tol=1e-6)
    cnn = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2),
    )  # fmt: skip
    check(cnn, rand(2, 3, 8, 8, seed=14), tol=1e-5)


@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_is_torchs_linear_and_constant_terms(affine: bool) -> None:
    """Inference batch norm imports as torch's CPU kernel computes it: per channel alpha = 1 /
    sqrt(var + eps) * weight and beta = bias - mean * alpha, then x * alpha + beta (one
    multiply and one add over the tensor). The reference gives numpy's evaluation of that
    formula, each op rounded, bit for bit; torch's build fuses the multiply-adds, so against
    torch it is within an ulp or two."""
    torch.manual_seed(3)
    bn = nn.BatchNorm2d(6, eps=1e-3, affine=affine).eval()
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.25, 4)
    if affine:
        bn.weight.data.uniform_(-2, 2)
        bn.bias.data.uniform_(-1, 1)
    x = rand(2, 6, 5, 7, seed=21)
    got, want, m = run_both(bn, x)
    full = [op for op in m.entry.ops if op.type.shape == (2, 6, 5, 7)]
    assert sorted(op.name for op in full if op.name != "broadcast") == ["add", "mul"]
    f = np.float32
    var, mean = bn.running_var.numpy(), bn.running_mean.numpy()
    alpha = f(1) / np.sqrt(var + f(1e-3))
    beta = f(0) - mean * alpha
    if affine:
        alpha = alpha * bn.weight.detach().numpy()
        beta = bn.bias.detach().numpy() - mean * alpha
    formula = x.numpy() * alpha[:, None, None] + beta[:, None, None]
    assert reference.bit_equal(got[0], formula.astype(f))
    assert _maxdiff(got[0], want[0]) <= 1e-6


def test_softmax_layer_norm_gelu() -> None:
    x = rand(2, 3, 8, seed=8) * 3
    check(Fn(lambda a: (F.softmax(a, -1), F.softmax(a, 1), F.log_softmax(a, -1))), x, tol=1e-6)
    check(nn.LayerNorm(8), x, tol=1e-5)
    ln = nn.LayerNorm([3, 8], elementwise_affine=False)
    check(ln, x, tol=1e-5)
    check(Fn(lambda a: (F.gelu(a), F.gelu(a, approximate="tanh"))), x, tol=1e-6)
    check(Fn(lambda a: F.layer_norm(a, (8,), eps=1e-3)), x.to(torch.bfloat16), tol=2**-7)
    w, b = rand(8, seed=16), rand(8, seed=17)
    native = Fn(lambda a: torch.ops.aten.native_layer_norm(a, [8], w, b, 1e-5))
    check(native, x, tol=1e-5)  # output, mean and 1/sqrt(var + eps)


def test_scaled_dot_product_attention() -> None:
    q, k, v = rand(2, 3, 4, 8, seed=9), rand(2, 3, 6, 8, seed=10), rand(2, 3, 6, 8, seed=11)
    sdpa = F.scaled_dot_product_attention
    check(Fn(lambda q, k, v: sdpa(q, k, v)), q, k, v, tol=1e-6)
    check(Fn(lambda q, k, v: sdpa(q, k, v, scale=0.3)), q, k, v, tol=1e-6)
    mask = torch.rand(4, 6, generator=torch.Generator().manual_seed(1)) > 0.3
    mask[:, 0] = True  # every row keeps a key (torch and gdv differ on fully masked rows)
    check(Fn(lambda q, k, v, m: sdpa(q, k, v, attn_mask=m)), q, k, v, mask, tol=1e-6)
    check(Fn(lambda q, k, v, m: sdpa(q, k, v, attn_mask=m)), q, k, v, rand(4, 6), tol=1e-6)
    check(Fn(lambda q, k, v: sdpa(q, k, k, is_causal=True)), q, q, q, tol=1e-6)


def test_transformer_encoder_layer() -> None:
    torch.manual_seed(3)
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, activation="gelu")
    check(layer, rand(2, 5, 16, seed=15), tol=1e-5)


def test_mlp_with_dropout_in_eval() -> None:
    mlp = nn.Sequential(
        nn.Linear(6, 16), nn.GELU(), nn.Dropout(0.1), nn.Linear(16, 3), nn.Softmax(-1)
    )
    m = check(mlp, rand(5, 6), tol=1e-6)
    weights = [p for p in m.entry.params if "torch_name" in p.attrs]
    assert [p.attrs["torch_name"] for p in weights] == ["0.weight", "0.bias", "3.weight", "3.bias"]
    w0 = mlp[0].weight.detach().numpy().astype(np.float64)
    assert weights[0].range == (w0.min(), w0.max())


# --- hypothesis: shapes -----------------------------------------------------------------------

shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3)


@settings(max_examples=8)
@given(shapes, st.integers(0, 2**16))
def test_broadcast_arithmetic_bit_exact(shape: list[int], seed: int) -> None:
    other = [1 if (seed >> k) & 1 else s for k, s in enumerate(shape)][(seed >> 8) % len(shape) :]
    x, y = rand(*shape, seed=seed), rand(*other, seed=seed + 1)
    check(Fn(lambda a, b: torch.maximum(a * b - a / (b + 3), a)), x, y)


@settings(max_examples=6)
@given(st.integers(1, 6), st.integers(1, 9), st.integers(1, 7), st.booleans())
def test_linear_shapes(m: int, k: int, n: int, bias: bool) -> None:
    torch.manual_seed(m * 100 + k * 10 + n)
    check(nn.Linear(k, n, bias=bias), rand(m, k, seed=k), tol=1e-5)


@settings(max_examples=6)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=3), st.data())
def test_softmax_and_sum_any_axis(shape: list[int], data: st.DataObject) -> None:
    d = data.draw(st.integers(-len(shape), len(shape) - 1))
    check(
        Fn(lambda a: (F.softmax(a, d), a.sum(d), a.amax(d))),
        rand(*shape, seed=len(shape)) * 4,
        tol=1e-5,
    )


# --- refusals ---------------------------------------------------------------------------------


def refusal(module: Any, *inputs: Any, **export: Any) -> str:
    ep = torch.export.export(module, tuple(inputs), **export)
    with pytest.raises(Unsupported) as e:
        import_program(ep)
    return e.value.message


def test_refusals_name_op_node_and_reason() -> None:
    assert refusal(Fn(lambda x: torch.sort(x).values), torch.tensor(1.0)) == (
        "unsupported PyTorch op aten.sort.default at node sort: sorting a scalar"
    )
    assert refusal(Fn(lambda x: torch.remainder(x, 2.0)), rand(3)) == (
        "unsupported PyTorch op aten.remainder.Scalar at node remainder: remainder on f32 (with "
        "the divisor's sign a float remainder rounds; fmod is exact)"
    )
    assert refusal(Fn(lambda x: torch.log1p(x)), rand(3)) == (
        "unsupported PyTorch op aten.log1p.default at node log1p: no exact IR decomposition "
        "(log(1 + x) rounds 1 + x)"
    )
    assert refusal(Fn(lambda x, i: x[i]), rand(4), torch.tensor([True, False, True, True])) == (
        "unsupported PyTorch op aten.index.Tensor at node index: a boolean mask index (its "
        "output shape depends on the data)"
    )


def test_an_argument_combination_a_mapping_does_not_read_is_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gdv.frontends.torch as frontend

    def confused(imp: Any, node: Any, args: dict[str, Any]) -> None:
        raise TypeError("boom")

    monkeypatch.setitem(frontend.HANDLERS, "aten.relu.default", confused)
    assert refusal(Fn(torch.relu), rand(3)) == (
        "unsupported PyTorch op aten.relu.default at node relu: arguments self=xs_0 are not "
        "supported (TypeError: boom)"
    )


def test_training_dropout_is_refused() -> None:
    drop = nn.Dropout(0.5).train()
    ep = torch.export.export(drop, (rand(4),))
    with pytest.raises(Unsupported, match="at node native_dropout: training-mode dropout"):
        import_program(ep)


class Double(nn.Module):
    def forward(self, x: Any) -> Any:
        return x * 2


def test_unsupported_dtype_and_dynamic_shapes() -> None:
    with pytest.raises(Unsupported, match=r"input 'x' has no IR dtype|dtype torch.complex64"):
        import_program(
            torch.export.export(Fn(lambda x: x * 2), (torch.ones(3, dtype=torch.complex64),))
        )
    dim = torch.export.Dim("n", min=2, max=16)
    ep = torch.export.export(Double(), (rand(4, 3),), dynamic_shapes=({0: dim},))
    with pytest.raises(
        Unsupported, match=r"input 'x' has a symbolic dim 's\d+': export with static"
    ):
        import_program(ep)


def test_buffer_mutation_is_refused() -> None:
    class Counter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("n", torch.zeros(3))

        def forward(self, x: Any) -> Any:
            self.n.add_(x)
            return x * 2

    with pytest.raises(Unsupported, match="BUFFER_MUTATION output"):
        import_program(torch.export.export(Counter(), (rand(3),)))


def test_not_a_program() -> None:
    with pytest.raises(IRError, match="expected a torch.export.ExportedProgram, got Linear"):
        import_program(nn.Linear(2, 2))


# --- entry points -----------------------------------------------------------------------------


def _save(tmp_path: Path) -> tuple[Path, Any, Any, Any]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.LayerNorm(8), nn.Linear(8, 2)).eval()
    x = rand(3, 6, seed=12)
    ep = torch.export.export(model, (x,))
    path = tmp_path / "mlp.pt2"
    torch.export.save(ep, str(path))
    return path, model, x, ep


def test_import_torch_api_and_path(tmp_path: Path) -> None:
    path, model, x, ep = _save(tmp_path)
    for source in (ep, path, str(path)):
        m, weights = gdv.import_torch(source)
        out = gdv.run(m, {"input": x.numpy(), **weights})[0]
        with torch.no_grad():
            assert np.abs(out - model(x).numpy()).max() <= 1e-5
    m, _ = gdv.import_torch(ep, input_ranges={"input": (-2, 2)})
    assert m.entry.params[0].range == (-2.0, 2.0)


def test_cli_import_then_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, model, x, _ = _save(tmp_path)
    ir, weights = tmp_path / "m.gdv", tmp_path / "w.npz"
    assert main(["import", str(path), "-o", str(ir), "--weights", str(weights)]) == 0
    assert "imported" in capsys.readouterr().out
    np.savez(tmp_path / "in.npz", input=x.numpy())
    outs = tmp_path / "out.npz"
    argv = ["run", str(ir), "--inputs", str(tmp_path / "in.npz"), "--inputs", str(weights)]
    assert main([*argv, "--output", str(outs)]) == 0
    with torch.no_grad():
        assert np.abs(np.load(outs)["out0"] - model(x).numpy()).max() <= 1e-5


def test_cli_bad_files_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, *_ = _save(tmp_path)
    text = tmp_path / "text.pt2"
    text.write_text("not a program")
    corrupt = tmp_path / "corrupt.pt2"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(corrupt, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            dst.writestr(item, data[: len(data) // 3] if item.filename.endswith(".json") else data)
    truncated = tmp_path / "truncated.pt2"
    truncated.write_bytes(path.read_bytes()[:2000])
    cases = [
        (text, "not a torch.export program (.pt2): not a zip archive"),
        (truncated, "not a torch.export program (.pt2): not a zip archive"),
        (corrupt, "not a valid torch.export program (.pt2): "),
        (tmp_path / "missing.pt2", "no such file"),
    ]
    for bad, message in cases:
        capsys.readouterr()
        assert main(["import", str(bad), "-o", str(tmp_path / "o.gdv")]) == 3
        err = capsys.readouterr().err
        assert f"{bad}:1:1: error: {message}" in err, err
        assert "Traceback" not in err
    assert main(["import", str(path), "-o", str(tmp_path / "o.gdv"), "--input-shape", "x=1"]) == 3
    assert "apply to ONNX models" in capsys.readouterr().err
    onnx_like = tmp_path / "model.onnx"
    onnx_like.write_bytes(path.read_bytes())  # a .pt2 under another name is read as ONNX
    assert main(["import", str(onnx_like), "-o", str(tmp_path / "o.gdv")]) == 3
    assert "not a valid ONNX model" in capsys.readouterr().err


def test_math_sanity_of_helpers() -> None:
    assert math.isclose(_maxdiff(np.array([1.0, np.nan]), np.array([1.5, np.nan])), 0.5)


# --- as_strided -------------------------------------------------------------------------------


class Strided(nn.Module):
    """`as_strided` of a fresh (contiguous) value, as decompositions emit it."""

    def __init__(self, size: Any, stride: Any, offset: int = 0) -> None:
        super().__init__()
        self.view = (tuple(size), tuple(stride), offset)

    def forward(self, x: Any) -> Any:
        size, stride, offset = self.view
        return torch.as_strided(x * 2.0, size, stride, offset)


AS_STRIDED = [
    # adaptive_avg_pool2d's decomposition (convnext): size-1 dims with arbitrary strides
    ((1, 768, 1, 1), (1, 768, 1, 1), (768, 1, 768, 768), 0),
    ((4, 6), (3, 2), (1, 6), 0),  # a transpose of a column block
    ((24,), (2, 3, 2), (12, 1, 4), 1),  # dims permuted, an offset
    ((10,), (2, 2), (3, 1), 2),  # rows of a padded block
    ((6,), (2, 3), (3, 1), 0),  # a plain reshape
    ((6,), (2, 2), (3, 2), 0),  # the smallest stride not dividing the next: a stepped slice
    ((30,), (2, 2, 3), (14, 7, 2), 1),  # the last dim stepped
    ((12,), (3,), (4,), 1),  # one dim, a step
    ((5,), (0, 3), (1, 1), 0),  # empty
    ((6,), (), (), 4),  # one element, rank 0
]


@pytest.mark.parametrize("shape,size,stride,offset", AS_STRIDED)
def test_as_strided_is_torchs_own(shape: Any, size: Any, stride: Any, offset: int) -> None:
    check(Strided(size, stride, offset), rand(*shape))


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_as_strided_agrees_with_torch_or_is_refused(data: st.DataObject) -> None:
    """Any view over a small tensor: imported and equal to torch's, bit for bit, or refused
    with a reason; a nested view (each dim's span inside the next larger stride, each stride
    but the smallest a multiple of the next) is always imported."""
    rank = data.draw(st.integers(0, 3), label="rank")
    size = data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank), label="size")
    stride = data.draw(st.lists(st.integers(0, 8), min_size=rank, max_size=rank), label="stride")
    offset = data.draw(st.integers(0, 3), label="offset")
    last = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    numel = last + 1 + data.draw(st.integers(0, 3), label="spare")  # never past the storage
    live = sorted(((s, n) for n, s in zip(size, stride, strict=True) if n > 1), reverse=True)
    pairs = list(zip(live, live[1:], strict=False))
    # each dim's span inside the next larger stride, strides multiples of the next but for
    # the smallest (a stepped slice)
    nested = all(s > 0 for s, _ in live) and all(
        a > b * (m - 1) if j == len(pairs) - 1 else (a % b == 0 and a >= b * m)
        for j, ((a, _), (b, m)) in enumerate(pairs)
    )
    module = Strided(size, stride, offset)
    x = rand(numel, seed=numel)
    ep = torch.export.export(module, (x,))
    try:
        m, weights = import_program(ep)
    except Unsupported as e:
        assert not nested, e.message
        assert "as_strided" in e.message and (
            "overlapping" in e.message or "not express" in e.message
        )
        return
    got = reference.run(m, {m.entry.params[0].name: to_numpy(x), **weights})[0]
    with torch.no_grad():
        want = to_numpy(module(x))
    assert got.shape == want.shape and np.array_equal(_bits(got), _bits(want))


def test_as_strided_refusals_say_why() -> None:
    x = rand(6)
    assert refusal(Strided((2, 3), (1, 1)), x).endswith(
        "overlapping strides: sizes [2, 3] with strides [1, 1] read some elements twice"
    )
    assert refusal(Strided((2, 2, 3), (12, 6, 3)), rand(30)).endswith(
        "overlapping strides: sizes [2, 2, 3] with strides [12, 6, 3] read some elements twice"
    )
    assert refusal(Strided((3,), (0,)), x).endswith(
        "stride 0 on dim 0 of size 3: overlapping (a broadcast)"
    )
    assert refusal(Strided((2, 3), (3, 2)), rand(8)).endswith(
        "strides [3, 2] (sizes [2, 3]) do not nest (a stride that is not a multiple of the next "
        "smaller one, past the last): not expressible as slice, reshape and transpose"
    )
    assert refusal(Strided((2, 2, 2), (5, 2, 1)), rand(9)).endswith(
        "strides [5, 2, 1] (sizes [2, 2, 2]) do not nest (a stride that is not a multiple of "
        "the next smaller one, past the last): not expressible as slice, reshape and transpose"
    )


def test_as_strided_past_its_input_is_refused() -> None:
    # x[:2] is contiguous from offset 0, but its storage holds all of x: torch reads x[2:]
    message = refusal(Fn(lambda x: torch.as_strided(x[:2], (4,), (1,))), rand(4))
    assert message.endswith(
        "the view reads element 3 of an input of 2 element(s) (storage past the input's own "
        "elements)"
    )


def test_as_strided_of_a_strided_view_is_refused() -> None:
    # the input's storage is not its elements in order: as_strided reads the storage
    message = refusal(Fn(lambda x: torch.as_strided(x.t(), (2, 3), (3, 1))), rand(3, 2))
    assert "aten.as_strided.default" in message and "itself a strided view" in message
