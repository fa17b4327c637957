"""ONNX ArgMax, ArgMin and Hardmax import as exact decompositions into existing IR ops
(`frontends.onnx.arg_extreme`): checked against numpy's argmax/argmin (the meaning ONNX's
reference gives them: a NaN is the extreme, the first one wins; +0.0 ties with -0.0) on ties,
NaN, infinities and signed zeros, with keepdims, negative axes and select_last_index, on the
reference backend and on the C target."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto, helper

from gdv.backends import reference
from gdv.frontends.onnx import Unsupported, import_model

F = TensorProto.FLOAT
I64 = TensorProto.INT64
POOL = [0.0, -0.0, 1.0, -1.0, 2.0, np.inf, -np.inf, np.nan]
"""Few distinct values, so that ties, NaNs and signed zeros are common."""


def model(node: Any, shape: list[int], in_type: int, out_type: int, opset: int = 17):
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", in_type, shape)],
        [helper.make_tensor_value_info("y", out_type, None)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def run(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    module, weights = import_model(m)
    (y,) = reference.run(module, dict(weights, x=x))
    return y


def numpy_arg(x: np.ndarray, axis: int, largest: bool, last: bool, keep: bool) -> np.ndarray:
    f = np.argmax if largest else np.argmin
    if last:  # the last extreme: the first one of the reversed axis, counted from the end
        r = x.shape[axis] - 1 - f(np.flip(x, axis), axis=axis)
    else:
        r = f(x, axis=axis)
    return np.expand_dims(r, axis) if keep else r


def arg_node(op: str, axis: int, last: int, keep: int) -> Any:
    return helper.make_node(op, ["x"], ["y"], axis=axis, select_last_index=last, keepdims=keep)


CASES = [
    # (values, axis): ties, NaN first/later, all NaN, signed zeros, infinities
    ([[1.0, 3.0, 3.0, 0.0], [np.nan, 1.0, np.nan, 5.0], [-0.0, 0.0, -0.0, 0.0]], 1),
    ([[np.inf, np.inf, 1.0], [-np.inf, -np.inf, -np.inf], [np.nan, np.nan, np.nan]], -1),
    ([[0.0, -0.0], [-0.0, 0.0], [np.nan, -np.inf], [2.0, np.nan]], 0),
]


@pytest.mark.parametrize("values, axis", CASES)
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("keep", [0, 1])
def test_special_values_match_numpy(values, axis: int, op: str, last: int, keep: int) -> None:
    x = np.array(values, np.float32)
    got = run(model(arg_node(op, axis, last, keep), list(x.shape), F, I64), x)
    want = numpy_arg(x, axis, op == "ArgMax", bool(last), bool(keep))
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def test_first_and_last_index_differ_on_ties() -> None:
    # the test can fail: the two settings must give different answers here
    x = np.array([[5.0, 1.0, 5.0, 5.0]], np.float32)
    first = run(model(arg_node("ArgMax", 1, 0, 0), [1, 4], F, I64), x)
    last = run(model(arg_node("ArgMax", 1, 1, 0), [1, 4], F, I64), x)
    assert first.tolist() == [0] and last.tolist() == [3]


@given(
    x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=4),
                 elements=st.sampled_from(POOL)),
    data=st.data(),
)  # fmt: skip
def test_random_float_inputs_match_numpy(x: np.ndarray, data: st.DataObject) -> None:
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    op = data.draw(st.sampled_from(["ArgMax", "ArgMin"]))
    last = data.draw(st.integers(0, 1))
    keep = data.draw(st.integers(0, 1))
    got = run(model(arg_node(op, axis, last, keep), list(x.shape), F, I64), x)
    np.testing.assert_array_equal(got, numpy_arg(x, axis, op == "ArgMax", bool(last), bool(keep)))


@given(
    x=hnp.arrays(np.int32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=4),
                 elements=st.sampled_from([-(2**31), -1, 0, 1, 2**31 - 1])),
    data=st.data(),
)  # fmt: skip
def test_random_integer_inputs_match_numpy(x: np.ndarray, data: st.DataObject) -> None:
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    op = data.draw(st.sampled_from(["ArgMax", "ArgMin"]))
    last = data.draw(st.integers(0, 1))
    m = model(arg_node(op, axis, last, 0), list(x.shape), TensorProto.INT32, I64)
    np.testing.assert_array_equal(run(m, x), numpy_arg(x, axis, op == "ArgMax", bool(last), False))


def numpy_hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    y = np.zeros_like(x)
    np.put_along_axis(y, np.expand_dims(np.argmax(x, axis=axis), axis), 1, axis=axis)
    return y


@given(
    x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=4),
                 elements=st.sampled_from(POOL)),
    data=st.data(),
)  # fmt: skip
def test_hardmax_is_one_hot_of_numpy_argmax(x: np.ndarray, data: st.DataObject) -> None:
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    got = run(model(helper.make_node("Hardmax", ["x"], ["y"], axis=axis), list(x.shape), F, F), x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, numpy_hardmax(x, axis))


def test_hardmax_before_opset_13_coerces_to_2d() -> None:
    x = np.array([[[1.0, 4.0], [4.0, 0.0]], [[np.nan, 9.0], [2.0, np.nan]]], np.float32)
    m = model(helper.make_node("Hardmax", ["x"], ["y"], axis=1), [2, 2, 2], F, F, opset=11)
    want = numpy_hardmax(x.reshape(2, 4), 1).reshape(2, 2, 2)
    np.testing.assert_array_equal(run(m, x), want)
    assert want.tolist() != numpy_hardmax(x, 1).tolist()  # the coercion matters on this input


def test_an_empty_axis_is_refused_by_name() -> None:
    m = model(arg_node("ArgMax", 1, 0, 1), [3, 0], F, I64)
    with pytest.raises(Unsupported) as e:
        import_model(m)
    assert e.value.message.startswith("unsupported ONNX op ArgMax (opset 17) at node")
    assert "axis 1 of f32[3,0] is empty" in e.value.message
    # with nothing to index the result is empty, and that is fine
    assert run(model(arg_node("ArgMax", 1, 0, 0), [0, 3], F, I64), np.zeros((0, 3), np.float32)) \
        .shape == (0,)  # fmt: skip


def test_c_target_matches_the_reference(tmp_path) -> None:
    from gdv.driver import compile as gdv_compile
    from gdv.ir.printer import print_module

    rng = np.random.default_rng(1)
    x = rng.choice(np.array(POOL, np.float32), size=(5, 7))
    for node in (arg_node("ArgMax", 1, 0, 0), arg_node("ArgMin", 0, 1, 1),
                 helper.make_node("Hardmax", ["x"], ["y"], axis=-1)):  # fmt: skip
        out = F if node.op_type == "Hardmax" else I64
        module, weights = import_model(model(node, [5, 7], F, out))
        src = tmp_path / f"{node.op_type}.gdv"
        src.write_text(print_module(module))
        comp = gdv_compile(src, target="c", cache_dir=str(tmp_path / "cache"))
        (got,) = comp(x=x, **weights)
        (want,) = reference.run(module, dict(weights, x=x))
        np.testing.assert_array_equal(got, want)
