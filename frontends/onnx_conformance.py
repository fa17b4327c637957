"""ONNX's node tests against gdv's ONNX backend: `python -m gdv.frontends.onnx_conformance`.

The cases come from the onnx package's own generators (`collect_testcases`), are written to a
cache directory in ONNX's test-data layout (model.onnx, test_data_set_N/*.pb) and run from
there against `gdv.frontends.onnx.Backend`, compared as `onnx.backend.test.runner` compares:
`numpy.testing.assert_allclose` with the case's rtol (1e-3) and atol (1e-7), plus equal dtypes
and shapes. Every case is counted: `pass`, `fail` (a wrong answer, an error, a crash) or
`unsupported` (gdv refused the model with its `unsupported ONNX op ...` message); a pass says
whether every output equals the expected data bit for bit (`bit_exact`). Each case
also names the op it exercises (`op`), and the results file counts the three outcomes per op
(`ops`) and per op family (`families`, `FAMILY`); `--table` prints the latter as the README's
table.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from gdv.ir.diagnostics import IRError

DEFAULT_RESULTS = "build/onnx_node_results.json"
LAYOUT = 2
"""The cache's layout version: a cache written by another version is written again."""


def generate(cache_dir: Path) -> list[Path]:
    """Write every node test case to `cache_dir/<name>/` (once; later calls reuse it)."""
    import onnx
    from onnx import numpy_helper
    from onnx.backend.test.case.node import collect_testcases

    stamp = cache_dir / f"complete-onnx-{onnx.__version__}-layout{LAYOUT}"
    if not stamp.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cases = collect_testcases(None)
        for case in cases:
            d = cache_dir / case.name
            d.mkdir(exist_ok=True)
            (d / "model.onnx").write_bytes(case.model.SerializeToString())
            (d / "tolerance.json").write_text(json.dumps({"rtol": case.rtol, "atol": case.atol}))
            for k, (ins, outs) in enumerate(case.data_sets or []):
                sd = d / f"test_data_set_{k}"
                sd.mkdir(exist_ok=True)
                for j, a in enumerate(ins):
                    name = case.model.graph.input[j].name
                    _write(sd / f"input_{j}.pb", a, name, numpy_helper)
                for j, a in enumerate(outs):
                    name = case.model.graph.output[j].name
                    _write(sd / f"output_{j}.pb", a, name, numpy_helper)
        stamp.write_text("")
    return sorted(p for p in cache_dir.iterdir() if p.is_dir())


def _write(path: Path, a: Any, name: str, numpy_helper: Any) -> None:
    import onnx

    if isinstance(a, onnx.TensorProto):  # exotic dtypes come as protos already
        path.write_bytes(a.SerializeToString())
        return
    if isinstance(a, np.ndarray | np.generic):
        try:
            t = numpy_helper.from_array(np.asarray(a), name)
        except Exception:  # dtypes onnx cannot write (strings of objects...): marked, counted
            path.with_suffix(".unreadable").write_text(str(np.asarray(a).dtype))
            return
        path.write_bytes(t.SerializeToString())
    else:  # sequences, optionals, maps: not tensors
        path.with_suffix(".unreadable").write_text(type(a).__name__)


def _read(path: Path) -> np.ndarray:
    import onnx
    from onnx import numpy_helper

    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(t)


NARROW_PRECISION = {"float16": 11, "bfloat16": 8}
"""Significand bits of the float dtypes whose rounding alone exceeds the runner's rtol 1e-3."""


def narrow_ulps(ref: np.ndarray, out: np.ndarray) -> float | None:
    """For an f16 or bf16 output: the largest distance from the expected data in units in the
    last place of the expected value (None for other dtypes, or a NaN or infinity mismatch)."""
    p = NARROW_PRECISION.get(ref.dtype.name)
    if p is None:
        return None
    r, o = ref.astype(np.float64), out.astype(np.float64)
    both_nan = np.isnan(r) & np.isnan(o)
    same = (r == o) | both_nan
    if not np.all(np.isfinite(r) | same) or not np.all(np.isfinite(o) | same):
        return None
    tiny = 2.0 ** (-14 if p == 11 else -126)  # smallest normal: the spacing floor
    exp = np.floor(np.log2(np.maximum(np.abs(r), tiny)))
    ulp = 2.0 ** (exp - (p - 1))
    d = np.where(same, 0.0, np.abs(r - o) / ulp)
    return float(d.max()) if d.size else 0.0


def run_case(case_dir: Path) -> dict[str, Any]:
    """{"status": `pass` | `fail` | `unsupported`, "detail": why, "ulps": for a wrong f16 or
    bf16 answer, its distance from the expected data, "bit_exact": for a pass, whether every
    output equals the expected data bit for bit} for one cached case.

    A case whose f16/bf16 results differ from ONNX's expected data under the default import
    (every op rounded to its ONNX type, as IR_SPEC says) runs again with each opt-in mode of
    `import_model` that follows how ONNX's reference computes narrow floats (`_NARROW_MODES`:
    `narrow_in_f32`, everything in f32 and rounded once; `accumulate_in_f32`, numpy's f16/bf16
    matmul and Softmax row sums, summed in f32 and rounded once): it passes only if one
    matches, and the result says which (`mode`, and the default import's distance in
    `ulps_default`). A mode that gives ONNX's expected data bit for bit is preferred to one
    that is only within the tolerance, and `bit_exact` says which of the two it was."""
    import onnx

    from gdv.frontends.onnx import Backend, Unsupported

    tol = json.loads((case_dir / "tolerance.json").read_text())
    model = onnx.load(str(case_dir / "model.onnx"))
    sets = sorted(case_dir.glob("test_data_set_*"))
    try:
        result = _run_sets(Backend.prepare(model, "CPU"), sets, tol)
        if result["status"] == "fail" and result.get("ulps"):
            matched = []
            for mode, what in _NARROW_MODES:
                try:
                    again = _run_sets(Backend.prepare(model, "CPU", **{mode: True}), sets, tol)
                except Exception:  # noqa: BLE001 -- a mode that refuses or fails matches nothing
                    continue
                if again["status"] == "pass":
                    matched.append((not again["bit_exact"], len(matched), mode, what))
            if matched:
                inexact, _, mode, what = min(matched)  # bit for bit first, then in order
                how = "within the tolerance of" if inexact else "bit for bit"
                return {
                    "status": "pass",
                    "mode": mode,
                    "bit_exact": not inexact,
                    "ulps_default": result["ulps"],
                    "detail": f"{what} ({mode}, {how} ONNX's expected data); the default "
                    f"import, rounding every op, is {result['ulps']:g} ulp away",
                }
        return result
    except Unsupported as e:
        return {"status": "unsupported", "detail": e.message}
    except IRError as e:
        return {"status": "fail", "detail": f"error: {e}"}
    except Exception as e:  # a crash is a failure, never a skip
        return {"status": "fail", "detail": f"crash: {type(e).__name__}: {str(e)[:300]}"}


_NARROW_MODES = [
    ("narrow_in_f32", "f16/bf16 computed in f32 and rounded once"),
    (
        "accumulate_in_f32",
        "f16/bf16 matrix products (and f16 Softmax row sums) accumulated in f32 and rounded once",
    ),
]
"""The opt-in imports an f16/bf16 mismatch is retried with (`import_model`), in this order."""


def _run_sets(rep: Any, sets: list[Path], tol: dict) -> dict[str, Any]:
    from gdv.backends.reference import bit_equal

    exact = True
    for sd in sets:
        if list(sd.glob("*.unreadable")):
            kinds = {p.read_text() for p in sd.glob("*.unreadable")}
            return {
                "status": "unsupported",
                "detail": f"test data of kind {sorted(kinds)} is not a tensor gdv reads",
            }
        n_in = len(glob.glob(str(sd / "input_*.pb")))
        n_out = len(glob.glob(str(sd / "output_*.pb")))
        ins = [_read(sd / f"input_{j}.pb") for j in range(n_in)]
        refs = [_read(sd / f"output_{j}.pb") for j in range(n_out)]
        outs = rep.run(ins)
        if len(outs) != len(refs):
            return {"status": "fail", "detail": f"{len(outs)} outputs, expected {len(refs)}"}
        for j, (ref, out) in enumerate(zip(refs, outs, strict=True)):
            out = np.asarray(out)
            if out.dtype != ref.dtype:
                return {
                    "status": "fail",
                    "detail": f"output {j}: dtype {out.dtype}, expected {ref.dtype}",
                }
            if out.shape != ref.shape:
                return {
                    "status": "fail",
                    "detail": f"output {j}: shape {out.shape}, expected {ref.shape}",
                }
            try:
                if ref.dtype.kind in "fc" or ref.dtype.name == "bfloat16":
                    np.testing.assert_allclose(
                        ref.astype(np.float64), out.astype(np.float64),
                        rtol=tol["rtol"], atol=tol["atol"],
                    )  # fmt: skip
                else:
                    np.testing.assert_array_equal(ref, out)
            except AssertionError as e:
                first = " ".join(str(e).strip().splitlines()[:4])[:240]
                ulps = narrow_ulps(ref, out)
                note = f" (at most {ulps:g} ulp of {ref.dtype} apart)" if ulps else ""
                detail = f"output {j}: wrong values{note}: {first}"
                return {"status": "fail", "detail": detail, "ulps": ulps}
            exact = exact and bit_equal(out, ref)
    return {"status": "pass", "detail": "", "bit_exact": exact}


_FAMILY_OPS = {
    "arithmetic": "Add Sub Mul Div Mod Pow Neg Abs Reciprocal Sqrt Exp Log Ceil Floor Round "
    "Sign Clip Max Min Sum Mean Erf IsNaN IsInf Identity",
    "comparison and logic": "Equal Greater Less GreaterOrEqual LessOrEqual And Or Xor Not Where",
    "bitwise": "BitShift BitwiseAnd BitwiseOr BitwiseXor BitwiseNot",
    "trigonometric and hyperbolic": "Sin Cos Tan Asin Acos Atan Sinh Cosh Tanh Asinh Acosh Atanh",
    "activations": "Relu LeakyRelu PRelu Elu Selu Celu Gelu Sigmoid HardSigmoid HardSwish "
    "Softplus Softsign ThresholdedRelu Mish Swish SwiGLU Shrink Softmax LogSoftmax Hardmax "
    "SoftmaxCrossEntropyLoss NegativeLogLikelihoodLoss",
    "reductions and scans": "ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 "
    "ReduceL2 ReduceLogSum ReduceLogSumExp ReduceSumSquare ArgMax ArgMin CumSum CumProd TopK",
    "products and convolutions": "MatMul Gemm MatMulInteger Conv ConvInteger ConvTranspose "
    "DeformConv Einsum QLinearMatMul QLinearConv Det CausalConvWithState",
    "pooling": "MaxPool AveragePool GlobalAveragePool GlobalMaxPool LpPool GlobalLpPool "
    "MaxUnpool MaxRoiPool RoiAlign",
    "normalization": "BatchNormalization LayerNormalization InstanceNormalization "
    "GroupNormalization LpNormalization MeanVarianceNormalization LRN RMSNormalization",
    "shape and layout": "Reshape Transpose Flatten Squeeze Unsqueeze Concat Split Slice Pad "
    "Expand Tile Shape Size DepthToSpace SpaceToDepth Trilu ReverseSequence Compress NonZero "
    "Unique Range OneHot EyeLike ConstantOfShape Constant CenterCropPad Col2Im",
    "gather and scatter": "Gather GatherElements GatherND Scatter ScatterElements ScatterND "
    "TensorScatter",
    "resize and sampling": "Resize Upsample GridSample AffineGrid",
    "casts and quantization": "Cast CastLike QuantizeLinear DequantizeLinear "
    "DynamicQuantizeLinear BitCast",
    "control flow": "If Loop Scan",
    "recurrent": "RNN GRU LSTM",
    "attention": "Attention FlexAttention LinearAttention RotaryEmbedding",
    "detection and images": "NonMaxSuppression ImageDecoder",
    "random": "RandomNormal RandomUniform RandomNormalLike RandomUniformLike Bernoulli "
    "Multinomial Dropout",
    "signal": "DFT STFT MelWeightMatrix HannWindow HammingWindow BlackmanWindow",
    "sequences and optionals": "SequenceAt SequenceConstruct SequenceEmpty SequenceErase "
    "SequenceInsert SequenceLength SequenceMap SplitToSequence ConcatFromSequence Optional "
    "OptionalHasElement OptionalGetElement",
    "training": "Adagrad Adam Momentum Gradient",
    "strings and classical ML": "StringNormalizer StringConcat StringSplit RegexFullMatch "
    "TfIdfVectorizer LabelEncoder TreeEnsemble TreeEnsembleClassifier TreeEnsembleRegressor "
    "ArrayFeatureExtractor Binarizer Imputer Normalizer OneHotEncoder Scaler ZipMap",
}
FAMILY = {op: family for family, ops in _FAMILY_OPS.items() for op in ops.split()}
"""The op family each ONNX op type is counted under (`other` when not listed), for the
results file's per-family table."""


def case_op(case_dir: Path) -> str:
    """The ONNX op a node test exercises: its model's one op type; for a function-expanded
    case (`..._expanded...`, several nodes) that of the case it expands; else `(several)`."""
    import onnx

    try:
        model = onnx.load(str(case_dir / "model.onnx"), load_external_data=False)
    except Exception:  # noqa: BLE001 -- an unreadable model is counted under `(unreadable)`
        return "(unreadable)"
    ops = {n.op_type for n in model.graph.node}
    if len(ops) == 1:
        return next(iter(ops))
    name = case_dir.name
    if "_expanded" in name:
        base = case_dir.with_name(name[: name.index("_expanded")])
        if base != case_dir and (base / "model.onnx").exists():
            return case_op(base)
    return "(several)"


def tally(cases: dict[str, dict[str, Any]], key) -> dict[str, dict[str, int]]:
    """Pass, fail and unsupported counts of `cases` grouped by `key(name, result)`."""
    out: dict[str, dict[str, int]] = {}
    for name, r in cases.items():
        row = out.setdefault(key(name, r), {"pass": 0, "fail": 0, "unsupported": 0})
        row[r["status"]] += 1
    return dict(sorted(out.items()))


def family_table(report: dict[str, Any]) -> str:
    """The per-family counts as a Markdown table (the README's), most cases first."""
    rows = sorted(report["families"].items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    lines = ["| op family | cases | pass | fail | refused | pass % |", "|---|---|---|---|---|---|"]
    for family, c in rows:
        n = sum(c.values())
        pct = 100.0 * c["pass"] / n if n else 0.0
        lines.append(
            f"| {family} | {n} | {c['pass']} | {c['fail']} | {c['unsupported']} | {pct:.0f}% |"
        )
    c = report["counts"]
    pct = 100.0 * c["pass"] / report["total"] if report["total"] else 0.0
    lines.append(
        f"| **all** | {report['total']} | {c['pass']} | {c['fail']} | {c['unsupported']} | "
        f"{pct:.1f}% |"
    )
    return "\n".join(lines)


def run_all(cache_dir: Path, results_path: Path, only: str | None = None) -> dict[str, Any]:
    """Run every cached case; write and return {"counts", "cases": {name: {status, detail}}}."""
    cases = generate(cache_dir)
    results: dict[str, dict[str, str]] = {}
    start = time.perf_counter()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for d in cases:
            if only and only not in d.name:
                continue
            results[d.name] = {**run_case(d), "op": case_op(d)}
    counts = Counter(r["status"] for r in results.values())
    report = {
        "counts": {k: counts.get(k, 0) for k in ("pass", "fail", "unsupported")},
        "families": tally(results, lambda _, r: FAMILY.get(r["op"], "other")),
        "ops": tally(results, lambda _, r: r["op"]),
        "total": len(results),
        "seconds": round(time.perf_counter() - start, 1),
        "cases": results,
    }
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps(report, indent=1, sort_keys=True))
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache-dir", default="build/onnx_node_cases")
    p.add_argument(
        "--results", default=os.environ.get("GDV_ONNX_RESULTS", DEFAULT_RESULTS),
        help=f"results file (default $GDV_ONNX_RESULTS or {DEFAULT_RESULTS})",
    )  # fmt: skip
    p.add_argument("--only", help="run the cases whose name contains this")
    p.add_argument("-v", "--verbose", action="store_true", help="print every failure")
    p.add_argument(
        "--table", action="store_true", help="print the per-family table (Markdown) at the end"
    )
    args = p.parse_args(argv)
    report = run_all(Path(args.cache_dir), Path(args.results), args.only)
    for name, r in sorted(report["cases"].items()):
        if r["status"] == "fail" or (args.verbose and r["status"] != "pass"):
            print(f"{r['status']}: {name}: {r['detail']}")
    if args.table:
        print(family_table(report))
    c = report["counts"]
    print(
        f"{report['total']} node tests: {c['pass']} pass, {c['fail']} fail, "
        f"{c['unsupported']} unsupported ({report['seconds']} s); results in {args.results}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
