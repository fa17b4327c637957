"""f32/f64 max and min on the C target against the reference (IR_SPEC's order: NaN operands
kept, `a`'s first; -0.0 < +0.0), with one operand a constant on either side and every special
value on the other: signed zeros, infinities, NaNs of both signs with payloads, subnormals.
At -O2 the constant is a literal inside the kernel's body, and max/min against a literal that
is not NaN print as one compare (`backends/c/elementwise.py`, `_extreme_with_constant`; a
-0.0 constant takes the strict compare); a NaN literal and the -O0 buffer keep the helper
`gdv_max_*`, which two variable operands always use: every pair of special values, and pairs of
random bit patterns, go through it in both orders. Every form must give the reference's bits."""

from __future__ import annotations

import numpy as np
import pytest

from gdv.backends import c, reference
from gdv.ir.parser import parse
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline

CONSTANTS = ["0.0", "-0.0", "6.0", "-2.5", "inf", "-inf", "nan"]


def _specials(dtype: np.dtype) -> np.ndarray:
    finfo = np.finfo(dtype)
    vals = [0.0, -0.0, 1.0, -1.0, 6.0, -2.5, 7.5, -7.5, np.inf, -np.inf, finfo.tiny / 4,
            -finfo.tiny / 4, finfo.max, -finfo.max]  # fmt: skip
    x = np.array(vals, dtype)
    bits = np.uint32 if dtype == np.float32 else np.uint64
    width = 32 if dtype == np.float32 else 64
    quiet = (1 << (width - 1)) - 1  # every bit but the sign: a NaN with a full payload
    nans = np.array([quiet, quiet | (1 << (width - 1)), quiet ^ 0b101], bits).view(dtype)
    rng = np.random.default_rng(0)
    noise = (rng.standard_normal(41) * 4).astype(dtype)
    return np.concatenate([x, nans, noise])


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("const", CONSTANTS)
@pytest.mark.parametrize("level", [0, 2])
def test_an_extreme_with_a_constant_operand(dtype: str, kind: str, const: str, level: int) -> None:
    npdt = np.float32 if dtype == "f32" else np.float64
    x = _specials(npdt)
    n = x.size
    text = (
        f"func @main(%x: {dtype}[{n}]) -> ({dtype}[{n}], {dtype}[{n}]) {{\n"
        f"  %k = constant() {{value = {const}}} : {dtype}[{n}]\n"
        f"  %a = {kind}(%x, %k) : {dtype}[{n}]\n"
        f"  %b = {kind}(%k, %x) : {dtype}[{n}]\n"
        "  return %a, %b\n}\n"
    )
    module = PassManager(pipeline("c", level, **c.schedule_parameters())).run(parse(text)).module
    if level:
        assert {op.name for op in module.entry.ops} <= {"kernel", "constant"}
    got = c.run(module, {"x": x})
    want = reference.run(parse(text), {"x": x})
    for g, w in zip(got, want, strict=True):
        assert reference.bit_equal(g, w), reference.describe_difference(g, w)


def _random_bits(dtype: np.dtype, n: int, seed: int) -> np.ndarray:
    """n values of uniformly random bits: a NaN (of either sign, any payload) about once in
    256 for f32, and the rest spread over every exponent."""
    bits = np.uint32 if dtype == np.float32 else np.uint64
    info = np.iinfo(bits)
    rng = np.random.default_rng(seed)
    return rng.integers(0, info.max, size=n, dtype=bits, endpoint=True).view(dtype)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("level", [0, 2])
def test_an_extreme_of_two_variables_on_every_pair_of_specials(dtype: str, level: int) -> None:
    npdt = np.float32 if dtype == "f32" else np.float64
    sp = _specials(npdt)
    x = np.concatenate([np.repeat(sp, sp.size), _random_bits(npdt, 4096, 1), sp[:8]])
    y = np.concatenate([np.tile(sp, sp.size), _random_bits(npdt, 4096, 2), sp[:8]])
    # equal operands too: equal nonzero values have equal bits, and NaN against itself
    y[-8:] = x[-8:]
    n = x.size
    text = (
        f"func @main(%x: {dtype}[{n}], %y: {dtype}[{n}]) -> "
        f"({dtype}[{n}], {dtype}[{n}], {dtype}[{n}], {dtype}[{n}]) {{\n"
        f"  %a = max(%x, %y) : {dtype}[{n}]\n"
        f"  %b = max(%y, %x) : {dtype}[{n}]\n"
        f"  %c = min(%x, %y) : {dtype}[{n}]\n"
        f"  %d = min(%y, %x) : {dtype}[{n}]\n"
        "  return %a, %b, %c, %d\n}\n"
    )
    module = PassManager(pipeline("c", level, **c.schedule_parameters())).run(parse(text)).module
    source = c.lower(module)
    assert f"gdv_max_{dtype}(" in source and f"gdv_min_{dtype}(" in source
    got = c.run(module, {"x": x, "y": y})
    want = reference.run(parse(text), {"x": x, "y": y})
    for g, w in zip(got, want, strict=True):
        assert reference.bit_equal(g, w), reference.describe_difference(g, w)
