"""`gdv profile`: the table, the JSON report (schema-checked), the Chrome trace (loaded in
headless Chromium), provenance back to the input's line and to the ONNX node or torch module,
and input errors (exit 3, no traceback)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from gdv.cli import main
from gdv.evidence.bundle import validate_report

ROOT = Path(__file__).resolve().parents[1]
CONV = ROOT / "examples" / "conv_block.gdv"


def _profile(capsys, *args) -> tuple[int, str, str]:
    try:
        rc = main(["profile", *map(str, args)])
    except SystemExit as e:  # a usage error: argparse exits with status 3
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_table_lists_kernels_by_time_with_their_source(capsys) -> None:
    rc, out, err = _profile(capsys, CONV, "--runs", "5")
    assert rc == 0, err
    head = next(ln for ln in out.splitlines() if ln.lstrip().startswith("time ms"))
    for column in ("%", "GFLOP/s", "GB/s", "roofline", "kernel", "kind", "source"):
        assert column in head
    rows = [ln for ln in out.splitlines() if re.match(r"\s*\d+\.\d+\s+\d+\.\d", ln)]
    times = [float(r.split()[0]) for r in rows]
    # the pad, the conv's product (with bias and relu as its epilogue), the pool
    assert len(rows) == 3 and times == sorted(times, reverse=True)
    assert any("product" in r and f"{CONV}:6:3" in r for r in rows)  # the conv, at its line
    assert any("%pool" in r and f"{CONV}:11:3" in r for r in rows)
    assert "GFLOP/s (f32 mul+add)" in out and "total " in out


def test_json_is_the_execution_report_and_follows_its_schema(capsys) -> None:
    rc, out, _ = _profile(capsys, CONV, "--runs", "3", "--json", "-O", "1")
    assert rc == 0
    report = json.loads(out)
    validate_report("reports-execution-1", report)
    assert report["schema"] == "gdv.reports.execution/1"
    assert report["runs"] == 3 and report["level"] == 1
    total = report["total"]
    assert 0.5 < total["timed_share"] <= 1.0 + 1e-9
    assert total["median_seconds"] <= total["wall_median_seconds"]
    shares = sum(k["share"] for k in report["kernels"])
    medians = sum(k["median_seconds"] for k in report["kernels"])
    assert shares == pytest.approx(medians / total["median_seconds"])
    for k in report["kernels"]:
        assert k["source"]["location"].startswith(str(CONV))
        if k["median_seconds"] > 0 and k["flops"]:
            assert k["gflops"] == pytest.approx(k["flops"] / k["median_seconds"] / 1e9)
    bad = dict(report, runs=0)
    with pytest.raises(Exception, match="runs"):
        validate_report("reports-execution-1", bad)


def test_bind_fixes_weights_before_the_timed_runs(capsys, tmp_path) -> None:
    """`--bind W.npz`: the parameters it holds are fixed (`Executable.bind`) before the runs,
    so their product factors are packed outside the timers; the report names them and still
    follows its schema, and the table says so."""
    rng = np.random.default_rng(0)
    weights = tmp_path / "w.npz"
    np.savez(weights, w=rng.standard_normal((16, 3, 3, 3)).astype(np.float32))
    rc, out, err = _profile(capsys, CONV, "--runs", "3", "--json", "--bind", weights)
    assert rc == 0, err
    report = json.loads(out)
    validate_report("reports-execution-1", report)
    assert report["bound"] == ["w"]
    rc, out, _ = _profile(capsys, CONV, "--runs", "3", "--bind", weights)
    assert rc == 0 and "bound before the runs: 1 parameter(s)" in out
    rc, out, _ = _profile(capsys, CONV, "--runs", "3", "--json")
    assert "bound" not in json.loads(out)  # nothing bound: a report as before
    bad = tmp_path / "bad.npz"
    np.savez(bad, nope=np.zeros(3, np.float32))
    rc, _, err = _profile(capsys, CONV, "--bind", bad)
    assert rc == 3 and "names no parameter" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope.gdv"], "nope.gdv:1:1: error:"),
        (["BAD", "--runs", "0"], "argument --runs: expected a whole number >= 1, got '0'"),
        (["BAD", "--runs", "x"], "argument --runs: expected a whole number >= 1, got 'x'"),
        (["BAD", "--warmup", "-1"], "--warmup: expected a whole number >= 0"),
        ([str(CONV), "--inputs", "missing.npz"], "cannot read inputs: no such file"),
        ([str(CONV), "-O", "9"], "invalid choice"),
        ([str(CONV), "--threads", "0"], "--threads: expected distinct whole numbers from 1 to"),
        ([str(CONV), "--threads", "1,x"], "--threads: expected distinct whole numbers"),
        ([str(CONV), "--threads", "2,2"], "--threads: expected distinct whole numbers"),
        ([str(CONV), "--threads", "1,5000"], "--threads: expected distinct whole numbers"),
        ([str(CONV), "--threads", ""], "--threads: expected distinct whole numbers"),
    ],
)
def test_bad_input_is_an_input_error(capsys, tmp_path, args, message) -> None:
    bad = tmp_path / "bad.gdv"
    bad.write_text("func @main(%x: f32[4]) -> f32[4] {\n  %y = rleu(%x) : f32[4]\n  return %y\n}\n")
    args = [str(bad) if a == "BAD" else a for a in args]
    rc, _, err = _profile(capsys, *args)
    assert rc == 3 and message in err and "Traceback" not in err


def test_threads_times_each_count_and_ranks_the_time_lost_to_scaling(capsys) -> None:
    """`--threads 1,2 --json`: the scaling report, holding one execution report per count; each
    kernel's medians are those of the execution reports, its speedup and lost time computed
    from them, the kernels ranked by the time lost."""
    rc, out, err = _profile(capsys, CONV, "--runs", "3", "--threads", "1,2", "--json")
    assert rc == 0, err
    report = json.loads(out)
    validate_report("reports-scaling-1", report)
    assert report["schema"] == "gdv.reports.scaling/1" and report["threads"] == [1, 2]
    executions = report["executions"]
    assert len(executions) == 2
    for e in executions:
        validate_report("reports-execution-1", e)
        assert e["runs"] == 3
    medians = [{k["index"]: k["median_seconds"] for k in e["kernels"]} for e in executions]
    assert {k["index"] for k in report["kernels"]} == set(medians[0]) == set(medians[1])
    for k in report["kernels"]:
        one, two = medians[0][k["index"]], medians[1][k["index"]]
        assert k["median_seconds"] == [one, two]
        assert k["lost_seconds"] == pytest.approx(two - one / 2)
        assert k["speedup"] == pytest.approx(one / two)
    lost = [k["lost_seconds"] for k in report["kernels"]]
    assert lost == sorted(lost, reverse=True)
    totals = [e["total"]["median_seconds"] for e in executions]
    assert report["total"]["median_seconds"] == totals
    assert report["total"]["efficiency"] == pytest.approx(totals[0] / totals[1] / 2)
    bad = dict(report, threads=[2])
    with pytest.raises(Exception, match="threads"):
        validate_report("reports-scaling-1", bad)


def test_threads_prints_the_last_counts_table_then_the_scaling_table(capsys, tmp_path) -> None:
    trace = tmp_path / "t.json"
    rc, out, err = _profile(capsys, CONV, "--runs", "3", "--threads", "1,2", "--trace", trace)
    assert rc == 0, err
    assert "-O2, 2 thread(s), median of 3 run(s)" in out
    assert "scaling, 1 -> 2 threads" in out and "efficiency" in out
    head = next(ln for ln in out.splitlines() if ln.lstrip().startswith("ms @1"))
    assert head.split()[:6] == ["ms", "@1", "ms", "@2", "speedup", "lost"]
    rows = out.split(head)[1].strip().splitlines()
    assert rows[-1] == f"trace: {trace}"
    assert len(rows) == 4 and all(f"{CONV}:" in r for r in rows[:3])  # the pad, conv, pool
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e.get("cat") == "entry" for e in events) == 3  # the last count's runs
    rc, out, _ = _profile(capsys, CONV, "--runs", "2", "--threads", "1")
    assert rc == 0 and "1 thread(s)" in out and "scaling" not in out


def test_threads_on_a_build_without_openmp_says_so_and_profiles(capsys, tmp_path) -> None:
    """A program none of whose ops runs in parallel links no OpenMP runtime: `--threads`
    profiles it at every count all the same and says on standard error that each runs on
    one thread."""
    small = tmp_path / "small.gdv"
    small.write_text(
        "func @main(%x: f32[4]) -> f32[4] {\n  %y = add(%x, %x) : f32[4]\n  return %y\n}\n"
    )
    rc, out, err = _profile(capsys, small, "--runs", "2", "--threads", "1,2", "--json")
    assert rc == 0, err
    assert "links no OpenMP runtime" in err and "Traceback" not in err
    report = json.loads(out)
    validate_report("reports-scaling-1", report)
    assert report["threads"] == [1, 2] and len(report["kernels"]) == 1
    rc, _, err = _profile(capsys, CONV, "--runs", "1", "--threads", "1,2")
    assert rc == 0 and "OpenMP" not in err  # the conv's product runs in parallel


def test_malformed_ir_names_its_position(capsys, tmp_path) -> None:
    bad = tmp_path / "bad.gdv"
    bad.write_text("func @main(%x: f32[4]) -> f32[4] {\n  %y = rleu(%x) : f32[4]\n  return %y\n}\n")
    rc, _, err = _profile(capsys, bad)
    assert rc == 3 and f"{bad}:2:8: error: unknown op 'rleu'" in err


def test_an_input_naming_no_parameter_is_refused(capsys, tmp_path) -> None:
    np.savez(tmp_path / "in.npz", nope=np.zeros(3, np.float32))
    rc, _, err = _profile(capsys, CONV, "--inputs", tmp_path / "in.npz")
    assert rc == 3 and "input 'nope' names no parameter of @main" in err


def test_profile_of_an_unwritable_trace_is_an_input_error(capsys, tmp_path) -> None:
    rc, _, err = _profile(capsys, CONV, "--runs", "1", "--trace", tmp_path / "no" / "t.json")
    assert rc == 3 and "cannot write" in err


# --- the trace in Chromium -------------------------------------------------------------------

_VIEWER = """<!doctype html><html><head><meta charset="utf-8"><script>
// A minimal trace viewer: load the trace as Chromium's trace viewer and Perfetto do (one JSON
// document with a traceEvents array), check each event as the Trace Event Format defines it,
// and lay the complete events out per thread.
var root = document.documentElement;
try {
  var xhr = new XMLHttpRequest();
  xhr.open("GET", "TRACE", false);
  xhr.send(null);
  var trace = JSON.parse(xhr.responseText);
  if (!Array.isArray(trace.traceEvents)) throw new Error("no traceEvents array");
  var complete = 0, lanes = {}, end = 0;
  trace.traceEvents.forEach(function (e, i) {
    if (typeof e.name !== "string" || typeof e.ph !== "string") throw new Error("event " + i);
    if (typeof e.pid !== "number" || typeof e.tid !== "number") throw new Error("pid/tid " + i);
    if (e.ph === "X") {
      if (!(e.ts >= 0) || !(e.dur >= 0)) throw new Error("ts/dur of event " + i);
      complete += 1;
      lanes[e.tid] = (lanes[e.tid] || 0) + 1;
      end = Math.max(end, e.ts + e.dur);
    }
  });
  root.setAttribute("data-complete", String(complete));
  root.setAttribute("data-lanes", JSON.stringify(lanes));
  root.setAttribute("data-end-us", String(Math.round(end)));
  root.setAttribute("data-ready", "1");
} catch (err) {
  root.setAttribute("data-js-error", String(err).replace(/"/g, "'"));
}
</script></head><body></body></html>
"""


def _load_in_chromium(chromium: str, trace: Path) -> dict:
    page = trace.parent / "viewer.html"
    page.write_text(_VIEWER.replace("TRACE", trace.name))
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--allow-file-access-from-files",
                f"--user-data-dir={profile}",
                "--dump-dom",
                page.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    tag = re.search(r"<html[^>]*>", done.stdout).group(0)
    attrs = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', tag))
    return attrs


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run does)")
    return path


def test_trace_loads_in_chromium(chromium, capsys, tmp_path) -> None:
    trace = tmp_path / "trace.json"
    rc, out, err = _profile(capsys, CONV, "--runs", "4", "--trace", trace)
    assert rc == 0, err
    data = json.loads(trace.read_text())
    kernels = [e for e in data["traceEvents"] if e["ph"] == "X" and e["tid"] == 2]
    assert len(kernels) == 3 * 4  # three timed kernels in each of four runs
    assert all(e["args"]["location"].startswith(str(CONV)) for e in kernels)
    shown = _load_in_chromium(chromium, trace)
    assert shown.get("js-error") is None and shown["ready"] == "1"
    assert int(shown["complete"]) == 4 + 12  # the runs and their kernels
    assert json.loads(shown["lanes"].replace("&quot;", '"')) == {"1": 4, "2": 12}
    last = max(e["ts"] + e["dur"] for e in data["traceEvents"] if e["ph"] == "X")
    assert abs(int(shown["end-us"]) - last) <= 1


def test_the_chromium_check_fails_on_a_malformed_trace(chromium, tmp_path) -> None:
    trace = tmp_path / "trace.json"
    trace.write_text('{"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "dur": 1, "pid": 1,')
    assert "SyntaxError" in _load_in_chromium(chromium, trace)["js-error"]
    trace.write_text('{"traceEvents": [{"name": "a", "ph": "X", "ts": -5, "pid": 1, "tid": 1}]}')
    assert "ts/dur of event 0" in _load_in_chromium(chromium, trace)["js-error"]


# --- provenance through the importers --------------------------------------------------------


def test_an_imported_onnx_model_profiles_back_to_its_nodes(capsys, tmp_path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.uniform(-0.2, 0.2, (8, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="stem/conv"),
            helper.make_node("Relu", ["c"], ["r"], name="stem/relu"),
            helper.make_node("GlobalAveragePool", ["r"], ["y"], name="head/pool"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(tmp_path / "m.onnx"))
    ir, weights = tmp_path / "m.gdv", tmp_path / "w.npz"
    assert main(["import", str(tmp_path / "m.onnx"), "-o", str(ir), "--weights", str(weights)]) == 0
    capsys.readouterr()
    assert "// from onnx:stem/conv (Conv)" in ir.read_text()
    rc, out, err = _profile(capsys, ir, "--inputs", weights, "--runs", "2", "--json")
    assert rc == 0, err
    report = json.loads(out)
    origins = {k["value"]: k["source"]["origin"] for k in report["kernels"]}
    assert "onnx:stem/conv (Conv)" in origins.values()
    assert set(origins.values()) <= {
        "onnx:stem/conv (Conv)",
        "onnx:stem/relu (Relu)",
        "onnx:head/pool (GlobalAveragePool)",
    }


def test_an_exported_torch_model_profiles_back_to_its_modules(capsys, tmp_path) -> None:
    torch = pytest.importorskip("torch")

    class Block(torch.nn.Module):  # a residual block, as in a ResNet
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
            self.bn1 = torch.nn.BatchNorm2d(8)
            self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)

        def forward(self, x):
            return torch.relu(self.conv2(torch.relu(self.bn1(self.conv1(x)))) + x)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.layer1 = torch.nn.Sequential(Block())
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(self.layer1(self.stem(x)).mean((2, 3)))

    torch.manual_seed(0)
    ep = torch.export.export(Net().eval(), (torch.randn(1, 3, 16, 16),))
    path = tmp_path / "net.pt2"
    torch.export.save(ep, str(path))
    ir, weights = tmp_path / "net.gdv", tmp_path / "w.npz"
    assert main(["import", str(path), "-o", str(ir), "--weights", str(weights)]) == 0
    capsys.readouterr()
    rc, out, err = _profile(capsys, ir, "--inputs", weights, "--runs", "2")
    assert rc == 0, err
    for module in ("torch:stem", "torch:layer1.0.conv1", "torch:layer1.0.conv2", "torch:fc"):
        assert module in out
