"""Single grouped convolutions (depthwise, and groups of several output channels) on gdv's C
target beside onnxruntime and torch eager, as lowered now and, with `--before`, as they ran
before issue 16 (the conv2d op's scalar nest: only single-group f32/f64 convs of at least
CONV_MIN_MACS multiply-adds were lowered to kernels).

    python benchmarks/conv_kernels.py [--before] [--runs N] [--threads T]

Each engine: one warm-up call, then N back-to-back calls; the median is printed. `--threads`
sets gdv's OpenMP threads (OMP_NUM_THREADS, read when the first kernel runs), onnxruntime's
intra-op threads and torch's. On a machine other jobs load, spinning OpenMP barriers make
gdv's multi-threaded medians swing by 10x; `--threads 1` compares engines on one core.
Timings are this machine's; none of this is a unit test.
"""

from __future__ import annotations

import argparse
import io
import os
import time
import warnings

import numpy as np

CASES = [
    # channels, spatial size, stride, output channels per group (1: depthwise)
    (144, 56, 1, 1),
    (144, 56, 2, 1),
    (576, 14, 1, 1),
    (960, 7, 1, 1),
    (32, 112, 1, 1),
    (128, 56, 1, 4),
]


def _median_ms(call, runs: int) -> float:
    call()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", action="store_true", help="grouped convs stay conv2d ops")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--threads", type=int, default=0, help="threads per engine (0: default)")
    args = ap.parse_args(argv)
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import onnxruntime as ort
    import torch

    from gdv.api import parse
    from gdv.backends import c
    from gdv.backends.targets import get_target
    from gdv.passes import lower_to_kernels
    from gdv.passes.manager import PassManager
    from gdv.passes.pipelines import pipeline

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.before:
        now = lower_to_kernels._conv_lowers
        lower_to_kernels._conv_lowers = lambda op, ts: op.attrs["groups"] == 1 and now(op, ts)
    options = ort.SessionOptions()
    if args.threads:
        options.intra_op_num_threads = args.threads
    print("| conv | gdv-c ms | onnxruntime ms | torch eager ms | gdv / ort | gdv / torch |")
    print("|---|---|---|---|---|---|")
    for ch, hw, stride, og in CASES:
        groups = ch // og
        oh = (hw + 2 - 3) // stride + 1
        text = (
            f"func @main(%x: f32[1,{ch},{hw},{hw}], %w: f32[{ch},{og},3,3]) -> "
            f"f32[1,{ch},{oh},{oh}] {{\n  %y = conv2d(%x, %w) {{stride = [{stride}, {stride}], "
            f"padding = [[1, 1], [1, 1]], dilation = [1, 1], groups = {groups}}} : "
            f"f32[1,{ch},{oh},{oh}]\n  return %y\n}}\n"
        )
        module = parse(text)
        # As the driver builds it: the micro-tile, blocks and vector width come from the
        # host's capability descriptor (without them the pipeline schedules for a default).
        passes = pipeline("c", 2, **get_target("c").schedule_parameters())
        compiled = c.Executable(PassManager(passes).run(module).module)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((1, ch, hw, hw)).astype(np.float32)
        w = rng.standard_normal((ch, og, 3, 3)).astype(np.float32)
        gdv = _median_ms(lambda f=compiled, x=x, w=w: f({"x": x, "w": w}), args.runs)

        class Conv(torch.nn.Module):
            def forward(self, x, w, stride=stride, groups=groups):
                return torch.nn.functional.conv2d(x, w, stride=stride, padding=1, groups=groups)

        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                Conv(), (torch.from_numpy(x), torch.from_numpy(w)), buf,
                input_names=["x", "w"], dynamo=False, opset_version=17,
            )  # fmt: skip
        session = ort.InferenceSession(buf.getvalue(), options, providers=["CPUExecutionProvider"])
        onnx = _median_ms(lambda s=session, x=x, w=w: s.run(None, {"x": x, "w": w}), args.runs)
        tx, tw, conv = torch.from_numpy(x), torch.from_numpy(w), Conv()
        with torch.no_grad():
            eager = _median_ms(lambda m=conv, a=tx, b=tw: m(a, b), args.runs)
        kind = "depthwise" if og == 1 else f"{groups} groups of {og}"
        print(
            f"| {kind} 3x3 s{stride}, {ch} ch, {hw}x{hw} | {gdv:.3f} | {onnx:.3f} | "
            f"{eager:.3f} | {gdv / onnx:.2f} | {gdv / eager:.2f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
