"""Cutting SPMD functions into segments (`gdv.backends.mpi.segments`), without MPI: running the
segments on the reference backend rank by rank, with the collectives simulated between them,
gives every rank the results the simulation (`run_spmd`) gives. Random programs mix local ops,
collectives, dead values and returned parameters."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends import reference
from gdv.backends.mpi.segments import Collective, Segment, check_runnable, segment_module, split
from gdv.backends.reference.compare import bit_equal, describe_difference
from gdv.backends.reference.registry import KERNELS, Context
from gdv.backends.reference.spmd import global_function, run_spmd, shard_inputs
from gdv.ir.diagnostics import IRError
from gdv.ir.ops import get as get_spec

UNARY = ["neg", "abs", "relu"]
BINARY = ["add", "mul", "max"]
AXES = [["a"], ["b"], ["a", "b"], ["b", "a"]]


@st.composite
def programs(draw) -> str:
    """An SPMD function on a 2 x 2 mesh over values of local type f32[2,3]."""
    names = ["x", "y"]
    lines = []
    for k in range(draw(st.integers(1, 9))):
        kind = draw(st.sampled_from(["unary", "binary", "reduce", "permute"]))
        a = draw(st.sampled_from(names))
        if kind == "unary":
            rhs = f"{draw(st.sampled_from(UNARY))}(%{a})"
        elif kind == "binary":
            b = draw(st.sampled_from(names))
            rhs = f"{draw(st.sampled_from(BINARY))}(%{a}, %{b})"
        elif kind == "reduce":
            axes = draw(st.sampled_from(AXES))
            combiner = draw(st.sampled_from(["add", "max", "min"]))
            order = draw(st.sampled_from(["rank", "tree", "ring"]))
            rhs = (
                f'all_reduce(%{a}) {{axes = {_list(axes)}, combiner = "{combiner}", '
                f'order = "{order}"}}'
            )
        else:
            rhs = f'collective_permute(%{a}) {{axes = ["b"], pairs = [[1, 0]]}}'
        lines.append(f"  %v{k} = {rhs} : f32[2,3]")
        names.append(f"v{k}")
    returns = draw(st.lists(st.sampled_from(names), min_size=1, max_size=4))
    results = ", ".join("f32[2,3]" for _ in returns)
    return (
        "mesh @m = {a = 2, b = 2}\n\n"
        'func @main(%x: f32[2,3] {sharding = [["a"], ["b"]]}, %y: f32[2,3]) -> '
        f'({results}) {{mesh = "m"}} {{\n'
        + "\n".join(lines)
        + f"\n  return {', '.join('%' + r for r in returns)}\n}}\n"
    )


def _list(axes: list[str]) -> str:
    return "[" + ", ".join(f'"{a}"' for a in axes) + "]"


def run_steps(module, inputs) -> list[list[np.ndarray]]:
    """Every rank's results from the segments (reference backend) and the collectives
    (simulated), as the MPI worker runs them."""
    fn = module.entry
    mesh = next(m for m in module.meshes if m.name == fn.attrs["mesh"])
    envs = shard_inputs(module, inputs)
    ctx = Context("exact", mesh)
    for step in split(fn):
        if isinstance(step, Segment):
            seg = segment_module(module, fn, step)
            assert "mesh" not in seg.entry.attrs and not seg.meshes
            assert step.end > step.first
            for env in envs:
                outs = reference.run(seg, {n: env[n] for n in step.params})
                env.update(zip(step.results, outs, strict=True))
        else:
            assert isinstance(step, Collective)
            op = step.op
            stacked = np.stack([env[op.operands[0]] for env in envs])
            stacked = stacked.reshape(mesh.shape + stacked.shape[1:])
            with np.errstate(all="ignore"):
                out = KERNELS[get_spec(op.name)](op, [stacked], ctx)
            for env, coords in zip(envs, mesh.ranks(), strict=True):
                env[op.result] = np.array(out[coords])
    return [[env[name] for name in fn.returns] for env in envs]


@given(programs(), st.integers(0, 2**16))
def test_segments_and_collectives_give_the_simulations_results(text: str, seed: int) -> None:
    module = parse(text, "random.gdv")
    inputs = reference.random_inputs(global_function(module, module.entry), seed)
    want = run_spmd(module, inputs).per_rank
    got = run_steps(module, inputs)
    for r, (mine, theirs) in enumerate(zip(got, want, strict=True)):
        for k, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            assert bit_equal(a, b), f"rank {r}, result {k}: {describe_difference(a, b)}\n{text}"


def test_split_skips_empty_and_dead_segments() -> None:
    text = """mesh @m = {a = 2}

func @main(%x: f32[4]) -> (f32[4], f32[4]) {mesh = "m"} {
  %dead = neg(%x) : f32[4]
  %r0 = all_reduce(%x) {axes = ["a"], combiner = "add", order = "rank"} : f32[4]
  %r1 = all_reduce(%r0) {axes = ["a"], combiner = "max", order = "tree"} : f32[4]
  %s = mul(%r1, %x) : f32[4]
  %t = abs(%s) : f32[4]
  return %t, %x
}
"""
    fn = parse(text, "s.gdv").entry
    steps = split(fn)
    assert [type(s).__name__ for s in steps] == ["Collective", "Collective", "Segment"]
    seg = steps[2]
    assert (seg.first, seg.end, seg.params, seg.results) == (3, 5, ["r1", "x"], ["t"])


def test_a_fold_on_an_unsupported_dtype_is_refused_at_the_op() -> None:
    text = """mesh @m = {a = 2}

func @main(%x: bf16[4]) -> bf16[4] {mesh = "m"} {
  %r = all_reduce(%x) {axes = ["a"], combiner = "add", order = "rank"} : bf16[4]
  return %r
}
"""
    try:
        check_runnable(parse(text, "b.gdv").entry)
    except IRError as e:
        assert str(e).startswith("b.gdv:4:8: error: all_reduce on bf16"), str(e)
    else:
        raise AssertionError("bf16 all_reduce was accepted")


def test_the_runtime_calls_no_mpi_collective() -> None:
    """The folds' order is the runtime's own: no MPI reduction or collective (whose order MPI
    leaves open) is called, only point-to-point messages."""
    source = (Path(__file__).parents[3] / "backends" / "mpi" / "runtime.c").read_text()
    calls = set(re.findall(r"\bMPI_[A-Z][a-z_]+(?=\s*\()", source))
    assert calls <= {"MPI_Irecv", "MPI_Isend", "MPI_Recv", "MPI_Send", "MPI_Waitall"}, calls


# A partitioned program with control flow (as `gdv partition` writes it): an if, a while and
# a scan between collectives, on values gathered whole; @step names @dbl in turn.
CONTROL = """mesh @m = {a = 2}

func @main(%c: i1[], %x: f32[2,3] {sharding = [["a"], []]}, %n: i32[])
    -> (f32[4,3], i32[], f32[2,3]) {mesh = "m", out_shardings = [[[], []], [], [["a"], []]]} {
  %g = all_gather(%x) {axes = ["a"], dim = 0} : f32[4,3]
  %r = if(%c, %g) {then = "dbl", else = "neg", result = 0} : f32[4,3]
  %k = while(%r, %n) {cond = "pos", body = "step", max_trips = 6, result = 1} : i32[]
  %w = while(%r, %n) {cond = "pos", body = "step", max_trips = 6, result = 0} : f32[4,3]
  %s = all_reduce(%w) {axes = ["a"], combiner = "add", order = "rank"} : f32[4,3]
  %ys = scan(%x) {body = "acc", num_scan_inputs = 1, result = 0} : f32[2,3]
  return %s, %k, %ys
}

func @dbl(%a: f32[4,3]) -> f32[4,3] {
  %b = add(%a, %a) : f32[4,3]
  return %b
}

func @neg(%a: f32[4,3]) -> f32[4,3] {
  %b = neg(%a) : f32[4,3]
  return %b
}

func @pos(%a: f32[4,3], %n: i32[]) -> i1[] {
  %z = constant() {value = 0} : i32[]
  %p = cmp(%n, %z) {dir = "gt"} : i1[]
  return %p
}

func @step(%a: f32[4,3], %n: i32[]) -> (f32[4,3], i32[]) {
  %one = constant() {value = 1} : i32[]
  %m = sub(%n, %one) : i32[]
  %c = constant() {value = true} : i1[]
  %h = if(%c, %a) {then = "dbl", else = "dbl", result = 0} : f32[4,3]
  return %h, %m
}

func @acc(%x: f32[3]) -> f32[3] {
  %y = neg(%x) : f32[3]
  return %y
}
"""


def test_control_flow_ops_run_in_their_segments() -> None:
    """Control flow ops are local ops: each segment keeps the ordinary functions they name
    (and those named in turn), and the segments, rank by rank, give the simulation's
    results."""
    module = parse(CONTROL, "cf.gdv")
    fn = module.entry
    check_runnable(fn, module)
    steps = split(fn)
    assert [type(s).__name__ for s in steps] == ["Collective", "Segment", "Collective", "Segment"]
    for step in steps:
        if isinstance(step, Segment):
            names = {f.name for f in segment_module(module, fn, step).functions}
            assert {"dbl", "neg", "pos", "step", "acc"} <= names
    for seed in range(3):
        inputs = reference.random_inputs(global_function(module, fn), seed)
        inputs["n"] = np.array(seed * 3, np.int32)  # 0 trips, 3, and the limit of 6
        for c in (True, False):
            inputs["c"] = np.array(c)
            want = run_spmd(module, inputs).per_rank
            got = run_steps(module, inputs)
            for r, (mine, theirs) in enumerate(zip(got, want, strict=True)):
                for k, (a, b) in enumerate(zip(mine, theirs, strict=True)):
                    assert bit_equal(a, b), f"rank {r}, result {k}: {describe_difference(a, b)}"


def test_a_control_op_naming_an_spmd_function_is_refused_at_the_attribute() -> None:
    """The functions a control op names run on every rank as ordinary functions: one with a
    mesh (which may hold collectives), even reached through another, is refused."""
    text = """mesh @m = {a = 2}

func @main(%c: i1[], %x: f32[4]) -> f32[4] {mesh = "m"} {
  %r = if(%c, %x) {then = "id", else = "id2", result = 0} : f32[4]
  return %r
}

func @id(%a: f32[4]) -> f32[4] {
  return %a
}

func @id2(%a: f32[4]) -> f32[4] {
  %c = constant() {value = false} : i1[]
  %r = if(%c, %a) {then = "id", else = "sum", result = 0} : f32[4]
  return %r
}

func @sum(%a: f32[4]) -> f32[4] {mesh = "m"} {
  %b = all_reduce(%a) {axes = ["a"], combiner = "add", order = "rank"} : f32[4]
  return %b
}
"""
    module = parse(text, "b.gdv")
    check_runnable(module.entry)  # without the module: the dtypes only
    with pytest.raises(IRError) as e:
        check_runnable(module.entry, module)
    assert str(e.value) == (
        "b.gdv:14:33: error: if else @sum is an SPMD function (it has a mesh): the functions a "
        "control flow op names run on every rank as ordinary functions"
    )
