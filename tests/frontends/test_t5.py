"""A T5 encoder (transformers' architecture, random weights, 2 layers) through torch.export:
imported, compiled for the C target with every obligation proved, and run against PyTorch.

Issue 19: T5's encoder was rejected because two `fold-constants` obligations (its relative
position buckets: an integer table converted to f32, then divided) timed out at the default
10 s. Claims without inputs are now decided element by element (validate/equivalence.py,
`_closed_and_equal` and `_reference_agrees`), so those obligations are proved at once, here
from a cold cache, and `gdv evidence verify` decides them again from the bundle.

Measured 2026-12-04 on the 2-core development machine: the 2-layer encoder, 345 obligations
(6 folds, all decided by evaluation) in a 4.1 s cold compile, largest difference 9.5e-7; the
t5-small-shaped one, 923 obligations (14 folds) in 22 s, largest difference 3.2e-6. Without
the decision the 16x16 table's fold is `unknown` (a timeout) at 10 s; with it, 0.3 s."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import gdv  # noqa: E402
from gdv.driver import compile as gdv_compile  # noqa: E402
from gdv.driver import write_evidence  # noqa: E402
from gdv.evidence.verify import verify_bundle  # noqa: E402
from gdv.ir.printer import print_module  # noqa: E402
from gdv.validate.equivalence import CLOSED_REASON  # noqa: E402

pytestmark = pytest.mark.slow


class Encoder(torch.nn.Module):
    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids).last_hidden_state


def test_t5_encoder_compiles_with_its_constant_folds_proved(tmp_path: Path) -> None:
    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=128, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4
    )
    encoder = Encoder(transformers.T5EncoderModel(config).eval()).eval()
    ids = torch.randint(0, 128, (1, 16))
    with torch.no_grad():
        expected = encoder(ids).numpy()
    module, weights = gdv.import_torch(torch.export.export(encoder, (ids,)))
    source = tmp_path / "t5.gdv"
    source.write_text(print_module(module), encoding="utf-8")
    comp = gdv_compile(source, target="c", cache_dir=str(tmp_path / "cache"), timeout=10.0)
    folds = [o for o in comp.outcomes if o.obligation.pass_name == "fold-constants"]
    assert folds and all(o.status == "proved" for o in folds), [
        (o.obligation.id, o.status, o.reason) for o in folds if o.status != "proved"
    ]
    assert comp.verdict == "proved"
    # decided by evaluation, the method recorded with each proof
    assert all(o.reason == CLOSED_REASON for o in folds)
    feed = {module.entry.params[0].name: ids.numpy(), **weights}
    out = comp(**feed)[0]
    assert np.abs(out - expected).max() <= 1e-4
    # the checker decides the folds again as it encodes their pairs, and every check holds
    bundle = write_evidence(comp, tmp_path / "t5.evidence")
    manifest = json.loads((bundle / "manifest.json").read_text())
    recorded = [o for o in manifest["obligations"] if o["pass"] == "fold-constants"]
    assert len(recorded) == len(folds) and all(o["reason"] == CLOSED_REASON for o in recorded)
    report = verify_bundle(bundle, solvers=("z3",), jobs=1)
    assert report.ok, report.failure


def test_t5_small_architecture_encoder_compiles_and_matches() -> None:
    """t5-small's shape (6 layers, d_model 512, 8 heads, its 32128-token vocabulary), random
    weights, 12 tokens: every obligation proved, within 1e-4 of PyTorch."""
    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8
    )
    encoder = Encoder(transformers.T5EncoderModel(config).eval()).eval()
    ids = torch.randint(0, 32128, (1, 12))
    with torch.no_grad():
        expected = encoder(ids).numpy()
    module, weights = gdv.import_torch(torch.export.export(encoder, (ids,)))
    comp = gdv_compile(print_module(module), target="c", use_cache=False, timeout=10.0)
    assert comp.verdict == "proved" and all(o.status == "proved" for o in comp.outcomes)
    out = comp(**{module.entry.params[0].name: ids.numpy(), **weights})[0]
    assert out.shape == expected.shape == (1, 12, 512)
    assert np.abs(out - expected).max() <= 1e-4
