"""MPI execution of SPMD functions (issue 17): every rank's results bit for bit the
simulation's (`run_spmd`), for every collective and order; failures named within the timeout;
`gdv run --ranks N`.

Each MPI run starts `mpiexec` and one Python per rank (about 3 s for 2 ranks and 5 s for 4 on
two cores), so the programs below hold many collectives each and the tests run few of them.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from gdv.api import parse
from gdv.backends.mpi import MpiError, MpiUnavailable, run_mpi, tools
from gdv.backends.reference import random_inputs
from gdv.backends.reference.compare import bit_equal, describe_difference
from gdv.backends.reference.spmd import global_function, run_spmd
from gdv.cli import main

# Data x tensor parallel MLP on a 2 x 2 mesh: x split by rows over "data", w1 by columns and
# w2 by rows over "model"; the partial products are summed over "model".
MLP = """mesh @m = {data = 2, model = 2}

// comment
func @main(
    %x: f32[4,16] {sharding = [["data"], []], range = [-1.0, 1.0]},
    %w1: f32[16,8] {sharding = [[], ["model"]]},
    %w2: f32[8,4] {sharding = [["model"], []]}
) -> f32[4,4] {mesh = "m", out_shardings = [[["data"], []]]} {
  %h = matmul(%x, %w1) : f32[4,8]
  %r = relu(%h) : f32[4,8]
  %p = matmul(%r, %w2) : f32[4,4]
  %y = all_reduce(%p) {axes = ["model"], combiner = "add", order = "rank"} : f32[4,4]
  return %y
}
"""

# Every collective and order on a 2 x 2 mesh, over groups of 2 and 4 (axes in both orders),
# every combiner, f32, f64, i64, i32 and i8; ring folds whose element counts (6, 7, 3) are not
# multiples of the group size (one chunk empty for 6 elements on 4 members); local ops before,
# between and after collectives, and collectives back to back.
EVERY = """mesh @m = {dp = 2, tp = 2}

func @main(
    %x: f32[2,3] {sharding = [["dp"], ["tp"]]},
    %y: f32[7],
    %z: f32[4,6] {sharding = [["tp"], []]},
    %i: i32[2,3] {sharding = [["dp"], []]},
    %l: i64[5],
    %b: i8[4],
    %d: f64[3,2] {sharding = [[], ["dp"]]},
    %k: i32[3] {sharding = [["tp"]]}
) -> (
    f32[2,3], f32[2,3], f32[2,3], f32[2,3], f32[2,3], f32[2,3], f32[7], f32[7], f32[1,6],
    f32[4,3], f32[2,6], f32[4,3], f32[8,6], f32[1,24], f32[4,6], f32[2,3], f32[2,3], f32[2,3],
    i32[2,3], i32[2,3], i32[1,3], i64[5], i8[4], i8[4], i8[4], f64[3,2], f64[3,2], i32[3],
    f32[2,3]
) {mesh = "m"} {
  %x2 = mul(%x, %x) : f32[2,3]
  %r0 = all_reduce(%x) {axes = ["tp"], combiner = "add", order = "rank"} : f32[2,3]
  %r1 = all_reduce(%x2) {axes = ["dp", "tp"], combiner = "add", order = "tree"} : f32[2,3]
  %s1 = mul(%r0, %r1) : f32[2,3]
  %r2 = all_reduce(%s1) {axes = ["tp", "dp"], combiner = "add", order = "ring"} : f32[2,3]
  %r3 = all_reduce(%x) {axes = ["dp"], combiner = "max", order = "ring"} : f32[2,3]
  %r4 = all_reduce(%x) {axes = ["tp"], combiner = "min", order = "tree"} : f32[2,3]
  %r5 = all_reduce(%x) {axes = ["dp", "tp"], combiner = "max", order = "rank"} : f32[2,3]
  %y1 = all_reduce(%y) {axes = ["dp", "tp"], combiner = "min", order = "ring"} : f32[7]
  %y2 = all_reduce(%y) {axes = ["tp"], combiner = "add", order = "ring"} : f32[7]
  %c0 = reduce_scatter(%z) {axes = ["dp", "tp"], dim = 0, combiner = "add", order = "ring"}
    : f32[1,6]
  %c1 = reduce_scatter(%z) {axes = ["tp"], dim = 1, combiner = "max", order = "rank"} : f32[4,3]
  %c2 = reduce_scatter(%z) {axes = ["dp"], dim = 0, combiner = "min", order = "tree"} : f32[2,6]
  %c3 = reduce_scatter(%z) {axes = ["tp"], dim = 1, combiner = "add", order = "ring"} : f32[4,3]
  %g0 = all_gather(%z) {axes = ["dp"], dim = 0} : f32[8,6]
  %t0 = all_to_all(%z) {axes = ["dp", "tp"], split_dim = 0, concat_dim = 1} : f32[1,24]
  %t1 = all_to_all(%z) {axes = ["tp"], split_dim = 1, concat_dim = 1} : f32[4,6]
  %p0 = collective_permute(%x) {axes = ["dp", "tp"], pairs = [[0, 1], [1, 2], [2, 3], [3, 0]]}
    : f32[2,3]
  %p1 = collective_permute(%x) {axes = ["tp"], pairs = [[0, 0]]} : f32[2,3]
  %p2 = collective_permute(%x) {axes = ["dp"], pairs = [[1, 0]]} : f32[2,3]
  %i0 = all_reduce(%i) {axes = ["dp", "tp"], combiner = "add", order = "ring"} : i32[2,3]
  %i1 = all_reduce(%i) {axes = ["tp", "dp"], combiner = "add", order = "tree"} : i32[2,3]
  %i2 = reduce_scatter(%i) {axes = ["dp"], dim = 0, combiner = "add", order = "rank"} : i32[1,3]
  %l0 = all_reduce(%l) {axes = ["dp", "tp"], combiner = "add", order = "rank"} : i64[5]
  %b0 = all_reduce(%b) {axes = ["dp", "tp"], combiner = "add", order = "tree"} : i8[4]
  %b1 = all_reduce(%b) {axes = ["dp", "tp"], combiner = "max", order = "ring"} : i8[4]
  %b2 = all_reduce(%b) {axes = ["tp"], combiner = "min", order = "rank"} : i8[4]
  %d0 = all_reduce(%d) {axes = ["dp", "tp"], combiner = "add", order = "tree"} : f64[3,2]
  %d1 = all_reduce(%d) {axes = ["tp", "dp"], combiner = "add", order = "ring"} : f64[3,2]
  %e0 = add(%d1, %d0) : f64[3,2]
  %k0 = all_reduce(%k) {axes = ["dp", "tp"], combiner = "min", order = "ring"} : i32[3]
  %q0 = all_gather(%x) {axes = ["tp"], dim = 1} : f32[2,6]
  %q1 = reduce_scatter(%q0) {axes = ["tp"], dim = 1, combiner = "max", order = "tree"} : f32[2,3]
  %q2 = sub(%q1, %x) : f32[2,3]
  return %r0, %r1, %r2, %r3, %r4, %r5, %y1, %y2, %c0, %c1, %c2, %c3, %g0, %t0, %t1, %p0, %p1,
    %p2, %i0, %i1, %i2, %l0, %b0, %b1, %b2, %d0, %e0, %k0, %q2
}
"""

# A 1-D mesh of 2: every collective, an i32 sum that wraps round, a rank-order sum long enough
# (400 kB) for the chain to pass it on in two pieces.
PAIR = """mesh @pair = {x = 2}

func @main(
    %a: f32[2,5] {sharding = [["x"], []]},
    %v: f32[5],
    %k: i32[3] {sharding = [["x"]]},
    %w: f32[100003] {sharding = [["x"]]}
) -> (
    f32[2,5], f32[2,5], f32[5], f32[1,5], f32[2,10], f32[1,10], f32[2,5], i32[3], i32[3],
    f32[100003]
) {
  mesh = "pair",
  out_shardings = [
    [["x"], []], [["x"], []], [[]], [["x"], []], [["x"], []], [["x"], []], [["x"], []], [["x"]],
    [["x"]], [[]]
  ]
} {
  %a0 = all_reduce(%a) {axes = ["x"], combiner = "add", order = "rank"} : f32[2,5]
  %a1 = all_reduce(%a) {axes = ["x"], combiner = "max", order = "tree"} : f32[2,5]
  %v0 = all_reduce(%v) {axes = ["x"], combiner = "min", order = "ring"} : f32[5]
  %rs = reduce_scatter(%a) {axes = ["x"], dim = 0, combiner = "add", order = "ring"} : f32[1,5]
  %g = all_gather(%a) {axes = ["x"], dim = 1} : f32[2,10]
  %t = all_to_all(%a) {axes = ["x"], split_dim = 0, concat_dim = 1} : f32[1,10]
  %p = collective_permute(%a) {axes = ["x"], pairs = [[0, 1], [1, 0]]} : f32[2,5]
  %k0 = all_reduce(%k) {axes = ["x"], combiner = "add", order = "ring"} : i32[3]
  %k1 = all_reduce(%k) {axes = ["x"], combiner = "add", order = "rank"} : i32[3]
  %w0 = all_reduce(%w) {axes = ["x"], combiner = "add", order = "rank"} : f32[100003]
  return %a0, %a1, %v0, %rs, %g, %t, %p, %k0, %k1, %w0
}
"""

# A 1-D mesh of 3: the tree of 3 members is ((v0, v1), v2); ring chunks of 7 elements are
# 3, 3 and 1; bf16 and i1 values moved (not folded).
TRIPLE = """mesh @t = {x = 3}

func @main(
    %a: f32[7] {sharding = [["x"]]},
    %z: f32[6,2] {sharding = [["x"], []]},
    %h: bf16[2,2] {sharding = [["x"], []]},
    %q: i1[3]
) -> (
    f32[7], f32[7], f32[7], f32[2,2], f32[2,2], f32[18,2], f32[2,6], f32[6,2], bf16[2,6],
    bf16[2,2], i1[3]
) {mesh = "t"} {
  %a0 = all_reduce(%a) {axes = ["x"], combiner = "add", order = "tree"} : f32[7]
  %a1 = all_reduce(%a) {axes = ["x"], combiner = "add", order = "ring"} : f32[7]
  %a2 = all_reduce(%a) {axes = ["x"], combiner = "add", order = "rank"} : f32[7]
  %c0 = reduce_scatter(%z) {axes = ["x"], dim = 0, combiner = "add", order = "ring"} : f32[2,2]
  %c1 = reduce_scatter(%z) {axes = ["x"], dim = 0, combiner = "max", order = "tree"} : f32[2,2]
  %g = all_gather(%z) {axes = ["x"], dim = 0} : f32[18,2]
  %t = all_to_all(%z) {axes = ["x"], split_dim = 0, concat_dim = 1} : f32[2,6]
  %p = collective_permute(%z) {axes = ["x"], pairs = [[0, 2], [2, 1]]} : f32[6,2]
  %hg = all_gather(%h) {axes = ["x"], dim = 1} : bf16[2,6]
  %hp = collective_permute(%h) {axes = ["x"], pairs = [[1, 0], [2, 2]]} : bf16[2,2]
  %qp = collective_permute(%q) {axes = ["x"], pairs = [[0, 1]]} : i1[3]
  return %a0, %a1, %a2, %c0, %c1, %g, %t, %p, %hg, %hp, %qp
}
"""

PLAIN = """func @main(%x: f32[4]) -> f32[4] {
  %y = add(%x, %x) : f32[4]
  return %y
}
"""

SPECIAL = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, 1e-45, -1.0, 3e38, -3e38])


def special_inputs(module, seed: int) -> dict[str, np.ndarray]:
    """Global inputs with NaN, signed zeros, infinities, a subnormal and values whose sum
    overflows (seed 2: only zeros of both signs and NaN, so max and min meet ties); integers
    over their whole range, so sums wrap round."""
    rng = np.random.default_rng(seed)
    pool = SPECIAL if seed != 2 else np.array([-0.0, 0.0, -0.0, 0.0, np.nan])
    out = {}
    for p in global_function(module, module.entry).params:
        dtype, shape = p.type.dtype, p.type.shape
        if dtype.is_float:
            x = rng.uniform(-2, 2, shape).astype(dtype.np)
            mask = rng.random(shape) < (0.4 if seed != 2 else 1.0)
            x[mask] = rng.choice(pool, size=int(mask.sum())).astype(dtype.np)
        elif dtype.is_bool:
            x = rng.integers(0, 2, size=shape).astype(bool)
        else:
            info = np.iinfo(dtype.np)
            x = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype.np)
        out[p.name] = x
    return out


def assert_same_as_simulation(module, inputs, got) -> None:
    want = run_spmd(module, inputs)
    for r, (mine, theirs) in enumerate(zip(got.per_rank, want.per_rank, strict=True)):
        for k, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            assert bit_equal(a, b), f"rank {r}, result {k}: {describe_difference(a, b)}"
    for k, (a, b) in enumerate(zip(got.outputs, want.outputs, strict=True)):
        assert bit_equal(a, b), f"output {k}: {describe_difference(a, b)}"
    assert got.disagreements == want.disagreements


def collective_bytes(report: dict, result: str) -> int:
    return next(s["bytes_sent"] for s in report["steps"] if s.get("result") == result)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_mlp_dp_tp_on_four_ranks(seed: int) -> None:
    module = parse(MLP, "mlp.gdv")
    inputs = random_inputs(global_function(module, module.entry), seed)
    got = run_mpi(module, inputs, 4, timeout=120)
    assert_same_as_simulation(module, inputs, got)
    # The rank-order chain over 2 members: member 0 sends its f32[4,4] down the chain, member 1
    # sends the sum back: 64 bytes each.
    assert [r["bytes_sent"] for r in got.reports] == [64, 64, 64, 64]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_collective_and_order_on_a_2x2_mesh(seed: int) -> None:
    module = parse(EVERY, "every.gdv")
    inputs = special_inputs(module, seed)
    got = run_mpi(module, inputs, 4, timeout=120)
    assert_same_as_simulation(module, inputs, got)
    results = dict(zip(module.entry.returns, got.per_rank[0], strict=True))
    # The inputs reach the cases the comparison is for: NaN and -0.0 results of max and min,
    # and integer sums that wrapped round.
    floats = np.concatenate([results[n].ravel() for n in ("r3", "r4", "r5", "y1")])
    assert np.isnan(floats).any()
    if seed == 2:
        zeros = floats[floats == 0]
        assert np.signbit(zeros).any() and (~np.signbit(zeros)).any()
    # %i is i32[4,3] split by rows over "data": the group of all four ranks sums each row
    # block twice.
    exact = 2 * (inputs["i"][0:2].astype(np.int64) + inputs["i"][2:4].astype(np.int64))
    assert not np.array_equal(results["i0"].astype(np.int64), exact), "no i32 sum wrapped"
    # Bytes: all_gather over 2 members of f32[4,6] sends 96 bytes; all_to_all over 4 keeps a
    # quarter and sends 72; the ring over 4 of 6 f32 (chunks of 2, 2, 2, 0) sends each chunk 3
    # times in each phase: 2 * 3 * 24 = 144 bytes from all ranks together.
    assert all(collective_bytes(r, "g0") == 96 for r in got.reports)
    assert all(collective_bytes(r, "t0") == 72 for r in got.reports)
    assert sum(collective_bytes(r, "r2") for r in got.reports) == 144


@pytest.mark.slow
def test_a_1d_mesh_of_two() -> None:
    module = parse(PAIR, "pair.gdv")
    for seed in (0, 2):
        inputs = special_inputs(module, seed)
        got = run_mpi(module, inputs, 2, timeout=120)
        assert_same_as_simulation(module, inputs, got)
    # an i32 sum that wraps: 2**31 - 1 + 1 on the two members
    inputs = special_inputs(module, 0)
    inputs["k"] = np.array([2**31 - 1, -(2**31), 5, 1, -1, 7], dtype=np.int32)
    got = run_mpi(module, inputs, 2, timeout=120)
    want = run_spmd(module, inputs)
    for mine, theirs in zip(got.per_rank, want.per_rank, strict=True):
        np.testing.assert_allclose(mine[0], theirs[0], rtol=1e-5, atol=1e-6)
    assert not got.disagreements
    assert got.outputs[7][0] == -(2**31)  # (2**31 - 1) + 1 wrapped
    assert got.outputs[8][0] == -(2**31)


@pytest.mark.slow
def test_three_members_tree_and_ring() -> None:
    module = parse(TRIPLE, "triple.gdv")
    inputs = special_inputs(module, 1)
    # Member values where the orders give different sums: rank ((v0 + v1) + v2) = 1.0 and
    # ring (for the first chunk: (v1 + v2) + v0) = 0.0, the tree being the rank order for 3.
    inputs["a"] = np.tile(np.float32([1e8, -1e8, 1.0]), (7, 1)).T.reshape(-1).copy()
    got = run_mpi(module, inputs, 3, timeout=120)
    assert_same_as_simulation(module, inputs, got)
    assert got.outputs[2][0] == 1.0 and got.outputs[1][0] == 0.0


# carry_reduce (the exact `carry` order) on a 2 x 2 mesh: groups of 2 and 4 (axes in both
# orders), every combiner, f32 with specials, an i32 sum that wraps, f64 over two reduced dims,
# and an empty reduction (the identity, no message).
CARRY = """mesh @m = {dp = 2, tp = 2}

func @main(
    %x: f32[3,5] {sharding = [[], ["tp"]]},
    %z: f32[2,6] {sharding = [["dp", "tp"], []]},
    %w: f32[2,6] {sharding = [["tp", "dp"], []]},
    %i: i32[2,3] {sharding = [["tp"], []]},
    %d: f64[2,2,3] {sharding = [["tp"], [], []]},
    %e: f32[0,3] {sharding = [["dp"], []]}
) -> (f32[3], f32[3], f32[6], f32[6], i32[3], f64[3], f32[3], f32[3]) {mesh = "m"} {
  %a0 = carry_reduce(%x) {axes = ["tp"], dims = [1], combiner = "add"} : f32[3]
  %a1 = carry_reduce(%x) {axes = ["tp"], dims = [1], combiner = "max"} : f32[3]
  %a2 = carry_reduce(%z) {axes = ["dp", "tp"], dims = [0], combiner = "add"} : f32[6]
  %a3 = carry_reduce(%w) {axes = ["tp", "dp"], dims = [0], combiner = "min"} : f32[6]
  %a4 = carry_reduce(%i) {axes = ["tp"], dims = [0], combiner = "add"} : i32[3]
  %a5 = carry_reduce(%d) {axes = ["tp"], dims = [1, 0], combiner = "add"} : f64[3]
  %a6 = carry_reduce(%e) {axes = ["dp"], dims = [0], combiner = "add"} : f32[3]
  %a7 = carry_reduce(%e) {axes = ["dp"], dims = [0], combiner = "max"} : f32[3]
  return %a0, %a1, %a2, %a3, %a4, %a5, %a6, %a7
}
"""

# The single-device reductions the carried folds must reproduce bit for bit.
CARRY_GLOBAL = """func @main(%x: f32[3,10], %z: f32[8,6], %w: f32[8,6], %i: i32[4,3],
           %d: f64[4,2,3], %e: f32[0,3])
    -> (f32[3], f32[3], f32[6], f32[6], i32[3], f64[3], f32[3], f32[3]) {
  %a0 = reduce_sum(%x) {axes = [1]} : f32[3]
  %a1 = reduce_max(%x) {axes = [1]} : f32[3]
  %a2 = reduce_sum(%z) {axes = [0]} : f32[6]
  %a3 = reduce_min(%w) {axes = [0]} : f32[6]
  %a4 = reduce_sum(%i) {axes = [0]} : i32[3]
  %a5 = reduce_sum(%d) {axes = [0, 1]} : f64[3]
  %a6 = reduce_sum(%e) {axes = [0]} : f32[3]
  %a7 = reduce_max(%e) {axes = [0]} : f32[3]
  return %a0, %a1, %a2, %a3, %a4, %a5, %a6, %a7
}
"""


@pytest.mark.slow
def test_carry_reduce_is_the_single_device_fold_on_four_ranks() -> None:
    from gdv.backends import reference

    module = parse(CARRY, "carry.gdv")
    plain = parse(CARRY_GLOBAL, "carry_global.gdv")
    for seed in (0, 2):
        inputs = special_inputs(module, seed)
        if seed == 0:
            # Values whose sum depends on the order: left fold 1e8 - 1e8 + 1 + ... = 3.0
            inputs["z"][:, 0] = np.float32([1e8, 1.0, -1e8, 1.0, 1.0, 1.0, 1.0, 1.0])
        got = run_mpi(module, inputs, 4, timeout=120)
        assert_same_as_simulation(module, inputs, got)
        want = reference.run(plain, inputs)
        for k, (a, b) in enumerate(zip(got.outputs, want, strict=True)):
            assert bit_equal(a, b), f"output {k}: {describe_difference(a, b)}"
        assert not got.disagreements
        if seed == 0:
            assert got.outputs[2][0] == np.float32(5.0)  # (1e8 + 1) - 1e8 + 5 ones, in order
    # Bytes: over 2 members of f32[3], member 0 passes its accumulator on and member 1 sends
    # the result back (12 bytes each); over 4 members of f32[6], members 0..2 pass it on and
    # member 3 sends the result to the 3 others; the empty fold sends nothing.
    assert [collective_bytes(r, "a0") for r in got.reports] == [12, 12, 12, 12]
    assert sorted(collective_bytes(r, "a2") for r in got.reports) == [24, 24, 24, 72]
    assert all(collective_bytes(r, "a6") == 0 for r in got.reports)


# --- failures: named, within the timeout ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("fault, verb", [("exit", "died"), ("hang", "hung"), ("raise", "failed")])
def test_a_rank_that_dies_or_hangs_is_named(monkeypatch, fault: str, verb: str) -> None:
    module = parse(PAIR, "pair.gdv")
    inputs = special_inputs(module, 0)
    monkeypatch.setenv("GDV_MPI_FAULT", f"{fault}:1")
    timeout = 10.0
    start = time.monotonic()
    with pytest.raises(MpiError) as e:
        run_mpi(module, inputs, 2, timeout=timeout)
    elapsed = time.monotonic() - start
    text = str(e.value)
    assert text.startswith("gdv: error: ")
    if fault == "raise":
        assert "rank 1 failed: RuntimeError: GDV_MPI_FAULT=raise:1: a failure on purpose" in text
        return
    # rank 1 stopped where it would enter the first collective; rank 0 waited in it
    assert f"rank 1 {verb} before step 0 (%a0 = all_reduce at pair.gdv:18:3)" in text, text
    assert "rank 0 waited in step 0" in text or "rank 0 stopped in step 0" in text, text
    if fault == "hang":
        assert f"did not finish within {timeout:g} s" in text
    assert elapsed < timeout + 15, elapsed


# --- the command line ----------------------------------------------------------------------


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.slow
def test_gdv_run_ranks_writes_the_simulations_outputs(tmp_path, capsys) -> None:
    path = _write(tmp_path, "mlp.gdv", MLP)
    out, report = tmp_path / "out.npz", tmp_path / "report.json"
    argv = ["run", path, "--ranks", "4", "--seed", "3", "--output", str(out)]
    assert main([*argv, "--report", str(report), "--timeout", "120"]) == 0
    assert "ran on 4 MPI ranks" in capsys.readouterr().err
    ranks = json.loads(report.read_text())["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert [r["steps"][1]["bytes_sent"] for r in ranks] == [64, 64, 64, 64]
    module = parse(MLP, path)
    want = run_spmd(module, random_inputs(global_function(module, module.entry), 3))
    with np.load(out) as data:
        assert bit_equal(data["out0"], want.outputs[0])
        assert data["out0"].shape == (8, 4)  # the global result


def test_gdv_run_without_ranks_simulates(tmp_path, capsys) -> None:
    path = _write(tmp_path, "mlp.gdv", MLP)
    given = tmp_path / "in.npz"
    x = np.random.default_rng(5).uniform(-1, 1, (8, 16)).astype(np.float32)
    np.savez(given, x=x)
    out = tmp_path / "out.npz"
    assert main(["run", path, "--inputs", str(given), "--output", str(out)]) == 0
    module = parse(MLP, path)
    inputs = random_inputs(global_function(module, module.entry), 0)
    inputs["x"] = x
    want = run_spmd(module, inputs)
    with np.load(out) as data:
        assert bit_equal(data["out0"], want.outputs[0])
    # printed: the global result type
    assert main(["run", path]) == 0
    assert "out0: f32[8,4]" in capsys.readouterr().out


@pytest.mark.parametrize(
    "program, argv, message",
    [
        (MLP, ["--ranks", "2"], "1:1: error: --ranks 2, but mesh @m (data = 2 x model = 2) has 4"),
        (PLAIN, ["--ranks", "2"], "1:6: error: --ranks runs an SPMD function under MPI, but @main"),
        (MLP, ["--ranks", "4", "--target", "triton"], "error: --ranks runs the local ops"),
        (MLP, ["--target", "c"], "error: @main is an SPMD function"),
        (MLP, ["--ranks", "4", "--ideal"], "error: --ideal runs on the reference target only"),
        (MLP, ["--report", "r.json"], "error: --report needs --ranks"),
        (MLP, ["--ranks", "4", "--timeout", "0"], "error: --timeout must be positive"),
    ],
)
def test_bad_runs_are_input_errors(tmp_path, capsys, program, argv, message) -> None:
    path = _write(tmp_path, "p.gdv", program)
    assert main(["run", path, *argv]) == 3
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err


def test_a_wrong_input_shape_is_positioned(tmp_path, capsys) -> None:
    path = _write(tmp_path, "mlp.gdv", MLP)
    given = tmp_path / "in.npz"
    np.savez(given, x=np.zeros((4, 16), np.float32))  # the local shape, not the global one
    assert main(["run", path, "--ranks", "4", "--inputs", str(given)]) == 3
    err = capsys.readouterr().err
    assert "error:" in err and "f32[8,16]" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("missing", ["mpiexec", "mpicc", "mpi4py"])
def test_missing_tools_say_what_to_install(tmp_path, capsys, monkeypatch, missing) -> None:
    real_find, real_installed = tools.find_tool, tools.installed
    monkeypatch.setattr(tools, "find_tool", lambda n: None if n == missing else real_find(n))
    monkeypatch.setattr(tools, "installed", lambda n: n != missing and real_installed(n))
    module = parse(MLP, "mlp.gdv")
    inputs = random_inputs(global_function(module, module.entry), 0)
    with pytest.raises(MpiUnavailable, match=rf"{missing}.*pip install -e '\.\[dist\]'"):
        run_mpi(module, inputs, 4)
    path = _write(tmp_path, "mlp.gdv", MLP)
    assert main(["run", path, "--ranks", "4"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("gdv: error: ") and missing in err and "Traceback" not in err


@pytest.mark.slow
def test_a_partitioned_attention_block_on_two_ranks() -> None:
    """`gdv partition`'s output (all_reduce and shard_slice) runs under MPI as the simulation
    of every rank does: equal up to the last bits of the C target's transcendentals (the
    softmax's exp, the layer_norm's rsqrt), which the reference evaluates in f64."""
    from pathlib import Path

    from gdv.ir.verifier import verify
    from gdv.passes.partition import parse_mesh, parse_shard, partition

    root = Path(__file__).resolve().parents[3]
    att = verify(parse((root / "examples" / "attention.gdv").read_text(), "attention.gdv"))
    shards = dict(
        parse_shard(s) for s in ("wq=[-,model]", "wk=[-,model]", "wv=[-,model]", "wo=[model,-]")
    )
    module = partition(att, parse_mesh("model=2"), shards).module
    assert any(op.name == "shard_slice" for op in module.entry.ops)
    inputs = random_inputs(global_function(module, module.entry), 0)
    got = run_mpi(module, inputs, 2, timeout=120)
    want = run_spmd(module, inputs)
    for mine, theirs in zip(got.per_rank, want.per_rank, strict=True):
        np.testing.assert_allclose(mine[0], theirs[0], rtol=1e-5, atol=1e-6)
    assert not got.disagreements


# The integer dtypes added in gdv 0.6 (issue 19): every combiner over two members, in the
# runtime's own folds (runtime.c's FOLD_INT on the type of each width); max and min compare
# unsigned for u8 .. u64.
NEW_INTS = ("i16", "u8", "u16", "u32", "u64")
INTS = (
    "mesh @pair = {x = 2}\n\nfunc @main("
    + ", ".join(f'%{d}: {d}[3] {{sharding = [["x"]]}}' for d in NEW_INTS)
    + ") -> ("
    + ", ".join(f"{d}[3], {d}[3], {d}[3]" for d in NEW_INTS)
    + ') {mesh = "pair"} {\n'
    + "".join(
        f'  %{d}{c} = all_reduce(%{d}) {{axes = ["x"], combiner = "{c}", order = "rank"}} '
        f": {d}[3]\n"
        for d in NEW_INTS
        for c in ("add", "max", "min")
    )
    + "  return "
    + ", ".join(f"%{d}{c}" for d in NEW_INTS for c in ("add", "max", "min"))
    + "\n}\n"
)


@pytest.mark.slow
def test_new_integer_dtypes_fold_on_two_ranks() -> None:
    module = parse(INTS, "ints.gdv")
    inputs = {}
    for d in NEW_INTS:  # member 0 holds [max, min, 1], member 1 [1, max, min]
        info = np.iinfo(np.dtype({"i16": "int16"}.get(d, d.replace("u", "uint"))))
        inputs[d] = np.array([info.max, info.min, 1, 1, info.max, info.min], dtype=info.dtype)
    got = run_mpi(module, inputs, 2, timeout=120)
    assert_same_as_simulation(module, inputs, got)
    results = dict(zip(module.entry.returns, got.per_rank[0], strict=True))
    for d in NEW_INTS:
        x = inputs[d]
        info = np.iinfo(x.dtype)
        np.testing.assert_array_equal(results[f"{d}add"], x[:3] + x[3:])  # numpy wraps too
        assert results[f"{d}add"][0] == info.min  # max + 1 wrapped round
        np.testing.assert_array_equal(results[f"{d}max"], [info.max, info.max, 1])
        np.testing.assert_array_equal(results[f"{d}min"], [1, info.min, info.min])
