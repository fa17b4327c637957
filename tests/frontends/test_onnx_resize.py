"""ONNX Resize in linear and cubic modes imports as a weighted sum of input elements at static
positions along each resized axis (`frontends/onnx.py`, `_resize_interpolated`), with ONNX's own
positions and weights: checked against ONNX's reference evaluator for every coordinate mode,
`antialias`, `exclude_outside`, `cubic_coeff_a`, scales and sizes, up- and downsampling, and
tf_crop_and_resize's roi and extrapolation value; run on the reference and the C target; and
the refusals, each naming the reason."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from gdv.backends import reference
from gdv.frontends.onnx import Unsupported, import_model

MODES = [
    "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
]  # fmt: skip


def model(
    shape: tuple[int, ...],
    scales: list[float] | None = None,
    sizes: list[int] | None = None,
    roi: list[float] | None = None,
    **attrs: Any,
) -> onnx.ModelProto:
    inits, names = [], ["x", "", "", ""]
    if roi is not None:
        inits.append(numpy_helper.from_array(np.array(roi, np.float32), "roi"))
        names[1] = "roi"
    if scales is not None:
        inits.append(numpy_helper.from_array(np.array(scales, np.float32), "scales"))
        names[2] = "scales"
    if sizes is not None:
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
        names[3] = "sizes"
    while not names[-1]:
        names.pop()
    g = helper.make_graph(
        [helper.make_node("Resize", names, ["y"], **attrs)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def _check(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    module, weights = import_model(m)
    got = reference.run(module, dict(weights, x=x))[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return got


@settings(deadline=None, max_examples=40)
@given(
    st.sampled_from(["linear", "cubic"]),
    st.sampled_from(MODES),
    st.integers(1, 9),
    st.integers(1, 9),
    st.sampled_from([0.5, 0.6, 1.0, 1.5, 2.0, 2.5, 3.0]),
    st.sampled_from([0.5, 0.75, 1.0, 1.7, 2.0]),
    st.booleans(),
    st.booleans(),
    st.integers(0, 2**31),
)
def test_scales_match_onnx_reference(mode, ctm, h, w, sh, sw, antialias, exclude, seed) -> None:
    x = np.random.default_rng(seed).standard_normal((1, 2, h, w)).astype(np.float32)
    attrs = dict(mode=mode, coordinate_transformation_mode=ctm, antialias=int(antialias))
    if mode == "cubic":
        attrs.update(exclude_outside=int(exclude), cubic_coeff_a=-0.5 if exclude else -0.75)
    m = model(x.shape, scales=[1.0, 1.0, sh, sw], **attrs)
    try:
        want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    except Exception:  # noqa: BLE001 -- a configuration ONNX's own reference cannot run
        return
    if 0 in want.shape:
        return
    _check(m, x)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_sizes_and_tf_crop_and_resize_with_extrapolation(mode: str) -> None:
    x = np.arange(2 * 5 * 6, dtype=np.float32).reshape(1, 2, 5, 6) / 7.0
    _check(model(x.shape, sizes=[1, 2, 8, 3], mode=mode), x)
    m = model(
        x.shape,
        sizes=[1, 2, 7, 7],
        roi=[0, 0, 0.2, -0.3, 1, 1, 1.3, 0.9],
        mode=mode,
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=-5.0,
    )
    got = _check(m, x)
    assert (got == -5.0).any()  # positions outside the roi take the extrapolation value


def test_the_c_target_runs_the_imported_resize() -> None:
    from gdv.driver import CompileOptions, compile_module
    from gdv.ir.printer import print_module

    x = np.random.default_rng(3).standard_normal((1, 3, 11, 13)).astype(np.float32)
    m = model(x.shape, scales=[1, 1, 2.5, 0.6], mode="cubic", antialias=1)
    module, weights = import_model(m)
    comp = compile_module(print_module(module), CompileOptions(target="c", level=2, jobs=1))
    assert comp.verdict == "proved"
    got = comp(x=x, **weights)[0]
    want = reference.run(module, dict(weights, x=x))[0]
    np.testing.assert_array_equal(got, want)  # no transcendental: the C bits are the reference's


def test_refusals_name_the_reason() -> None:
    with pytest.raises(Unsupported, match="keep_aspect_ratio_policy 'not_larger'"):
        import_model(model((1, 1, 4, 4), sizes=[1, 1, 6, 8], mode="linear",
                           keep_aspect_ratio_policy="not_larger"))  # fmt: skip
    with pytest.raises(Unsupported, match="tf_crop_and_resize needs a roi of 8 values"):
        import_model(model((1, 1, 4, 4), scales=[1, 1, 2, 2], mode="linear",
                           coordinate_transformation_mode="tf_crop_and_resize"))  # fmt: skip
    g = helper.make_graph(
        [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.INT32, [1, 1, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")],
    )
    with pytest.raises(Unsupported, match="i32 operands are not supported"):
        import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]))
