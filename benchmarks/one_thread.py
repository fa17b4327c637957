"""gdv's C target against onnxruntime on one thread, model by model (issue 16): the A/B used to
tune the products, where `benchmarks/models.py` gives the two-thread figures of record.

    HF_HUB_OFFLINE=1 python benchmarks/one_thread.py [--models resnet18,bert2] [--isa avx2]
                                                     [--level 3] [--rounds 20] [--out FILE]
                                                     [--cache-dir DIR] [--path torch.export]
                                                     [--no-history]

Each model (`models.build`, batch 1, seeded) goes through the ONNX path (`torch.onnx.export`,
then `gdv.import_onnx`; with `--path torch.export`, `torch.export` and `gdv.import_torch`
instead, against the same onnxruntime session of the exported file), is compiled with its
weights bound (`--bound`, then `Compilation.bind`) at `--level` under `GDV_C_ISA=--isa`
(default: the host's own class), and runs beside an onnxruntime session of the ONNX file
with one intra-op thread. The two engines alternate call by call, `--rounds` times, each call
timed by the process's CPU time (less exposed to other jobs than wall time); the medians are
reported with their ratio. onnxruntime picks its own kernels for this host whatever `--isa`
says: with `--isa avx2` on an AVX-512 host the ratio is gdv's AVX2 code against onnxruntime's
AVX-512 code.

gdv's median per model is appended to `benchmarks/history/<machine>.json` (suite
`one_thread_<isa>_<path>_O<level>`), which `python benchmarks/check_regressions.py` reads.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet18,mobilenet_v2,efficientnet_b0,bert2,minilm")
    ap.add_argument("--isa", default="native", help="GDV_C_ISA for gdv's code")
    ap.add_argument("--level", type=int, default=3, choices=(2, 3))
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--out", default=None, help="JSON file (default: none)")
    ap.add_argument("--cache-dir", default=None, help="proof cache (default: a fresh one)")
    ap.add_argument("--path", default="onnx", choices=("onnx", "torch.export"), help="gdv's import")
    ap.add_argument(
        "--no-history", action="store_true", help="do not append gdv's times to benchmarks/history"
    )
    args = ap.parse_args(argv)
    # before anything loads OpenMP or onnxruntime
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["GDV_C_ISA"] = args.isa
    sys.path.insert(0, str(HERE))
    import models as bench  # benchmarks/models.py: the same models, seeds and export
    import numpy as np

    rows = []
    work = Path(tempfile.mkdtemp(prefix="gdv-one-thread-"))
    for name in args.models.split(","):
        bound, feed, sess, what = bench.bound_pair(
            name, args.path, args.level, work, args.cache_dir, ort_threads=1
        )
        diff = float(np.abs(bound(**feed)[0] - sess.run(None, feed)[0]).max())
        calls = {
            "gdv": functools.partial(bound, **feed),
            "ort": functools.partial(sess.run, None, feed),
        }
        for _ in range(3):
            for fn in calls.values():
                fn()
        times: dict[str, list[float]] = {k: [] for k in calls}
        for _ in range(args.rounds):
            for k, fn in calls.items():
                t = time.process_time()
                fn()
                times[k].append(time.process_time() - t)
        g, o = (statistics.median(times[k]) for k in ("gdv", "ort"))
        row = {"model": name, "what": what, "gdv_ms": g * 1e3, "ort_ms": o * 1e3}
        row.update(ratio=g / o, max_abs_diff=diff)
        rows.append(row)
        print(f"{name}: gdv {g * 1e3:.2f} ms, onnxruntime {o * 1e3:.2f} ms, {g / o:.3f}x")
    result = {
        "isa": args.isa,
        "path": args.path,
        "level": args.level,
        "rounds": args.rounds,
        "machine": platform.processor() or platform.machine(),
        "rows": rows,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    if not args.no_history:
        from history import record  # benchmarks/history.py, keyed by machine

        # gdv's median per model, one suite per (ISA, import path, level), so that
        # `check_regressions.py` compares a model's time only with its own earlier runs
        suite = f"one_thread_{args.isa}_{args.path}_O{args.level}"
        command = "python benchmarks/one_thread.py " + " ".join(argv or sys.argv[1:])
        times = {row["model"]: row["gdv_ms"] / 1e3 for row in rows}
        print(f"history: {record(suite, times, command=command.strip())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
