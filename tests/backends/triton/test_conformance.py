"""Conformance of the Triton target to the reference backend (issue 20, item 2), run under the
Triton interpreter here and on the GPU by benchmarks/gpu_device_check.sh.

Hypothesis draws shapes (size-0 and size-1 dims, extents that the tiles and power-of-two
blocks do not divide) and values (NaN, infinities, signed zeros, subnormals, integer extremes)
with the C target's strategies (`support.array_of`); every program goes through the target's
pipeline and must equal the reference backend's run of the source bit for bit (all NaNs one
value). Shapes stay small: the interpreter runs every lane in numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from support import array_of, ir_type, load_module, special_values

from gdv.ir.dtypes import DType

ts = load_module("backends/triton/tritonsupport.py")

shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)

EXACT_UNARY = ["neg", "abs", "sqrt", "floor", "relu"]
EXACT_BINARY = ["add", "sub", "mul", "div", "max", "min"]
TRANSCENDENTAL = ["exp", "log", "tanh", "sigmoid", "erf", "sin", "cos", "rsqrt"]
TRANSCENDENTAL += ["tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"]
CMP = ["lt", "le", "gt", "ge", "eq", "ne"]
FLOATS = [DType.F32, DType.F64, DType.F16, DType.BF16]
INTS = [DType.I64, DType.I32, DType.I8]


def _converts_to(dtype: DType) -> list[DType]:
    """Every dtype a `dtype` value converts to on this target (f64 -> f16/bf16 included: one
    rounding through f32 rounded to odd)."""
    return [d for d in [*FLOATS, *INTS, DType.I1] if d is not dtype]


def _program(params: list[tuple[str, str]], lines: list[str], results: list[tuple[str, str]]):
    head = ", ".join(f"%{n}: {t}" for n, t in params)
    rtypes = ", ".join(t for _, t in results)
    ret = ", ".join(r for r, _ in results)
    return "\n".join([f"func @main({head}) -> ({rtypes}) {{", *lines, f"  return {ret}", "}"])


@settings(max_examples=12, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(FLOATS), shape=shapes)
def test_float_elementwise_ops_bit_exact(data, dtype: DType, shape) -> None:
    text = _elementwise_program(shape, dtype)
    inputs = {
        "x": data.draw(array_of(dtype, shape)),
        "y": data.draw(array_of(dtype, shape)),
        "p": data.draw(array_of(DType.I1, shape)),
    }
    ts.check(text, inputs)


def _elementwise_program(shape: tuple[int, ...], dtype: DType = DType.F32) -> str:
    t, b = ir_type(dtype, shape), ir_type(DType.I1, shape)
    lines, results = [], []
    for k, name in enumerate(EXACT_UNARY):
        lines.append(f"  %u{k} = {name}(%x) : {t}")
        results.append((f"%u{k}", t))
    for k, name in enumerate(EXACT_BINARY):
        lines.append(f"  %b{k} = {name}(%x, %y) : {t}")
        results.append((f"%b{k}", t))
    for k, d in enumerate(CMP):
        lines.append(f'  %c{k} = cmp(%x, %y) {{dir = "{d}"}} : {b}')
        results.append((f"%c{k}", b))
    lines.append(f"  %s = select(%p, %x, %y) : {t}")
    results.append(("%s", t))
    for k, d in enumerate(_converts_to(dtype)):
        lines.append(f"  %v{k} = convert(%x) : {ir_type(d, shape)}")
        results.append((f"%v{k}", ir_type(d, shape)))
    return _program([("x", t), ("y", t), ("p", b)], lines, results)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_elementwise_ops_on_every_pair_of_special_values(dtype: DType) -> None:
    """Each op on every pair of edge values (signed zeros, infinities, NaN, extremes,
    subnormals, values beyond the integer ranges), where the spec and Triton's operators
    differ (`-x` is `0 - x`, `/` is approximate, max orders -0.0, casts saturate)."""
    more = [2.5, -2.5, 3e9, -3e9, 1e19, -1e19, 7.0, 1 + 2**-9, 1 + 3 * 2**-12, 65519.0, 1e-30]
    with np.errstate(all="ignore"):
        vals = np.concatenate([special_values(dtype), np.array(more).astype(dtype.np)])
    if dtype is DType.F64:  # values between two bf16/f16 values, near their midpoints
        vals = np.concatenate([vals, [1 + 2**-8 + 2**-40, 1 + 2**-8 - 2**-40, 2**24 + 1.0]])
    x, y = (a.ravel() for a in np.meshgrid(vals, vals))
    p = (np.arange(x.size) % 3 == 0).astype(np.bool_)
    ts.check(_elementwise_program((x.size,), dtype), {"x": x, "y": y, "p": p})


def test_integer_ops_on_extremes() -> None:
    for dtype in INTS:
        info = np.iinfo(dtype.np)
        vals = np.array([info.min, info.min + 1, -1, 0, 1, 2, info.max - 1, info.max], dtype.np)
        x, y = (a.ravel() for a in np.meshgrid(vals, vals))
        t = ir_type(dtype, x.shape)
        lines = [f"  %{n} = {n}(%x, %y) : {t}" for n in ["add", "sub", "mul", "max", "min"]]
        results = [(f"%{n}", t) for n in ["add", "sub", "mul", "max", "min"]]
        for d in _converts_to(dtype):
            if not (d is DType.BF16 and dtype is DType.I64):  # refused: two roundings
                lines.append(f"  %c{d} = convert(%x) : {ir_type(d, x.shape)}")
                results.append((f"%c{d}", ir_type(d, x.shape)))
        ts.check(_program([("x", t), ("y", t)], lines, results), {"x": x, "y": y})


@settings(max_examples=6, deadline=None)
@given(data=st.data(), name=st.sampled_from(TRANSCENDENTAL), shape=shapes)
def test_f32_transcendentals(data, name: str, shape) -> None:
    t = ir_type(DType.F32, shape)
    text = _program([("x", t)], [f"  %y = {name}(%x) : {t}"], [("%y", t)])
    ts.check(text, {"x": data.draw(array_of(DType.F32, shape))}, transcendental=name)


def test_pow_on_every_pair_of_special_values() -> None:
    vals = np.concatenate([special_values(DType.F32), np.float32([2.0, -2.0, 0.5, 3.0, -3.5])])
    x, y = (a.ravel() for a in np.meshgrid(vals, vals))
    t = ir_type(DType.F32, x.shape)
    text = _program([("x", t), ("y", t)], [f"  %z = pow(%x, %y) : {t}"], [("%z", t)])
    ts.check(text, {"x": x, "y": y}, transcendental="pow")


@settings(max_examples=6, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(INTS), shape=shapes)
def test_integer_ops_wrap_and_convert_exactly(data, dtype: DType, shape) -> None:
    t, b, f = ir_type(dtype, shape), ir_type(DType.I1, shape), ir_type(DType.F32, shape)
    other = DType.I32 if dtype is not DType.I32 else DType.I64
    lines, results = [], []
    for k, name in enumerate(["add", "sub", "mul", "max", "min"]):
        lines.append(f"  %b{k} = {name}(%x, %y) : {t}")
        results.append((f"%b{k}", t))
    for k, d in enumerate(CMP):
        lines.append(f'  %c{k} = cmp(%x, %y) {{dir = "{d}"}} : {b}')
        results.append((f"%c{k}", b))
    lines.append(f'  %pc = cmp(%p, %q) {{dir = "lt"}} : {b}')  # false < true
    results.append(("%pc", b))
    lines.append(f"  %f = convert(%x) : {f}")
    lines.append(f"  %o = convert(%x) : {ir_type(other, shape)}")
    lines.append(f"  %i = convert(%p) : {t}")
    lines.append(f"  %pf = convert(%p) : {f}")
    results += [("%f", f), ("%o", ir_type(other, shape)), ("%i", t), ("%pf", f)]
    text = _program([("x", t), ("y", t), ("p", b), ("q", b)], lines, results)
    inputs = {
        "x": data.draw(array_of(dtype, shape)),
        "y": data.draw(array_of(dtype, shape)),
        "p": data.draw(array_of(DType.I1, shape)),
        "q": data.draw(array_of(DType.I1, shape)),
    }
    ts.check(text, inputs)


@st.composite
def _reduction(draw):
    shape = draw(shapes.filter(lambda s: len(s) >= 1))
    axes = draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
    return shape, axes


@settings(max_examples=8, deadline=None)
@given(
    data=st.data(),
    red=_reduction(),
    dtype=st.sampled_from([*FLOATS, *INTS]),
)
def test_reductions_fold_left_in_order(data, red, dtype: DType) -> None:
    shape, axes = red
    t = ir_type(dtype, shape)
    out = tuple(n for d, n in enumerate(shape) if d not in axes)
    r = ir_type(dtype, out)
    lines = [
        f"  %s = reduce_sum(%x) {{axes = {sorted(axes)}}} : {r}",
        f"  %mx = reduce_max(%x) {{axes = {sorted(axes)}}} : {r}",
        f"  %mn = reduce_min(%x) {{axes = {sorted(axes)}}} : {r}",
    ]
    text = _program([("x", t)], lines, [("%s", r), ("%mx", r), ("%mn", r)])
    ts.check(text, {"x": data.draw(array_of(dtype, shape))})


@settings(max_examples=8, deadline=None)
@given(
    data=st.data(),
    m=st.integers(0, 6),
    k=st.integers(0, 9),
    n=st.integers(0, 6),
    batch=st.integers(1, 2),
    dtype=st.sampled_from(FLOATS),
)
def test_products_accumulate_over_k_in_order(
    data, m: int, k: int, n: int, batch: int, dtype: DType
) -> None:
    a, b = ir_type(dtype, (batch, m, k)), ir_type(dtype, (batch, k, n))
    y = ir_type(dtype, (batch, m, n))
    lines = [f"  %y = matmul(%a, %b) : {y}", f"  %z = relu(%y) : {y}"]
    text = _program([("a", a), ("b", b)], lines, [("%y", y), ("%z", y)])
    inputs = {
        "a": data.draw(array_of(dtype, (batch, m, k))),
        "b": data.draw(array_of(dtype, (batch, k, n))),
    }
    ts.check(text, inputs)


@settings(max_examples=5, deadline=None)
@given(data=st.data(), rows=st.integers(1, 5), cols=st.integers(1, 40))
def test_softmax_and_layer_norm_fuse_exactly(data, rows: int, cols: int) -> None:
    x, g = ir_type(DType.F32, (rows, cols)), ir_type(DType.F32, (cols,))
    lines = [
        f"  %s = softmax(%x) {{axis = 1}} : {x}",
        f"  %l = layer_norm(%x, %g, %b) {{axes = [1], eps = 1e-05}} : {x}",
        f'  %e = gelu(%x) {{approximate = "none"}} : {x}',
    ]
    text = _program([("x", x), ("g", g), ("b", g)], lines, [("%s", x), ("%l", x), ("%e", x)])
    inputs = {
        "x": data.draw(array_of(DType.F32, (rows, cols))),
        "g": data.draw(array_of(DType.F32, (cols,))),
        "b": data.draw(array_of(DType.F32, (cols,))),
    }
    ts.check(text, inputs, transcendental="erf")


@pytest.mark.parametrize("dtype", [*FLOATS, DType.I8, DType.I1], ids=str)
def test_layout_ops_move_data_exactly(dtype: DType) -> None:
    d = dtype.value
    value = "true" if dtype.is_bool else ("-0.0" if dtype.is_float else "-7")
    literal = "[[true, false], [false, true]]" if dtype.is_bool else "[[1, -2], [3, 100]]"
    if dtype.is_float:
        literal = "[[1.5, -0.0], [nan, 3.0e38]]"
    text = f"""func @main(%x: {d}[3,4], %t: {d}[5,2], %i: i32[2,3]) -> ({d}[2,6], {d}[3,2],
        {d}[6,4], {d}[5,8], {d}[2,3,2], i64[2,3], {d}[2,2]) {{
      %r = reshape(%x) : {d}[2,6]
      %s = slice(%x) {{start = [0, 1], limit = [3, 4], stride = [1, 2]}} : {d}[3,2]
      %c = concat(%x, %x) {{axis = 0}} : {d}[6,4]
      %p = pad(%x) {{low = [1, 2], high = [1, 2], value = {value}}} : {d}[5,8]
      %g = take(%t, %i) {{axis = 0}} : {d}[2,3,2]
      %o = iota() {{axis = 1}} : i64[2,3]
      %k = constant() {{value = {literal}}} : {d}[2,2]
      return %r, %s, %c, %p, %g, %o, %k
    }}"""
    rng = np.random.default_rng(0)
    with np.errstate(all="ignore"):
        x = (rng.standard_normal((3, 4)) * 10).astype(dtype.np)
        t = (rng.standard_normal((5, 2)) * 10).astype(dtype.np)
    inputs = {"x": x, "t": t, "i": np.array([[0, 4, -3], [7, 2, 1]], np.int32)}  # clamped
    ts.check(text, inputs)


def test_reassociated_orders_run_as_the_ir_says() -> None:
    """At -O3 `reassociate-reductions` sets `lanes` (a real claim): the kernel folds lane by
    lane as IR_SPEC section 7 says, which is the final module's reference meaning bit for
    bit (not the source's)."""
    from gdv.backends import reference
    from gdv.backends import triton as tt

    text = """func @main(%x: f32[4,64], %w: f32[64,8]) -> (f32[4], f32[4,8]) {
      %s = reduce_sum(%x) {axes = [1]} : f32[4]
      %y = matmul(%x, %w) : f32[4,8]
      return %s, %y
    }"""
    module = ts.final(text, 3)
    kernels = [op for op in module.entry.ops if op.name == "kernel"]
    assert any(op.attrs.get("lanes", 1) > 1 for op in kernels), "no lanes at -O3"
    rng = np.random.default_rng(1)
    inputs = {
        "x": rng.standard_normal((4, 64)).astype(np.float32),
        "w": rng.standard_normal((64, 8)).astype(np.float32),
    }
    got = tt.Executable(module)(inputs)
    want = reference.run(module, inputs)
    for g, w in zip(got, want, strict=True):
        assert reference.bit_equal(g, w), reference.describe_difference(g, w)


@settings(max_examples=10, deadline=None)
@given(
    data=st.data(),
    dtype=st.sampled_from(FLOATS),
    rows=st.sampled_from([(), (1,), (3,), (2, 3)]),
    extent=st.sampled_from([64, 96, 128, 256]),
)
def test_lanes_folded_side_by_side_keep_the_lanes_order(data, dtype: DType, rows, extent) -> None:
    """A `lanes = L` sum (-O3) runs its L lanes side by side (the block's last axis, taken
    apart by `tl.split`s and folded in lane order): the final module's reference meaning bit
    for bit, on values with NaN, infinities, signed zeros and subnormals; a program whose
    lanes were folded in another order (pairwise, or the sequential fold) would differ on
    such values."""
    from gdv.backends import reference
    from gdv.backends import triton as tt
    from gdv.backends.triton.kernel import parallel_lanes

    shape = (*rows, extent)
    axes = [len(shape) - 1]
    t_in, t_out = ir_type(dtype, shape), ir_type(dtype, rows)
    text = _program(
        [("x", t_in)],
        [f"  %s = reduce_sum(%x) {{axes = {axes}}} : {t_out}"],
        [("%s", t_out)],
    )
    module = ts.final(text, 3)
    (kernel,) = [op for op in module.entry.ops if op.name == "kernel"]
    assert parallel_lanes(kernel) > 1, kernel.attrs
    exe = tt.Executable(module)
    assert "tl.split(" in exe.lowered.text
    x = data.draw(array_of(dtype, shape))
    (got,) = exe({"x": x})
    (want,) = reference.run(module, {"x": x})
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


@settings(max_examples=10, deadline=None)
@given(
    data=st.data(),
    dtype=st.sampled_from([*FLOATS, *INTS]),
    combiner=st.sampled_from(["max", "min"]),
    rows=st.sampled_from([(), (1,), (3,)]),
    extent=st.sampled_from([64, 65, 100, 128, 129]),
)
def test_max_and_min_folds_run_side_by_side_bit_exact(
    data, dtype: DType, combiner: str, rows, extent: int
) -> None:
    """A max or min fold over one reduce dim runs 32 lanes side by side at -O2 too (its
    result does not depend on the order: see the Z3 proof below), extents the lanes do not
    divide included: the source's reference meaning bit for bit on values with NaN, signed
    zeros, infinities and integer extremes."""
    from gdv.backends.triton.kernel import parallel_lanes

    shape = (*rows, extent)
    t_in, t_out = ir_type(dtype, shape), ir_type(dtype, rows)
    text = _program(
        [("x", t_in)],
        [f"  %s = reduce_{combiner}(%x) {{axes = [{len(shape) - 1}]}} : {t_out}"],
        [("%s", t_out)],
    )
    (kernel,) = [op for op in ts.final(text, 2).entry.ops if op.name == "kernel"]
    assert parallel_lanes(kernel) == 32
    ts.check(text, {"x": data.draw(array_of(dtype, shape))})


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("combiner", ["max", "min"])
def test_ir_max_and_min_are_associative_and_commutative_bit_for_bit(dtype, combiner) -> None:
    """What lets a max/min fold run in any order: on the SMT meaning of IR_SPEC's max and min
    (validate/semantics), for all values of the dtype, op(op(a, b), c) = op(a, op(b, c)) and
    op(a, b) = op(b, a), bit for bit (structural equality: -0.0 and +0.0 differ)."""
    import z3

    from gdv.validate.semantics.values import Values, fp_sort

    v = Values("fp")
    a, b, c = (z3.Const(n, fp_sort(dtype)) for n in "abc")
    op = getattr(v, combiner)
    for claim in (op(dtype, op(dtype, a, b), c) == op(dtype, a, op(dtype, b, c)),
                  op(dtype, a, b) == op(dtype, b, a)):  # fmt: skip
        s = z3.Solver()
        s.set("timeout", 60_000)
        s.add(z3.Not(claim))
        assert s.check() == z3.unsat
    # and the proof can fail: a sum is not associative
    s = z3.Solver()
    s.add(z3.Not(v.add(dtype, v.add(dtype, a, b), c) == v.add(dtype, a, v.add(dtype, b, c))))
    assert s.check() == z3.sat


@settings(max_examples=12, deadline=None)
@given(
    data=st.data(),
    dtype=st.sampled_from([*FLOATS, DType.I32, DType.I8]),
    stride=st.sampled_from([(1, 1), (2, 2), (2, 1)]),
    pad=st.sampled_from([0, 1]),
    dil=st.sampled_from([1, 2]),
    groups=st.sampled_from([1, 2]),
)
def test_conv2d_kept_as_an_op_folds_its_taps_in_order(data, dtype, stride, pad, dil, groups):
    """A convolution that stays an op at the loop stage (strided, small) runs as the conv
    kernel: one lane per output, products folded over c, kh, kw from the first, padded taps
    +0.0 taking part (0.0 * inf = NaN): the reference bit for bit on values with NaN,
    infinities, signed zeros and integer extremes."""
    c, o = 2 * groups, 2 * groups
    xs, ws = (1, c, 7, 6), (o, c // groups, 3, 2)
    oh = (7 + 2 * pad - dil * 2 - 1) // stride[0] + 1
    ow = (6 + 2 * pad - dil * 1 - 1) // stride[1] + 1
    ys = (1, o, oh, ow)
    text = _program(
        [("x", ir_type(dtype, xs)), ("w", ir_type(dtype, ws))],
        [
            f"  %y = conv2d(%x, %w) {{stride = {list(stride)}, padding = [[{pad}, {pad}], "
            f"[{pad}, {pad}]], dilation = [{dil}, {dil}], groups = {groups}}} "
            f": {ir_type(dtype, ys)}"
        ],
        [("%y", ir_type(dtype, ys))],
    )
    inputs = {"x": data.draw(array_of(dtype, xs)), "w": data.draw(array_of(dtype, ws))}
    exe = ts.check(text, inputs)
    kept = any(op.name == "conv2d" for op in exe.module.entry.ops)
    assert kept == ("conv2d %" in exe.lowered.text)
    if dtype is DType.F32:  # every drawn f32 case stays an op at -O2: the conv kernel ran
        assert kept


def test_the_squeeze_excite_workload_runs_with_its_strided_conv() -> None:
    """benchmarks/side_by_side.py's squeeze_excite (its strided depthwise conv stays an op),
    refused before the conv kernel: now bit-exact to the reference at -O2."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    import side_by_side as sbs

    w = sbs.WORKLOADS["squeeze_excite"]()
    if sum(v.size for v in w.inputs.values()) > 200_000:
        pytest.skip("too large for the interpreter here")
    exe = ts.check(w.ir, w.inputs, transcendental="sigmoid")
    assert "conv2d %" in exe.lowered.text
