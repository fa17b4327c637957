"""Which thread pads what (issue 16): a pad between products whose threads split their columns
(a conv's output positions, `split = "columns"`, its operand's being its last two dims) splits
the rows of each plane the same way (`layout.PAD_PLANES`), so that each thread copies what it
computed and the next conv's thread reads what it copied; other pads split all their rows in
one run. Neither changes a bit: the C program's result equals the reference's at 1, 2 and 3
OpenMP threads (each count in a process of its own, as OpenMP reads OMP_NUM_THREADS once per
process)."""

# ruff: noqa: E501  (IR programs written out line by line)

from __future__ import annotations

import numpy as np
import pytest

from gdv.api import parse
from gdv.backends import c, reference
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline

from .test_thread_splits import CONV, _inputs, _run_with_threads

EARLY = f"""func @main(%x: f32[1,64,30,30], %w1: f32[64,64,3,3], %w2: f32[64,64,3,3]) -> f32[1,64,30,30] {{
  %c1 = conv2d(%x, %w1) {{{CONV}}} : f32[1,64,30,30]
  %z = constant() {{value = 0.0}} : f32[1,64,30,30]
  %r1 = max(%c1, %z) : f32[1,64,30,30]
  %c2 = conv2d(%r1, %w2) {{{CONV}}} : f32[1,64,30,30]
  return %c2
}}
"""
"""resnet18's first stage in small: 3x3 convs of 64 channels, many more positions (900) than
channels, so the first conv's columns are split and its relu'd result is padded for the
second. The first pad pads the parameter %x."""

POOLED = f"""func @main(%x: f32[1,64,30,30], %w1: f32[64,64,3,3]) -> f32[1,64,32,32] {{
  %c1 = conv2d(%x, %w1) {{{CONV}}} : f32[1,64,30,30]
  %p = pad(%c1) {{low = [0, 0, 1, 1], high = [0, 0, 1, 1], value = -inf}} : f32[1,64,32,32]
  %q = add(%p, %p) : f32[1,64,32,32]
  return %q
}}
"""
"""A column-split conv's result padded for an elementwise reader (as resnet18's max pool reads
its -inf pad): the pad keeps the one run of rows."""


def _pads(module) -> dict[str, str]:
    """Each pad's recorded thread split, by result name."""
    return {
        ch["kernel"]: ch["value"]
        for ch in c.printer_choices(module)
        if ch["op"] == "pad" and ch["choice"] == "parallel"
    }


def test_a_pad_of_a_column_split_conv_splits_plane_rows() -> None:
    module = PassManager(pipeline("c", 2)).run(parse(EARLY)).module
    ops = module.entry.ops
    pads = [op for op in ops if op.name == "pad"]
    assert len(pads) == 2
    producer = {op.result: op for op in ops}
    first, second = pads
    assert first.operands[0] == "x"  # the parameter: no product wrote it
    conv = producer[second.operands[0]]
    assert conv.attrs["strategy"] == "product" and conv.attrs["split"] == "columns"
    assert _pads(module) == {first.result: "rows", second.result: "plane rows"}


def test_a_pad_read_by_no_product_keeps_one_run_of_rows() -> None:
    # without fold-pads, which folds this pad into the nest that reads it (`fold_pads.NESTS`)
    passes = [p for p in pipeline("c", 2) if p.name != "fold-pads"]
    module = PassManager(passes).run(parse(POOLED)).module
    ops = module.entry.ops
    first, pad = [op for op in ops if op.name == "pad"]
    assert first.operands[0] == "x"  # the conv's own padding
    (conv,) = [op for op in ops if op.result == pad.operands[0]]
    assert conv.attrs["strategy"] == "product" and conv.attrs["split"] == "columns"
    assert _pads(module) == {first.result: "rows", pad.result: "rows"}


def test_the_plane_split_can_be_turned_off(monkeypatch) -> None:
    from gdv.backends.c import layout

    monkeypatch.setattr(layout, "PAD_PLANES", False)
    module = PassManager(pipeline("c", 2)).run(parse(EARLY)).module
    assert set(_pads(module).values()) == {"rows"}


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("program", ["early", "pooled"])
def test_every_thread_count_gives_the_reference_bits(tmp_path, program, threads) -> None:
    source = {"early": EARLY, "pooled": POOLED}[program]
    inputs = _inputs(source, 11)
    inputs["x"][0, 5, 0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    want = reference.run(parse(source), inputs)[0]
    got = _run_with_threads(tmp_path, source, inputs, threads)
    assert reference.bit_equal(got, want), (threads, reference.describe_difference(got, want))
