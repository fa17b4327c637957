"""Guards for soundness bugs that live *between* ops (issue 14).

1. Whole-program agreement: the symbolic encoding proofs use (fold variables with ranges,
   uninterpreted folds, every tensor's memo), evaluated at concrete inputs only afterwards,
   equals the reference backend bit for bit. Per-op agreement (`test_agreement.py`) cannot see
   a bug in how ops share encoded values; this can.
2. Mutation soundness: a meaning-changing edit of a valid program that the reference shows to
   differ on some input is never called `equivalent`, in either theory.

Both run derandomized in CI (the "ci" profile); `GDV_FUZZ=long` runs many more examples.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from support import load_module

from gdv.ir.diagnostics import IRError
from gdv.ir.verifier import verify_function
from gdv.validate import equivalence
from gdv.validate.counterexample import same_bits, special_inputs, uniform_inputs
from gdv.validate.equivalence import check_equivalence
from gdv.validate.evaluate import evaluate_symbolic
from gdv.validate.semantics import registry

L = load_module("validate/layout_programs.py")
LONG = os.environ.get("GDV_FUZZ") == "long"
EXAMPLES = 2000 if LONG else 80
MUTANT_EXAMPLES = 600 if LONG else 30
fuzz = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@contextlib.contextmanager
def small_folds(unrolled: bool):
    """Small `fp` folds unrolled (the default) or, as for large extents, uninterpreted: with
    dims of at most 12, most folds are small, and the memo's bugs show only between
    uninterpreted folds."""
    saved = registry.SMALL_FOLD
    registry.SMALL_FOLD = saved if unrolled else 1
    try:
        yield
    finally:
        registry.SMALL_FOLD = saved


@contextlib.contextmanager
def probing(on: bool):
    """With the seeded-input probe that runs before any query, or without it: the probe
    refutes most mutants before the solver is asked, and a wrong `unsat` hides behind it."""
    saved = equivalence.PROBE_LIMIT
    equivalence.PROBE_LIMIT = saved if on else -1
    try:
        yield
    finally:
        equivalence.PROBE_LIMIT = saved


def _valid(fn) -> bool:
    try:
        verify_function(fn)
    except IRError:
        return False
    return L.size(fn) <= 2000


def _inputs(fn, seed: int, special: bool):
    from gdv.backends import reference

    return special_inputs(fn, seed) if special else reference.random_inputs(fn, seed)


@fuzz
@given(L.layout_programs(), st.integers(0, 3), st.booleans(), st.booleans())
def test_the_symbolic_encoding_of_a_whole_program_agrees_with_the_reference(
    fn, seed, special, unrolled
):
    from gdv.backends import reference

    assume(_valid(fn))
    inputs = _inputs(fn, seed, special)
    want = reference.run(fn, inputs)
    with small_folds(unrolled):
        got = evaluate_symbolic(fn, inputs)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape and g.dtype == w.dtype
        bad = ~same_bits(g, w)
        assert not bad.any(), (
            f"out{k} differs at {np.argwhere(bad)[:3].tolist()}: SMT {g[bad][:3]} against "
            f"reference {w[bad][:3]}"
        )


def _differs(fn, mutant) -> bool:
    """Does the reference backend show the two programs differ on some probe input?"""
    from gdv.backends import reference
    from gdv.validate.counterexample import replay

    probes = []
    for seed in range(3):
        probes.append(reference.random_inputs(fn, seed))
        probes.append(special_inputs(fn, seed))
    probes += [uniform_inputs(fn, k) for k in range(4)]
    return any(replay(fn, mutant, p, "fp") is not None for p in probes)


@settings(fuzz, max_examples=MUTANT_EXAMPLES)
@given(L.layout_programs(), st.data(), st.booleans(), st.booleans())
def test_a_meaning_changing_mutation_is_never_proved_equivalent(fn, data, unrolled, probe):
    assume(_valid(fn))
    mutants = [(why, m) for why, m in L.mutations(fn) if _valid(m)]
    assume(mutants)
    why, mutant = data.draw(st.sampled_from(mutants), label="mutation")
    assume(_differs(fn, mutant))
    for theory in ("fp", "real"):
        with small_folds(unrolled), probing(probe):
            result = check_equivalence(fn, mutant, theory, timeout=3)
        assert result.verdict != "equivalent", (
            f"{why}: `equivalent` under {theory}, but the reference backend shows a difference"
        )


@settings(fuzz, max_examples=300 if LONG else 25)
@given(L.layout_programs(focused=True), st.data(), st.booleans())
def test_a_mutation_of_a_value_read_through_two_folds_is_refuted_by_the_solver(fn, data, unrolled):
    """The solver alone (no probe), on the place a range-blind memo hides: a concat operand or
    pad value that only the longer of two folds reads."""
    assume(_valid(fn))
    mutants = [(why, m) for why, m in L.mutations(fn, first_only=True) if _valid(m)]
    assume(mutants)
    why, mutant = data.draw(st.sampled_from(mutants), label="mutation")
    assume(_differs(fn, mutant))
    for theory in ("fp", "real"):
        with small_folds(unrolled), probing(False):
            result = check_equivalence(fn, mutant, theory, timeout=3)
        assert result.verdict != "equivalent", (
            f"{why}: `equivalent` under {theory}, but the reference backend shows a difference"
        )
