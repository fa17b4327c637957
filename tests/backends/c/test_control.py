"""The C target runs `if`, `while` and `scan` (IR_SPEC.md section 9) as the reference does: every
program of the reference backend's control flow tests, compiled at each level through the
whole pipeline (each body function gets its kernels, schedules and buffer plan), gives the
reference's bits on drawn inputs; so do drawn dtypes and a scan without states. A group (one
op per result) runs its loop once; a body op the target cannot lower is an error at that op,
or, with the fallback allowed, the control op runs on the reference backend."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gdv.backends import c, reference
from gdv.cli import main
from gdv.driver import CompileOptions, compile_module
from gdv.fuzzing.programs import inputs as fuzz_inputs
from gdv.fuzzing.programs import programs
from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.diagnostics import IRError
from gdv.ir.dtypes import DType
from gdv.ir.parser import parse
from gdv.ir.printer import print_module
from gdv.ir.types import TensorType
from tests.backends.reference.test_control import IF, NESTED, SCAN, WHILE

f32 = np.float32


@functools.cache
def _compiled(text: str, level: int):
    comp = compile_module(text, CompileOptions(target="c", level=level, jobs=1, use_cache=False))
    assert comp.verdict == "proved"
    return comp


def _same(text: str, level: int, inputs: dict[str, np.ndarray]) -> None:
    got = _compiled(text, level)(**inputs)
    want = reference.run(parse(text), inputs)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and reference.bit_equal(g, w), (
            f"{reference.describe_difference(g, w)}\n{text}"
        )


def _floats(n: int, lo: float = -100, hi: float = 100):
    return st.lists(st.floats(lo, hi, width=32), min_size=n, max_size=n).map(
        lambda v: np.array(v, f32)
    )


LEVELS = st.sampled_from([0, 1, 2, 3])


@settings(max_examples=30, deadline=None)
@given(c_=st.booleans(), x=_floats(3), y=_floats(3), level=LEVELS)
def test_if(c_: bool, x, y, level: int) -> None:
    _same(IF, level, {"c": np.array(c_), "x": x, "y": y})


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(-5, 3000),
    acc=st.floats(-10, 10, width=32),
    limit=st.sampled_from([0, 1, 7, 1000]),
    level=LEVELS,
)
def test_while_stops_where_the_reference_stops(n: int, acc: float, limit: int, level) -> None:
    text = WHILE.replace("MAX", str(limit))
    _same(text, level, {"n": np.array(n, np.int32), "acc": np.array(acc, f32)})


@settings(max_examples=30, deadline=None)
@given(data=st.data(), length=st.sampled_from([0, 1, 5]), level=LEVELS)
def test_scan(data, length: int, level: int) -> None:
    s = data.draw(_floats(2))
    xs = data.draw(_floats(2 * length)).reshape(length, 2)
    ws = data.draw(_floats(length))
    _same(SCAN.replace("L", str(length)), level, {"s": s, "xs": xs, "ws": ws})


@settings(max_examples=20, deadline=None)
@given(m=_floats(9, -1, 1), n=st.integers(-1, 8), level=LEVELS)
def test_nested_control_flow(m, n: int, level: int) -> None:
    _same(NESTED, level, {"m": m.reshape(3, 3), "n": np.array(n, np.int32)})


# A scan without states whose body reduces and converts (every scanned dtype), and a while
# carrying a bool and the dtype's values: the state buffers, their swap and the slices.
DTYPED = """
func @main(%xs: T[4,3], %flag: i1[], %v: T[3]) -> (f32[4], T[3], i1[]) {
  %ys = scan(%xs) {body = "sum_row", num_scan_inputs = 1, result = 0} : f32[4]
  %w = while(%v, %flag) {cond = "go", body = "twice", max_trips = 5, result = 0} : T[3]
  %f = while(%v, %flag) {cond = "go", body = "twice", max_trips = 5, result = 1} : i1[]
  return %ys, %w, %f
}
func @sum_row(%x: T[3]) -> f32[] {
  %y = convert(%x) : f32[3]
  %s = reduce_sum(%y) {axes = [0]} : f32[]
  return %s
}
func @go(%v: T[3], %flag: i1[]) -> i1[] {
  return %flag
}
func @twice(%v: T[3], %flag: i1[]) -> (T[3], i1[]) {
  %d = add(%v, %v) : T[3]
  %z = iota() {axis = 0} : T[3]
  %m = max(%d, %z) : T[3]
  %lo = slice(%m) {start = [0], limit = [1], stride = [1]} : T[1]
  %one = reshape(%lo) : T[]
  %zero = constant() {value = 0} : T[]
  %more = cmp(%one, %zero) {dir = "ne"} : i1[]
  return %m, %more
}
"""


@settings(max_examples=15, deadline=None)
@given(
    dtype=st.sampled_from(["f32", "f64", "f16", "bf16", "i32", "i8", "u8", "i64"]),
    seed=st.integers(0, 2**16),
    flag=st.booleans(),
    level=st.sampled_from([0, 3]),
)
def test_drawn_dtypes(dtype: str, seed: int, flag: bool, level: int) -> None:
    text = DTYPED.replace("T[", f"{dtype}[")
    inputs = reference.random_inputs(parse(text).entry, seed)
    inputs["flag"] = np.array(flag)
    _same(text, level, inputs)


def test_a_group_runs_its_loop_once() -> None:
    """WHILE's three ops (one per result) make one loop in the C source, the other two copy
    their result from its buffers."""
    source = c.lower(_compiled(WHILE.replace("MAX", "1000"), 2).module)
    assert source.count("trips */") == 1
    assert source.count("= while: every result of its group") == 1
    assert source.count(": result ") == 3


def test_a_body_op_the_target_cannot_lower() -> None:
    """A collective (SPMD functions only, never lowered by C) in a branch, lowered without
    the pipeline: an error at that op; with the fallback, the whole if runs on the reference
    backend and gives its result."""
    text = """
func @main(%c: i1[], %x: f32[3]) -> f32[3] {
  %r = if(%c, %x) {then = "odd", else = "same", result = 0} : f32[3]
  return %r
}
func @odd(%x: f32[3]) -> f32[3] {
  %y = softmax(%x) {axis = 0} : f32[3]
  return %y
}
func @same(%x: f32[3]) -> f32[3] {
  return %x
}
"""
    module = parse(text)
    with pytest.raises(IRError, match=r"7:8: error: target c does not support softmax"):
        c.lower(module)
    exe = c.Executable(module, allow_fallback=True)
    assert [f.op for f in c.fallbacks(module)] == ["if"]
    for cond in (True, False):
        x = np.array([1.0, -2.0, 0.5], f32)
        inputs = {"c": np.array(cond), "x": x}
        (got,) = exe(inputs)
        assert reference.bit_equal(got, reference.run(module, inputs)[0])


def test_the_cli_compiles_runs_and_profiles_control_flow(tmp_path, capsys) -> None:
    path = tmp_path / "w.gdv"
    path.write_text(WHILE.replace("MAX", "1000"))
    bundle = tmp_path / "ev"
    out = str(tmp_path / "w.so")
    assert main(["compile", str(path), "-o", out, "--emit-evidence", str(bundle)]) == 0
    assert main(["evidence", "verify", str(bundle)]) == 0
    assert "verified" in capsys.readouterr().out
    assert main(["profile", str(path)]) == 0
    assert "while" in capsys.readouterr().out


def test_bind_fixes_an_operand_of_a_loop() -> None:
    comp = _compiled(NESTED, 2)
    m = (np.arange(9, dtype=f32) / f32(10)).reshape(3, 3)
    bound = comp.bind(m=m)
    for n in (0, 3, 8):
        (got,) = bound(n=np.array(n, np.int32))
        (want,) = reference.run(parse(NESTED), {"m": m, "n": np.array(n, np.int32)})
        assert reference.bit_equal(got, want)


# A body returning one value twice, a reshape of its parameter and a parameter itself: the
# results that are not computed in their caller's buffer are copied there.
SHARED = """
func @main(%s: f32[2,3], %xs: f32[4,6]) -> (f32[2,3], f32[4,6], f32[4,2,3], f32[4,6]) {
  %a = scan(%s, %xs) {body = "f", num_scan_inputs = 1, result = 0} : f32[2,3]
  %b = scan(%s, %xs) {body = "f", num_scan_inputs = 1, result = 1} : f32[4,6]
  %c = scan(%s, %xs) {body = "f", num_scan_inputs = 1, result = 2} : f32[4,2,3]
  %d = scan(%s, %xs) {body = "f", num_scan_inputs = 1, result = 3} : f32[4,6]
  return %a, %b, %c, %d
}
func @f(%s: f32[2,3], %x: f32[6]) -> (f32[2,3], f32[6], f32[2,3], f32[6]) {
  %r = reshape(%x) : f32[2,3]
  %t = add(%s, %r) : f32[2,3]
  %u = reshape(%s) : f32[6]
  return %t, %u, %t, %x
}
"""


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16), level=LEVELS)
def test_results_shared_between_returns(seed: int, level: int) -> None:
    _same(SHARED, level, reference.random_inputs(parse(SHARED).entry, seed))


# Differential: a drawn program P (`gdv fuzz`'s generator) run as a branch of an `if` and as
# the body of a `scan` over a stack of inputs gives, on the C target, exactly the bits P gives
# compiled alone on the C target (the same function through the same pipeline makes the same
# kernels), so no tolerance is needed even where P holds transcendentals.


def _wrapped(program: Module, length: int) -> Module:
    """@main(cond, P's params, each param stacked `length` times): every result of P as an
    `if` of P on the params (both branches P), then every result of P scanned over the stacks."""
    p = program.entry
    body = Function("body", p.params, p.results, p.ops, p.returns, results_parenthesized=True)
    params = [q.name for q in p.params]
    ifs = [
        Op(f"r{k}", "if", ["cond", *params], {"then": "body", "else": "body", "result": k}, t)
        for k, t in enumerate(p.results)
    ]
    stacked = [
        Param(f"s_{q.name}", TensorType(q.type.dtype, (length, *q.type.shape)), dict(q.attrs))
        for q in p.params
    ]
    scans = [
        Op(
            f"y{k}",
            "scan",
            [q.name for q in stacked],
            {"body": "body", "num_scan_inputs": len(stacked), "result": k},
            TensorType(t.dtype, (length, *t.shape)),
        )
        for k, t in enumerate(p.results)
    ]
    main_fn = Function(
        "main",
        [Param("cond", TensorType(DType.I1, ())), *p.params, *stacked],
        [*p.results, *(op.type for op in scans)],
        [*ifs, *scans],
        [*(op.result for op in ifs), *(op.result for op in scans)],
        results_parenthesized=True,
    )
    return Module([main_fn, body], "<wrapped>")


def _c(module: Module, level: int):
    comp = compile_module(
        print_module(module), CompileOptions(target="c", level=level, jobs=1, use_cache=False)
    )
    assert comp.verdict == "proved", [o.reason for o in comp.outcomes if o.status != "proved"]
    return comp


@settings(max_examples=12, deadline=None)
@given(
    program=programs(max_ops=4),
    length=st.sampled_from([0, 1, 3]),
    level=LEVELS,
    seed=st.integers(0, 2**16),
    cond=st.booleans(),
)
def test_a_drawn_program_as_a_branch_and_a_scan_body(program, length, level, seed, cond) -> None:
    assume(program.entry.params)  # a scan needs an operand to scan
    try:
        alone = _c(program, level)
    except IRError as e:  # a program the C target refuses is refused inside a body too
        with pytest.raises(IRError, match=re.escape(e.message.split(":")[0])):
            _c(_wrapped(program, length), level)
        return
    wrapped = _c(_wrapped(program, length), level)
    x = fuzz_inputs(program, seed)
    stacks = [fuzz_inputs(program, seed + 1 + t) for t in range(length)]
    inputs = {"cond": np.array(cond), **x}
    for q in program.entry.params:
        t = q.type
        inputs[f"s_{q.name}"] = (
            np.stack([s[q.name] for s in stacks]) if stacks else np.zeros((0, *t.shape), t.dtype.np)
        )
    got = wrapped(**inputs)
    n = len(program.entry.results)
    want = alone(**x)
    steps = [alone(**s) for s in stacks]
    for k in range(n):
        assert reference.bit_equal(got[k], want[k])
        if length:
            assert reference.bit_equal(got[n + k], np.stack([s[k] for s in steps]))
        else:
            assert got[n + k].shape == (0, *want[k].shape)
