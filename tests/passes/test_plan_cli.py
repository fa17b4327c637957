"""`gdv plan` (issue 17, item 4): its report (gdv.plan/1), --apply writing only a proved
program, and its errors as positioned messages with exit codes, never tracebacks; the MPI
probe of alpha and beta, and the predicted bytes of every collective against what an MPI run
sends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gdv.ir.mesh import member_index

ROOT = Path(__file__).resolve().parents[2]
MLP = str(ROOT / "examples" / "mlp.gdv")


def gdv(*args: str, env: dict | None = None, cwd: Path | None = None):
    return subprocess.run(
        [sys.executable, "-m", "gdv", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=600,
    )


@pytest.fixture
def no_probe(tmp_path) -> dict:
    """An empty MPI cache: the defaults, marked as such, whatever this host measured."""
    return {"GDV_MPI_CACHE": str(tmp_path / "mpi-cache")}


def test_the_json_report_says_what_was_chosen_and_from_what(no_probe) -> None:
    run = gdv("plan", MLP, "--mesh", "model=2", "--json", env=no_probe)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["schema"] == "gdv.plan/1" and report["verdict"] == "planned"
    assert report["network"]["source"].startswith("default (not measured")
    assert report["mesh"]["axes"] == {"model": 2}
    assert len(report["annotations"]) == 5 and report["annotations"][0].startswith("x=[")
    assert report["partition_command"].startswith(f"gdv partition {MLP} --mesh model=2 --shard")
    pr = report["predicted"]
    assert pr["step_s"] == pytest.approx(pr["compute_s"] + pr["communication_s"])
    assert pr["step_s"] == pytest.approx(pr["objective_s"], rel=1e-9)
    assert pr["memory_bytes_per_device"] > 0
    for c in report["collectives"]:
        assert c["seconds"] > 0 and len(c["bytes_sent_per_member"]) == c["group_size"]
    assert report["solver"]["name"] == "HiGHS" and report["solver"]["status"] == "optimal"
    assert {s["value"] for s in report["strategies"]} == {"0", "1", "2", "3", "4", "5", "6"}


def test_apply_writes_the_proved_program_and_its_claims(tmp_path, no_probe) -> None:
    out = tmp_path / "spmd.gdv"
    run = gdv(
        "plan", MLP, "--mesh", "data=2,model=2", "--apply", "-o", str(out),
        "--claim-timeout", "60", env=no_probe,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "claims: 7 of 7 proved; verdict proved" in run.stdout
    text = out.read_text()
    assert text.startswith("mesh @m = {data = 2, model = 2}")
    check = gdv("check", str(out))
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mesh", "data=two"], "--mesh: expected AXIS=SIZE"),
        (["--mesh", "data=2", "--shard", "x=[pipe,-]"], "has no axis 'pipe'"),
        (["--mesh", "data=3", "--shard", "x=[-,data]"], "dim 1 (784) is not a multiple"),
        (["--mesh", "data=2", "--shard", "q=[-]"], "which is no parameter"),
        (["--mesh", "data=2", "-o", "x.gdv"], "-o writes the partitioned program"),
        (["--mesh", "data=2", "--max-memory", "lots"], "expected a positive number of bytes"),
        (["--mesh", "data=2", "--max-memory", "10KB"], "no plan fits in 10000 bytes"),
    ],
)
def test_bad_input_is_an_input_error_without_a_traceback(tmp_path, no_probe, args, message):
    run = gdv("plan", MLP, *args, env=no_probe, cwd=tmp_path)
    assert run.returncode == 3, run.stderr
    assert message in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "x.gdv").exists()


def test_an_error_in_the_program_is_positioned(tmp_path, no_probe) -> None:
    bad = tmp_path / "bad.gdv"
    bad.write_text(Path(MLP).read_text().replace("f32[8,128]\n  %1", "f32[8,127]\n  %1"))
    run = gdv("plan", str(bad), "--mesh", "data=2", env=no_probe)
    assert run.returncode == 3 and f"{bad}:5:" in run.stderr and "Traceback" not in run.stderr


def test_a_solver_time_out_is_never_a_plan(tmp_path, no_probe) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from llama_like import decoder
    finally:
        sys.path.pop(0)
    prog = tmp_path / "llama.gdv"
    prog.write_text(decoder(layers=2))
    out = tmp_path / "out.gdv"
    run = gdv(
        "plan", str(prog), "--mesh", "data=8,model=8", "--timeout", "0.001", "--apply", "-o",
        str(out), "--json", env=no_probe,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert "time limit" in run.stderr and "never a plan" in run.stderr
    assert json.loads(run.stdout)["verdict"] == "timeout"
    assert not out.exists()


# --- MPI: the probe, and predicted bytes against measured ones -------------------------------


def _mpi_ready() -> bool:
    from gdv.backends.mpi import tools

    return all(tools.find_tool(t) for t in ("mpiexec", "mpicc")) and tools.installed("mpi4py")


needs_mpi = pytest.mark.skipif(not _mpi_ready(), reason="MPI (the dist extra) is not installed")


@needs_mpi
def test_the_probe_measures_caches_and_is_reported(tmp_path, monkeypatch) -> None:
    from gdv.backends.mpi import probe

    monkeypatch.setenv("GDV_MPI_CACHE", str(tmp_path))
    assert probe.cached_network() is None
    cache = {"GDV_MPI_CACHE": str(tmp_path)}
    run = gdv("plan", MLP, "--mesh", "model=2", "--json", "--probe", env=cache)
    assert run.returncode == 0, run.stderr
    reported = json.loads(run.stdout)["network"]
    net, record = probe.cached_network()
    assert (net.alpha, net.beta) == (reported["alpha_s"], reported["beta_s_per_byte"])
    assert net.alpha > 0 and net.beta > 0 and reported["source"].startswith("measured")
    assert len(record["points"]) == len(probe.SIZES)
    # a one-way 4 MiB message takes longer than an 8-byte one
    assert record["points"][-1]["seconds"] > record["points"][0]["seconds"]
    again, _ = probe.measure_network()  # from the cache: the same figures, no MPI run
    assert (again.alpha, again.beta) == (net.alpha, net.beta)
    later = gdv("plan", MLP, "--mesh", "model=2", "--json", env=cache)
    assert json.loads(later.stdout)["network"] == reported


EVERY = """mesh @m = {r = 4}

func @main(%x: f32[7], %y: f32[8, 3], %z: f32[2, 4] {sharding = [["r"], []]})
    -> (f32[7], f32[7], f32[7], f32[2, 3], f32[2, 3], f32[2, 3], f32[8, 4], f32[8, 3],
        f32[2, 3], f32[3])
    {mesh = "m", out_shardings = [[[]], [[]], [[]], [["r"], []], [["r"], []], [["r"], []],
                                  [[], []], [[], []], [[], []], [[]]]} {
  %a = all_reduce(%x) {axes = ["r"], combiner = "add", order = "rank"} : f32[7]
  %b = all_reduce(%x) {axes = ["r"], combiner = "add", order = "tree"} : f32[7]
  %c = all_reduce(%x) {axes = ["r"], combiner = "add", order = "ring"} : f32[7]
  %d = reduce_scatter(%y) {axes = ["r"], dim = 0, combiner = "add", order = "ring"} : f32[2, 3]
  %d1 = reduce_scatter(%y) {axes = ["r"], dim = 0, combiner = "add", order = "rank"} : f32[2, 3]
  %d2 = reduce_scatter(%y) {axes = ["r"], dim = 0, combiner = "max", order = "tree"} : f32[2, 3]
  %e = all_gather(%z) {axes = ["r"], dim = 0} : f32[8, 4]
  %f = all_to_all(%y) {axes = ["r"], split_dim = 0, concat_dim = 0} : f32[8, 3]
  %s = slice(%y) {start = [0, 0], limit = [2, 3], stride = [1, 1]} : f32[2, 3]
  %g = collective_permute(%s) {axes = ["r"], pairs = [[0, 1], [1, 2], [3, 0]]} : f32[2, 3]
  %h = carry_reduce(%y) {axes = ["r"], dims = [0], combiner = "add"} : f32[3]
  return %a, %b, %c, %d, %d1, %d2, %e, %f, %g, %h
}
"""


@pytest.mark.slow
@needs_mpi
def test_predicted_bytes_are_what_each_rank_sends_under_mpi() -> None:
    from gdv.api import parse
    from gdv.backends.mpi import run_mpi
    from gdv.backends.reference import random_inputs
    from gdv.backends.reference.spmd import global_function
    from gdv.ir.mesh import function_mesh
    from gdv.passes.plan import program_cost

    module = parse(EVERY, "every.gdv")
    mesh = function_mesh(module, module.entry)
    got = run_mpi(module, random_inputs(global_function(module, module.entry), 0), 4, timeout=240)
    from gdv.backends.mpi.cost import DEFAULT_NETWORK
    from gdv.passes.plan import DEFAULT_ROOFLINE

    predicted = {
        c["result"]: c for c in program_cost(module, DEFAULT_NETWORK, DEFAULT_ROOFLINE).collectives
    }
    assert set(predicted) == {*"abcdefgh", "d1", "d2"}
    for rank, report in enumerate(got.reports):
        me = member_index(mesh, ["r"], mesh.coords(rank))
        for step in report["steps"]:
            if step.get("result") in predicted:
                c = predicted[step["result"]]
                assert step["bytes_sent"] == c["bytes_sent_per_member"][me], (rank, c)


@pytest.mark.slow
@needs_mpi
def test_a_planned_mlp_sends_under_mpi_the_bytes_the_plan_predicts(tmp_path, no_probe) -> None:
    from gdv.api import parse
    from gdv.backends.mpi import run_mpi
    from gdv.backends.reference import random_inputs
    from gdv.backends.reference.spmd import global_function

    out = tmp_path / "spmd.gdv"
    # the whole MLP takes 444456 bytes a device: under 300000 no replicated plan fits, so the
    # plan communicates whatever this host's measured roofline makes of compute (with this
    # 2-core host's 281 GFLOP/s, replicating everything was the cheapest plan otherwise)
    run = gdv(
        "plan", MLP, "--mesh", "data=2,model=2", "--apply", "-o", str(out), "--json",
        "--max-memory", "300000", "--claim-timeout", "60", env=no_probe,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    module = parse(out.read_text(), "spmd.gdv")
    got = run_mpi(module, random_inputs(global_function(module, module.entry), 0), 4, timeout=240)
    predicted = report["predicted"]["bytes_sent_per_rank"]
    assert sum(predicted) > 0
    assert [r["bytes_sent"] for r in got.reports] == predicted


def test_without_highs_the_error_says_what_to_install(monkeypatch, capsys, no_probe) -> None:
    from gdv.cli import main

    monkeypatch.setitem(sys.modules, "highspy", None)  # import highspy raises ImportError
    monkeypatch.setenv("GDV_MPI_CACHE", no_probe["GDV_MPI_CACHE"])
    assert main(["plan", MLP, "--mesh", "data=2"]) == 3
    err = capsys.readouterr().err
    assert "needs the HiGHS solver" in err and "pip install -e '.[plan]'" in err
    with pytest.raises(SystemExit) as usage:  # a usage error: argparse exits with 3
        main(["plan", MLP, "--mesh", "data=2", "--gap", "1.5"])
    assert usage.value.code == 3
    assert "expected a fraction in [0, 1)" in capsys.readouterr().err
