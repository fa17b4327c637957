"""A fused kernel that reads the same value several times at the same index reads it once after
the `dedupe-operands` pass (with a proved `fp` obligation per kernel; the C printer merges
nothing itself), and its results do not change; the same value read at another index (a
transpose) stays a separate operand."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends import c, reference
from gdv.passes.dedupe_operands import DedupeOperands
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline
from gdv.validate.discharge import discharge

CHAIN = """func @main(%x: f32[{n},{n}]) -> f32[{n},{n}] {{
  %a = mul(%x, %x) : f32[{n},{n}]
  %b = mul(%a, %x) : f32[{n},{n}]
  %c = add(%b, %x) : f32[{n},{n}]
  %t = transpose(%x) {{perm = [1, 0]}} : f32[{n},{n}]
  %y = sub(%c, %t) : f32[{n},{n}]
  return %y
}}
"""


def _kernels(n: int):
    """CHAIN at size n through the C target's pipeline (fused into kernels; nothing proved)."""
    return PassManager(pipeline("c")).run(parse(CHAIN.format(n=n))).module


def _kernel_params(source: str) -> list[int]:
    """The number of input arrays of each kernel function in the C source."""
    heads = re.findall(r"static void gdv_k\d+\(([^)]*)\)", source)
    return [h.count("const ") for h in heads]


def _fused(n: int):
    """CHAIN at size n fused into one kernel, before dedupe-operands."""
    passes = [p for p in pipeline("c") if p.name not in ("dedupe-operands", "plan-memory")]
    return PassManager(passes).run(parse(CHAIN.format(n=n))).module


def test_the_repeated_reads_merge_and_the_transposed_one_stays() -> None:
    before = _fused(5)
    (kernel,) = [op for op in before.entry.ops if op.name == "kernel"]
    body = before.function(kernel.attrs["body"])
    result = DedupeOperands().run(before)
    (merged,) = [op for op in result.module.entry.ops if op.name == "kernel"]
    new_body = result.module.function(merged.attrs["body"])
    assert len(set(kernel.operands)) == 1 and len(kernel.operands) >= 4
    assert len(merged.operands) == 2  # x as read, and x transposed
    assert merged.result == kernel.result
    assert merged.attrs["maps"][0] != merged.attrs["maps"][1]
    kept = [body.params[0].name, body.params[_transposed(kernel)].name]
    assert [p.name for p in new_body.params] == kept
    used = {o for b in new_body.ops for o in b.operands}
    assert used <= {p.name for p in new_body.params} | {b.result for b in new_body.ops}
    assert result.module.function(body.name) is None  # the old body is dropped
    (ob,) = result.obligations
    assert ob.kind == "equivalence" and ob.theory == "fp"
    assert [o.name for o in ob.src.ops] == [o.name for o in ob.tgt.ops] == ["kernel"]
    (out,) = discharge([ob], jobs=1, use_cache=False)
    assert out.status == "proved"
    assert [s.kind for s in result.steps] == ["rewrite", "drop-functions"]
    assert _kernel_params(c.lower(_kernels(5))) == [2]
    # the printer follows the IR: without the pass, every read stays a separate operand
    assert _kernel_params(c.lower(before)) == [len(kernel.operands)]


def _transposed(kernel) -> int:
    maps = kernel.attrs["maps"]
    return next(k for k in range(len(maps)) if maps[k] != maps[0])


@settings(max_examples=25)
@given(st.integers(0, 9), st.integers(0, 2**32 - 1))
def test_merged_kernel_matches_the_reference(n: int, seed: int) -> None:
    module = _kernels(n)
    x = np.random.default_rng(seed).standard_normal((n, n)).astype(np.float32)
    if n:
        x[0, 0], x[-1, 0] = np.nan, -0.0
    (got,) = c.run(module, {"x": x})
    (want,) = reference.run(module, {"x": x})
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)) or np.array_equal(
        got, want, equal_nan=True
    )
