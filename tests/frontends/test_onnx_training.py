"""ONNX's ai.onnx.preview.training optimizers (Momentum, Adagrad, Adam; issue 19): against
ONNX's reference evaluator on hypothesis-drawn tensors, learning rates, step counts and
attributes, one or several updated tensors, f32 and f64 (numpy's promotions: a 0-d learning
rate of the wider dtype, and T * decay_factor and beta ** T in f64, make the update f64
before it is rounded to X's dtype), and on the C target."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from gdv.backends import c, reference
from gdv.frontends.onnx import Unsupported, import_model
from gdv.validate.counterexample import same_bits

DOMAIN = "ai.onnx.preview.training"
PER_TENSOR = {"Momentum": "XGV", "Adagrad": "XGH", "Adam": "XGVH"}
OUTS = {"Momentum": "XV", "Adagrad": "XH", "Adam": "XVH"}


def _model(op: str, feeds: dict[str, np.ndarray], n: int, **attrs):
    ins = ["R", "T"] + [f"{k}{i}" for k in PER_TENSOR[op] for i in range(n)]
    outs = [f"{k}{i}_new" for k in OUTS[op] for i in range(n)]
    g = helper.make_graph(
        [helper.make_node(op, ins, outs, domain=DOMAIN, **attrs)], "g",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for k, a in feeds.items()],
        [helper.make_tensor_value_info(o, 0, None) for o in outs],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid(DOMAIN, 1)])


def _case(op: str, data, n: int, dt, rdt, step: int):
    feeds = {"R": np.array(data.draw(st.floats(0.01, 1.0)), rdt), "T": np.array(step, np.int64)}
    for k in PER_TENSOR[op]:
        for i in range(n):
            size = [1, 2, 3][i % 3]
            lo = 0.0 if k == "H" else -4.0  # H accumulates squares
            vals = data.draw(st.lists(st.floats(lo, 4.0, width=32), min_size=size, max_size=size))
            feeds[f"{k}{i}"] = np.array(vals, dt)
    return feeds


def _check(op: str, feeds, n: int, exact: bool = True, on_c: bool = False, **attrs) -> None:
    model = _model(op, feeds, n, **attrs)
    want = ReferenceEvaluator(model).run(None, feeds)
    module, weights = import_model(model, known_inputs={"T": feeds["T"]})  # as the runner does
    given = {p.name: feeds[p.name] for p in module.entry.params if p.name in feeds}
    runs = [reference.run(module, dict(weights, **given))]
    if on_c:
        runs.append(c.run(module, dict(weights, **given)))
    for got in runs:
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            w = np.asarray(w).astype(feeds["X0"].dtype)  # ONNX: X's type (numpy may widen)
            assert g.dtype == w.dtype and g.shape == w.shape
            if exact:
                assert same_bits(g, w).all(), (op, k, g, w)
            else:  # through pow, whose last bit IR_SPEC leaves to the implementation
                np.testing.assert_allclose(g, w, rtol=1e-6)


attr = st.floats(0.0, 1.0, width=32)
EPS = st.floats(1e-6, 1e-1).map(lambda e: float(np.float32(e)))  # an f32 attribute
dtypes = st.sampled_from([(np.float32, np.float32), (np.float64, np.float64),
                          (np.float32, np.float64), (np.float64, np.float32)])  # fmt: skip


@given(data=st.data(), dts=dtypes, n=st.integers(1, 3), step=st.integers(0, 3))
def test_momentum_is_the_reference(data, dts, n, step) -> None:
    mode = data.draw(st.sampled_from(["standard", "nesterov"]))
    feeds = _case("Momentum", data, n, *dts, step)
    _check("Momentum", feeds, n, mode=mode, alpha=data.draw(attr), beta=data.draw(attr),
           norm_coefficient=data.draw(attr))  # fmt: skip


@given(data=st.data(), dts=dtypes, n=st.integers(1, 3), step=st.integers(0, 3))
def test_adagrad_is_the_reference(data, dts, n, step) -> None:
    feeds = _case("Adagrad", data, n, *dts, step)
    _check("Adagrad", feeds, n, decay_factor=data.draw(attr), norm_coefficient=data.draw(attr),
           epsilon=data.draw(EPS))  # fmt: skip


@given(data=st.data(), dts=dtypes, n=st.integers(1, 3), step=st.integers(0, 3))
def test_adam_is_the_reference(data, dts, n, step) -> None:
    if n > 1:  # the reference rounds several Adam outputs to f32 whatever X's dtype (ONNX
        dts = (np.float32, dts[1])  # declares them X's), so those cases take f32 tensors
    feeds = _case("Adam", data, n, *dts, step)
    _check("Adam", feeds, n, exact=step == 0, alpha=data.draw(attr), beta=data.draw(attr),
           norm_coefficient=data.draw(attr), norm_coefficient_post=data.draw(attr),
           epsilon=data.draw(EPS))  # fmt: skip


def test_on_c_and_refusals() -> None:
    rng = np.random.default_rng(0)
    feeds = {"R": np.array(0.1, np.float32), "T": np.array(2, np.int64)}
    feeds |= {f"{k}0": rng.random(3).astype(np.float32) for k in "XGVH"}
    _check("Momentum", {k: feeds[k] for k in ["R", "T", "X0", "G0", "V0"]}, 1, on_c=True,
           mode="nesterov", alpha=0.9, beta=0.5, norm_coefficient=0.01)  # fmt: skip
    _check("Adagrad", {k: feeds[k] for k in ["R", "T", "X0", "G0", "H0"]}, 1, on_c=True,
           decay_factor=0.1, epsilon=1e-5, norm_coefficient=0.01)  # fmt: skip
    _check("Adam", feeds, 1, on_c=True, exact=False, alpha=0.9, beta=0.99, epsilon=1e-5)
    # T picks a branch: it must be known at import
    model = _model("Momentum", {k: feeds[k] for k in ["R", "T", "X0", "G0", "V0"]}, 1,
                   alpha=0.9, beta=0.5, norm_coefficient=0.0)  # fmt: skip
    with pytest.raises(Unsupported, match="Momentum .* at node #0 .*step count T must be a con"):
        import_model(model)
    model.graph.initializer.append(numpy_helper.from_array(np.array(1, np.int64), "T"))
    import_model(model)
    half = {k: v.astype(np.float16) if k != "T" else v for k, v in feeds.items()}
    with pytest.raises(Unsupported, match="Adam .* at node #0 .*f32 or f64"):
        import_model(_model("Adam", half, 1))
    model = _model("Momentum", {k: feeds[k] for k in ["R", "T", "X0", "G0", "V0"]}, 1)
    model.graph.node[0].domain = "ai.onnx.preview.other"
    with pytest.raises(Unsupported, match="domain 'ai.onnx.preview.other' is not supported"):
        import_model(model)


def test_the_node_tests_expected_data_uses_f64_attributes() -> None:
    """test_adam_multiple passes within the tolerance, not bit for bit: its generator computed
    (1 - alpha) from the Python float 0.95, while the model holds alpha as an f32 attribute
    (0.949999988..); gdv and ONNX's reference evaluator on the model agree bit for bit."""
    x = np.array([1.0], np.float32)
    f32_alpha = float(np.float32(0.95))
    assert np.float32(1 - 0.95) != np.float32(1 - f32_alpha)
    feeds = {"R": np.array(0.1, np.float32), "T": np.array(0, np.int64),
             "X0": x, "G0": -x, "V0": 2 * x, "H0": 0.5 * x}  # fmt: skip
    _check("Adam", feeds, 1, alpha=0.95, beta=0.85, epsilon=0.01, norm_coefficient=0.001)


def test_one_minus_an_attribute_is_an_f32_subtraction() -> None:
    """ONNX's reference holds FLOAT attributes as np.float32, so Adam's 1 - alpha, 1 - beta
    and 1 - norm_coefficient_post are f32 subtractions even for f64 tensors (where 1 - post
    computed in f64 would differ: post = 0.21527319 is an f32 whose 1 - post is not)."""
    post = float(np.float32(0.2152731865644455))
    assert np.float64(1 - post) != np.float32(1) - np.float32(post)
    feeds = {"R": np.array(1.0), "T": np.array(0, np.int64), "X0": np.array([0.0]),
             "G0": np.array([1.0]), "V0": np.array([0.0]), "H0": np.array([0.0])}  # fmt: skip
    for alpha, beta in [(0.0, 0.0), (post, 0.7), (0.3, post)]:
        _check("Adam", feeds, 1, alpha=alpha, beta=beta, norm_coefficient_post=post,
               epsilon=0.0625)  # fmt: skip
