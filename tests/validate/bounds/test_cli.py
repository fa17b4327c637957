"""`gdv bounds`: text and JSON output, input errors with positions and exit 3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gdv.cli import main

ROOT = Path(__file__).resolve().parents[3]
NO_RANGE = """func @main(%x: f32[4] {range = [-1.0, 1.0]}, %y: f32[4]) -> f32[4] {
  %z = mul(%x, %y) : f32[4]
  return %z
}
"""


def test_json_has_the_documented_fields(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bounds", str(ROOT / "examples" / "mlp.gdv"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (out,) = data["outputs"]
    assert 0 < out["abs"] < 1 and out["rel"] is None
    assert "u_f32" in out["expr"]
    assert 0 < out["prob_abs"] <= out["abs"]
    assert any(a.startswith("inputs") for a in data["assumptions"])
    assert 0 <= data["probabilistic"]["failure_probability"] <= 1


def test_text_output_names_the_expression(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bounds", str(ROOT / "examples" / "bf16_matmul.gdv")]) == 0
    text = capsys.readouterr().out
    assert "abs error <=" in text and "u_f32" in text and "probabilistic" in text


def test_missing_range_is_a_positioned_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "p.gdv"
    f.write_text(NO_RANGE)
    assert main(["bounds", str(f)]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"{f}:1:46: error: parameter %y: f32[4] has no range"), err


def test_default_range_supplies_missing_ranges(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "p.gdv"
    f.write_text(NO_RANGE)
    assert main(["bounds", str(f), "--json", "--default-range", "-2", "2"]) == 0
    (out,) = json.loads(capsys.readouterr().out)["outputs"]
    assert out["interval"][1] >= 2.0 and out["abs"] > 0


def test_bad_file_and_bad_target_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bounds", str(tmp_path / "missing.gdv")]) == 3
    f = tmp_path / "p.gdv"
    f.write_text(NO_RANGE)
    assert main(["bounds", str(f), "--target", "gpu", "--default-range", "0", "1"]) == 3
    assert main(["bounds", str(f), "--default-range", "1", "0"]) == 3
    assert "error:" in capsys.readouterr().err


def test_unbounded_output_is_null_with_a_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "d.gdv"
    f.write_text(
        "func @main(%x: f32[3] {range = [-1.0, 1.0]}) -> f32[3] {\n"
        "  %y = div(%x, %x) : f32[3]\n  return %y\n}\n"
    )
    assert main(["bounds", str(f), "--json"]) == 0
    (out,) = json.loads(capsys.readouterr().out)["outputs"]
    assert out["abs"] is None and "may hold 0" in out["reason"]


def test_values_lists_every_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bounds", str(ROOT / "examples" / "mlp.gdv"), "--values"]) == 0
    text = capsys.readouterr().out.split("values:")[1]
    assert "%x: f32[8,784] in [-1, 1], error <= 0" in text
    assert "%0: f32[8,128] in [-39.2, 39.2], error <= " in text


UNBOUNDED = {
    # a product of inputs up to the largest f64: inf / inf was NaN in the sum's bound
    "product": (
        """func @main(%a: f64[2,2,2] {range = [-1.7e308, 1.7e308]},
           %b: f64[2,2,3] {range = [-1.7e308, 1.7e308]}) -> f32[2,2,3] {
  %m = matmul(%a, %b) : f32[2,2,3]
  return %m
}
""",
        "dot: its terms have no finite bound",
    ),
    # sqrt over a range below zero has no finite bound; floor floored its infinite ends
    "floor": (
        """func @main(%x: bf16[4] {range = [-1.0, 1.0]}) -> bf16[4] {
  %s = sqrt(%x) : bf16[4]
  %f = floor(%s) : bf16[4]
  return %f
}
""",
        None,
    ),
}


@pytest.mark.parametrize("name", sorted(UNBOUNDED))
def test_an_unbounded_output_is_reported_not_a_crash(name, tmp_path, capsys) -> None:
    # both crashed `gdv bounds` with exit 4 (found by gdv fuzz)
    text, reason = UNBOUNDED[name]
    src = tmp_path / f"{name}.gdv"
    src.write_text(text)
    assert main(["bounds", str(src), "--json"]) == 0, capsys.readouterr().err
    (out,) = json.loads(capsys.readouterr().out)["outputs"]
    assert out["abs"] is None and out["expr"] == "oo"  # unbounded, in JSON's terms
    if reason is not None:
        assert out["reason"] == reason
