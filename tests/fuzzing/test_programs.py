"""The program generator behind `gdv fuzz` (gdv/fuzzing/programs.py, issue 18): its programs
verify, chain, stay small, cover the registry's ops, dtypes and edge dims, and run on the
reference backend on inputs with specials mixed in."""

from __future__ import annotations

from collections import Counter

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given

from gdv.backends import reference
from gdv.fuzzing.programs import EXCLUDED, MAX_ELEMENTS, OPS, inputs, programs, sample
from gdv.ir.diagnostics import IRError
from gdv.ir.dtypes import ALL_DTYPES
from gdv.ir.ops import REGISTRY
from gdv.ir.parser import parse
from gdv.ir.printer import print_module
from gdv.ir.verifier import verify

SAMPLES = sample(0, 200)


def _types(module):
    fn = module.functions[0]
    return [p.type for p in fn.params] + [op.type for op in fn.ops]


def _run(module, seed: int) -> bool:
    """Whether `module` ran; a clean IRError (e.g. a memory refusal) is allowed."""
    try:
        reference.run(module, inputs(module.entry, seed))
    except IRError:
        return False
    return True


def test_every_registry_op_is_generated_or_excluded_with_a_reason():
    assert set(OPS) | set(EXCLUDED) == set(REGISTRY)
    assert not set(OPS) & set(EXCLUDED)
    assert all(reason for reason in EXCLUDED.values())


def test_unknown_ops_are_refused():
    with pytest.raises(ValueError, match="kernel"):
        programs(["kernel"])
    with pytest.raises(ValueError):
        sample(0, 1, ops=["no_such_op"])


def test_sampled_programs_verify_round_trip_chain_and_stay_small():
    assert len(SAMPLES) == 200
    for module in SAMPLES:
        verify(module)
        text = print_module(module)
        assert parse(text) == module and print_module(parse(text)) == text
        fn = module.entry
        assert [f.name for f in module.functions] == ["main"] and fn.ops and fn.returns
        assert all(t.num_elements <= MAX_ELEMENTS for t in _types(module))
        names = [p.name for p in fn.params] + [op.result for op in fn.ops]
        assert all(len(n) <= 3 for n in names), names
    chained = sum(
        any(x.startswith("v") for op in m.entry.ops for x in op.operands) for m in SAMPLES
    )
    assert chained >= 50  # ops read earlier ops' results, not only parameters


def test_sample_is_deterministic():
    again = [print_module(m) for m in sample(0, 200)]
    assert again == [print_module(m) for m in SAMPLES]
    assert len(set(again)) == 200  # distinct programs
    assert [print_module(m) for m in sample(1, 20)] != again[:20]
    assert [print_module(m) for m in sample(5, 10, ops=["add", "dot"], max_ops=3)] == [
        print_module(m) for m in sample(5, 10, ops=["add", "dot"], max_ops=3)
    ]


def test_samples_cover_ops_dtypes_and_edge_dims():
    ops = Counter(op.name for m in SAMPLES for op in m.entry.ops)
    assert len(ops) >= 35, sorted(set(OPS) - set(ops))
    dtypes = {t.dtype for m in SAMPLES for t in _types(m)}
    assert dtypes == set(ALL_DTYPES)
    dims = Counter(d for m in SAMPLES for t in _types(m) for d in t.shape)
    assert dims[0] and dims[1] and dims[7] and dims[17] and dims[33]
    assert any(t.num_elements == 0 for m in SAMPLES for t in _types(m))


@pytest.mark.parametrize("name", OPS)
def test_each_op_alone_is_generated_and_runs(name):
    modules = sample(0, 8, ops=[name], max_ops=3)
    assert any(op.name == name for m in modules for op in m.entry.ops)
    for k, module in enumerate(modules):
        verify(module)
        assert {op.name for op in module.entry.ops} == {name}
        assert _run(module, k)


def test_every_sampled_program_runs_on_the_reference_backend():
    ran = sum(_run(module, seed) for seed, module in enumerate(SAMPLES))
    assert ran == len(SAMPLES)  # nothing here is big enough for a memory refusal


def test_inputs_mix_specials_into_random_values_within_declared_ranges():
    seen: Counter[str] = Counter()
    for seed, module in enumerate(SAMPLES):
        fn = module.entry
        got = inputs(fn, seed)
        assert set(got) == {p.name for p in fn.params}
        for p in fn.params:
            x = got[p.name]
            assert x.shape == p.type.shape and x.dtype == p.type.dtype.np
            if p.range is not None:
                lo, hi = p.range
                assert np.all((x >= lo) & (x <= hi)), (p.attrs, x)
            if not p.type.dtype.is_float:
                continue
            f = x.astype(np.float64)
            tiny = float(ml_dtypes.finfo(p.type.dtype.np).smallest_normal)
            seen["nan"] += int(np.isnan(f).sum())
            seen["inf"] += int(np.isposinf(f).sum())
            seen["-inf"] += int(np.isneginf(f).sum())
            seen["-0.0"] += int(((f == 0) & np.signbit(f)).sum())
            seen["subnormal"] += int(((f != 0) & (np.abs(f) < tiny)).sum())
            seen["other"] += int((np.isfinite(f) & (np.abs(f) < 1) & (f != 0)).sum())
    assert all(seen[k] for k in ("nan", "inf", "-inf", "-0.0", "subnormal", "other")), seen
    assert seen["other"] > seen["nan"]  # specials are mixed in, not all there is
    fn = SAMPLES[3].entry
    same = inputs(fn, 7)
    assert all(v.tobytes() == inputs(fn, 7)[k].tobytes() for k, v in same.items())


@given(programs(max_ops=4))
def test_programs_always_verify_and_run(module):
    verify(module)
    fn = module.entry
    assert all(t.num_elements <= MAX_ELEMENTS for t in _types(module))
    assert fn.returns
    assert _run(module, 0)
