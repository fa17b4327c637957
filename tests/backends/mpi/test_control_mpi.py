"""A partitioned program with control flow under MPI (IR_SPEC.md section 9): `gdv partition`
gathers the operands of an `if` and a `while` whole, and `gdv run --ranks 2` runs the SPMD
program on two MPI ranks, each rank running the control ops on full values; its outputs are
the reference run of the global program, bit for bit.

Both with the local ops compiled for C (each function a control op names a C function of the
segment: backends/c/control.py) and on the reference backend (`--target reference`).
"""

from __future__ import annotations

import numpy as np
import pytest

from gdv.backends.reference.compare import bit_equal, describe_difference
from gdv.cli import main

pytest.importorskip("mpi4py")

# An if and a while (its state and its trip counter) on a value that x's sharding splits, a
# collective between them and the return: the partitioned program has segments with control
# ops on either side of collectives.
SOURCE = """func @main(%c: i1[], %x: f32[4,6], %n: i32[]) -> (f32[4,6], i32[], f32[4,6]) {
  %e = mul(%x, %x) : f32[4,6]
  %r = if(%c, %e) {then = "dbl", else = "neg", result = 0} : f32[4,6]
  %k = while(%r, %n) {cond = "pos", body = "step", max_trips = 8, result = 1} : i32[]
  %w = while(%r, %n) {cond = "pos", body = "step", max_trips = 8, result = 0} : f32[4,6]
  %o = add(%w, %e) : f32[4,6]
  return %r, %k, %o
}
func @dbl(%a: f32[4,6]) -> f32[4,6] {
  %b = add(%a, %a) : f32[4,6]
  return %b
}
func @neg(%a: f32[4,6]) -> f32[4,6] {
  %b = neg(%a) : f32[4,6]
  return %b
}
func @pos(%a: f32[4,6], %n: i32[]) -> i1[] {
  %z = constant() {value = 0} : i32[]
  %p = cmp(%n, %z) {dir = "gt"} : i1[]
  return %p
}
func @step(%a: f32[4,6], %n: i32[]) -> (f32[4,6], i32[]) {
  %one = constant() {value = 1} : i32[]
  %m = sub(%n, %one) : i32[]
  %h = mul(%a, %a) : f32[4,6]
  return %h, %m
}
"""


@pytest.fixture
def programs(tmp_path):
    """The global program, its partitioned form (proved) and two input sets."""
    src, spmd = tmp_path / "cf.gdv", tmp_path / "cf.spmd.gdv"
    src.write_text(SOURCE)
    argv = ["partition", "--mesh", "data=2", "--shard", "x=[data,-]", str(src), "-o", str(spmd)]
    assert main(argv) == 0
    text = spmd.read_text()
    assert 'all_gather(%e) {axes = ["data"], dim = 0} : f32[4,6]' in text
    rng = np.random.default_rng(7)
    sets = []
    for k, (c, n) in enumerate([(True, 3), (False, 20)]):  # 3 trips; the limit of 8
        path = tmp_path / f"in{k}.npz"
        x = rng.uniform(-1, 1, (4, 6)).astype(np.float32)
        np.savez(path, c=np.array(c), x=x, n=np.array(n, np.int32))
        sets.append(path)
    return src, spmd, sets


def _outputs(path) -> list[np.ndarray]:
    with np.load(path) as data:
        return [data[f"out{k}"] for k in range(len(data.files))]


def _run_and_compare(tmp_path, capsys, programs, target: list[str]) -> None:
    src, spmd, sets = programs
    for k, inputs in enumerate(sets):
        want, got = tmp_path / f"want{k}.npz", tmp_path / f"got{k}.npz"
        assert main(["run", str(src), "--inputs", str(inputs), "--output", str(want)]) == 0
        argv = ["run", str(spmd), "--ranks", "2", "--inputs", str(inputs), "--output", str(got)]
        code = main([*argv, *target, "--timeout", "120"])
        err = capsys.readouterr().err
        assert code == 0, err
        assert "ran on 2 MPI ranks" in err
        mine, theirs = _outputs(got), _outputs(want)
        assert len(mine) == len(theirs) == 3
        for j, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            assert bit_equal(a, b), f"inputs {k}, out{j}: {describe_difference(a, b)}"


@pytest.mark.slow
def test_gdv_run_ranks_runs_control_flow_compiled_for_c(tmp_path, capsys, programs) -> None:
    _run_and_compare(tmp_path, capsys, programs, [])


@pytest.mark.slow
def test_gdv_run_ranks_runs_control_flow_on_the_reference_backend(
    tmp_path, capsys, programs
) -> None:
    _run_and_compare(tmp_path, capsys, programs, ["--target", "reference"])
