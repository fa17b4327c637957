"""Every example the C target supports, compiled at -O2 and run on seeded inputs, is bit-exact
equal to the reference backend (transcendentals included: the C target evaluates them in
double and rounds once, as the reference does, and on these inputs the results agree bit for
bit)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gdv.backends import c, reference
from gdv.driver import CompileOptions, compile_module

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SUPPORTED = ["attention", "bf16_matmul", "conv_block", "layernorm_gelu", "mlp"]


@pytest.mark.parametrize("name", SUPPORTED)
def test_example_bit_exact_to_reference(name: str) -> None:
    comp = compile_module(str(EXAMPLES / f"{name}.gdv"), CompileOptions(level=2))
    assert comp.verdict == "proved"
    for seed in (0, 1):
        inputs = reference.random_inputs(comp.module.entry, seed)
        got = c.run(comp.module, inputs)
        want = reference.run(comp.module, inputs)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert reference.bit_equal(g, w), reference.describe_difference(g, w)


def test_every_example_is_covered() -> None:
    names = {p.stem for p in EXAMPLES.glob("*.gdv")}
    assert names == set(SUPPORTED)
