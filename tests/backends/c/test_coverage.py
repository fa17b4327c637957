"""Op and dtype coverage of the C target, compared with the reference backend (issue 5, items
1 and 4).

Every op of the registry except the graph-stage composites, on every dtype it accepts (f64 f32 f16
bf16, the integers i8 .. i64 and u8 .. u64, i1), runs on the C target and must equal the reference
bit for bit (all NaNs one value), transcendentals within an ulp or a few (IR_SPEC.md section 3).
Hypothesis draws shapes with size-0 and size-1 dims and values with NaN, infinities, signed zeros,
subnormals and the largest finite values of each dtype; `take` gets negative and out-of-range
indices of every index dtype. One module (one C compile) per example, several ops per module.
`test_every_op_and_dtype_has_a_conformance_case` walks the op registry and fails when an op
other than the decomposed composites has no case here, or no C lowering.
"""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from support import array_of as _array
from support import ir_type as _ty

from gdv.api import parse
from gdv.backends import c, reference
from gdv.backends.c.registry import LOWERINGS, UNSUPPORTED
from gdv.ir import ops
from gdv.ir.dtypes import INT_DTYPES, DType, from_numpy

FLOAT = [DType.F64, DType.F32, DType.F16, DType.BF16]
INT = list(INT_DTYPES)
NARROW = [DType.F16, DType.BF16]
ALL = [*FLOAT, *INT, DType.I1]

UNARY = ["neg", "abs", "sqrt", "floor", "relu"]
BINARY = ["add", "sub", "mul", "div", "max", "min"]
TRANSCENDENTAL = ["exp", "log", "tanh", "sigmoid", "erf", "sin", "cos", "rsqrt"]
TRANSCENDENTAL += ["tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"]
CMP = ["lt", "le", "gt", "ge", "eq", "ne"]
TRANSCENDENTAL_ULPS = {DType.F64: 4, DType.F32: 1, DType.F16: 1, DType.BF16: 1}
"""f32/f16/bf16: libm's double result rounded once, as the reference rounds numpy's: they can
differ only where the two doubles straddle a rounding boundary. f64: the two libms differ."""


shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)


def _ordinal(x: np.ndarray) -> list[int]:
    """Floats as integers in value order (adjacent floats differ by 1; -0.0 and +0.0 by 1)."""
    bits = 8 * x.dtype.itemsize
    u = x.reshape(-1).view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])
    out = []
    for v in u.tolist():
        mag = v & ((1 << (bits - 1)) - 1)
        out.append(-mag - 1 if v >> (bits - 1) else mag)
    return out


def _same(got: np.ndarray, want: np.ndarray, ulps: int = 0) -> bool:
    kind = from_numpy(want.dtype)
    if ulps == 0 or kind is None or not kind.is_float:
        return reference.bit_equal(got, want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    g, w = got.astype(np.float64), want.astype(np.float64)
    if not np.array_equal(np.isnan(g), np.isnan(w)):
        return False
    nan = np.isnan(w).reshape(-1)
    pairs = zip(_ordinal(got), _ordinal(want), nan.tolist(), strict=True)
    return all(n or abs(a - b) <= ulps for a, b, n in pairs)


def _check(text: str, inputs: dict[str, np.ndarray], ulps: dict[int, int] | None = None) -> None:
    """C and reference results of `text` on `inputs` equal (result k within ulps[k])."""
    module = parse(text)
    got = c.run(module, inputs)
    want = reference.run(module, inputs)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        tol = (ulps or {}).get(k, 0)
        assert _same(g, w, tol), f"result {k}:\n{reference.describe_difference(g, w)}\n{text}"


class _Fn:
    """A function being written: params, ops and results, printed as IR text."""

    def __init__(self) -> None:
        self.params: list[str] = []
        self.body: list[str] = []
        self.results: list[tuple[str, str]] = []
        self.ulps: dict[int, int] = {}

    def param(self, name: str, type_: str) -> None:
        self.params.append(f"%{name}: {type_}")

    def op(self, text: str, type_: str, ulps: int = 0, keep: bool = True) -> str:
        name = f"%r{len(self.body)}"
        self.body.append(f"  {name} = {text} : {type_}")
        if keep:
            if ulps:
                self.ulps[len(self.results)] = ulps
            self.results.append((name, type_))
        return name

    def text(self, extra: str = "") -> str:
        head = f"func @main({', '.join(self.params)}) -> ({', '.join(t for _, t in self.results)})"
        ret = "  return " + ", ".join(n for n, _ in self.results)
        return "\n".join([head + " {", *self.body, ret, "}", extra])


# --- elementwise ---------------------------------------------------------------------------


@settings(max_examples=16)
@given(data=st.data(), dtype=st.sampled_from(NARROW), shape=shapes)
def test_narrow_float_elementwise_bit_exact(data, dtype: DType, shape) -> None:
    """f16/bf16: every exact elementwise op, cmp, select, convert to and from every dtype."""
    t = _ty(dtype, shape)
    f = _Fn()
    for p in ("x", "y"):
        f.param(p, t)
    f.param("p", _ty(DType.I1, shape))
    for name in UNARY:
        f.op(f"{name}(%x)", t)
    for name in BINARY:
        f.op(f"{name}(%x, %y)", t)
    for d in CMP:
        f.op(f'cmp(%x, %y) {{dir = "{d}"}}', _ty(DType.I1, shape))
    f.op("select(%p, %x, %y)", t)
    for k, d in enumerate(ALL):
        f.op("convert(%x)", _ty(d, shape))
        f.param(f"s{k}", _ty(d, shape))
        f.op(f"convert(%s{k})", t)
    inputs = {"x": data.draw(_array(dtype, shape)), "y": data.draw(_array(dtype, shape))}
    inputs["p"] = data.draw(_array(DType.I1, shape))
    for k, d in enumerate(ALL):
        inputs[f"s{k}"] = data.draw(_array(d, shape))
    _check(f.text(), inputs)


@settings(max_examples=10)
@given(data=st.data(), dtype=st.sampled_from(NARROW), shape=shapes)
def test_narrow_transcendentals_within_an_ulp(data, dtype: DType, shape) -> None:
    t = _ty(dtype, shape)
    f = _Fn()
    f.param("x", t)
    f.param("y", t)
    for name in TRANSCENDENTAL:
        f.op(f"{name}(%x)", t, ulps=TRANSCENDENTAL_ULPS[dtype])
    f.op("pow(%x, %y)", t, ulps=TRANSCENDENTAL_ULPS[dtype])
    _check(f.text(), {"x": data.draw(_array(dtype, shape)), "y": data.draw(_array(dtype, shape))})


@settings(max_examples=8)
@given(data=st.data(), shape=shapes)
def test_i1_ops_bit_exact(data, shape) -> None:
    """Booleans: cmp (false < true), select, convert to every dtype and from every dtype."""
    b = _ty(DType.I1, shape)
    f = _Fn()
    f.param("a", b)
    f.param("b", b)
    for d in CMP:
        f.op(f'cmp(%a, %b) {{dir = "{d}"}}', b)
    f.op("select(%a, %b, %a)", b)
    for k, d in enumerate(ALL):
        f.op("convert(%a)", _ty(d, shape))
        f.param(f"s{k}", _ty(d, shape))
        f.op(f"convert(%s{k})", b)
    inputs = {"a": data.draw(_array(DType.I1, shape)), "b": data.draw(_array(DType.I1, shape))}
    for k, d in enumerate(ALL):
        inputs[f"s{k}"] = data.draw(_array(d, shape))
    _check(f.text(), inputs)


def test_narrow_rounding_edges() -> None:
    """Conversions to f16/bf16 from f64, f32, each other and i64 at the rounding edges: ties
    to even, carries into the next binade, overflow to inf from exactly halfway past the
    largest finite value, subnormal results, double subnormals, NaN, signed zeros."""
    edges = [5e-324, -5e-324, 2.0**-1022, 1e308, -0.0, 0.0, np.nan, -np.nan, -np.inf]
    for dtype in NARROW:
        fi = ml_dtypes.finfo(dtype.np)
        big, sub, eps = float(fi.max), float(fi.smallest_subnormal), float(fi.eps)
        top = big * (1 + eps / 4) / (1 - eps / 4)  # near the first value past max
        edges += [big, big * (1 + eps / 4), top, np.nextafter(big * (1 + eps / 4), 0), -top]
        edges += [sub / 2, np.nextafter(sub / 2, 1), sub * 1.5, sub * 2.5, -sub / 2]
        edges += [1 + eps / 2, 1 + eps * 1.5, np.nextafter(1 + eps / 2, 2), 2 - eps / 4]
        edges += [float(fi.tiny) * (1 - eps / 2), float(fi.tiny) * (1 - eps / 4)]
    x = np.array(edges, dtype=np.float64)
    n = len(edges)
    f = _Fn()
    f.param("x", _ty(DType.F64, (n,)))
    f.param("s", _ty(DType.F32, (n,)))
    f.param("k", _ty(DType.I64, (n,)))
    for dtype in NARROW:
        other = DType.F16 if dtype is DType.BF16 else DType.BF16
        r = f.op("convert(%x)", _ty(dtype, (n,)))
        f.op(f"convert({r})", _ty(other, (n,)))
        f.op("convert(%s)", _ty(dtype, (n,)))
        f.op("convert(%k)", _ty(dtype, (n,)))
    with np.errstate(all="ignore"):
        s = x.astype(np.float32)
    rng = np.random.default_rng(7)
    k = (rng.integers(1, 2**12, n) << rng.integers(0, 52, n)) * rng.choice([-1, 1], n)
    k[:4] = [-(2**63), 2**63 - 1, 65520, 65519]
    _check(f.text(), {"x": x, "s": s, "k": k.astype(np.int64)})


def test_narrow_constants_and_literals_exact() -> None:
    """Literals rounded once from their exact value: f64 ties kept as exact fractions, NaN,
    infinities, -0.0, subnormals, overflow; in constants, pad values and kernel bodies."""
    text = """
func @main(%x: bf16[3], %h: f16[2]) -> (bf16[6], f16[7], bf16[3], f16[4], f16[2]) {
  %a = constant() {value = [1.00390625, 1.0039062500000000000001, nan, -0.0, 9.2e-41,
      3.4e38]} : bf16[6]
  %b = constant() {value = [1.00048828125, 1.00048828125000000001, 65519, 65520, 6e-8, 2e-8,
      -inf]} : f16[7]
  %c = kernel(%x) {body = "k", space = [3], maps = [[[1, 0]]], out = [0], reduce = [],
      combiner = "none"} : bf16[3]
  %d = pad(%h) {low = [1], high = [1], value = 0.1} : f16[4]
  %e = constant() {value = 0.1} : f16[2]
  return %a, %b, %c, %d, %e
}
func @k(%v: bf16[]) -> bf16[] {
  %z = constant() {value = -0.0} : bf16[]
  %t = constant() {value = 3.0000001} : bf16[]
  %m = mul(%v, %t) : bf16[]
  %s = add(%m, %z) : bf16[]
  return %s
}
"""
    inputs = {
        "x": np.array([-0.0, 9.2e-41, np.inf], ml_dtypes.bfloat16),
        "h": np.array([np.nan, -6e-8], np.float16),
    }
    _check(text, inputs)
    assert Fraction(1) < Fraction("1.0039062500000000000001")  # the tie-breaking digits exist


# --- layout, gather, reductions, contractions, conv --------------------------------------------


@settings(max_examples=25)
@given(data=st.data(), dtype=st.sampled_from(ALL), shape=shapes)
def test_layout_ops_every_dtype(data, dtype: DType, shape) -> None:
    """broadcast reshape transpose slice concat pad constant iota, and the reductions."""
    t = _ty(dtype, shape)
    rank = len(shape)
    f = _Fn()
    f.param("x", t)
    perm = list(reversed(range(rank)))
    f.op(f"transpose(%x) {{perm = {perm}}}", _ty(dtype, tuple(shape[p] for p in perm)))
    f.op(f"broadcast(%x) {{dims = {list(range(1, rank + 1))}}}", _ty(dtype, (2, *shape)))
    sl = [(min(1, s), s, 2) for s in shape]
    f.op(
        f"slice(%x) {{start = {[a for a, _, _ in sl]}, limit = {[b for _, b, _ in sl]}, "
        f"stride = {[c for _, _, c in sl]}}}",
        _ty(dtype, tuple(len(range(a, b, s)) for a, b, s in sl)),
    )
    f.op("reshape(%x)", _ty(dtype, (int(np.prod(shape)),)))
    low, high = [1, 0, 2][:rank], [0, 2, 1][:rank]
    value = {DType.I1: "true", DType.I8: "-128"}.get(dtype, "-0.0" if dtype.is_float else "7")
    padded = tuple(lo + s + hi for lo, s, hi in zip(low, shape, high, strict=True))
    f.op(f"pad(%x) {{low = {low}, high = {high}, value = {value}}}", _ty(dtype, padded))
    if rank:
        axis = rank - 1
        joined = (*shape[:axis], 2 * shape[axis] + 1, *shape[axis + 1 :])
        f.param("z", _ty(dtype, (*shape[:axis], 1, *shape[axis + 1 :])))
        f.op(f"concat(%x, %z, %x) {{axis = {axis}}}", _ty(dtype, joined))
    if not dtype.is_bool:
        f.op("iota() {axis = 0}", _ty(dtype, (3, *shape)))
        axes = list(range(0, rank, 2))
        rshape = tuple(s for d, s in enumerate(shape) if d not in axes)
        for name in ("reduce_sum", "reduce_max", "reduce_min"):
            f.op(f"{name}(%x) {{axes = {axes}}}", _ty(dtype, rshape))
    inputs = {"x": data.draw(_array(dtype, shape))}
    if rank:
        inputs["z"] = data.draw(_array(dtype, (*shape[: rank - 1], 1)))
    _check(f.text(), inputs)


@st.composite
def _take_case(draw):
    dtype = draw(st.sampled_from(ALL))
    idx_dtype = draw(st.sampled_from(INT))
    table = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4))
    axis = draw(st.integers(0, len(table) - 1))
    idx_shape = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=4))
    if table[axis] == 0 and int(np.prod(idx_shape)) > 0:
        idx_shape = (0, *idx_shape)  # nothing to clamp to: only empty index tensors
    size = table[axis]
    info = np.iinfo(idx_dtype.np)
    choices = [-1, 0, size - 1, size, size + 5, -size - 3, int(info.min), int(info.max)]
    choices = [v for v in choices if info.min <= v <= info.max]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    held = np.array(choices, dtype=idx_dtype.np)  # u64's maximum is no int64 (nor float64)
    idx = np.array(rng.choice(held, idx_shape), dtype=idx_dtype.np, ndmin=0).reshape(idx_shape)
    lo, hi = max(info.min, -size - 2), min(info.max, size + 3)
    mixed = rng.integers(lo, hi, idx_shape, dtype=idx_dtype.np)
    idx = np.where(rng.random(idx_shape) < 0.5, idx, mixed).astype(idx_dtype.np)
    out = (*table[:axis], *idx_shape, *table[axis + 1 :])
    text = (
        f"func @main(%t: {_ty(dtype, table)}, %i: {_ty(idx_dtype, idx_shape)}) -> "
        f"{_ty(dtype, out)} {{\n  %y = take(%t, %i) {{axis = {axis}}} : {_ty(dtype, out)}\n"
        "  return %y\n}"
    )
    return text, {"t": draw(_array(dtype, table)), "i": np.asarray(idx)}


@settings(max_examples=30)
@given(case=_take_case())
def test_take_clamps_out_of_range_and_negative_indices(case) -> None:
    _check(*case)


@st.composite
def _dot_case(draw):
    """dot_general with a batch dim or none, free dims or none, zero to two contracting dims
    (size 0 and 1 included), each operand's dims in a drawn order, an `acc` dtype or none."""
    src = draw(st.sampled_from([*FLOAT, *INT]))
    nb, nm, nn, nk = (draw(st.integers(lo, hi)) for lo, hi in ((0, 1), (0, 1), (0, 1), (0, 2)))
    size = st.sampled_from([0, 1, 2, 3, 5])
    bs, ms, ns, ks = ([draw(size) for _ in range(n)] for n in (nb, nm, nn, nk))
    a_dims = [("b", j) for j in range(nb)] + [("m", j) for j in range(nm)]
    a_dims += [("k", j) for j in range(nk)]
    b_dims = [("b", j) for j in range(nb)] + [("k", j) for j in range(nk)]
    b_dims += [("n", j) for j in range(nn)]
    a_dims = draw(st.permutations(a_dims))
    b_dims = draw(st.permutations(b_dims))
    sizes = {"b": bs, "m": ms, "n": ns, "k": ks}
    a_shape = tuple(sizes[g][j] for g, j in a_dims)
    b_shape = tuple(sizes[g][j] for g, j in b_dims)
    attrs = {
        "lhs_batch": [a_dims.index(("b", j)) for j in range(nb)],
        "rhs_batch": [b_dims.index(("b", j)) for j in range(nb)],
        "lhs_contract": [a_dims.index(("k", j)) for j in range(nk)],
        "rhs_contract": [b_dims.index(("k", j)) for j in range(nk)],
    }
    a_free = [d for d in range(len(a_dims)) if a_dims[d][0] == "m"]
    b_free = [d for d in range(len(b_dims)) if b_dims[d][0] == "n"]
    out = tuple([*bs, *(a_shape[d] for d in a_free), *(b_shape[d] for d in b_free)])
    res, acc = src, None
    if src.is_float:
        res = draw(st.sampled_from(FLOAT))
        acc = draw(st.sampled_from([None, *FLOAT]))
    text_attrs = ", ".join(f"{k} = {v}" for k, v in attrs.items())
    if acc is not None:
        text_attrs += f", acc = {acc}"
    text = (
        f"func @main(%a: {_ty(src, a_shape)}, %b: {_ty(src, b_shape)}) -> {_ty(res, out)} {{\n"
        f"  %y = dot(%a, %b) {{{text_attrs}}} : {_ty(res, out)}\n  return %y\n}}"
    )
    return text, {"a": draw(_array(src, a_shape)), "b": draw(_array(src, b_shape))}


@settings(max_examples=40)
@given(case=_dot_case())
def test_dot_outside_kernels_sequential_fold(case) -> None:
    _check(*case)


@pytest.mark.parametrize("dtype", [DType.F32, DType.BF16, DType.F16, DType.F64])
def test_dot_fold_order_and_first_product(dtype: DType) -> None:
    """The fold starts from the first product (an all -0.0 contraction gives -0.0, not +0.0),
    runs in row-major order over the contracting dims as lhs_contract lists them ([2, 1]:
    dim 2 outermost), and rounds every step in the acc dtype (cancellation shows the order)."""
    big = 2.0**20 if dtype is DType.F16 else 2.0**40
    a = np.zeros((2, 2, 3))
    a[0] = [[big, 1.0, -big], [1.0, 1.0, 1.0]]  # dim 1 indexes rows, dim 2 columns
    a[1] = -0.0
    b = np.ones((3, 2))
    b[:, 1] = [1.0, 1.0, 0.5]
    text = (
        f"func @main(%a: {_ty(dtype, (2, 2, 3))}, %b: {_ty(dtype, (3, 2))}) -> "
        f"({_ty(dtype, (2,))}, {_ty(dtype, (2,))}) {{\n"
        "  %y = dot(%a, %b) {lhs_batch = [], rhs_batch = [], lhs_contract = [2, 1], "
        f"rhs_contract = [0, 1]}} : {_ty(dtype, (2,))}\n"
        "  %z = dot(%a, %b) {lhs_batch = [], rhs_batch = [], lhs_contract = [1, 2], "
        f"rhs_contract = [1, 0]}} : {_ty(dtype, (2,))}\n"
        "  return %y, %z\n}"
    )
    with np.errstate(over="ignore"):
        _check(text, {"a": a.astype(dtype.np), "b": b.astype(dtype.np)})


@st.composite
def _reduction_kernel(draw):
    """A kernel folding a body over one or two reduce dims with a random schedule, in any
    arithmetic dtype (the body's ops and the combiner round in it)."""
    dtype = draw(st.sampled_from([*FLOAT, *INT]))
    combiner = draw(st.sampled_from(["add", "max", "min"]))
    m, n = draw(st.sampled_from([0, 1, 3])), draw(st.sampled_from([1, 2, 4]))
    k = draw(st.sampled_from([0, 1, 4, 6, 9]))
    acc = draw(st.sampled_from([a for a in (1, 2, 3) if k % a == 0]))
    tile = [draw(st.integers(1, 5)) for _ in range(3)]
    order = draw(st.permutations([0, 1, 2]))
    t = str(dtype)
    body_op = draw(st.sampled_from(["mul", "sub", "max"]))
    text = "\n".join(
        [
            f"func @main(%x: {_ty(dtype, (m, k))}, %w: {_ty(dtype, (k, n))}) -> "
            f"{_ty(dtype, (m, n))} {{",
            f'  %r = kernel(%x, %w) {{body = "b", space = [{m}, {n}, {k}], '
            "maps = [[[1, 0, 0, 0], [0, 0, 1, 0]], [[0, 0, 1, 0], [0, 1, 0, 0]]], "
            f'out = [0, 1], reduce = [2], combiner = "{combiner}", tile = {tile}, '
            f"order = {list(order)}, parallel = [0], accumulators = {acc}}} : "
            f"{_ty(dtype, (m, n))}",
            "  return %r",
            "}",
            f"func @b(%a: {t}[], %c: {t}[]) -> {t}[] {{",
            f"  %p = {body_op}(%a, %c) : {t}[]",
            "  return %p",
            "}",
        ]
    )
    return text, {"x": draw(_array(dtype, (m, k))), "w": draw(_array(dtype, (k, n)))}


@settings(max_examples=30)
@given(case=_reduction_kernel())
def test_reduction_kernels_every_dtype(case) -> None:
    _check(*case)


@settings(max_examples=14)
@given(
    data=st.data(),
    dtype=st.sampled_from(
        [DType.F16, DType.BF16, DType.F64, DType.I32, DType.I8, DType.U8, DType.I16, DType.U64]
    ),
    n=st.integers(0, 1),
    hw=st.integers(1, 4),
    k=st.integers(1, 3),
    pad=st.integers(0, 1),
    groups=st.sampled_from([1, 2]),
)
def test_conv2d_every_arithmetic_dtype(data, dtype, n, hw, k, pad, groups) -> None:
    size = hw + 2 * pad - k
    if size < 0:
        return
    oh = size + 1
    xs, ws, ys = (n, 2, hw, hw), (2, 2 // groups, k, k), (n, 2, oh, oh)
    text = (
        f"func @main(%x: {_ty(dtype, xs)}, %w: {_ty(dtype, ws)}) -> {_ty(dtype, ys)} {{\n"
        f"  %y = conv2d(%x, %w) {{stride = [1, 1], padding = [[{pad}, {pad}], [{pad}, {pad}]], "
        f"dilation = [1, 1], groups = {groups}}} : {_ty(dtype, ys)}\n  return %y\n}}"
    )
    _check(text, {"x": data.draw(_array(dtype, xs)), "w": data.draw(_array(dtype, ws))})


# --- the registry walk -----------------------------------------------------------------------


def _all_ops_module(dtype: DType) -> tuple[str, dict[str, np.ndarray], dict[int, int]]:
    """One module using every non-composite op `dtype` admits, with `dtype` elements."""
    t = _ty(dtype, (2, 3))
    f = _Fn()
    f.param("x", t)
    f.param("y", t)
    f.param("p", _ty(DType.I1, (2, 3)))
    f.param("i", _ty(DType.I32, (4,)))
    if dtype.is_float:
        for name in UNARY:
            f.op(f"{name}(%x)", t)
        for name in TRANSCENDENTAL:
            f.op(f"{name}(%x)", t, ulps=TRANSCENDENTAL_ULPS[dtype])
        f.op("pow(%x, %y)", t, ulps=TRANSCENDENTAL_ULPS[dtype])
    if not dtype.is_bool:
        for name in BINARY:
            f.op(f"{name}(%x, %y)", t)
        f.op("rem(%x, %y)", t)
        if dtype.is_int:
            f.op("mod(%x, %y)", t)
            for name in ("bitwise_and", "bitwise_or", "bitwise_xor", "shift_left", "shift_right"):
                f.op(f"{name}(%x, %y)", t)
        f.op("iota() {axis = 1}", t)
        for name in ("reduce_sum", "reduce_max", "reduce_min"):
            f.op(f"{name}(%x) {{axes = [1]}}", _ty(dtype, (2,)))
        f.op("cumsum(%x) {axis = 1}", t)
        f.op("cumprod(%x) {axis = 1, exclusive = true, reverse = true}", t)
        f.op("argsort(%x) {axis = 1, descending = true}", _ty(DType.I64, (2, 3)))
        f.op(
            "dot(%x, %y) {lhs_batch = [], rhs_batch = [], lhs_contract = [1], rhs_contract = [1]}",
            _ty(dtype, (2, 2)),
        )
        x4 = f.op("reshape(%x)", _ty(dtype, (1, 2, 1, 3)), keep=False)
        w2 = f.op(
            "slice(%y) {start = [0, 1], limit = [2, 3], stride = [1, 1]}",
            _ty(dtype, (2, 2)),
            keep=False,
        )
        w4 = f.op(f"reshape({w2})", _ty(dtype, (2, 1, 1, 2)), keep=False)
        f.op(
            f"conv2d({x4}, {w4}) {{stride = [1, 1], padding = [[0, 0], [1, 0]], "
            "dilation = [1, 1], groups = 2}",
            _ty(dtype, (1, 2, 1, 3)),
        )
        f.op(
            'kernel(%x, %y) {body = "b", space = [2, 3], maps = [[[1, 0, 0], [0, 1, 0]], '
            '[[1, 0, 0], [0, 1, 0]]], out = [0], reduce = [1], combiner = "add"}',
            _ty(dtype, (2,)),
        )
    if dtype.is_int or dtype.is_bool:
        for name in ("bitwise_and", "bitwise_or", "bitwise_xor")[: 3 if dtype.is_bool else 0]:
            f.op(f"{name}(%x, %y)", t)
        f.op("bitwise_not(%x)", t)
    for d in CMP:
        f.op(f'cmp(%x, %y) {{dir = "{d}"}}', _ty(DType.I1, (2, 3)))
    f.op("select(%p, %x, %y)", t)
    for d in ALL:
        f.op("convert(%x)", _ty(d, (2, 3)))
    lit = {DType.I1: "[[true, false, true], [false, true, false]]"}.get(
        dtype, "[[1, -0.0, 3], [nan, -inf, 0.1]]" if dtype.is_float else "[[1, 0, 3], [-7, -8, 9]]"
    )
    if dtype.is_unsigned:
        lit = f"[[1, 0, 3], [{dtype.int_max}, 128, 9]]"
    f.op(f"constant() {{value = {lit}}}", t)
    f.op("broadcast(%x) {dims = [0, 2]}", _ty(dtype, (2, 2, 3)))
    f.op("transpose(%x) {perm = [1, 0]}", _ty(dtype, (3, 2)))
    f.op("reshape(%x)", _ty(dtype, (3, 1, 2)))
    f.op("slice(%x) {start = [0, 1], limit = [2, 3], stride = [1, 2]}", _ty(dtype, (2, 1)))
    f.op("concat(%x, %y) {axis = 0}", _ty(dtype, (4, 3)))
    pad_value = "false" if dtype.is_bool else "5"
    f.op(f"pad(%x) {{low = [0, 1], high = [1, 0], value = {pad_value}}}", _ty(dtype, (3, 4)))
    f.op("take(%x, %i) {axis = 1}", _ty(dtype, (2, 4)))
    body = ""
    if not dtype.is_bool:
        tt = str(dtype)
        body = (
            f"func @b(%a: {tt}[], %c: {tt}[]) -> {tt}[] {{\n"
            f"  %m = mul(%a, %c) : {tt}[]\n  return %m\n}}"
        )
    rng = np.random.default_rng(len(str(dtype)))
    inputs = {
        "x": _draw_plain(dtype, rng),
        "y": _draw_plain(dtype, rng),
        "p": np.array([[True, False, True], [False, False, True]]),
        "i": np.array([-5, 0, 2, 99], np.int32),
    }
    return f.text(body), inputs, f.ulps


def _draw_plain(dtype: DType, rng: np.random.Generator) -> np.ndarray:
    if dtype.is_bool:
        return rng.random((2, 3)) < 0.5
    if dtype.is_int:
        return rng.integers(-100, 100, (2, 3)).astype(dtype.np)
    x = rng.standard_normal((2, 3))
    x[0, 0], x[1, 2] = -0.0, np.nan
    return x.astype(dtype.np)


def test_every_op_and_dtype_has_a_conformance_case() -> None:
    """Walk the op registry: every op but the graph-stage composites has a C lowering and runs
    here, against the reference, on every dtype it admits; the composites (the pipeline always
    decomposes them) and the collectives (run by the MPI runtime) are the only ops the C target
    refuses; the control flow ops name functions of the module, and their conformance cases
    are tests/backends/c/test_control.py's."""
    covered: dict[str, set[DType]] = {}
    for dtype in ALL:
        text, inputs, ulps = _all_ops_module(dtype)
        module = parse(text)
        for op in module.function("main").ops:
            covered.setdefault(op.name, set()).add(dtype)
        _check(text, inputs, ulps)
    composites = {s.name for s in ops.all_specs() if s.is_composite}
    collectives = {s.name for s in ops.all_specs() if s.family == "collective"}
    control = {s.name for s in ops.all_specs() if s.family == "control"}
    assert control == {"if", "while", "scan"}
    assert {s.name for s in UNSUPPORTED} == composites | collectives
    for spec in ops.all_specs():
        if spec.is_composite:
            assert "composite" in UNSUPPORTED[spec].reason
            continue
        if spec.name in collectives:  # run by the MPI runtime: tests/backends/mpi
            assert "MPI" in UNSUPPORTED[spec].reason
            continue
        if spec.name in control:  # run against the reference in tests/backends/c/test_control.py
            assert spec in LOWERINGS
            continue
        assert spec in LOWERINGS, f"{spec.name} has no C lowering"
        assert spec.name in covered, f"{spec.name} has no conformance case on the C target"
    # Each op on every dtype it admits (IR_SPEC.md section 7: i1 only in cmp, select,
    # convert, constant, layout ops and take tables; the float-only ops on floats).
    float_only = {"pow", *UNARY, *TRANSCENDENTAL}
    for name, dtypes in covered.items():
        if name in float_only:
            want = set(FLOAT)
        elif name in ("iota", "reduce_sum", "reduce_max", "reduce_min", "cumsum", "cumprod"):
            want = set(FLOAT) | set(INT)
        elif name == "argsort":
            want = set(FLOAT) | set(INT)
        elif name == "rem":
            want = set(FLOAT) | set(INT)
        elif name in ("mod", "shift_left", "shift_right"):
            want = set(INT)
        elif name.startswith("bitwise_"):
            want = set(INT) | {DType.I1}
        elif name in ("dot", "conv2d", "kernel"):
            want = set(FLOAT) | set(INT)
        elif name in BINARY:
            want = set(FLOAT) | set(INT)
        else:
            want = set(ALL)
        assert dtypes == want, f"{name}: covered on {sorted(map(str, dtypes))}"


@pytest.mark.parametrize("dtype", NARROW)
def test_narrow_capability_and_storage(dtype: DType) -> None:
    """f16/bf16 are supported dtypes held as 16-bit patterns (numpy's bytes as they are)."""
    from gdv.backends.c.emit import CTYPE, UNSUPPORTED_DTYPES

    assert CTYPE[dtype] == "uint16_t" and dtype not in UNSUPPORTED_DTYPES
    assert dtype.np.itemsize == 2
