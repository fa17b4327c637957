"""Compiling modules with control flow ops (IR_SPEC.md section 9): the reference target runs
the pipeline on every function (each rewrite proved, the functions a control op names in scope
of its claim, in the cache key and in the evidence), and so does the C target; `gdv partition`
and `gdv plan` keep them whole (their operands gathered); `gdv bounds` bounds them
(validate/bounds/control.py); the Triton target refuses them by name, with a position."""

from __future__ import annotations

import numpy as np
import pytest

from gdv.backends import reference
from gdv.cli import main
from gdv.driver import CompileOptions, compile_module
from gdv.ir.core import Function
from gdv.ir.obligation import Obligation
from gdv.ir.parser import parse
from gdv.validate.discharge import cache_key

# Two equal ifs and two equal whiles: common-subexpression elimination merges each pair, a
# claim whose pair holds control ops.
SOURCE = """func @main(%c: i1[], %x: f32[4]) -> f32[4] {
  %r = if(%c, %x) {then = "dbl", else = "neg", result = 0} : f32[4]
  %r2 = if(%c, %x) {then = "dbl", else = "neg", result = 0} : f32[4]
  %s = add(%r, %r2) : f32[4]
  %w = while(%s) {cond = "small", body = "dbl", max_trips = 100, result = 0} : f32[4]
  %w2 = while(%s) {cond = "small", body = "dbl", max_trips = 100, result = 0} : f32[4]
  %t = sub(%w, %w2) : f32[4]
  %u = add(%t, %w) : f32[4]
  return %u
}
func @dbl(%a: f32[4]) -> f32[4] {
  %b = add(%a, %a) : f32[4]
  return %b
}
func @neg(%a: f32[4]) -> f32[4] {
  %b = neg(%a) : f32[4]
  return %b
}
func @small(%a: f32[4]) -> i1[] {
  %m = reduce_max(%a) {axes = [0]} : f32[]
  %k = constant() {value = 1000.0} : f32[]
  %p = cmp(%m, %k) {dir = "lt"} : i1[]
  return %p
}
"""


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "cf.gdv"
    p.write_text(SOURCE)
    return str(p)


@pytest.mark.parametrize("target", ["reference", "c"])
def test_the_module_compiles_proves_and_runs(target: str, tmp_path) -> None:
    """Every function's rewrites proved, the named functions in the claims' scope, equal
    branches and loops merged, and the result (the final module on the reference backend, the
    executable on C) gives the source's bits (tests/backends/c/test_control.py draws more)."""
    result = compile_module(SOURCE, CompileOptions(target=target, jobs=1, cache_dir=str(tmp_path)))
    assert result.verdict == "proved"
    names = {f.name for o in result.outcomes for f in o.obligation.functions}
    assert {"dbl", "neg", "small"} <= names
    main_ops = [op.name for op in result.module.entry.ops]
    assert main_ops.count("if") == 1 and main_ops.count("while") == 1  # merged
    src = parse(SOURCE)
    for seed in range(4):
        inputs = reference.random_inputs(src.entry, seed)
        for c in (True, False):
            inputs["c"] = np.array(c)
            (want,) = reference.run(src, inputs)
            (got,) = result(**inputs)
            assert reference.bit_equal(got, want)


def test_evidence_of_a_control_flow_compile_verifies(path, tmp_path, capsys) -> None:
    bundle = str(tmp_path / "ev")
    out = str(tmp_path / "out.gdv")
    assert (
        main(["compile", "--target", "reference", path, "-o", out, "--emit-evidence", bundle]) == 0
    )
    assert main(["evidence", "verify", bundle]) == 0
    assert "verified" in capsys.readouterr().out


def test_the_triton_target_refuses_by_name(path, capsys) -> None:
    assert main(["compile", "--target", "triton", path]) == 3
    err = capsys.readouterr().err
    reason = "control flow ops (if, while, scan) are not lowered by the Triton target yet"
    assert "cf.gdv:2:3: error: target triton does not support if: " in err and reason in err


def test_bounds_of_a_while_is_a_number(path, capsys) -> None:
    """The while doubles s (|s| <= 4) while its largest element is below 1000, at most 100
    trips: an all-negative s runs all 100 (|w| <= 4 * 2^100), and the condition may flip (the
    bound of add(a, a) has a rounding term), so the span of the exact values is added."""
    assert main(["bounds", "--default-range", "-1", "1", path]) == 0
    out = capsys.readouterr().out
    assert "unbounded" not in out
    line = next(t for t in out.splitlines() if "(rigorous)" in t)
    bound = float(line.split("<=")[1].split()[0])
    assert 4 * 2.0**100 * 2 <= bound < 1e32


def _claim(body: str) -> Obligation:
    module = parse(SOURCE.replace("%b = add(%a, %a) : f32[4]", body))
    main_fn = module.entry
    pair = Function("p", main_fn.params, [main_fn.ops[0].type], main_fn.ops[:1], ["r"])
    return Obligation(
        "t/r/equivalence", "equivalence", "fp", pair, pair, "claim", functions=module.functions[1:]
    )


def test_the_cache_key_depends_on_what_a_named_function_computes() -> None:
    same = cache_key(_claim("%b = add(%a, %a) : f32[4]"))
    assert same == cache_key(_claim("%b = add(%a, %a) : f32[4]"))
    assert same != cache_key(_claim("%b = mul(%a, %a) : f32[4]"))


def test_control_ops_on_constants_are_not_folded(tmp_path) -> None:
    """fold-constants leaves an if and a while of constant operands alone (evaluating them
    needs the module's functions, and a loop may run up to 2^31 - 1 trips)."""
    text = """func @main() -> f32[4] {
  %c = constant() {value = true} : i1[]
  %x = constant() {value = 1.5} : f32[4]
  %r = if(%c, %x) {then = "dbl", else = "dbl", result = 0} : f32[4]
  %w = while(%r) {cond = "small", body = "dbl", max_trips = 2147483647, result = 0} : f32[4]
  return %w
}
func @dbl(%a: f32[4]) -> f32[4] {
  %b = add(%a, %a) : f32[4]
  return %b
}
func @small(%a: f32[4]) -> i1[] {
  %m = reduce_max(%a) {axes = [0]} : f32[]
  %k = constant() {value = 1000.0} : f32[]
  %p = cmp(%m, %k) {dir = "lt"} : i1[]
  return %p
}
"""
    result = compile_module(
        text, CompileOptions(target="reference", jobs=1, cache_dir=str(tmp_path))
    )
    assert result.verdict == "proved"
    assert [op.name for op in result.module.entry.ops].count("while") == 1
    (got,) = reference.run(result.module, {})
    assert reference.bit_equal(got, np.full(4, 1536.0, np.float32))


@pytest.mark.parametrize(
    "command", [["partition", "--shard", "x=[data]"], ["plan", "--shard", "x=[data]", "--apply"]]
)
def test_partitioning_gathers_control_ops_operands(path, command, capsys) -> None:
    """A control op's operands are replicated (its sharding rule): a sharded %x is gathered
    whole before the op, every rank runs it, and each op's claim (its named functions in
    scope) is proved."""
    assert main([command[0], "--mesh", "data=2", *command[1:], path]) == 0
    out, err = capsys.readouterr()
    assert 'all_gather(%x) {axes = ["data"], dim = 0} : f32[4]' in out
    assert 'if(%c, %x.p1) {then = "dbl", else = "neg", result = 0} : f32[4]' in out
    assert "func @small(" in out  # the functions named stay in the partitioned module
    assert "verdict proved" in err + out


def test_a_claim_too_large_to_encode_is_unknown_not_an_error(tmp_path) -> None:
    """CSE merges two whiles whose induction-rule encoding would take 300 operand elements:
    the claim is left unknown, with the reason, and the compile's verdict is unknown."""
    text = SOURCE.replace("f32[4]", "f32[300]")
    result = compile_module(text, CompileOptions(target="reference", jobs=1, use_cache=False))
    assert result.verdict == "unknown"
    (why,) = {o.reason for o in result.outcomes if o.status == "unknown"}
    assert "while with max_trips 100 (over 64) over 300 operand elements is not encoded" in why
