"""`dedupe-operands` computes a kernel's splat-constant operands in its body (a relu6 clip's 0
and 6, shared by every kernel after CSE): the claim is exact and proved, a wrong value in the
new body is refuted, and the C printer then prints the clip as one compare per bound while the
results stay the reference's bits (NaN, signed zeros and infinities included)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gdv.api import parse
from gdv.backends import c, reference
from gdv.ir.core import Op
from gdv.passes import dedupe_operands
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import PASSES, pipeline
from gdv.validate.discharge import discharge

CLIPS = """func @main(%x: f32[4,8], %y: f32[4,8], %b: f32[8]) -> (f32[4,8], f32[4,8]) {
  %lo = constant() {value = LO} : f32[]
  %hi = constant() {value = 6.0} : f32[]
  %bb = broadcast(%b) {dims = [1]} : f32[4,8]
  %lob = broadcast(%lo) {dims = []} : f32[4,8]
  %hib = broadcast(%hi) {dims = []} : f32[4,8]
  %s = add(%x, %bb) : f32[4,8]
  %m = max(%s, %lob) : f32[4,8]
  %r = min(%m, %hib) : f32[4,8]
  %n = min(%hib, %y) : f32[4,8]
  %t = max(%lob, %n) : f32[4,8]
  return %r, %t
}
"""


def _fused(text: str):
    passes = [PASSES[n]() for n in ("lower-to-kernels", "fuse-kernels")]
    return PassManager(passes).run(parse(text)).module


def test_each_kernel_computes_the_shared_constants_and_the_claims_prove() -> None:
    before = _fused(CLIPS.replace("LO", "0.0"))
    kernels = [op for op in before.entry.ops if op.name == "kernel"]
    assert len(kernels) == 2 and all({"lo", "hi"} <= set(k.operands) for k in kernels)
    result = dedupe_operands.DedupeOperands().run(before)
    after = [op for op in result.module.entry.ops if op.name == "kernel"]
    for k in after:
        assert not {"lo", "hi"} & set(k.operands)
        body = result.module.function(k.attrs["body"])
        values = sorted(b.attrs["value"] for b in body.ops if b.name == "constant")
        assert values == [0.0, 6.0]
    rules = [o.id.split("#")[0] for o in result.obligations]
    assert rules == ["dedupe-operands/sink-constants/equivalence"] * 2
    outcomes = discharge(result.obligations, jobs=1, use_cache=False)
    assert [o.status for o in outcomes] == ["proved", "proved"]


def test_a_wrong_value_in_the_body_is_refuted(monkeypatch: pytest.MonkeyPatch) -> None:
    real = dedupe_operands.deduped_body

    def off_by_one(name, body, keep, same, constants=None):
        new = real(name, body, keep, same, constants)
        ops = [
            replace(b, attrs={"value": 5.0}) if b.attrs.get("value") == 6.0 else b for b in new.ops
        ]
        assert any(isinstance(b, Op) and b.attrs.get("value") == 5.0 for b in ops)
        return replace(new, ops=ops)

    monkeypatch.setattr(dedupe_operands, "deduped_body", off_by_one)
    result = dedupe_operands.DedupeOperands().run(_fused(CLIPS.replace("LO", "0.0")))
    outcomes = discharge(result.obligations, jobs=1, use_cache=False)
    assert {o.status for o in outcomes} == {"refuted"}


def _specials() -> np.ndarray:
    quiet = np.array([0x7FFFFFFF, 0xFFC00001], np.uint32).view(np.float32)
    vals = [0.0, -0.0, 6.0, -6.0, 5.999, 6.001, np.inf, -np.inf, 1e-45, -1e-45, *quiet]
    rng = np.random.default_rng(1)
    x = np.concatenate([np.array(vals, np.float32), (rng.standard_normal(32) * 8)])
    return x[:32].astype(np.float32).reshape(4, 8)


@pytest.mark.parametrize("lo", ["0.0", "-0.0", "-inf", "nan"])
def test_the_clip_in_c_gives_the_reference_bits(lo: str) -> None:
    text = CLIPS.replace("LO", lo)
    module = PassManager(pipeline("c", 2, **c.schedule_parameters())).run(parse(text)).module
    source = c.lower(module)
    if lo != "nan":  # a NaN bound keeps the order-key helper
        assert "gdv_max_f32(" not in source and "gdv_min_f32(" not in source
    x = _specials()
    inputs = {
        "x": x,
        "y": x[::-1].copy(),
        "b": np.array([0, -0.0, 1, -1, 6, np.nan, 2, 3], np.float32),
    }
    got = c.run(module, inputs)
    want = reference.run(parse(text), inputs)
    for g, w in zip(got, want, strict=True):
        assert reference.bit_equal(g, w), reference.describe_difference(g, w)
