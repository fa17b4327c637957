"""`group-rows` and `row_group = [G, B]`: row-wise kernels run row block by row block (issue
16: softmax and layer_norm in one pass over memory per row block)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends import reference
from gdv.driver import compile as gdv_compile
from gdv.ir.diagnostics import IRError
from gdv.ir.printer import print_module
from gdv.ir.verifier import verify
from gdv.validate.schedules import live_buffers, memory_violation

SOFTMAX = """func @main(%x: f32[R, D] {range = [-4.0, 4.0]}) -> f32[R, D] {
  %y = softmax(%x) {axis = 1} : f32[R, D]
  return %y
}
"""

LAYER_NORM = """func @main(%x: f32[R, D], %g: f32[D], %b: f32[D]) -> f32[R, D] {
  %y = layer_norm(%x, %g, %b) {axes = [1], eps = 1e-5} : f32[R, D]
  return %y
}
"""


def _src(template: str, rows: int, d: int) -> str:
    return template.replace("R", str(rows)).replace("D", str(d))


def _groups(comp) -> list:
    return [o.attrs.get("row_group") for o in comp.module.entry.ops if o.name == "kernel"]


@given(st.integers(4, 90), st.integers(1, 70), st.sampled_from([2, 3]), st.booleans())
def test_grouped_c_gives_the_ungrouped_bits(rows: int, d: int, level: int, norm: bool) -> None:
    src = _src(LAYER_NORM if norm else SOFTMAX, rows, d)
    grouped = gdv_compile(src, target="c", level=level, jobs=1)
    plain = gdv_compile(src, target="c", level=level, jobs=1, disable=("group-rows",))
    assert all(g is not None for g in _groups(grouped))
    assert all(g is None for g in _groups(plain))
    rng = np.random.default_rng(rows * 131 + d)
    inputs = {"x": rng.standard_normal((rows, d)).astype(np.float32)}
    if norm:
        inputs |= {"g": rng.standard_normal(d).astype(np.float32)}
        inputs |= {"b": rng.standard_normal(d).astype(np.float32)}
    a, b = grouped(**inputs)[0], plain(**inputs)[0]
    assert reference.bit_equal(a, b)
    if norm:  # no transcendental: the reference's bits too
        assert reference.bit_equal(a, reference.run(grouped.module, inputs)[0])


def test_the_group_is_one_parallel_loop_over_row_blocks() -> None:
    comp = gdv_compile(_src(SOFTMAX, 4096, 64), target="c", jobs=1)
    groups = _groups(comp)
    assert len(groups) == 4 and len({tuple(g) for g in groups}) == 1
    text = comp.artifact.text
    assert text.count("/* row group 0: 4 kernels over 4096 rows") == 1
    # The members' own functions hold no parallel loop: the group's is the only one.
    assert text.count("#pragma omp parallel for") == 1


def _grouped_module():
    return gdv_compile(_src(SOFTMAX, 64, 16), target="c", jobs=1).module


def _with(module, index: int, **attrs):
    fn = module.entry
    ops = list(fn.ops)
    ops[index] = replace(ops[index], attrs={**ops[index].attrs, **attrs})
    return replace(module, functions=[replace(fn, ops=ops), *module.functions[1:]])


def test_the_verifier_checks_what_makes_a_group_mean_the_program() -> None:
    module = _grouped_module()
    verify(parse(print_module(module)))  # as compiled: valid
    kernels = [i for i, o in enumerate(module.entry.ops) if o.name == "kernel"]
    first, second = kernels[0], kernels[1]
    block = module.entry.ops[first].attrs["row_group"][1]
    cases = [
        (_with(module, second, row_group=[0, block + 1]), "in blocks of"),
        (_with(module, first, row_group=[0, 0]), "block >= 1"),
        # the divide reads the sum (made in the group) at another row (63 - i)
        (
            _with(
                module,
                kernels[3],
                maps=[
                    module.entry.ops[kernels[3]].attrs["maps"][0],
                    [[-1, 0, 63]],  # row 63 - i
                ],
            ),
            "at another row",
        ),
    ]
    for bad, message in cases:
        with pytest.raises(IRError, match=message):
            verify(parse(print_module(bad)))
    # Members must be consecutive: the same group twice, with another group between.
    split = _with(_with(module, kernels[1], row_group=[1, block]), kernels[2], row_group=[1, block])
    with pytest.raises(IRError, match="not consecutive"):
        verify(parse(print_module(split)))


def test_liveness_keeps_every_value_of_a_group_apart(monkeypatch) -> None:
    """Values of a group in the arena (here all of them: none is kept per block) are live
    together; a plan overlapping two is refuted."""
    from gdv.passes import plan_memory

    monkeypatch.setattr(plan_memory, "BLOCK_LOCAL", False)
    module = _grouped_module()
    fn = module.entry
    buffers = {b.name: b for b in live_buffers(fn)}
    kernels = [o.result for o in fn.ops if o.name == "kernel"]
    starts = {buffers[v].start for v in kernels if v in buffers}
    assert len(starts) == 1  # every intermediate of the group is live from its first op
    # A plan that puts the max and the exp's result at one offset is refuted: interleaved,
    # the exp of one block overwrites the max another block still reads.
    plan = [list(b) for b in fn.attrs["buffers"]]
    names = [b[0] for b in plan]
    a, b = names.index(kernels[0]), names.index(kernels[1])
    plan[b][1] = plan[a][1]
    import z3

    bad = replace(fn, attrs={**fn.attrs, "buffers": plan})
    solver = z3.Solver()
    solver.add(memory_violation(bad))
    assert solver.check() == z3.sat
    good = z3.Solver()
    good.add(memory_violation(fn))
    assert good.check() == z3.unsat


def _ungrouped(src: str):
    return gdv_compile(src, target="c", level=3, jobs=1, disable=("group-rows",)).module


@given(
    st.integers(4, 600),
    st.integers(1, 2048),
    st.sampled_from([16 << 10, 32 << 10, 48 << 10]),
    st.booleans(),
)
def test_a_block_is_the_most_rows_whose_values_fit_in_l1(
    rows: int, d: int, l1: int, norm: bool
) -> None:
    """B rows of every value the group reads or makes (each once) fit in L1 and B is at most
    R / 8 (unless B is 1), a multiple of 8 above 8; the next larger such B breaks one of the
    two."""
    from gdv.passes.group_rows import GroupRows

    module = _ungrouped(_src(LAYER_NORM if norm else SOFTMAX, rows, d))
    grouped = GroupRows(l1_bytes=l1).run(module).module
    fn = grouped.entry
    members = [o for o in fn.ops if o.attrs.get("row_group") is not None]
    assert len(members) >= 2
    (block,) = {o.attrs["row_group"][1] for o in members}
    types = fn.types()
    values = dict.fromkeys(v for o in members for v in [*o.operands, o.result])
    per_row = sum(
        types[v].num_elements * types[v].dtype.bits // 8 // max(types[v].shape) for v in values
    )
    cap = rows // 8
    assert block >= 1
    assert block == 1 or (block * per_row <= l1 and block <= cap)
    if block > 8:
        assert block % 8 == 0
    bigger = block + 1 if block < 8 else block + 8
    if bigger * per_row <= l1 and bigger <= cap:
        pytest.fail(f"{block} rows of {per_row} bytes: {bigger} fit {l1} bytes and {rows} rows")


def test_the_softmax_of_4096_rows_of_1024_runs_two_rows_a_block() -> None:
    """The side-by-side softmax (12 KiB of x, exp and out a row) in a 32 KiB L1."""
    from gdv.passes.group_rows import GroupRows

    module = _ungrouped(_src(SOFTMAX, 4096, 1024))
    fn = GroupRows(l1_bytes=32 << 10).run(module).module.entry
    assert {tuple(o.attrs["row_group"]) for o in fn.ops if "row_group" in o.attrs} == {(0, 2)}
