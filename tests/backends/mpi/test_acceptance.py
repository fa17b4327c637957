"""Issue 17's acceptance on 4 MPI ranks, in small (`benchmarks/spmd_acceptance.py` runs the
whole matrix, MiniLM included, on 50 seeds): with the local ops on the reference backend
(`--target reference`) every rank's results are bit-identical to the simulation of the same
partitioned program, transcendentals included; a plan that keeps every fold order (`carry`)
run with its segments compiled for C is bit-identical to the single-device C program."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mpi4py")

from gdv.backends.mpi import run_mpi_many  # noqa: E402
from gdv.backends.reference import random_inputs  # noqa: E402
from gdv.backends.reference.compare import bit_equal  # noqa: E402
from gdv.backends.reference.spmd import run_spmd  # noqa: E402
from gdv.cli import main  # noqa: E402
from gdv.driver import CompileOptions, compile_module  # noqa: E402
from gdv.ir.parser import parse  # noqa: E402
from gdv.ir.printer import print_module  # noqa: E402
from gdv.ir.verifier import verify  # noqa: E402
from gdv.passes.partition import parse_mesh, parse_shard, partition, prove_steps  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]
BLOCK_DP_TP = ("x=[data,-]", "wq=[-,model]", "wk=[-,model]", "wv=[-,model]", "wo=[model,-]")


def _plan(name: str, shards, order: str = "rank"):
    module = verify(parse((ROOT / "examples" / name).read_text(), name))
    part = partition(module, parse_mesh("data=2,model=2"), dict(map(parse_shard, shards)), order)
    assert prove_steps(part, 30.0) == "proved"
    return module, part.module


@pytest.mark.parametrize(
    ("name", "shards"),
    [
        ("mlp.gdv", ("x=[data,-]", "w1=[-,model]", "w2=[model,-]")),
        ("attention.gdv", BLOCK_DP_TP),
    ],
)
def test_ranks_on_the_reference_backend_are_the_simulation_bit_for_bit(name, shards) -> None:
    module, spmd = _plan(name, shards)
    feeds = [random_inputs(module.entry, s) for s in range(3)]
    runs = run_mpi_many(spmd, feeds, 4, timeout=600, target="reference")
    for feed, run in zip(feeds, runs, strict=True):
        sim = run_spmd(spmd, feed)
        for mine, theirs in zip(run.per_rank, sim.per_rank, strict=True):
            assert all(bit_equal(a, b) for a, b in zip(mine, theirs, strict=True))
        assert run.disagreements == sim.disagreements == []


def test_a_carry_plan_on_c_is_the_single_device_program_bit_for_bit() -> None:
    module, spmd = _plan("attention.gdv", BLOCK_DP_TP, order="carry")
    single = compile_module(print_module(module), CompileOptions(target="c"))
    assert single.verdict == "proved"
    feeds = [random_inputs(module.entry, s) for s in range(3)]
    for feed, run in zip(feeds, run_mpi_many(spmd, feeds, 4, timeout=600), strict=True):
        assert bit_equal(run.outputs[0], single(**feed)[0])


def test_gdv_run_ranks_target_reference(tmp_path, capsys) -> None:
    _, spmd = _plan("mlp.gdv", ("x=[data,-]", "w1=[-,model]", "w2=[model,-]"))
    path = tmp_path / "spmd.gdv"
    path.write_text(print_module(spmd))
    out = tmp_path / "out.npz"
    assert (
        main(["run", str(path), "--ranks", "4", "--target", "reference", "--output", str(out)]) == 0
    )
    assert main(["run", str(path), "--output", str(tmp_path / "sim.npz")]) == 0
    import numpy as np

    with np.load(out) as a, np.load(tmp_path / "sim.npz") as b:
        assert all(bit_equal(a[k], b[k]) for k in b.files)
