"""The public API: run, input checking, ideal mode, memory refusal, random inputs, and the
kernel registry's completeness."""

from __future__ import annotations

import math
import time

import ml_dtypes
import numpy as np
import pytest

from gdv.backends.reference import (
    KERNELS,
    Context,
    apply,
    bit_equal,
    check_memory,
    kernel,
    random_inputs,
    run,
)
from gdv.backends.reference.memory import default_limit, physical_memory
from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.diagnostics import IRError
from gdv.ir.dtypes import DType
from gdv.ir.ops import REGISTRY
from gdv.ir.parser import parse
from gdv.ir.types import TensorType

MLP = """
func @main(%x: f32[2,3] {range = [-1.0, 1.0]}, %w: f32[3,4], %b: f32[4]) -> f32[2,4] {
  %0 = matmul(%x, %w) : f32[2,4]
  %1 = broadcast(%b) {dims = [1]} : f32[2,4]
  %2 = add(%0, %1) : f32[2,4]
  %3 = relu(%2) : f32[2,4]
  return %3
}
"""


def mlp_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x": rng.uniform(-1, 1, (2, 3)).astype(np.float32),
        "w": rng.uniform(-1, 1, (3, 4)).astype(np.float32),
        "b": rng.uniform(-1, 1, (4,)).astype(np.float32),
    }


# --- registry -----------------------------------------------------------------------------


def test_every_op_has_a_kernel() -> None:
    missing = sorted(s.name for s in REGISTRY.values() if s not in KERNELS)
    assert not missing, f"ops without a reference kernel: {missing}"
    assert all(k in REGISTRY.values() for k in KERNELS)


def test_kernels_register_against_specs_only() -> None:
    with pytest.raises(TypeError):
        kernel("add")(lambda op, args, ctx: args[0])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="already has"):
        kernel(REGISTRY["add"])(lambda op, args, ctx: args[0])
    assert KERNELS[REGISTRY["add"]] is not None
    with pytest.raises(ValueError):
        Context("fast")


# --- run --------------------------------------------------------------------------------------


def test_run_a_parsed_module() -> None:
    module = parse(MLP, "mlp.gdv")
    inputs = mlp_inputs()
    (out,) = run(module, inputs)
    assert out.dtype == np.float32 and out.shape == (2, 4)
    # each element by the spec: sequential dot in f32, then + b, then relu
    x, w, b = inputs["x"], inputs["w"], inputs["b"]
    for i in range(2):
        for j in range(4):
            acc = x[i, 0] * w[0, j]
            for k in (1, 2):
                acc = np.float32(acc + np.float32(x[i, k] * w[k, j]))
            want = max(np.float32(acc + b[j]), np.float32(0))
            assert out[i, j] == want
    assert bit_equal(run(module.entry, inputs)[0], out)


def test_outputs_do_not_alias_inputs() -> None:
    fn = parse("func @main(%x: f32[2]) -> (f32[2], f32[2]) { return %x, %x }").entry
    x = np.array([1.0, 2.0], np.float32)
    a, b = run(fn, {"x": x})
    a[0] = 5.0
    assert x[0] == 1.0 and b[0] == 1.0


def test_functions_without_results_and_several_results() -> None:
    fn = parse("func @main(%x: i8[]) -> () { return }").entry
    assert run(fn, {"x": np.array(3, np.int8)}) == []
    two = parse(
        """func @main(%x: i32[3]) -> (i32[], i1[3]) {
             %s = reduce_sum(%x) {axes = [0]} : i32[]
             %c = constant() {value = 0} : i32[3]
             %p = cmp(%x, %c) {dir = "gt"} : i1[3]
             return %s, %p
           }"""
    ).entry
    s, p = run(two, {"x": np.array([1, -2, 3], np.int32)})
    assert s == 2 and s.dtype == np.int32 and p.tolist() == [True, False, True]


def test_input_errors_name_the_parameter_and_both_types() -> None:
    module = parse(MLP, "mlp.gdv")
    good = mlp_inputs()
    with pytest.raises(IRError, match=r"missing input for parameter %b: f32\[4\]"):
        run(module, {k: v for k, v in good.items() if k != "b"})
    with pytest.raises(IRError, match=r"input %x is f64\[2,3\], expected f32\[2,3\]") as e:
        run(module, {**good, "x": good["x"].astype(np.float64)})
    assert str(e.value).startswith("mlp.gdv:2:")  # points at the parameter
    with pytest.raises(IRError, match=r"input %w is f32\[4,3\], expected f32\[3,4\]"):
        run(module, {**good, "w": good["w"].T.copy()})
    with pytest.raises(IRError, match=r"input %x is u8\[2,3\], expected f32\[2,3\]"):
        run(module, {**good, "x": np.zeros((2, 3), np.uint8)})
    with pytest.raises(IRError, match=r"input %x is numpy complex64\[2,3\]"):
        run(module, {**good, "x": np.zeros((2, 3), np.complex64)})
    with pytest.raises(IRError, match=r"'%x' is not a parameter.*without %"):
        run(module, {**good, "%x": good["x"]})
    with pytest.raises(IRError, match="must be a numpy array, got list"):
        run(module, {**good, "b": [0.0, 0.0, 0.0, 0.0]})


def test_ill_typed_programs_are_rejected_before_running() -> None:
    x = Param("x", TensorType(DType.F32, (2,)))
    bad = Op("y", "add", ["x", "x"], {}, TensorType(DType.F32, (3,)))
    fn = Function("main", [x], [TensorType(DType.F32, (3,))], [bad], ["y"])
    with pytest.raises(IRError, match=r"written f32\[3\]"):
        run(fn, {"x": np.zeros(2, np.float32)})
    unknown = Op("y", "frobnicate", ["x"], {}, TensorType(DType.F32, (2,)))
    fn = Function("main", [x], [TensorType(DType.F32, (2,))], [unknown], ["y"])
    with pytest.raises(IRError, match="unknown op"):
        run(fn, {"x": np.zeros(2, np.float32)})
    with pytest.raises(IRError, match="no entry"):
        run(Module([Function("f", [], [], [], []), Function("g", [], [], [], [])]), {})
    with pytest.raises(IRError, match="cannot infer"):
        apply("reduce_sum", [np.zeros(2, np.float32)])  # no axes


def test_bf16_inputs_and_outputs() -> None:
    fn = parse("func @main(%x: bf16[2]) -> bf16[2] { %y = add(%x, %x) : bf16[2]  return %y }")
    x = np.array([1.5, -0.0], ml_dtypes.bfloat16)
    (y,) = run(fn, {"x": x})
    assert y.dtype == ml_dtypes.bfloat16 and y.tolist() == [3.0, -0.0]


# --- ideal mode -------------------------------------------------------------------------------


def test_ideal_mode_widens_floats_and_keeps_integers() -> None:
    fn = parse(
        """func @main(%x: bf16[3], %i: i8[3]) -> (bf16[], i8[3], f16[3], i32[3]) {
             %s = reduce_sum(%x) {axes = [0]} : bf16[]
             %j = add(%i, %i) : i8[3]
             %h = convert(%x) : f16[3]
             %t = convert(%x) : i32[3]
             return %s, %j, %h, %t
           }"""
    ).entry
    x = np.array([1.0, 2**-8, 2**-8], ml_dtypes.bfloat16)
    i = np.array([100, -3, 7], np.int8)
    s, j, h, t = run(fn, {"x": x, "i": i})
    assert float(s) == 1.0 and s.dtype == ml_dtypes.bfloat16
    si, ji, hi, ti = run(fn, {"x": x, "i": i}, mode="ideal")
    assert si.dtype == np.float64 and float(si) == 1 + 2**-7
    assert ji.dtype == np.int8 and ji.tolist() == [-56, -6, 14]  # integers still wrap
    assert hi.dtype == np.float64 and hi.tolist() == [1.0, 2**-8, 2**-8]  # convert: identity
    assert ti.dtype == np.int32 and ti.tolist() == [1, 0, 0]  # float -> int truncates


def test_ideal_mode_measures_rounding_error() -> None:
    fn = parse(MLP.replace("f32", "bf16")).entry
    inputs = random_inputs(fn, seed=1)
    exact = run(fn, inputs)[0].astype(np.float64)
    ideal = run(fn, inputs, mode="ideal")[0]
    err = np.max(np.abs(exact - ideal))
    assert 0 < err < 0.05


# --- memory -----------------------------------------------------------------------------------


def test_a_parameter_too_large_is_refused_before_allocating() -> None:
    fn = parse(
        "func @main(%x: f32[100000,100000,100]) -> f32[100000,100000,100] { return %x }", "big.gdv"
    ).entry
    start = time.monotonic()
    with pytest.raises(
        IRError, match=r"parameter %x: f32\[100000,100000,100\] needs 3\.6 TiB"
    ) as e:
        run(fn, {})
    assert str(e.value).startswith("big.gdv:1:")
    with pytest.raises(IRError, match="80% of physical memory"):
        check_memory(fn)
    with pytest.raises(IRError, match="parameter %x"):
        random_inputs(fn, 0)
    assert time.monotonic() - start < 5


def test_an_intermediate_too_large_is_refused_at_its_op() -> None:
    fn = parse(
        """func @main(%x: f32[4]) -> f32[] {
             %b = broadcast(%x) {dims = [2]} : f32[100000,100000,4]
             %s = reduce_sum(%b) {axes = [0, 1, 2]} : f32[]
             return %s
           }""",
        "mid.gdv",
    ).entry
    with pytest.raises(IRError, match=r"%b = broadcast\(\.\.\.\) : f32\[100000,100000,4\]") as e:
        run(fn, {"x": np.zeros(4, np.float32)})
    assert str(e.value).startswith("mid.gdv:2:")


def test_memory_limit_counts_live_values_and_mode() -> None:
    fn = parse(
        """func @main(%x: f32[1000]) -> f32[1000] {
             %a = neg(%x) : f32[1000]
             %b = neg(%a) : f32[1000]
             return %b
           }"""
    ).entry
    check_memory(fn, limit_bytes=30_000)
    with pytest.raises(IRError, match="the given limit"):
        check_memory(fn, limit_bytes=10_000)
    # ideal mode holds the floats as f64: twice the bytes
    with pytest.raises(IRError):
        check_memory(fn, limit_bytes=30_000, mode="ideal")
    assert 0 < default_limit() < physical_memory()


# --- random inputs ----------------------------------------------------------------------------


def test_random_inputs_are_seeded_and_within_range() -> None:
    fn = parse(
        """func @main(%a: f32[500] {range = [2.0, 3.0]}, %b: bf16[500], %c: i8[500],
                      %d: i32[500] {range = [10, 1000]}, %e: i1[500],
                      %f: i64[500] {range = [-2, 2]},
                      %g: f16[4] {range = [-inf, inf]}) -> i1[500] { return %e }"""
    ).entry
    one, two, other = random_inputs(fn, 5), random_inputs(fn, 5), random_inputs(fn, 6)
    for name in one:
        assert bit_equal(one[name], two[name])
        assert one[name].dtype == fn.param(name).type.dtype.np
        assert one[name].shape == fn.param(name).type.shape
    assert not np.array_equal(one["a"], other["a"])
    assert one["a"].min() >= 2.0 and one["a"].max() <= 3.0
    b = one["b"].astype(np.float64)
    assert b.min() >= -1 and b.max() <= 1 and len(np.unique(b)) > 50
    assert set(one["c"].tolist()) == set(range(-4, 5))
    assert set(one["d"].tolist()) == set(range(10, 19))
    assert set(one["e"].tolist()) == {False, True}
    assert set(one["f"].tolist()) == set(range(-2, 3))
    assert np.isfinite(one["g"]).all()
    run(fn, one)  # accepted as they are


def test_random_inputs_reject_a_range_without_integers() -> None:
    fn = parse("func @main(%x: i8[2] {range = [0.25, 0.75]}) -> i8[2] { return %x }").entry
    with pytest.raises(IRError, match="holds no i8 value"):
        random_inputs(fn, 0)


def test_nan_free_random_inputs_run_through_transcendentals() -> None:
    fn = parse(
        """func @main(%x: f16[16] {range = [0.5, 4.0]}) -> f16[16] {
             %l = log(%x) : f16[16]
             return %l
           }"""
    ).entry
    (out,) = run(fn, random_inputs(fn, 0))
    values = out.astype(np.float64)
    assert np.all((values >= math.log(0.5) - 1e-3) & (values <= math.log(4) + 1e-3))
