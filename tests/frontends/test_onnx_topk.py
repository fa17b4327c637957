"""ONNX TopK imports as the first k positions of IR argsort, and the values taken there:
checked against ONNX's reference evaluator (a lexsort: equal values keep the lower index first,
a NaN is above every number) on ties, NaN, infinities and signed zeros, for both `largest`,
every axis and k from 0 to the axis extent; and on the C target."""

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

POOL = [0.0, -0.0, 1.0, -1.0, 2.0, np.inf, -np.inf, np.nan]
ONNX_TYPE = {np.float32: TensorProto.FLOAT, np.int32: TensorProto.INT32}


def model(x: np.ndarray, k: int | None, opset: int = 17, **attrs: Any) -> onnx.ModelProto:
    t = ONNX_TYPE[x.dtype.type]
    inputs = [helper.make_tensor_value_info("x", t, list(x.shape))]
    inits = []
    if k is None:  # a runtime k
        inputs.append(helper.make_tensor_value_info("k", TensorProto.INT64, [1]))
    else:
        inits.append(numpy_helper.from_array(np.array([k], np.int64), "k"))
    g = helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"], **attrs)],
        "g",
        inputs,
        [helper.make_tensor_value_info("v", t, None),
         helper.make_tensor_value_info("i", TensorProto.INT64, None)],
        inits,
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def gdv_run(m: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    module, weights = import_model(m)
    return reference.run(module, dict(weights, x=x))


@given(
    x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=5),
                 elements=st.sampled_from(POOL)),
    data=st.data(),
)  # fmt: skip
def test_topk_matches_onnx_reference(x: np.ndarray, data: st.DataObject) -> None:
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    k = data.draw(st.integers(0, x.shape[axis]))
    largest = data.draw(st.integers(0, 1))
    m = model(x, k, axis=axis, largest=largest)
    got = gdv_run(m, x)
    want = ReferenceEvaluator(m).run(None, {"x": x})
    assert got[1].dtype == np.int64
    np.testing.assert_array_equal(got[1], want[1])
    assert same_bits(got[0], want[0]).all()


def test_ties_keep_the_lower_index_first() -> None:
    x = np.array([[1, 5, 5, 2, 5], [7, 7, -1, -1, 0]], np.int32)
    v, i = gdv_run(model(x, 3), x)
    assert i.tolist() == [[1, 2, 4], [0, 1, 4]] and v.tolist() == [[5, 5, 5], [7, 7, 0]]
    v, i = gdv_run(model(x, 2, largest=0), x)
    assert i.tolist() == [[0, 3], [2, 3]]


def test_refusals_name_the_op() -> None:
    x = np.zeros((2, 3), np.float32)
    for m, why in ((model(x, 4), "k = 4 is outside [0, 3]"), (model(x, None), "k must be")):
        with pytest.raises(Unsupported) as e:
            import_model(m)
        assert e.value.message.startswith("unsupported ONNX op TopK (opset 17) at node")
        assert why in e.value.message


def test_c_target_matches_the_reference(tmp_path) -> None:
    from gdv.driver import compile as gdv_compile
    from gdv.ir.printer import print_module

    x = np.random.default_rng(2).choice(np.array(POOL, np.float32), size=(4, 7))
    module, weights = import_model(model(x, 3, axis=1))
    src = tmp_path / "topk.gdv"
    src.write_text(print_module(module))
    comp = gdv_compile(src, target="c", cache_dir=str(tmp_path / "cache"))
    got = comp(x=x, **weights)
    want = reference.run(module, dict(weights, x=x))
    for g, w in zip(got, want, strict=True):
        assert same_bits(np.asarray(g), w).all()
