"""The bundle's `reports/`: compile cost, predicted cost and (with --profile) the measured
execution, each under its versioned schema, listed in the manifest, checked by `verify`."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import manifest_of, rehash, save_manifest, verify_cli

from gdv.cli import main
from gdv.evidence import EvidenceError
from gdv.evidence.bundle import report_schema, validate_report

ROOT = Path(__file__).resolve().parents[2]


def _report(bundle: Path, name: str) -> tuple[dict, dict]:
    entry = next(r for r in manifest_of(bundle)["reports"] if r["name"] == name)
    return entry, json.loads((bundle / entry["file"]).read_text())


def test_every_bundle_has_the_cost_reports_under_their_schemas(pristine) -> None:
    m = manifest_of(pristine)
    names = [r["name"] for r in m["reports"]]
    assert names == ["compile-cost", "predicted-cost"]
    for r in m["reports"]:
        data = json.loads((pristine / r["file"]).read_text())
        validate_report(r["schema"], data, r["file"])
        assert data["schema"] == f"gdv.reports.{r['name']}/1"
    # The compile cost is measured at every compile: like timings.json, no hash covers it.
    entry, cost = _report(pristine, "compile-cost")
    assert entry["sha256"] is None
    passes = {p["name"]: p for p in cost["passes"]}
    assert list(passes) == m["pipeline"]["passes"]
    assert cost["total"]["obligations"] == len(m["obligations"])
    for p in passes.values():
        assert p["proved"] + p["refuted"] + p["unknown"] == p["obligations"]
        assert p["seconds"] >= 0 and p["solver_seconds"] >= 0
    assert sum(p["obligations"] for p in passes.values()) == len(m["obligations"])
    # The prediction is derived from the final stage and the descriptor: hashed.
    entry, predicted = _report(pristine, "predicted-cost")
    assert len(entry["sha256"]) == 64
    caps = m["target"]["capabilities"]["machine"]
    assert predicted["machine"]["peak_gflops_f32"] == caps["peak_gflops"]["f32_mul_add"]
    kinds = {k["kind"] for k in predicted["kernels"]}
    assert "product" in kinds  # the small program's matmul
    for k in predicted["kernels"]:
        assert k["seconds"] > 0 and k["bound"] in ("compute", "memory")
        assert re.fullmatch(r".*small\.gdv:\d+:\d+", k["source"]["location"])


def test_the_report_schemas_are_strict() -> None:
    names = ("compile-cost-1", "predicted-cost-1", "execution-1", "scaling-1")
    for name in (f"reports-{n}" for n in names):
        assert report_schema(name)["additionalProperties"] is False
    with pytest.raises(EvidenceError, match="unknown report schema"):
        report_schema("reports-nope-1")
    with pytest.raises(EvidenceError, match="unknown report schema"):
        report_schema("../manifest-2")


def test_verify_checks_the_reports(pristine, capsys) -> None:
    rc, out, _ = verify_cli(capsys, pristine, "--solver", "z3")
    assert rc == 0
    assert "ok    reports: 2 report(s) follow their schemas (compile-cost, predicted-cost)" in out


def test_a_tampered_prediction_fails_files(bundle, capsys) -> None:
    entry, predicted = _report(bundle, "predicted-cost")
    predicted["kernels"][0]["seconds"] *= 0.5
    (bundle / entry["file"]).write_text(json.dumps(predicted, indent=1, sort_keys=True) + "\n")
    rc, out, _ = verify_cli(capsys, bundle, "--solver", "z3")
    assert rc == 1
    assert "FAIL  files: reports/predicted-cost.json (report predicted-cost) does not match" in out


def test_a_report_off_its_schema_fails_reports_even_with_its_hash_fixed(bundle, capsys) -> None:
    m = manifest_of(bundle)
    entry = next(r for r in m["reports"] if r["name"] == "predicted-cost")
    data = json.loads((bundle / entry["file"]).read_text())
    data["kernels"][0]["bound"] = "free lunch"
    (bundle / entry["file"]).write_text(json.dumps(data))
    rehash(bundle, entry)
    save_manifest(bundle, m)
    rc, out, _ = verify_cli(capsys, bundle, "--solver", "z3")
    assert rc == 1
    assert "FAIL  reports: reports/predicted-cost.json does not follow schema" in out
    assert "at kernels/0/bound" in out


def test_a_broken_compile_cost_report_fails_reports(bundle, capsys) -> None:
    (bundle / "reports" / "compile-cost.json").write_text('{"schema": "gdv.reports.compile-cost/1"')
    rc, out, _ = verify_cli(capsys, bundle, "--solver", "z3")
    assert (
        rc == 1
        and "FAIL  reports: reports/compile-cost.json (report compile-cost) is not JSON" in out
    )
    (bundle / "reports" / "compile-cost.json").unlink()
    rc, out, _ = verify_cli(capsys, bundle, "--solver", "z3")
    assert (
        rc == 1
        and "FAIL  reports: reports/compile-cost.json (report compile-cost) is missing" in out
    )


def test_a_bundle_without_reports_still_verifies(bundle, capsys) -> None:
    """Bundles written before reports existed (no `reports` in the manifest) still verify."""
    m = manifest_of(bundle)
    del m["reports"]
    save_manifest(bundle, m)
    shutil.rmtree(bundle / "reports")
    rc, out, _ = verify_cli(capsys, bundle, "--solver", "z3")
    assert rc == 0 and "ok    reports: none recorded" in out


def test_compile_with_profile_adds_the_measured_execution(tmp_path, capsys) -> None:
    src = ROOT / "examples" / "conv_block.gdv"
    out_dir = tmp_path / "conv.evidence"
    argv = ["compile", str(src), "--emit-evidence", str(out_dir), "--profile"]
    assert main([*argv, "--profile-runs", "3", "--jobs", "1"]) == 0
    capsys.readouterr()
    entry, execution = _report(out_dir, "execution")
    assert len(entry["sha256"]) == 64 and entry["schema"] == "reports-execution-1"
    assert execution["runs"] == 3 and len(execution["kernels"]) == 3
    validate_report("reports-execution-1", execution)
    _, predicted = _report(out_dir, "predicted-cost")
    # The measured and the predicted reports are about the same kernels.
    assert {k["index"] for k in execution["kernels"]} == {k["index"] for k in predicted["kernels"]}
    rc, out, _ = verify_cli(capsys, out_dir, "--solver", "z3")
    assert rc == 0 and "3 report(s) follow their schemas" in out
    execution["kernels"][0]["median_seconds"] /= 10  # a faster machine than it was
    (out_dir / entry["file"]).write_text(json.dumps(execution, indent=1, sort_keys=True) + "\n")
    rc, out, _ = verify_cli(capsys, out_dir, "--solver", "z3")
    assert (
        rc == 1
        and "reports/execution.json (report execution) does not match its recorded sha256" in out
    )


def test_profile_needs_an_evidence_bundle(capsys) -> None:
    assert main(["compile", str(ROOT / "examples" / "mlp.gdv"), "--profile"]) == 3
    err = capsys.readouterr().err
    assert "--profile adds the execution report to an evidence bundle" in err


def _execution(medians: dict[int, float], total: float) -> dict:
    """A minimal execution report: its kernels' medians and the entry's."""
    machine = {
        "cpu": "test",
        "cores": 2,
        "isa": ["avx2"],
        "peak_gflops_f32": 1.0,
        "copy_bandwidth_gbs": 1.0,
    }
    kernels = [
        {
            "index": i,
            "value": f"v{i}",
            "op": "kernel",
            "kind": "product",
            "median_seconds": m,
            "source": {"location": f"m.gdv:{i + 1}:3", "origin": None},
        }
        for i, m in medians.items()
    ]
    return {
        "schema": "gdv.reports.execution/1",
        "source": "m.gdv",
        "target": "c",
        "level": 3,
        "runs": 5,
        "warmup": 1,
        "machine": machine,
        "total": {"median_seconds": total},
        "kernels": kernels,
    }


def test_scaling_ranks_the_kernels_by_the_time_they_lose() -> None:
    from gdv.evidence.reports import scaling

    one = _execution({0: 2.0, 1: 0.01, 2: 0.5, 3: 0.0}, 2.6)
    two = _execution({0: 1.2, 1: 0.03, 2: 0.25, 3: 0.0}, 1.5)
    report = scaling([1, 2], [one, two])
    validate_report("reports-scaling-1", report)
    by = {k["index"]: k for k in report["kernels"]}
    assert [k["index"] for k in report["kernels"]] == [0, 1, 2, 3]  # lost 0.2, 0.025, 0, 0
    assert by[0]["lost_seconds"] == pytest.approx(0.2)
    assert by[1]["lost_seconds"] == pytest.approx(0.025)
    assert by[1]["speedup"] == pytest.approx(1 / 3)
    assert by[2]["lost_seconds"] == pytest.approx(0.0) and by[2]["speedup"] == pytest.approx(2.0)
    assert by[3]["speedup"] is None and by[0]["median_seconds"] == [2.0, 1.2]
    total = report["total"]
    assert total["speedup"] == pytest.approx(2.6 / 1.5)
    assert total["efficiency"] == pytest.approx(2.6 / 1.5 / 2)
    assert total["lost_seconds"] == pytest.approx(0.2)
    assert report["executions"] == [one, two] and report["threads"] == [1, 2]


@given(
    counts=st.lists(st.integers(1, 64), min_size=2, max_size=4, unique=True),
    data=st.data(),
)
def test_scaling_lost_time_is_against_perfect_scaling_from_the_first_count(counts, data) -> None:
    from gdv.evidence.reports import scaling

    n = data.draw(st.integers(1, 6))
    times = st.floats(0.0, 10.0, allow_nan=False)
    reports = [
        _execution({i: data.draw(times) for i in range(n)}, data.draw(times)) for _ in counts
    ]
    report = scaling(counts, reports)
    lost = [k["lost_seconds"] for k in report["kernels"]]
    assert lost == sorted(lost, reverse=True)
    for k in report["kernels"]:
        first = reports[0]["kernels"][k["index"]]["median_seconds"]
        last = reports[-1]["kernels"][k["index"]]["median_seconds"]
        assert k["median_seconds"][0] == first and k["median_seconds"][-1] == last
        assert k["lost_seconds"] == pytest.approx(last - first * counts[0] / counts[-1])
        assert (k["speedup"] is None) == (last == 0)
