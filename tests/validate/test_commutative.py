"""Commutative operands in canonical order (issue 15, item 4): `add(b, a)`, (AB)^T against
B^T A^T and a 1x1 conv2d against a dot prove bit-exactly by identity of their encodings at any
size, while changes that only look alike (`sub` swapped, another fold order) are still refuted.
`benchmarks/tv_unknowns.py` and the README's tv section give the timings."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
import z3

from gdv.api import parse
from gdv.ir.dtypes import DType
from gdv.validate.equivalence import check_equivalence
from gdv.validate.semantics.values import Values


def fn(text: str):
    return parse(text).entry


def add_pair(n: int) -> tuple[str, str]:
    sig = f"func @main(%a: f32[{n},{n}], %b: f32[{n},{n}]) -> f32[{n},{n}]"
    return (
        f"{sig} {{\n  %r = add(%a, %b) : f32[{n},{n}]\n  return %r\n}}",
        f"{sig} {{\n  %r = add(%b, %a) : f32[{n},{n}]\n  return %r\n}}",
    )


def transpose_pair(n: int) -> tuple[str, str]:
    t = f"f32[{n},{n}]"
    sig = f"func @main(%a: {t}, %b: {t}) -> {t}"
    return (
        f"{sig} {{\n  %d = matmul(%a, %b) : {t}\n"
        f"  %r = transpose(%d) {{perm = [1, 0]}} : {t}\n  return %r\n}}",
        f"{sig} {{\n  %at = transpose(%a) {{perm = [1, 0]}} : {t}\n"
        f"  %bt = transpose(%b) {{perm = [1, 0]}} : {t}\n"
        f"  %r = matmul(%bt, %at) : {t}\n  return %r\n}}",
    )


def conv_pair(n: int) -> tuple[str, str]:
    """A 1x1 conv2d over n channels against dot(w, x): the product written the other way."""
    sig = f"func @main(%x: f32[1,{n},5,5], %w: f32[6,{n},1,1]) -> f32[1,6,5,5]"
    return (
        f"{sig} {{\n  %r = conv2d(%x, %w) {{stride = [1, 1], padding = [[0, 0], [0, 0]], "
        "dilation = [1, 1], groups = 1} : f32[1,6,5,5]\n  return %r\n}",
        f"{sig} {{\n  %xr = reshape(%x) : f32[{n},25]\n  %wr = reshape(%w) : f32[6,{n}]\n"
        "  %d = dot(%wr, %xr) {lhs_batch = [], rhs_batch = [], lhs_contract = [1], "
        "rhs_contract = [0]} : f32[6,25]\n  %r = reshape(%d) : f32[1,6,5,5]\n  return %r\n}",
    )


PAIRS = {"add": add_pair, "transpose": transpose_pair, "conv1x1": conv_pair}


@pytest.mark.parametrize("n", [4, 1024])
@pytest.mark.parametrize("name", sorted(PAIRS))
@pytest.mark.parametrize("theory", ["fp", "real"])
def test_easy_pairs_prove_by_identity_at_any_size(name, n, theory) -> None:
    a, b = PAIRS[name](n)
    start = time.perf_counter()
    r = check_equivalence(fn(a), fn(b), theory, timeout=4.0)
    seconds = time.perf_counter() - start
    assert r.verdict == "equivalent", r.reason
    # One term on both sides: no probe, no solver, so no size dependence at all.
    assert [q.stage for q in r.queries] == ["identical"]
    assert seconds < 5.0  # generous: about 0.005 s here (README, tv section)


def _sub_pairs(n: int) -> dict[str, tuple[str, str]]:
    t = f"f32[{n},{n}]"
    sig = f"func @main(%a: {t}, %b: {t}) -> {t}"
    return {
        "sub swapped": (
            f"{sig} {{\n  %r = sub(%a, %b) : {t}\n  return %r\n}}",
            f"{sig} {{\n  %r = sub(%b, %a) : {t}\n  return %r\n}}",
        ),
        # a - b against -(b - a): equal but for the sign of zero (a == b gives +0.0, -0.0).
        "sub negated": (
            f"{sig} {{\n  %r = sub(%a, %b) : {t}\n  return %r\n}}",
            f"{sig} {{\n  %s = sub(%b, %a) : {t}\n  %r = neg(%s) : {t}\n  return %r\n}}",
        ),
        # (A - B)^T against B^T - A^T: transposes commute, the difference does not.
        "transposed difference": (
            f"{sig} {{\n  %d = sub(%a, %b) : {t}\n"
            f"  %r = transpose(%d) {{perm = [1, 0]}} : {t}\n  return %r\n}}",
            f"{sig} {{\n  %at = transpose(%a) {{perm = [1, 0]}} : {t}\n"
            f"  %bt = transpose(%b) {{perm = [1, 0]}} : {t}\n"
            f"  %r = sub(%bt, %at) : {t}\n  return %r\n}}",
        ),
        # The sum of all elements in another order (column-major): not bit-exact.
        "fold order": (
            f"func @main(%a: {t}, %b: {t}) -> f32[] {{\n"
            f"  %r = reduce_sum(%a) {{axes = [0, 1]}} : f32[]\n  return %r\n}}",
            f"func @main(%a: {t}, %b: {t}) -> f32[] {{\n"
            f"  %t = transpose(%a) {{perm = [1, 0]}} : {t}\n"
            f"  %r = reduce_sum(%t) {{axes = [0, 1]}} : f32[]\n  return %r\n}}",
        ),
    }


@pytest.mark.parametrize("n", [4, 64])
@pytest.mark.parametrize("name", sorted(_sub_pairs(4)))
def test_changes_that_do_not_commute_are_still_refuted(name, n) -> None:
    from gdv.backends import reference
    from gdv.validate.counterexample import same_bits

    a, b = (fn(t) for t in _sub_pairs(n)[name])
    r = check_equivalence(a, b, "fp", timeout=4.0)
    assert r.verdict == "not-equivalent", r.reason
    cex = r.counterexample
    assert cex is not None
    out_a = reference.run(a, cex.inputs)[cex.output]
    out_b = reference.run(b, cex.inputs)[cex.output]
    assert not same_bits(out_a[cex.index], out_b[cex.index])


def test_a_different_fold_order_is_refuted_under_fp_and_never_refuted_under_real() -> None:
    a, b = (fn(t) for t in _sub_pairs(16)["fold order"])
    assert check_equivalence(a, b, "fp", timeout=4.0).verdict == "not-equivalent"
    # Equal over the reals; no lemma reorders this multi-axis sum, so `unknown` at worst.
    assert check_equivalence(a, b, "real", timeout=4.0).verdict != "not-equivalent"


def test_a_fold_of_products_in_another_order_is_not_identified() -> None:
    """Canonical order swaps the two operands of one op, never the terms of a fold: the
    unrolled sums (a0*b0 + a1*b1) + a2*b2 and (a0*b0 + a2*b2) + a1*b1 stay distinct."""
    sig = "func @main(%a: f32[3], %b: f32[3]) -> f32[]"
    src = fn(
        f"{sig} {{\n  %d = dot(%a, %b) {{lhs_batch = [], rhs_batch = [], lhs_contract = [0], "
        "rhs_contract = [0]} : f32[]\n  return %d\n}"
    )
    parts = "\n".join(
        f"  %a{k} = slice(%a) {{start = [{k}], limit = [{k + 1}], stride = [1]}} : f32[1]\n"
        f"  %b{k} = slice(%b) {{start = [{k}], limit = [{k + 1}], stride = [1]}} : f32[1]\n"
        f"  %p{k} = mul(%b{k}, %a{k}) : f32[1]"
        for k in range(3)
    )
    tgt = fn(
        f"{sig} {{\n{parts}\n  %s = add(%p0, %p2) : f32[1]\n  %u = add(%p1, %s) : f32[1]\n"
        "  %r = reshape(%u) : f32[]\n  return %r\n}"
    )
    assert check_equivalence(src, tgt, "fp", timeout=4.0).verdict == "not-equivalent"
    assert check_equivalence(src, tgt, "real", timeout=4.0).verdict == "equivalent"


@pytest.mark.parametrize("op", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [DType.F32, DType.BF16, DType.I32])
def test_the_order_does_not_depend_on_which_operand_comes_first(op, dtype) -> None:
    v = Values("fp")
    s = v.sort(dtype)
    x, y = z3.Const("in.x", s), z3.Const("in.y", s)
    assert getattr(v, op)(dtype, x, y).eq(getattr(v, op)(dtype, y, x))
    w = Values("fp")  # a fresh context, operands met in the other order first
    assert getattr(w, op)(dtype, y, x).sexpr() == getattr(v, op)(dtype, x, y).sexpr()


SPECIAL = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-40, 3.0, -2.5]


@pytest.mark.parametrize("op", ["add", "mul", "max", "min"])
def test_canonical_order_keeps_the_reference_meaning_on_special_values(op) -> None:
    """The op evaluated through the SMT meaning (canonical order) on concrete operands in both
    orders equals the reference backend's result in the written order, bit for bit."""
    from gdv.backends import reference
    from gdv.validate.counterexample import same_bits, value_to_numpy

    prog = fn(
        f"func @main(%a: f32[], %b: f32[]) -> f32[] {{\n  %r = {op}(%a, %b) : f32[]\n"
        "  return %r\n}"
    )
    v = Values("fp")
    for x in SPECIAL:
        for y in SPECIAL:
            xa, ya = np.float32(x), np.float32(y)
            term = z3.simplify(
                getattr(v, op)(DType.F32, v.scalar(xa, DType.F32), v.scalar(ya, DType.F32))
            )
            got = value_to_numpy(term, DType.F32)
            (want,) = reference.run(prog, {"a": np.array(xa), "b": np.array(ya)})
            assert same_bits(np.array(got), want), (op, x, y, got, want)


def test_the_stored_query_text_is_the_same_in_every_process() -> None:
    """The canonical order is a digest of the terms' structure, not of Z3's ids or Python's
    hash seed: the stored SMT-LIB text (evidence, cache) is the same run after run, whatever
    terms were built before in the process. (Fresh processes each: the let-bindings Z3 prints
    may differ in a process that a long test session has filled with other terms.)"""
    src, tgt = transpose_pair(8)
    wrong = tgt.replace("matmul(%bt, %at)", "matmul(%at, %bt)")
    texts = set()
    for seed, junk in (("0", False), ("1", True), ("2", True)):
        code = (
            "import sys\nfrom gdv.api import parse\n"
            "from gdv.validate.equivalence import query_smt2\n"
            "from gdv.validate.discharge import stable_smt2\n"
            f"a, b = {src!r}, {wrong!r}\n"
            + ("junk = query_smt2(parse(b).entry, parse(a).entry)\n" if junk else "")
            + "sys.stdout.write(stable_smt2(query_smt2(parse(a).entry, parse(b).entry)))\n"
        )
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        )
        texts.add(out.stdout)
    assert len(texts) == 1
    (text,) = texts
    assert "in.a" in text and "in.b" in text
