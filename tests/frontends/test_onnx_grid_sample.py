"""ONNX GridSample, imported as a decomposition into existing IR ops (coordinates unnormalised
in the grid's dtype and kept in f32, taps read with `take` at i64 positions, weighted sums in
the reference's order), checked against ONNX's reference evaluator on hypothesis-drawn shapes,
grids and values for every mode x padding_mode x align_corners, 1 to 3 spatial axes.

f32 and f16 inputs match bit for bit: numpy's dot of f32 vectors (OpenBLAS's sdot) rounds each
product to f32 and sums them in f64, its f16 dot sums f32 products in f32, and the import does
the same. An f64 input does not: OpenBLAS's ddot fuses each multiply-add and the IR has no
fused multiply-add, so each interpolation step may differ by the rounding of its products;
the test bounds the difference by 2^-49 * 4^r * max|X| (r spatial axes; measured at most 2^-52
* max|X|, 96 ulp of a result that cancels, on 120 random 4-D cases)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from gdv.backends import reference
from gdv.frontends.onnx import Unsupported, import_model
from gdv.validate.counterexample import same_bits

ONNX_TYPE = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
             np.float16: TensorProto.FLOAT16}  # fmt: skip
MODES = ["nearest", "linear", "cubic"]
PADDINGS = ["zeros", "border", "reflection"]


def model(
    xshape: tuple[int, ...],
    gshape: tuple[int, ...],
    xdt: Any = np.float32,
    gdt: Any = np.float32,
    opset: int = 22,
    **attrs: Any,
) -> onnx.ModelProto:
    g = helper.make_graph(
        [helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)],
        "g",
        [helper.make_tensor_value_info("x", ONNX_TYPE[xdt], list(xshape)),
         helper.make_tensor_value_info("grid", ONNX_TYPE[gdt], list(gshape))],
        [helper.make_tensor_value_info("y", ONNX_TYPE[xdt], None)],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def gdv_run(m: onnx.ModelProto, x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    module, weights = import_model(m)
    return reference.run(module, dict(weights, x=x, grid=grid))[0]


def oracle(m: onnx.ModelProto, x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    return ReferenceEvaluator(m).run(None, {"x": x, "grid": grid})[0]


def _special_coordinates() -> list[float]:
    """Normalised coordinates of pixel centres (both conventions), of the half-way points
    between them (ties for `nearest`), the borders and points outside [-1, 1], for sizes 1-4."""
    out = {-1.0, 1.0, 0.0, -3.25, 3.25, 2.0, -2.0, 1.5, -1.5}
    for size in range(1, 5):
        for i in range(-3, size + 3):
            out.add((2 * i + 1) / size - 1)  # centre, align_corners = 0
            out.add(2 * i / size - 1)  # half-way point, align_corners = 0
            if size > 1:
                out.add(2 * i / (size - 1) - 1)  # centre, align_corners = 1
                out.add((2 * i + 1) / (size - 1) - 1)  # half-way point, align_corners = 1
    return sorted(out)


SPECIAL = _special_coordinates()
COORD = st.one_of(st.sampled_from(SPECIAL), st.floats(-3.5, 3.5, width=32))


@st.composite
def cases(draw: st.DrawFn, xdt: Any = np.float32) -> tuple[Any, ...]:
    mode = draw(st.sampled_from(MODES))
    padding = draw(st.sampled_from(PADDINGS))
    align = draw(st.integers(0, 1))
    r = draw(st.integers(1, 3))
    low = 2 if padding == "reflection" and align else 1  # the reference divides by zero at 1
    sizes = draw(st.lists(st.integers(low, 4), min_size=r, max_size=r))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    out = draw(st.lists(st.integers(1, 3), min_size=r, max_size=r))
    if mode == "cubic" and r == 3:  # 64 taps per output: keep the example small
        n, c, out = 1, 1, [min(o, 2) for o in out]
    gdt = draw(st.sampled_from([np.float32, np.float64, np.float16]))
    grid = draw(hnp.arrays(np.float64, (n, *out, r), elements=COORD)).astype(gdt)
    width = np.dtype(xdt).itemsize * 8
    x = draw(hnp.arrays(xdt, (n, c, *sizes), elements=st.floats(-100, 100, width=width)))
    return mode, padding, align, x, grid


def check_case(case: tuple[Any, ...], opset: int = 22) -> tuple[np.ndarray, np.ndarray]:
    mode, padding, align, x, grid = case
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    m = model(x.shape, grid.shape, x.dtype.type, grid.dtype.type, opset, **attrs)
    return gdv_run(m, x, grid), oracle(m, x, grid)


@settings(max_examples=150, deadline=None)
@given(cases(np.float32))
def test_f32_matches_the_reference_bit_for_bit(case: tuple[Any, ...]) -> None:
    got, want = check_case(case)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert same_bits(got, want).all(), (got, want)


@settings(max_examples=60, deadline=None)
@given(cases(np.float16))
def test_f16_matches_the_reference_bit_for_bit(case: tuple[Any, ...]) -> None:
    got, want = check_case(case)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert same_bits(got, want).all(), (got, want)


@settings(max_examples=60, deadline=None)
@given(cases(np.float64))
def test_f64_is_within_the_rounding_of_its_products(case: tuple[Any, ...]) -> None:
    got, want = check_case(case)
    assert got.dtype == want.dtype and got.shape == want.shape
    bound = 2.0**-50 * np.abs(case[3]).max() * 4 ** (case[3].ndim - 2) * 2
    np.testing.assert_array_less(np.abs(got - want), bound + np.finfo(np.float64).tiny)


def test_the_modes_paddings_and_alignments_on_a_fixed_grid() -> None:
    """Every combination once on a grid with centres, half-way points, the borders and points
    outside, values with a wide exponent range, so a wrong rule in any of them shows."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 4, 5)) * 2.0 ** rng.integers(-8, 8, (2, 3, 4, 5))
    x = x.astype(np.float32)
    picks = np.array(SPECIAL + [0.3, -0.7, 0.999, -1.001], np.float64)
    grid = rng.choice(picks, (2, 6, 7, 2)).astype(np.float32)
    for mode in MODES:
        for padding in PADDINGS:
            for align in (0, 1):
                got, want = check_case((mode, padding, align, x, grid))
                assert same_bits(got, want).all(), (mode, padding, align)


@pytest.mark.parametrize("scale", [1e3, 1e6, 1e12])
def test_coordinates_far_outside_the_input(scale: float) -> None:
    """Far-away coordinates: f64 reflection over many folds, clamping, taps whose i64 positions
    are far out of range (zeros), every combination bit for bit."""
    rng = np.random.default_rng(int(scale) % 1000 + 1)
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    grid = (rng.uniform(-1, 1, (1, 4, 5, 2)) * scale).astype(np.float32)
    for mode in MODES:
        for padding in PADDINGS:
            for align in (0, 1):
                if mode == "nearest" and padding == "zeros" and scale > 2**31:
                    continue  # the reference casts to int32 there: undefined in numpy
                got, want = check_case((mode, padding, align, x, grid))
                assert same_bits(got, want).all(), (mode, padding, align)


def test_the_rounding_of_nearest_is_half_to_even() -> None:
    # a row of 4, align_corners = 0: x = ((g + 1) * 4 - 1) / 2 is 0.5, 1.5, 2.5 -> 0, 2, 2
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 1, 4)
    grid = np.array([[[[-0.5, 0.0], [0.0, 0.0], [0.5, 0.0]]]], np.float32)
    m = model(x.shape, grid.shape, mode="nearest")
    got, want = gdv_run(m, x, grid), oracle(m, x, grid)
    assert same_bits(got, want).all()
    assert got.ravel().tolist() == [0.0, 2.0, 2.0]


def test_opset_16_names_bilinear_and_bicubic() -> None:
    """Opset 16 spells the modes bilinear and bicubic (ONNX's reference runs only the opset-20
    names): an opset-16 model imports as the opset-20 model with the new names computes."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    grid = rng.uniform(-1.2, 1.2, (1, 2, 5, 2)).astype(np.float32)
    for old, new in (("bilinear", "linear"), ("bicubic", "cubic"), ("nearest", "nearest")):
        m16 = model(x.shape, grid.shape, opset=16, mode=old, padding_mode="border")
        m22 = model(x.shape, grid.shape, opset=22, mode=new, padding_mode="border")
        assert same_bits(gdv_run(m16, x, grid), oracle(m22, x, grid)).all()


@pytest.mark.parametrize(
    ("xdt", "xshape", "gshape", "attrs", "reason"),
    [
        (np.float32, (1, 1, 2, 2), (1, 3, 3, 2), {"mode": "area"}, "mode 'area'"),
        (np.float32, (1, 1, 2, 2), (1, 3, 3, 2), {"padding_mode": "wrap"}, "padding_mode"),
        (np.float32, (1, 1, 2, 2), (1, 3, 3, 3), {}, "do not fit"),
        (np.float32, (1, 1, 1, 3), (1, 2, 2, 2),
         {"padding_mode": "reflection", "align_corners": 1}, "spatial size of 1"),
        (np.float32, (1, 0, 2, 2), (1, 3, 3, 2), {}, "empty"),
        (np.float32, (1, 1, 2, 2), (1, 2048, 2048, 2), {"mode": "cubic"}, "taps"),
    ],
)  # fmt: skip
def test_refusals_name_the_op_and_the_reason(xdt, xshape, gshape, attrs, reason) -> None:
    m = model(xshape, gshape, xdt, **attrs)
    with pytest.raises(Unsupported, match=rf"GridSample \(opset 22\) at node .*{reason}"):
        import_model(m)


def test_integer_and_bfloat16_inputs_are_refused_by_name() -> None:
    for t in (TensorProto.INT32, TensorProto.BFLOAT16):
        g = helper.make_graph(
            [helper.make_node("GridSample", ["x", "grid"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", t, [1, 1, 2, 2]),
             helper.make_tensor_value_info("grid", TensorProto.FLOAT, [1, 2, 2, 2])],
            [helper.make_tensor_value_info("y", t, None)],
        )  # fmt: skip
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)])
        with pytest.raises(Unsupported, match=r"GridSample .* X is not supported"):
            import_model(m)


@pytest.mark.parametrize(
    ("mode", "padding", "align", "xshape", "gshape", "dt"),
    [
        ("cubic", "reflection", 0, (2, 3, 4, 5), (2, 3, 4, 2), np.float32),
        ("linear", "zeros", 1, (1, 2, 3, 4, 5), (1, 2, 3, 2, 3), np.float32),
        ("nearest", "border", 0, (1, 2, 4, 5), (1, 3, 4, 2), np.float16),
    ],
)  # fmt: skip
def test_the_c_target_matches_the_reference(mode, padding, align, xshape, gshape, dt) -> None:
    from gdv.driver import CompileOptions, compile_module
    from gdv.ir.printer import print_module

    rng = np.random.default_rng(11)
    x = rng.standard_normal(xshape).astype(dt)
    grid = rng.choice(np.array(SPECIAL, np.float64), gshape).astype(np.float32)
    m = model(x.shape, grid.shape, dt, mode=mode, padding_mode=padding, align_corners=align)
    module, weights = import_model(m)
    comp = compile_module(print_module(module), CompileOptions(target="c", level=2, jobs=1))
    assert comp.verdict == "proved"
    got = np.asarray(comp(x=x, grid=grid, **weights)[0])
    assert same_bits(got, oracle(m, x, grid)).all()


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("mode", MODES)
def test_a_spatial_transformer_affine_grid_then_grid_sample(mode: str, align: int) -> None:
    """AffineGrid feeding GridSample (a spatial transformer). AffineGrid imports its ONNX function
    body (f32 arithmetic), while ONNX's reference op computes the grid in f64 (numpy's matmul)
    and rounds once: the grids differ by at most a few f32 ulp (asserted below). GridSample on
    the imported grid is bit for bit the reference's GridSample on that same grid."""
    F = TensorProto.FLOAT
    size = onnx.numpy_helper.from_array(np.array([2, 3, 4, 7], np.int64), "size")
    g = helper.make_graph(
        [helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align),
         helper.make_node("GridSample", ["x", "grid"], ["y"], align_corners=align, mode=mode)],
        "g",
        [helper.make_tensor_value_info("x", F, [2, 3, 5, 6]),
         helper.make_tensor_value_info("theta", F, [2, 2, 3])],
        [helper.make_tensor_value_info("y", F, None),
         helper.make_tensor_value_info("grid", F, None)],
        [size],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)])
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    theta = (np.eye(2, 3) + 0.3 * rng.standard_normal((2, 2, 3))).astype(np.float32)
    module, weights = import_model(m)
    y, grid = reference.run(module, dict(weights, x=x, theta=theta))
    want_y, want_grid = ReferenceEvaluator(m).run(None, {"x": x, "theta": theta})
    np.testing.assert_allclose(grid, want_grid, rtol=0, atol=4 * np.spacing(np.float32(2)))
    sample = model(x.shape, grid.shape, mode=mode, align_corners=align)
    assert same_bits(y, oracle(sample, x, grid)).all()
    assert y.shape == want_y.shape
