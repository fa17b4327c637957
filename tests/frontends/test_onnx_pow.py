"""ONNX Pow by a constant 2 or 3 imports as products (`x * x`, `(x * x) * x`), which is what
onnxruntime's CPU kernel computes: bit-exact against it, on every special value too, and on the
C target; other exponents, bases and non-constant exponents keep IR `pow`. Integer bases and
exponents compute as ONNX's reference does (issue 19): numpy's common dtype, an exact wrapping
integer power between integers."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from gdv.backends import reference
from gdv.frontends.onnx import import_model

SPECIAL = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4e38, -3.4e38, 1e13]


def pow_model(exponent: np.ndarray, dtype: int, n: int) -> onnx.ModelProto:
    g = helper.make_graph(
        [helper.make_node("Pow", ["x", "e"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", dtype, [n])],
        [helper.make_tensor_value_info("y", dtype, None)],
        [numpy_helper.from_array(exponent, "e")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def run_both(m: onnx.ModelProto, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"x": x})
    module, weights = import_model(m)
    (got,) = reference.run(module, dict(weights, x=x))
    return want, got, [op.name for op in module.entry.ops]


def inputs(dtype: type, n: int = 4096) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(n) * 10.0 ** rng.integers(-20, 20, n), SPECIAL])
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "exponent",
    [np.float32(2.0), np.float32(3.0), np.int64(3), np.full([1], 3.0, np.float32)],
    ids=["f32-2", "f32-3", "i64-3", "splat-3"],
)
def test_small_powers_are_products_bit_exact_to_onnxruntime(dtype, exponent) -> None:
    x = inputs(dtype)
    code = TensorProto.FLOAT if dtype is np.float32 else TensorProto.DOUBLE
    e = np.asarray(exponent)
    if e.dtype.kind == "f":
        e = e.astype(dtype)
    want, got, ops = run_both(pow_model(e, code, x.size), x)
    assert "pow" not in ops and ops.count("mul") == (2 if int(e.flat[0]) == 3 else 1)
    assert want.dtype == got.dtype == dtype
    sign_and_bits = want.view(np.uint64 if dtype is np.float64 else np.uint32)
    got_bits = got.view(sign_and_bits.dtype)
    nan = np.isnan(want)
    assert np.array_equal(nan, np.isnan(got))
    assert np.array_equal(sign_and_bits[~nan], got_bits[~nan])  # -0.0 included


def test_cube_differs_from_the_correctly_rounded_power() -> None:
    # The products are a choice (onnxruntime's): they round twice, so some results are one ulp
    # away from the correctly rounded cube; the test above is what pins them.
    x = inputs(np.float32)[:4096]
    cube = (x * x) * x
    exact = (x.astype(np.float64) ** 3).astype(np.float32)
    finite = np.isfinite(exact)
    assert np.any(cube[finite] != exact[finite])


@pytest.mark.parametrize(
    "exponent", [np.float32(2.5), np.float32(4.0), np.array([2.0, 3.0], np.float32)]
)
def test_other_exponents_keep_pow(exponent) -> None:
    x = inputs(np.float32)[:2]
    _, _, ops = run_both(pow_model(np.asarray(exponent), TensorProto.FLOAT, x.size), x)
    assert "pow" in ops


def test_a_runtime_exponent_keeps_pow() -> None:
    g = helper.make_graph(
        [helper.make_node("Pow", ["x", "e"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("e", TensorProto.FLOAT, [4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    module, _ = import_model(m)
    assert "pow" in [op.name for op in module.entry.ops]


def test_cube_on_the_c_target_matches_onnxruntime(tmp_path) -> None:
    from gdv.driver import compile as gdv_compile
    from gdv.ir.printer import print_module

    x = inputs(np.float32, 1000)
    m = pow_model(np.float32(3.0), TensorProto.FLOAT, x.size)
    want, _, _ = run_both(m, x)
    module, weights = import_model(m)
    src = tmp_path / "cube.gdv"
    src.write_text(print_module(module))
    comp = gdv_compile(src, target="c", cache_dir=str(tmp_path / "cache"))
    (got,) = comp(x=x, **weights)
    nan = np.isnan(want)
    assert np.array_equal(nan, np.isnan(got))
    assert np.array_equal(want.view(np.uint32)[~nan], got.view(np.uint32)[~nan])


# --- integer bases and exponents (issue 19): np.power(a, b).astype(a.dtype), ONNX's reference


def _pow2(a: np.ndarray, b: np.ndarray) -> onnx.ModelProto:
    code = {a.dtype: helper.np_dtype_to_tensor_dtype(a.dtype),
            b.dtype: helper.np_dtype_to_tensor_dtype(b.dtype)}  # fmt: skip
    g = helper.make_graph(
        [helper.make_node("Pow", ["a", "b"], ["y"])],
        "g",
        [helper.make_tensor_value_info("a", code[a.dtype], list(a.shape)),
         helper.make_tensor_value_info("b", code[b.dtype], list(b.shape))],
        [helper.make_tensor_value_info("y", code[a.dtype], None)],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])


def _gdv_and_reference(a: np.ndarray, b: np.ndarray, on_c: bool = False):
    from onnx.reference import ReferenceEvaluator

    m = _pow2(a, b)
    want = ReferenceEvaluator(m).run(None, {"a": a, "b": b})[0]
    module, weights = import_model(m)
    got = [reference.run(module, dict(weights, a=a, b=b))[0]]
    if on_c:
        from gdv.backends import c

        got.append(c.run(module, dict(weights, a=a, b=b))[0])
    return got, want


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint64, np.int8])
@given(data=st.data())
def test_integer_power_is_numpy_s_wrapping_power(dtype, data) -> None:
    info = np.iinfo(dtype)
    n = data.draw(st.integers(1, 12))
    base = st.integers(-3, 3) | st.integers(int(info.min), int(info.max))
    a = np.array(data.draw(st.lists(base.filter(lambda v: info.min <= v <= info.max),
                                    min_size=n, max_size=n)), dtype)  # fmt: skip
    b = np.array(data.draw(st.lists(st.integers(0, 70) | st.integers(0, min(int(info.max),
                 2**40)), min_size=n, max_size=n)), dtype)  # fmt: skip
    (got,), want = _gdv_and_reference(a, b)
    assert got.dtype == want.dtype and np.array_equal(got, want), (a, b, got, want)


def test_integer_power_edges_on_the_c_target() -> None:
    a = np.array([2, -2, 3, 0, 0, -1, -1, 1, 7, 2**31 - 1, -(2**31), 5], np.int64)
    b = np.array([62, 63, 40, 0, 5, 2**40 + 1, 2**40, 2**62, 0, 3, 2, 1], np.int64)
    got, want = _gdv_and_reference(a, b, on_c=True)
    for g in got:
        assert np.array_equal(g, want)
    # a negative exponent (numpy raises): the truncated 1 / a^-b
    a = np.array([1, -1, -1, 2, 0, 5], np.int32)
    b = np.array([-3, -3, -2, -1, -1, -7], np.int32)
    m = _pow2(a, b)
    module, weights = import_model(m)
    assert reference.run(module, dict(weights, a=a, b=b))[0].tolist() == [1, -1, 1, 0, 0, 0]


@pytest.mark.parametrize("types", [(np.float32, np.int32), (np.float32, np.uint64),
                                   (np.int32, np.float32), (np.int64, np.float32)])  # fmt: skip
def test_mixed_powers_compute_in_numpy_s_common_dtype(types) -> None:
    """f32 ** i32 in f64 (numpy promotes), rounded to f32; i32 ** f32 in f64, truncated to
    i32: equal to ONNX's reference on values whose f64 power is exact or far from a rounding
    boundary (IR pow is a transcendental: its last bits are the target's)."""
    ta, tb = types
    a = np.array([2, 3, -2, 5, 1, 0, 7, 10], ta)
    b = np.array([3, 2, 3, 0, 9, 4, 1, 5], tb)
    (got,), want = _gdv_and_reference(a, b)
    assert got.dtype == want.dtype and np.array_equal(got, want)
