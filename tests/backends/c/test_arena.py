"""The C target takes every intermediate from the arena `plan-memory` planned, at the planned
offsets, so the `memory-safety` proof is about the program that runs: a plan whose live buffers
overlap is refuted by the checker, and C code built from it computes a wrong result."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import z3

from gdv.backends import c, reference
from gdv.ir.core import Module
from gdv.ir.parser import parse
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline
from gdv.validate.schedules import memory_violation

SRC = """func @main(%x: f32[4,8], %w: f32[8,3]) -> (f32[4,3], f32[12], f32[4,8]) {
  %a = mul(%x, %x) : f32[4,8]
  %b = neg(%x) : f32[4,8]
  %c = add(%a, %b) : f32[4,8]
  %d = dot(%c, %w) {lhs_batch=[], rhs_batch=[], lhs_contract=[1], rhs_contract=[0]} : f32[4,3]
  %e = reshape(%d) : f32[12]
  %t = reshape(%b) : f32[32]
  %u = neg(%t) : f32[32]
  %v = reshape(%u) : f32[4,8]
  %s = add(%v, %c) : f32[4,8]
  return %d, %e, %s
}
"""


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "x": rng.standard_normal((4, 8)).astype(np.float32),
        "w": rng.standard_normal((8, 3)).astype(np.float32),
    }


def _compiled(level: int) -> Module:
    return PassManager(pipeline("c", level)).run(parse(SRC)).module


def _safe(module: Module) -> bool:
    s = z3.Solver()
    s.add(memory_violation(module.entry))
    return s.check() == z3.unsat


@pytest.mark.parametrize("level", [0, 1, 2])
def test_every_c_pipeline_plans_memory(level: int) -> None:
    assert pipeline("c", level)[-1].name == "plan-memory"


@pytest.mark.parametrize("level", [0, 1])
def test_intermediates_live_at_their_planned_offsets(level: int) -> None:
    module = _compiled(level)
    plan = module.entry.attrs["buffers"]
    assert plan and _safe(module)
    source = c.lower(module)
    assert f"the planned arena: {module.entry.attrs['arena_bytes']} bytes" in source
    for name, offset, _ in plan:
        assert re.search(
            rf"\(gdv_arena \+ INT64_C\({offset}\)\);  /\* %{re.escape(name)} :", source
        )
    # parameters and returned values (and the reshapes sharing them) are the caller's
    planned = {name for name, _, _ in plan}
    assert not planned & {"x", "w", "d", "e", "s"}
    ins = _inputs()
    for got, want in zip(c.run(module, ins), reference.run(module, ins), strict=True):
        assert np.array_equal(got, want)


def _overlapping(module: Module) -> Module:
    """`module` with %b moved onto %a's bytes while both are live (for %c = add(%a, %b))."""
    entry = module.entry
    plan = {name: [name, offset, size] for name, offset, size in entry.attrs["buffers"]}
    plan["b"] = ["b", plan["a"][1], plan["b"][2]]
    attrs = {**entry.attrs, "buffers": list(plan.values())}
    fns = [dataclasses.replace(f, attrs=attrs) if f is entry else f for f in module.functions]
    return Module(fns, module.filename)


def test_overlapping_plan_is_refuted_and_its_c_code_computes_a_wrong_result() -> None:
    module = _compiled(1)
    assert _safe(module)
    bad = _overlapping(module)
    assert not _safe(bad)  # the checker finds two live buffers sharing bytes
    ins = _inputs()
    want = reference.run(module, ins)
    assert all(np.array_equal(g, w) for g, w in zip(c.run(module, ins), want, strict=True))
    got = c.run(bad, ins)  # %b overwrites %a before %c = add(%a, %b) reads it
    assert not np.array_equal(got[2], want[2])


def test_a_plan_placing_a_returned_value_is_rejected() -> None:
    module = _compiled(1)
    entry = module.entry
    attrs = {**entry.attrs, "buffers": [*entry.attrs["buffers"], ["s", 0, 128]]}
    fns = [dataclasses.replace(f, attrs=attrs) if f is entry else f for f in module.functions]
    bad = Module(fns, module.filename)
    assert not _safe(bad)
    with pytest.raises(Exception, match="returned value"):
        c.lower(bad)


def _rss_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/self/status")


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_the_arena_is_committed_when_the_program_is_loaded() -> None:
    """A call touches no page the load did not: the 32 MiB arena of two 16 MiB intermediates
    is written when the executable is made, so the first call does not grow the process (as
    onnxruntime's buffers are set up with its session). Without the commit the first call
    grows the resident set by about the arena's size."""
    n = 1 << 22
    src = f"""func @main(%x: f32[{n}]) -> f32[{n}] {{
  %a = mul(%x, %x) : f32[{n}]
  %b = neg(%a) : f32[{n}]
  %c = add(%b, %x) : f32[{n}]
  return %c
}}
"""
    module = PassManager(pipeline("c", 0)).run(parse(src)).module
    arena = module.entry.attrs["arena_bytes"]
    assert arena >= 2 * 4 * n
    x = np.linspace(-2.0, 2.0, n, dtype=np.float32)
    exe = c.Executable(module)
    before = _rss_kb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    (out,) = exe({"x": x})
    grown = (_rss_kb("VmHWM") - before) * 1024
    # the result (16 MiB, a new array) may be counted; the arena (32 MiB) must not be
    assert grown < 4 * n + arena // 4, (grown, arena)
    (want,) = reference.run(module, {"x": x})
    np.testing.assert_array_equal(out, want)
