"""A T5 encoder (transformers' architecture, random weights, 2 layers) through torch.export:
imported, compiled for the C target with every obligation proved, and run against PyTorch.

Issue 19: T5's encoder was rejected because two `fold-constants` obligations (its relative
position buckets: an integer table converted to f32, then divided) timed out at the default
10 s. Claims without inputs are now decided element by element (validate/equivalence.py,
`_closed_and_equal`), so those obligations are proved at once, here from a cold cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import gdv  # noqa: E402
from gdv.driver import compile as gdv_compile  # noqa: E402
from gdv.ir.printer import print_module  # noqa: E402

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
    feed = {module.entry.params[0].name: ids.numpy(), **weights}
    out = comp(**feed)[0]
    assert np.abs(out - expected).max() <= 1e-4
