"""The bundle format: deterministic, schema-checked on write and on read, complete."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gdv.api import parse
from gdv.backends import c
from gdv.cli import main
from gdv.driver import CompileOptions, compile_module, write_evidence
from gdv.evidence import EvidenceError, read_manifest, validate_manifest
from gdv.evidence.bundle import MEASURED_FILES, require, sha256, write_bundle

ROOT = Path(__file__).resolve().parents[2]


def _files(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())


def test_two_compiles_are_byte_identical_apart_from_timings(tmp_path, small_source) -> None:
    key = tmp_path / "key.pem"
    assert main(["evidence", "keygen", str(key), str(tmp_path / "pub.pem")]) == 0
    a = compile_module(str(small_source), CompileOptions(jobs=1, cache_dir=str(tmp_path / "c")))
    b = compile_module(str(small_source), CompileOptions(jobs=2, use_cache=False))
    da = write_bundle(a, tmp_path / "a", sign_key=str(key))
    db = write_bundle(b, tmp_path / "b", sign_key=str(key))
    assert _files(da) == _files(db)
    assert Path("manifest.sig") in _files(da) and Path("timings.json") in _files(da)
    for rel in _files(da):
        if rel.as_posix() not in MEASURED_FILES:  # timings.json, reports/compile-cost.json
            assert (da / rel).read_bytes() == (db / rel).read_bytes(), rel


def test_manifest_records_what_the_issue_lists(pristine, small_source) -> None:
    m = read_manifest(pristine)
    assert m["schema_version"] == "2"
    assert m["source"]["sha256"] == sha256(small_source.read_bytes())
    caps = m["target"]["capabilities"]
    assert m["target"]["name"] == caps["name"] == "c"  # the default target
    assert "kernel" in caps["ops"] and "bf16" in caps["dtypes"]
    assert caps["machine"]["peak_gflops"]["f32_mul_add"] > 0
    assert m["stages"][0]["file"] == "ir/00-input.gdv"
    assert [s["pass"] for s in m["stages"][1:]] == m["pipeline"]["passes"]
    for s in m["stages"]:
        assert sha256((pristine / s["file"]).read_bytes()) == s["sha256"]
    kinds = {o["kind"] for o in m["obligations"]}
    assert "equivalence" in kinds
    for o in m["obligations"]:
        assert o["status"] == "proved" and o["solver"]["name"] == "z3"
        assert o["id"].startswith(f"{o['pass']}/{o['rule']}/")
        for q in o["queries"]:
            assert (pristine / q["file"]).read_text().startswith("(set-logic ALL)")
    (out,) = m["bounds"]["outputs"]
    assert m["bounds"]["status"] == "available" and 0 < out["abs"] < 1e-3 and "u_f32" in out["expr"]
    assert m["conformance"]["status"] == "agree"
    assert [r["seed"] for r in m["conformance"]["results"]] == [0, 1, 2]
    (art,) = m["artifact"]["files"]
    final = parse((pristine / m["stages"][-1]["file"]).read_text())
    assert m["artifact"]["kind"] == "c-source" and m["artifact"]["fallbacks"] == []
    assert (pristine / art["file"]).read_text() == c.lower(final)
    assert m["tools"]["gdv"] and m["tools"]["z3"] and m["verdict"] == "proved"


def test_bounds_are_unavailable_without_ranges(tmp_path) -> None:
    src = "func @main(%x: f32[4]) -> f32[4] {\n  %y = relu(%x) : f32[4]\n  return %y\n}\n"
    d = write_evidence(compile_module(src, CompileOptions(jobs=1, use_cache=False)), tmp_path / "e")
    bounds = read_manifest(d)["bounds"]
    assert bounds["status"] == "unavailable" and "no range" in bounds["reason"]


def test_schema_is_checked_on_read_and_write(bundle) -> None:
    m = json.loads((bundle / "manifest.json").read_text())
    del m["verdict"]
    with pytest.raises(EvidenceError, match="'verdict' is a required property"):
        validate_manifest(m)
    m["verdict"] = "proved"
    m["stages"][0]["file"] = "../outside.gdv"
    with pytest.raises(EvidenceError, match="at stages/0/file"):
        validate_manifest(m)
    m["stages"][0]["file"] = "ir/00-input.gdv"
    m["extra"] = 1
    (bundle / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(EvidenceError, match="Additional properties"):
        read_manifest(bundle)


def test_a_missing_optional_package_names_the_extra(monkeypatch, bundle, capsys) -> None:
    monkeypatch.setitem(sys.modules, "jsonschema", None)  # import fails as if not installed
    with pytest.raises(EvidenceError, match=r"pip install 'gdv\[evidence\]'"):
        require("jsonschema", "checking")
    assert main(["evidence", "show", str(bundle)]) == 3
    err = capsys.readouterr().err
    assert "gdv[evidence]" in err and "jsonschema" in err and "Traceback" not in err


def test_show_summarises(pristine, capsys) -> None:
    assert main(["evidence", "show", str(pristine)]) == 0
    out = capsys.readouterr().out
    assert "verdict:     proved" in out and "signature:   unsigned" in out
    assert "lower-to-kernels" in out and "conformance: agree" in out
    assert main(["evidence", "show", str(pristine.parent / "nope")]) == 3
