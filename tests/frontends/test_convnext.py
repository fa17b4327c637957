"""torchvision's convnext_tiny (random weights, batch 1, 224x224) through torch.export:
imported, compiled for the C target with every obligation proved, and run against PyTorch.

Issue 19: its `adaptive_avg_pool2d` decomposes to a mean and an `aten.as_strided` (size-1 dims
restrided), which the frontend now reads as a reshape. torchvision lives outside the
environment (`benchmarks/models.py`, `_torchvision`); without it this test is skipped.

Measured 2026-12-04 on the 2-core development machine (load about 7): 1977 obligations, all
proved, in a 43 s cold compile (27 s for the whole test on a quieter machine); the output's
largest difference from PyTorch eager was 2.9e-6."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import gdv  # noqa: E402
from gdv.driver import compile as gdv_compile  # noqa: E402
from gdv.ir.printer import print_module  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def torchvision():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import models

        return models._torchvision()
    except ImportError as e:
        pytest.skip(
            f"torchvision is not installed ({e}): pip install --no-deps --target "
            ".venv/models-site torchvision==0.28.0 pillow (pyproject.toml, `models`)"
        )


def test_convnext_tiny_compiles_with_every_obligation_proved(tmp_path: Path) -> None:
    tv = torchvision()
    torch.manual_seed(0)
    model = tv.models.convnext_tiny(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        expected = model(x).numpy()
    module, weights = gdv.import_torch(torch.export.export(model, (x,)))
    source = tmp_path / "convnext_tiny.gdv"
    source.write_text(print_module(module), encoding="utf-8")
    comp = gdv_compile(source, target="c", cache_dir=str(tmp_path / "cache"), timeout=10.0)
    assert comp.outcomes and all(o.status == "proved" for o in comp.outcomes)
    assert comp.verdict == "proved"
    out = comp(**{module.entry.params[0].name: x.numpy(), **weights})[0]
    assert out.shape == expected.shape == (1, 1000)
    assert np.abs(out - expected).max() <= 1e-4
