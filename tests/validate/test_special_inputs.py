"""The probe's IEEE special inputs (issue 15, item 4): whole-function checks (`gdv tv`,
`--external-pass`) replay signed zeros in every combination of signs, NaN, infinities and
subnormals before any query, so a rewrite `x + 0.0 -> x` inside a 16x16 product is refuted
with a replayed -0.0 counterexample instead of `unknown` after the timeout."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gdv.api import parse
from gdv.backends import reference
from gdv.driver import CompileOptions, compile_module
from gdv.validate.counterexample import same_bits, sign_pattern_count, sign_patterns
from gdv.validate.equivalence import check_equivalence

PRODUCT = """func @main(%a: f32[16,16], %b: f32[16,16]) -> f32[16,16] {
  %d = matmul(%a, %b) : f32[16,16]
  %z = constant() {value = 0.0} : f32[16,16]
  %r = add(%d, %z) : f32[16,16]
  return %r
}
"""
KERNEL = """func @body(%x: f32[], %y: f32[]) -> f32[] {
  %m = mul(%x, %y) : f32[]
  %z = constant() {value = 0.0} : f32[]
  %s = add(%m, %z) : f32[]
  return %s
}
func @main(%a: f32[16,16], %b: f32[16,16]) -> f32[16,16] {
  %r = kernel(%a, %b) {body = "body", space = [16, 16, 16],
    maps = [[[1, 0, 0, 0], [0, 0, 1, 0]], [[0, 0, 1, 0], [0, 1, 0, 0]]],
    out = [0, 1], reduce = [2], combiner = "add"} : f32[16,16]
  return %r
}
"""
REWRITES = {
    # x + 0.0 -> x on the product's result, and on each product inside a kernel's body.
    "product": (PRODUCT, "  %r = add(%d, %z) : f32[16,16]\n  return %r", "  return %d"),
    "kernel": (KERNEL, "  %s = add(%m, %z) : f32[]\n  return %s", "  return %m"),
}
TIMEOUT = 20.0


def _rewritten(name: str) -> tuple[str, str]:
    src, old, new = REWRITES[name]
    assert old in src
    tgt = src.replace(old, new)
    if name == "kernel":  # bodies are shared by name between the two sides of `gdv tv`
        tgt = tgt.replace("@body(", "@body2(").replace('body = "body"', 'body = "body2"')
    return src, tgt


def _check_cex(src_text: str, tgt_text: str, cex) -> None:
    """The counterexample replays on the reference: one side +0.0, the other -0.0."""
    src, tgt = parse(src_text), parse(tgt_text)
    assert cex is not None
    assert "signed zeros" in cex.origin or "zeros and ones" in cex.origin, cex.origin
    a = reference.run(src, cex.inputs)[cex.output][cex.index]
    b = reference.run(tgt, cex.inputs)[cex.output][cex.index]
    assert not same_bits(a, b)
    assert a == 0 and b == 0 and np.signbit(a) != np.signbit(b)


@pytest.mark.parametrize("name", sorted(REWRITES))
def test_tv_refutes_plus_zero_inside_a_product_with_signed_zeros(name) -> None:
    src_text, tgt_text = _rewritten(name)
    src, tgt = parse(src_text), parse(tgt_text)
    start = time.perf_counter()
    r = check_equivalence(src, tgt, "fp", timeout=TIMEOUT)
    seconds = time.perf_counter() - start
    assert r.verdict == "not-equivalent", r.reason
    _check_cex(src_text, tgt_text, r.counterexample)
    assert seconds < TIMEOUT / 2  # the probe, well before any solver timeout
    assert all(q.stage == "replay" for q in r.queries)  # no query was asked


def test_an_external_pass_rewriting_plus_zero_is_refuted_with_a_replayed_cex(
    tmp_path: Path,
) -> None:
    """The pass sees the whole module; its @main obligation is the 16x16 product. (A pass
    that rewrote a kernel's body would be refuted on the body's own, scalar, obligation.)"""
    src_text, tgt_text = _rewritten("product")
    _, old, new = REWRITES["product"]
    script = tmp_path / "plus_zero.py"
    script.write_text(f"import sys\nsys.stdout.write(sys.stdin.read().replace({old!r}, {new!r}))\n")
    start = time.perf_counter()
    comp = compile_module(
        src_text,
        CompileOptions(
            level=0,
            target="reference",
            external_passes=(f"{sys.executable} {script}",),
            jobs=1,
            timeout=TIMEOUT,
            cache_dir=str(tmp_path / "cache"),
        ),
    )
    seconds = time.perf_counter() - start
    assert comp.verdict == "refuted"
    refuted = [o for o in comp.outcomes if o.status == "refuted"]
    assert refuted and refuted[0].obligation.id.startswith("external-1/")
    _check_cex(src_text, tgt_text, refuted[0].counterexample)
    assert seconds < TIMEOUT


def test_a_correct_rewrite_of_the_product_still_proves() -> None:
    """x * 1.0 -> x is bit-exact (IR_SPEC.md section 5): the special inputs refute nothing."""
    src = PRODUCT.replace("value = 0.0", "value = 1.0").replace("add(%d, %z)", "mul(%d, %z)")
    r = check_equivalence(
        parse(src),
        parse(src.replace("  %r = mul(%d, %z) : f32[16,16]\n  return %r", "  return %d")),
        "fp",
        timeout=TIMEOUT,
    )
    assert r.verdict == "equivalent", r.reason


def test_sign_patterns_cover_every_sign_choice_of_a_few_inputs() -> None:
    fn = parse("func @main(%a: f32[2], %b: bf16[2], %i: i32[2]) -> f32[2] {\n  return %a\n}").entry
    pats = list(sign_patterns(fn))
    assert len(pats) == sign_pattern_count(fn)
    zeros = [p for name, p in pats if name.startswith("signed zeros")]
    signs = {
        (bool(np.signbit(p["a"][0])), bool(np.signbit(p["b"][0].astype(np.float32)))) for p in zeros
    }
    assert signs == {(False, False), (False, True), (True, False), (True, True)}
    for _, p in pats:
        assert set(p) == {"a", "b", "i"}
        assert p["a"].dtype == np.float32 and p["i"].dtype == np.int32
        assert (p["i"] == 0).all()
    lone = [p for name, p in pats if name.startswith("lone")]
    assert any(np.isnan(p["a"]).all() and (p["b"].astype(np.float32) == 1).all() for p in lone)


def test_many_inputs_get_each_one_against_the_rest() -> None:
    params = ", ".join(f"%x{k}: f32[3]" for k in range(6))
    fn = parse(f"func @main({params}) -> f32[3] {{\n  return %x0\n}}").entry
    pats = list(sign_patterns(fn))
    assert len(pats) == sign_pattern_count(fn) == 2 * 12 + 6 * 4
