"""Block-local values (`block_local`; issue 16).

A value that a row group's member makes and only later members of that group read, each at
its own row (softmax's exp, its row max and row sum), is listed by `plan-memory` in the
entry's `block_local` and kept out of the arena: the C target holds it for the current block
of rows only, in a buffer of B rows per thread. So the results must be the reference's, bit
for bit, for any shape (blocks that do not divide the rows included), and the checker of the
`memory-safety` claim must refuse a list naming a value some reader needs outside its block.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import z3
from hypothesis import given, settings
from hypothesis import strategies as st
from support import sprinkle_specials

from gdv.api import parse
from gdv.backends import c, reference
from gdv.ir.diagnostics import IRError
from gdv.ir.verifier import verify
from gdv.passes import plan_memory
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline
from gdv.validate.schedules import memory_violation

SOFTMAX = """func @main(%x: {t}[{r},{d}]) -> {t}[{r},{d}] {{
  %p = softmax(%x) {{axis = 1}} : {t}[{r},{d}]
  return %p
}}
"""


def _compiled(text: str, level: int):
    params = c.schedule_parameters()
    return PassManager(pipeline("c", level, **params)).run(parse(text)).module


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


def _unsat(violation: z3.BoolRef) -> bool:
    s = z3.Solver()
    s.add(violation)
    return s.check() == z3.unsat


@settings(max_examples=15, deadline=None)
@given(
    rows=st.integers(4, 70),
    d=st.integers(1, 90),
    level=st.sampled_from([2, 3]),
    dtype=st.sampled_from(["f32", "f64"]),
    seed=st.integers(0, 2**16),
    specials=st.booleans(),
)
def test_softmax_rows_kept_per_block_give_the_reference(rows, d, level, dtype, seed, specials):
    """The row max, the exp and the row sum of softmax are block-local, out of the arena; the
    C result is bit for bit the same program's printed with every value whole (the list
    dropped: each value a buffer of its own), and the reference's within exp's ulps."""
    module = _compiled(SOFTMAX.format(t=dtype, r=rows, d=d), level)
    fn = module.entry
    listed = fn.attrs.get("block_local")
    assert listed and any(v.endswith("exp") for v in listed), fn.attrs
    assert not set(listed) & {b[0] for b in fn.attrs["buffers"]}
    assert _unsat(memory_violation(fn))
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, d)) * 4).astype(dtype.replace("f", "float"))
    if specials:
        sprinkle_specials(x, every=7)
    got = c.Executable(module)({"x": x})[0]
    attrs = {k: v for k, v in fn.attrs.items() if k != "block_local"}
    functions = [dataclasses.replace(f, attrs=attrs) if f is fn else f for f in module.functions]
    whole = dataclasses.replace(module, functions=functions)
    _same(got, c.Executable(whole)({"x": x})[0])
    # exp's last bits are the implementation's (IR_SPEC): the reference within a few ulp
    want = reference.run(module, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-30, equal_nan=True)


CENTRED = """func @main(%x: {t}[1,{r},{d}]) -> {t}[1,{r},{d}] {{
  %m = reduce_max(%x) {{axes = [2]}} : {t}[1,{r}]
  %mb = broadcast(%m) {{dims = [0, 1]}} : {t}[1,{r},{d}]
  %c = sub(%x, %mb) : {t}[1,{r},{d}]
  %s = reduce_sum(%c) {{axes = [2]}} : {t}[1,{r}]
  %sb = broadcast(%s) {{dims = [0, 1]}} : {t}[1,{r},{d}]
  %y = add(%c, %sb) : {t}[1,{r},{d}]
  return %y
}}
"""
NUMPY = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i8": np.int8}


@settings(max_examples=15, deadline=None)
@given(
    rows=st.integers(4, 60),
    d=st.integers(1, 70),
    level=st.sampled_from([2, 3]),
    dtype=st.sampled_from(["f32", "f64", "i32", "i8", "f16", "bf16"]),
    seed=st.integers(0, 2**16),
)
def test_rows_under_a_unit_dim_kept_per_block_give_the_reference(rows, d, level, dtype, seed):
    """A row group under a leading dim of extent 1 (its rows the second dim), for float,
    narrow float and integer dtypes: the block-local values' C gives the reference's bits
    (at -O2; at -O3 the sums run in lanes, whose bits the reference gives too) and the same
    bits as with every value whole."""
    import ml_dtypes

    module = _compiled(CENTRED.format(t=dtype, r=rows, d=d), level)
    fn = module.entry
    assert fn.attrs.get("block_local"), fn.attrs
    npd = NUMPY | {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((1, rows, d)) * 8).astype(npd[dtype])
    got = c.Executable(module)({"x": x})[0]
    attrs = {k: v for k, v in fn.attrs.items() if k != "block_local"}
    functions = [dataclasses.replace(f, attrs=attrs) if f is fn else f for f in module.functions]
    _same(got, c.Executable(dataclasses.replace(module, functions=functions))({"x": x})[0])
    _same(got, reference.run(module, {"x": x})[0])


def test_the_c_buffer_holds_one_block_per_thread() -> None:
    """The exp's buffer is declared in the row group's loop with B rows, and each kernel reads
    and writes it r0 rows back; the arena has no room for it."""
    module = _compiled(SOFTMAX.format(t="f32", r=4096, d=1024), 3)
    fn = module.entry
    (block,) = {op.attrs["row_group"][1] for op in fn.ops if "row_group" in op.attrs}
    assert fn.attrs["arena_bytes"] < 4096 * 1024 * 4
    source = c.lower_module(module).source
    assert f"[{1024 * block}] __attribute__((aligned(64)));  /* %p.exp: rows [r0, r1) alone */" in (
        source
    )
    assert "- INT64_C(1024) * r0]" in source


def test_plan_memory_keeps_large_rows_in_the_arena() -> None:
    """A block's values above `BLOCK_LOCAL_MAX_BYTES` (rows of 100 000 f32) stay planned."""
    module = _compiled(SOFTMAX.format(t="f32", r=8, d=100_000), 3)
    fn = module.entry
    assert any("row_group" in op.attrs for op in fn.ops)
    listed = fn.attrs.get("block_local", [])
    assert not [v for v in listed if v.endswith("exp")]
    assert any(b[0].endswith("exp") for b in fn.attrs["buffers"])


def test_plan_memory_lists_nothing_when_switched_off(monkeypatch) -> None:
    monkeypatch.setattr(plan_memory, "BLOCK_LOCAL", False)
    fn = _compiled(SOFTMAX.format(t="f32", r=64, d=32), 3).entry
    assert "block_local" not in fn.attrs


ID = "[[1, 0, 0], [0, 1, 0]]"


def _kernel(name: str, operand: str, first_map: str, group: str) -> str:
    return (
        f'  %{name} = kernel(%{operand}, %x) {{{{body = "f1", space = [8, 4],\n'
        f"      maps = [{first_map}, {ID}], out = [0, 1], reduce = [],\n"
        f'      combiner = "none"{group}}}}} : f32[8,4]\n'
    )


HAND = (
    """func @f1(%a: f32[], %b: f32[]) -> f32[] {{
  %r = add(%a, %b) : f32[]
  return %r
}}
func @main(%x: f32[8,4]) -> f32[8,4] {{arena_bytes = 256, block_local = {listed},
    buffers = [{buffers}]}} {{
"""
    + _kernel("s", "x", ID, ", row_group = [0, 2]")
    + _kernel("t", "s", "[{row}, [0, 1, 0]]", ", row_group = [0, 2]")
    + _kernel("u", "t", ID, "")
    + _kernel("v", "u", ID, ", row_group = [1, 4]")
    + _kernel("w", "v", ID, ", row_group = [1, 4]")
    + """  return %w
}}
"""
)
OWN = "[1, 0, 0]"
BUFFERS = {"s": '["s", 0, 128]', "t": '["t", 128, 128]', "u": '["u", 0, 128]'}
BUFFERS["v"] = '["v", 128, 128]'


def _hand(listed: list[str], row: str = OWN):
    kept = ", ".join(b for v, b in BUFFERS.items() if v not in listed)
    text = HAND.format(listed=str(listed).replace("'", '"'), buffers=kept, row=row)
    return parse(text, check=False)


def test_a_hand_written_list_that_keeps_the_rules_is_safe_and_runs() -> None:
    module = _hand(["s", "v"])
    verify(module, "loop")
    assert _unsat(memory_violation(module.entry))
    x = np.random.default_rng(1).standard_normal((8, 4)).astype(np.float32)
    exe = c.Executable(module)
    source = c.lower_module(module).source
    assert "float v1[8] __attribute__((aligned(64)));" in source  # %s: 2 rows of 4
    _same(exe({"x": x})[0], reference.run(module, {"x": x})[0])


@pytest.mark.parametrize(
    ("listed", "row", "message"),
    [
        (["t"], OWN, "read outside its row group"),  # %u, no member, reads it
        (["u"], OWN, "not a row group member's own value"),
        (["w"], OWN, "not a row group member's own value"),  # returned
        (["x"], OWN, "not a row group member's own value"),  # a parameter
        (["s"], "[-1, 0, 7]", "read at another row"),  # %t reads row 7 - i
        (["s", "s"], OWN, "names a value twice"),
        (["nope"], OWN, "not a row group member's own value"),
    ],
)
def test_the_checker_refuses_a_list_that_breaks_a_rule(listed, row, message) -> None:
    """The memory-safety checker recomputes the rules (the plan's own list is not trusted):
    a list that breaks one makes the violation true outright, and the verifier and the C
    target refuse it with the rule's message."""
    module = _hand(listed, row)
    assert z3.is_true(memory_violation(module.entry))
    with pytest.raises(IRError) as e:
        verify(module, "loop")
    if "another row" not in message:  # the verifier's own row-group rule comes first there
        assert message in e.value.message
        assert e.value.loc is not None and e.value.loc.line == 5
    with pytest.raises(IRError, match="block-local|block_local|row_group"):
        c.Executable(module)


@pytest.mark.parametrize("listed", [["s"], []])
def test_a_row_group_member_the_c_target_refuses_gets_no_fallback(monkeypatch, listed) -> None:
    """A kernel of a row group cannot run on a reference kernel (the group's loop runs it per
    block, and a block-local value is that loop's alone): its error stands, where the same
    error on a kernel outside any group falls back to the reference."""
    from gdv.backends.c import registry
    from gdv.ir.ops import get as get_spec

    spec = get_spec("kernel")
    lower = registry.LOWERINGS[spec]
    refused = {"t"}

    def refuse(prog, op):
        if op.result in refused:
            raise prog.error(op, "refused for the test")
        lower(prog, op)

    monkeypatch.setitem(registry.LOWERINGS, spec, refuse)
    with pytest.raises(IRError, match="refused for the test"):
        c.Executable(_hand(listed), allow_fallback=True)
    refused.clear()
    refused.add("u")
    x = np.random.default_rng(2).standard_normal((8, 4)).astype(np.float32)
    module = _hand(listed)
    exe = c.Executable(module, allow_fallback=True)
    assert [(f.index, f.op) for f, _ in exe.lowered.fallbacks] == [(2, "kernel")]
    _same(exe({"x": x})[0], reference.run(module, {"x": x})[0])
