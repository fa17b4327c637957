"""`fuse-epilogues` (issue 16): a product's elementwise consumer becomes its epilogue, with an
exact equivalence obligation; and the `epilogue` attribute's verifier rules."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gdv.api import parse
from gdv.backends import reference
from gdv.driver import CompileOptions, compile_module
from gdv.ir.diagnostics import IRError
from gdv.ir.ops.kernel import kernel_bodies
from gdv.passes import fuse_epilogues
from gdv.passes.fuse_epilogues import FuseEpilogues
from gdv.passes.manager import PassManager
from gdv.passes.schedule_kernels import ScheduleKernels
from gdv.passes.select_products import SelectProducts
from gdv.validate.discharge import canonical_claim, discharge

BLOCK = """func @main(%x: f32[6,20], %w: f32[20,33], %b: f32[33]{extra_param}) -> f32[6,33] {{
  %y = matmul(%x, %w) : f32[6,33]
  %bb = broadcast(%b) {{dims = [1]}} : f32[6,33]
  %s = add(%y, %bb) : f32[6,33]
  %z = constant() {{value = 0.0}} : f32[]
  %zb = broadcast(%z) {{dims = []}} : f32[6,33]
  %r = max(%s, %zb) : f32[6,33]
  {tail}
}}
"""


def _compile(tmp_path, text: str, level: int = 2):
    path = tmp_path / "m.gdv"
    path.write_text(text)
    return compile_module(
        str(path), CompileOptions(target="c", level=level, cache_dir=str(tmp_path))
    )


def _inputs(module, seed: int = 0) -> dict:
    return reference.random_inputs(module.entry, seed)


def _epilogues(comp) -> list:
    return [op for op in comp.module.entry.ops if "epilogue" in op.attrs]


@pytest.mark.parametrize("level", [2, 3])
def test_bias_and_relu_become_the_products_epilogue(tmp_path, level: int) -> None:
    text = BLOCK.format(extra_param="", tail="return %r")
    comp = _compile(tmp_path, text, level)
    assert comp.verdict == "proved"
    (fused,) = _epilogues(comp)
    assert fused.attrs["strategy"] == "product"
    assert [o.obligation.id for o in comp.outcomes if "fuse-epilogues" in o.obligation.id]
    ins = _inputs(comp.source)
    got = comp(**ins)
    want = reference.run(comp.module, ins)  # the final module, as the C target runs it
    assert reference.bit_equal(got[0], want[0])
    if level == 2:  # the exact mode: the same bits as the program as written
        assert reference.bit_equal(got[0], reference.run(comp.source, ins)[0])


@pytest.mark.parametrize("level", [2, 3])
def test_a_residual_add_joins_the_epilogue(tmp_path, level: int) -> None:
    """relu(x @ w + b) + q, q a whole tensor read along the product's rows: one product with
    the bias, the relu and the residual as its epilogue, proved, with the reference's bits."""
    text = BLOCK.format(
        extra_param=", %q: f32[6,33]", tail="%t = add(%r, %q) : f32[6,33]\n  return %t"
    )
    comp = _compile(tmp_path, text, level)
    assert comp.verdict == "proved"
    (fused,) = _epilogues(comp)
    assert "q" in fused.operands and len(comp.module.entry.ops) == 1
    ins = _inputs(comp.source, 3)
    got = comp(**ins)
    assert reference.bit_equal(got[0], reference.run(comp.module, ins)[0])
    if level == 2:
        assert reference.bit_equal(got[0], reference.run(comp.source, ins)[0])


@pytest.mark.parametrize(
    "extra_param, tail",
    [
        # the product's result is also returned
        ("", "return %r, %y"),
        # a residual read transposed: its rows do not run along the product's (RESIDUALS)
        (
            ", %q: f32[33,6]",
            "%qt = transpose(%q) {perm = [1, 0]} : f32[6,33]\n"
            "  %t = add(%r, %qt) : f32[6,33]\n  return %t",
        ),
    ],
)
def test_no_epilogue_where_the_conditions_fail(tmp_path, extra_param: str, tail: str) -> None:
    text = BLOCK.format(extra_param=extra_param, tail=tail)
    if "%y\n" in tail or tail.endswith("%y"):
        text = text.replace("-> f32[6,33] {", "-> (f32[6,33], f32[6,33]) {")
    comp = _compile(tmp_path, text)
    assert comp.verdict == "proved"
    # fuse-kernels made bias, relu (and the residual add) one consumer, which stays apart
    assert not _epilogues(comp)
    ins = _inputs(comp.source)
    for g, w in zip(comp(**ins), reference.run(comp.source, ins), strict=True):
        assert reference.bit_equal(g, w)


def test_consumer_reading_the_product_transposed_is_not_fused(tmp_path) -> None:
    text = """func @main(%x: f32[8,8], %w: f32[8,8]) -> f32[8,8] {
  %y = matmul(%x, %w) : f32[8,8]
  %t = transpose(%y) {perm = [1, 0]} : f32[8,8]
  %r = relu(%t) : f32[8,8]
  return %r
}
"""
    comp = _compile(tmp_path, text)
    assert comp.verdict == "proved"
    for op in _epilogues(comp):  # if fused, its epilogue read the fold at its own index
        ins = _inputs(comp.source)
        assert reference.bit_equal(comp(**ins)[0], reference.run(comp.source, ins)[0]), op


def test_an_empty_fold_gets_no_epilogue(tmp_path) -> None:
    """A product over a reduce dim of extent 0 (all outputs 0) keeps its consumer apart: an
    epilogue needs reduce extents >= 1 (found by `gdv fuzz`, program 23 of the CI run)."""
    text = """func @main(%x: f64[3,0], %w: f64[0,4]) -> f64[3,4] {
  %y = matmul(%x, %w) : f64[3,4]
  %r = relu(%y) : f64[3,4]
  return %r
}
"""
    comp = _compile(tmp_path, text)
    assert comp.verdict == "proved" and not _epilogues(comp)
    ins = _inputs(comp.source)
    assert reference.bit_equal(comp(**ins)[0], reference.run(comp.source, ins)[0])


LOOP = """func @main(%x: f32[5,7], %w: f32[7,9], %b: f32[9]) -> f32[5,9] {
  %p = kernel(%x, %w) {body = "m", space = [5, 9, 7], maps = [[[1, 0, 0, 0], [0, 0, 1, 0]],
    [[0, 0, 1, 0], [0, 1, 0, 0]]], out = [0, 1], reduce = [2], combiner = "add"} : f32[5,9]
  %c = kernel(%p, %b) {body = "g", space = [5, 9], maps = [[[1, 0, 0], [0, 1, 0]],
    [[0, 1, 0]]], out = [0, 1], reduce = [], combiner = "none"} : f32[5,9]
  %d = kernel(%c) {body = "h", space = [5, 9], maps = [[[1, 0, 0], [0, 1, 0]]], out = [0, 1],
    reduce = [], combiner = "none"} : f32[5,9]
  return %d
}
func @m(%a: f32[], %v: f32[]) -> f32[] {
  %q = mul(%a, %v) : f32[]
  return %q
}
func @g(%a: f32[], %v: f32[]) -> f32[] {
  %q = add(%a, %v) : f32[]
  return %q
}
func @h(%a: f32[]) -> f32[] {
  %h = constant() {value = 0.25} : f32[]
  %q = mul(%a, %h) : f32[]
  return %q
}
"""


def _scheduled(text: str):
    return PassManager([ScheduleKernels(), SelectProducts()]).run(parse(text)).module


def test_two_consumers_compose_into_one_epilogue() -> None:
    """A product that already has an epilogue takes the next consumer too: the composition,
    proved as exact as each fusion is."""
    module = _scheduled(LOOP)
    result = PassManager([FuseEpilogues()]).run(module)
    ops = result.module.entry.ops
    assert [op.name for op in ops] == ["kernel"] and "epilogue" in ops[0].attrs
    outs = discharge(result.obligations, jobs=1, use_cache=False)
    assert len(outs) == 2 and all(o.status == "proved" for o in outs)
    ins = _inputs(module, 3)
    assert reference.bit_equal(reference.run(result.module, ins)[0], reference.run(module, ins)[0])


def test_a_wrong_epilogue_is_refuted(monkeypatch) -> None:
    """A planted bug in the pass (the consumer's bias read as the product's row factor at
    k = 0) makes its obligation refuted: the pass cannot get a wrong epilogue past the proof."""
    real = fuse_epilogues.epilogue_function

    def wrong(name, acc_type, p_params, old, consumer, reads):
        fn = real(name, acc_type, p_params, old, consumer, reads)
        first_operand = fn.params[1].name  # x at (i, k = 0), not the bias
        ops = [
            dataclasses.replace(o, operands=[first_operand if v.startswith("c.") and v in
                                             {q.name for q in fn.params} else v
                                             for v in o.operands])
            for o in fn.ops
        ]  # fmt: skip
        return dataclasses.replace(fn, ops=ops)

    monkeypatch.setattr(fuse_epilogues, "epilogue_function", wrong)
    module = _scheduled(LOOP)
    result = PassManager([FuseEpilogues()]).run(module)
    outs = discharge(result.obligations[:1], jobs=1, use_cache=False)
    assert outs[0].status == "refuted"


def test_claims_differing_in_their_epilogue_have_different_keys() -> None:
    """The canonical claim (the proof cache's key) names each epilogue by the hash of its
    text: two fusions with different epilogues never share a cached proof."""
    a = PassManager([FuseEpilogues()]).run(_scheduled(LOOP)).obligations[0]
    b = PassManager([FuseEpilogues()]).run(_scheduled(LOOP.replace("add(%a, %v)", "sub(%a, %v)")))
    assert canonical_claim(a) != canonical_claim(b.obligations[0])


# --- the verifier's rules for `epilogue` --------------------------------------------------------

KERNEL = """func @main(%x: f32[3,4]) -> f32[3] {{
  %r = kernel(%x) {{body = "f", epilogue = "{epi}", space = [3, {k}], maps = [[[1, 0, 0],
    [0, 1, 0]]], out = [0], reduce = [{red}], combiner = "{comb}"}} : f32[3]
  return %r
}}
func @f(%a: f32[]) -> f32[] {{
  return %a
}}
func @e(%acc: f32[], %a: f32[]) -> f32[] {{
  %r = add(%acc, %a) : f32[]
  return %r
}}
func @wrong_arity(%acc: f32[]) -> f32[] {{
  return %acc
}}
func @wrong_result(%acc: f32[], %a: f32[]) -> f64[] {{
  %r = convert(%acc) : f64[]
  return %r
}}
"""


@pytest.mark.parametrize(
    "epi, k, red, comb, message",
    [
        ("missing", 4, "1", "add", "epilogue @missing is not a function of the module"),
        ("wrong_arity", 4, "1", "add", "the folded value, then one per operand"),
        ("wrong_result", 4, "1", "add", r"expected f32\[\] like the kernel's result"),
        ("f", 4, "1", "add", "is the function that calls it or the kernel's body"),
        ("e", 0, "1", "add", "an epilogue needs reduce dims, each of extent >= 1"),
    ],
)
def test_epilogue_verifier_errors(epi: str, k: int, red: str, comb: str, message: str) -> None:
    text = KERNEL.format(epi=epi, k=k, red=red, comb=comb)
    with pytest.raises(IRError, match=message) as info:
        parse(text)
    assert info.value.loc is not None and info.value.loc.line >= 1


def test_epilogue_on_an_elementwise_kernel_is_refused() -> None:
    text = KERNEL.format(epi="e", k=4, red="1", comb="add")
    text = text.replace("space = [3, 4]", "space = [3]").replace(
        'maps = [[[1, 0, 0],\n    [0, 1, 0]]], out = [0], reduce = [1], combiner = "add"',
        'maps = [[[1, 0], [0, 0]]], out = [0], reduce = [], combiner = "none"',
    )
    with pytest.raises(IRError, match="an epilogue needs reduce dims"):
        parse(text)


def test_epilogue_reference_value() -> None:
    module = parse(KERNEL.format(epi="e", k=4, red="1", comb="add"))
    x = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    with kernel_bodies(module.functions):
        (got,) = reference.run(module, {"x": x})
    assert np.array_equal(got, x.sum(axis=1, dtype=np.float32) + x[:, 0])
