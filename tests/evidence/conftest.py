"""Fixtures for the evidence tests: a small program compiled once into a bundle, and fresh
copies of it for each test that tampers with one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gdv.driver import CompileOptions, compile_module, write_evidence

SMALL = """func @main(%x: f32[4,8] {range = [-1.0, 1.0]}, %w: f32[8,4] {range = [-1.0, 1.0]},
           %b: f32[4] {range = [-1.0, 1.0]}) -> f32[4,4] {
  %m = matmul(%x, %w) : f32[4,4]
  %c = broadcast(%b) {dims = [1]} : f32[4,4]
  %s = add(%m, %c) : f32[4,4]
  %r = relu(%s) : f32[4,4]
  return %r
}
"""


@pytest.fixture(scope="session")
def small_source(tmp_path_factory) -> Path:
    """The small program as a file."""
    path = tmp_path_factory.mktemp("src") / "small.gdv"
    path.write_text(SMALL)
    return path


@pytest.fixture(scope="session")
def pristine(tmp_path_factory, small_source) -> Path:
    """The small program's bundle, compiled once (never modified: copy it first)."""
    comp = compile_module(str(small_source), CompileOptions(jobs=1, use_cache=False))
    assert comp.verdict == "proved"
    return write_evidence(comp, str(tmp_path_factory.mktemp("pristine") / "small.evidence"))


@pytest.fixture
def bundle(pristine, tmp_path) -> Path:
    """A fresh copy of the small program's bundle, free to tamper with."""
    return Path(shutil.copytree(pristine, tmp_path / "bundle"))
