"""`plan-memory`'s placement (issue 16): first fit by liveness, except that no value takes the
bytes of a product's shared factor (a factor every thread of the product reads whole,
`plan_memory.shared_factors`; `KEEP_SHARED`). Either way no two buffers live at one time
share a byte (the `memory-safety` claim, checked here with the independent checker's query),
and the C program computes the reference's bits from the plan."""

# ruff: noqa: E501  (IR programs written out line by line)

from __future__ import annotations

import numpy as np
import pytest
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends import c, reference
from gdv.passes import plan_memory
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline
from gdv.validate.schedules import memory_violation

CONV = "stride = [1, 1], padding = [[1, 1], [1, 1]], dilation = [1, 1], groups = 1"


def _convs(n: int, ch: int = 128, side: int = 28) -> str:
    """`n` 3x3 convs in a row, each relu'd: resnet18's second stage, whose 576 KiB weights
    make each conv split its rows (output channels) between the threads, so that every thread
    packs the whole padded input."""
    t = f"f32[1,{ch},{side},{side}]"
    ws = ", ".join(f"%w{k}: f32[{ch},{ch},3,3]" for k in range(n))
    lines = [f"func @main(%x: {t}, {ws}) -> {t} {{", f"  %z = constant() {{value = 0.0}} : {t}"]
    prev = "%x"
    for k in range(n):
        lines.append(f"  %c{k} = conv2d({prev}, %w{k}) {{{CONV}}} : {t}")
        lines.append(f"  %r{k} = max(%c{k}, %z) : {t}")
        prev = f"%r{k}"
    lines += [f"  return {prev}", "}"]
    return "\n".join(lines) + "\n"


def _compiled(source: str):
    return PassManager(pipeline("c", 2)).run(parse(source)).module


def _safe(entry) -> bool:
    s = z3.Solver()
    s.add(memory_violation(entry))
    return s.check() == z3.unsat


def _overlap(a: list, b: list) -> bool:
    return a[1] < b[1] + b[2] and b[1] < a[1] + a[2] and a[2] > 0 and b[2] > 0


def _bodies(module) -> dict:
    return {f.name: f for f in module.functions}


def test_the_shared_factors_are_the_convs_padded_inputs() -> None:
    module = _compiled(_convs(3))
    entry = module.entry
    products = [op for op in entry.ops if op.attrs.get("strategy") == "product"]
    assert [p.attrs["split"] for p in products] == ["rows"] * 3
    pads = [op.result for op in entry.ops if op.name == "pad"]
    assert len(pads) == 3
    shared = plan_memory.shared_factors(entry, _bodies(module))
    # the column factor, packed whole by every thread; the weights are split between them
    assert shared == set(pads)


NOT_A_PRODUCT = """func @main(%x: f32[4,3], %w: f32[3,5]) -> f32[4,5] {
  %d = kernel(%x, %w) {body = "main.k0", space = [4, 5, 3], maps = [[[1, 0, 0, 0], [0, 0, 1, 0]], [[0, 0, 1, 0], [0, 1, 0, 0]]], out = [0, 1], reduce = [2], combiner = "add", strategy = "product", batch = [], rows = [0], cols = [1], row_factor = 0, micro = [4, 16], blocks = [4, 3, 16], split = "rows"} : f32[4,5]
  %r = kernel(%d) {body = "main.k1", space = [4, 5], maps = [[[1, 0, 0], [0, 1, 0]]], out = [0, 1], reduce = [], combiner = "none"} : f32[4,5]
  return %r
}

func @main.k0(%a0: f32[], %a1: f32[]) -> f32[] {
  return %a0
}

func @main.k1(%a0: f32[]) -> f32[] {
  %r = relu(%a0) : f32[]
  return %r
}
"""
"""A kernel marked as a product whose body ends in no multiply (hand-written, hostile): no
factor is shared, and planning it is no traceback (the C target says why it cannot run it)."""


def test_a_kernel_that_is_no_product_has_no_shared_factor() -> None:
    module = parse(NOT_A_PRODUCT)
    assert plan_memory.shared_factors(module.entry, _bodies(module)) == set()
    planned = PassManager([plan_memory.PlanMemory()]).run(module).module
    assert [b[0] for b in planned.entry.attrs["buffers"]] == ["d"]
    assert _safe(planned.entry)


def test_no_value_takes_a_shared_factors_bytes() -> None:
    module = _compiled(_convs(3))
    entry = module.entry
    buffers = entry.attrs["buffers"]
    shared = plan_memory.shared_factors(entry, _bodies(module))
    for i, b in enumerate(buffers):
        for a in buffers[:i]:
            assert not (a[0] in shared and _overlap(a, b)), (a, b)
    sizes = sum(b[2] for b in buffers)
    assert entry.attrs["arena_bytes"] < sizes, "the other values still share bytes"
    assert _safe(entry)


def test_without_it_a_later_pad_takes_an_earlier_pads_bytes(monkeypatch) -> None:
    monkeypatch.setattr(plan_memory, "KEEP_SHARED", False)
    module = _compiled(_convs(3))
    entry = module.entry
    buffers = entry.attrs["buffers"]
    shared = plan_memory.shared_factors(entry, _bodies(module))
    assert any(
        a[0] in shared and _overlap(a, b) for i, b in enumerate(buffers) for a in buffers[:i]
    )
    assert _safe(entry)


def test_the_program_computes_the_reference_bits() -> None:
    source = _convs(3, ch=128, side=10)
    module = _compiled(source)
    rng = np.random.default_rng(3)
    fn = parse(source).function("main")
    inputs = {
        p.name: (rng.standard_normal(p.type.shape) * 0.1).astype(np.float32) for p in fn.params
    }
    inputs["x"][0, 1, 2, :3] = [np.nan, np.inf, -0.0]
    got = c.run(module, inputs)[0]
    want = reference.run(parse(source), inputs)[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


@settings(deadline=None, max_examples=12)
@given(
    n=st.integers(1, 4),
    ch=st.sampled_from([16, 128]),
    side=st.sampled_from([6, 14]),
    keep=st.booleans(),
)
def test_placement_property(n: int, ch: int, side: int, keep: bool) -> None:
    """Whatever the program: no buffer overlaps one placed before it that is live with it,
    nor (with `KEEP_SHARED`) one that is a shared factor, and the plan is proved safe."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plan_memory, "KEEP_SHARED", keep)
        module = _compiled(_convs(n, ch, side))
        fn = module.entry
        placed = plan_memory.plan(fn, _bodies(module) if keep else None)
    shared = plan_memory.shared_factors(fn, _bodies(module)) if keep else set()
    for i, b in enumerate(placed):
        for a in placed[:i]:
            clash = a.offset < b.offset + b.size and b.offset < a.offset + a.size
            if not (a.size and b.size and clash):
                continue
            assert a.name not in shared, (a, b)
            assert a.end < b.start or b.end < a.start, (a, b)
    assert _safe(fn)
