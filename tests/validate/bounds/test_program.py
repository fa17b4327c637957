"""Whole-program analysis: speed at transformer sizes, the API's promises, the probabilistic
companion, input errors."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from gdv.api import load, parse
from gdv.ir.diagnostics import IRError
from gdv.validate.bounds import analyze
from gdv.validate.bounds.measure import make_inputs, output_errors

ROOT = Path(__file__).resolve().parents[3]


def transformer_layer(seq: int, d: int = 256, heads: int = 4, ffn: int = 1024) -> str:
    """A pre-norm transformer layer: causal multi-head attention and a GELU feed-forward."""
    dh = d // heads
    w = f"{{range = [-{1 / math.sqrt(d):.4f}, {1 / math.sqrt(d):.4f}]}}"
    return f"""
func @main(%x: f32[{seq},{d}] {{range = [-2.0, 2.0]}}, %g: f32[{d}] {{range = [0.5, 1.5]}},
           %b: f32[{d}] {{range = [-0.1, 0.1]}}, %wq: f32[{d},{d}] {w}, %wk: f32[{d},{d}] {w},
           %wv: f32[{d},{d}] {w}, %wo: f32[{d},{d}] {w}, %w1: f32[{d},{ffn}] {w},
           %w2: f32[{ffn},{d}] {w}) -> f32[{seq},{d}] {{
  %h = layer_norm(%x, %g, %b) {{axes = [1], eps = 1e-05}} : f32[{seq},{d}]
  %q = matmul(%h, %wq) : f32[{seq},{d}]
  %k = matmul(%h, %wk) : f32[{seq},{d}]
  %v = matmul(%h, %wv) : f32[{seq},{d}]
  %q3 = reshape(%q) : f32[{seq},{heads},{dh}]
  %qh = transpose(%q3) {{perm = [1, 0, 2]}} : f32[{heads},{seq},{dh}]
  %k3 = reshape(%k) : f32[{seq},{heads},{dh}]
  %kt = transpose(%k3) {{perm = [1, 2, 0]}} : f32[{heads},{dh},{seq}]
  %v3 = reshape(%v) : f32[{seq},{heads},{dh}]
  %vh = transpose(%v3) {{perm = [1, 0, 2]}} : f32[{heads},{seq},{dh}]
  %s = matmul(%qh, %kt) : f32[{heads},{seq},{seq}]
  %c = constant() {{value = 0.125}} : f32[{heads},{seq},{seq}]
  %ss = mul(%s, %c) : f32[{heads},{seq},{seq}]
  %qp = iota() {{axis = 1}} : i32[{heads},{seq},{seq}]
  %kp = iota() {{axis = 2}} : i32[{heads},{seq},{seq}]
  %keep = cmp(%kp, %qp) {{dir = "le"}} : i1[{heads},{seq},{seq}]
  %ninf = constant() {{value = -inf}} : f32[{heads},{seq},{seq}]
  %m = select(%keep, %ss, %ninf) : f32[{heads},{seq},{seq}]
  %p = softmax(%m) {{axis = 2}} : f32[{heads},{seq},{seq}]
  %o = matmul(%p, %vh) : f32[{heads},{seq},{dh}]
  %ot = transpose(%o) {{perm = [1, 0, 2]}} : f32[{seq},{heads},{dh}]
  %om = reshape(%ot) : f32[{seq},{d}]
  %proj = matmul(%om, %wo) : f32[{seq},{d}]
  %r = add(%x, %proj) : f32[{seq},{d}]
  %h2 = layer_norm(%r, %g, %b) {{axes = [1], eps = 1e-05}} : f32[{seq},{d}]
  %u = matmul(%h2, %w1) : f32[{seq},{ffn}]
  %a = gelu(%u) {{approximate = "tanh"}} : f32[{seq},{ffn}]
  %dn = matmul(%a, %w2) : f32[{seq},{d}]
  %y = add(%r, %dn) : f32[{seq},{d}]
  return %y
}}
"""


def test_transformer_layer_at_seq_512_bounds_in_seconds() -> None:
    module = parse(transformer_layer(512))
    start = time.perf_counter()
    result = analyze(module)
    elapsed = time.perf_counter() - start
    assert elapsed < 10, f"{elapsed:.1f} s"
    (out,) = result.outputs
    assert math.isfinite(out.abs) and out.abs > 0
    assert out.prob_abs <= out.abs


def test_transformer_layer_bound_holds_when_run() -> None:
    module = parse(transformer_layer(8, d=32, heads=2, ffn=64))
    rigorous, ideal = analyze(module), analyze(module, ideal=True)
    for kind, seed in (("random", 1), ("endpoints", 2), ("constant", 3)):
        ((measured, _),) = output_errors(module, make_inputs(module.entry, kind, seed))
        assert measured <= rigorous.outputs[0].abs + ideal.outputs[0].abs


def test_bound_grows_with_the_unit_roundoff() -> None:
    text = (ROOT / "examples" / "mlp.gdv").read_text()
    f32 = analyze(parse(text)).outputs[0]
    f16 = analyze(parse(text.replace("f32", "f16"))).outputs[0]
    f64 = analyze(parse(text.replace("f32", "f64"))).outputs[0]
    assert f64.abs < f32.abs < f16.abs
    assert "u_f16" in str(f16.expr) and "u_f64" in str(f64.expr)
    # First order: the f16 bound is the f32 one scaled by u_f16 / u_f32 = 2^13, give or take.
    assert 2**12 < f16.abs / f32.abs < 2**14


def test_relative_bound_where_the_interval_excludes_zero() -> None:
    module = parse(
        "func @main(%x: f32[8] {range = [1.0, 2.0]}) -> f32[] {\n"
        "  %s = reduce_sum(%x) {axes = [0]} : f32[]\n  return %s\n}\n"
    )
    (out,) = analyze(module).outputs
    assert out.interval[0] == pytest.approx(8.0) and out.rel == pytest.approx(out.abs / 8.0)


def test_expression_evaluates_to_the_number() -> None:
    from gdv.validate.bounds import SYMBOL_VALUES

    for name in ("mlp", "bf16_matmul", "conv_block"):
        (out,) = analyze(load(str(ROOT / "examples" / f"{name}.gdv"))).outputs
        value = float(out.expr.subs({s: SYMBOL_VALUES[s.name] for s in out.expr.free_symbols}))
        assert out.abs <= value <= out.abs * (1 + 1e-5)  # shown rounded up: still a bound


def test_probabilistic_companion_is_labeled_and_smaller_for_long_sums() -> None:
    module = parse(
        "func @main(%x: f32[4,4096] {range = [-1.0, 1.0]}, %w: f32[4096,4] "
        "{range = [-1.0, 1.0]}) -> f32[4,4] {\n"
        "  %y = matmul(%x, %w) : f32[4,4]\n  return %y\n}\n"
    )
    result = analyze(module)
    (out,) = result.outputs
    # lambda sqrt(n) u in place of ~ n u / 2: several times smaller at n = 4096.
    assert out.prob_abs < out.abs / 4
    assert 0 < result.prob_failure < 1e-2
    assert "Higham-Mary" in result.to_json()["probabilistic"]["model"]


def test_transcendental_assumption_is_recorded() -> None:
    result = analyze(load(str(ROOT / "examples" / "attention.gdv")))
    assert any("exp returns a value within 4 ulp" in a for a in result.assumptions)


def test_unbounded_ops_say_why() -> None:
    cases = {
        "log(%x)": "log of values that may be <= 0",
        "rsqrt(%x)": "rsqrt of values that may be <= 0",
        "sqrt(%x)": "sqrt of values that may be < 0",
    }
    for expr, why in cases.items():
        module = parse(
            f"func @main(%x: f32[3] {{range = [-1.0, 1.0]}}) -> f32[3] {{\n"
            f"  %y = {expr} : f32[3]\n  return %y\n}}\n"
        )
        (out,) = analyze(module).outputs
        assert out.abs == math.inf and why in out.reason
    module = parse(
        "func @main(%x: f32[3] {range = [80.0, 100.0]}) -> f32[3] {\n"
        "  %y = exp(%x) : f32[3]\n  return %y\n}\n"
    )
    assert "overflow" in analyze(module).outputs[0].reason


def test_integer_wrap_is_reported() -> None:
    module = parse(
        "func @main(%x: i8[4] {range = [-100, 100]}) -> i8[4] {\n"
        "  %y = add(%x, %x) : i8[4]\n  return %y\n}\n"
    )
    result = analyze(module)
    assert result.outputs[0].abs == 0
    assert any("wrap-around possible" in n for n in result.notes)


def test_missing_range_is_an_error_unless_defaulted() -> None:
    module = parse(
        "func @main(%x: f32[3]) -> f32[3] {\n  %y = exp(%x) : f32[3]\n  return %y\n}\n", "m.gdv"
    )
    with pytest.raises(IRError, match="has no range") as e:
        analyze(module)
    assert str(e.value).startswith("m.gdv:1:12: error:")
    assert analyze(module, default_range=(-1.0, 1.0)).outputs[0].abs > 0
