"""ONNX Shrink, ReverseSequence and Trilu on empty tensors (issue 19): bit for bit against ONNX's
reference evaluator on hypothesis-drawn values (NaN, infinities, signed zeros, lengths from 0
to the whole axis), and on the C target."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from gdv.backends import c, reference
from gdv.frontends.onnx import Unsupported, import_model
from gdv.validate.counterexample import same_bits

SPECIAL = [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, np.nan, np.inf, -np.inf, 0.49999997]


def _check(op: str, feeds: dict[str, np.ndarray], on_c: bool = False, opset: int = 18,
           inits: dict[str, np.ndarray] | None = None, exact: bool = True,
           **attrs) -> None:  # fmt: skip
    inits = inits or {}
    g = helper.make_graph(
        [helper.make_node(op, [*feeds, *inits], ["y"], **attrs)],
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in feeds.items()
        ],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
        [
            helper.make_tensor(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape,
                               a.ravel().tolist())
            for n, a in inits.items()
        ],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    module, weights = import_model(m)
    runs = [reference.run(module, dict(weights, **feeds))[0]]
    if on_c:
        runs.append(c.run(module, dict(weights, **feeds))[0])
    for got in runs:
        assert got.dtype == want.dtype and got.shape == want.shape
        if exact:
            assert same_bits(got, want).all(), (feeds, got, want)
        else:  # a sum in the IR's order, where numpy's einsum chooses its own
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@given(data=st.data())
def test_shrink_is_the_reference(dtype, data) -> None:
    vals = data.draw(st.lists(st.sampled_from(SPECIAL) | st.floats(-3, 3), min_size=1,
                              max_size=12))  # fmt: skip
    x = np.array(vals, np.float64).astype(dtype)
    lambd = data.draw(st.sampled_from([0.5, 0.0, 1.5, 0.1]))
    bias = data.draw(st.sampled_from([0.0, 0.5, 1.5, 0.1, -0.3]))
    _check("Shrink", {"x": x}, lambd=lambd, bias=bias)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_shrink_adds_the_f32_attribute_as_numpy_does(dtype) -> None:
    """lambd and bias are f32 scalars in ONNX's reference: an f16 x is computed in f32 and
    rounded once (0.125 - 0.1 is 0.025 there, not f16(0.125 - f16(0.1)) = 0.02502), and a
    comparison with lambd = 0.1 uses the f32 value, not an f16 rounding of it."""
    x = np.array([0.125, -0.125, 0.0999755859375, 0.10003662109375, -0.0999755859375], dtype)
    _check("Shrink", {"x": x}, on_c=True, lambd=0.1, bias=0.1)


def test_shrink_on_c_and_integers_refused() -> None:
    x = np.array(SPECIAL, np.float32)
    _check("Shrink", {"x": x}, on_c=True, lambd=0.5, bias=1.5)
    g = helper.make_graph(
        [helper.make_node("Shrink", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [3])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, None)],
    )  # fmt: skip
    with pytest.raises(Unsupported, match="i8 operands are not supported"):
        import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))


@given(data=st.data())
def test_reverse_sequence_is_the_reference(data) -> None:
    time_axis = data.draw(st.sampled_from([0, 1]))
    t, b = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 4))
    shape = (t, b, 2) if time_axis == 0 else (b, t, 2)
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    lens = np.array(data.draw(st.lists(st.integers(0, t), min_size=b, max_size=b)), np.int64)
    _check("ReverseSequence", {"x": x, "lens": lens}, time_axis=time_axis,
           batch_axis=1 - time_axis)  # fmt: skip


def test_reverse_sequence_on_c() -> None:
    x = np.arange(24, dtype=np.int32).reshape(4, 3, 2)
    _check("ReverseSequence", {"x": x, "lens": np.array([4, 1, 2], np.int64)}, on_c=True)


@pytest.mark.parametrize("shape", [(3, 0, 5), (0, 5), (2, 0)])
def test_trilu_of_an_empty_tensor_is_itself(shape) -> None:
    x = np.zeros(shape, np.float32)
    _check("Trilu", {"x": x}, upper=0)
    _check("Trilu", {"x": x}, upper=1)


EINSUMS = [  # (equation, shapes, bit-exact: no sum of more than one term)
    ("...ii->...i", [(2, 3, 3)], True),
    ("ii->i", [(4, 4)], True),
    ("ii", [(3, 3)], False),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)], False),
    ("...ij,jk", [(2, 3, 4), (4, 2)], False),
    ("bii,bij->bj", [(2, 3, 3), (2, 3, 4)], False),
    ("i...i->...", [(3, 2, 3)], False),
    ("...i,...i->...i", [(2, 3), (2, 3)], True),
]


@pytest.mark.parametrize("eq, shapes, exact", EINSUMS, ids=[e for e, _, _ in EINSUMS])
@given(data=st.data())
def test_einsum_ellipsis_and_diagonals_are_the_reference(eq, shapes, exact, data) -> None:
    feeds = {}
    for k, shape in enumerate(shapes):
        n = int(np.prod(shape))
        vals = data.draw(st.lists(st.floats(-4, 4, width=32), min_size=n, max_size=n))
        feeds[f"x{k}"] = np.array(vals, np.float32).reshape(shape)
    _check("Einsum", feeds, opset=12, exact=exact, equation=eq)


def test_einsum_diagonal_on_c_and_size_mismatch_refused() -> None:
    x = np.arange(18, dtype=np.float32).reshape(2, 3, 3)
    _check("Einsum", {"x": x}, on_c=True, opset=12, equation="...ii->...i")
    g = helper.make_graph(
        [helper.make_node("Einsum", ["x"], ["y"], equation="ij->i")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)]))
    g.node[0].attribute[0].s = b"ii->i"
    with pytest.raises(Unsupported, match="index 'i' has sizes 2 and 3"):
        import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)]))


def _maxpool(x: np.ndarray, **attrs) -> tuple[list[np.ndarray], list[np.ndarray]]:
    g = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)], "g",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in "yi"],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)])
    want = ReferenceEvaluator(m).run(None, {"x": x})
    module, weights = import_model(m)
    got = reference.run(module, dict(weights, x=x))
    return got, want


@given(data=st.data())
def test_maxpool_indices_are_the_reference(data) -> None:
    """Ties (values drawn from a few), NaN not leading a window, pads, strides, dilations,
    storage order and ceil mode: the indices bit for bit, the values too where no NaN is.
    (A stride or dilation of 2 takes the reference's `_max_pool` path, which indexes x as
    ONNX's spec and the node tests' data do; its path for unit strides and dilations indexes
    each channel from 0 and reads coordinates off the output shape.)"""
    shape = (
        data.draw(st.integers(1, 2)),
        2,
        data.draw(st.integers(2, 5)),
        data.draw(st.integers(5, 6)),
    )  # fmt: skip  (the widest dilated window fits)
    n = int(np.prod(shape))
    nan = data.draw(st.booleans())
    pool = st.sampled_from([0.0, 1.0, 2.0, -1.0] + ([np.nan] if nan else []))
    x = np.array(data.draw(st.lists(pool, min_size=n, max_size=n)), np.float32).reshape(shape)
    k = [data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3))]
    attrs = {
        "kernel_shape": k,
        "strides": [2, data.draw(st.integers(1, 2))],
        "pads": [data.draw(st.integers(0, k[0] - 1)), data.draw(st.integers(0, k[1] - 1))] * 2,
        "dilations": [1, data.draw(st.integers(1, 2))],
        "storage_order": data.draw(st.integers(0, 1)),
        "ceil_mode": data.draw(st.integers(0, 1)),
    }
    (y, i), (wy, wi) = _maxpool(x, **attrs)
    assert i.dtype == wi.dtype == np.int64 and np.array_equal(i, wi), (x, attrs, i, wi)
    if not nan:
        assert same_bits(y, wy).all()


def test_maxpool_indices_on_c_and_refusals() -> None:
    x = np.array([[[[3, 1, 3], [2, 5, 5], [0, 1, 4]]]], np.int32)
    from onnx import helper as h

    g = h.make_graph(
        [h.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], pads=[1, 1, 0, 0],
                     strides=[2, 1])],
        "g", [h.make_tensor_value_info("x", TensorProto.INT32, x.shape)],
        [h.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in "yi"],
    )  # fmt: skip
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 12)])
    want = ReferenceEvaluator(m).run(None, {"x": x})[1]
    module, weights = import_model(m)
    assert np.array_equal(c.run(module, dict(weights, x=x))[1], want)
    g.input[0].type.tensor_type.shape.dim.add().dim_value = 2
    g.node[0].attribute[0].ints.append(1)
    with pytest.raises(Unsupported, match="Indices output of a 3-D pool"):
        import_model(h.make_model(g, opset_imports=[h.make_opsetid("", 12)]))


@pytest.mark.parametrize("mode", ["linear", "circular"])
@given(data=st.data())
def test_tensor_scatter_is_the_reference(mode, data) -> None:
    b, m = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 5))
    n = data.draw(st.integers(1, m))
    axis = data.draw(st.sampled_from([-2, 1]))
    cache_shape, upd_shape = [b, 2, m, 3], [b, 2, n, 3]
    if axis == 1:
        cache_shape, upd_shape = [b, m, 3], [b, n, 3]
    past = np.arange(int(np.prod(cache_shape)), dtype=np.float32).reshape(cache_shape)
    upd = -1.0 - np.arange(int(np.prod(upd_shape)), dtype=np.float32).reshape(upd_shape)
    hi = m - n if mode == "linear" else m - 1
    w = np.array(data.draw(st.lists(st.integers(0, hi), min_size=b, max_size=b)), np.int64)
    _check("TensorScatter", {"past": past, "upd": upd, "w": w}, opset=24, mode=mode, axis=axis)


def test_tensor_scatter_on_c() -> None:
    past = np.zeros((2, 4, 2), np.int32)
    upd = np.arange(1, 13, dtype=np.int32).reshape(2, 3, 2)
    feeds = {"past": past, "upd": upd, "w": np.array([3, 1], np.int64)}
    _check("TensorScatter", feeds, on_c=True, opset=24, mode="circular", axis=1)


def _ml(op: str, feeds: dict[str, np.ndarray], **attrs) -> tuple[np.ndarray, np.ndarray, object]:
    g = helper.make_graph(
        [helper.make_node(op, list(feeds), ["y"], domain="ai.onnx.ml", **attrs)], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
    )  # fmt: skip
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("ai.onnx.ml", 3)]
    )
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    module, weights = import_model(m)
    return reference.run(module, dict(weights, **feeds))[0], want, (module, weights)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.int64])
@given(data=st.data())
def test_binarizer_is_the_reference(dtype, data) -> None:
    kind = np.dtype(dtype).kind
    vals = st.sampled_from(SPECIAL) | st.floats(-3, 3) if kind == "f" else st.integers(-3, 3)
    x = np.array(data.draw(st.lists(vals, min_size=1, max_size=10)), np.float64).astype(dtype)
    threshold = data.draw(st.sampled_from([0.0, 1.0, -0.5, 0.1, 1.5]))
    got, want, _ = _ml("Binarizer", {"x": x}, threshold=threshold)
    assert got.dtype == want.dtype and same_bits(got, want).all(), (x, threshold, got, want)


@given(data=st.data())
def test_array_feature_extractor_is_the_reference(data) -> None:
    shape = data.draw(st.sampled_from([(4,), (3, 4), (2, 2, 4)]))
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    k = data.draw(st.integers(1, 5))
    idx = np.array(data.draw(st.lists(st.integers(-4, 3), min_size=k, max_size=k)), np.int64)
    got, want, (module, weights) = _ml("ArrayFeatureExtractor", {"x": x, "i": idx})
    assert got.shape == want.shape and same_bits(got, want).all()
    assert np.array_equal(c.run(module, dict(weights, x=x, i=idx))[0], want)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@given(data=st.data())
def test_lrn_is_the_reference(dtype, data) -> None:
    """N = C: ONNX's reference loops its channel index over N (dim 0), so only there does it
    compute every channel as ONNX's spec (and gdv) do. With beta = 1 (pow(d, 1) = d in every
    libm) bit for bit, which checks the window sums' order; other betas within pow's ulps."""
    c = data.draw(st.integers(1, 4))
    n = int(np.prod((c, c, 2, 3)))
    vals = data.draw(st.lists(st.sampled_from([0.0, -0.0, 1.0, -2.0]) | st.floats(-3, 3),
                              min_size=n, max_size=n))  # fmt: skip
    x = np.array(vals, np.float64).astype(dtype).reshape(c, c, 2, 3)
    size = data.draw(st.integers(1, 5))
    beta = data.draw(st.sampled_from([1.0, 0.75, 0.5]))
    attrs = {"size": size, "alpha": 1e-2, "beta": beta, "bias": 1.5}
    _check("LRN", {"x": x}, exact=beta == 1.0, **attrs)


def test_lrn_on_c() -> None:
    x = np.linspace(-3, 3, 2 * 2 * 3 * 2, dtype=np.float32).reshape(2, 2, 3, 2)
    _check("LRN", {"x": x}, on_c=True, size=3, alpha=1e-2, beta=1.0, bias=2.0)


@given(data=st.data())
def test_compress_is_the_reference(data) -> None:
    """Compress with a static condition (shorter than the axis, all false, or none given an
    axis: the flattened input), values with NaN, infinities and signed zeros."""
    rank = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    n = int(np.prod(shape))
    x = np.array(data.draw(st.lists(st.sampled_from(SPECIAL), min_size=n, max_size=n)),
                 np.float32).reshape(shape)  # fmt: skip
    axis = data.draw(st.none() | st.integers(-rank, rank - 1))
    size = n if axis is None else shape[axis]
    cond = np.array(data.draw(st.lists(st.booleans(), min_size=1, max_size=size)), bool)
    attrs = {} if axis is None else {"axis": axis}
    _check("Compress", {"x": x}, inits={"c": cond}, opset=11, **attrs)


def test_compress_on_c_and_refusals() -> None:
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    _check("Compress", {"x": x}, inits={"c": np.array([0, 1, 1, 0], bool)}, on_c=True,
           opset=11, axis=1)  # fmt: skip
    g = helper.make_graph(
        [helper.make_node("Compress", ["x", "c"], ["y"], axis=0)], "g",
        [helper.make_tensor_value_info("x", TensorProto.INT32, [3, 4]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [3])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    with pytest.raises(Unsupported, match=r"Compress .* at node #0 .*condition must be a const"):
        import_model(m)
    with pytest.raises(Unsupported, match="condition of length 4 for an axis of 3"):
        import_model(m, known_inputs={"c": np.ones(4, bool)})


@given(data=st.data())
def test_max_unpool_is_the_reference(data) -> None:
    """MaxUnpool with static indices (repeated ones: the later element wins, as the reference's
    loop writes; negative ones wrap as numpy's indexing does), kernels, strides, pads and an
    output_shape larger than the inferred one."""
    nd = data.draw(st.integers(1, 2))
    kernel = data.draw(st.lists(st.integers(1, 3), min_size=nd, max_size=nd))
    strides = data.draw(st.lists(st.integers(1, 3), min_size=nd, max_size=nd))
    pads = [data.draw(st.integers(0, (kernel[d % nd] - 1) // 2)) for d in range(2 * nd)]
    shape = [data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))] + [
        data.draw(st.integers(2, 3)) for _ in range(nd)
    ]
    inferred = shape[:2] + [
        (shape[2 + d] - 1) * strides[d] - pads[d] - pads[nd + d] + kernel[d] for d in range(nd)
    ]
    total = int(np.prod(inferred))
    n = int(np.prod(shape))
    x = np.array(data.draw(st.lists(st.sampled_from(SPECIAL), min_size=n, max_size=n)),
                 np.float32).reshape(shape)  # fmt: skip
    idx = np.array(data.draw(st.lists(st.integers(-total, total - 1), min_size=n, max_size=n)),
                   np.int64).reshape(shape)  # fmt: skip
    inits = {"i": idx}
    if data.draw(st.booleans()):
        inits["s"] = np.array([o + data.draw(st.integers(0, 2)) for o in inferred], np.int64)
    _check("MaxUnpool", {"x": x}, inits=inits, opset=11, kernel_shape=kernel,
           strides=strides, pads=pads)  # fmt: skip


def test_max_unpool_on_c_and_refusals() -> None:
    x = np.array([[[[5.0, 6.0], [7.0, 8.0]]]], np.float32)
    idx = np.array([[[[5, 7], [13, 15]]]], np.int64)
    _check("MaxUnpool", {"x": x}, inits={"i": idx}, on_c=True, opset=11, kernel_shape=[2, 2],
           strides=[2, 2])  # fmt: skip
    for inits, why in [
        ({"i": idx + 16}, "an index is out of range"),
        ({"i": idx, "s": np.array([1, 1, 3, 4], np.int64)}, r"output_shape \[1, 1, 3, 4\]"),
    ]:
        g = helper.make_graph(
            [helper.make_node("MaxUnpool", ["x", *inits], ["y"], kernel_shape=[2, 2],
                              strides=[2, 2])],
            "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [helper.make_tensor(k, TensorProto.INT64, v.shape, v.ravel().tolist())
             for k, v in inits.items()],
        )  # fmt: skip
        with pytest.raises(Unsupported, match=f"MaxUnpool .* at node #0 .*{why}"):
            import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]))


def _dropout_model(ratio: float, training: bool):
    g = helper.make_graph(
        [helper.make_node("Dropout", ["x", "r", "t"], ["y", "z"], seed=0)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in "yz"],
        [helper.make_tensor("r", TensorProto.FLOAT, [], [ratio]),
         helper.make_tensor("t", TensorProto.BOOL, [], [training])],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_dropout_in_training_mode_with_ratio_zero_is_the_identity() -> None:
    """Nothing is dropped and the scale 1 / (1 - 0) is 1: the input and an all-true mask, as
    ONNX's reference gives; any other ratio in training mode draws random masks (refused)."""
    x = np.array([*SPECIAL, 2.0, -3.0], np.float32).reshape(3, 4)
    for training in (True, False):
        m = _dropout_model(0.0, training)
        want = ReferenceEvaluator(m).run(None, {"x": x})
        module, weights = import_model(m)
        for run in (reference.run, c.run):
            got = run(module, dict(weights, x=x))
            assert same_bits(got[0], want[0]).all()
            assert got[1].dtype == want[1].dtype == np.bool_ and got[1].all()
    import_model(_dropout_model(0.5, False))
    with pytest.raises(Unsupported, match="Dropout .* at node #0 .*training mode"):
        import_model(_dropout_model(0.5, True))


def test_optional_ops_on_tensors() -> None:
    """OptionalHasElement: false with no input (none, or an empty name), true for a tensor;
    OptionalGetElement of a tensor is the tensor; of nothing it is refused."""
    x = np.array([1.5, -0.0, np.nan], np.float32)
    vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    cases = [("OptionalHasElement", [], []), ("OptionalHasElement", [""], []),
             ("OptionalHasElement", ["x"], [vi]), ("OptionalGetElement", ["x"], [vi])]  # fmt: skip
    for op, ins, vis in cases:
        out = [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)]
        g = helper.make_graph([helper.make_node(op, ins, ["y"])], "g", vis, out)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
        feeds = {"x": x} if vis else {}
        (want,) = ReferenceEvaluator(m).run(None, feeds)
        module, weights = import_model(m)
        (got,) = reference.run(module, dict(weights, **feeds))
        assert got.dtype == want.dtype and got.shape == want.shape
        assert same_bits(got, want).all(), (op, ins, got, want)
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    g = helper.make_graph([helper.make_node("OptionalGetElement", [""], ["y"])], "g", [], out)
    with pytest.raises(Unsupported, match="OptionalGetElement .* at node #0 .*empty optional"):
        import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))


def _batch_norm_training(shape, momentum):
    c_ = shape[1]
    g = helper.make_graph(
        [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                          training_mode=1, momentum=momentum, epsilon=1e-2)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
        + [helper.make_tensor_value_info(n, TensorProto.FLOAT, [c_]) for n in "sbmv"],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "rm", "rv")],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])


@given(data=st.data())
def test_batch_norm_training_mode_is_the_spec(data) -> None:
    """Training mode: the batch's mean and population variance over every dim but the
    channel. Values are multiples of 1/4 and the elements per channel a power of 2, so every
    sum, mean and variance is exact and the running statistics
    are ONNX's reference's bit for bit; Y (the reference writes scale * (x - m) / sqrt(..),
    the spec and gdv (x - m) / sqrt(..) * scale) is the spec's formula computed in numpy in
    gdv's order, bit for bit, and the reference's to within a few ulp."""
    pow2 = st.sampled_from([1, 2, 4])  # elements per channel a power of 2: exact means
    shape = [data.draw(pow2), data.draw(st.integers(1, 3))] + data.draw(st.lists(pow2, max_size=2))
    n = int(np.prod(shape))
    quarters = st.integers(-12, 12).map(lambda k: k / 4)
    x = np.array(data.draw(st.lists(quarters, min_size=n, max_size=n)), np.float32)
    x = x.reshape(shape)
    c_ = shape[1]
    s, b, m = (np.array(data.draw(st.lists(quarters, min_size=c_, max_size=c_)), np.float32)
               for _ in range(3))  # fmt: skip
    v = np.abs(np.array(data.draw(st.lists(quarters, min_size=c_, max_size=c_)), np.float32))
    momentum = data.draw(st.sampled_from([0.9, 0.5, 0.0, 1.0]))
    model = _batch_norm_training(shape, momentum)
    feeds = {"x": x, "s": s, "b": b, "m": m, "v": v}
    want = ReferenceEvaluator(model).run(None, feeds)
    got = reference.run(import_model(model)[0], feeds)
    assert same_bits(got[1], want[1]).all() and same_bits(got[2], want[2]).all()
    axes = tuple(d for d in range(len(shape)) if d != 1)
    ch = (1, c_) + (1,) * (len(shape) - 2)
    mean = (x.sum(axis=axes, dtype=np.float32) / np.float32(x.size // c_)).reshape(ch)
    var = (((x - mean) ** 2).sum(axis=axes) / np.float32(x.size // c_)).reshape(ch)
    y = (x - mean) / np.sqrt(var + np.float32(1e-2)) * s.reshape(ch) + b.reshape(ch)
    assert same_bits(got[0], y).all(), (got[0], y)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


def test_batch_norm_training_mode_on_c_and_before_opset_14() -> None:
    model = _batch_norm_training([2, 2, 3], 0.9)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 2, 3)).astype(np.float32)}
    feeds |= {n: rng.random(2).astype(np.float32) for n in "sbmv"}
    module, _ = import_model(model)
    for a, b in zip(c.run(module, feeds), reference.run(module, feeds), strict=True):
        assert same_bits(a, b).all()
    model.opset_import[0].version = 9
    del model.graph.node[0].attribute[:]
    model.graph.node[0].attribute.append(helper.make_attribute("training_mode", 1))
    with pytest.raises(Unsupported, match="BatchNormalization .* at node #0 .*training mode"):
        import_model(model)


@given(data=st.data())
def test_col2im_is_the_reference(data) -> None:
    """Col2Im in 1 to 3 dims with strides, pads and dilations: bit for bit, overlapping
    blocks summed in the reference's order (kernel position, then block) on values where the
    order shows (large and small, signed zeros, NaN, infinities)."""
    nd = data.draw(st.integers(1, 3))
    image = [data.draw(st.integers(1, 4)) for _ in range(nd)]
    block = [data.draw(st.integers(1, 3)) for _ in range(nd)]
    dil = [data.draw(st.integers(1, 2)) for _ in range(nd)]
    strides = [data.draw(st.integers(1, 2)) for _ in range(nd)]
    pads = [data.draw(st.integers(0, 1)) for _ in range(2 * nd)]
    cols = [(image[i] + pads[i] + pads[nd + i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1
            for i in range(nd)]  # fmt: skip
    assume(min(cols) >= 1)
    n, c = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    shape = (n, c * int(np.prod(block)), int(np.prod(cols)))
    size = int(np.prod(shape))
    vals = st.sampled_from(SPECIAL) | st.sampled_from([1e8, -1e8, 3.0, 1e-3])
    x = np.array(data.draw(st.lists(vals, min_size=size, max_size=size)), np.float32)
    inits = {"i": np.array(image, np.int64), "b": np.array(block, np.int64)}
    _check("Col2Im", {"x": x.reshape(shape)}, inits=inits, dilations=dil, pads=pads,
           strides=strides)  # fmt: skip


def test_col2im_on_c_and_refusals() -> None:
    x = np.arange(2 * 4 * 6, dtype=np.float32).reshape(2, 4, 6) / 7
    inits = {"i": np.array([3, 4], np.int64), "b": np.array([2, 2], np.int64)}
    _check("Col2Im", {"x": x}, inits=inits, on_c=True)
    g = helper.make_graph(
        [helper.make_node("Col2Im", ["x", "i", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 5]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("b", TensorProto.INT64, [2], [2, 2])],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(Unsupported, match="Col2Im .* at node #0 .*image_shape must be a const"):
        import_model(m)
    with pytest.raises(Unsupported, match=r"does not hold blocks \[2, 3\] of \[2, 2\]"):
        import_model(m, known_inputs={"i": np.array([3, 4], np.int64)})


def _window_max(x: np.ndarray, kernel, strides, dilations, pads, outs) -> np.ndarray:
    """MaxPool's values by IR_SPEC's max, window by window: NaN if the window holds one, and
    +0.0 over -0.0; padding never counts."""
    n, ch = x.shape[:2]
    y = np.empty((n, ch, *outs), x.dtype)
    for b, cc, *o in np.ndindex(n, ch, *outs):
        idx = [
            [i * st - p + kk * d for kk in range(k)]
            for i, st, p, k, d in zip(o, strides, pads, kernel, dilations, strict=True)
        ]
        vals = [
            x[(b, cc, *pos)]
            for pos in np.ndindex(*kernel)
            for pos in [[idx[a][pos[a]] for a in range(len(kernel))]]
            if all(0 <= q < s for q, s in zip(pos, x.shape[2:], strict=True))
        ]
        v = np.array(vals, x.dtype)
        if x.dtype.kind == "f" and np.isnan(v).any():
            y[(b, cc, *o)] = np.nan
        elif x.dtype.kind == "f" and v.max() == 0 and (np.signbit(v[v == 0]) == 0).any():
            y[(b, cc, *o)] = 0.0
        else:
            y[(b, cc, *o)] = v.max()
    return y


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_maxpool_values_fold_axis_by_axis(data) -> None:
    """MaxPool without Indices maxes a window's rows, then the columns of those maxima
    (`window_max`: k_h + k_w - 2 maxes an output): on 1-, 2- and 3-D pools with pads, strides,
    dilations and ceil mode, over NaN, infinities and signed zeros or integers, every value is
    the window's max, on the reference backend and on C."""
    nsp = data.draw(st.integers(1, 3))
    dtype = data.draw(st.sampled_from([np.float32, np.float64, np.int32]))
    kernel = [data.draw(st.integers(1, 3)) for _ in range(nsp)]
    dil = [data.draw(st.integers(1, 2)) for _ in range(nsp)]
    strides = [data.draw(st.integers(1, 3)) for _ in range(nsp)]
    pads = [data.draw(st.integers(0, k - 1)) for k in kernel]
    spatial = [
        data.draw(st.integers((k - 1) * d + 1, (k - 1) * d + 5))
        for k, d in zip(kernel, dil, strict=True)
    ]
    shape = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3)), *spatial)
    pool = SPECIAL if dtype != np.int32 else [0, 1, -1, 7, -(2**31), 2**31 - 1]
    n = int(np.prod(shape))
    x = np.array(data.draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n)))
    x = x.astype(dtype).reshape(shape)
    ceil = data.draw(st.integers(0, 1))
    outs = []
    for s, k, st_, d, p in zip(spatial, kernel, strides, dil, pads, strict=True):
        span = s + 2 * p - d * (k - 1) - 1
        o = (-(-span // st_) if ceil else span // st_) + 1
        outs.append(o - 1 if ceil and (o - 1) * st_ >= s + p else o)
    g = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=kernel, strides=strides,
                          dilations=dil, pads=pads * 2, ceil_mode=ceil)], "g",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
    )  # fmt: skip
    module, weights = import_model(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)])
    )
    maxes = sum(op.name == "max" for op in module.entry.ops)
    big = sum(k > 1 for k in kernel)
    assert maxes == (sum(k - 1 for k in kernel) if big > 1 else int(np.prod(kernel)) - 1)
    want = _window_max(x, kernel, strides, dil, pads, outs)
    for got in (reference.run(module, dict(weights, x=x))[0], c.run(module, dict(weights, x=x))[0]):
        assert got.shape == want.shape and same_bits(got, want).all(), (x, got, want)
