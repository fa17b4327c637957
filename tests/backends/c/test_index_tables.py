"""Index tables of product kernels are computed once, when the library loads (issue 16).

A conv run as a product reads its input through index tables (per output position and per
reduce position, the offset and the window's coordinates). They depend on shapes alone, yet
each call used to allocate and fill them (about 100 000 entries per resnet18 call, serially,
before the threads start). `Program.index_table` makes each a file-scope array that a
constructor fills when the library loads, shared by every kernel (and every bind-time packing
function) needing the same one. Checked here: no per-call table allocation is left, same-shape
convs share their tables, and results stay bit for bit the reference's, in the first call and
in later ones, unbound and bound (where the packing functions read the same tables).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import sprinkle_specials

from gdv.api import parse
from gdv.backends import c, reference
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline

CONV = (
    "  %{out} = conv2d(%{inp}, %w{k}) {{stride = [1, 1], padding = [[1, 1], [1, 1]], "
    "dilation = [1, 1], groups = 1}} : f32[1,{c},{h},{w}]\n"
)


def chain(convs: int, c: int, h: int, w: int) -> str:
    """`convs` same-shape 3x3 convs in a row, a relu between two: the first reads the
    parameter through a `pad`, the others their operand through the kernel's fill."""
    weights = ", ".join(f"%w{k}: f32[{c},{c},3,3]" for k in range(convs))
    lines = [f"func @main(%x: f32[1,{c},{h},{w}], {weights}) -> f32[1,{c},{h},{w}] {{"]
    inp = "x"
    for k in range(convs):
        lines.append(CONV.format(out=f"a{k}", inp=inp, k=k, c=c, h=h, w=w).rstrip("\n"))
        inp = f"a{k}"
        if k + 1 < convs:
            lines.append(f"  %r{k} = relu(%a{k}) : f32[1,{c},{h},{w}]")
            inp = f"r{k}"
    lines += [f"  return %{inp}", "}", ""]
    return "\n".join(lines)


def _compiled(text: str, bound: tuple[str, ...] = ()):
    params = c.schedule_parameters()
    return PassManager(pipeline("c", 2, bound=bound, **params)).run(parse(text)).module


def _tables(source: str) -> list[str]:
    return re.findall(r"^static int(?:64|32)_t (gdv_tab\d+)\[\d+\];$", source, re.M)


def test_tables_are_file_scope_and_shared_by_same_shape_convs() -> None:
    two, three = _compiled(chain(2, 16, 10, 20)), _compiled(chain(3, 16, 10, 20))
    products = [op for op in three.entry.ops if op.attrs.get("strategy") == "product"]
    assert len(products) == 3, [op.name for op in three.entry.ops]
    src_two, src_three = c.lower(two), c.lower(three)
    assert "malloc(sizeof(int64_t)" not in src_three
    assert "__attribute__((constructor)) static void gdv_index_tables(void)" in src_three
    assert _tables(src_two), "a 3x3 conv as a product reads its input through index tables"
    assert "const int32_t *const ztap = gdv_tab" in src_three  # the masks' taps: one too
    # The third conv has the second's shape and way of reading: it adds no table.
    assert len(_tables(src_three)) == len(_tables(src_two))
    refs = re.findall(r"const int(?:64|32)_t \*const (\w+) = (gdv_tab\d+);", src_three)
    users: dict[str, int] = {}
    for _, table in refs:
        users[table] = users.get(table, 0) + 1
    # Every table is read by two kernels or by a kernel and its bind-time packing function;
    # the filled convs' offset tables by two kernels and two packing functions, their taps
    # (`ztap`, for the masks) by the two kernels.
    assert set(users) == set(_tables(src_three))
    assert max(users.values()) == 4 and min(users.values()) >= 2, users


@settings(max_examples=8, deadline=None)
@given(
    ch=st.sampled_from([8, 16, 24]),
    h=st.integers(3, 12),
    w=st.integers(5, 40),
    seed=st.integers(0, 2**32 - 1),
    bound=st.booleans(),
)
def test_results_are_the_references_in_every_call(ch, h, w, seed, bound) -> None:
    text = chain(3, ch, h, w)
    module = parse(text)
    rng = np.random.default_rng(seed)
    inputs = {"x": rng.standard_normal((1, ch, h, w)).astype(np.float32)}
    for k in range(3):
        inputs[f"w{k}"] = rng.standard_normal((ch, ch, 3, 3)).astype(np.float32)
    sprinkle_specials(inputs["x"], every=7)
    want = reference.run(module, inputs)[0]
    weights = {k: v for k, v in inputs.items() if k != "x"}
    exe = c.Executable(_compiled(text, tuple(weights) if bound else ()))
    call = exe.bind(weights) if bound else exe
    feed = {"x": inputs["x"]} if bound else inputs
    for _ in range(2):
        got = call(feed)[0]
        assert reference.bit_equal(got, want), reference.describe_difference(got, want)


@pytest.mark.parametrize("shape", [(1, 16, 56, 56), (1, 8, 7, 7)])
def test_each_table_is_filled_once_at_load_and_only_read_by_kernels(shape) -> None:
    """Every table is assigned in the constructor alone; kernels see it through a pointer to
    const (a write to it would not compile)."""
    _, ch, h, w = shape
    src = c.lower(_compiled(chain(2, ch, h, w)))
    body = src.split("gdv_index_tables(void)\n{", 1)[1].split("\n}\n", 1)[0]
    names = _tables(src)
    assert names
    for name in names:
        assert body.count(f"{name}[v] = ") == 1
        assert src.count(f"{name}[v] = ") == 1
        assert src.count(f"= {name};") >= 1
        assert all(
            re.match(r"\s*const int(64|32)_t \*const ", line)
            for line in src.splitlines()
            if f"= {name};" in line
        )


def test_a_lowering_that_falls_back_takes_its_tables_back() -> None:
    """`function._restore` (an op's lowering abandoned for the fallback) drops the tables the
    op registered, in the dict the bodies' programs share, and a size-0 table is declared
    with one entry (ISO C has no empty arrays)."""
    from gdv.backends.c.emit import Program
    from gdv.backends.c.function import _restore, _snapshot

    prog = Program(parse(chain(1, 8, 4, 4)), parse(chain(1, 8, 4, 4)).entry)
    shared = prog.tables
    first = prog.index_table(5, "  for (v...) t[v] = v;", "t")
    snap = _snapshot(prog)
    prog.index_table(7, "  for (v...) t[v] = 2 * v;", "t")
    assert len(prog.tables) == 2
    _restore(prog, snap)
    assert prog.tables is shared and list(prog.tables.values()) == [first]
    assert prog.index_table(5, "  for (v...) u[v] = v;", "u") == first  # the same loop
    empty = prog.index_table(0, "  for (v...) t[v] = 0;", "t", "int32_t")
    assert f"static int32_t {empty}[1];" in prog._table_source()
