"""Real models through both import paths, against torch eager and onnxruntime (issue 16).

    HF_HUB_OFFLINE=1 python benchmarks/models.py [--models resnet18,bert2] [--quick] [--out FILE]

Models (random-init at batch 1, seeded; MiniLM ships its own weights): torchvision resnet18,
mobilenet_v2 and efficientnet_b0 on a 1x3x224x224 image (64x64 with `--quick`); a BERT-base-
sized `BertModel` with 2 layers and GPT-2 (`GPT2Model`, base size) with 2 layers, both on 32
tokens (8 with `--quick`); the all-MiniLM-L6-v2 sentence encoder (`minilm.load_encoder`).

For each model and path (torch.export: `gdv.import_torch`; ONNX: `torch.onnx.export(...,
dynamo=False)` then `gdv.import_onnx`): import seconds; a cold `gdv compile -O2 --target c`
(`gdv.driver.compile_module` with an empty proof cache and an empty
`GDV_C_CACHE`; the compile builds the shared object), split into pass time, proof time and the
rest (parse, C build); obligations and verdict; per pass its wall time, obligations and solver
seconds and its slowest obligations; the run median (`--runs`, default 20, after 3 warm-up
calls; all engines in one process, in rounds of back-to-back blocks of `BLOCK` calls, each
round after a probe of the two vCPUs' distance, see `_side_by_side`) of
gdv's C target on both paths, called with the weights as arguments and bound once
(compiled again with `CompileOptions.bound` = the weights' names, `gdv compile --bound`, so
its products plan for factors packed once, then `Compilation.bind`, as onnxruntime's session
fixes its initializers: product factors read only from weights are packed at bind time; the
bound result must equal the unbound one bit for bit), torch eager and onnxruntime (CPU, 2
intra-op threads, 1 inter-op), the ratios gdv/torch and gdv/ORT (time over time: below 1 is
faster), and the largest absolute difference from torch. The same medians and ratios are
also given over the near and the far rounds apart (`states`; the table's "bound/ORT near" and
"rounds near/far" columns): the probe of `benchmarks/two_threads.py` runs before each round.

Peak memory is measured the same way for every engine, each in a fresh subprocess: load the
engine (torch: build the model; ORT: create the session; gdv: compile with the proof and C
caches the timed compile filled, and load the shared object; bound: also bind the weights,
so their copy and packed panels count as loaded, as ORT's initializers do), read VmRSS, reset
VmHWM through /proc/self/clear_refs, make the warm-up and timed calls, read VmHWM. The figure
is VmHWM minus that VmRSS. gdv's planned arena (`arena_bytes` of the entry function) is
given beside it.

Each model runs in its own subprocess, so a model that fails (import, compile, a crash) is
reported with its error and the others still run. Writes `benchmarks/models.json` and prints a
markdown table.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from argparse import SUPPRESS
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
MODELS = ("resnet18", "mobilenet_v2", "efficientnet_b0", "bert2", "gpt2_2", "minilm")
PATHS = ("torch.export", "onnx")
WARMUP = 3
ORT_THREADS = 2


# --- the models -------------------------------------------------------------------------------


SITE_ENV = "GDV_MODELS_SITE"
"""A directory holding torchvision (and pillow) outside the environment's site-packages,
default `.venv/models-site` (`pip install --no-deps --target .venv/models-site torchvision==0.28.0
pillow`): see `_torchvision`."""


def _torchvision():
    """torchvision's model code. The PyPI wheel's C extension is built for CUDA torch and does
    not load against the local CPU build; torchvision then still registers fake kernels for
    `nms` and `qnms`, which need the ops' schemas, and fails to import. Installed in the
    environment, that failure also breaks `transformers` (it imports torchvision when it finds
    it), so it lives in its own directory, put on the path here. Declaring the two schemas
    (never called: no model here runs a detection op) lets the pure-Python models import."""
    import torch

    site = os.environ.get(SITE_ENV) or str(HERE.parent / ".venv" / "models-site")
    if os.path.isdir(site) and site not in sys.path:
        sys.path.insert(0, site)
    if "torchvision" not in sys.modules:
        try:
            torch.ops.torchvision.nms  # noqa: B018 -- present when the C extension loads
        except (AttributeError, RuntimeError):
            lib = torch.library.Library("torchvision", "FRAGMENT")
            lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            _torchvision.lib = lib  # keep the registration alive
    import torchvision

    return torchvision


class _LastHidden:
    """Wraps a transformers model so that it returns one tensor (its last hidden state)."""

    @staticmethod
    def wrap(model):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, input_ids, attention_mask):
                return self.model(input_ids=input_ids, attention_mask=attention_mask)[0]

        return Wrapped().eval()


def build(name: str, quick: bool) -> tuple[Any, dict[str, Any], str]:
    """(torch module in eval mode, its inputs by name, a description)."""
    import torch

    torch.manual_seed(0)
    side = 64 if quick else 224
    tokens = 8 if quick else 32
    if name in ("resnet18", "mobilenet_v2", "efficientnet_b0"):
        tv = _torchvision()
        model = getattr(tv.models, name)(weights=None).eval()
        return model, {"x": torch.randn(1, 3, side, side)}, f"1x3x{side}x{side}, random init"
    if name in ("bert2", "gpt2_2"):
        _torchvision()  # before transformers, which imports it when present
        import transformers

        if name == "bert2":
            cfg = transformers.BertConfig(num_hidden_layers=2, attn_implementation="eager")
            model = transformers.BertModel(cfg, add_pooling_layer=False)
            vocab = cfg.vocab_size
            what = "BertModel, base size, 2 layers"
        else:
            cfg = transformers.GPT2Config(n_layer=2, use_cache=False, attn_implementation="eager")
            model = transformers.GPT2Model(cfg)
            vocab = cfg.vocab_size
            what = "GPT2Model, base size, 2 layers"
        model.config.use_cache = False
        ids = torch.randint(0, vocab, (1, tokens), generator=torch.Generator().manual_seed(1))
        inputs = {"input_ids": ids, "attention_mask": torch.ones(1, tokens, dtype=torch.int64)}
        return _LastHidden.wrap(model.eval()), inputs, f"{what}, {tokens} tokens, random init"
    if name == "minilm":
        _torchvision()
        sys.path.insert(0, str(HERE))
        from minilm import load_encoder

        model, inputs = load_encoder()
        n = int(inputs["input_ids"].shape[1])
        return model, inputs, f"all-MiniLM-L6-v2 (its own weights), 2 sentences, {n} tokens"
    raise SystemExit(f"unknown model {name!r}; choose from {', '.join(MODELS)}")


# --- engines ----------------------------------------------------------------------------------


def export_onnx(model, inputs: dict[str, Any], path: Path) -> None:
    import torch

    names = list(inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            tuple(inputs[k] for k in names),
            str(path),
            input_names=names,
            output_names=["out"],
            dynamo=False,
        )


def ort_session(path: Path, threads: int = ORT_THREADS):
    """An onnxruntime CPU session of the ONNX file `path` with `threads` intra-op threads."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def bound_pair(
    name: str,
    path: str,
    level: int,
    work: Path,
    cache: str | None = None,
    ort_threads: int = 1,
    keep: dict | None = None,
):
    """Model `name` (`build`, not quick) exported to ONNX in `work`, imported through `path`,
    compiled for the C target at -O`level` with its weights bound (proof cache `cache`,
    default `work`/proofs), and an onnxruntime session of the ONNX file with `ort_threads`
    intra-op threads: (the bound executable, the feed as numpy arrays, the session, the
    model's description). A SystemExit when the compile is not proved. With `keep`, the
    compilation and the weights are also stored there (`comp`, `weights`)."""
    import numpy as np

    from gdv.driver import CompileOptions, compile_module
    from gdv.ir.printer import print_module

    model, inputs, what = build(name, False)
    onnx_file = work / f"{name}.onnx"
    export_onnx(model, inputs, onnx_file)
    module, weights = import_path(path, model, inputs, onnx_file)
    weights = {k: np.asarray(v) for k, v in weights.items()}
    source = work / f"{name}.gdv"
    source.write_text(print_module(module), encoding="utf-8")
    cache = cache or str(work / "proofs")
    options = CompileOptions(target="c", level=level, cache_dir=cache, bound=tuple(weights))
    comp = compile_module(str(source), options)
    if comp.verdict != "proved":
        raise SystemExit(f"{name}: the compile is {comp.verdict}")
    feed = {k: v.numpy() for k, v in inputs.items()}
    if keep is not None:
        keep.update(comp=comp, weights=weights)
    return comp.bind(**weights), feed, ort_session(onnx_file, ort_threads), what


def import_path(path: str, model, inputs: dict[str, Any], onnx_file: Path):
    """(Module, weights) through one import path."""
    import torch

    import gdv

    if path == "torch.export":
        ep = torch.export.export(model, (), kwargs=inputs)
        return gdv.import_torch(ep)
    return gdv.import_onnx(onnx_file)


def gdv_compile(source: Path, cache: Path, bound: tuple[str, ...] = ()):
    """A cold compile at -O2 (the exact mode), or at `$GDV_MODELS_LEVEL` (3: the reassociating
    mode; `--level`). `bound`: the weights' names, for the program that binds them
    (`CompileOptions.bound`: its products plan for factors packed once, at bind time)."""
    from gdv.driver import CompileOptions, compile_module

    level = int(os.environ.get("GDV_MODELS_LEVEL", "2"))
    options = CompileOptions(target="c", level=level, cache_dir=str(cache), bound=bound)
    return compile_module(str(source), options)


def _pass_breakdown(comp) -> list[dict]:
    solver = defaultdict(float)
    kinds: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(lambda: [0, 0.0]))
    slowest: dict[str, list] = defaultdict(list)
    for o in comp.outcomes:
        p = o.obligation.pass_name
        solver[p] += o.seconds
        k = kinds[p][o.obligation.kind]
        k[0] += 1
        k[1] += o.seconds
        slowest[p].append(o)
    rows = []
    for r in comp.records:
        rows.append(
            {
                "pass": r.name,
                "pass_s": round(r.seconds, 3),
                "obligations": len(r.obligations),
                "solver_s": round(solver.get(r.name, 0.0), 3),
                "by_kind": {
                    k: {"n": n, "solver_s": round(s, 3)} for k, (n, s) in kinds[r.name].items()
                },
                "slowest": [
                    {
                        "id": o.obligation.id,
                        "s": round(o.seconds, 3),
                        "src_ops": len(o.obligation.src.ops),
                        "tgt_ops": len(o.obligation.tgt.ops),
                        "body_ops": sum(len(f.ops) for f in o.obligation.functions),
                        "loc": str(o.obligation.loc) if o.obligation.loc else None,
                    }
                    for o in sorted(slowest[r.name], key=lambda o: -o.seconds)[:3]
                ],
            }
        )
    return rows


def _error(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    return text if len(text) < 600 else text[:600] + " ..."


BLOCK = 5
"""Timed calls per engine per round (`_side_by_side`). Short blocks make many rounds, so that
each state of a shared VM (below) falls on every engine alike."""


QUIET_S = 0.2
"""Seconds of quiet before each engine's block of timed calls (as benchmarks/side_by_side.py)."""


def _side_by_side(calls: dict[str, Any], runs: int, probe: Any = None) -> dict[str, Any]:
    """Each engine's median seconds a call, over all rounds (`all`) and, with `probe`, over
    the near and the far rounds apart (`near`, `far`: each with its number of `rounds`; a kind
    without rounds is left out), and the probe's readings (`rounds`).

    The runs are split into rounds of `BLOCK` calls per engine; each round runs the probe (a
    callable giving (same, cross) read times in microseconds, `two_threads.run_probe`) and
    then gives every engine one untimed call and its block of timed calls back to back, so
    that load from other processes and the VM's state fall on every engine alike, while each
    engine runs warm (its threads awake, as in a loop over inputs). One call of each engine,
    strictly alternating, would time every call cold: gdv's OpenMP threads fall asleep during
    the other engines' calls (MiniLM: 3.6 ms a call back to back, 13.6 ms alternating). Each
    block starts after `QUIET_S` of quiet, so that the previous engine's idle threads
    (onnxruntime's spin) no longer compete for the 2 cores: without it, the engine timed after
    onnxruntime paid for it (mobilenet_v2's torch.export path ran at 14.0 ms after ORT, its ONNX
    path at 7.1 ms). On this 2-core VM the two vCPUs are at times far apart (the probe's cross
    read at least `two_threads.FAR_RATIO` times its same read), and every engine is slower
    then, gdv more than onnxruntime (`benchmarks/two_threads.py`); four rounds of ten calls
    put whole blocks of one engine in one state and another's in the other (resnet18's two
    import paths, the same program but for BatchNorm, 22.9 and 21.1 ms in a run of this table
    so timed, 17.9 and 18.1 ms in rounds of `BLOCK` calls; README, "Real models, latest run")."""
    from two_threads import is_far

    for _ in range(WARMUP):
        for fn in calls.values():
            fn()
    rounds: list[dict[str, Any]] = []
    for n in [BLOCK] * (runs // BLOCK) + ([runs % BLOCK] if runs % BLOCK else []):
        rnd: dict[str, Any] = {"times": {k: [] for k in calls}}
        if probe is not None:
            rnd["same_us"], rnd["cross_us"] = probe()
            rnd["far"] = is_far(rnd["same_us"], rnd["cross_us"])
        for k, fn in calls.items():
            time.sleep(QUIET_S)
            fn()
            for _ in range(n):
                t = time.perf_counter()
                fn()
                rnd["times"][k].append(time.perf_counter() - t)
        rounds.append(rnd)

    def medians(part: list[dict[str, Any]]) -> dict[str, float]:
        return {k: statistics.median(t for r in part for t in r["times"][k]) for k in calls}

    out: dict[str, Any] = {"all": medians(rounds)}
    if probe is not None:
        for label, far in (("near", False), ("far", True)):
            part = [r for r in rounds if r["far"] == far]
            if part:
                out[label] = {"rounds": len(part), **medians(part)}
        out["rounds"] = [{k: r[k] for k in ("same_us", "cross_us", "far")} for r in rounds]
    return out


def bench_model(name: str, quick: bool, runs: int, work: Path) -> dict:
    """Everything for one model except memory (see `measure_memory`), in this process."""
    import torch

    torch.set_num_threads(ORT_THREADS)
    from gdv.ir.printer import print_module

    row: dict[str, Any] = {"model": name}
    model, inputs, what = build(name, quick)
    row["what"] = what
    with torch.no_grad():
        expected = model(**inputs).numpy()

    def torch_call() -> None:
        with torch.no_grad():
            model(**inputs)

    calls: dict[str, Any] = {"torch": torch_call}
    feed = {k: v.numpy() for k, v in inputs.items()}
    np.savez(work / "inputs.npz", **feed)
    onnx_file = work / "model.onnx"
    try:
        export_onnx(model, inputs, onnx_file)
        sess = ort_session(onnx_file)
        ort_out = sess.run(None, feed)[0]
        row["ort_max_abs_diff"] = float(np.abs(ort_out - expected).max())
        calls["ort"] = functools.partial(sess.run, None, feed)
    except Exception as e:  # noqa: BLE001 -- reported, the torch.export path still runs
        row["onnx_export_error"] = _error(e)
    row["paths"] = {}
    for path in PATHS:
        res: dict[str, Any] = {}
        row["paths"][path] = res
        if path == "onnx" and "onnx_export_error" in row:
            res["error"] = "torch.onnx.export failed: " + row["onnx_export_error"]
            continue
        tag = path.replace(".", "_")
        stage = "import"
        try:
            t = time.perf_counter()
            module, weights = import_path(path, model, inputs, onnx_file)
            res["import_s"] = time.perf_counter() - t
            ops = [op for f in module.functions for op in f.ops]
            res["imported_ops"] = len(ops)
            source = work / f"{tag}.gdv"
            source.write_text(print_module(module), encoding="utf-8")
            np.savez(work / f"{tag}-weights.npz", **weights)
            stage = "compile"
            os.environ["GDV_C_CACHE"] = str(work / f"c-cache-{tag}")
            t = time.perf_counter()
            comp = gdv_compile(source, work / f"proof-cache-{tag}")
            res["compile_and_prove_s"] = time.perf_counter() - t
            res["prove_s"] = comp.prove_seconds
            res["obligations"] = len(comp.outcomes)
            res["solved"] = sum(1 for o in comp.outcomes if not o.cached and not o.shared_with)
            res["verdict"] = comp.verdict
            res["solver_s"] = sum(o.seconds for o in comp.outcomes)
            res["passes"] = _pass_breakdown(comp)
            res["arena_bytes"] = int(comp.module.entry.attrs.get("arena_bytes", 0))
            res["kernels"] = sum(1 for op in comp.module.entry.ops if op.name == "kernel")
            res["passes_s"] = sum(r.seconds for r in comp.records)
            # compile_module builds the C shared object too, while it proves (the target's
            # `start_build`): this is lowering and the part of the build the proofs did not
            # overlap.
            res["build_s"] = res["compile_and_prove_s"] - res["passes_s"] - res["prove_s"]
            if comp.verdict != "proved":
                bad = next(o for o in comp.outcomes if o.status != "proved")
                res["error"] = f"obligation {bad.obligation.id} is {bad.status}: {bad.reason}"
                continue
            stage = "load"
            t = time.perf_counter()
            comp.executable()
            res["load_s"] = time.perf_counter() - t
            stage = "run"
            args = dict(feed, **weights)
            out = comp(**args)[0]
            res["max_abs_diff"] = float(np.abs(out - expected).max())
            calls[f"gdv:{path}"] = functools.partial(comp, **args)
            # The weights fixed once, as onnxruntime fixes its initializers at session
            # creation: the product factors read only from them are packed once, here.
            stage = "bind"
            # compiled again for its weights bound (`--bound`; the proof cache is warm now)
            t = time.perf_counter()
            comp_bound = gdv_compile(source, work / f"proof-cache-{tag}", tuple(sorted(weights)))
            res["bound_compile_s"] = time.perf_counter() - t
            if comp_bound.verdict != "proved":
                raise AssertionError(f"the compile for bound weights is {comp_bound.verdict}")
            t = time.perf_counter()
            bound = comp_bound.bind(**weights)
            res["bind_s"] = time.perf_counter() - t
            bout = bound(**feed)[0]
            res["bound_max_abs_diff"] = float(np.abs(bout - expected).max())
            if not np.array_equal(bout, out, equal_nan=True):
                raise AssertionError("the bound program's result differs from the unbound one's")
            calls[f"gdv-bound:{path}"] = functools.partial(bound, **feed)
        except Exception as e:  # noqa: BLE001 -- the error is the result
            res["error"] = f"{stage}: {_error(e)}"
            res["traceback"] = traceback.format_exc(limit=-4)
    from two_threads import build_probe, run_probe

    probe = build_probe(work)
    side = _side_by_side(calls, runs, lambda: run_probe(probe))
    medians = side["all"]
    row["probe_rounds"] = side["rounds"]
    row["states"] = _states(side, row["paths"])
    row["torch_s"] = medians["torch"]
    if "ort" in medians:
        row["ort_s"] = medians["ort"]
    for path, res in row["paths"].items():
        res.update(_figures(medians, path))
    return row


def _figures(m: dict[str, float], path: str) -> dict[str, float]:
    """gdv's median seconds on `path` (with its weights as arguments: `gdv_s`; bound:
    `gdv_bound_s`) and their ratios to torch and onnxruntime (`vs_torch`, `vs_ort`,
    `bound_vs_torch`, `bound_vs_ort`), from engine medians `m` (`_side_by_side`); an engine
    that did not run gives no figures."""
    res: dict[str, float] = {}
    for key, engine, pre in (("gdv_s", "gdv", ""), ("gdv_bound_s", "gdv-bound", "bound_")):
        if f"{engine}:{path}" in m:
            res[key] = m[f"{engine}:{path}"]
            res[f"{pre}vs_torch"] = res[key] / m["torch"]
            if "ort" in m:
                res[f"{pre}vs_ort"] = res[key] / m["ort"]
    return res


def _states(side: dict[str, Any], paths: dict[str, dict]) -> dict[str, dict]:
    """Per kind of round (`near`, `far`) that has rounds: their number, each engine's median
    seconds, and gdv's ratios to torch and onnxruntime per path (bound and not), as in the
    all-rounds figures of the row."""
    states = {}
    for label in ("near", "far"):
        m = side.get(label)
        if not m:
            continue
        st: dict[str, Any] = {"rounds": m["rounds"], "torch_s": m["torch"]}
        if "ort" in m:
            st["ort_s"] = m["ort"]
        for path in paths:
            st[path] = _figures(m, path)
        states[label] = st
    return states


# --- memory -----------------------------------------------------------------------------------


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/self/status")


def measure_memory(name: str, engine: str, quick: bool, runs: int, work: Path) -> dict:
    """Peak RSS above the loaded process of `runs` + warm-up calls of one engine (fresh
    process: `--_memory`)."""
    import torch

    torch.set_num_threads(ORT_THREADS)
    feed = dict(np.load(work / "inputs.npz"))
    if engine == "torch":
        model, inputs, _ = build(name, quick)

        def call():
            with torch.no_grad():
                model(**inputs)
    elif engine == "ort":
        sess = ort_session(work / "model.onnx")

        def call():
            sess.run(None, feed)
    else:
        kind, _, path = engine.partition(":")
        tag = path.replace(".", "_")
        os.environ["GDV_C_CACHE"] = str(work / f"c-cache-{tag}")
        weights = dict(np.load(work / f"{tag}-weights.npz"))
        bound_names = tuple(sorted(weights)) if kind == "gdv-bound" else ()
        comp = gdv_compile(work / f"{tag}.gdv", work / f"proof-cache-{tag}", bound_names)
        comp.executable()
        if kind == "gdv-bound":
            # As onnxruntime's session holds its initializers, the bound program holds its
            # copy of the weights (and their packed panels): that copy is part of what is
            # loaded; the caller's arrays are dropped, as an ORT user drops the model file.
            bound = comp.bind(**weights)
            del weights

            def call():
                bound(**feed)
        else:
            args = dict(feed, **weights)

            def call():
                comp(**args)

    gc.collect()
    loaded = _status_kb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    for _ in range(WARMUP + runs):
        call()
    peak = _status_kb("VmHWM")
    return {"loaded_mb": loaded / 1024, "peak_above_loaded_mb": (peak - loaded) / 1024}


# --- driver -----------------------------------------------------------------------------------


def _child(argv: list[str], timeout: float) -> dict:
    """Run this script with `argv` in a fresh process; its last stdout line is a JSON object."""
    try:
        p = subprocess.run(
            [sys.executable, __file__, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(os.environ, HF_HUB_OFFLINE="1"),
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return {"error": f"exit status {p.returncode}: " + " | ".join(tail)}
    return json.loads(lines[-1])


def _f(x: Any, fmt: str) -> str:
    return format(x, fmt) if isinstance(x, (int, float)) else "-"


def table(rows: list[dict]) -> str:
    head = (
        "| model | path | imported ops | import s | compile+prove s | passes s | prove s "
        "| obligations | verdict | gdv ms | bound ms | torch ms | ORT ms | gdv/torch "
        "| bound/torch | bound/ORT | bound/ORT near | rounds near/far | max abs diff "
        "| peak MB gdv | bound | torch | ORT | arena MB |"
    )
    ncols = head.count("|") - 1
    out = [head, "|" + "---|" * ncols]
    for r in rows:
        if "error" in r and "paths" not in r:
            why = str(r["error"]).replace("|", "/")[:300]
            out.append(f"| {r['model']} | (all) | error: {why} |" + " |" * (ncols - 3))
            continue
        mem = r.get("memory", {})
        near, far = (r.get("states", {}).get(k, {}) for k in ("near", "far"))
        for path, p in r["paths"].items():
            if "gdv_s" not in p:
                cells = [r["model"], path, _f(p.get("imported_ops"), "d")]
                cells += [_f(p.get("import_s"), ".1f"), _f(p.get("compile_and_prove_s"), ".1f")]
                cells += ["-", "-", _f(p.get("obligations"), "d"), p.get("verdict", "-")]
                cells += ["error: " + p.get("error", "?").replace("|", "/")[:200]]
                out.append("| " + " | ".join(cells) + " |" + " |" * (ncols - len(cells)))
                continue

            def peak(engine: str, mem: dict = mem) -> str:
                return _f(mem.get(engine, {}).get("peak_above_loaded_mb"), ".1f")

            cells = [
                r["model"],
                path,
                _f(p["imported_ops"], "d"),
                _f(p["import_s"], ".1f"),
                _f(p["compile_and_prove_s"], ".1f"),
                _f(p["passes_s"], ".1f"),
                _f(p["prove_s"], ".1f"),
                _f(p["obligations"], "d"),
                p["verdict"],
                _f(p["gdv_s"] * 1e3, ".2f"),
                _f(p["gdv_bound_s"] * 1e3, ".2f") if "gdv_bound_s" in p else "-",
                _f(r["torch_s"] * 1e3, ".2f"),
                _f(r.get("ort_s", 0) * 1e3, ".2f") if "ort_s" in r else "-",
                _f(p["vs_torch"], ".2f") + "x",
                _f(p.get("bound_vs_torch"), ".2f") + "x",
                _f(p.get("bound_vs_ort"), ".2f") + "x",
                _f(near.get(path, {}).get("bound_vs_ort"), ".2f") + "x",
                f"{_f(near.get('rounds', 0), 'd')}/{_f(far.get('rounds', 0), 'd')}",
                _f(p["max_abs_diff"], ".1e"),
                peak(f"gdv:{path}"),
                peak(f"gdv-bound:{path}"),
                peak("torch"),
                peak("ort"),
                _f(p["arena_bytes"] / 2**20, ".1f"),
            ]
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset")
    ap.add_argument("--quick", action="store_true", help="small images and sequences, 5 runs")
    ap.add_argument("--runs", type=int, default=None, help="timed calls per engine (20)")
    ap.add_argument("--out", default=None, help="JSON file (default benchmarks/models.json)")
    ap.add_argument("--model-timeout", type=float, default=1800.0)
    ap.add_argument(
        "--level", type=int, choices=(2, 3), default=2, help="gdv's -O level (3: reassociating)"
    )
    ap.add_argument("--_one", nargs=2, metavar=("MODEL", "WORKDIR"), help=SUPPRESS)
    ap.add_argument("--_memory", nargs=3, metavar=("MODEL", "ENGINE", "DIR"), help=SUPPRESS)
    args = ap.parse_args(argv)
    if args.runs is not None and args.runs < 1:
        ap.error(f"--runs: expected at least 1 timed call per engine, got {args.runs}")
    if args._one is None and args._memory is None:  # the per-model subprocesses inherit it
        os.environ["GDV_MODELS_LEVEL"] = str(args.level)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    runs = args.runs or (5 if args.quick else 20)
    if args._one:
        name, work = args._one
        print(json.dumps(bench_model(name, args.quick, runs, Path(work))), flush=True)
        return 0
    if args._memory:
        name, engine, work = args._memory
        print(json.dumps(measure_memory(name, engine, args.quick, runs, Path(work))), flush=True)
        return 0
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    flags = ["--runs", str(runs)] + (["--quick"] if args.quick else [])
    rows = []
    for name in names:
        with tempfile.TemporaryDirectory(prefix=f"gdv-models-{name}-") as work:
            load_before = os.getloadavg()
            t = time.perf_counter()
            row = _child(["--_one", name, work, *flags], args.model_timeout)
            row.setdefault("model", name)
            if "paths" in row:
                engines = ["torch"] + (["ort"] if "ort_s" in row else [])
                engines += [f"gdv:{p}" for p, r in row["paths"].items() if "gdv_s" in r]
                engines += [f"gdv-bound:{p}" for p, r in row["paths"].items() if "gdv_bound_s" in r]
                row["memory"] = {
                    e: _child(["--_memory", name, e, work, *flags], args.model_timeout)
                    for e in engines
                }
            row["wall_s"] = time.perf_counter() - t
            # The 1-minute load average around the model: other processes on a shared machine
            # slow every engine, gdv's OpenMP threads most.
            row["load_average_1min"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
        rows.append(row)
        brief = {k: v for k, v in row.items() if k not in ("paths",)}
        print(json.dumps(brief), file=sys.stderr, flush=True)
    result = {
        "command": "HF_HUB_OFFLINE=1 python benchmarks/models.py"
        + (f" --models {args.models}" if args.models != ",".join(MODELS) else "")
        + (" --quick" if args.quick else "")
        + (f" --runs {args.runs}" if args.runs else "")
        + (f" --level {args.level}" if args.level != 2 else ""),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "runs": runs,
        "warmup": WARMUP,
        "ort_intra_op_threads": ORT_THREADS,
        "rows": rows,
    }
    out = Path(args.out or HERE / ("models-quick.json" if args.quick else "models.json"))
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(rows))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
