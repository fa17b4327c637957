"""`benchmarks/two_threads.py`'s probe and summary (the timing itself is a benchmark, not a
test)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import two_threads  # noqa: E402


def test_the_probe_builds_and_reports_two_positive_medians(tmp_path: Path) -> None:
    same, cross = two_threads.run_probe(two_threads.build_probe(tmp_path))
    assert 0 < same < 1e6 and 0 < cross < 1e6


def test_a_missing_compiler_is_a_clear_exit(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CC", "no-such-cc-gdv")
    with pytest.raises(SystemExit, match="needs a C compiler"):
        two_threads.build_probe(tmp_path)


def test_far_is_a_cross_read_at_least_far_ratio_times_the_same_read() -> None:
    r = two_threads.FAR_RATIO
    assert two_threads.is_far(10.0, 10.0 * r)
    assert not two_threads.is_far(10.0, 10.0 * r - 0.01)


def test_the_summary_keeps_near_and_far_rounds_apart() -> None:
    rounds = [
        {"gdv": 18.0, "ort": 17.0, "far": False},
        {"gdv": 18.4, "ort": 16.8, "far": False},
        {"gdv": 18.2, "ort": 16.9, "far": False},
        {"gdv": 24.0, "ort": 17.5, "far": True},
    ]
    s = two_threads.summarize(rounds)
    assert s["near"] == {"rounds": 3, "gdv_ms": 18.2, "ort_ms": 16.9, "ratio": 18.2 / 16.9}
    assert s["far"]["rounds"] == 1 and s["far"]["ratio"] == pytest.approx(24.0 / 17.5)
    assert "far" not in two_threads.summarize(rounds[:3])


def test_the_kernel_table_ranks_ops_by_their_change_from_near_to_far() -> None:
    names = ["pad %a", "kernel %b", "kernel %c"]
    rounds = [
        {"far": False, "kernels": [0.03, 1.00, 0.020]},
        {"far": False, "kernels": [0.04, 1.02, 0.030]},
        {"far": False, "kernels": [0.05, 1.01, 0.025]},
        {"far": True, "kernels": [0.15, 1.10, 0.020]},
        {"far": True, "kernels": [0.13, 1.20, 0.010]},
        {"far": True, "gdv": 21.0},  # a round without the timed block counts for no op
    ]
    rows = two_threads.kernel_table(rounds, names, 2)
    assert [r["op"] for r in rows] == ["kernel %b", "pad %a"]
    b, a = rows
    assert b["near_ms"] == 1.01 and b["far_ms"] == pytest.approx(1.15)
    assert b["change_ms"] == pytest.approx(0.14)
    assert a["near_ms"] == 0.04 and a["far_ms"] == pytest.approx(0.14)
    assert a["change_ms"] == pytest.approx(0.10)


def test_with_near_rounds_only_the_kernel_table_lists_the_slowest() -> None:
    names = ["pad %a", "kernel %b", "kernel %c"]
    rounds = [{"far": False, "kernels": [0.03, 1.00, 0.2]}]
    rows = two_threads.kernel_table(rounds, names, 3)
    assert [r["op"] for r in rows] == ["kernel %b", "kernel %c", "pad %a"]
    assert all(r["far_ms"] is None and r["change_ms"] is None for r in rows)


def test_a_negative_kernel_count_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        two_threads.main(["--kernels", "-1"])
    assert exit_.value.code == 2
    assert "--kernels: expected a count of at least 0, got -1" in capsys.readouterr().err
