"""C-target tests compile into a per-session cache directory, never the user's ~/.cache."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_c_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GDV_C_CACHE", str(tmp_path_factory.getbasetemp() / "gdv-c-cache"))
