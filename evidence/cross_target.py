"""Evidence of one program compiled for several targets (issue 20, item 4):
`gdv compile FILE --target c --target triton --emit-evidence DIR` writes it and
`gdv evidence verify DIR` re-checks it.

A cross-target bundle (`schema_version` `cross-target-1`, `schema/manifest-cross-target-1.json`)
holds:

- `targets/<name>/`: each target's compile as an ordinary evidence bundle of its own (schema 2:
  its stages, certificates, obligations, artifact, conformance against the reference backend),
  every one compiled from the same source by that target's pipeline;
- `manifest.json`: the source's hash; per target its bundle, the hash of that bundle's
  manifest, its artifact's files (paths from the top, with their hashes), its capability
  descriptor and its pipeline; and the cross-target table: on the recorded seeds, every target
  against the reference backend running the source, and every pair of targets against each
  other, with the largest absolute and ulp differences per output and a verdict.

A comparison requires bit-exact outputs when both sides keep IR_SPEC's order and the
reference's transcendentals (the reference backend always does; a target does when its
pipeline made no `real` claim and either its transcendentals are the reference's or the final
stage runs none: every other op is IEEE-exact in IR order); otherwise the two
may differ by at most the sum of their error bounds (each side's rigorous bound on inputs
`random_inputs` draws, recorded with the comparison). `agree`: bit for bit on every seed;
`close`: not bit for bit but within the bounds where bounds are allowed; else `disagree`.

The checker verifies every target's bundle in full (each its own chain of proofs), checks that
they compile one source (the same stage 0), that the top manifest's entries are those bundles',
and reruns every target's final stage on the recorded seeds to recompute the table, which must
equal the recorded one and hold no `disagree`. A target that cannot run here (its tools
missing) fails the check, as a C target without a C compiler fails the conformance check of an
ordinary bundle: nothing unchecked verifies.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gdv.evidence.bundle import (
    CONFORMANCE_SEEDS,
    install_bundle,
    manifest_bytes,
    sha256,
    tool_versions,
    validate_manifest,
)
from gdv.ir.diagnostics import IRError

if TYPE_CHECKING:
    from gdv.driver import Compilation
    from gdv.evidence.policy import Policy
    from gdv.ir.core import Module

SCHEMA_VERSION = "cross-target-1"
REFERENCE = "reference"
"""The name of the reference backend's row and column in the table (it runs the source)."""


# --- comparing outputs -----------------------------------------------------------------------


def _float_bits(dtype: np.dtype) -> type | None:
    """The unsigned integer type of a float dtype's bits, or None for other dtypes."""
    if dtype.name in ("float16", "bfloat16", "float32", "float64"):
        return {2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]
    return None


def _ordered(a: np.ndarray, bits: type) -> np.ndarray:
    """Each float as a Python integer in the order of the floats: adjacent floats are one
    apart, -0 and +0 are both 0 (Python integers: no overflow for f64)."""
    u = np.ascontiguousarray(a).view(bits).astype(object)
    sign = 1 << (8 * np.dtype(bits).itemsize - 1)
    return np.where(u >= sign, -(u - sign), u)


def difference(a: np.ndarray, b: np.ndarray) -> tuple[float | None, int | None]:
    """The largest absolute difference of two outputs of one dtype and shape, and the largest
    distance in units in the last place (floats: representable values between them; integers
    and booleans: the difference). Where both are NaN they agree; a NaN against a number gives
    None for both (no finite difference)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.size == 0:
        return 0.0, 0
    bits = _float_bits(a.dtype)
    if bits is None:
        d = np.abs(a.astype(object) - b.astype(object))
        return float(d.max()), int(d.max())
    x, y = a.astype(np.float64), b.astype(np.float64)
    xn, yn = np.isnan(x), np.isnan(y)
    if (xn != yn).any():
        return None, None
    keep = ~xn
    if not keep.any():
        return 0.0, 0
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.where(x == y, 0.0, np.abs(x - y))[keep]
    ulps = np.abs(_ordered(a, bits) - _ordered(b, bits))[keep]
    return float(d.max()), int(ulps.max())


def compare(
    a: str,
    b: str,
    runs: list[tuple[list[np.ndarray], list[np.ndarray]]],
    exact: bool,
    limits: list[float] | None,
) -> dict:
    """The comparison of side `a` with side `b` over the seeds' outputs `runs` (one pair of
    output lists per seed): `exact` requires bit-exact outputs, else each output may differ by
    its `limits` entry (None: no bound, so any difference disagrees)."""
    from gdv.backends import reference

    n = len(runs[0][0]) if runs else 0
    worst: list[list] = [[0.0, 0] for _ in range(n)]
    bit_exact = True
    for want, got in runs:
        for k, (x, y) in enumerate(zip(want, got, strict=True)):
            if reference.bit_equal(x, y):
                continue
            bit_exact = False
            d, u = difference(x, y)
            for i, v in enumerate((d, u)):
                if worst[k][i] is not None:
                    worst[k][i] = None if v is None else max(worst[k][i], v)
    outputs = [{"max_abs_diff": d, "max_ulp": u} for d, u in worst]
    if bit_exact:
        verdict = "agree"
    elif (
        not exact
        and limits is not None
        and all(
            o["max_abs_diff"] is not None and lim is not None and o["max_abs_diff"] <= lim
            for o, lim in zip(outputs, limits, strict=True)
        )
    ):
        verdict = "close"
    else:
        verdict = "disagree"
    return {
        "a": a,
        "b": b,
        "required": "bit-exact" if exact else "within-bounds",
        "limits": None if exact else limits,
        "outputs": outputs,
        "verdict": verdict,
    }


# --- the table -------------------------------------------------------------------------------


def _bounds(module: Module, target: str) -> list[float | None] | None:
    """Each output's rigorous absolute error bound when `module` runs on `target`, for inputs
    `random_inputs` draws (None where the analysis has none)."""
    from gdv.backends.reference.inputs import DEFAULT_FLOAT_RANGE
    from gdv.validate.bounds import analyze

    try:
        outs = analyze(module, DEFAULT_FLOAT_RANGE, target=target).outputs
    except IRError:
        return None
    return [o.abs if o.abs is not None and math.isfinite(o.abs) else None for o in outs]


def _transcendental(module: Module) -> bool:
    """Whether any function of `module` (kernel bodies included) runs a transcendental op,
    whose last bits a target need not share with the reference (IR_SPEC.md section 3)."""
    from gdv.ir.ops.elementwise import TRANSCENDENTAL

    return any(op.name in TRANSCENDENTAL for f in module.functions for op in f.ops)


def _sum(a: list | None, b: list | None) -> list[float | None] | None:
    if a is None or b is None:
        return None
    return [None if x is None or y is None else x + y for x, y in zip(a, b, strict=True)]


def cross_conformance(
    source: Module,
    finals: dict[str, tuple[Module, bool]],
    seeds: tuple[int, ...] = CONFORMANCE_SEEDS,
    runners: dict[str, Any] | None = None,
    allow_fallback: dict[str, bool] | None = None,
) -> dict:
    """The cross-target table: `finals` maps each target to its final module and whether its
    pipeline kept IR order (made no `real` claim). Runs the source on the reference backend
    and every final module on its target on each seed's inputs, then compares every target
    with the reference and every pair of targets (module docstring). `runners` are the
    targets' executables where the caller has them. A target that cannot run gives the table
    status `unavailable` with the reason."""
    from gdv.backends import reference
    from gdv.backends.targets import get_target

    runners = dict(runners or {})
    allow_fallback = allow_fallback or {}
    names = list(finals)
    try:
        for name in names:
            if name not in runners:
                runners[name] = get_target(name).executable(
                    finals[name][0], allow_fallback.get(name, False)
                )
        outs: dict[str, list[list[np.ndarray]]] = {REFERENCE: [], **{n: [] for n in names}}
        for seed in seeds:
            inputs = reference.random_inputs(source, seed)
            outs[REFERENCE].append(reference.run(source, inputs))
            for name in names:
                outs[name].append(runners[name](inputs))
    except IRError as e:
        return {"seeds": list(seeds), "status": "unavailable", "reason": e.message, "pairs": []}
    # Each side: whether its outputs are the reference's bit for bit by rule, and its bounds.
    exact = {REFERENCE: True}
    bounds = {REFERENCE: _bounds(source, REFERENCE)}
    for name in names:
        module, keeps_order = finals[name]
        same_functions = get_target(name).reference_transcendentals or not _transcendental(module)
        exact[name] = keeps_order and same_functions
        # A pipeline that keeps IR order computes the source's values with the target's
        # functions (its steps are proved bit for bit), so the source's bound on the target
        # holds; one that reorders has the final stage's own bound.
        bounds[name] = _bounds(source if keeps_order else module, name)
    sides = [REFERENCE, *names]
    pairs = []
    for i, a in enumerate(sides):
        for b in sides[i + 1 :]:
            both = exact[a] and exact[b]
            runs = list(zip(outs[a], outs[b], strict=True))
            pairs.append(compare(a, b, runs, both, None if both else _sum(bounds[a], bounds[b])))
    bad = [p for p in pairs if p["verdict"] == "disagree"]
    status = "disagree" if bad else "agree"
    if not bad and any(p["verdict"] == "close" for p in pairs):
        status = "close"
    return {"seeds": list(seeds), "status": status, "reason": "", "pairs": pairs}


# --- writing ---------------------------------------------------------------------------------


def target_bundle(name: str) -> str:
    """Where target `name`'s bundle lies inside a cross-target bundle."""
    return f"targets/{name}"


def write_cross_target_bundle(
    comps: list[Compilation], directory: str | os.PathLike, sign_key: str | None = None
) -> Path:
    """Write the cross-target bundle of the compiles `comps` (one per target, of one source) to
    `directory` (replacing an earlier bundle there, never another directory), its manifest
    signed with the Ed25519 private key in `sign_key` when given."""
    from gdv.evidence.bundle import write_bundle

    names = [c.options.target for c in comps]
    if len(set(names)) != len(names) or len({c.source_text for c in comps}) != 1:
        raise IRError("a cross-target bundle needs distinct targets compiling one source")
    signer = None
    if sign_key is not None:
        from gdv.evidence.signing import load_private_key

        signer = load_private_key(sign_key)

    def fill(tmp: Path) -> None:
        entries = []
        for comp in comps:
            rel = target_bundle(comp.options.target)
            (tmp / "targets").mkdir(exist_ok=True)
            write_bundle(comp, tmp / rel)
            entries.append(
                target_entry(tmp, rel, json.loads((tmp / rel / "manifest.json").read_bytes()))
            )
        first = comps[0]
        finals = {c.options.target: (c.module, _keeps_order(c)) for c in comps}
        table = cross_conformance(
            first.source,
            finals,
            runners={c.options.target: c.executable() for c in comps},
        )
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "source": {
                "file": os.path.basename(first.source.filename),
                "sha256": sha256(first.source_text),
            },
            "targets": entries,
            "cross_target": table,
            "tools": tool_versions(),
            "verdict": _verdict([c.verdict for c in comps]),
        }
        validate_manifest(manifest)
        data = manifest_bytes(manifest)
        (tmp / "manifest.json").write_bytes(data)
        if signer is not None:
            from gdv.evidence.signing import sign

            (tmp / "manifest.sig").write_text(sign(signer, data))

    return install_bundle(directory, fill)


def _keeps_order(comp: Compilation) -> bool:
    return not any(o.theory == "real" for r in comp.records for o in r.obligations)


def _verdict(verdicts: list[str]) -> str:
    for v in ("refuted", "unknown"):
        if v in verdicts:
            return v
    return "proved"


def target_entry(root: Path, rel: str, sub: dict) -> dict:
    """The top manifest's entry for the target bundle at `rel` whose manifest is `sub`."""
    return {
        "name": sub["target"]["name"],
        "bundle": rel,
        "manifest_sha256": sha256((root / rel / "manifest.json").read_bytes()),
        "artifact": {
            "kind": sub["artifact"]["kind"],
            "files": [
                {"file": f"{rel}/{f['file']}", "sha256": f["sha256"]}
                for f in sub["artifact"]["files"]
            ],
        },
        "capabilities": sub["target"]["capabilities"],
        "pipeline": sub["pipeline"],
        "keeps_ir_order": all(s["theory"] == "fp" for s in sub["stages"]),
        "obligations": len(sub["obligations"]),
        "verdict": sub["verdict"],
    }


# --- checking --------------------------------------------------------------------------------


def verify_cross_target(
    root: Path,
    manifest: dict,
    policy: Policy,
    passed,
    failed,
    verify_target,
) -> None:
    """Every check of a cross-target bundle (module docstring), reporting through `passed` and
    `failed` (which raises); `verify_target(path)` verifies one target's bundle and returns
    its first failure ("" when it verifies). The cheap checks come first; the bundle verifies
    only when all of them pass."""
    from gdv.evidence.bundle import read_manifest
    from gdv.evidence.verify import check_files

    entries = manifest["targets"]
    names = [t["name"] for t in entries]
    if len(set(names)) != len(names) or len(names) < 2:
        failed("targets", f"targets {names}: a cross-target bundle has two or more, each once")
    listed = [(f"bundle of {t['name']}", _manifest_file(t)) for t in entries]
    listed += [(f"artifact of {t['name']}", f) for t in entries for f in t["artifact"]["files"]]
    check_files(root, listed, passed, failed)
    subs = {}
    stage0 = None
    for t in entries:
        where = f"target {t['name']} ({t['bundle']})"
        if t["bundle"] != target_bundle(t["name"]):
            failed("targets", f"{where}: its bundle lies elsewhere than {target_bundle(t['name'])}")
        try:
            sub = read_manifest(root / t["bundle"])
        except IRError as e:
            failed("targets", f"{where}: {e.message}")
        if target_entry(root, t["bundle"], sub) != t:
            failed("targets", f"{where}: the entry is not what its bundle's manifest records")
        if sub["source"]["sha256"] != manifest["source"]["sha256"]:
            failed("targets", f"{where}: compiles another source than the recorded one")
        text = (root / t["bundle"] / sub["stages"][0]["file"]).read_bytes()
        if stage0 is not None and text != stage0:
            failed("targets", f"{where}: its stage 0 is not the other targets' program")
        stage0 = text
        seeds = [r["seed"] for r in sub["conformance"]["results"]]
        if seeds != manifest["cross_target"]["seeds"]:
            failed(
                "targets",
                f"{where}: its conformance ran on seeds {seeds}, the cross-target table on "
                f"{manifest['cross_target']['seeds']}",
            )
        subs[t["name"]] = sub
    wanted = _verdict([t["verdict"] for t in entries])
    if manifest["verdict"] != wanted or wanted != "proved":
        failed("verdict", f"the verdict is {manifest['verdict']} (targets: {wanted})")
    passed(
        "targets",
        f"{len(entries)} target bundle(s) ({', '.join(names)}) of one source, their entries "
        "equal to their manifests",
    )
    _table(root, manifest, subs, passed, failed)
    for t in entries:
        bad = verify_target(root / t["bundle"])
        if bad:
            failed(f"target {t['name']}", f"{t['bundle']}: {bad}")
        passed(f"target {t['name']}", f"{t['bundle']} verifies")
    del policy  # each target's bundle is checked against it


def _manifest_file(t: dict) -> dict:
    return {"file": f"{t['bundle']}/manifest.json", "sha256": t["manifest_sha256"]}


def _table(root: Path, manifest: dict, subs: dict, passed, failed) -> None:
    """Rerun every target's final stage on the recorded seeds: the table must be the
    recorded one, with no `disagree` and nothing unavailable."""
    from gdv.api import parse

    recorded = manifest["cross_target"]
    if recorded["status"] != "agree" and recorded["status"] != "close":
        failed(
            "cross-target",
            f"the recorded table is {recorded['status']}: {_first_bad(recorded)}",
        )
    names = [t["name"] for t in manifest["targets"]]
    first = subs[names[0]]
    try:
        src_file = first["stages"][0]["file"]
        source = parse((root / target_bundle(names[0]) / src_file).read_text(), src_file)
        finals = {}
        fallback = {}
        for name in names:
            sub = subs[name]
            last = sub["stages"][-1]["file"]
            finals[name] = (
                parse((root / target_bundle(name) / last).read_text(), last),
                all(s["theory"] == "fp" for s in sub["stages"]),
            )
            fallback[name] = bool(sub["artifact"].get("fallbacks"))
    except (IRError, UnicodeDecodeError) as e:
        failed("cross-target", f"a stage does not parse: {e}")
    again = cross_conformance(source, finals, tuple(recorded["seeds"]), allow_fallback=fallback)
    if again["status"] == "unavailable":
        failed(
            "cross-target",
            f"cannot rerun the targets here: {again['reason']} (a target whose tools are "
            "missing is not checked, so the bundle does not verify)",
        )
    if again != recorded:
        diff = _first_difference(recorded, again)
        failed(
            "cross-target",
            f"rerunning the recorded seeds does not give the recorded table: {diff}",
        )
    shown = ", ".join(f"{p['a']}~{p['b']} {p['verdict']}" for p in again["pairs"])
    passed("cross-target", f"{again['status']} on seeds {again['seeds']}: {shown}")


def _first_bad(table: dict) -> str:
    if table["status"] == "unavailable":
        return table["reason"]
    bad = next((p for p in table["pairs"] if p["verdict"] == "disagree"), None)
    return "" if bad is None else f"{bad['a']} and {bad['b']} disagree"


def _first_difference(recorded: dict, again: dict) -> str:
    if recorded.get("seeds") != again.get("seeds"):
        return "the seeds differ"
    rp, ap = recorded.get("pairs", []), again.get("pairs", [])
    if [(p["a"], p["b"]) for p in rp] != [(p["a"], p["b"]) for p in ap]:
        return "the pairs compared differ"
    for r, a in zip(rp, ap, strict=True):
        if r != a:
            return f"{a['a']} against {a['b']}: recorded {_row(r)}, rerun {_row(a)}"
    return f"status recorded {recorded.get('status')!r}, rerun {again.get('status')!r}"


def _row(p: dict) -> str:
    diffs = [(o["max_abs_diff"], o["max_ulp"]) for o in p["outputs"]]
    return f"{p['verdict']} ({p['required']}, max |diff|, ulp per output {diffs})"


# --- reading ---------------------------------------------------------------------------------


def table_rows(manifest: dict) -> tuple[list[str], dict[tuple[str, str], dict]]:
    """The sides of the cross-target table (the reference first) and each pair's entry, under
    both orders of its names."""
    sides = [REFERENCE, *[t["name"] for t in manifest["targets"]]]
    cells = {}
    for p in manifest["cross_target"]["pairs"]:
        cells[p["a"], p["b"]] = cells[p["b"], p["a"]] = p
    return sides, cells


def cell_text(p: dict) -> str:
    """One cell: the verdict, the largest absolute and ulp differences over the outputs."""
    ds = [o["max_abs_diff"] for o in p["outputs"]]
    us = [o["max_ulp"] for o in p["outputs"]]
    d = "nan" if None in ds else f"{max(ds, default=0.0):.3g}"
    u = "nan" if None in us else f"{max(us, default=0)}"
    return f"{p['verdict']} |diff| {d} ulp {u}"


def show_cross_target(root: Path, manifest: dict) -> str:
    """A terminal summary of a cross-target bundle, with its table."""
    lines = [
        f"cross-target bundle {root}: verdict {manifest['verdict']}",
        f"  source {manifest['source']['file']}  sha256 {manifest['source']['sha256'][:16]}",
    ]
    for t in manifest["targets"]:
        files = ", ".join(f["file"] for f in t["artifact"]["files"])
        lines.append(
            f"  target {t['name']}: {t['bundle']}/ ({t['obligations']} obligations "
            f"{t['verdict']}; artifact {files})"
        )
    table = manifest["cross_target"]
    lines.append(f"  cross-target {table['status']} on seeds {table['seeds']}")
    sides, cells = table_rows(manifest)
    width = max(len(s) for s in sides)
    lines.append(f"    {'':<{width}}  " + " | ".join(sides))
    for a in sides:
        row = []
        for b in sides:
            row.append("-" if a == b else cell_text(cells[a, b]) if (a, b) in cells else "?")
        lines.append(f"    {a:<{width}}  " + " | ".join(row))
    return "\n".join(lines) + "\n"


def is_cross_target_manifest(manifest: Any) -> bool:
    return isinstance(manifest, dict) and manifest.get("schema_version") == SCHEMA_VERSION
