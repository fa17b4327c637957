"""ONNX DequantizeLinear imports as (x - zero_point) * scale in ONNX's reference's own
arithmetic (f32 for 8- and 16-bit integers, f64 then one rounding for i32; the scale's dtype
out): bit for bit against ONNX's reference evaluator, per tensor, per axis and blocked."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from gdv.backends import reference
from gdv.frontends.onnx import Unsupported, import_model
from gdv.validate.counterexample import same_bits

ONNX = {
    np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8, np.int16: TensorProto.INT16,
    np.uint16: TensorProto.UINT16, np.int32: TensorProto.INT32, np.float32: TensorProto.FLOAT,
    np.float16: TensorProto.FLOAT16, np.int64: TensorProto.INT64,
}  # fmt: skip


def _model(x, scale, zp, **attrs):
    names = ["x", "s"] + (["z"] if zp is not None else [])
    arrays = [x, scale] + ([zp] if zp is not None else [])
    inputs = [
        helper.make_tensor_value_info(n, ONNX[a.dtype.type], list(a.shape))
        for n, a in zip(names, arrays, strict=True)
    ]
    g = helper.make_graph(
        [helper.make_node("DequantizeLinear", names, ["y"], **attrs)],
        "g",
        inputs,
        [helper.make_tensor_value_info("y", ONNX[scale.dtype.type], None)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    return m, dict(zip(names, arrays, strict=True))


def _check(x, scale, zp=None, **attrs) -> None:
    m, feeds = _model(x, scale, zp, **attrs)
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    module, weights = import_model(m)
    got = reference.run(module, dict(weights, **feeds))[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    assert same_bits(got, want).all(), (got, want)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32])
@pytest.mark.parametrize("mode", ["tensor", "axis", "blocked"])
def test_dequantize_is_onnx_reference_bit_for_bit(dtype, mode) -> None:
    rng = np.random.default_rng(5)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, (3, 5), endpoint=True).astype(dtype)
    if dtype is np.int32:  # values where f32(x) rounds, so the f64 difference shows
        x[0, :3] = [2**31 - 1, -(2**31), 16777217]
    attrs = {}
    if mode == "tensor":
        shape = ()
    elif mode == "axis":
        shape, attrs = (5,), {"axis": 1}
    else:
        shape, attrs = (3, 3), {"axis": 1, "block_size": 2}
    scale = (rng.random(shape) * 0.1 + 1e-3).astype(np.float32)
    zp = rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    _check(x, scale, zp, **attrs)
    _check(x, scale, None, **attrs)


def test_f16_scale_rounds_once_to_f16() -> None:
    x = np.arange(-8, 8, dtype=np.int8).reshape(2, 8)
    _check(x, np.array(0.3, np.float16), np.array(3, np.int8))


def test_i64_input_is_refused() -> None:
    m, _ = _model(np.zeros(3, np.int64), np.array(1.0, np.float32), None)
    with pytest.raises(Unsupported, match="integers of up to 32 bits"):
        import_model(m)
