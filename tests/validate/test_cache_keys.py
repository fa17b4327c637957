"""Cache keys are injective on meaning (issue 14, "cache key not injective").

The proof cache answers a claim from an earlier proof when their keys match, so equal keys
must mean equal claims. Parameters of an equivalence claim correspond by *position*; names are
free. The properties: renaming values on either side never changes the key, and two claims
with one key compute the same thing position for position (checked on the reference backend).
A cache entry whose stored canonical text is not the claim's is never a hit.
"""

from __future__ import annotations

import json
import os

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from support import load_module

from gdv.ir.core import Function, Op, Param
from gdv.ir.diagnostics import IRError
from gdv.ir.dtypes import DType
from gdv.ir.obligation import Obligation
from gdv.ir.types import TensorType
from gdv.ir.verifier import verify_function
from gdv.validate.counterexample import same_bits
from gdv.validate.discharge import Cache, Outcome, cache_key, canonical_claim, claim_key

L = load_module("validate/layout_programs.py")
LONG = os.environ.get("GDV_FUZZ") == "long"
prop = settings(
    max_examples=1000 if LONG else 150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
# Names that collide with the canonical ones (p0, v1, ...) and with each other's sides.
NAMES = st.sampled_from(["a", "b", "c", "p0", "p1", "p2", "v0", "v1", "x"])
T = TensorType(DType.F32, (4,))
BINARY = ["sub", "div", "add", "max", "mul"]


def obligation(src: Function, tgt: Function) -> Obligation:
    return Obligation("t/rule/equivalence", "equivalence", "fp", src, tgt, "test claim")


def rename(fn: Function, names: list[str]) -> Function:
    """`fn` with its values renamed to `names` (params first, then op results, in order)."""
    old = [p.name for p in fn.params] + [o.result for o in fn.ops]
    new = dict(zip(old, names, strict=True))
    return Function(
        fn.name,
        [Param(new[p.name], p.type) for p in fn.params],
        list(fn.results),
        [Op(new[o.result], o.name, [new[x] for x in o.operands], o.attrs, o.type) for o in fn.ops],
        [new[r] for r in fn.returns],
    )


@st.composite
def small_programs(draw) -> Function:
    """2-3 f32[4] parameters and 1-3 binary ops over any earlier values, with clash-prone
    names."""
    n = draw(st.integers(2, 3))
    names = draw(st.lists(NAMES, min_size=n + 3, max_size=n + 3, unique=True))
    params = [Param(names[k], T) for k in range(n)]
    ops: list[Op] = []
    values = [p.name for p in params]
    for k in range(draw(st.integers(1, 3))):
        a, b = draw(st.sampled_from(values)), draw(st.sampled_from(values))
        r = names[n + k]
        ops.append(Op(r, draw(st.sampled_from(BINARY)), [a, b], {}, T))
        values.append(r)
    return Function("main", params, [T], ops, [values[-1]])


def outputs(fn: Function, seed: int) -> list[np.ndarray]:
    from gdv.backends import reference

    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(4).astype(np.float32) for _ in fn.params]
    return reference.run(fn, {p.name: a for p, a in zip(fn.params, arrays, strict=True)})


def same_meaning(f: Function, g: Function) -> bool:
    """Positionally the same outputs on a few seeded inputs (f and g share a signature)."""
    for seed in range(3):
        for x, y in zip(outputs(f, seed), outputs(g, seed), strict=True):
            if not same_bits(x, y).all():
                return False
    return True


@st.composite
def neighbours(draw, fn: Function) -> Function:
    """`fn` with one op's operands swapped or its parameters reordered (each may change the
    positional meaning), then (or not) every value renamed with clash-prone names."""
    if draw(st.booleans()):
        k = draw(st.integers(0, len(fn.ops) - 1))
        op = fn.ops[k]
        ops = list(fn.ops)
        ops[k] = Op(op.result, op.name, op.operands[::-1], op.attrs, op.type)
        fn = Function(fn.name, fn.params, fn.results, ops, fn.returns)
    else:
        params = draw(st.permutations(fn.params))
        fn = Function(fn.name, list(params), fn.results, fn.ops, fn.returns)
    if draw(st.booleans()):
        return fn  # the same names: the edit alone must change the key
    n = len(fn.params) + len(fn.ops)
    return rename(fn, draw(st.lists(NAMES, min_size=n, max_size=n, unique=True)))


@prop
@given(small_programs(), small_programs(), st.data())
def test_claims_with_one_key_compute_the_same(src, t1, data):
    assume(len(t1.params) == len(src.params))
    t2 = data.draw(neighbours(t1))
    if cache_key(obligation(src, t1)) == cache_key(obligation(src, t2)):
        assert same_meaning(t1, t2), "two claims of different meaning share a cache key"


@prop
@given(small_programs(), st.data())
def test_the_classic_collision_of_issue_14_differs(src, data):
    """Target parameters named like source ones, in another order: `(%b, %c) -> sub(%c, %b)`
    against `(%a, %b)` once printed like `sub(%b, %c)`."""
    assume(len(src.params) == 2)
    a, b = src.params
    good = Function(
        "main", [Param("b", T), Param("c", T)], [T], [Op("r", "sub", ["b", "c"], {}, T)], ["r"]
    )
    wrong = Function(
        "main", [Param("b", T), Param("c", T)], [T], [Op("r", "sub", ["c", "b"], {}, T)], ["r"]
    )
    assert cache_key(obligation(src, good)) != cache_key(obligation(src, wrong))


@prop
@given(small_programs(), small_programs(), st.data())
def test_renaming_either_side_keeps_the_key(src, tgt, data):
    assume(len(src.params) == len(tgt.params))
    k = cache_key(obligation(src, tgt))
    count = lambda f: len(f.params) + len(f.ops)  # noqa: E731
    ns = data.draw(st.lists(NAMES, min_size=count(src), max_size=count(src), unique=True))
    nt = data.draw(st.lists(NAMES, min_size=count(tgt), max_size=count(tgt), unique=True))
    assert cache_key(obligation(rename(src, ns), rename(tgt, nt))) == k


@settings(max_examples=300 if LONG else 40, deadline=None, suppress_health_check=list(HealthCheck))
@given(L.layout_programs(), st.data())
def test_renaming_a_layout_program_keeps_the_key_and_a_mutant_changes_it(fn, data):
    try:
        verify_function(fn)
    except IRError:
        assume(False)
    n = len(fn.params) + len(fn.ops)
    names = data.draw(st.permutations([f"p{k}" for k in range(n)]))
    k = cache_key(obligation(fn, fn))
    assert cache_key(obligation(rename(fn, list(names)), fn)) == k
    for _, mutant in L.mutations(fn):
        if mutant.ops != fn.ops:  # concat(%x, %x) reversed is the same program
            assert cache_key(obligation(fn, mutant)) != k


def test_a_cache_entry_holding_another_claim_is_no_hit(tmp_path) -> None:
    src = Function(
        "main", [Param("a", T), Param("b", T)], [T], [Op("r", "sub", ["a", "b"], {}, T)], ["r"]
    )
    other = Function(
        "main", [Param("a", T), Param("b", T)], [T], [Op("r", "sub", ["b", "a"], {}, T)], ["r"]
    )
    claim, wrong = canonical_claim(obligation(src, src)), canonical_claim(obligation(src, other))
    cache = Cache(tmp_path)
    cache.store(claim, Outcome(obligation(src, src), "proved", 0.0))
    assert cache.proved(claim)
    # An entry under the claim's hash that holds another claim's text (a collision, or a
    # tampered cache) is not a proof of this claim.
    path = tmp_path / "obligations" / claim_key(claim)[:2] / f"{claim_key(claim)}.json"
    entry = json.loads(path.read_text())
    entry["claim"] = wrong
    path.write_text(json.dumps(entry))
    assert not cache.proved(claim)
    # Nor is an entry without the text (the cache of gdv before issue 14).
    del entry["claim"]
    path.write_text(json.dumps(entry))
    assert not cache.proved(claim)


def test_signed_and_unsigned_claims_of_one_width_have_different_keys() -> None:
    """i8 and u8 are one 8-bit bit-vector sort in the SMT encoding, and max(x, 0) == x holds
    for u8 only: a u8 proof must never answer the i8 claim (the dtype is in the key)."""
    keys = {}
    for d in (DType.I8, DType.U8):
        t = TensorType(d, (4,))
        zero = Op("z", "constant", [], {"value": 0}, t)
        src = Function(
            "main", [Param("x", t)], [t], [zero, Op("m", "max", ["x", "z"], {}, t)], ["m"]
        )
        tgt = Function("main", [Param("x", t)], [t], [], ["x"])
        verify_function(src)
        keys[d] = cache_key(obligation(src, tgt))
    assert keys[DType.I8] != keys[DType.U8]
