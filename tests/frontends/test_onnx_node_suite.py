"""ONNX's own node tests against gdv's ONNX backend (`gdv.frontends.onnx.Backend`).

The cases are generated from the onnx package's case generators into pytest's cache directory,
run with the tolerance `onnx.backend.test.runner` uses (rtol 1e-3, atol 1e-7), and every case
is recorded as pass, fail or unsupported in the results file (`$GDV_ONNX_RESULTS`, default
`build/onnx_node_results.json`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gdv.frontends.onnx_conformance import DEFAULT_RESULTS, family_table, run_all

ROOT = Path(__file__).resolve().parents[2]

PASS_FLOOR = 1706
"""Measured with onnx 1.23.2: `python -m gdv.frontends.onnx_conformance`. Raise it as ops are
added; a drop is a regression."""

MAX_NARROW_ULPS = 8
"""A failing case is allowed only as an f16 or bf16 answer this close to ONNX's expected data:
those cases are function-expanded graphs that ONNX's generator evaluated in f32 and rounded once,
while gdv rounds every op in the narrow dtype, as ONNX's per-op type rules say (one bf16 ulp,
2^-8 relative, is already above the runner's rtol of 1e-3). Anything else is a wrong answer."""


@pytest.fixture(scope="module")
def report(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    store = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    if store is not None:
        cache = Path(store.mkdir("onnx_node_cases"))
    else:
        cache = tmp_path_factory.mktemp("onnx_node_cases")
    results = Path(os.environ.get("GDV_ONNX_RESULTS", ROOT / DEFAULT_RESULTS))
    return run_all(cache, results)


def test_every_case_is_counted(report: dict) -> None:
    counts = report["counts"]
    assert report["total"] >= 1500  # the generators' whole set, nothing dropped
    assert counts["pass"] + counts["fail"] + counts["unsupported"] == report["total"]
    for name, r in report["cases"].items():
        assert r["status"] in ("pass", "fail", "unsupported"), name
        if r["status"] == "unsupported":
            assert r["detail"], name
        assert r["op"] and not r["op"].startswith("("), (name, r["op"])  # the op it exercises
    # the per-op and per-family tables count every case once
    for table in (report["ops"], report["families"]):
        summed = {k: sum(row[k] for row in table.values()) for k in counts}
        assert summed == counts, table
    assert "| **all** | " in family_table(report)


def test_pass_count_at_least_the_floor(report: dict) -> None:
    assert report["counts"]["pass"] >= PASS_FLOOR, report["counts"]


def test_no_wrong_answer(report: dict) -> None:
    wrong = {
        name: r["detail"]
        for name, r in report["cases"].items()
        if r["status"] == "fail" and not (r.get("ulps") or 1e9) <= MAX_NARROW_ULPS
    }
    assert not wrong, wrong


def test_refusals_name_the_op_and_node(report: dict) -> None:
    refused = [r["detail"] for r in report["cases"].values() if r["status"] == "unsupported"]
    by_op = [d for d in refused if d.startswith("unsupported ONNX op ")]
    assert by_op
    for d in by_op:
        assert " (opset " in d and ") at node " in d, d
