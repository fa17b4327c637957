"""Kernel epilogues (IR_SPEC.md, the loop stage's `epilogue`; issue 16) on the reference and C
backends.

An epilogue E gives result[i_out] = E(fold, operands at (i_out, reduce dims 0)). The C target
runs it on each finished tile of a product while the tile is in cache (`matmul._epilogue`), so
every tile shape the printer makes (full tiles, edge tiles through a workspace, batch dims,
outputs stored through a workspace and scattered, transposed and strided operands, several
reduce blocks) must give bit for bit what the reference gives. Hypothesis draws the
contractions of test_fast_kernels and an epilogue that reads the fold and the operands.

The reference's epilogue is itself compared with numpy on concrete values: the kernel without
its epilogue (whose fold the reference's other tests pin down), then the epilogue's formula in
numpy at the operands' elements.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends import c, reference
from gdv.backends.c.simd import BLOCKING_ENV, VECTOR_BYTES_ENV
from gdv.ir.diagnostics import IRError

from .test_bind import _bit_equal
from .test_fast_kernels import _env, contractions, scheduled

EPILOGUES = {
    # name: ops over %acc (the fold), %ea, %eb, %ec (the operands), giving %r
    "relu": "%z = constant() {value = 0.0}\n  %r = max(%acc, %z)",
    "add a": "%r = add(%acc, %ea)",
    "clip b": (
        "%s = add(%acc, %eb)\n  %z = constant() {value = 0.0}\n  %m = max(%s, %z)\n"
        "  %six = constant() {value = 6.0}\n  %r = min(%m, %six)"
    ),
    "scale": "%h = constant() {value = 0.5}\n  %s = mul(%acc, %h)\n  %r = sub(%s, %eb)",
}
NUMPY = {
    # the epilogues numpy computes exactly as IEEE does (no max/min: their signed-zero and NaN
    # rules are IR_SPEC's, tested with the elementwise ops)
    "add a": lambda acc, a0, b0: acc + a0,
    "scale": lambda acc, a0, b0: acc * acc.dtype.type(0.5) - b0,
}


def with_epilogue(text: str, name: str) -> str:
    """The contraction `text` of test_fast_kernels with epilogue `name` added to its kernel."""
    ops = EPILOGUES[name]
    dtype = re.search(r"-> (f\d\d)\[", text).group(1)
    count = len(re.search(r"func @f\(([^)]*)\)", text).group(1).split(","))
    params = ", ".join(f"%{v}: {dtype}[]" for v in ["acc", "ea", "eb", "ec"][: count + 1])
    typed = "\n  ".join(
        line if " : " in line else f"{line} : {dtype}[]" for line in ops.split("\n  ")
    )
    text = text.replace('{body = "f", ', '{body = "f", epilogue = "e", ', 1)
    return text + f"\nfunc @e({params}) -> {dtype}[] {{\n  {typed}\n  return %r\n}}"


def _reduce_extents(text: str) -> list[int]:
    space = [int(v) for v in re.search(r"space = \[([^\]]*)\]", text).group(1).split(", ")]
    red = re.search(r"reduce = \[([^\]]*)\]", text).group(1)
    return [space[int(d)] for d in red.split(", ") if d]


@settings(max_examples=45)
@given(
    case=contractions(),
    epilogue=st.sampled_from(sorted(EPILOGUES)),
    vector=st.sampled_from(["64", "32"]),
    blocking=st.sampled_from([None, "8,16,32", "5,3,17"]),
)
def test_product_epilogues_bit_exact(case, epilogue: str, vector: str, blocking) -> None:
    text, inputs = case
    text = with_epilogue(text, epilogue)
    if 0 in _reduce_extents(text):
        with pytest.raises(IRError, match="epilogue needs reduce dims"):
            parse(text)
        return
    module = parse(text)
    with _env(**{VECTOR_BYTES_ENV: vector, BLOCKING_ENV: blocking}):
        module = scheduled(module)
        if module.entry.ops[0].attrs.get("strategy") != "product":
            # not a product (a factor reads along both sides: a batched matrix-vector
            # product): the C target refuses the epilogue, by name
            with pytest.raises(IRError, match="an epilogue runs only in a product"):
                c.lower(module)
            return
        got = c.run(module, inputs)
        bound = c.Executable(module).bind({"a": inputs["a"]})
        got_bound = bound({k: v for k, v in inputs.items() if k != "a"})
    want = reference.run(module, inputs)
    _bit_equal(got, want, text)
    _bit_equal(got_bound, want, text)


@settings(max_examples=30)
@given(case=contractions(), epilogue=st.sampled_from(sorted(NUMPY)))
def test_reference_epilogue_against_numpy(case, epilogue: str) -> None:
    """The reference's epilogue is the formula applied to the fold and to the operands read
    at the out index with the reduce dims at 0 (computed here with the maps by hand)."""
    text, inputs = case
    if 0 in _reduce_extents(text):
        return
    plain = parse(text)
    fused = parse(with_epilogue(text, epilogue))
    (acc,) = reference.run(plain, inputs)
    op = plain.entry.ops[0]
    space, out = op.attrs["space"], op.attrs["out"]
    grids = np.indices(acc.shape) if acc.ndim else np.zeros((0,), np.int64)
    loop = [np.zeros(acc.shape, np.int64) for _ in space]
    for j, d in enumerate(out):
        loop[d] = grids[j]

    def read(name: str, k: int) -> np.ndarray:
        rows = op.attrs["maps"][k]
        index = tuple(
            sum((c * loop[d] for d, c in enumerate(row[:-1]) if c), np.zeros(acc.shape, np.int64))
            + row[-1]
            for row in rows
        )
        return inputs[name][index]

    with np.errstate(all="ignore"):
        want = NUMPY[epilogue](acc, read("a", 0), read("b", 1)).astype(acc.dtype)
    (got,) = reference.run(fused, inputs)
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


def test_nest_kernel_with_epilogue_is_refused_on_c() -> None:
    """An epilogue on a kernel that is not a product (written by hand: the pipeline gives
    epilogues to products only) is refused by the C target with its reason, not miscompiled:
    running it would take a buffer and a pass the plan does not have, and the printer builds
    no IR of its own (test_printer_follows_plan)."""
    text = """func @main(%x: f32[3,4]) -> f32[3] {
  %r = kernel(%x) {body = "f", epilogue = "e", space = [3, 4], maps = [[[1, 0, 0], [0, 1, 0]]],
    out = [0], reduce = [1], combiner = "add"} : f32[3]
  return %r
}
func @f(%a: f32[]) -> f32[] {
  return %a
}
func @e(%acc: f32[], %a: f32[]) -> f32[] {
  %r = add(%acc, %a) : f32[]
  return %r
}"""
    module = parse(text)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (got,) = reference.run(module, {"x": x})
    assert np.array_equal(got, x.sum(axis=1) + x[:, 0])
    with pytest.raises(IRError, match="an epilogue runs only in a product"):
        c.lower(module)
