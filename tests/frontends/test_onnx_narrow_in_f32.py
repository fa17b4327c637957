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


def _softmax_model(shape: tuple[int, ...], axis: int) -> onnx.ModelProto:
    g = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"], axis=axis)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, list(shape))],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _sums_in_order(e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row sums of f16 `e` two other ways: in f32 in order, rounded once; and in f16, each
    step rounded (the IR's f16 reduce_sum, a fold from the first element)."""
    s32 = np.zeros(e.shape[0], np.float32)
    for j in range(e.shape[1]):
        s32 = s32 + e[:, j].astype(np.float32)
    s16 = e[:, 0].copy()
    for j in range(1, e.shape[1]):
        s16 = s16 + e[:, j]
    return s32.astype(np.float16), s16


@pytest.mark.parametrize("n", [1, 6, 8, 9, 40, 127, 128, 129, 300])
def test_accumulate_in_f32_is_numpys_f16_softmax_bit_for_bit(n: int) -> None:
    """accumulate_in_f32 on an f16 Softmax: numpy (ONNX's reference) sums each contiguous f16
    row in f32 in its pairwise order and rounds once; gdv's import under the mode gives ONNX's
    reference bits on rows drawn so that the order shows: one e = 1, one near 2^-11 and the
    rest near 2^-24, where summing in f16 step by step, or in f32 in plain order (n >= 8: numpy
    adds 8 interleaved partial sums pairwise), rounds differently. The test asserts such rows
    are among those compared, so a wrong order fails it."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(n)
    r = 3000
    x = rng.uniform(-17.3, -15.5, (r, n))
    x[np.arange(r), rng.integers(0, n, r)] = rng.uniform(-8, -7, r)
    x[np.arange(r), rng.integers(0, n, r)] = 0.0
    x = x.astype(np.float16)
    model = _softmax_model((r, n), -1)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    e = np.exp(x - x.max(-1, keepdims=True))
    in_order, f16_steps = _sums_in_order(e)
    truth = e.sum(-1)
    module, _ = import_model(model, accumulate_in_f32=True)
    (got,) = reference.run(module, {"x": x})
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)
    if n > 1:
        assert np.any(truth != f16_steps)  # the IR's f16 fold is another meaning
        module, _ = import_model(model)
        (default,) = reference.run(module, {"x": x})
        assert not reference.bit_equal(default, want)
    if n in (8, 9, 127, 128, 129, 300):
        assert np.any(truth != in_order)  # numpy's order, not the plain f32 fold


@settings(max_examples=25, deadline=None)
@given(
    shape=st.sampled_from([(3, 5), (2, 6, 1), (4, 17), (1, 33)]),
    data=st.data(),
)
def test_accumulate_in_f32_softmax_on_drawn_values(shape, data) -> None:
    """The same on hypothesis-drawn f16 values (infinities and NaN included), along the last
    axis or along one with only 1s after it (numpy's run is contiguous there too)."""
    from onnx.reference import ReferenceEvaluator

    x = data.draw(hnp.arrays(np.float16, shape, elements=st.floats(width=16)))
    axis = 1
    model = _softmax_model(shape, axis)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    module, _ = import_model(model, accumulate_in_f32=True)
    (got,) = reference.run(module, {"x": x})
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


def test_accumulate_in_f32_leaves_other_softmaxes_to_the_ir() -> None:
    """bf16 (ml_dtypes rounds each step of a bf16 sum, as the IR does), an f16 softmax along an
    axis numpy reduces step by step in f16 (not a contiguous run), and f32 import as IR
    `softmax` ops under the mode; on the f16 one that is ONNX's reference's bits too, on rows
    where summing in f32 would round differently."""
    from onnx.reference import ReferenceEvaluator

    for dt, shape, axis in [
        (TensorProto.BFLOAT16, (3, 5), 1),
        (TensorProto.FLOAT16, (6, 400), 0),
        (TensorProto.FLOAT, (3, 5), 1),
    ]:
        g = helper.make_graph(
            [helper.make_node("Softmax", ["x"], ["y"], axis=axis)], "g",
            [helper.make_tensor_value_info("x", dt, list(shape))],
            [helper.make_tensor_value_info("y", dt, list(shape))],
        )  # fmt: skip
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        module, _ = import_model(model, accumulate_in_f32=True)
        kinds = [op.name for op in module.entry.ops]
        assert kinds.count("softmax") == 1 and "convert" not in kinds, kinds
    rng = np.random.default_rng(1)
    x = rng.uniform(-8, 0, shape)
    x[0] = 0.0
    x = x.astype(np.float16)
    want = ReferenceEvaluator(model_f16 := _softmax_model(shape, 0)).run(None, {"x": x})[0]
    (got,) = reference.run(import_model(model_f16, accumulate_in_f32=True)[0], {"x": x})
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)
    e = np.exp(x - x.max(0, keepdims=True))
    in_f32, _ = _sums_in_order(np.ascontiguousarray(e.T))
    assert np.any(in_f32 != e.sum(0))  # numpy did not sum this axis in f32


def _attention_causal_fp16_case() -> tuple[onnx.ModelProto, onnx.ModelProto, list, np.ndarray]:
    """ONNX's node tests `test_attention_4d_causal_fp16` and `..._expanded` as onnx's generator
    writes them (`export_attention_causal_fp16`, run after `np.random.seed(0)`): the Attention
    node, its function body as a graph, the inputs and the expected output."""
    from onnx.backend.test.case.node import function_testcase_helper
    from onnx.reference.ops.op_attention import _compute_attention

    rs = np.random.RandomState(0)  # the stream np.random.seed(0) starts
    q, k, v = (rs.rand(*s).astype(np.float16) for s in [(2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 8)])
    y = _compute_attention(q, k, v, is_causal=1)[0]
    node = helper.make_node("Attention", ["Q", "K", "V"], ["Y"], is_causal=1)
    ins = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT16, a.shape)
        for n, a in zip("QKV", (q, k, v), strict=True)
    ]
    out = [helper.make_tensor_value_info("Y", TensorProto.FLOAT16, y.shape)]
    opset = [helper.make_opsetid("", 23)]
    model = helper.make_model(helper.make_graph([node], "a", ins, out), opset_imports=opset)
    ((body, body_opset),), _ = function_testcase_helper(
        node, [i.type for i in ins], "test_attention_4d_causal_fp16", opset_imports=opset
    )
    expanded = helper.make_model(helper.make_graph(body, "e", ins, out), opset_imports=body_opset)
    return model, expanded, [q, k, v], y


def test_the_attention_causal_fp16_node_test_is_numpys_f16_sums() -> None:
    """Why `test_attention_4d_causal_fp16_expanded` was 2 f16 ulp off under every import:
    ONNX's expected data is numpy's evaluation of the function body in f16, and numpy sums f16
    in f32 twice there, rounding once: in both MatMuls (accumulate_in_f32 already followed
    that) and in the Softmax's row sum (`np.sum` of a contiguous f16 row). Recomputing the
    Softmax from its f16 input both ways: the sum in f32 gives the body's bits, the sum in
    f16 step by step (the IR's f16 `reduce_sum`) does not, and carried through the last
    MatMul it changes Y. Under accumulate_in_f32 (which now does both) gdv gives ONNX's bits
    on the node and on its expanded graph; the default import, every op rounded to f16 as
    IR_SPEC says, is its own meaning."""
    from onnx.reference import ReferenceEvaluator

    model, expanded, (q, k, v), y = _attention_causal_fp16_case()
    feeds = {"Q": q, "K": k, "V": v}
    assert reference.bit_equal(ReferenceEvaluator(expanded).run(None, feeds)[0], y)
    (sm,) = [n for n in expanded.graph.node if n.op_type == "Softmax"]
    logits, probs = ReferenceEvaluator(expanded).run([sm.input[0], sm.output[0]], feeds)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    rows = e.reshape(-1, e.shape[-1])  # rows of 6: numpy's f32 sum runs in order
    in_f32, f16_steps = _sums_in_order(rows)
    via_f32 = e / in_f32.reshape(*e.shape[:-1], 1)
    via_f16 = e / f16_steps.reshape(*e.shape[:-1], 1)
    assert reference.bit_equal(via_f32, probs)
    assert not reference.bit_equal(via_f16, probs)
    # carried through the last MatMul (numpy's, as the body's; no row is fully masked here)
    assert reference.bit_equal(np.matmul(via_f32, v), y)
    assert not reference.bit_equal(np.matmul(via_f16, v), y)
    for m in (model, expanded):
        (got,) = reference.run(import_model(m, accumulate_in_f32=True)[0], feeds)
        assert reference.bit_equal(got, y), reference.describe_difference(got, y)
        (default,) = reference.run(import_model(m)[0], feeds)
        assert not reference.bit_equal(default, y)


def _case_dir(path, model, ins: list, outs: list):
    """A node-test case in the runner's cache layout (model.onnx, tolerance, one data set)."""
    import json

    from onnx import numpy_helper

    from gdv.frontends.onnx_conformance import _write

    path.mkdir()
    (path / "model.onnx").write_bytes(model.SerializeToString())
    (path / "tolerance.json").write_text(json.dumps({"rtol": 1e-3, "atol": 1e-7}))
    sd = path / "test_data_set_0"
    sd.mkdir()
    for kind, arrays, infos in [
        ("input", ins, model.graph.input),
        ("output", outs, model.graph.output),
    ]:
        for j, (a, vi) in enumerate(zip(arrays, infos, strict=True)):
            _write(sd / f"{kind}_{j}.pb", a, vi.name, numpy_helper)
    return path


def test_the_runner_prefers_the_mode_that_is_bit_exact(tmp_path) -> None:
    """The node-test runner retries an f16 mismatch under each mode: on the causal f16
    Attention node narrow_in_f32 is within the tolerance (one ulp) but accumulate_in_f32 gives
    ONNX's bits, and the result says so; a pass within the tolerance only says it is not bit
    for bit."""
    from gdv.frontends.onnx_conformance import run_case

    model, expanded, ins, y = _attention_causal_fp16_case()
    for name, m in [("node", model), ("expanded", expanded)]:
        r = run_case(_case_dir(tmp_path / name, m, ins, [y]))
        assert (r["status"], r["mode"], r["bit_exact"]) == ("pass", "accumulate_in_f32", True), r
        assert "bit for bit" in r["detail"] and r["ulps_default"] == 2
    g = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in "ab"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )  # fmt: skip
    add = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    a, b = np.array([1, 2, 3], np.float32), np.array([0.5, 0.25, 4], np.float32)
    exact = run_case(_case_dir(tmp_path / "exact", add, [a, b], [a + b]))
    assert (exact["status"], exact["bit_exact"]) == ("pass", True), exact
    near = (a + b).copy()
    near[1] = np.nextafter(near[1], np.float32(9))
    close = run_case(_case_dir(tmp_path / "close", add, [a, b], [near]))
    assert (close["status"], close["bit_exact"]) == ("pass", False), close
