"""Triton-target tests: skipped only where the triton package is missing (CI installs it with
the `test` extra); artifacts are written to a per-session folder, never ~/.cache."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")


@pytest.fixture(autouse=True)
def _private_triton_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch):
    monkeypatch.setenv("GDV_TRITON_CACHE", str(tmp_path_factory.getbasetemp() / "gdv-triton"))
