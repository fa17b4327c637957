"""Shared subterms (issue 15, item 4): before the full query, the subterms both sides share are
replaced by fresh constants (`equivalence.share_subterms`). A proof of that query is a proof
(it is a generalisation); a model of it counts only when its inputs replay on the reference
backend, else the full query decides."""

from __future__ import annotations

import numpy as np
import pytest
import z3

from gdv.api import parse
from gdv.backends import reference
from gdv.ir.ops.kernel import kernel_bodies
from gdv.validate.corpus import corpus_files, load_pair
from gdv.validate.counterexample import same_bits
from gdv.validate.equivalence import (
    SHARED,
    _solve,
    build_query,
    check_equivalence,
    share_subterms,
)


def chain(dt: str) -> str:
    """A deep float expression (divisions, a square root) that bit-blasts slowly."""
    return "\n".join(
        [
            f"  %s1 = div(%x, %y) : {dt}[4]",
            f"  %s2 = mul(%s1, %z) : {dt}[4]",
            f"  %s3 = div(%s2, %w) : {dt}[4]",
            f"  %s4 = add(%s3, %x) : {dt}[4]",
            f"  %s5 = div(%s4, %z) : {dt}[4]",
            f"  %s6 = sqrt(%s5) : {dt}[4]",
        ]
    )


def doubled(dt: str = "f64") -> tuple[str, str]:
    """s * 2.0 against s + s, s the chain: true for every s, hard through the chain."""
    sig = f"func @main(%x: {dt}[4], %y: {dt}[4], %z: {dt}[4], %w: {dt}[4]) -> {dt}[4]"
    return (
        f"{sig} {{\n{chain(dt)}\n  %two = constant() {{value = 2.0}} : {dt}[4]\n"
        f"  %r = mul(%s6, %two) : {dt}[4]\n  return %r\n}}",
        f"{sig} {{\n{chain(dt)}\n  %r = add(%s6, %s6) : {dt}[4]\n  return %r\n}}",
    )


def test_a_pair_that_proves_thanks_to_the_shared_subterm() -> None:
    a, b = (parse(t).entry for t in doubled())
    r = check_equivalence(a, b, "fp", timeout=4.0)
    assert r.verdict == "equivalent", r.reason
    assert [(q.stage, q.result) for q in r.queries][-1] == ("shared", "unsat")
    # The same query with the chain left in: no proof in the time the shared one took.
    q = build_query(a, b, 0, "fp")
    assert _solve(q, 0.5)[0] != "unsat"
    shared = share_subterms(q)
    assert shared is not None and len(shared.shared) == 1
    assert _solve(shared, 4.0)[0] == "unsat"


def test_a_spurious_model_of_the_abstraction_is_not_a_refutation() -> None:
    """|x*x| = x*x bit for bit (x*x is never negative but for NaNs, all one value); with x*x
    opaque the abstraction has a model (s = -1), whose inputs replay to no difference."""
    src = parse("func @main(%x: f32[8]) -> f32[8] {\n  %s = mul(%x, %x) : f32[8]\n  return %s\n}")
    tgt = parse(
        "func @main(%x: f32[8]) -> f32[8] {\n  %s = mul(%x, %x) : f32[8]\n"
        "  %r = abs(%s) : f32[8]\n  return %r\n}"
    )
    for theory in ("fp", "real"):
        r = check_equivalence(src, tgt, theory, timeout=4.0)
        stages = [(q.stage, q.result) for q in r.queries]
        assert ("shared", "sat") in stages, stages
        assert r.verdict == "equivalent", (theory, r.reason)


def test_a_real_difference_behind_a_shared_subterm_is_refuted_with_a_replayed_cex() -> None:
    sig = "func @main(%x: f32[4], %y: f32[4]) -> f32[4]"
    body = "  %s = div(%x, %y) : f32[4]\n  %t = mul(%s, %s) : f32[4]\n"
    src = parse(f"{sig} {{\n{body}  %r = add(%t, %x) : f32[4]\n  return %r\n}}")
    tgt = parse(f"{sig} {{\n{body}  %r = sub(%t, %x) : f32[4]\n  return %r\n}}")
    for theory in ("fp", "real"):
        r = check_equivalence(src, tgt, theory, timeout=4.0)
        assert r.verdict == "not-equivalent", (theory, r.reason)
        cex = r.counterexample
        assert cex is not None
        a = reference.run(src, cex.inputs)[cex.output][cex.index]
        b = reference.run(tgt, cex.inputs)[cex.output][cex.index]
        assert not same_bits(np.asarray(a), np.asarray(b))


def _back(shared) -> list[z3.BoolRef]:
    inverse = [(c, t) for t, c in shared.shared]
    return [z3.substitute(a, *inverse) for a in shared.raw]


FILES = corpus_files()


@pytest.mark.parametrize("theory", ["fp", "real"])
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_the_abstraction_is_a_generalisation(path, theory) -> None:
    """Putting each shared subterm back for its constant gives the full query exactly, so an
    `unsat` of the abstraction is an `unsat` of the query; the constants stand for closed,
    non-leaf terms other than input reads and index arithmetic."""
    pair = load_pair(path)
    with kernel_bodies([]):
        for o in range(len(pair.src.results)):
            q = build_query(pair.src, pair.tgt, o, theory)
            shared = share_subterms(q)
            if shared is None:
                continue
            assert len(shared.raw) == len(q.raw)
            assert all(x.eq(y) for x, y in zip(_back(shared), q.raw, strict=True))
            inputs = {f.name() for f in q.input_functions}
            for t, c in shared.shared:
                assert c.decl().name().startswith(SHARED)
                assert t.num_args() > 0 and t.decl().name() not in inputs
                assert t.sort().kind() not in (z3.Z3_INT_SORT, z3.Z3_ARRAY_SORT)
                assert not z3.is_quantifier(t)
