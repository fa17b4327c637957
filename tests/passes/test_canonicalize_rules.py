"""Each canonicalization rule is proved once, for all inputs, in every float dtype: the rule's
pattern and its replacement as two functions, checked bit-exact by the SMT semantics. A rule
that is not bit-exact (x + 0.0 -> x) is refuted, with a replayed counterexample."""

from __future__ import annotations

import pytest

from gdv.api import parse
from gdv.passes.canonicalize import Canonicalize
from gdv.passes.fast_math import FastMath
from gdv.passes.fold_layout import FoldLayout
from gdv.validate.equivalence import check_equivalence

FLOATS = (
    "f32",
    "f16",
    "bf16",
    # f64 multiplication and division bit-blast slowly (x / 1.0: about 30 s here).
    pytest.param("f64", marks=pytest.mark.slow),
)


def _fn(body: str, dtype: str, params: str = "%x: T[3]", result: str = "T[3]") -> str:
    text = f"func @main({params}) -> {result} {{\n{body}\n}}\n"
    return text.replace("T[", f"{dtype}[")


CANONICAL = {
    # name: (pattern, replacement), both over %x (and %c for select)
    "mul-one": (
        "%c = constant() {value = 1.0} : T[3]\n%r = mul(%x, %c) : T[3]\nreturn %r",
        "return %x",
    ),
    "one-mul": (
        "%c = constant() {value = 1.0} : T[3]\n%r = mul(%c, %x) : T[3]\nreturn %r",
        "return %x",
    ),
    "div-one": (
        "%c = constant() {value = 1.0} : T[3]\n%r = div(%x, %c) : T[3]\nreturn %r",
        "return %x",
    ),
    "add-negzero": (
        "%c = constant() {value = -0.0} : T[3]\n%r = add(%x, %c) : T[3]\nreturn %r",
        "return %x",
    ),
    "sub-zero": (
        "%c = constant() {value = 0.0} : T[3]\n%r = sub(%x, %c) : T[3]\nreturn %r",
        "return %x",
    ),
    "neg-neg": ("%a = neg(%x) : T[3]\n%r = neg(%a) : T[3]\nreturn %r", "return %x"),
    "abs-neg": (
        "%a = neg(%x) : T[3]\n%r = abs(%a) : T[3]\nreturn %r",
        "%r = abs(%x) : T[3]\nreturn %r",
    ),
    "max-same": ("%r = max(%x, %x) : T[3]\nreturn %r", "return %x"),
    "convert-same": ("%r = convert(%x) : T[3]\nreturn %r", "return %x"),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("rule", sorted(CANONICAL))
def test_canonical_rule_is_bit_exact(rule: str, dtype: str) -> None:
    pattern, replacement = CANONICAL[rule]
    a = parse(_fn(pattern, dtype))
    b = parse(_fn(replacement, dtype))
    r = check_equivalence(a, b, "fp", timeout=180)
    assert r.verdict == "equivalent", r.reason


@pytest.mark.parametrize("rule", sorted(CANONICAL))
def test_pass_applies_rule_and_removes_pattern(rule: str) -> None:
    """The pass really fires on the pattern: no op of the pattern's root kind survives unless
    the replacement has it too."""
    pattern, replacement = CANONICAL[rule]
    m = parse(_fn(pattern, "f32"))
    out = Canonicalize().run(m)
    assert out.obligations, f"{rule} did not fire"
    assert all(o.id.startswith("canonicalize/") for o in out.obligations)
    returned = out.module.functions[0].returns[0]
    expected = parse(_fn(replacement, "f32")).functions[0]
    if expected.ops:
        defining = {op.result: op for op in out.module.functions[0].ops}[returned]
        assert defining.name == expected.ops[-1].name
    else:
        assert returned == "x"


def test_add_zero_is_not_bit_exact_but_real() -> None:
    pattern = "%c = constant() {value = 0.0} : T[3]\n%r = add(%x, %c) : T[3]\nreturn %r"
    a, b = parse(_fn(pattern, "f32")), parse(_fn("return %x", "f32"))
    fp = check_equivalence(a, b, "fp", timeout=30)
    assert fp.verdict == "not-equivalent"
    x = fp.counterexample.inputs["x"]
    idx = fp.counterexample.index
    assert x[idx] == 0.0 and str(x[idx]).startswith("-")  # -0.0 + 0.0 is +0.0
    assert check_equivalence(a, b, "real", timeout=30).verdict == "equivalent"
    # Canonicalize leaves it alone; fast-math rewrites it as a real claim.
    assert not Canonicalize().run(a).obligations
    fm = FastMath().run(a)
    assert [o.theory for o in fm.obligations] == ["real"]


FAST_MATH = {
    "add-zero": (
        "%c = constant() {value = 0.0} : T[3]\n%r = add(%x, %c) : T[3]\nreturn %r",
        "return %x",
    ),
    "sub-self": (
        "%r = sub(%x, %x) : T[3]\nreturn %r",
        "%r = constant() {value = 0.0} : T[3]\nreturn %r",
    ),
    "reassociate": (
        "%a = constant() {value = 0.1} : T[3]\n%b = constant() {value = 0.2} : T[3]\n"
        "%s = add(%x, %a) : T[3]\n%r = add(%s, %b) : T[3]\nreturn %r",
        "%a = constant() {value = 0.1} : T[3]\n%b = constant() {value = 0.2} : T[3]\n"
        "%s = add(%a, %b) : T[3]\n%r = add(%x, %s) : T[3]\nreturn %r",
    ),
}


@pytest.mark.parametrize("rule", sorted(FAST_MATH))
def test_fast_math_rule_holds_over_the_reals(rule: str) -> None:
    pattern, replacement = FAST_MATH[rule]
    a, b = parse(_fn(pattern, "f32")), parse(_fn(replacement, "f32"))
    assert check_equivalence(a, b, "real", timeout=30).verdict == "equivalent"
    assert FastMath().run(a).obligations, f"{rule} did not fire"


LAYOUT = {
    "transpose-transpose": (
        "%a = transpose(%x) {perm = [1, 2, 0]} : T[3,4,2]\n"
        "%r = transpose(%a) {perm = [2, 0, 1]} : T[2,3,4]\nreturn %r",
        "return %x",
    ),
    "reshape-reshape": (
        "%a = reshape(%x) : T[6,4]\n%r = reshape(%a) : T[4,6]\nreturn %r",
        "%r = reshape(%x) : T[4,6]\nreturn %r",
    ),
    "broadcast-broadcast": (
        "%y = reduce_sum(%x) {axes = [0]} : T[3,4]\n"
        "%a = broadcast(%y) {dims = [0, 2]} : T[3,2,4]\n"
        "%r = broadcast(%a) {dims = [1, 2, 3]} : T[5,3,2,4]\nreturn %r",
        "%y = reduce_sum(%x) {axes = [0]} : T[3,4]\n"
        "%r = broadcast(%y) {dims = [1, 3]} : T[5,3,2,4]\nreturn %r",
    ),
}


@pytest.mark.parametrize("rule", sorted(LAYOUT))
def test_layout_rule_is_bit_exact_and_fires(rule: str) -> None:
    pattern, replacement = LAYOUT[rule]
    result = {
        "transpose-transpose": "T[2,3,4]",
        "reshape-reshape": "T[4,6]",
        "broadcast-broadcast": "T[5,3,2,4]",
    }[rule]
    a = parse(_fn(pattern, "f32", "%x: T[2,3,4]", result))
    b = parse(_fn(replacement, "f32", "%x: T[2,3,4]", result))
    assert check_equivalence(a, b, "fp", timeout=30).verdict == "equivalent"
    out = FoldLayout().run(a)
    assert any(rule in o.id for o in out.obligations)
    assert len(out.module.functions[0].ops) < len(a.functions[0].ops) + 2


MERGE_CASES = [
    # operand shape, reduced axes
    ((2, 3, 4, 5), [2, 3]),  # a global pool: H and W
    ((2, 3, 4, 5, 2), [1, 2, 4]),  # a run and a lone axis
    ((3, 4, 2), [0, 1, 2]),  # everything
]


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_max", "reduce_min"])
@pytest.mark.parametrize(("shape", "axes"), MERGE_CASES)
def test_merged_reduced_axes_fire_prove_and_compute_the_same(op, shape, axes) -> None:
    """reduce over adjacent axes -> reduce over one axis of a reshape: the rewrite's own
    obligation is proved, and the result equals the reference's on values with NaN, -0.0,
    infinities and large cancelling terms (the fold order is kept, so sums match bit for bit)."""
    import numpy as np

    from gdv.backends import reference
    from gdv.validate.discharge import discharge

    out_shape = [s for d, s in enumerate(shape) if d not in axes]
    ty = lambda s: "f32[" + ",".join(map(str, s)) + "]"  # noqa: E731
    text = (
        f"func @main(%x: {ty(shape)}) -> {ty(out_shape)} {{\n"
        f"  %r = {op}(%x) {{axes = {axes}}} : {ty(out_shape)}\n  return %r\n}}\n"
    )
    m = parse(text)
    res = Canonicalize().run(m)
    assert [o.id for o in res.obligations] == ["canonicalize/merge-reduced-axes/equivalence"]
    ops = res.module.functions[0].ops
    assert [o.name for o in ops] == ["reshape", op]
    assert len(ops[1].attrs["axes"]) < len(axes)
    (outcome,) = discharge(res.obligations, timeout=120)
    assert outcome.status == "proved", outcome.reason
    rng = np.random.default_rng(len(shape) + len(axes))
    x = (rng.standard_normal(shape) * 1e7).astype(np.float32)
    flat = x.reshape(-1)
    flat[::7], flat[3::11], flat[5::13] = -0.0, np.inf, np.nan
    flat[1::17] = 1e30
    flat[2::17] = -1e30
    (want,) = reference.run(m, {"x": x})
    (got,) = reference.run(res.module, {"x": x})
    assert np.array_equal(want.view(np.uint32), got.view(np.uint32))


def test_reduced_axes_apart_are_left_alone() -> None:
    m = parse(
        "func @main(%x: f32[2,3,4]) -> f32[3] {\n"
        "  %r = reduce_sum(%x) {axes = [0, 2]} : f32[3]\n  return %r\n}\n"
    )
    assert not Canonicalize().run(m).obligations


def test_a_merge_that_breaks_the_fold_order_is_refuted() -> None:
    """The claim the rule relies on is not trivially true: reducing over (H, W) and over a
    transposed (W, H) merge are different sums in f32."""
    a = parse(
        "func @main(%x: f32[2,3]) -> f32[] {\n"
        "  %r = reduce_sum(%x) {axes = [0, 1]} : f32[]\n  return %r\n}\n"
    )
    b = parse(
        "func @main(%x: f32[2,3]) -> f32[] {\n"
        "  %t = transpose(%x) {perm = [1, 0]} : f32[3,2]\n"
        "  %f = reshape(%t) : f32[6]\n"
        "  %r = reduce_sum(%f) {axes = [0]} : f32[]\n  return %r\n}\n"
    )
    assert check_equivalence(a, b, "fp", timeout=120).verdict == "not-equivalent"
