"""Sharding propagation and SPMD partitioning (issue 17, items 2 and 3): the shardings chosen
and why, the collectives emitted, every op's claim proved, the whole SPMD program against the
global one (fp where no sum is split, real where one is), seeded partitioner bugs caught by the
claims, and `gdv partition`'s exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gdv.passes.partition as partition_module
from gdv.backends import reference
from gdv.backends.reference.compare import bit_equal
from gdv.backends.reference.spmd import run_spmd
from gdv.ir.diagnostics import IRError
from gdv.ir.parser import parse
from gdv.ir.verifier import verify
from gdv.passes.partition import parse_mesh, parse_shard, partition, prove_steps
from gdv.validate.bounds import analyze
from gdv.validate.spmd import check_spmd_equivalence

ROOT = Path(__file__).resolve().parents[2]


def example(name: str):
    return verify(parse((ROOT / "examples" / name).read_text(), name))


def shards(*texts: str) -> dict:
    return dict(parse_shard(t) for t in texts)


def inputs(module, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {
        p.name: rng.uniform(*(p.range or (-1, 1)), size=p.type.shape).astype(np.float32)
        for p in module.entry.params
    }


MEGATRON = ("x=[data,-]", "w1=[-,model]", "w2=[model,-]")


def test_the_mlp_under_dp_x_tp_is_megatrons_split() -> None:
    mlp = example("mlp.gdv")
    part = partition(mlp, parse_mesh("data=2,model=2"), shards(*MEGATRON))
    verify(part.module)
    fn = part.module.entry
    by_name = {p.name: p for p in fn.params}
    # The bias of the column split follows its product (propagated, not annotated) ...
    assert by_name["b1"].attrs["sharding"] == [["model"]]
    assert "sharding" not in by_name["b2"].attrs
    why = {c.value: c.reason for c in part.choices}
    assert why["w1"] == "annotated" and "broadcast" in why["b1"]
    # ... and one all_reduce finishes the row split's sum before the second bias.
    names = [op.name for op in fn.ops]
    assert names.count("all_reduce") == 1 and "all_gather" not in names
    k = names.index("all_reduce")
    ar = fn.ops[k]
    # It sums the second product over `model`, right after it, and the bias add reads it.
    assert fn.ops[k - 1].name == "matmul" and ar.operands == [fn.ops[k - 1].result]
    assert ar.attrs == {"axes": ["model"], "combiner": "add", "order": "rank"}
    consumers = [o for o in fn.ops if ar.result in o.operands]
    assert [o.name for o in consumers] == ["add"] and fn.returns == [consumers[0].result]
    # Per-rank weights: half of w1 and of w2 (1/TP), the whole of b2.
    g = {p.name: p.type.num_elements for p in mlp.entry.params}
    assert by_name["w1"].type.num_elements * 2 == g["w1"]
    assert by_name["w2"].type.num_elements * 2 == g["w2"]
    assert prove_steps(part) == "proved"
    assert [s.theory for s in part.steps].count("real") == 1  # the second product only
    assert check_spmd_equivalence(mlp, part.module, "real", 20).verdict == "equivalent"
    assert check_spmd_equivalence(mlp, part.module, "fp", 20).verdict == "not-equivalent"
    bound = analyze(part.module).outputs[0].abs
    for seed in range(50):
        x = inputs(mlp, seed)
        want = reference.run(mlp, x)[0]
        sim = run_spmd(part.module, x)
        assert not sim.disagreements
        assert np.max(np.abs(sim.outputs[0].astype(np.float64) - want)) <= 2 * bound


def test_data_parallelism_keeps_every_fold_and_is_bit_exact() -> None:
    mlp = example("mlp.gdv")
    part = partition(mlp, parse_mesh("data=4"), shards("x=[data,-]"))
    assert not any(op.name in ("all_reduce", "all_gather") for op in part.module.entry.ops)
    assert prove_steps(part) == "proved" and {s.theory for s in part.steps} == {"fp"}
    assert check_spmd_equivalence(mlp, part.module, "fp", 20).verdict == "equivalent"
    for seed in range(50):
        x = inputs(mlp, seed)
        assert bit_equal(run_spmd(part.module, x).outputs[0], reference.run(mlp, x)[0])


def test_attention_heads_split_over_model_is_proved() -> None:
    att = example("attention.gdv")
    part = partition(
        att,
        parse_mesh("model=2"),
        shards("wq=[-,model]", "wk=[-,model]", "wv=[-,model]", "wo=[model,-]"),
    )
    names = [op.name for op in part.module.entry.ops]
    assert names.count("all_reduce") == 1 and "all_gather" not in names
    assert prove_steps(part) == "proved"
    x = inputs(att, 0)
    got = run_spmd(part.module, x).outputs[0]
    assert np.allclose(got, reference.run(att, x)[0], atol=1e-4)


@pytest.mark.parametrize("bug", ["dropped all_reduce", "all_gather on the wrong dim"])
def test_a_seeded_partitioner_bug_is_refuted_by_its_claim(bug: str, monkeypatch) -> None:
    real_emit = partition_module._Builder.emit

    def emit(self, name, operand, t, attrs, out):
        if bug == "dropped all_reduce" and name == "all_reduce":
            return operand
        if bug == "all_gather on the wrong dim" and name == "all_gather":
            # Gather the right amount of data along the other dim, then reshape it back.
            name2 = real_emit(
                self, "transpose", operand, t, {"perm": [1, 0]}, t.with_shape(t.shape[::-1])
            )
            g = real_emit(
                self,
                "all_gather",
                name2,
                t,
                {**attrs, "dim": 1 - attrs["dim"]},
                out.with_shape(out.shape[::-1]),
            )
            return real_emit(self, "reshape", g, t, {}, out)
        return real_emit(self, name, operand, t, attrs, out)

    monkeypatch.setattr(partition_module._Builder, "emit", emit)
    mlp = example("mlp.gdv")
    if bug == "dropped all_reduce":
        part = partition(mlp, parse_mesh("data=2,model=2"), shards(*MEGATRON))
    else:  # a product split by columns, gathered back whole for the softmax over its row
        text = """func @main(%x: f32[4,8], %w: f32[8,6]) -> f32[4,6] {
  %m = matmul(%x, %w) : f32[4,6]
  %s = softmax(%m) {axis = 1} : f32[4,6]
  return %s
}
"""
        part = partition(verify(parse(text)), parse_mesh("model=2"), shards("w=[-,model]"))
        assert any(op.name == "all_gather" for op in part.module.entry.ops)
    assert prove_steps(part, timeout=5) == "refuted"
    assert any(s.verdict == "refuted" for s in part.steps)


def test_bad_annotations_are_input_errors() -> None:
    mlp = example("mlp.gdv")
    with pytest.raises(IRError, match="no axis 'pipe'"):
        partition(mlp, parse_mesh("data=2"), shards("x=[pipe,-]"))
    with pytest.raises(IRError, match="not a multiple of 3 ranks"):
        partition(mlp, parse_mesh("data=3"), shards("x=[data,-]"))
    with pytest.raises(IRError, match="names %q, which is no parameter"):
        partition(mlp, parse_mesh("data=2"), shards("q=[data]"))
    with pytest.raises(IRError, match="AXIS=SIZE"):
        parse_mesh("data:2")
    with pytest.raises(IRError, match=r"NAME=\[AXES"):
        parse_shard("x=data")


def test_gdv_partition_writes_the_spmd_program_and_exits_by_verdict(tmp_path) -> None:
    out = tmp_path / "mlp_tp.gdv"
    cmd = [
        sys.executable,
        "-m",
        "gdv",
        "partition",
        str(ROOT / "examples" / "mlp.gdv"),
        "--mesh",
        "data=2,model=2",
        *[a for s in MEGATRON for a in ("--shard", s)],
        "-o",
        str(out),
    ]
    run = subprocess.run(cmd, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "7 proved" in run.stdout and "verdict proved" in run.stdout
    spmd = verify(parse(out.read_text(), str(out)))
    assert check_spmd_equivalence(example("mlp.gdv"), spmd, "real", 20).verdict == "equivalent"
    bad = subprocess.run(cmd[:7] + ["--shard", "x=[pipe,-]"], capture_output=True, text=True)
    assert bad.returncode == 3 and "no axis 'pipe'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_softmax_over_a_split_dim_gathers_it_first_and_is_proved() -> None:
    text = """func @main(%x: f32[4,8], %w: f32[8,6]) -> f32[4,6] {
  %m = matmul(%x, %w) : f32[4,6]
  %s = softmax(%m) {axis = 1} : f32[4,6]
  return %s
}
"""
    module = verify(parse(text))
    part = partition(module, parse_mesh("model=2"), shards("w=[-,model]"))
    gathers = [op for op in part.module.entry.ops if op.name == "all_gather"]
    assert [g.attrs["dim"] for g in gathers] == [1]
    assert prove_steps(part) == "proved"
    assert check_spmd_equivalence(module, part.module, "fp", 20).verdict == "equivalent"


def test_a_reduce_max_over_a_split_dim_finishes_with_a_max() -> None:
    text = """func @main(%x: f32[4,8]) -> f32[4] {
  %m = reduce_max(%x) {axes = [1]} : f32[4]
  return %m
}
"""
    module = verify(parse(text))
    part = partition(module, parse_mesh("model=2"), shards("x=[-,model]"))
    (ar,) = [op for op in part.module.entry.ops if op.name == "all_reduce"]
    assert ar.attrs["combiner"] == "max"
    assert [s.theory for s in part.steps] == ["fp"]  # max keeps its bits however split
    assert prove_steps(part) == "proved"
    assert check_spmd_equivalence(module, part.module, "fp", 20).verdict == "equivalent"
    # Beyond the unrolled small folds no lemma splits a max fold: unknown, never proved.
    wide = verify(parse(text.replace("f32[4,8]", "f32[4,64]")))
    part = partition(wide, parse_mesh("model=2"), shards("x=[-,model]"))
    assert prove_steps(part, timeout=5) == "unknown"


def test_gdv_compile_refuses_an_spmd_function_and_says_what_runs_it() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "gdv", "compile", str(ROOT / "examples" / "spmd" / "mlp_dp.gdv")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 3 and "Traceback" not in run.stderr
    assert "is an SPMD function" in run.stderr and "--ranks N" in run.stderr


def test_gdv_partition_writes_nothing_when_a_claim_is_refuted(tmp_path, monkeypatch) -> None:
    from gdv.cli import main

    real_emit = partition_module._Builder.emit

    def emit(self, name, operand, t, attrs, out):  # a partitioner that drops the all_reduce
        return operand if name == "all_reduce" else real_emit(self, name, operand, t, attrs, out)

    monkeypatch.setattr(partition_module._Builder, "emit", emit)
    out = tmp_path / "out.gdv"
    argv = [
        "partition",
        str(ROOT / "examples" / "mlp.gdv"),
        "--mesh",
        "model=2",
        "--shard",
        "w1=[-,model]",
        "--shard",
        "w2=[model,-]",
        "-o",
        str(out),
    ]
    assert main(argv) == 1
    assert not out.exists()


# --- the carry order: split reductions that keep their bits --------------------------------

REDUCTIONS = """func @main(%x: f32[4,64] {range = [-1.0, 1.0]}, %y: f32[4,64] {range = [-1.0, 1.0]})
    -> (f32[4], f32[4], f32[4], f32[]) {
  %s = reduce_sum(%x) {axes = [1]} : f32[4]
  %m = reduce_max(%x) {axes = [1]} : f32[4]
  %n = reduce_min(%x) {axes = [1]} : f32[4]
  %t = reduce_sum(%y) {axes = [0, 1]} : f32[]
  return %s, %m, %n, %t
}
"""


def test_carry_folds_a_split_reduction_as_a_chain_bit_for_bit() -> None:
    module = verify(parse(REDUCTIONS))
    mesh = parse_mesh("data=2,model=4")
    part = partition(module, mesh, shards("x=[data,model]", "y=[-,model]"), order="carry")
    fn = verify(part.module).entry
    carried = [op for op in fn.ops if op.name == "carry_reduce"]
    # x's rows are split over data (kept), its reduced dim over model: one chain per reduction.
    assert [op.attrs for op in carried] == [
        {"axes": ["model"], "dims": [1], "combiner": c} for c in ("add", "max", "min")
    ]
    # y is split on its inner reduced dim: the members' blocks are not consecutive in the
    # fold's order, so the reduction is kept whole (gathered first), not carried.
    (gather,) = [op for op in fn.ops if op.name == "all_gather"]
    assert gather.operands == ["y"] and gather.attrs == {"axes": ["model"], "dim": 1}
    assert not any(op.name == "all_reduce" for op in fn.ops)
    # Every claim is bit-exact and proved, the 64-wide max too (unknown under `rank`, where
    # no lemma splits a wide max fold).
    assert {s.theory for s in part.steps} == {"fp"}
    assert prove_steps(part) == "proved"
    assert check_spmd_equivalence(module, part.module, "fp", 20).verdict == "equivalent"
    ranked = partition(module, mesh, shards("x=[data,model]", "y=[-,model]"))
    assert prove_steps(ranked, timeout=2) != "proved"
    # No bound is lost: the partitioned bounds are the global ones.
    assert [o.abs for o in analyze(part.module).outputs] == [o.abs for o in analyze(module).outputs]
    for seed in range(50):
        x = inputs(module, seed)
        sim = run_spmd(part.module, x)
        assert not sim.disagreements
        for got, want in zip(sim.outputs, reference.run(module, x), strict=True):
            assert bit_equal(got, want), seed


def test_carry_keeps_a_product_s_contraction_whole_and_the_mlp_bit_exact() -> None:
    mlp = example("mlp.gdv")
    part = partition(mlp, parse_mesh("data=2,model=2"), shards(*MEGATRON), order="carry")
    names = [op.name for op in part.module.entry.ops]
    # A product's partial sums cannot continue one another's fold: w2's rows and the hidden
    # activations are gathered instead of an all_reduce of partial products.
    assert "all_reduce" not in names and "carry_reduce" not in names
    assert names.count("all_gather") == 2
    assert prove_steps(part) == "proved" and {s.theory for s in part.steps} == {"fp"}
    assert check_spmd_equivalence(mlp, part.module, "fp", 20).verdict == "equivalent"
    for seed in range(50):
        x = inputs(mlp, seed)
        assert bit_equal(run_spmd(part.module, x).outputs[0], reference.run(mlp, x)[0])


def test_gdv_partition_order_carry(tmp_path) -> None:
    src = tmp_path / "r.gdv"
    src.write_text(REDUCTIONS)
    out = tmp_path / "spmd.gdv"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "gdv",
            "partition",
            str(src),
            "--mesh",
            "model=4",
            "--shard",
            "x=[-,model]",
            "--order",
            "carry",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "verdict proved" in run.stdout and "carry_reduce" in out.read_text()


# --- ops that move elements between positions: what each passes through ------------------

POSITIONAL = """func @main(%x: f32[4,6] {range = [-1.0, 1.0]}, %t: f32[10,4] {range = [-1.0, 1.0]},
           %i: i64[4,5], %img: f32[4,2,5,5] {range = [-1.0, 1.0]},
           %k: f32[6,2,3,3] {range = [-1.0, 1.0]})
    -> (f32[4,3], f32[4,8], f32[4,12], f32[4,5,4], f32[4,6,3,3]) {
  %s = slice(%x) {start = [0, 1], limit = [4, 4], stride = [1, 1]} : f32[4,3]
  %p = pad(%x) {low = [0, 1], high = [0, 1], value = 0.0} : f32[4,8]
  %c = concat(%x, %x) {axis = 1} : f32[4,12]
  %e = take(%t, %i) {axis = 0} : f32[4,5,4]
  %v = conv2d(%img, %k) {stride = [1, 1], padding = [[0, 0], [0, 0]], dilation = [1, 1], groups = 1}
    : f32[4,6,3,3]
  return %s, %p, %c, %e, %v
}
"""


@pytest.mark.parametrize(
    ("mesh", "annotations"),
    [
        ("data=2", ("x=[data,-]", "i=[data,-]", "img=[data,-,-,-]")),
        ("model=2", ("t=[-,model]", "k=[model,-,-,-]")),
    ],
)
def test_slice_pad_concat_take_and_conv2d_pass_their_whole_dims_through(mesh, annotations):
    module = verify(parse(POSITIONAL))
    part = partition(module, parse_mesh(mesh), shards(*annotations))
    fn = verify(part.module).entry
    # No value is gathered: each op runs on its operands' blocks.
    assert not any(op.name in ("all_gather", "all_reduce") for op in fn.ops), [
        op.name for op in fn.ops
    ]
    out = {r: s for r, s in zip(fn.returns, fn.attrs["out_shardings"], strict=True)}
    if mesh == "data=2":  # every result split by rows (batch)
        assert all(s[0] == ["data"] for s in out.values())
    else:  # the table's columns and the conv's output channels
        assert out["e"] == [[], [], ["model"]] and out["v"] == [[], ["model"], [], []]
    assert prove_steps(part) == "proved" and {s.theory for s in part.steps} == {"fp"}
    for seed in range(3):
        x = inputs(module, seed)
        x["i"] = np.random.default_rng(seed).integers(-2, 12, size=(4, 5))  # clamped
        sim = run_spmd(part.module, x)
        for got, want in zip(sim.outputs, reference.run(module, x), strict=True):
            assert bit_equal(got, want)


def test_a_sliced_dim_is_kept_whole() -> None:
    module = verify(parse(POSITIONAL))
    part = partition(module, parse_mesh("model=2"), shards("x=[-,model]"))
    names = {op.result: op for op in part.module.entry.ops}
    # slice and pad cut dim 1, concat joins along it: x is gathered first.
    assert any(op.name == "all_gather" and op.operands == ["x"] for op in names.values())
    assert prove_steps(part) == "proved"
