"""The benchmark history and `benchmarks/check_regressions.py`, on synthetic history files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import check_regressions  # noqa: E402
import history  # noqa: E402

A = history.machine_entry("Xeon A", ["sse2", "avx2", "fma"], 2, "gcc 14.2.0")
B = history.machine_entry("Xeon A", ["sse2", "avx2", "fma", "avx512f"], 2, "gcc 14.2.0")


def _run(directory: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "check_regressions.py"),
            "--history",
            str(directory),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_fingerprint_separates_isa_cores_and_compiler() -> None:
    ids = {
        A["id"],
        B["id"],
        history.machine_entry("Xeon A", A["isa"], 4, "gcc 14.2.0")["id"],
        history.machine_entry("Xeon A", A["isa"], 2, "gcc 13.1.0")["id"],
        history.machine_entry("Xeon B", A["isa"], 2, "gcc 14.2.0")["id"],
    }
    assert len(ids) == 5
    assert history.machine_entry("Xeon A", ["sse2", "avx2", "fma"], 2, "gcc 14.2.0") == A
    here = history.fingerprint()
    assert len(here["id"]) == 16 and here["cores"] >= 1 and here["compiler"]


def test_a_workload_more_than_ten_percent_slower_than_its_best_is_flagged(tmp_path) -> None:
    history.record("s", {"mm": 1.0, "softmax": 2.0}, machine=A, directory=tmp_path, date="d1")
    history.record("s", {"mm": 0.8, "softmax": 2.1}, machine=A, directory=tmp_path, date="d2")
    history.record("s", {"mm": 0.9, "softmax": 2.15}, machine=A, directory=tmp_path, date="d3")
    # Another machine's best never counts against this one's.
    history.record("s", {"mm": 0.1, "softmax": 0.1}, machine=B, directory=tmp_path, date="d1")
    history.record("s", {"mm": 0.1, "softmax": 0.105}, machine=B, directory=tmp_path, date="d2")
    data = json.loads((tmp_path / f"{A['id']}.json").read_text())
    assert data["machine"] == A and [r["date"] for r in data["runs"]] == ["d1", "d2", "d3"]
    (r,) = check_regressions.regressions(data)
    assert (r.workload, r.latest, r.best, r.best_date) == ("s/mm", 0.9, 0.8, "d2")
    assert r.slowdown == pytest.approx(0.125)
    done = _run(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 workload(s) more than 10% slower than their best" in done.stdout
    assert f"{A['id']}: s/mm: 900 ms, 12.5% slower than its best 800 ms (d2)" in done.stdout
    assert "softmax" not in done.stdout  # 2.15 is 7.5% above 2.0


def test_no_regression_exits_0_and_a_broken_file_exits_2(tmp_path) -> None:
    history.record("s", {"mm": 1.0}, machine=A, directory=tmp_path, date="d1")
    history.record("s", {"mm": 1.09}, machine=A, directory=tmp_path, date="d2")
    done = _run(tmp_path)
    assert done.returncode == 0 and "no regressions: 1 workload(s) on 1 machine" in done.stdout
    (tmp_path / "broken.json").write_text("{")
    done = _run(tmp_path)
    assert done.returncode == 2 and "not a history file" in done.stderr


def test_side_by_side_results_go_to_the_history(tmp_path) -> None:
    result = {
        "command": "python benchmarks/side_by_side.py",
        "rows": [
            {"workload": "matmul", "engines": {"gdv-c": {"median_ms": 10.0}, "numpy": {}}},
            {"workload": "broken", "engines": {"gdv-c": {"error": "x"}}},
        ],
    }
    path = history.record_side_by_side(result, directory=tmp_path)
    data = json.loads(path.read_text())
    assert path.name == f"{history.fingerprint()['id']}.json"
    assert data["runs"][0]["results"] == {"side_by_side/matmul": 0.01}
