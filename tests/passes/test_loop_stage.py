"""The loop stage: kernels against hand-computed values and the ops they replace, and the
coverage and memory-safety claims refuted for a wrong schedule and an overlapping plan."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import replace

import numpy as np
import pytest

from gdv.api import parse
from gdv.backends import reference
from gdv.ir.core import Module
from gdv.ir.diagnostics import IRError
from gdv.ir.obligation import Obligation
from gdv.ir.ops.kernel import kernel_bodies
from gdv.ir.parser import parse as parse_unchecked
from gdv.ir.verifier import verify
from gdv.passes.lower_to_kernels import LowerToKernels
from gdv.passes.manager import PassManager
from gdv.passes.plan_memory import PlanMemory
from gdv.passes.schedule_kernels import ScheduleKernels
from gdv.validate.discharge import discharge
from gdv.validate.evaluate import evaluate
from gdv.validate.schedules import DimLoop, coverage_violation

KERNEL = """func @main(%x: f32[2,3], %w: f32[3,2]) -> f32[2,2] {
  %y = kernel(%x, %w) {body = "main.k0", space = [2, 2, 3],
    maps = [[[1, 0, 0, 0], [0, 0, 1, 0]], [[0, 0, 1, 0], [0, 1, 0, 0]]],
    out = [0, 1], reduce = [2], combiner = "add"} : f32[2,2]
  return %y
}
func @main.k0(%a: f32[], %b: f32[]) -> f32[] {
  %p = mul(%a, %b) : f32[]
  return %p
}
"""


def test_kernel_matches_hand_computed_values() -> None:
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    w = np.array([[1, 0], [0, 1], [2, -1]], np.float32)
    (y,) = reference.run(parse(KERNEL), {"x": x, "w": w})
    assert y.tolist() == [[7.0, -1.0], [16.0, -1.0]]


def test_empty_reduction_gives_the_combiner_identity() -> None:
    src = KERNEL.replace("[2, 2, 3]", "[2, 2, 0]").replace("f32[2,3]", "f32[2,0]")
    src = src.replace("f32[3,2]", "f32[0,2]").replace('combiner = "add"', 'combiner = "max"')
    (y,) = reference.run(
        parse(src), {"x": np.zeros((2, 0), np.float32), "w": np.zeros((0, 2), np.float32)}
    )
    assert (y == -np.inf).all()


def test_lowered_program_equals_the_ops_it_replaces() -> None:
    src = """func @main(%x: bf16[3,5], %w: bf16[5,4], %b: bf16[4])
    -> (f32[3,4], bf16[4,3], bf16[3]) {
  %d = dot(%x, %w) {lhs_batch = [], rhs_batch = [], lhs_contract = [1], rhs_contract = [0],
    acc = f32} : f32[3,4]
  %bb = broadcast(%b) {dims = [1]} : bf16[3,4]
  %c = convert(%d) : bf16[3,4]
  %s = sub(%c, %bb) : bf16[3,4]
  %t = transpose(%s) {perm = [1, 0]} : bf16[4,3]
  %m = reduce_min(%s) {axes = [1]} : bf16[3]
  return %d, %t, %m
}
"""
    module = parse(src)
    lowered = PassManager([LowerToKernels()]).run(module).module
    assert all(op.name == "kernel" for op in lowered.entry.ops)
    for seed in range(3):
        inputs = reference.random_inputs(module.entry, seed)
        for a, b in zip(reference.run(module, inputs), reference.run(lowered, inputs), strict=True):
            assert a.tobytes() == b.tobytes()


def test_coverage_formula_holds_for_the_covering_nest_and_fails_without_the_remainder() -> None:
    import z3

    good = [DimLoop(10, 4, 3), DimLoop(7, 7), DimLoop(300, 256)]
    bad = [DimLoop(10, 4, 3), DimLoop(7, 7), DimLoop(300, 256, count=300 // 256)]
    results = []
    for nest in (good, bad):
        s = z3.Solver()
        s.add(coverage_violation(nest))
        results.append(s.check())
    assert results == [z3.unsat, z3.sat]


def test_coverage_claims_of_scheduled_kernels_are_derived_from_the_ir_and_proved() -> None:
    module = PassManager([LowerToKernels(), ScheduleKernels()]).run(parse(KERNEL)).module
    result = ScheduleKernels().run(PassManager([LowerToKernels()]).run(parse(KERNEL)).module)
    claims = [o for o in result.obligations if o.kind == "coverage"]
    assert claims and all(o.formula is None for o in claims)  # the pass states, never proves
    outs = discharge(claims, jobs=1, use_cache=False)
    assert {o.status for o in outs} == {"proved"}
    assert any("tile" in op.attrs for op in module.entry.ops)


def _planned() -> tuple[Obligation, Module]:
    src = (
        KERNEL.replace(
            "  return %y",
            '  %z = kernel(%y) {body = "main.k1", space = [2, 2], maps = [[[1, 0, 0], '
            '[0, 1, 0]]], out = [0, 1], reduce = [], combiner = "none"} : f32[2,2]\n'
            '  %q = kernel(%z) {body = "main.k1", space = [2, 2], maps = [[[1, 0, 0], '
            '[0, 1, 0]]], out = [0, 1], reduce = [], combiner = "none"} : f32[2,2]\n'
            "  return %q",
        )
        + "func @main.k1(%a: f32[]) -> f32[] {\n  %n = neg(%a) : f32[]\n  return %n\n}\n"
    )
    lowered = PassManager([LowerToKernels()]).run(parse(src)).module
    result = PlanMemory().run(lowered)
    (claim,) = [o for o in result.obligations if o.kind == "memory-safety"]
    return claim, result.module


def _with_plan(claim: Obligation, buffers: list, arena: int) -> Obligation:
    src = dataclasses.replace(claim.src, attrs={"arena_bytes": arena, "buffers": buffers})
    return dataclasses.replace(claim, src=src, tgt=src)


def test_memory_plan_is_proved_and_bad_plans_are_refuted_by_independent_liveness() -> None:
    claim, module = _planned()
    plan = module.entry.attrs["buffers"]  # %q, returned, is the caller's: not in the arena
    (y, oy, sy), (z, oz, sz) = plan
    assert oy + sy <= oz  # y is live while z is made, so they cannot share bytes
    overlapping = [[y, 0, 16], [z, 8, 16]]  # a plan whose own liveness would call this fine
    missing = [[y, 0, 16]]
    too_small = [[y, 0, 8], [z, 64, 16]]
    outside = [[y, 0, 16], [z, 64, 16]]  # z leaves a 32-byte arena
    outs = discharge(
        [
            claim,
            _with_plan(claim, overlapping, 24),
            _with_plan(claim, missing, 16),
            _with_plan(claim, too_small, 80),
            _with_plan(claim, outside, 32),
        ],
        jobs=1,
        use_cache=False,
    )
    assert [o.status for o in outs] == ["proved", "refuted", "refuted", "refuted", "refuted"]


@pytest.mark.parametrize(
    "body,message",
    [
        ("", "kernel body @main.k0 is not a function of the module"),
        (
            "func @main.k0(%a: f16[], %b: f32[]) -> f32[] {\n  %p = mul(%b, %b) : f32[]\n"
            "  return %p\n}\n",
            "expected (f32[], f32[]) like the kernel's operands",
        ),
        (
            "func @main.k0(%a: f32[], %b: f32[]) -> f16[] {\n  %p = convert(%a) : f16[]\n"
            "  return %p\n}\n",
            "expected f32[] like the kernel's result",
        ),
        (
            "func @main.k0(%a: f32[], %b: f32[]) -> f32[] {\n"
            "  %p = reshape(%a) : f32[]\n  return %p\n}\n",
            "a body holds only scalar elementwise ops",
        ),
    ],
)
def test_loop_stage_checks_kernel_bodies(body: str, message: str) -> None:
    src = KERNEL[: KERNEL.index("func @main.k0")] + body
    # Every stage checks bodies (issue 14): parsing (a graph-stage verify) rejects them too.
    with pytest.raises(IRError, match=re.escape(message)):
        parse(src)
    with pytest.raises(IRError, match=re.escape(message)):
        verify(parse_unchecked(src), stage="loop")
    verify(parse(KERNEL), stage="loop")


SUM4 = """func @main(%x: f32[4]) -> f32[] {
  %y = kernel(%x) {body = "main.k0", space = [4], maps = [[[1, 0]]], out = [], reduce = [0],
    combiner = "add"ACC} : f32[]
  return %y
}
func @main.k0(%a: f32[]) -> f32[] {
  return %a
}
"""


def test_two_accumulators_sum_in_blocks_in_both_meanings() -> None:
    # 1e8 + 1 rounds back to 1e8 in f32: in order the sum is 1, in two blocks 0.
    x = np.array([1e8, 1, -1e8, 1], np.float32)
    seq = parse(SUM4.replace("ACC", ""))
    blocked = parse(SUM4.replace("ACC", ", accumulators = 2"))
    assert reference.run(seq, {"x": x})[0] == 1.0
    assert reference.run(blocked, {"x": x})[0] == 0.0
    for module, want in ((seq, 1.0), (blocked, 0.0)):
        with kernel_bodies(module.functions):
            assert evaluate(module.entry, {"x": x})[0] == want


def test_accumulators_are_claimed_under_real_and_proved() -> None:
    src = SUM4.replace("[4]", "[64]").replace("ACC", "")
    result = PassManager([ScheduleKernels(accumulators=4)]).run(parse(src))
    (kernel,) = result.module.entry.ops
    assert kernel.attrs["accumulators"] == 4
    split = [o for o in result.obligations if o.kind == "equivalence"]
    assert [(o.id, o.theory) for o in split] == [
        ("schedule-kernels/split-accumulators/equivalence", "real")
    ]
    outs = discharge(result.obligations, jobs=1, use_cache=False)
    assert [o.status for o in outs] == ["proved", "proved"], [o.reason for o in outs]
    # The same claim bit-exact is false, and refuted.
    exact = replace(split[0], theory="fp", id="test/split/equivalence")
    (out,) = discharge([exact], jobs=1, use_cache=False)
    assert out.status == "refuted"


def test_gdv_tv_proves_a_lowered_program_equal_to_its_source(tmp_path) -> None:
    from gdv.cli import main
    from gdv.ir.printer import print_module

    src = tmp_path / "src.gdv"
    src.write_text(
        "func @main(%x: f32[2,3], %w: f32[3,2]) -> f32[2,2] {\n"
        "  %y = dot(%x, %w) {lhs_batch = [], rhs_batch = [], lhs_contract = [1], "
        "rhs_contract = [0]} : f32[2,2]\n  %z = relu(%y) : f32[2,2]\n  return %z\n}\n"
    )
    lowered = PassManager([LowerToKernels()]).run(parse(src.read_text())).module
    low = tmp_path / "low.gdv"
    low.write_text(print_module(lowered))
    assert main(["tv", str(src), str(low)]) == 0


HAND_PRODUCT = """func @main(%x: f32[4,3], %w: f32[3,5]) -> f32[4,5] {
  %d = kernel(%x, %w) {body = "main.k0", space = [4, 5, 3], maps = [[[1, 0, 0, 0], [0, 0, 1, 0]], [[0, 0, 1, 0], [0, 1, 0, 0]]], out = [0, 1], reduce = [2], combiner = "add", strategy = "product", batch = [], rows = [0], cols = [1], row_factor = 0, micro = [4, 8], blocks = [4, 3, 8], split = "rows"} : f32[4,5]
  return %d
}

func @main.k0(%a0: f32[], %a1: f32[]) -> f32[] {
  %p = mul(%a0, %a1) : f32[]
  return %p
}
"""  # noqa: E501
"""A product kernel scheduled by hand (no `tile`, no `vector`: one lane, so NR = 8 is whole)."""


def test_a_kernel_scheduled_by_hand_keeps_its_schedule() -> None:
    """`schedule-kernels` leaves a kernel with a `strategy` as written: giving it the target's
    lanes made its `micro` invalid (NR = 8 is not a whole number of 16-lane vectors), which
    the compile reported as an internal error."""
    from gdv.backends import c

    module = parse(HAND_PRODUCT)
    (before,) = module.entry.ops
    scheduled = PassManager([ScheduleKernels(vector_bytes=64)]).run(module).module
    (after,) = scheduled.entry.ops
    assert after.attrs == before.attrs
    rng = np.random.default_rng(5)
    inputs = {
        "x": rng.standard_normal((4, 3)).astype(np.float32),
        "w": rng.standard_normal((3, 5)).astype(np.float32),
    }
    got = c.run(scheduled, inputs)[0]
    want = reference.run(module, inputs)[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


TWIN_KERNELS = """func @main(%x: f32[4], %g: f32[4]) -> f32[4] {
  %s = kernel(%g) {body = "sq", space = [4], maps = [[[1, 0]]], out = [0], reduce = [],
      combiner = "none"} : f32[4]
  %u = kernel(%g) {body = "sq", space = [4], maps = [[[1, 0]]], out = [0], reduce = [],
      combiner = "none"} : f32[4]
  %y = kernel(%s, %u) {body = "plus", space = [4], maps = [[[1, 0]], [[1, 0]]], out = [0],
      reduce = [], combiner = "none"} : f32[4]
  return %y
}
func @sq(%a: f32[]) -> f32[] {
  %r = mul(%a, %a) : f32[]
  return %r
}
func @plus(%a: f32[], %b: f32[]) -> f32[] {
  %r = add(%a, %b) : f32[]
  return %r
}
"""


def test_merging_twin_kernels_of_a_loop_stage_input_proves(tmp_path) -> None:
    """`eliminate-common-subexpressions` merges two equal kernels of a hand-written loop-stage
    program: its claim carries their body (the pass manager adds what a pair's kernels name),
    where before the compile stopped with `kernel body @sq is not in scope`."""
    from gdv.driver import CompileOptions, compile_module

    src = tmp_path / "twins.gdv"
    src.write_text(TWIN_KERNELS)
    comp = compile_module(str(src), CompileOptions(jobs=1, use_cache=False))
    assert comp.verdict == "proved"
    (merge,) = [
        o for o in comp.outcomes if o.obligation.id.startswith("eliminate-common-subexpressions")
    ]
    assert [f.name for f in merge.obligation.functions] == ["sq"] and merge.status == "proved"
    x = np.array([1.5, -2.0, 0.0, 3.0], np.float32)
    out = comp.executable()({"x": x, "g": x})[0]
    assert reference.bit_equal(out, x * x + x * x)
