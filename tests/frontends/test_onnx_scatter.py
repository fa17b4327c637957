"""ONNX ScatterND and ScatterElements with reduction add, mul, max, min (issue 19): updates
folded into their positions in index order, duplicates included, as ONNX's reference loops
(np.maximum / np.minimum for ScatterND, Python's max / min for ScatterElements): bit for bit
against ONNX's reference evaluator on hypothesis-drawn values with duplicate indices, NaN and
signed zeros, and on the C target."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from gdv.backends import c, reference
from gdv.frontends.onnx import Unsupported, import_model
from gdv.validate.counterexample import same_bits

CODES = {
    np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.int32: TensorProto.INT32,
    np.int64: TensorProto.INT64, ml_dtypes.bfloat16: TensorProto.BFLOAT16,
    np.float64: TensorProto.DOUBLE,
}  # fmt: skip
SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.0, np.nan, np.inf, -np.inf, 0.5]


def _model(op: str, data, indices, updates, **attrs):
    feeds = {"data": data, "updates": updates}
    g = helper.make_graph(
        [helper.make_node(op, ["data", "indices", "updates"], ["y"], **attrs)],
        "g",
        [helper.make_tensor_value_info(n, CODES[a.dtype.type], list(a.shape)) for n, a in
         feeds.items()],
        [helper.make_tensor_value_info("y", CODES[data.dtype.type], None)],
        [helper.make_tensor("indices", TensorProto.INT64, list(indices.shape),
                            indices.ravel().tolist())],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), feeds


def _check(op, data, indices, updates, on_c: bool = False, **attrs) -> None:
    m, feeds = _model(op, data, indices, updates, **attrs)
    with np.errstate(all="ignore"):
        want = ReferenceEvaluator(m).run(None, feeds)[0]
    module, weights = import_model(m)
    runs = [reference.run(module, dict(weights, **feeds))[0]]
    if on_c:
        runs.append(c.run(module, dict(weights, **feeds))[0])
    for got in runs:
        assert got.dtype == want.dtype and got.shape == want.shape
        assert same_bits(got, want).all(), (data, indices, updates, got, want)


def _values(data, dtype, shape) -> np.ndarray:
    n = int(np.prod(shape))
    if np.dtype(dtype).kind == "i":
        vals = data.draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n))
    else:
        vals = data.draw(st.lists(st.sampled_from(SPECIAL) | st.floats(-4, 4), min_size=n,
                                  max_size=n))  # fmt: skip
    return np.array(vals, dtype=np.float64 if np.dtype(dtype).kind == "f" or dtype is
                    ml_dtypes.bfloat16 else np.int64).astype(dtype).reshape(shape)  # fmt: skip


DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64, np.int32]


@pytest.mark.parametrize("how", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_scatter_nd_reductions_match_the_reference(how, dtype, data) -> None:
    x = _values(data, dtype, (4, 3))
    k = data.draw(st.integers(1, 6))
    rows = np.array(data.draw(st.lists(st.integers(-4, 3), min_size=k, max_size=k)), np.int64)
    whole = data.draw(st.booleans())  # whole rows, or single elements
    if whole:
        idx = rows.reshape(k, 1)
        upd = _values(data, dtype, (k, 3))
    else:
        cols = np.array(data.draw(st.lists(st.integers(0, 2), min_size=k, max_size=k)), np.int64)
        idx = np.stack([rows, cols], axis=1)
        upd = _values(data, dtype, (k,))
    _check("ScatterND", x, idx, upd, reduction=how)


@pytest.mark.parametrize("how", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_scatter_elements_reductions_match_the_reference(how, dtype, data) -> None:
    x = _values(data, dtype, (3, 4))
    axis = data.draw(st.sampled_from([0, 1, -1]))
    ext = 3 if axis == 0 else 4
    shape = (2, 4) if axis == 0 else (3, 2)
    n = int(np.prod(shape))
    idx = np.array(data.draw(st.lists(st.integers(-ext, ext - 1), min_size=n, max_size=n)),
                   np.int64).reshape(shape)  # fmt: skip
    _check("ScatterElements", x, idx, _values(data, dtype, shape), axis=axis, reduction=how)


def test_duplicates_fold_in_index_order_on_the_c_target() -> None:
    """Three updates of one position: ((d + u0) + u1) + u2 rounded at each step, which differs
    from any other order here (1e8 + 1 + 1 = 1e8 in f32, where 1 + 1 + 1e8 is 1e8 + 2)."""
    x = np.array([1e8, 0.0, -0.0], np.float32)
    idx = np.array([[0], [0], [0], [2], [2]], np.int64)
    upd = np.array([1.0, 1.0, 3.0, -0.0, np.nan], np.float32)
    for how in ("add", "mul", "max", "min"):
        _check("ScatterND", x, idx, upd, on_c=True, reduction=how)
        _check("ScatterElements", x, idx.ravel(), upd, on_c=True, reduction=how)


def test_an_unknown_reduction_is_refused() -> None:
    x = np.zeros(3, np.float32)
    m, _ = _model("ScatterND", x, np.zeros((1, 1), np.int64), x[:1], reduction="none")
    m.graph.node[0].attribute[0].s = b"avg"
    with pytest.raises(Unsupported, match="reduction 'avg'"):
        import_model(m)
