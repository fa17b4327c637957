"""The C printer follows the proved schedule and plan and decides nothing that an attribute
decides (issue 15, part 2): its modules import no pass and rewrite no IR, and changing a
schedule attribute changes the C code accordingly, still computing the reference's result."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from gdv.backends import c, reference
from gdv.ir.core import Module, Op
from gdv.ir.diagnostics import IRError
from gdv.ir.parser import parse
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline

PRINTER = Path(c.__file__).parent
IR_CONSTRUCTORS = {"Op", "Function", "Param", "Module"}
ALLOWED_CONSTRUCTORS = {
    # a combiner or product as a scalar C expression: `scalar()` takes an op
    ("conv.py", "Op"),
    ("nest.py", "Op"),
    ("contract.py", "Op"),
    ("reduce.py", "Op"),  # a cumsum / cumprod step
}
IR_FIELDS = {"attrs", "operands", "ops", "params", "returns", "result", "type"}
"""Fields of IR ops and functions (`Program.functions` and `.body` are C text, not IR)."""


def _sources() -> list[Path]:
    files = sorted(PRINTER.glob("*.py"))
    assert len(files) > 10
    return files


@pytest.mark.parametrize("path", _sources(), ids=lambda p: p.name)
def test_the_printer_imports_no_pass_and_rewrites_no_ir(path: Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert not (node.module or "").startswith("gdv.passes"), (path.name, node.module)
            if node.module == "dataclasses":
                assert "replace" not in {a.name for a in node.names}, path.name
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("gdv.passes") for a in node.names), path.name
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            assert name != "replace" or not (
                isinstance(f, ast.Attribute) and getattr(f.value, "id", "") == "dataclasses"
            ), (path.name, node.lineno)
            if name in IR_CONSTRUCTORS:
                assert (path.name, name) in ALLOWED_CONSTRUCTORS, (path.name, name, node.lineno)
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for t in targets:
            while isinstance(t, ast.Subscript):  # x.attrs[k] = ... mutates x.attrs
                t = t.value
            if isinstance(t, ast.Attribute) and t.attr in IR_FIELDS:
                pytest.fail(f"{path.name}:{node.lineno} assigns .{t.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Attribute) and owner.attr in IR_FIELDS:
                if node.func.attr in ("append", "extend", "insert", "pop", "update", "clear"):
                    pytest.fail(f"{path.name}:{node.lineno} mutates .{owner.attr}")
    text = path.read_text()
    assert "merge_repeated" not in text  # operand de-duplication is the dedupe-operands pass


MATMUL = """func @main(%a: f32[40,48], %b: f32[48,72]) -> f32[40,72] {
  %y = dot(%a, %b) {lhs_batch=[], rhs_batch=[], lhs_contract=[1], rhs_contract=[0]} : f32[40,72]
  return %y
}
"""

ROWS = """func @main(%x: f32[256,384]) -> (f32[384,256], f32[256]) {
  %t = transpose(%x) {perm = [1, 0]} : f32[384,256]
  %m = reduce_max(%x) {axes = [1]} : f32[256]
  return %t, %m
}
"""


def _compiled(src: str, vector_bytes: int | None = None) -> Module:
    return PassManager(pipeline("c", 2, vector_bytes=vector_bytes)).run(parse(src)).module


def _inputs(module: Module) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        p.name: rng.standard_normal(p.type.shape).astype(np.float32) for p in module.entry.params
    }


def _agrees(module: Module) -> None:
    ins = _inputs(module)
    for got, want in zip(c.run(module, ins), reference.run(module, ins), strict=True):
        assert np.array_equal(got, want)


def _with_attrs(module: Module, result: str, **attrs) -> Module:
    def edit(op: Op) -> Op:
        if op.result != result:
            return op
        new = {k: v for k, v in {**op.attrs, **attrs}.items() if v is not None}
        return Op(op.result, op.name, list(op.operands), new, op.type, op.loc)

    fns = [
        dataclasses.replace(f, ops=[edit(o) for o in f.ops]) if f is module.entry else f
        for f in module.functions
    ]
    return Module(fns, module.filename)


@pytest.mark.parametrize("vector_bytes", [16, 32, 64])
def test_the_schedule_sets_the_vector_width_of_a_product(vector_bytes: int) -> None:
    module = _compiled(MATMUL, vector_bytes)
    (kernel,) = [op for op in module.entry.ops if op.name == "kernel"]
    assert kernel.attrs["vector"] == vector_bytes // 4
    source = c.lower(module)
    assert f"{vector_bytes}-byte vectors" in source
    assert f"vector_size({vector_bytes})" in source
    others = {16, 32, 64} - {vector_bytes}
    assert not any(f"vector_size({o})" in source for o in others)
    _agrees(module)


def test_changing_vector_on_a_kernel_changes_its_c_code() -> None:
    module = _compiled(ROWS, 64)
    red = next(op for op in module.entry.ops if op.name == "kernel" and op.attrs["reduce"])
    wide, narrow = c.lower(module), c.lower(_with_attrs(module, red.result, vector=4))
    assert wide != narrow
    assert "lane[32]" in wide and "lane[8]" in narrow  # max fold lanes: 2 x vector
    _agrees(_with_attrs(module, red.result, vector=4))


def test_tile_and_parallel_are_followed() -> None:
    module = _compiled(ROWS, 64)
    tr = next(op for op in module.entry.ops if op.name == "kernel" and not op.attrs["reduce"])
    source = c.lower(module)
    d = tr.attrs["order"][-1]
    step = tr.attrs["tile"][d]
    assert f"t{d} += INT64_C({step})" in source
    retiled = _with_attrs(module, tr.result, tile=[8, 16])
    assert "+= INT64_C(16)" in c.lower(retiled) and "+= INT64_C(8)" in c.lower(retiled)
    _agrees(retiled)
    assert re.search(r"#pragma omp parallel for\s*\n\s*for \(int64_t t", source)
    serial = _with_attrs(module, tr.result, parallel=[])
    assert not re.search(r"#pragma omp parallel for\s*\n\s*for \(int64_t t", c.lower(serial))
    _agrees(serial)


PRODUCT_CHOICES = ("strategy", "micro-tile", "blocking", "threads")


def _product(module: Module) -> Op:
    (kernel,) = [op for op in module.entry.ops if op.name == "kernel"]
    return kernel


def _head(source: str) -> str:
    return next(line for line in source.splitlines() if ": contraction M=" in line)


def test_what_the_printer_still_chooses_is_reported() -> None:
    module = _compiled(MATMUL, 64)
    kernel = _product(module)
    assert kernel.attrs["strategy"] == "product"  # select-products decided it
    choices = c.printer_choices(module)
    kinds = {(ch["kernel"], ch["choice"]) for ch in choices}
    assert not {(kernel.result, choice) for choice in PRODUCT_CHOICES} & kinds
    assert all(set(ch) == {"kernel", "op", "choice", "value", "why"} for ch in choices)
    assert c.lower_module(module).choices == choices
    # conv2d as a product is lower-to-kernels' and select-products' decision: the printer
    # records none of its choices (nor a scratch buffer) any more.
    conv = _compiled(
        "func @main(%x: f32[2,3,32,32], %w: f32[16,3,3,3]) -> f32[2,16,32,32] {\n"
        "  %y = conv2d(%x, %w) {stride = [1, 1], padding = [[1, 1], [1, 1]], "
        "dilation = [1, 1], groups = 1} : f32[2,16,32,32]\n  return %y\n}\n"
    )
    assert _product(conv).attrs["strategy"] == "product"
    kinds = {(ch["kernel"], ch["choice"]) for ch in c.printer_choices(conv)}
    assert not {(k, choice) for k in ("y", "y.pad") for choice in PRODUCT_CHOICES} & kinds
    assert not any(choice == "scratch-buffer" for _, choice in kinds)


def test_the_product_attributes_are_followed() -> None:
    """micro, blocks and split set on the kernel are the C code's; strategy removed gives the
    plain nest. Every variant computes the reference's bits."""
    module = _compiled(MATMUL, 64)
    kernel = _product(module)
    source = c.lower(module)
    mr, nr = kernel.attrs["micro"]
    mc, kc, nc = kernel.attrs["blocks"]
    assert f"packed {mr}x{nr} micro-kernel" in _head(source)
    assert f"KC={kc} MC={mc} NC={nc}" in _head(source)
    assert kernel.attrs["split"] == "rows"  # 40 x 72 x 48 multiply-adds: threads; 2 x 40 >= 72
    assert "#pragma omp parallel if (1)" in source

    small = _with_attrs(module, kernel.result, micro=[4, 32], blocks=[8, 5, 32])
    text = c.lower(small)
    assert "packed 4x32 micro-kernel" in _head(text) and "KC=5 MC=8 NC=32" in _head(text)
    assert "gdv_mk_f32_4x32_v64" in text and "gdv_mk_f32_4x32_v64" not in source
    _agrees(small)

    for split, test in (
        ("none", "#pragma omp parallel if (0)"),
        ("columns", "if (nsl >= nt) {"),
        ("rows", "if (nsl >= nt && msl < nt)"),
    ):
        threaded = _with_attrs(module, kernel.result, split=split)
        text = c.lower(threaded)
        assert test in text and (split == "none") == ("parallel if (0)" in text)
        _agrees(threaded)

    keys = ("strategy", "batch", "rows", "cols", "row_factor", "micro", "blocks", "split")
    nest = _with_attrs(module, kernel.result, **dict.fromkeys(keys))
    text = c.lower(nest)
    assert ": contraction" not in text and "micro-kernel" not in text
    _agrees(nest)


def test_roles_that_do_not_fit_the_body_are_refused() -> None:
    module = _compiled(MATMUL, 64)
    kernel = _product(module)
    swapped = _with_attrs(
        module, kernel.result, rows=kernel.attrs["cols"], cols=kernel.attrs["rows"]
    )
    with pytest.raises(IRError, match="does not fit it"):
        c.lower(swapped)
