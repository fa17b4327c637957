"""ONNX CumSum and CumProd import as IR cumsum/cumprod: checked against ONNX's reference
evaluator (numpy's sequential running folds, the exclusive output shifted with 0 or 1 first) on
NaN, infinities and signed zeros, every axis (negative ones too) and both flags, and the axis
must be a constant."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from gdv.backends import reference
from gdv.frontends.onnx import Unsupported, import_model
from gdv.validate.counterexample import same_bits

POOL = [0.0, -0.0, 1.0, -1.0, 0.5, 3.0, 1e30, -1e30, np.inf, -np.inf, np.nan]
ONNX_TYPE = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
             np.int32: TensorProto.INT32, np.int64: TensorProto.INT64}  # fmt: skip


def model(op: str, x: np.ndarray, axis: np.ndarray | None, opset: int = 17, **attrs: Any):
    node = helper.make_node(op, ["x", "axis"], ["y"], **attrs)
    t = ONNX_TYPE[x.dtype.type]
    inputs = [helper.make_tensor_value_info("x", t, list(x.shape))]
    inits = []
    if axis is None:  # a runtime axis
        inputs.append(helper.make_tensor_value_info("axis", TensorProto.INT64, []))
    else:
        inits.append(numpy_helper.from_array(axis, "axis"))
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", t, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def both(m: onnx.ModelProto, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    module, weights = import_model(m)
    (got,) = reference.run(module, dict(weights, x=x))
    (want,) = ReferenceEvaluator(m).run(None, {"x": x})
    return got, want


@given(
    x=hnp.arrays(st.sampled_from([np.float32, np.float64]),
                 hnp.array_shapes(min_dims=1, max_dims=3, max_side=5),
                 elements=st.sampled_from(POOL)),
    data=st.data(),
)  # fmt: skip
def test_cumsum_matches_onnx_reference(x: np.ndarray, data: st.DataObject) -> None:
    axis = np.array(data.draw(st.integers(-x.ndim, x.ndim - 1)), np.int64)
    attrs = {k: data.draw(st.integers(0, 1)) for k in ("exclusive", "reverse")}
    got, want = both(model("CumSum", x, axis, **attrs), x)
    assert got.dtype == want.dtype and same_bits(got, want).all(), (got, want)


def test_cumsum_integer_and_one_element_axis() -> None:
    x = np.array([[2**31 - 1, 1, 5], [-3, 4, -(2**31)]], np.int32)
    for axis in (np.array(1, np.int64), np.array(0, np.int32)):
        for attrs in ({}, {"exclusive": 1}, {"reverse": 1, "exclusive": 1}):
            got, want = both(model("CumSum", x, axis, **attrs), x)
            np.testing.assert_array_equal(got, want)
    # a one-element axis tensor (which onnxruntime accepts) means its one value
    m1 = model("CumSum", x, np.array([1], np.int64), reverse=1)
    m0 = model("CumSum", x, np.array(1, np.int64), reverse=1)
    module, _ = import_model(m1)
    np.testing.assert_array_equal(reference.run(module, {"x": x})[0], both(m0, x)[1])


def test_cumprod_matches_numpy() -> None:
    x = np.array([[2.0, -0.0, np.inf, 3.0], [np.nan, 1.0, -1.0, 1e30]], np.float32)
    m = model("CumProd", x, np.array(1, np.int64), opset=26, reverse=1)
    module, weights = import_model(m)
    (got,) = reference.run(module, dict(weights, x=x))
    want = np.flip(np.multiply.accumulate(np.flip(x, 1), axis=1), 1)
    assert same_bits(got, want).all()


def test_a_runtime_axis_is_refused() -> None:
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(Unsupported) as e:
        import_model(model("CumSum", x, None))
    assert e.value.message.startswith("unsupported ONNX op CumSum (opset 17) at node")
    assert "axis must be a constant" in e.value.message
