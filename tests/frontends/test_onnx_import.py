"""The ONNX importer: ops against onnxruntime, refusals, hostile names, `gdv import` + `gdv run`
end to end on small real models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import gdv
from gdv.api import parse
from gdv.backends import reference
from gdv.cli import main
from gdv.frontends.onnx import Backend, Unsupported, import_model, mangle, unmangle
from gdv.ir.diagnostics import IRError
from gdv.ir.printer import print_module

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def model(
    nodes: list[Any],
    inputs: list[tuple[str, int, list[int]]],
    outputs: list[tuple[str, int, list[int] | None]],
    inits: dict[str, np.ndarray] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def ort_run(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def gdv_run(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    module, weights = import_model(m)
    inputs = dict(weights)
    for p in module.entry.params:
        if p.name not in inputs:
            inputs[p.name] = feeds[p.attrs.get("onnx_name", p.name)]
    return reference.run(module, inputs)


RNG = np.random.default_rng(0)


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# (id, nodes, inputs {name: array}, initializers, opset)
CASES: list[tuple[str, list[Any], dict[str, np.ndarray], dict[str, np.ndarray], int]] = [
    ("add_bcast", [helper.make_node("Add", ["a", "b"], ["y"])],
     {"a": randn(2, 3, 4), "b": randn(4)}, {}, 17),
    ("div_bcast", [helper.make_node("Div", ["a", "b"], ["y"])],
     {"a": randn(2, 1, 4), "b": randn(3, 1) + 3}, {}, 17),
    ("matmul_batch_bcast", [helper.make_node("MatMul", ["a", "b"], ["y"])],
     {"a": randn(2, 1, 3, 4), "b": randn(5, 4, 6)}, {}, 17),
    ("matmul_vec", [helper.make_node("MatMul", ["a", "b"], ["y"])],
     {"a": randn(4), "b": randn(2, 4, 3)}, {}, 17),
    ("gemm_trans", [helper.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=0.5, beta=2.0,
                                     transA=1, transB=1)],
     {"a": randn(4, 3), "b": randn(5, 4), "c": randn(5)}, {}, 17),
    ("softmax13", [helper.make_node("Softmax", ["x"], ["y"], axis=1)],
     {"x": randn(2, 3, 4)}, {}, 17),
    ("softmax11_flatten", [helper.make_node("Softmax", ["x"], ["y"], axis=1)],
     {"x": randn(2, 3, 4)}, {}, 11),
    ("logsoftmax", [helper.make_node("LogSoftmax", ["x"], ["y"], axis=-1)],
     {"x": randn(3, 5)}, {}, 17),
    ("layernorm", [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-2)],
     {"x": randn(2, 3, 4)}, {"s": randn(3, 4), "b": randn(4)}, 17),
    ("reducemean_keep", [helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=1)],
     {"x": randn(2, 3, 4)}, {}, 17),
    ("reducesum_input_axes", [helper.make_node("ReduceSum", ["x", "ax"], ["y"], keepdims=0)],
     {"x": randn(2, 3, 4)}, {"ax": np.array([0, -1], dtype=np.int64)}, 17),
    ("reducemax", [helper.make_node("ReduceMax", ["x"], ["y"], axes=[2], keepdims=0)],
     {"x": randn(2, 3, 4)}, {}, 17),
    ("conv_group_pad_stride", [helper.make_node("Conv", ["x", "w", "b"], ["y"], group=2,
                                                pads=[1, 0, 2, 1], strides=[2, 1],
                                                dilations=[1, 2])],
     {"x": randn(1, 4, 7, 8)}, {"w": randn(6, 2, 3, 2), "b": randn(6)}, 17),
    ("conv_same_upper", [helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER",
                                          strides=[2, 2])],
     {"x": randn(1, 2, 7, 6)}, {"w": randn(3, 2, 3, 3)}, 17),
    ("conv1d", [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1])],
     {"x": randn(2, 3, 9)}, {"w": randn(4, 3, 3)}, 17),
    ("maxpool_pad_ceil", [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3],
                                           strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)],
     {"x": randn(1, 2, 8, 7)}, {}, 17),
    ("avgpool_exclude_pad", [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 2],
                                              pads=[1, 1, 1, 0])],
     {"x": randn(1, 2, 5, 6)}, {}, 17),
    ("avgpool_include_pad", [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3],
                                              strides=[2, 2], pads=[1, 1, 1, 1],
                                              count_include_pad=1)],
     {"x": randn(1, 1, 6, 6)}, {}, 17),
    ("global_avg_pool", [helper.make_node("GlobalAveragePool", ["x"], ["y"])],
     {"x": randn(2, 3, 4, 5)}, {}, 17),
    ("batchnorm", [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])],
     {"x": randn(2, 3, 4, 4)},
     {"s": randn(3), "b": randn(3), "m": randn(3), "v": np.abs(randn(3)) + 0.5}, 15),
    ("gather_negative", [helper.make_node("Gather", ["x", "i"], ["y"], axis=1)],
     {"x": randn(3, 5, 2), "i": np.array([[-1, 0], [4, -5]], dtype=np.int64)}, {}, 17),
    ("slice_neg_step", [helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])],
     {"x": randn(4, 6)},
     {"s": np.array([-1, 1], dtype=np.int64), "e": np.array([-100, 6], dtype=np.int64),
      "a": np.array([1, 0], dtype=np.int64), "st": np.array([-2, 2], dtype=np.int64)}, 17),
    ("pad_reflect", [helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect")],
     {"x": randn(3, 4)}, {"p": np.array([1, 2, 2, 3], dtype=np.int64)}, 17),
    ("pad_constant_crop", [helper.make_node("Pad", ["x", "p", "c"], ["y"])],
     {"x": randn(3, 4)},
     {"p": np.array([1, -1, 0, 2], dtype=np.int64), "c": np.array(2.5, dtype=np.float32)}, 17),
    ("shape_subgraph_reshape", [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ], {"x": randn(2, 3, 4)},
     {"zero": np.array(0, dtype=np.int64), "zero1": np.array([0], dtype=np.int64),
      "minus1": np.array([-1], dtype=np.int64)}, 17),
    ("where_cmp_clip", [
        helper.make_node("Less", ["a", "b"], ["c"]),
        helper.make_node("Where", ["c", "a", "b"], ["w"]),
        helper.make_node("Clip", ["w", "lo", "hi"], ["y"]),
    ], {"a": randn(3, 4), "b": randn(4)},
     {"lo": np.array(-0.5, dtype=np.float32), "hi": np.array(0.5, dtype=np.float32)}, 17),
    ("einsum_bmm", [helper.make_node("Einsum", ["a", "b"], ["y"], equation="bij,bjk->bik")],
     {"a": randn(2, 3, 4), "b": randn(2, 4, 5)}, {}, 17),
    ("einsum_transpose_sum", [helper.make_node("Einsum", ["a", "b"], ["y"],
                                               equation="ij,kjl->lk")],
     {"a": randn(3, 4), "b": randn(2, 4, 5)}, {}, 17),
    ("elementwise_chain", [
        helper.make_node("Sigmoid", ["x"], ["a"]),
        helper.make_node("Tanh", ["a"], ["b"]),
        helper.make_node("Erf", ["b"], ["c"]),
        helper.make_node("Ceil", ["x"], ["d"]),
        helper.make_node("Pow", ["c", "d"], ["e"]),
        helper.make_node("LeakyRelu", ["x"], ["f"], alpha=0.2),
        helper.make_node("Max", ["e", "f", "x"], ["g"]),
        helper.make_node("Mean", ["g", "x"], ["y"]),
    ], {"x": randn(4, 5)}, {}, 17),
    ("expand_tile_transpose", [
        helper.make_node("Expand", ["x", "shape"], ["a"]),
        helper.make_node("Tile", ["a", "reps"], ["b"]),
        helper.make_node("Transpose", ["b"], ["y"], perm=[2, 0, 1]),
    ], {"x": randn(3, 1)},
     {"shape": np.array([2, 3, 4], dtype=np.int64), "reps": np.array([1, 2, 1], dtype=np.int64)},
     17),
    ("gather_elements", [helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)],
     {"x": randn(3, 4, 2), "i": np.array([[[0, 3]], [[-1, 2]], [[1, -4]]], dtype=np.int64)},
     {}, 17),
    ("pad_runtime_value", [helper.make_node("Pad", ["x", "p", "c"], ["y"])],
     {"x": randn(2, 3), "c": np.array(-7.0, dtype=np.float32)},
     {"p": np.array([0, 2, 1, 1], dtype=np.int64)}, 17),
    ("avgpool_same_lower", [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 2],
                                             strides=[2, 1], auto_pad="SAME_LOWER")],
     {"x": randn(1, 2, 7, 5)}, {}, 17),
    ("onehot_axis", [helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=1)],
     {"i": np.array([[0, -1, 3], [5, 2, -4]], dtype=np.int64)},
     {"d": np.array(4, dtype=np.int64), "v": np.array([-1.0, 2.5], dtype=np.float32)}, 17),
    ("lpnorm_zero_rows", [helper.make_node("LpNormalization", ["x"], ["y"], axis=0, p=2)],
     {"x": np.concatenate([randn(3, 2), np.zeros((3, 1), np.float32)], axis=1)}, {}, 17),
    ("resize_nearest", [helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest",
                                         nearest_mode="round_prefer_ceil")],
     {"x": randn(1, 2, 3, 4)}, {"sc": np.array([1, 1, 2.5, 0.75], dtype=np.float32)}, 17),
    ("convtranspose_group_stride_pads", [
        helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], group=2, strides=[2, 3],
                         pads=[1, 0, 0, 2], output_padding=[1, 1], dilations=[1, 2])],
     {"x": randn(2, 4, 3, 4)}, {"w": randn(4, 3, 3, 2), "b": randn(6)}, 17),
    ("convtranspose_output_shape", [
        helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2],
                         output_shape=[8, 9])],
     {"x": randn(1, 2, 3, 4)}, {"w": randn(2, 3, 3, 3)}, 17),
    ("range_float_plus_x", [helper.make_node("Range", ["s", "l", "d"], ["r"]),
                            helper.make_node("Add", ["r", "x"], ["y"])],
     {"x": randn(6)}, {"s": np.array(0.1, np.float32), "l": np.array(1.9, np.float32),
                       "d": np.array(0.3, np.float32)}, 17),
    ("lppool_p3", [helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 3], p=3,
                                    strides=[1, 2], pads=[1, 0, 0, 1])],
     {"x": randn(1, 2, 5, 6)}, {}, 18),
    ("gathernd_batch", [helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=1)],
     {"x": randn(2, 3, 4, 5), "i": np.array([[[0, -1], [2, 3]], [[1, 1], [-3, 0]]], np.int64)},
     {}, 17),
    ("instancenorm", [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"],
                                       epsilon=1e-3)],
     {"x": randn(2, 3, 4, 5)}, {"s": randn(3), "b": randn(3)}, 17),
    ("einsum_implicit", [helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,jk")],
     {"a": randn(3, 4), "b": randn(4, 2)}, {}, 17),
    ("scatter_elements", [helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1)],
     {"x": randn(3, 5), "u": randn(3, 2)},
     {"i": np.array([[0, -1], [2, 3], [4, 0]], dtype=np.int64)}, 17),
    ("scatter_nd", [helper.make_node("ScatterND", ["x", "i", "u"], ["y"])],
     {"x": randn(4, 3, 2), "u": randn(2, 3, 2)}, {"i": np.array([[3], [-4]], dtype=np.int64)},
     17),
    ("gelu_tanh", [helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")],
     {"x": randn(3, 4)}, {}, 20),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_op_matches_onnxruntime(case: Any) -> None:
    _, nodes, feeds, inits, opset = case
    inputs = [
        (k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)) for k, v in feeds.items()
    ]
    m = model(nodes, inputs, [("y", F, None)], inits, opset)
    (want,) = ort_run(m, feeds)
    (got,) = gdv_run(m, feeds)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_exact_ops_are_bit_exact_with_onnxruntime() -> None:
    """Ops with no rounding choice left (layout, max, relu, select, integer shape maths) agree
    bit for bit."""
    x = randn(2, 3, 4)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0, 2]),
        helper.make_node("Flatten", ["t"], ["f"], axis=2),
        helper.make_node("Neg", ["f"], ["n"]),
        helper.make_node("Abs", ["n"], ["a"]),
        helper.make_node("Floor", ["a"], ["y"]),
    ]
    m = model(nodes, [("x", F, [2, 3, 4])], [("y", F, None)])
    assert ort_run(m, {"x": x})[0].tobytes() == gdv_run(m, {"x": x})[0].tobytes()


@pytest.mark.parametrize(
    "op, attrs, why",
    [
        ("Bernoulli", {}, "random number generation has no IR op"),
        ("NonZero", {}, "its output shape depends on the data"),
    ],
)
def test_unsupported_ops_are_refused_by_name(op: str, attrs: dict, why: str) -> None:
    ins = ["x", "k"] if op in ("CumSum", "TopK") else ["x"]
    node = helper.make_node(op, ins, ["y"], name="my node", **attrs)
    m = model([node], [("x", F, [3, 4])], [("y", I64, None)], {"k": np.array([1], np.int64)})
    with pytest.raises(Unsupported) as e:
        import_model(m)
    assert e.value.message == f"unsupported ONNX op {op} (opset 17) at node my node: {why}"
    assert isinstance(e.value, IRError)


def test_unsupported_attribute_combinations_are_refused() -> None:
    cases = [
        (helper.make_node("MaxPool", ["a"], ["y", "i"], kernel_shape=[2, 2, 2]), F, "Indices"),
        (helper.make_node("Conv", ["a", "a"], ["y"]), F, "3-D convolution"),
        (helper.make_node("Pad", ["a", "p"], ["y"], mode="bogus"), F, "mode 'bogus'"),
    ]
    for node, dtype, fragment in cases:
        shape = [1, 1, 2, 2, 2] if node.op_type in ("Conv", "MaxPool") else [1, 1, 4, 4]
        m = model(
            [node], [("a", dtype, shape)], [("y", dtype, None)],
            {"p": np.zeros(8, dtype=np.int64)},
        )  # fmt: skip
        with pytest.raises(Unsupported, match=fragment) as e:
            import_model(m)
        assert e.value.message.startswith(f"unsupported ONNX op {node.op_type} (opset 17) at node")


def test_symbolic_dims_need_a_shape() -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, ["N", 3])], [("y", F, None)])
    with pytest.raises(Unsupported, match="symbolic dim 'N'"):
        import_model(m)
    module, _ = import_model(m, input_shapes={"x": [5, 3]})
    assert str(module.entry.params[0].type) == "f32[5,3]"


HOSTILE = ["input.1", "a/b:0", "x", "x.78", "ñ", "", "%bad name", "a" * 200, "a" * 199 + "b"]


def test_mangled_names_are_valid_reversible_and_distinct() -> None:
    import re

    mangled = [mangle(n) for n in HOSTILE]
    assert len(set(mangled)) == len(HOSTILE)
    for name, m in zip(HOSTILE, mangled, strict=True):
        assert re.fullmatch(r"[A-Za-z0-9_.]{1,128}", m), m
        if ".h" not in m:
            assert unmangle(m) == name


def test_hostile_input_names_survive_import_print_parse_and_run() -> None:
    names = [n for n in HOSTILE if n]
    nodes = [helper.make_node("Sum", names, ["out/0"])]
    m = model(nodes, [(n, F, [2]) for n in names], [("out/0", F, None)], {"w.1": randn(2)})
    m.graph.node.append(helper.make_node("Add", ["out/0", "w.1"], ["y"]))
    m.graph.output[0].name = "y"
    module, weights = import_model(m)
    again = parse(print_module(module))
    assert again == module
    params = module.entry.params
    assert [p.attrs.get("onnx_name", p.name) for p in params] == [*names, "w.1"]
    assert list(weights) == ["w.2e1"]
    feeds = {n: randn(2) for n in names}
    want = sum(feeds.values()) + weights["w.2e1"]
    (got,) = gdv_run(m, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_backend_interface() -> None:
    assert Backend.supports_device("CPU") and not Backend.supports_device("CUDA")
    node = helper.make_node("Add", ["a", "b"], ["c"])
    a, b = randn(2, 3), randn(3)
    (c,) = Backend.run_node(node, [a, b])
    np.testing.assert_array_equal(c, a + b)
    m = model([node], [("a", F, [2, 3]), ("b", F, [3])], [("c", F, None)])
    rep = Backend.prepare(m, "CPU")
    np.testing.assert_array_equal(rep.run([a, b])[0], a + b)
    np.testing.assert_array_equal(rep.run({"a": a, "b": b})[0], a + b)


def _mlp() -> onnx.ModelProto:
    inits = {"w1": randn(8, 16), "b1": randn(16), "w2": randn(16, 4), "b2": randn(4)}
    nodes = [
        helper.make_node("Gemm", ["input.1", "w1", "b1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["m"]),
        helper.make_node("Add", ["m", "b2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    return model(nodes, [("input.1", F, [3, 8])], [("probs", F, [3, 4])], inits)


def _conv_block() -> onnx.ModelProto:
    inits = {
        "w": randn(4, 3, 3, 3), "b": randn(4), "s": randn(4), "bb": randn(4),
        "m": randn(4), "v": np.abs(randn(4)) + 0.5, "fc": randn(4, 5),
    }  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("MatMul", ["f", "fc"], ["y"]),
    ]
    return model(nodes, [("x", F, [2, 3, 8, 8])], [("y", F, [2, 5])], inits)


@pytest.mark.parametrize("build", [_mlp, _conv_block], ids=["mlp", "conv_block"])
def test_gdv_import_then_gdv_run_matches_onnxruntime(
    build: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = build()
    path = tmp_path / "model.onnx"
    onnx.save(m, str(path))
    out_ir, weights = tmp_path / "model.gdv", tmp_path / "weights.npz"
    assert main(["import", str(path), "-o", str(out_ir), "--weights", str(weights)]) == 0
    name = m.graph.input[0].name
    x = randn(*[d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim])
    np.savez(tmp_path / "x.npz", **{mangle(name): x})
    outs = tmp_path / "out.npz"
    argv = ["run", str(out_ir), "--inputs", str(weights), "--inputs", str(tmp_path / "x.npz")]
    assert main([*argv, "--output", str(outs)]) == 0
    got = np.load(outs)["out0"]
    (want,) = ort_run(m, {name: x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    capsys.readouterr()
    # The Python entry point gives the same module and weights.
    module, w = gdv.import_onnx(str(path))
    text = out_ir.read_text()
    # The file is the canonical text with each op line ending in `// from onnx:NODE (Type)`.
    assert "".join(line.split("  // from ")[0] + "\n" for line in text.splitlines()) == (
        print_module(module)
    )
    from gdv.frontends.provenance import origins

    named = set(origins(text).values())
    assert named and all(o.startswith("onnx:") for o in named)
    labels = {n.name or f"#{i} ({', '.join(n.output)})" for i, n in enumerate(m.graph.node)}
    assert {o[5:].rsplit(" (", 1)[0] for o in named} <= labels
    assert sorted(w) == sorted(np.load(weights).files)


def test_gdv_import_refusal_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = model([helper.make_node("NonZero", ["x"], ["y"], name="am")], [("x", F, [3])],
              [("y", I64, None)])  # fmt: skip
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    code = main(["import", str(path), "-o", str(tmp_path / "m.gdv")])
    err = capsys.readouterr().err
    assert code == 3
    assert "error: unsupported ONNX op NonZero (opset 17) at node am:" in err
    assert "Traceback" not in err
    assert not (tmp_path / "m.gdv").exists()
    assert main(["import", str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "o.gdv")]) == 3
    (tmp_path / "junk.onnx").write_bytes(b"\x00\xffnot a model")
    assert main(["import", str(tmp_path / "junk.onnx"), "-o", str(tmp_path / "o.gdv")]) == 3


def test_malformed_nodes_are_input_errors() -> None:
    m = model([helper.make_node("MaxPool", ["x"], ["y"])], [("x", F, [1, 1, 4, 4])],
              [("y", F, None)])  # fmt: skip
    with pytest.raises(IRError, match="lacks the attribute 'kernel_shape'"):
        import_model(m)


def test_gemm_with_beta_zero_ignores_c() -> None:
    a, b = randn(2, 3), randn(3, 4)
    c = np.full((4,), np.inf, dtype=np.float32)
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], beta=0.0)
    m = model([node], [("a", F, [2, 3]), ("b", F, [3, 4]), ("c", F, [4])], [("y", F, None)])
    (got,) = gdv_run(m, {"a": a, "b": b, "c": c})
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, a @ b, rtol=1e-5)


@pytest.mark.parametrize("op, fmod", [("Div", None), ("Mod", 0), ("Mod", 1)])
def test_integer_division_and_remainder_exhaustive_i8(op: str, fmod: int | None) -> None:
    """Every i8 pair (divisor not 0; -128 / -1 is checked apart, where it wraps) against numpy's
    truncating quotient and its remainders (np.mod: the sign of b; np.fmod: the sign of a)."""
    a, b = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij")
    keep = (b != 0) & ~((a == -128) & (b == -1))
    a, b = a[keep].astype(np.int8), b[keep].astype(np.int8)
    attrs = {} if fmod is None else {"fmod": fmod}
    node = helper.make_node(op, ["a", "b"], ["y"], **attrs)
    i8 = TensorProto.INT8
    m = model([node], [("a", i8, [a.size]), ("b", i8, [b.size])], [("y", i8, None)])
    (got,) = gdv_run(m, {"a": a, "b": b})
    wa, wb = a.astype(np.int64), b.astype(np.int64)
    if op == "Div":
        want = np.trunc(wa / wb).astype(np.int64)
    else:
        want = np.fmod(wa, wb) if fmod else np.mod(wa, wb)
    np.testing.assert_array_equal(got.astype(np.int64), want)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_float_mod_is_numpy_s_bit_for_bit(dtype: type, fmod: int) -> None:
    """Float Mod on every pair of special and ordinary values: fmod = 1 is np.fmod (exact),
    fmod = 0 is np.mod (the divisor's sign; r + b rounded once, zeros signed like b)."""
    vals = [0.0, -0.0, 1.0, -1.0, 5.5, -5.5, 2.0, -0.75, 1e-30, -3e-8, 1e4, np.inf, -np.inf]
    vals += [np.nan, 7.0, -7.0, 0.1]
    a, b = (x.ravel().astype(dtype) for x in np.meshgrid(vals, vals))
    a = np.concatenate([a, np.array([-1e-7, 1e-7, -65504.0], dtype=dtype)])
    b = np.concatenate([b, np.array([1.0, -1.0, 3.0], dtype=dtype)])
    t = {np.float32: F, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16}[dtype]
    node = helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)
    m = model([node], [("a", t, [a.size]), ("b", t, [b.size])], [("y", t, None)])
    (got,) = gdv_run(m, {"a": a, "b": b})
    with np.errstate(all="ignore"):
        want = (np.fmod if fmod else np.mod)(a, b)
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


def test_integer_division_i32_extremes() -> None:
    big = np.iinfo(np.int32)
    a = np.array([big.max, big.min, big.max - 1, -7, 7, big.min + 1, 12345678], dtype=np.int32)
    b = np.array([1, 2, big.max, 2, -2, big.max, -3], dtype=np.int32)
    i32 = TensorProto.INT32
    node = helper.make_node("Div", ["a", "b"], ["y"])
    m = model([node], [("a", i32, [7]), ("b", i32, [7])], [("y", i32, None)])
    (got,) = gdv_run(m, {"a": a, "b": b})
    want = np.trunc(a.astype(np.float64) / b.astype(np.float64)).astype(np.int32)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, ort_run(m, {"a": a, "b": b})[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_round_is_half_to_even_bit_exact(dtype: type) -> None:
    halves = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 7.5, -7.5, -(2.0**23) - 0.5]
    edges = [-0.4, -0.0, 0.0, 0.49999997, 2.0**23 + 1, 2.0**52 + 1, 1e30, 1e-30]
    special = halves + edges + [np.inf, -np.inf, np.nan]
    ties = np.round(RNG.uniform(-40, 40, 500)) + 0.5
    with np.errstate(over="ignore"):  # 1e30 is inf in f16, as intended
        x = np.concatenate([np.array(special), RNG.uniform(-40, 40, 2000), ties]).astype(dtype)
    code = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    m = model([helper.make_node("Round", ["x"], ["y"])], [("x", code, [x.size])],
              [("y", code, None)])  # fmt: skip
    (got,) = gdv_run(m, {"x": x})
    want = np.round(x)
    same = (got.view(np.uint8) == want.view(np.uint8)).reshape(x.size, -1).all(axis=1)
    assert np.all(same | (np.isnan(got) & np.isnan(want))), x[~same]


def test_isnan_isinf_reduceprod() -> None:
    x = np.array([[np.nan, np.inf, -np.inf, 1.5], [0.0, -2.0, 3.0, 0.5]], dtype=np.float32)
    nodes = [
        helper.make_node("IsNaN", ["x"], ["n"]),
        helper.make_node("IsInf", ["x"], ["pi"], detect_negative=0),
        helper.make_node("ReduceProd", ["x"], ["p"], axes=[1], keepdims=0),
    ]
    B = TensorProto.BOOL
    m = model(nodes, [("x", F, [2, 4])], [("n", B, None), ("pi", B, None), ("p", F, None)])
    got = gdv_run(m, {"x": x})
    for g, w in zip(got, ort_run(m, {"x": x}), strict=True):
        np.testing.assert_array_equal(g, w)


def test_undefined_value_is_an_input_error() -> None:
    m = model([helper.make_node("Relu", ["nowhere"], ["y"], name="r")], [("x", F, [2])],
              [("y", F, None)])  # fmt: skip
    with pytest.raises(IRError, match="'nowhere' is used at node r but never defined") as e:
        import_model(m)
    assert not isinstance(e.value, Unsupported)


# --- the integer dtypes of gdv 0.6 (issue 19) ----------------------------------------------

ONNX_INT = {
    np.uint8: TensorProto.UINT8,
    np.int16: TensorProto.INT16,
    np.uint16: TensorProto.UINT16,
    np.uint32: TensorProto.UINT32,
    np.uint64: TensorProto.UINT64,
}


@pytest.mark.parametrize("op, fmod", [("Div", None), ("Mod", 0), ("Mod", 1)])
def test_integer_division_and_remainder_exhaustive_u8(op: str, fmod: int | None) -> None:
    """Every u8 pair, the zero divisor included: the quotient truncates, the remainder is
    a - b * (a / b) (both signs agree, so fmod 0 and 1 agree), and a / 0 is 0, as ONNX's
    reference computes it (ONNX leaves it undefined), where a remainder by 0 is a."""
    a, b = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    a, b = a.ravel().astype(np.uint8), b.ravel().astype(np.uint8)
    attrs = {} if fmod is None else {"fmod": fmod}
    node = helper.make_node(op, ["a", "b"], ["y"], **attrs)
    u8 = TensorProto.UINT8
    m = model([node], [("a", u8, [a.size]), ("b", u8, [b.size])], [("y", u8, None)], opset=17)
    (got,) = gdv_run(m, {"a": a, "b": b})
    wa, wb = a.astype(np.int64), b.astype(np.int64)
    q = np.where(wb == 0, 0, wa // np.maximum(wb, 1))
    want = q if op == "Div" else wa - wb * q
    np.testing.assert_array_equal(got.astype(np.int64), want)
    assert got.dtype == np.uint8
    ok = b != 0  # onnxruntime fails on a zero divisor
    n = int(ok.sum())
    m = model([node], [("a", u8, [n]), ("b", u8, [n])], [("y", u8, None)])
    np.testing.assert_array_equal(got[ok], ort_run(m, {"a": a[ok], "b": b[ok]})[0])


@pytest.mark.parametrize("dtype", [np.int16, np.uint16, np.uint32])
def test_integer_division_extremes_up_to_32_bits(dtype: type) -> None:
    info = np.iinfo(dtype)
    a = np.array([info.max, info.min, info.max - 1, 7, info.max, info.min + 1, 12345], dtype)
    b = np.array([1, 2, info.max, 2, 3, info.max, 7], dtype)
    code = ONNX_INT[dtype]
    for op in ("Div", "Mod"):
        node = helper.make_node(op, ["a", "b"], ["y"])
        m = model([node], [("a", code, [7]), ("b", code, [7])], [("y", code, None)])
        (got,) = gdv_run(m, {"a": a, "b": b})
        np.testing.assert_array_equal(got, ort_run(m, {"a": a, "b": b})[0])
        wa, wb = a.astype(np.int64), b.astype(np.int64)
        want = np.trunc(wa / wb) if op == "Div" else np.mod(wa, wb)
        np.testing.assert_array_equal(got.astype(np.int64), want.astype(np.int64))


@pytest.mark.parametrize("dtype", [np.uint64, np.int64])
def test_64_bit_division_is_exact(dtype: type) -> None:
    """i64 and u64 Div (refused before issue 19's integer div): quotients that no f64 route
    gets right, against exact Python integers and onnxruntime."""
    info = np.iinfo(dtype)
    a = np.array([info.max, info.max - 1, 2**53 + 1, 3 * (2**60) + 7, info.max // 3], dtype)
    b = np.array([3, 7, 1, 2**31 + 5, 1], dtype)
    if dtype is np.int64:
        a = np.concatenate([a, np.array([info.min, info.min + 1, -(2**53) - 1], dtype)])
        b = np.concatenate([b, np.array([3, -7, 2], dtype)])
    code = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node("Div", ["a", "b"], ["y"], name="q")
    m = model([node], [("a", code, [a.size]), ("b", code, [a.size])], [("y", code, None)])
    (got,) = gdv_run(m, {"a": a, "b": b})
    pairs = zip(a.tolist(), b.tolist(), strict=True)
    want = [abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1) for x, y in pairs]
    assert [int(v) for v in got] == want
    np.testing.assert_array_equal(got, ort_run(m, {"a": a, "b": b})[0])


@pytest.mark.parametrize("dtype", list(ONNX_INT))
def test_new_integer_dtypes_cast_and_arithmetic_match_onnxruntime(dtype: type) -> None:
    """Inputs, initializers and Cast of u8 i16 u16 u32 u64: add sub mul wrap, max and less
    compare unsigned, and Cast to and from floats and i64, all bit for bit as numpy computes
    them (and onnxruntime, where it implements the op for the dtype: not Max on 16 bits)."""
    info = np.iinfo(dtype)
    code = ONNX_INT[dtype]
    x = np.array([info.max, info.min, 1, 0, info.max // 2 + 1, 3], dtype)
    w = np.array([1, 1, info.max, info.max, 2, 5], dtype)  # an initializer
    nodes = [
        helper.make_node("Add", ["x", "w"], ["add"]),
        helper.make_node("Sub", ["x", "w"], ["sub"]),
        helper.make_node("Mul", ["x", "w"], ["mul"]),
        helper.make_node("Max", ["x", "w"], ["max"]),
        helper.make_node("Less", ["x", "w"], ["lt"]),
        helper.make_node("Cast", ["x"], ["f"], to=TensorProto.DOUBLE),
        helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT64),
        helper.make_node("Cast", ["g"], ["back"], to=code),
        # the same values as a constant in the program (u64's above 2^63 too)
        helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(w)),
        helper.make_node("Add", ["x", "k"], ["addk"]),
    ]
    g = np.array([0.0, 1.9, 2.5, 100.0, 3.0, 0.5], np.float32)  # in range for every dtype
    outs = [(n, code, None) for n in ("add", "sub", "mul", "max", "back")]
    outs += [("lt", TensorProto.BOOL, None), ("f", TensorProto.DOUBLE, None)]
    outs += [("i", TensorProto.INT64, None), ("addk", code, None)]
    m = model(nodes, [("x", code, [6]), ("g", F, [6])], outs, {"w": w}, opset=17)
    module, _ = import_model(m)
    assert str(module.entry.params[0].type) == f"{module.entry.params[0].type.dtype}[6]"
    got = gdv_run(m, {"x": x, "g": g})
    with np.errstate(over="ignore"):
        want = [x + w, x - w, x * w, np.maximum(x, w), g.astype(dtype), x < w]
    want += [x.astype(np.float64), x.astype(np.int64), x + w]
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (k, a, b)
    if dtype not in (np.int16, np.uint16):
        for k, (a, b) in enumerate(zip(got, ort_run(m, {"x": x, "g": g}), strict=True)):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (k, a, b)


def test_float_to_unsigned_cast_saturates_and_nan_is_zero() -> None:
    """Out of range and NaN, ONNX's Cast is undefined; gdv's is the IR's convert."""
    x = np.array([np.nan, -0.5, -1e30, 254.9, 300.0, np.inf, -np.inf], np.float32)
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.UINT8)
    m = model([node], [("x", F, [7])], [("y", TensorProto.UINT8, None)])
    (got,) = gdv_run(m, {"x": x})
    np.testing.assert_array_equal(got, np.array([0, 0, 0, 254, 255, 255, 0], np.uint8))


def test_bool_reduce_max_and_min_are_any_and_all() -> None:
    x = np.array([[True, False, False], [False, False, False]])
    nodes = [
        helper.make_node("ReduceMax", ["x", "ax"], ["any"], keepdims=0),
        helper.make_node("ReduceMin", ["x", "ax"], ["all"], keepdims=0),
        helper.make_node("ReduceMax", ["e", "ax"], ["none"], keepdims=0),
        helper.make_node("ReduceMin", ["e", "ax"], ["every"], keepdims=0),
    ]
    b = TensorProto.BOOL
    m = model(
        nodes,
        [("x", b, [2, 3]), ("e", b, [2, 0])],
        [(n, b, None) for n in ("any", "all", "none", "every")],
        {"ax": np.array([1], np.int64)},
        opset=20,
    )
    got = gdv_run(m, {"x": x, "e": np.zeros((2, 0), bool)})
    want = [[True, False], [False, False], [False, False], [True, True]]
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.bool_
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("name", ["INT4", "UINT4", "INT2", "UINT2"])
@pytest.mark.parametrize("src", [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.FLOAT8E4M3FN])
def test_sub_byte_integer_casts_match_onnx_reference(name: str, src: int) -> None:
    """Cast and CastLike from floats to INT4/UINT4/INT2/UINT2 as ONNX's reference casts
    (truncated where in range, else 0, NaN and infinities too), from integers (wrapping) and
    back to floats and INT8, with a sub-byte initializer and Constant, bit for bit."""
    code = getattr(TensorProto, name)
    small = helper.tensor_dtype_to_np_dtype(code)
    f = helper.tensor_dtype_to_np_dtype(src)
    x = np.array(
        [-9.5, -9, -8.9, -8, -2.5, -2, -1.5, -0.5, -0.0, 0.7, 1.5, 3, 3.99, 4, 7.9, 8, 15.9, 16]
        + [np.nan, np.inf, -np.inf, 100],
        np.float32,
    ).astype(f)
    i = np.resize(np.array([17, -1, 200, 8, -9, 7, 15, 16, -3, 2, 0, 1], np.int32), x.size)
    k = np.resize(np.array([1, -1, 3, 0], np.int32), x.size).astype(small)
    nodes = [
        helper.make_node("Cast", ["x"], ["a"], to=code),
        helper.make_node("CastLike", ["i", "like"], ["b"]),
        helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(k, "k")),
        helper.make_node("Concat", ["a", "b", "k", "w"], ["c"], axis=0),
        helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["c"], ["z"], to=TensorProto.INT8),
    ]
    w = np.resize(np.array([0, 1, -2, 3], np.int32), x.size).astype(small)
    m = model(
        nodes,
        [("x", src, [x.size]), ("i", TensorProto.INT32, [x.size])],
        [("c", code, None), ("y", F, None), ("z", TensorProto.INT8, None)],
        {"like": np.zeros(1, small), "w": w},
        opset=25,
    )
    got = gdv_run(m, {"x": x, "i": i})
    want = _onnx_eval(m, {"x": x, "i": i})
    for g, r in zip(got, want, strict=True):
        assert g.dtype == r.dtype
        np.testing.assert_array_equal(g.astype(np.float64), r.astype(np.float64))


@pytest.mark.parametrize("name", ["FLOAT8E8M0"])
def test_narrow_floats_without_an_ir_dtype_are_refused_by_name(name: str) -> None:
    code = getattr(TensorProto, name)
    cast = helper.make_node("Cast", ["x"], ["y"], to=code, name="c")
    m = model([cast], [("x", F, [2])], [("y", code, None)], opset=25)
    with pytest.raises(Unsupported, match=f"casting to {name}, which has no IR dtype"):
        import_model(m)
    m = model([helper.make_node("Identity", ["x"], ["y"])], [("x", code, [2])], [("y", code, None)])
    with pytest.raises(Unsupported, match=f"has dtype {name}, which has no IR dtype"):
        import_model(m)


FLOAT8 = ["FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT4E2M1"]


def _onnx_eval(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(m).run(None, feeds)


def _same_float8(got: np.ndarray, want: np.ndarray, x: np.ndarray | None = None) -> None:
    """The same bits, or both NaN (ONNX's reference keeps a NaN's sign; the IR does not); a NaN
    input `x` into FLOAT4E2M1, which has no NaN, gives a zero of either sign there (+0 in the
    IR)."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    g, w = got.view(np.uint8), want.view(np.uint8)
    gv, wv = got.astype(np.float32), want.astype(np.float32)
    ok = (g == w) | (np.isnan(gv) & np.isnan(wv))
    if x is not None:
        ok |= np.isnan(x) & (gv == 0) & (wv == 0)
    assert np.all(ok), (got, want)


@pytest.mark.parametrize("name", FLOAT8)
@pytest.mark.parametrize("saturate", [None, 1, 0])
def test_float8_cast_and_castlike_match_onnx_reference(name: str, saturate: int | None) -> None:
    """Cast and CastLike f32 -> float8 (saturate default, on, off) and back, on every code's
    value, the midpoints, the values beyond max, infinities, NaN and -0, bit for bit with ONNX's
    reference evaluator (NaN codes as one value)."""
    code = getattr(TensorProto, name)
    f8 = helper.tensor_dtype_to_np_dtype(code)
    n = 16 if name == "FLOAT4E2M1" else 256
    vals = np.unique(np.arange(n, dtype=np.uint8).view(f8).astype(np.float32))
    vals = vals[np.isfinite(vals)]
    mids = (vals[:-1] + vals[1:]) / 2
    top = float(np.nanmax(vals))
    x = np.concatenate(
        [vals, mids, [top * 1.03, top * 1.07, -top * 2, np.inf, -np.inf, np.nan, -0.0, 1e-30]]
    ).astype(np.float32)
    extra = {} if saturate is None else {"saturate": saturate}
    nodes = [
        helper.make_node("Cast", ["x"], ["y"], to=code, **extra),
        helper.make_node("CastLike", ["x", "like"], ["z"], **extra),
        helper.make_node("Cast", ["y"], ["back"], to=F),
    ]
    like = np.zeros(1, np.float32).astype(f8)
    m = model(
        nodes,
        [("x", F, [x.size])],
        [("y", code, None), ("z", code, None), ("back", F, None)],
        {"like": like},
        opset=21,
    )
    got = gdv_run(m, {"x": x})
    want = _onnx_eval(m, {"x": x})
    _same_float8(got[0], want[0], x)
    _same_float8(got[1], want[1], x)
    np.testing.assert_array_equal(got[2], want[2])


def test_float8_inputs_initializers_constants_and_data_movement() -> None:
    """A float8 graph input, initializer and Constant are imported as float8 values (the
    Constant as f32 values converted back: the IR has no float8 literal); Transpose, Reshape,
    Concat and Identity move them; DequantizeLinear of a float8 is convert and mul."""
    f8 = helper.tensor_dtype_to_np_dtype(TensorProto.FLOAT8E4M3FN)
    code = TensorProto.FLOAT8E4M3FN
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (2, 3), dtype=np.uint8).view(f8)
    w = rng.integers(0, 256, (3, 2), dtype=np.uint8).view(f8)
    k = np.array([[1.5, -448.0, 0.0]], np.float32).astype(f8)
    nodes = [
        helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(k, "k")),
        helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
        helper.make_node("Concat", ["x", "wt", "k"], ["c"], axis=0),
        helper.make_node("Reshape", ["c", "shape"], ["r"]),
        helper.make_node("Identity", ["r"], ["y"]),
        helper.make_node("DequantizeLinear", ["y", "scale", "zp"], ["d"]),
    ]
    m = model(
        nodes,
        [("x", code, [2, 3])],
        [("y", code, None), ("d", F, None)],
        {
            "w": w,
            "shape": np.array([3, 5], np.int64),
            "scale": np.array(0.25, np.float32),
            "zp": np.zeros((), f8),
        },
        opset=21,
    )
    got = gdv_run(m, {"x": x})
    want = _onnx_eval(m, {"x": x})
    _same_float8(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    text = print_module(import_model(m)[0])
    assert "f8e4m3fn[" in text and "constant" in text


def test_float8_arithmetic_and_a_nonzero_zero_point_are_refused_by_name() -> None:
    code = TensorProto.FLOAT8E5M2
    add = helper.make_node("Add", ["x", "x"], ["y"], name="plus")
    m = model([add], [("x", code, [2])], [("y", code, None)], opset=21)
    with pytest.raises(Unsupported, match=r"Add .*at node plus: add on f8e5m2: .*storage only"):
        import_model(m)
    f8 = helper.tensor_dtype_to_np_dtype(code)
    dq = helper.make_node("DequantizeLinear", ["x", "s", "zp"], ["y"])
    inits = {"s": np.array(2.0, np.float32), "zp": np.array(1.0, np.float32).astype(f8)}
    m = model([dq], [("x", code, [2])], [("y", F, None)], inits, opset=21)
    with pytest.raises(Unsupported, match="float8 zero point other than 0"):
        import_model(m)
