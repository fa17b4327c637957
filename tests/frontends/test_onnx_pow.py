"""ONNX Pow by a constant 2 or 3 imports as products (`x * x`, `(x * x) * x`), which is what
onnxruntime's CPU kernel computes: bit-exact against it, on every special value too, and on the
C target; other exponents, bases and non-constant exponents keep IR `pow`."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
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
