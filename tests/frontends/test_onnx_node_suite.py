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

PASS_FLOOR = 1746
"""Measured with onnx 1.23.2: `python -m gdv.frontends.onnx_conformance`. Raise it as ops are
added; a drop is a regression."""


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
    """Every case passes or is refused by name: an f16/bf16 case that ONNX's expected data
    computes otherwise than IR_SPEC's rounding passes only under the opt-in mode that is that
    computation (`mode` in the results), never by a looser comparison."""
    wrong = {name: r["detail"] for name, r in report["cases"].items() if r["status"] == "fail"}
    assert not wrong, wrong


def test_the_modes_that_match_are_recorded(report: dict) -> None:
    for name, r in report["cases"].items():
        if r["status"] == "pass":
            assert isinstance(r["bit_exact"], bool), name
            if "mode" in r:
                assert r["mode"] in ("narrow_in_f32", "accumulate_in_f32") and r["ulps_default"]
    # the f16 Attention cases, 2 ulp away under the default import, are numpy's f16 sums
    for name in ("test_attention_4d_causal_fp16", "test_attention_4d_causal_fp16_expanded"):
        r = report["cases"][name]
        assert (r["status"], r.get("mode"), r["bit_exact"]) == ("pass", "accumulate_in_f32", True)


def test_refusals_name_the_op_and_node(report: dict) -> None:
    refused = [r["detail"] for r in report["cases"].values() if r["status"] == "unsupported"]
    by_op = [d for d in refused if d.startswith("unsupported ONNX op ")]
    assert by_op
    for d in by_op:
        assert " (opset " in d and ") at node " in d, d
