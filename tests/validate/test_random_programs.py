"""Random well-typed programs from the op registry (tests/ir/strategies.py): every program is
equivalent to itself with its values renamed, in both theories, and the SMT meaning of a whole
program (transcendental-free), evaluated on concrete inputs, equals the reference backend."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st
from support import load_module

from gdv.ir.core import Function, Op, Param
from gdv.ir.diagnostics import IRError
from gdv.ir.ops import REGISTRY
from gdv.ir.ops.elementwise import TRANSCENDENTAL
from gdv.ir.verifier import verify_function
from gdv.validate.counterexample import same_bits, special_inputs
from gdv.validate.equivalence import check_equivalence
from gdv.validate.evaluate import evaluate

S = load_module("ir/strategies.py")
# Kernels need body functions in scope; they have their own agreement case. So do the control
# flow ops (tests/validate/test_control_flow.py).
OPS = sorted(
    n for n in REGISTRY if n != "kernel" and REGISTRY[n].family not in ("collective", "control")
)  # collectives: only in SPMD functions (tests/validate/test_spmd.py)
EXACT_OPS = sorted(
    n
    for n in OPS
    if n not in TRANSCENDENTAL and n not in ("softmax", "log_softmax", "gelu") and n != "layer_norm"
)


def renamed(fn: Function) -> Function:
    """`fn` with every value renamed: equivalence is positional, names do not matter."""
    new = {p.name: f"q{i}" for i, p in enumerate(fn.params)}
    new.update((op.result, f"v{i}") for i, op in enumerate(fn.ops))
    return Function(
        "other",
        [Param(new[p.name], p.type) for p in fn.params],
        list(fn.results),
        [
            Op(new[o.result], o.name, [new[x] for x in o.operands], dict(o.attrs), o.type)
            for o in fn.ops
        ],
        [new[r] for r in fn.returns],
    )


@st.composite
def programs(draw, op_names: list[str]) -> Function:
    chosen = draw(st.lists(st.sampled_from(op_names), min_size=1, max_size=4))
    return draw(S.functions("main", chosen))


def _small(fn: Function, limit: int) -> bool:
    return sum(p.type.num_elements for p in fn.params) <= limit and all(
        o.type.num_elements <= limit for o in fn.ops
    )


@given(programs(OPS))
def test_a_program_is_equivalent_to_itself_renamed(fn):
    verify_function(fn)
    assume(_small(fn, 4096))
    for theory in ("fp", "real"):
        result = check_equivalence(fn, renamed(fn), theory, timeout=5)
        assert result.verdict == "equivalent", result.reason


@given(programs(EXACT_OPS), st.integers(0, 3), st.booleans())
def test_the_smt_meaning_of_a_program_agrees_with_the_reference(fn, seed, special):
    from gdv.backends import reference

    verify_function(fn)
    assume(fn.returns and _small(fn, 24))
    try:
        inputs = special_inputs(fn, seed) if special else reference.random_inputs(fn, seed)
    except IRError:  # a declared range that holds no value of its dtype
        inputs = special_inputs(fn, seed)
    want = reference.run(fn, inputs)
    got = evaluate(fn, inputs)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert same_bits(g, w).all(), (g, w)


SWAPS = {"add": "sub", "sub": "add", "mul": "add", "max": "min", "min": "max", "div": "mul"}


@st.composite
def mutable_programs(draw, op_names: list[str]) -> Function:
    """`programs`, with at least one op that `SWAPS` can mutate among the chosen ones: drawn
    so, not filtered for, since most random op lists hold none (filtering for one failed
    hypothesis's health check in some test orders)."""
    chosen = draw(st.lists(st.sampled_from(op_names), max_size=3))
    chosen.insert(draw(st.integers(0, len(chosen))), draw(st.sampled_from(sorted(SWAPS))))
    return draw(S.functions("main", chosen))


@given(mutable_programs(EXACT_OPS), st.data())
def test_a_proof_is_never_contradicted_by_a_run(fn, data):
    """Mutate one binary op; whenever the result is called equivalent, seeded runs agree, and
    a refutation's counterexample really separates the two programs."""
    from gdv.backends import reference

    verify_function(fn)
    assume(fn.returns and _small(fn, 256))
    sites = [k for k, op in enumerate(fn.ops) if op.name in SWAPS]
    assert sites, fn
    k = data.draw(st.sampled_from(sites))
    mutant = renamed(fn)
    op = mutant.ops[k]
    mutant.ops[k] = Op(op.result, SWAPS[op.name], op.operands, op.attrs, op.type)
    result = check_equivalence(fn, mutant, "fp", timeout=2)
    if result.verdict == "equivalent":
        for seed in range(3):
            for draw in (reference.random_inputs, special_inputs):
                try:
                    inputs = draw(fn, seed)
                except IRError:
                    continue
                renamed_inputs = {f"q{i}": inputs[p.name] for i, p in enumerate(fn.params)}
                a = reference.run(fn, inputs)
                b = reference.run(mutant, renamed_inputs)
                assert all(same_bits(x, y).all() for x, y in zip(a, b, strict=True))
    elif result.verdict == "not-equivalent":
        cex = result.counterexample
        renamed_inputs = {f"q{i}": cex.inputs[p.name] for i, p in enumerate(fn.params)}
        a = reference.run(fn, cex.inputs)[cex.output]
        b = reference.run(mutant, renamed_inputs)[cex.output]
        assert not same_bits(a, b).all()
