"""Random well-typed modules from the op registry: the verifier accepts them, printing is
canonical and round-trips (IR_SPEC.md section 1), and composites decompose into core ops."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import load_module

from gdv.ir import ops as op_registry
from gdv.ir.core import Function, Module, Op
from gdv.ir.dtypes import ALL_DTYPES, DType
from gdv.ir.ops import OpTypeError
from gdv.ir.parser import parse
from gdv.ir.printer import print_module
from gdv.ir.verifier import verify

S = load_module("ir/strategies.py")


def test_every_registered_op_has_a_generator() -> None:
    missing = sorted(set(op_registry.REGISTRY) - set(S.OP_GENERATORS))
    stale = sorted(set(S.OP_GENERATORS) - set(op_registry.REGISTRY))
    assert not missing, f"ops without a generator in tests/ir/strategies.py: {missing}"
    assert not stale, f"generators for ops not in the registry: {stale}"


def _round_trip(module: Module) -> None:
    verify(module)
    text = print_module(module)
    again = parse(text, "<printed>")
    assert again == module, text
    verify(again)
    assert print_module(again) == text


@given(S.modules())
def test_random_modules_verify_and_round_trip(module: Module) -> None:
    _round_trip(module)


@pytest.mark.parametrize("name", sorted(op_registry.REGISTRY))
@settings(max_examples=6)
@given(data=st.data())
def test_each_op_verifies_and_round_trips(name: str, data) -> None:
    fn = data.draw(S.functions("main", [name, name]))
    if name in S.COLLECTIVE_OPS:  # valid only in an SPMD function, on a mesh with its axes
        from gdv.ir.mesh import Mesh

        fn.attrs["mesh"] = "m"
        _round_trip(Module(S.with_bodies([fn]), meshes=[Mesh("m", [("data", 2)])]))
        return
    _round_trip(Module(S.with_bodies([fn])))


def _decomposed(fn: Function) -> Function:
    taken = {p.name for p in fn.params} | {op.result for op in fn.ops}
    counter = iter(range(10**9))

    def fresh(hint: str) -> str:
        while True:
            name = f"t{next(counter)}"
            if name not in taken:
                taken.add(name)
                return name

    ops: list[Op] = []
    for op in fn.ops:
        spec = op_registry.REGISTRY[op.name]
        ops.extend(spec.decompose(op, fresh) if spec.is_composite else [op])
    return Function(fn.name, fn.params, fn.results, ops, fn.returns, fn.attrs)


COMPOSITES = sorted(s.name for s in op_registry.all_specs() if s.is_composite)


@pytest.mark.parametrize("name", COMPOSITES)
@settings(max_examples=12)
@given(data=st.data())
def test_composites_decompose_to_core_ops_that_verify(name: str, data) -> None:
    fn = data.draw(S.functions("main", [name]))
    verify(Module([fn]))
    core = Module([_decomposed(fn)])
    verify(core, stage="core")
    assert not any(op_registry.REGISTRY[o.name].is_composite for o in core.functions[0].ops)
    _round_trip(core)


def test_composites_are_rejected_at_the_core_stage() -> None:
    # The decomposition test above needs `verify(stage="core")` to notice a composite.
    src = (
        "func @main(%a: f32[2,2]) -> f32[2,2] {\n  %b = matmul(%a, %a) : f32[2,2]\n  return %b\n}\n"
    )
    with pytest.raises(Exception, match="graph-stage op"):
        verify(parse(src), stage="core")


# Whitespace and line breaks are free (IR_SPEC.md section 1): the same tokens joined by any
# whitespace and comments give the same module.
_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|->|[%@]?[A-Za-z0-9_.+-]+|[^\sA-Za-z0-9_.]')
_SEPARATORS = [" ", "\n", "\t", "\r\n", "  // a comment ( [ {\n", "\n\n   "]


@given(S.modules(max_functions=2), st.randoms(use_true_random=False))
def test_whitespace_and_comments_between_tokens_are_free(module: Module, rnd) -> None:
    text = print_module(module)
    tokens = _TOKEN.findall(text)
    assert not _TOKEN.sub("", text).strip(), "the tokenizer missed part of the text"
    spaced = "".join(t + rnd.choice(_SEPARATORS) for t in tokens)
    assert parse(spaced, "<spaced>") == module


def _key_operand(name: str) -> int:
    return 1 if name == "select" else 0  # select's data operands follow the i1 condition


@pytest.mark.parametrize("name", sorted(op_registry.REGISTRY))
@settings(max_examples=3)
@given(data=st.data())
def test_generators_cover_every_dtype_the_rule_accepts(name: str, data) -> None:
    # Ask the generator for each dtype in turn and probe the type rule with each instance
    # re-typed to every dtype: whatever dtype the rule accepts, the generator must produce.
    spec = op_registry.REGISTRY[name]
    produced: set[DType] = set()
    accepted: set[DType] = set()
    try:
        for forced in ALL_DTYPES:
            S.FORCED_DTYPE[0] = forced
            operand_types, attrs, written = S.OP_GENERATORS[name](data.draw)
            written = written or spec.infer(operand_types, attrs, operand_types[0])
            key = operand_types[_key_operand(name)].dtype if operand_types else written.dtype
            produced.add(key)
            for d in ALL_DTYPES:
                retyped = [t.with_dtype(d) if t.dtype == key else t for t in operand_types]
                w = written.with_dtype(d) if written.dtype == key else written
                try:
                    spec.infer(retyped, attrs, w)
                except OpTypeError:
                    continue
                accepted.add(d)
    finally:
        S.FORCED_DTYPE[0] = None
    assert accepted, f"{name}: no dtype accepted at all"
    missing = sorted(d.value for d in accepted - produced)
    assert not missing, f"{name}: the rule accepts {missing} but the generator never makes them"
