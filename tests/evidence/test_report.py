"""`gdv evidence report`: one self-contained page that loads in headless Chromium without
script errors and shows (and filters) the obligations."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from gdv.cli import main


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's chromium, installed here when missing (as .ci/run does)."""
    path = shutil.which("chromium")
    if path is None:
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], check=False)
        path = shutil.which("chromium")
    assert path is not None, "chromium is needed: apt-get install -y chromium"
    return path


def _dump_dom(chromium: str, page: Path) -> str:
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
                f"--user-data-dir={profile}",
                "--dump-dom",
                page.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _root(dom: str) -> dict:
    """What the page's own scripts wrote on <html>: ready, and any error `window.onerror`
    caught."""
    tag = re.search(r"<html[^>]*>", dom)
    assert tag is not None
    error = re.search(r'data-js-error="([^"]*)"', tag.group(0))
    return {"ready": 'data-ready="1"' in tag.group(0), "error": error and error.group(1)}


def test_onerror_marker_catches_script_errors(chromium, pristine, tmp_path) -> None:
    """The check above can fail: a page whose script throws is marked."""
    from gdv.evidence.report import render_html

    page = tmp_path / "broken.html"
    manifest = json.loads((pristine / "manifest.json").read_text())
    html = render_html(pristine, manifest).replace("var rows", "undefinedFunction();var rows")
    page.write_text(html)
    root = _root(_dump_dom(chromium, page))
    assert root["ready"] is False and "undefinedFunction" in root["error"]


def test_report_loads_without_errors_and_shows_obligations(chromium, pristine, tmp_path) -> None:
    page = tmp_path / "report.html"
    assert main(["evidence", "report", str(pristine), "-o", str(page)]) == 0
    text = page.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)  # nothing fetched
    dom = _dump_dom(chromium, page)
    assert _root(dom) == {"ready": True, "error": None}  # the script ran to its end
    manifest = json.loads((pristine / "manifest.json").read_text())
    n = len(manifest["obligations"])
    assert len(re.findall(r'<tr data-status="proved"', dom)) == n
    assert f"{n} of {n} shown" in dom
    # The filters were filled from the rows by the script.
    passes = sorted({o["pass"] for o in manifest["obligations"]})
    for name in passes:
        assert f'<option value="{name}">{name}</option>' in dom
    assert "diff from the previous stage" in dom and "Error bounds" in dom
    assert manifest["artifact"]["files"][0]["sha256"] in dom


def test_report_of_a_rejected_compile_shows_the_counterexample(
    chromium, tmp_path, monkeypatch
) -> None:
    from gdv.driver import CompileOptions, compile_module, write_evidence

    src = "func @main(%x: f32[4]) -> f32[4] {\n  %y = relu(%x) : f32[4]\n  return %y\n}\n"
    comp = compile_module(src, CompileOptions(jobs=1, use_cache=False))
    bundle = write_evidence(comp, str(tmp_path / "b"))
    m = json.loads((bundle / "manifest.json").read_text())
    m["obligations"][0]["status"] = "refuted"
    m["obligations"][0]["counterexample"] = {
        "output": 0,
        "index": [1],
        "src": "-0.0",
        "tgt": "0.0",
        "origin": "special values (seed 0)",
    }
    m["verdict"] = "refuted"
    (bundle / "manifest.json").write_text(json.dumps(m))
    page = tmp_path / "r.html"
    assert main(["evidence", "report", str(bundle), "-o", str(page)]) == 0
    dom = _dump_dom(chromium, page)
    assert _root(dom) == {"ready": True, "error": None}
    assert '<tr data-status="refuted"' in dom and "special values (seed 0)" in dom
