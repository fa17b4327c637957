"""ONNX's ai.onnx.preview ops that ONNX defines by a function body (FlexAttention) import as
that body, as the default domain's function ops do: gdv's import of the node is bit for bit
its import of the body onnx's own expansion helper writes out, and close to ONNX's reference
evaluator (which computes it otherwise in numpy); other preview ops are refused by domain."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.backend.test.case.node import function_testcase_helper
from onnx.reference import ReferenceEvaluator

from gdv.backends import reference
from gdv.frontends.onnx import Unsupported, import_model
from gdv.validate.counterexample import same_bits

PREVIEW = "ai.onnx.preview"
OPSETS = [helper.make_opsetid("", 26), helper.make_opsetid(PREVIEW, 1)]


def _run(model, feeds):
    module, weights = import_model(model)
    return reference.run(module, dict(weights, **feeds))[0]


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_flex_attention_is_its_function_body(data) -> None:
    b, h, q, kv = (data.draw(st.integers(1, n)) for n in (2, 3, 4, 5))
    d, dv = data.draw(st.integers(2, 8)), data.draw(st.integers(2, 8))
    dt = data.draw(st.sampled_from([np.float32, np.float64]))
    code = TensorProto.FLOAT if dt is np.float32 else TensorProto.DOUBLE
    attrs = {}
    if data.draw(st.booleans()):
        attrs["scale"] = data.draw(st.floats(0.0625, 2.0, width=32))
    shapes = {"Q": (b, h, q, d), "K": (b, h, kv, d), "V": (b, h, kv, dv)}
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    feeds = {n: rng.standard_normal(s).astype(dt) for n, s in shapes.items()}
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain=PREVIEW, **attrs)
    ins = [helper.make_tensor_value_info(n, code, s) for n, s in shapes.items()]
    out = [helper.make_tensor_value_info("Y", code, None)]
    model = helper.make_model(helper.make_graph([node], "g", ins, out), opset_imports=OPSETS)
    ((body, body_opset),), _ = function_testcase_helper(
        node, [i.type for i in ins], "flex", opset_imports=OPSETS
    )
    versions = {o.domain: o.version for o in OPSETS} | {o.domain: o.version for o in body_opset}
    opsets = [helper.make_opsetid(k, v) for k, v in versions.items()]  # as onnx's expect()
    expanded = helper.make_model(helper.make_graph(body, "e", ins, out), opset_imports=opsets)
    got = _run(model, feeds)
    assert same_bits(got, _run(expanded, feeds)).all()
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4 if dt is np.float32 else 1e-10, atol=1e-6)


def test_other_preview_ops_are_refused_by_domain() -> None:
    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain=PREVIEW)
    g = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )  # fmt: skip
    with pytest.raises(Unsupported, match="NoSuchOp .* at node #0 .*domain 'ai.onnx.preview'"):
        import_model(helper.make_model(g, opset_imports=OPSETS))
