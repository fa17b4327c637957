"""ONNX RNN, GRU and LSTM imported as their time steps unrolled (static shapes).

Two oracles. `spec_rnn` below is ONNX's operator spec written in numpy, in the order of
operations of ONNX's reference evaluator (onnx/reference/ops/op_rnn.py, op_gru.py,
op_lstm.py), f32 throughout, with each gate product an explicit left fold over K and each
activation the IR's meaning (tanh and sigmoid computed in float64 and rounded once, relu =
max(x, +0.0)): the imported IR run by gdv's reference backend equals it bit for bit, for every
option (directions, layouts, optional inputs and outputs, activations, clip,
linear_before_reset, peepholes, input_forget). `spec_rnn` is in turn compared with
`onnx.reference.ReferenceEvaluator` wherever that evaluator implements the option (it ignores
clip, input_forget and GRU/LSTM activations, and knows only Tanh for RNN): there the two agree
within `CLOSE` (largest difference observed: 3.6e-7 over 400 drawn cases, values of magnitude
up to 3.7; relative differences are larger only next to 0, after cancellation), the
difference being numpy's BLAS summation order in `np.dot` and numpy's float32 `tanh` and `exp`
(each within an ulp or two of the value, the IR's rounded once from float64)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from gdv.backends import reference
from gdv.frontends.onnx import Unsupported, import_model
from gdv.frontends.provenance import annotated_text
from gdv.validate.counterexample import same_bits

F, I32 = TensorProto.FLOAT, TensorProto.INT32
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
CLOSE = {"rtol": 1e-5, "atol": 2e-6}
"""ReferenceEvaluator against `spec_rnn` (and so the import): summation order and f32
transcendentals differ, see the module docstring."""


# --- the spec in numpy ------------------------------------------------------------------------


def dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a [n, k] times b [k, m] in f32, each output a left fold over k (IR_SPEC's dot)."""
    acc = a[:, :1] * b[:1, :]
    for k in range(1, a.shape[1]):
        acc = acc + a[:, k : k + 1] * b[k : k + 1, :]
    return acc


def tanh(x: np.ndarray) -> np.ndarray:
    return np.tanh(x.astype(np.float64)).astype(np.float32)


def sigmoid(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return (1.0 / (1.0 + np.exp(-x))).astype(np.float32)


def relu(x: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(x) | (x > 0), x, np.float32(0))


ACT = {"Tanh": tanh, "Sigmoid": sigmoid, "Relu": relu}
DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def spec_rnn(op: str, feeds: dict[str, np.ndarray], attrs: dict[str, Any], n_out: int):
    """ONNX's RNN/GRU/LSTM on `feeds` (x, w, r and optional b, h0, c0, p)."""
    g = GATES[op]
    x = feeds["x"]
    layout = attrs.get("layout", 0)
    direction = attrs.get("direction", "forward")
    dirs = 2 if direction == "bidirectional" else 1
    if layout:
        x = x.swapaxes(0, 1)
    steps, batch, _ = x.shape
    hidden = feeds["r"].shape[-1]
    zeros = np.zeros((dirs, batch, hidden), np.float32)

    def state(k: str) -> np.ndarray:
        return feeds[k].swapaxes(0, 1) if k in feeds and layout else feeds.get(k, zeros)

    b = feeds.get("b", np.zeros((dirs, 2 * g * hidden), np.float32))
    p = feeds.get("p", np.zeros((dirs, 3 * hidden), np.float32))
    names = attrs.get("activations") or DEFAULT_ACTS[op] * dirs
    clip = attrs.get("clip")
    n_act = len(DEFAULT_ACTS[op])

    def act(d: int, k: int, v: np.ndarray) -> np.ndarray:
        if clip is not None:
            v = np.minimum(np.maximum(v, np.float32(-clip)), np.float32(clip))
        return ACT[names[d * n_act + k]](v)

    ys, hs, cs = [], [], []
    for d in range(dirs):
        wt, rt = feeds["w"][d].T, feeds["r"][d].T
        wb, rb = np.split(b[d], 2)
        h, c = state("h0")[d], state("c0")[d]
        reverse = direction == "reverse" or d == 1
        out = [None] * steps
        for s in range(steps):
            t = steps - 1 - s if reverse else s
            xw = dot(x[t], wt)
            if op == "RNN":
                h = act(d, 0, xw + dot(h, rt) + (wb + rb))
            elif op == "GRU":
                hd = hidden
                zr = xw[:, : 2 * hd] + dot(h, rt[:, : 2 * hd]) + (wb[: 2 * hd] + rb[: 2 * hd])
                z, r = act(d, 0, zr[:, :hd]), act(d, 0, zr[:, hd:])
                xh, rth, wbh, rbh = xw[:, 2 * hd :], rt[:, 2 * hd :], wb[2 * hd :], rb[2 * hd :]
                if attrs.get("linear_before_reset", 0):
                    cand = act(d, 1, xh + r * (dot(h, rth) + rbh) + wbh)
                else:
                    cand = act(d, 1, xh + dot(r * h, rth) + wbh + rbh)
                h = (np.float32(1) - z) * cand + z * h
            else:
                gates = xw + dot(h, rt) + (wb + rb)
                gi, go, gf, gc = np.split(gates, 4, -1)
                p_i, p_o, p_f = np.split(p[d], 3)
                i = act(d, 0, gi + p_i * c)
                f = np.float32(1) - i if attrs.get("input_forget", 0) else act(d, 0, gf + p_f * c)
                c = f * c + i * act(d, 1, gc)
                o = act(d, 0, go + p_o * c)
                h = o * act(d, 2, c)
            out[t] = h
        ys.append(np.stack(out))
        hs.append(h)
        cs.append(c)
    y, yh, yc = np.stack(ys, 1), np.stack(hs), np.stack(cs)
    if layout:
        y, yh, yc = y.transpose(2, 0, 1, 3), yh.swapaxes(0, 1), yc.swapaxes(0, 1)
    return [y, yh, yc][:n_out]


# --- models -----------------------------------------------------------------------------------


def rnn_model(op: str, feeds: dict[str, np.ndarray], attrs: dict[str, Any], outs: list[str],
              inits: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:  # fmt: skip
    """One `op` node reading the feeds (and initializers `inits`) by ONNX's input order."""
    order = ["x", "w", "r", "b", "seq", "h0", "c0", "p"][: 8 if op == "LSTM" else 6]
    have = {**feeds, **(inits or {})}
    ins = [k if k in have else "" for k in order]
    while ins and not ins[-1]:
        ins.pop()
    node = helper.make_node(
        op, ins, outs, name="rec", **{"hidden_size": have["r"].shape[-1], **attrs}
    )
    inputs = [helper.make_tensor_value_info(k, F if v.dtype == np.float32 else I32, v.shape)
              for k, v in feeds.items()]  # fmt: skip
    outputs = [helper.make_tensor_value_info(o, F, None) for o in outs if o]
    g = helper.make_graph(
        [node],
        "g",
        inputs,
        outputs,
        [onnx.numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    return m


def gdv_run(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    module, weights = import_model(m)
    args = dict(weights)
    for prm in module.entry.params:
        if prm.name not in args:
            args[prm.name] = feeds[prm.attrs.get("onnx_name", prm.name)]
    return reference.run(module, args)


def assert_bits(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        assert same_bits(g, np.asarray(w)).all(), (g, w)


VALUES = st.floats(-2, 2, width=32, allow_subnormal=False)


@st.composite
def cases(draw: st.DrawFn, op: str | None = None, options: bool = True):
    """(op, feeds, attrs, outputs): sizes, optional inputs and outputs and attributes drawn."""
    op = op or draw(st.sampled_from(sorted(GATES)))
    g = GATES[op]
    direction = draw(st.sampled_from(["forward", "reverse", "bidirectional"]))
    dirs = 2 if direction == "bidirectional" else 1
    steps, batch, n_in, hidden = (draw(st.integers(1, 3)) for _ in range(4))
    layout = draw(st.sampled_from([0, 1]))
    attrs: dict[str, Any] = {"direction": direction, "layout": layout}

    def arr(*shape: int) -> np.ndarray:
        return draw(hnp.arrays(np.float32, shape, elements=VALUES))

    feeds = {"x": arr(batch, steps, n_in) if layout else arr(steps, batch, n_in),
             "w": arr(dirs, g * hidden, n_in), "r": arr(dirs, g * hidden, hidden)}  # fmt: skip
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    if draw(st.booleans()):
        feeds["b"] = arr(dirs, 2 * g * hidden)
    if draw(st.booleans()):
        feeds["h0"] = arr(*state)
    if op == "LSTM":
        if draw(st.booleans()):
            feeds["c0"] = arr(*state)
        if draw(st.booleans()):
            feeds["p"] = arr(dirs, 3 * hidden)
    if op == "GRU":
        attrs["linear_before_reset"] = draw(st.sampled_from([0, 1]))
    if options:
        if draw(st.booleans()):
            n = len(DEFAULT_ACTS[op]) * dirs
            attrs["activations"] = draw(st.lists(st.sampled_from(sorted(ACT)), min_size=n,
                                                 max_size=n))  # fmt: skip
        if draw(st.booleans()):
            attrs["clip"] = draw(st.floats(0.25, 3.0, width=32))
        if op == "LSTM":
            attrs["input_forget"] = draw(st.sampled_from([0, 1]))
    n_out = len(DEFAULT_ACTS[op]) if op != "RNN" else 2
    n_out = min(n_out, 3 if op == "LSTM" else 2)
    outs = ["y", "yh", "yc"][:n_out]
    keep = draw(st.lists(st.booleans(), min_size=n_out, max_size=n_out))
    if not any(keep):
        keep[0] = True
    outs = [o if k else "" for o, k in zip(outs, keep, strict=True)]
    while not outs[-1]:
        outs.pop()
    return op, feeds, attrs, outs


def chosen(outs: list[str], vals: list[np.ndarray]) -> list[np.ndarray]:
    return [v for o, v in zip(outs, vals, strict=False) if o]


# --- against the spec, bit for bit ------------------------------------------------------------


@given(cases())
def test_every_option_matches_the_spec_bit_for_bit(case: Any) -> None:
    op, feeds, attrs, outs = case
    m = rnn_model(op, feeds, attrs, outs)
    want = chosen(outs, spec_rnn(op, feeds, attrs, len(outs)))
    assert_bits(gdv_run(m, feeds), want)


@given(cases(options=False))
def test_the_spec_in_numpy_is_close_to_onnx_reference_evaluator(case: Any) -> None:
    # where ReferenceEvaluator implements the case: default activations, no clip, no
    # input_forget (it ignores them); see CLOSE for why not bit for bit
    op, feeds, attrs, outs = case
    m = rnn_model(op, feeds, attrs, outs)
    full = [o or f"unused{k}" for k, o in enumerate(outs)]
    ref = ReferenceEvaluator(rnn_model(op, feeds, attrs, full)).run(None, feeds)
    ours = spec_rnn(op, feeds, attrs, len(outs))
    for r, o in zip(ref, ours, strict=True):
        np.testing.assert_allclose(o, r, **CLOSE)
    got = gdv_run(m, feeds)
    for g, r in zip(got, chosen(outs, ref), strict=True):
        assert g.shape == r.shape and g.dtype == r.dtype
        np.testing.assert_allclose(g, r, **CLOSE)


def test_the_spec_oracle_sees_each_option() -> None:
    # the options change the result (so the bit-for-bit test can tell them apart)
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((3, 2, 2), np.float32),
             "w": rng.standard_normal((1, 12, 2), np.float32),
             "r": rng.standard_normal((1, 12, 3), np.float32),
             "c0": rng.standard_normal((1, 2, 3), np.float32) * 3}  # fmt: skip
    base = spec_rnn("LSTM", feeds, {}, 3)
    for attrs in ({"clip": 0.5}, {"input_forget": 1}, {"activations": ["Relu", "Tanh", "Tanh"]},
                  {"direction": "reverse"}):  # fmt: skip
        other = spec_rnn("LSTM", feeds, attrs, 3)
        assert not np.array_equal(other[0], base[0]), attrs
        m = rnn_model("LSTM", feeds, attrs, ["y", "yh", "yc"])
        assert_bits(gdv_run(m, feeds), other)
    gru = {k: v[..., :9, :] if k in ("w", "r") else v for k, v in feeds.items() if k != "c0"}
    a, b = (spec_rnn("GRU", gru, {"linear_before_reset": k}, 1)[0] for k in (0, 1))
    assert not np.array_equal(a, b)


def test_weights_and_static_sequence_lens_as_initializers() -> None:
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((4, 3, 2), np.float32)}
    inits = {"w": rng.standard_normal((2, 9, 2), np.float32),
             "r": rng.standard_normal((2, 9, 3), np.float32),
             "b": rng.standard_normal((2, 18), np.float32),
             "seq": np.full(3, 4, np.int32)}  # fmt: skip
    attrs = {"direction": "bidirectional"}
    m = rnn_model("GRU", feeds, attrs, ["y", "yh"], inits)
    assert_bits(gdv_run(m, feeds), spec_rnn("GRU", {**feeds, **inits}, attrs, 2))
    ref = ReferenceEvaluator(m).run(None, feeds)
    for g, r in zip(gdv_run(m, feeds), ref, strict=True):
        np.testing.assert_allclose(g, r, **CLOSE)


@pytest.mark.parametrize("op", sorted(GATES))
def test_an_absent_bias_is_added_as_zeros_as_the_reference_evaluator_does(op: str) -> None:
    # X_t W^T = -0.0 and H R^T = -0.0 (H = +0.0, R = -1): -0.0 without a bias, +0.0 once the
    # absent B's zeros are added; every activation keeps the sign of zero. Exact arithmetic on
    # zeros: the reference evaluator agrees bit for bit.
    g = GATES[op]
    feeds = {"x": np.full((2, 1, 1), -0.0, np.float32), "w": np.ones((1, g, 1), np.float32),
             "r": -np.ones((1, g, 1), np.float32)}  # fmt: skip
    outs = ["y", "yh", "yc"][: 3 if op == "LSTM" else 2]
    m = rnn_model(op, feeds, {}, outs)
    want = ReferenceEvaluator(m).run(None, feeds)
    assert_bits(gdv_run(m, feeds), want)
    assert_bits(gdv_run(m, feeds), spec_rnn(op, feeds, {}, len(outs)))
    if op == "RNN":  # tanh(-0.0 + -0.0) would be -0.0: the zeros' addition shows
        assert not np.signbit(want[0]).any() and not np.signbit(want[1]).any()


@pytest.mark.parametrize("op", sorted(GATES))
@pytest.mark.parametrize(
    ("dtype", "code", "atol"),
    [(np.float64, TensorProto.DOUBLE, 1e-13), (np.float16, TensorProto.FLOAT16, 4e-3)],
)
def test_f64_and_f16_layers_are_close_to_the_reference_evaluator(op, dtype, code, atol) -> None:
    # computed in their own dtype, as ONNX's reference evaluator does (f16: its numpy dot
    # accumulates otherwise than the IR's f16 left fold, so a few f16 ulps apart)
    g = GATES[op]
    rng = np.random.default_rng(13)
    feeds = {"x": rng.standard_normal((3, 2, 2)).astype(dtype),
             "w": rng.standard_normal((2, g * 3, 2)).astype(dtype),
             "r": rng.standard_normal((2, g * 3, 3)).astype(dtype)}  # fmt: skip
    node = helper.make_node(op, ["x", "w", "r"], ["y", "yh"], hidden_size=3,
                            direction="bidirectional")  # fmt: skip
    inputs = [helper.make_tensor_value_info(k, code, v.shape) for k, v in feeds.items()]
    outputs = [helper.make_tensor_value_info(o, code, None) for o in ("y", "yh")]
    m = helper.make_model(helper.make_graph([node], "g", inputs, outputs),
                          opset_imports=[helper.make_opsetid("", 14)])  # fmt: skip
    m.ir_version = 8
    for got, want in zip(gdv_run(m, feeds), ReferenceEvaluator(m).run(None, feeds), strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=atol)


def test_each_step_carries_the_node_and_the_step() -> None:
    rng = np.random.default_rng(7)
    feeds = {"x": rng.standard_normal((2, 1, 2), np.float32),
             "w": rng.standard_normal((2, 4, 2), np.float32),
             "r": rng.standard_normal((2, 4, 1), np.float32)}  # fmt: skip
    module, _ = import_model(rnn_model("LSTM", feeds, {"direction": "bidirectional"}, ["y"]))
    text = annotated_text(module)
    for where in ("rec/forward/step0", "rec/forward/step1", "rec/reverse/step1"):
        assert f"// from onnx:{where} (LSTM)" in text
    assert "step2" not in text


# --- refusals ---------------------------------------------------------------------------------


def small(op: str = "RNN") -> dict[str, np.ndarray]:
    g = GATES[op]
    return {"x": np.ones((2, 1, 2), np.float32), "w": np.ones((1, g, 2), np.float32),
            "r": np.ones((1, g, 1), np.float32)}  # fmt: skip


@pytest.mark.parametrize(
    ("op", "attrs", "inits", "reason"),
    [
        ("RNN", {"activations": ["LeakyRelu"]}, {}, "activation 'LeakyRelu' is not supported"),
        ("GRU", {"activations": ["Sigmoid", "Affine"]}, {},
         "activation 'Affine' is not supported"),
        ("LSTM", {"activations": ["Sigmoid", "Tanh"]}, {}, "activations lists 2 functions"),
        ("RNN", {}, {"seq": np.array([1], np.int32)},
         "sequence_lens [1] is not the sequence length 2"),
        ("RNN", {"direction": "sideways"}, {}, "direction 'sideways'"),
        ("RNN", {"hidden_size": 3}, {}, "hidden_size 3 differs from R's 1"),
        ("LSTM", {"layout": 2}, {}, "layout 2 is not 0 or 1"),
        ("GRU", {}, {"b": np.zeros((1, 5), np.float32)}, "B is f32[1,5], expected f32[1,6]"),
    ],
)  # fmt: skip
def test_unsupported_options_are_refused_by_name(op, attrs, inits, reason) -> None:
    m = rnn_model(op, small(op), attrs, ["y"], inits)
    with pytest.raises(Unsupported) as e:
        import_model(m)
    assert f"unsupported ONNX op {op} (opset 14) at node rec: " in str(e.value)
    assert reason in str(e.value)


def test_integer_sequences_are_refused_by_name() -> None:
    feeds = {k: v.astype(np.int32) if k == "x" else v for k, v in small().items()}
    m = rnn_model("RNN", feeds, {}, ["y"])
    with pytest.raises(Unsupported, match="at node rec: i32 operands are not supported"):
        import_model(m)


def test_sequence_lens_from_the_data_is_refused_as_data_dependent() -> None:
    feeds = {**small(), "seq": np.array([2], np.int32)}
    with pytest.raises(Unsupported, match="sequence_lens is not a constant at import"):
        import_model(rnn_model("RNN", feeds, {}, ["y"]))
    # given at import and equal to the length, it is accepted (and fixes that input)
    module, _ = import_model(rnn_model("RNN", feeds, {}, ["y"]),
                             known_inputs={"seq": feeds["seq"]})  # fmt: skip
    assert "seq" not in [p.name for p in module.entry.params]


# --- the C target -----------------------------------------------------------------------------


def test_gdv_compile_proves_and_runs_an_lstm_on_c(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from gdv.cli import main

    rng = np.random.default_rng(11)
    feeds = {"x": rng.standard_normal((3, 2, 2), np.float32),
             "w": rng.standard_normal((2, 12, 2), np.float32),
             "r": rng.standard_normal((2, 12, 3), np.float32),
             "b": rng.standard_normal((2, 24), np.float32),
             "p": rng.standard_normal((2, 9), np.float32)}  # fmt: skip
    # Relu activations: every op then has an exactly rounded meaning that C keeps (its tanh and
    # sigmoid are within an ulp of the IR's, not bit for bit: tests/backends/c)
    attrs = {"direction": "bidirectional", "clip": 2.0, "activations": ["Relu"] * 6}
    m = rnn_model("LSTM", feeds, attrs, ["y", "yh", "yc"])
    path = tmp_path / "lstm.onnx"
    onnx.save(m, str(path))
    ir, weights = tmp_path / "lstm.gdv", tmp_path / "w.npz"
    assert main(["import", str(path), "-o", str(ir), "--weights", str(weights)]) == 0
    assert "// from onnx:rec/reverse/step2 (LSTM)" in ir.read_text()
    assert main(["compile", str(ir), "-o", str(tmp_path / "lstm.so"), "--no-cache"]) == 0
    assert "proved" in capsys.readouterr().out
    np.savez(tmp_path / "in.npz", **feeds)
    out = tmp_path / "out.npz"
    argv = ["run", str(ir), "--target", "c", "--inputs", str(weights), "--inputs"]
    assert main([*argv, str(tmp_path / "in.npz"), "--output", str(out)]) == 0
    got = np.load(out)
    assert_bits([got["out0"], got["out1"], got["out2"]], spec_rnn("LSTM", feeds, attrs, 3))
    capsys.readouterr()
