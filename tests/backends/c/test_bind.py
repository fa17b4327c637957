"""Bound weights on the C target (`Executable.bind`, `Compilation.bind`; issue 16).

Binding fixes some parameters, as onnxruntime fixes a model's initializers: the executable
copies them, and every product factor read only from bound parameters is packed once, at bind
time, by the packing code of the per-call path run over all reduce positions, into the slivers
the micro-kernel reads. Nothing of the program changes, so a bound call must give bit for bit
what the reference backend gives on the same values. Hypothesis draws the contractions of
test_fast_kernels (edge slivers, several reduce blocks, transposed and strided operands,
prologues on either factor, batch dims, special values) and which parameters to bind.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gdv
from gdv.api import parse
from gdv.backends import c, reference
from gdv.backends.c.simd import BLOCKING_ENV, VECTOR_BYTES_ENV
from gdv.ir.diagnostics import IRError
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline

from .test_fast_kernels import _env, contractions, scheduled


def _bit_equal(got, want, text: str = "") -> None:
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert reference.bit_equal(g, w), (
            f"result {k}:\n{reference.describe_difference(g, w)}\n{text}"
        )


@settings(max_examples=40)
@given(
    case=contractions(),
    bind=st.sampled_from([("a",), ("b",), ("a", "b"), ("b", "c"), ("a", "c"), ("a", "b", "c")]),
    vector=st.sampled_from(["64", "32"]),
    blocking=st.sampled_from([None, "8,16,32", "5,3,17"]),
)
def test_bound_contractions_bit_exact(case, bind, vector: str, blocking: str | None) -> None:
    text, inputs = case
    module = parse(text)
    names = [n for n in bind if n in inputs]
    with _env(**{VECTOR_BYTES_ENV: vector, BLOCKING_ENV: blocking}):
        module = scheduled(module)
        exe = c.Executable(module)
    want = reference.run(module, inputs)
    bound = exe.bind({n: inputs[n] for n in names})
    assert bound.bound == tuple(n for n in ("a", "b", "c") if n in names)
    for pre in exe._prepacks:  # packed exactly when every parameter it reads is bound
        assert bool(bound._pointers[pre.slot]) == (set(pre.params) <= set(names))
    rest = {n: v for n, v in inputs.items() if n not in names}
    _bit_equal(bound(rest), want, text)
    _bit_equal(bound(rest), want, text)  # the panels are read, never written, by a call
    _bit_equal(exe(inputs), want, text)  # the unbound executable still packs per call


PRODUCT = """func @main(%x: f32[{m},{k}], %w: f32[{k},{n}]) -> f32[{m},{n}] {{
  %y = dot(%x, %w) {{lhs_contract = [1], rhs_contract = [0], lhs_batch = [],
      rhs_batch = []}} : f32[{m},{n}]
  return %y
}}
"""
LINEAR = """func @main(%x: f32[{m},{k}], %w: f32[{n},{k}]) -> f32[{m},{n}] {{
  %y = dot(%x, %w) {{lhs_contract = [1], rhs_contract = [1], lhs_batch = [],
      rhs_batch = []}} : f32[{m},{n}]
  return %y
}}
"""


def _compiled(text: str, level: int = 2, blocking: tuple | None = None) -> c.Executable:
    params = c.schedule_parameters()
    if blocking is not None:
        params["blocking"] = blocking
    return c.Executable(PassManager(pipeline("c", level, **params)).run(parse(text)).module)


def _inputs(text: str, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    fn = parse(text).entry
    return {p.name: rng.standard_normal(p.type.shape).astype(p.type.dtype.np) for p in fn.params}


@pytest.mark.parametrize(
    ("text", "m", "k", "n", "level"),
    [
        (PRODUCT, 40, 1500, 50, 2),  # several reduce blocks, edge slivers both ways
        (PRODUCT, 200, 96, 333, 2),  # large enough for both threads
        (LINEAR, 12, 384, 100, 2),  # x @ W^T, W read as rows (weights_as_rows)
        (LINEAR, 37, 200, 70, 3),  # -O3: the fused multiply-add micro-kernel
        (PRODUCT, 5, 1000, 17, 3),
    ],
)
def test_panels_are_what_calls_read(text: str, m: int, k: int, n: int, level: int) -> None:
    """A bound call reads the panels packed at bind time: it equals the reference, and
    clearing the panels (white box) changes its result."""
    src = text.format(m=m, k=k, n=n)
    exe = _compiled(src, level, blocking=(64, 32, 64))
    inputs = _inputs(src)
    want = reference.run(parse(src), inputs) if level == 2 else exe(inputs)
    bound = exe.bind({"w": inputs["w"]})
    (pre,) = [p for p in exe._prepacks if p.params == ("w",)]
    got = bound({"x": inputs["x"]})
    _bit_equal(got, want, src)
    _bit_equal(exe(inputs), want, src)
    bound._buffers[pre.slot][:] = 0
    assert not np.array_equal(bound({"x": inputs["x"]})[0], want[0])


def test_bind_copies_the_weights() -> None:
    src = PRODUCT.format(m=20, k=50, n=30)
    exe = _compiled(src)
    inputs = _inputs(src)
    want = exe(inputs)
    w = inputs["w"].copy()
    bound = exe.bind({"w": w})
    w[...] = np.nan  # the caller's array changes; the bound weights do not
    _bit_equal(bound({"x": inputs["x"]}), want)
    assert not bound._held["w"].flags.writeable


def test_bind_errors_name_the_parameter() -> None:
    src = PRODUCT.format(m=4, k=8, n=8)
    exe = _compiled(src)
    inputs = _inputs(src)
    with pytest.raises(IRError, match="no parameter named v"):
        exe.bind({"v": inputs["w"]})
    with pytest.raises(IRError, match="%w"):  # the call's own checks: wrong shape
        exe.bind({"w": inputs["w"][:4]})
    bound = exe.bind({"w": inputs["w"]})
    with pytest.raises(IRError, match="w: bound by bind"):
        bound(inputs)
    with pytest.raises(IRError, match="already bound"):
        bound.bind({"w": inputs["w"]})
    with pytest.raises(IRError, match="missing input for parameter %x"):
        bound({})
    # a slow-path input (another dtype) is converted as for an unbound call
    slow = bound({"x": inputs["x"].astype(np.float64).astype(np.float32)[:, ::1].copy(order="F")})
    _bit_equal(slow, exe(inputs))


def test_a_factor_with_an_unbound_parameter_is_packed_per_call() -> None:
    """relu(w + s) * x with only w bound: the factor reads s too, so it is not prepacked."""
    src = """func @main(%x: f32[30,64], %w: f32[64,40], %s: f32[64,40]) -> f32[30,40] {
  %y = kernel(%x, %w, %s) {body = "f", space = [30, 40, 64], maps = [[[1, 0, 0, 0], [0, 0, 1, 0]],
      [[0, 0, 1, 0], [0, 1, 0, 0]], [[0, 0, 1, 0], [0, 1, 0, 0]]], out = [0, 1], reduce = [2],
      combiner = "add"} : f32[30,40]
  return %y
}
func @f(%a: f32[], %b: f32[], %c: f32[]) -> f32[] {
  %t = add(%b, %c) : f32[]
  %u = relu(%t) : f32[]
  %q = mul(%a, %u) : f32[]
  return %q
}
"""
    exe = _compiled(src)
    inputs = _inputs(src)
    want = reference.run(parse(src), inputs)
    half = exe.bind({"w": inputs["w"]})
    assert all(not half._pointers[p.slot] for p in exe._prepacks)
    _bit_equal(half({"x": inputs["x"], "s": inputs["s"]}), want)
    both = exe.bind({"w": inputs["w"], "s": inputs["s"]})
    assert any(both._pointers[p.slot] and p.params == ("s", "w") for p in exe._prepacks)
    _bit_equal(both({"x": inputs["x"]}), want)


def test_bound_conv_is_bit_exact() -> None:
    """A conv lowered to a product: its weights are the row factor, read in place on a small
    image, and packed once when bound."""
    src = """func @main(%x: f32[1,32,9,9], %w: f32[48,32,3,3]) -> f32[1,48,9,9] {
  %y = conv2d(%x, %w) {stride = [1, 1], padding = [[1, 1], [1, 1]], dilation = [1, 1],
      groups = 1} : f32[1,48,9,9]
  return %y
}
"""
    exe = _compiled(src)
    inputs = _inputs(src)
    bound = exe.bind({"w": inputs["w"]})
    assert any(bound._pointers[p.slot] for p in exe._prepacks)
    _bit_equal(bound({"x": inputs["x"]}), reference.run(parse(src), inputs))


@pytest.mark.parametrize("target", ["c", "reference"])
def test_compilation_bind(target: str) -> None:
    src = PRODUCT.format(m=6, k=20, n=10)
    comp = gdv.compile(src, target=target)
    inputs = _inputs(src)
    bound = comp.bind(w=inputs["w"])
    _bit_equal(bound(x=inputs["x"]), comp(**inputs))
    with pytest.raises(IRError, match="bound by bind"):
        bound(**inputs)
