"""`narrow_in_f32` (issue 19, item 5): f16 and bf16 computed in f32 and rounded once, the
opt-in import that follows ONNX's reference where it computes narrow types in f32; the default
import rounds every op to its ONNX type (IR_SPEC). Each mode is compared with its own meaning
computed independently in numpy on hypothesis-drawn values."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from gdv.backends import reference  # noqa: E402
from gdv.frontends.onnx import import_model  # noqa: E402

CODES = {
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(ml_dtypes.bfloat16): TensorProto.BFLOAT16,
}


def _model(np_dtype) -> onnx.ModelProto:
    """y = Cast_to_narrow(x * w + x) * x, narrow in and out, w an initializer."""
    code = CODES[np.dtype(np_dtype)]
    w = helper.make_tensor(
        "w", code, [4], np.array([1.5, -0.3, 3.1, 0.7], np_dtype).tobytes(), raw=True
    )
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["a"]),
        helper.make_node("Add", ["a", "x"], ["b"]),
        helper.make_node("Cast", ["b"], ["c"], to=code),
        helper.make_node("Mul", ["c", "x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", code, [3, 4])],
        [helper.make_tensor_value_info("y", code, [3, 4])],
        [w],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _run(model, x, narrow: bool) -> np.ndarray:
    module, weights = import_model(model, narrow_in_f32=narrow)
    (out,) = reference.run(module, {**weights, "x": x})
    return out, module


@settings(max_examples=30, deadline=None)
@given(
    dt=st.sampled_from([np.float16, ml_dtypes.bfloat16]),
    data=st.data(),
)
def test_each_mode_is_its_meaning(dt, data) -> None:
    vals = data.draw(
        hnp.arrays(
            np.float32, (3, 4), elements=st.floats(-300, 300, width=32, allow_subnormal=True)
        )
    )
    x = vals.astype(dt)
    w = np.array([1.5, -0.3, 3.1, 0.7], dt)
    model = _model(dt)
    narrow, module_n = _run(model, x, False)
    wide, module_w = _run(model, x, True)
    # default: every op rounds to the narrow type
    with np.errstate(all="ignore"):
        a = (x.astype(np.float32) * w.astype(np.float32)).astype(dt)
        b = (a.astype(np.float32) + x.astype(np.float32)).astype(dt)
        want_n = (b.astype(np.float32) * x.astype(np.float32)).astype(dt)
        # narrow_in_f32: f32 throughout, the Cast rounds to the narrow type, one rounding at the end
        a32 = x.astype(np.float32) * w.astype(np.float32)
        b32 = a32 + x.astype(np.float32)
        c32 = b32.astype(dt).astype(np.float32)
        want_w = (c32 * x.astype(np.float32)).astype(dt)
    assert reference.bit_equal(narrow, want_n), reference.describe_difference(narrow, want_n)
    assert reference.bit_equal(wide, want_w), reference.describe_difference(wide, want_w)
    assert narrow.dtype == wide.dtype == np.dtype(dt)
    # the modes are different programs: f32 arithmetic only in the wide one
    kinds_n = {op.type.dtype.value for op in module_n.entry.ops if op.name == "mul"}
    kinds_w = {op.type.dtype.value for op in module_w.entry.ops if op.name == "mul"}
    assert kinds_n == {np.dtype(dt).name.replace("float16", "f16").replace("bfloat16", "bf16")}
    assert kinds_w == {"f32"}


def test_the_modes_differ_where_double_rounding_shows() -> None:
    """A value where rounding the product to f16 before the add changes the sum: the default
    import and narrow_in_f32 give different f16 results, each its own meaning (above)."""
    model = _model(np.float16)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 4)) * 50).astype(np.float16)
    narrow, _ = _run(model, x, False)
    wide, _ = _run(model, x, True)
    assert not reference.bit_equal(narrow, wide)


def test_the_cli_flag_and_its_refusal_for_torch_programs(tmp_path, capsys) -> None:
    from gdv.cli import main

    path = tmp_path / "m.onnx"
    onnx.save(_model(np.float16), str(path))
    out = tmp_path / "m.gdv"
    assert main(["import", str(path), "-o", str(out), "--narrow-in-f32"]) == 0
    text = out.read_text()
    assert "f32[3,4]" in text and "computed in f32" in text
    assert main(["import", str(tmp_path / "p.pt2"), "-o", str(out), "--narrow-in-f32"]) == 3
    assert "--accumulate-in-f32 apply to ONNX models" in capsys.readouterr().err


@settings(max_examples=25, deadline=None)
@given(
    dt=st.sampled_from([np.float16, ml_dtypes.bfloat16]),
    k=st.integers(1, 40),
    data=st.data(),
)
def test_accumulate_in_f32_is_numpys_narrow_matmul_bit_for_bit(dt, k, data) -> None:
    """accumulate_in_f32: an f16/bf16 MatMul summed in f32 and rounded once, which is what
    ONNX's reference evaluator computes (numpy's narrow matmul): bit for bit against it, while
    the default import (every step rounded to the narrow type) is its own meaning."""
    from onnx.reference import ReferenceEvaluator

    code = CODES[np.dtype(dt)]
    g = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("a", code, [3, k]),
         helper.make_tensor_value_info("b", code, [k, 5])],
        [helper.make_tensor_value_info("y", code, [3, 5])],
    )  # fmt: skip
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    floats = st.floats(-8, 8, width=32)
    a = np.array(data.draw(st.lists(floats, min_size=3 * k, max_size=3 * k)), np.float32)
    b = np.array(data.draw(st.lists(floats, min_size=5 * k, max_size=5 * k)), np.float32)
    a, b = a.reshape(3, k).astype(dt), b.reshape(k, 5).astype(dt)
    want = ReferenceEvaluator(model).run(None, {"a": a, "b": b})[0]
    module, _ = import_model(model, accumulate_in_f32=True)
    (got,) = reference.run(module, {"a": a, "b": b})
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)
    # the meaning, independently: exact f32 products summed in order from +0.0, one rounding
    acc = np.zeros((3, 5), np.float32)
    for j in range(k):
        acc = acc + a[:, j : j + 1].astype(np.float32) * b[j : j + 1, :].astype(np.float32)
    assert reference.bit_equal(got, acc.astype(dt))
