"""Composites mean exactly their decomposition: running one equals running the function
written out with the ops its spec decomposes it into."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gdv.backends.reference import bit_equal, describe_difference, random_inputs, run
from gdv.ir.core import Function, Op
from gdv.ir.ops import REGISTRY
from gdv.ir.parser import parse

CASES = {
    "matmul": """
        func @main(%a: {t}[2,3,4], %b: {t}[2,4,5]) -> {t}[2,3,5] {{
          %r = matmul(%a, %b) : {t}[2,3,5]
          return %r
        }}""",
    "softmax": """
        func @main(%x: {t}[3,7] {{range = [-20.0, 20.0]}}) -> {t}[3,7] {{
          %r = softmax(%x) {{axis = 1}} : {t}[3,7]
          return %r
        }}""",
    "log_softmax": """
        func @main(%x: {t}[4,6]) -> {t}[4,6] {{
          %r = log_softmax(%x) {{axis = 0}} : {t}[4,6]
          return %r
        }}""",
    "layer_norm": """
        func @main(%x: {t}[2,3,8], %g: {t}[3,8], %b: {t}[3,8]) -> {t}[2,3,8] {{
          %r = layer_norm(%x, %g, %b) {{axes = [1, 2], eps = 1e-5}} : {t}[2,3,8]
          return %r
        }}""",
    "gelu_none": """
        func @main(%x: {t}[64] {{range = [-6.0, 6.0]}}) -> {t}[64] {{
          %r = gelu(%x) {{approximate = "none"}} : {t}[64]
          return %r
        }}""",
    "gelu_tanh": """
        func @main(%x: {t}[64] {{range = [-6.0, 6.0]}}) -> {t}[64] {{
          %r = gelu(%x) {{approximate = "tanh"}} : {t}[64]
          return %r
        }}""",
}


def test_every_composite_has_a_case() -> None:
    composites = {s.name for s in REGISTRY.values() if s.is_composite}
    covered = {name.split("_none")[0].split("_tanh")[0] for name in CASES}
    assert composites <= covered, composites - covered


def _decomposed(fn: Function) -> Function:
    """`fn` with each composite replaced by its spec's ops (names made unique here, in the
    test, independently of the backend's own renaming)."""
    ops: list[Op] = []
    counter = iter(range(10**6))
    for op in fn.ops:
        spec = REGISTRY[op.name]
        if spec.is_composite:
            ops.extend(spec.decompose(op, lambda base: f"{base}.t{next(counter)}"))
        else:
            ops.append(op)
    assert all(not REGISTRY[o.name].is_composite for o in ops)
    return Function(fn.name, fn.params, fn.results, ops, fn.returns)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16", "f64"])
@pytest.mark.parametrize("mode", ["exact", "ideal"])
def test_composite_equals_its_decomposition(case: str, dtype: str, mode: str) -> None:
    fn = parse(CASES[case].format(t=dtype)).entry
    inputs = random_inputs(fn, seed=3)
    got = run(fn, inputs, mode=mode)
    want = run(_decomposed(fn), inputs, mode=mode)
    assert bit_equal(got[0], want[0]), describe_difference(got[0], want[0])


def test_composites_compute_what_they_are_named_for() -> None:
    # Sanity against textbook formulas in f64 (not bit-exact: transcendentals differ).
    x = np.linspace(-3, 3, 64)
    fn = parse(CASES["gelu_none"].format(t="f64")).entry
    gelu = run(fn, {"x": x})[0]
    want = 0.5 * x * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x]))
    np.testing.assert_allclose(gelu, want, rtol=1e-14, atol=1e-15)
    sm = parse(CASES["softmax"].format(t="f64")).entry
    xs = np.random.default_rng(0).uniform(-5, 5, (3, 7))
    e = np.exp(xs - xs.max(axis=1, keepdims=True))
    np.testing.assert_allclose(run(sm, {"x": xs})[0], e / e.sum(axis=1, keepdims=True), rtol=1e-14)


def test_layer_norm_constants_are_rounded_to_the_dtype() -> None:
    # eps = 1e-5 and n = 24 are constants in bf16; the ideal run keeps them in f64: the two
    # results differ, and the exact one equals the decomposition (tested above).
    fn = parse(CASES["layer_norm"].format(t="bf16")).entry
    inputs = random_inputs(fn, seed=0)
    exact = run(fn, inputs)[0].astype(np.float64)
    ideal = run(fn, inputs, mode="ideal")[0]
    assert ideal.dtype == np.float64
    assert not np.array_equal(exact, ideal)
    assert np.max(np.abs(exact - ideal)) < 0.1
