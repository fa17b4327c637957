"""ONNX DequantizeLinear imports as (x - zero_point) * scale in ONNX's reference's own
arithmetic (f32 for 8- and 16-bit integers, f64 then one rounding for i32; the scale's dtype
out): bit for bit against ONNX's reference evaluator, per tensor, per axis and blocked."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
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


# --- QuantizeLinear, DynamicQuantizeLinear and the integer products (issue 19) ---------------

QUANT_OUT = [np.uint8, np.int8, np.uint16, np.int16]


def _graph(op: str, feeds: dict[str, np.ndarray], outs: int = 1, opset: int = 21, **attrs):
    g = helper.make_graph(
        [helper.make_node(op, list(feeds), [f"y{k}" for k in range(outs)], **attrs)],
        "g",
        [
            helper.make_tensor_value_info(n, ONNX[a.dtype.type], list(a.shape))
            for n, a in feeds.items()
        ],
        [helper.make_tensor_value_info(f"y{k}", TensorProto.UNDEFINED, None) for k in range(outs)],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _same_as_reference(op: str, feeds: dict[str, np.ndarray], outs: int = 1, target=None,
                       **attrs) -> list[np.ndarray]:  # fmt: skip
    """Runs `op` on gdv's reference (and `target` when given) and ONNX's reference evaluator;
    asserts every output equal bit for bit and of one dtype."""
    m = _graph(op, feeds, outs, **attrs)
    with np.errstate(all="ignore"):
        want = ReferenceEvaluator(m).run(None, feeds)
    module, weights = import_model(m)
    runs = [reference.run(module, dict(weights, **feeds))]
    if target is not None:
        runs.append(target.run(module, dict(weights, **feeds)))
    for got in runs:
        for g, w in zip(got, want, strict=True):
            w = np.asarray(w)
            assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype)
            assert same_bits(g, w).all(), (feeds, g, w)
    return runs[0]


def _quant_values(data, shape, scale_hi: float = 0.2) -> np.ndarray:
    """f32 values drawn to sit on ties (k + 0.5) * scale, on saturation and in between."""
    return np.array(
        data.draw(
            st.lists(
                st.floats(-1e3, 1e3, width=32) | st.sampled_from([0.5, -0.5, 1.5, -2.5, 0.0]),
                min_size=int(np.prod(shape)),
                max_size=int(np.prod(shape)),
            )
        ),
        np.float32,
    ).reshape(shape)


@pytest.mark.parametrize("out", QUANT_OUT)
@pytest.mark.parametrize("mode", ["tensor", "axis", "blocked"])
@given(data=st.data())
def test_quantize_is_onnx_reference_bit_for_bit(out, mode, data) -> None:
    shape = (3, 4)
    x = _quant_values(data, shape)
    attrs = {}
    if mode == "tensor":
        pshape = ()
    elif mode == "axis":
        pshape, attrs = (4,), {"axis": 1}
    else:
        pshape, attrs = (3, 2), {"axis": 1, "block_size": 2}
    # scales of 1, 0.5 and 2 put x's halves on ties; others at random
    scale = np.array(
        data.draw(
            st.lists(
                st.sampled_from([1.0, 0.5, 2.0, 0.1]) | st.floats(2**-10, 10, width=32),
                min_size=int(np.prod(pshape)), max_size=int(np.prod(pshape)),
            )
        ),
        np.float32,
    ).reshape(pshape)  # fmt: skip
    info = np.iinfo(out)
    zp = np.array(
        data.draw(st.lists(st.integers(int(info.min), int(info.max)),
                           min_size=int(np.prod(pshape)), max_size=int(np.prod(pshape)))),
        out,
    ).reshape(pshape)  # fmt: skip
    _same_as_reference("QuantizeLinear", {"x": x, "s": scale, "z": zp}, **attrs)
    if out is np.uint8:  # without a zero point: u8
        _same_as_reference("QuantizeLinear", {"x": x, "s": scale}, **attrs)
    else:
        code = ONNX[out]
        _same_as_reference("QuantizeLinear", {"x": x, "s": scale}, output_dtype=code, **attrs)


def test_quantize_edges_and_c_target() -> None:
    """Ties both ways, saturation at both ends and values just inside (within i32, where the
    reference's cast is defined), on the C target too."""
    from gdv.backends import c

    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 254.5, 255.5, -128.5, 127.5, 126.5, 1e9, -1e9,
                  2.1e9, -2.1e9, -0.0, 32767.5, -32768.5, 65535.5], np.float32)  # fmt: skip
    for out in QUANT_OUT:
        for zp in (0, int(np.iinfo(out).max), int(np.iinfo(out).min) + 3):
            feeds = {"x": x, "s": np.array(1.0, np.float32), "z": np.array(zp, out)}
            _same_as_reference("QuantizeLinear", feeds, target=c)
    x16 = x[np.abs(x) < 1e4].astype(np.float16)  # x / 0.5 finite in f16
    h = {"x": x16, "s": np.array(0.5, np.float16), "z": np.array(3, np.int8)}
    _same_as_reference("QuantizeLinear", h, target=c)


def test_quantize_saturates_where_the_reference_cast_is_undefined() -> None:
    """Beyond i32 (and +-inf) ONNX's reference casts out of range (undefined in C, INT_MIN on
    x86); gdv saturates as ONNX's spec says, and takes NaN as 0 (the zero point)."""
    x = np.array([np.inf, -np.inf, 3e38, -3e38, np.nan], np.float32)
    m = _graph("QuantizeLinear", {"x": x, "s": np.array(1.0, np.float32),
                                  "z": np.array(5, np.int8)})  # fmt: skip
    module, weights = import_model(m)
    got = reference.run(module, dict(weights, x=x, s=np.array(1.0, np.float32),
                                     z=np.array(5, np.int8)))[0]  # fmt: skip
    assert got.tolist() == [127, -128, 127, -128, 5]


def test_quantize_refusals_name_the_reason() -> None:
    x, s = np.zeros(3, np.float32), np.array(1.0, np.float32)
    with pytest.raises(Unsupported, match="output i32"):
        import_model(_graph("QuantizeLinear", {"x": x, "s": s, "z": np.array(0, np.int32)}))
    with pytest.raises(Unsupported, match="input i32"):
        import_model(_graph("QuantizeLinear", {"x": np.zeros(3, np.int32), "s": s}))


@given(data=st.data())
def test_dynamic_quantize_is_onnx_reference_bit_for_bit(data) -> None:
    x = _quant_values(data, (2, 5))
    _same_as_reference("DynamicQuantizeLinear", {"x": x}, outs=3)


def _ints(data, dtype, shape) -> np.ndarray:
    info = np.iinfo(dtype)
    n = int(np.prod(shape))
    vals = data.draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=n, max_size=n))
    return np.array(vals, dtype).reshape(shape)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@given(data=st.data())
def test_matmul_integer_is_onnx_reference(dtype, data) -> None:
    a, b = _ints(data, dtype, (2, 3, 4)), _ints(data, dtype, (4, 5))
    za, zb = _ints(data, dtype, ()), _ints(data, dtype, ())
    _same_as_reference("MatMulInteger", {"a": a, "b": b, "za": za, "zb": zb}, opset=10)
    _same_as_reference("MatMulInteger", {"a": a, "b": b}, opset=10)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("sdtype", [np.float32, np.float16])
@given(data=st.data())
def test_qlinear_matmul_is_onnx_reference(dtype, sdtype, data) -> None:
    a, b = _ints(data, dtype, (3, 4)), _ints(data, dtype, (4, 2))
    scales = [np.array(data.draw(st.floats(2**-10, 2.0, width=16)), sdtype) for _ in range(3)]
    za, zb, zy = (_ints(data, dtype, ()) for _ in range(3))
    feeds = {"a": a, "sa": scales[0], "za": za, "b": b, "sb": scales[1], "zb": zb,
             "sy": scales[2], "zy": zy}  # fmt: skip
    _same_as_reference("QLinearMatMul", feeds)


@given(data=st.data())
def test_conv_integer_and_qlinear_conv_are_onnx_reference(data) -> None:
    x, w = _ints(data, np.uint8, (1, 2, 4, 4)), _ints(data, np.uint8, (3, 2, 2, 2))
    zx, zw = _ints(data, np.uint8, ()), _ints(data, np.uint8, ())
    pads = data.draw(st.sampled_from([[0, 0, 0, 0], [1, 0, 1, 1]]))
    _same_as_reference("ConvInteger", {"x": x, "w": w, "zx": zx, "zw": zw}, opset=10, pads=pads)
    xs, ys = (np.array(data.draw(st.floats(2**-10, 1.0, width=32)), np.float32) for _ in "ab")
    per = data.draw(st.booleans())
    ws = np.array(data.draw(st.lists(st.floats(2**-10, 1.0, width=32), min_size=3, max_size=3))
                  if per else data.draw(st.floats(2**-10, 1.0, width=32)), np.float32)  # fmt: skip
    bias = _ints(data, np.int32, (3,)) // 1024
    feeds = {"x": x, "xs": xs, "zx": zx, "w": w, "ws": ws, "zw": zw, "ys": ys,
             "zy": _ints(data, np.uint8, ()), "B": bias}  # fmt: skip
    _same_as_reference("QLinearConv", feeds, opset=10, pads=pads)


_NARROW_OUT = {
    "int4": TensorProto.INT4, "uint4": TensorProto.UINT4, "int2": TensorProto.INT2,
    "uint2": TensorProto.UINT2, "float8_e4m3fn": TensorProto.FLOAT8E4M3FN,
    "float8_e5m2": TensorProto.FLOAT8E5M2, "float4_e2m1fn": TensorProto.FLOAT4E2M1,
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(_NARROW_OUT))
@pytest.mark.parametrize("saturate", [1, 0])
@given(data=st.data())
def test_quantize_to_sub_byte_and_float8_outputs_is_onnx_reference(name, saturate, data) -> None:
    """QuantizeLinear to i4/u4/i2/u2 (rint, the zero point added, clipped to the range) and to
    the float8 and float4 formats (x / scale rounded once, `saturate` for float8; float4 adds
    its zero point first, as the reference does), bit for bit against ONNX's reference
    evaluator on values at ties, beyond the formats' range, and NaN/inf; then DequantizeLinear
    of the sub-byte result back, also bit for bit."""
    import ml_dtypes

    dt = np.dtype(getattr(ml_dtypes, name))
    ONNX.setdefault(dt.type, _NARROW_OUT[name])
    x = _quant_values(data, (3, 4), 0.2)
    x[0, :3] = [np.nan, np.inf, -1e30] if name.startswith("float") else x[0, :3]
    scale = np.array(data.draw(st.sampled_from([1.0, 0.5, 2.0, 0.01, 3.7])), np.float32)
    if name.startswith(("int", "uint")):
        info = ml_dtypes.iinfo(dt)
        zp = np.array(data.draw(st.integers(int(info.min), int(info.max))), dt)
    else:
        zp = np.zeros((), dt)
    attrs = {"saturate": saturate} if name.startswith("float8") else {}
    (y,) = _same_as_reference("QuantizeLinear", {"x": x, "s": scale, "z": zp}, **attrs)
    if name.startswith(("int", "uint")):
        _same_as_reference("DequantizeLinear", {"x": y, "s": scale, "z": zp})
