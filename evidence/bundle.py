"""Writing and reading evidence bundles (DESIGN.md, Evidence).

A bundle is a directory: `manifest.json` (deterministic, checked against
`schema/manifest-<SCHEMA_VERSION>.json` on write and on read), `ir/NN-<stage>.gdv` (each
stage's canonical text), `obligations/*.smt2` (each obligation's queries), `artifact/` (what the
target produced; for `reference`, the final stage's text, which the numpy backend executes),
`reports/` (cost and execution reports, each under its own schema), `manifest.sig` when signed,
and `timings.json`. `timings.json` and `reports/compile-cost.json` (`MEASURED_FILES`) are the
only files that change from run to run and the only ones no hash covers (a bundle written with
a measured `execution` report is a measurement, and its manifest hashes it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import platform
import re
import shutil
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gdv import __version__
from gdv.ir.diagnostics import IRError, Loc, printable
from gdv.ir.printer import print_module

if TYPE_CHECKING:
    from gdv.driver import Compilation

SCHEMA_VERSION = "2"
"""2 (gdv 0.3, issue 15): each stage names its certificate and each obligation its pair."""
CONFORMANCE_SEEDS = (0, 1, 2)
"""Seeds of the inputs on which the final module and the source must agree bit for bit."""
SCHEMA_DIR = Path(__file__).resolve().parent / "schema"
MEASURED_FILES = ("timings.json", "reports/compile-cost.json")
"""The bundle's files that hold compile-time measurements: no hash covers them."""


class EvidenceError(IRError):
    """A bundle, key or policy that cannot be read, or a missing optional package: an input
    error (exit status 3), never a traceback."""

    def __init__(self, message: str) -> None:
        super().__init__(message)

    def __str__(self) -> str:
        return f"gdv: error: {self.message}"


def require(module: str, purpose: str) -> Any:
    """Import an optional package of the `evidence` extra, or fail naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError:
        package = {"cvc5": "cvc5", "cryptography": "cryptography"}.get(
            module.split(".")[0], module.split(".")[0]
        )
        raise EvidenceError(
            f"{purpose} needs the {package!r} package: pip install 'gdv[evidence]'"
        ) from None


def sha256(data: bytes) -> str:
    """Hex SHA-256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def slug(text: str) -> str:
    """`text` as a file-name fragment."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:80]


@cache
def schema(version: str = SCHEMA_VERSION) -> dict:
    """The JSON Schema of `manifest.json` for `version`."""
    path = SCHEMA_DIR / f"manifest-{version}.json"
    if not path.is_file():
        raise EvidenceError(f"unknown manifest schema version {version!r}")
    return json.loads(path.read_text())


def validate_manifest(manifest: Any) -> None:
    """Raise EvidenceError unless `manifest` conforms to the schema of its version."""
    jsonschema = require("jsonschema", "checking manifest.json against its schema")
    if not isinstance(manifest, dict):
        raise EvidenceError("manifest.json: not a JSON object")
    version = manifest.get("schema_version")
    if not isinstance(version, str):
        raise EvidenceError("manifest.json: no schema_version")
    validator = jsonschema.Draft202012Validator(schema(version))
    errors = sorted(validator.iter_errors(manifest), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.absolute_path) or "(top)"
        raise EvidenceError(
            f"manifest.json does not follow schema {version}: at {where}: {e.message[:300]}"
        )


@cache
def report_schema(name: str) -> dict:
    """The JSON Schema `schema/<name>.json` of a report (`reports-compile-cost-1`, ...)."""
    path = SCHEMA_DIR / f"{name}.json"
    if not re.fullmatch(r"reports-[a-z][a-z-]*-[0-9]+", name) or not path.is_file():
        raise EvidenceError(f"unknown report schema {name!r}")
    return json.loads(path.read_text())


def validate_report(name: str, report: Any, file: str = "report") -> None:
    """Raise EvidenceError unless `report` conforms to the report schema `name`."""
    jsonschema = require("jsonschema", "checking a report against its schema")
    validator = jsonschema.Draft202012Validator(report_schema(name))
    errors = sorted(validator.iter_errors(report), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.absolute_path) or "(top)"
        raise EvidenceError(f"{file} does not follow schema {name}: at {where}: {e.message[:300]}")


def manifest_bytes(manifest: dict) -> bytes:
    """The canonical serialisation (sorted keys, two-space indent, final newline)."""
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()


def read_manifest(directory: str | os.PathLike) -> dict:
    """The schema-checked manifest of the bundle in `directory`."""
    path = Path(directory) / "manifest.json"
    if not path.is_file():
        raise EvidenceError(f"{printable(str(directory), 200)}: no manifest.json (not a bundle)")
    try:
        manifest = json.loads(path.read_bytes())
    except ValueError as e:
        raise EvidenceError(f"manifest.json is not JSON: {e}") from None
    validate_manifest(manifest)
    return manifest


def write_bundle(
    comp: Compilation,
    directory: str | os.PathLike,
    sign_key: str | None = None,
    execution: dict | None = None,
) -> Path:
    """Write the bundle of `comp` to `directory` (replacing an earlier bundle there, never
    another directory), signed with the Ed25519 private key in `sign_key` when given, with the
    measured `execution` report (`gdv.evidence.reports.execution`) when given."""
    signer = None
    if sign_key is not None:
        from gdv.evidence.signing import load_private_key

        signer = load_private_key(sign_key)

    def fill(tmp: Path) -> None:
        manifest = build_manifest(comp, tmp)
        manifest["reports"] = write_reports(tmp, comp, execution)
        validate_manifest(manifest)
        data = manifest_bytes(manifest)
        (tmp / "manifest.json").write_bytes(data)
        if signer is not None:
            from gdv.evidence.signing import sign

            (tmp / "manifest.sig").write_text(sign(signer, data))
        timings = {
            "compile_seconds": comp.seconds,
            "prove_seconds": comp.prove_seconds,
            "passes": {r.name: r.seconds for r in comp.records},
            "obligations": {o.obligation.id: o.seconds for o in comp.outcomes},
            # Whether a proof came from the cache changes from run to run: it lives here.
            "from_cache": sorted(o.obligation.id for o in comp.outcomes if o.cached),
        }
        (tmp / "timings.json").write_text(json.dumps(timings, indent=2, sort_keys=True) + "\n")

    return install_bundle(directory, fill)


def install_bundle(directory: str | os.PathLike, fill: Callable[[Path], None]) -> Path:
    """`fill` writes a bundle into a fresh folder beside `directory`, which then replaces
    `directory` (an earlier bundle, never another folder); nothing is left on failure."""
    target = Path(directory)
    if target.exists() and not (target / "manifest.json").is_file():
        raise IRError(
            f"{printable(str(target), 200)} exists and is not an evidence bundle; not "
            "overwriting it",
            Loc(str(target), 1, 1),
        )
    parent = target.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".gdv-evidence-", dir=parent))
    try:
        fill(tmp)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def write_reports(root: Path, comp: Compilation, execution: dict | None = None) -> list[dict]:
    """Write `reports/` (`gdv.evidence.reports`: compile cost, predicted cost, and the measured
    execution when given), each checked against its schema; their manifest entries."""
    from gdv.evidence import reports

    made = {
        "compile-cost": reports.compile_cost(comp),
        "predicted-cost": reports.predicted_cost(
            comp.module, capabilities(comp.options.target), comp.source_text
        ),
    }
    if execution is not None:
        made["execution"] = execution
    (root / "reports").mkdir(exist_ok=True)
    entries = []
    for name, report in made.items():
        schema_name = reports.schema_name(name)
        rel = f"reports/{name}.json"
        validate_report(schema_name, report, rel)
        data = (json.dumps(report, indent=1, sort_keys=True) + "\n").encode()
        (root / rel).write_bytes(data)
        digest = None if name in reports.MEASURED else sha256(data)
        entries.append({"name": name, "schema": schema_name, "file": rel, "sha256": digest})
    return entries


def capabilities(target: str) -> dict:
    """The target's capability descriptor (`gdv.backends.capabilities`, one schema for every
    target): the ops and dtypes it executes, and for `c` the machine and the compiler."""
    from gdv.backends.capabilities import descriptor

    return descriptor(target)


def tool_versions() -> dict:
    """Versions of every tool a bundle's contents depend on."""
    import sympy
    import z3

    tools = {
        "gdv": __version__,
        "python": platform.python_version(),
        "z3": z3.get_version_string(),
        "numpy": np.__version__,
        "sympy": sympy.__version__,
    }
    return tools


def stage_theories(comp: Compilation) -> dict[str, str]:
    """The theory under which each stage means what the previous one does: `real` for a pass
    that made `real` claims (fast-math), else `fp` (bit-exact)."""
    real = {r.name for r in comp.records if any(o.theory == "real" for o in r.obligations)}
    return {name: ("real" if name in real else "fp") for name, _ in comp.stages}


def build_manifest(comp: Compilation, root: Path) -> dict:
    """Write the bundle's files under `root` and return its manifest."""
    import z3

    (root / "ir").mkdir()
    (root / "obligations").mkdir()
    (root / "certificates").mkdir()
    (root / "artifact").mkdir()
    theories = stage_theories(comp)
    stages = []
    records = [None, *comp.records]
    for n, ((name, module), record) in enumerate(zip(comp.stages, records, strict=True)):
        text = print_module(module).encode()
        rel = f"ir/{n:02d}-{slug(name)}.gdv"
        (root / rel).write_bytes(text)
        entry = {
            "pass": name,
            "file": rel,
            "sha256": sha256(text),
            "theory": theories[name],
            "certificate": _certificate(root, n, record),
        }
        if record is not None and record.bound_change is not None:
            # A step claimed over the reals: every output's error bound before and after it
            # (`gdv.validate.bounds.bound_change`), which the checker recomputes.
            entry["bound_change"] = record.bound_change
        stages.append(entry)
    stages[0]["theory"] = "fp"
    obligations = []
    solver = {"name": "z3", "version": z3.get_version_string()}
    for n, out in enumerate(comp.outcomes):
        obligations.append(_obligation_entry(root, n, out, solver))
    opts = comp.options
    artifact = _write_artifact(root, comp)
    return {
        "schema_version": SCHEMA_VERSION,
        "source": {
            "file": os.path.basename(comp.source.filename),
            "sha256": sha256(comp.source_text),
        },
        "target": {"name": opts.target, "capabilities": capabilities(opts.target)},
        "pipeline": {
            "level": opts.level,
            "fast_math": opts.fast_math,
            "reassociate": opts.reassociate,
            "disabled": sorted(opts.disable),
            "external_passes": list(opts.external_passes),
            "passes": [r.name for r in comp.records],
            **({"bound": sorted(opts.bound)} if opts.bound else {}),
        },
        "stages": stages,
        "obligations": obligations,
        "bounds": error_bounds(comp.source, opts.target),
        "conformance": conformance(
            comp.source,
            comp.module,
            exact=all(s["theory"] == "fp" for s in stages),
            target=opts.target,
            allow_fallback=bool(artifact.get("fallbacks")),
            runner=comp.executable(),
        ),
        "artifact": artifact,
        "tools": tool_versions(),
        "verdict": comp.verdict,
    }


def _certificate(root: Path, n: int, record: Any) -> dict | None:
    """Write stage `n`'s certificate (the steps its pass recorded, each citing its obligation
    by id) and return its file entry; None for stage 0 and for a pass without one."""
    if record is None or record.steps is None:
        return None
    ids = [o.id for o in record.obligations]
    data = {"pass": record.name, "steps": [s.to_json(ids) for s in record.steps]}
    text = (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()
    rel = f"certificates/{n:02d}-{slug(record.name)}.json"
    (root / rel).write_bytes(text)
    return {"file": rel, "sha256": sha256(text)}


def pair_text(ob: Any) -> str:
    """An obligation's two sides and the functions they call, as one module's text."""
    from gdv.ir.core import Module

    functions = {f.name: f for f in ob.functions}
    src = dataclasses.replace(ob.src, name="src")
    tgt = dataclasses.replace(ob.tgt, name="tgt")
    return print_module(Module([src, tgt, *functions.values()]))


def artifact_text(
    module: Any, target: str, allow_fallback: bool = False
) -> tuple[str, list, list[dict]]:
    """The artifact's text regenerated from the final stage (the C source for target `c`, the
    canonical IR for `reference`), the ops left to reference kernels, and what the printer
    chose itself."""
    from gdv.backends.targets import get_target

    lowered = get_target(target).lower(module, allow_fallback)
    choices = json.loads(json.dumps(list(lowered.choices)))  # as the manifest holds them
    return lowered.text, [f.to_json() for f in lowered.fallbacks], choices


def _write_artifact(root: Path, comp: Compilation) -> dict:
    """The compile's own artifact (its text, fallbacks and printer choices), not a new
    lowering of the final module."""
    from gdv.backends.targets import get_target

    target = get_target(comp.options.target)
    art = comp.artifact
    if art is None:
        art = target.build(comp.module, comp.options.allow_fallback)
    data = art.text.encode()
    rel = f"artifact/main{target.info.artifact_suffix}"
    (root / rel).write_bytes(data)
    entry: dict[str, Any] = {
        "kind": target.artifact_kind,
        "files": [{"file": rel, "sha256": sha256(data)}],
        "fallbacks": [f.to_json() for f in art.fallbacks],
        "choices": json.loads(json.dumps(list(art.choices))),
    }
    info = target.build_info()
    if info is None:
        entry["description"] = (
            "the final stage's canonical text, executed by the reference (numpy) backend"
        )
        return entry
    entry["description"] = (
        f"the {target.description} source of the final stage; `gdv evidence verify` "
        "regenerates it byte for byte. The executable is built from it with the compiler and "
        "flags below (its bytes depend on the compiler build, so only its hash is recorded); "
        "`choices` lists what the printer decided itself, no attribute of the IR deciding it"
    )
    entry["build"] = {
        **info,
        "shared_object_sha256": sha256(art.library.read_bytes())
        if art.library is not None
        else None,
    }
    if art.binaries:  # kernels built for a device the host need not have (target triton)
        entry["build"]["binaries"] = json.loads(json.dumps(art.binaries))
    return entry


def obligation_result(out: Any) -> dict:
    """What a hook and the manifest say of one discharged obligation (no files)."""
    ob = out.obligation
    result: dict[str, Any] = {
        "id": ob.id,
        "pass": ob.pass_name,
        "rule": ob.rule,
        "kind": ob.kind,
        "theory": ob.theory,
        "claim": ob.claim,
        "assumptions": list(ob.assumptions),
        "location": str(ob.loc) if ob.loc else None,
        # A rewrite's obligation is about the two small functions `src` and `tgt`; anything
        # else is the whole-function fallback (what `allow_fallback` governs).
        "scope": "local" if ob.src.name == "src" or ob.kind != "equivalence" else "whole-function",
        "status": out.status,
        "reason": out.reason,
        "counterexample": None,
    }
    if out.counterexample is not None:
        cex = out.counterexample
        result["counterexample"] = {
            "output": int(cex.output),
            "index": [int(i) for i in cex.index],
            "src": repr(cex.value_a),
            "tgt": repr(cex.value_b),
            "origin": cex.origin,
            "inputs": {k: _short(v) for k, v in sorted(cex.inputs.items())},
        }
    return result


def _obligation_entry(root: Path, n: int, out: Any, solver: dict) -> dict:
    ob = out.obligation
    files = []
    for k, q in enumerate(out.smt2):
        rel = f"obligations/{n:04d}-{slug(ob.id)}-out{k}.smt2"
        (root / rel).write_text(q)
        files.append({"file": rel, "sha256": sha256(q.encode())})
    pair = pair_text(ob).encode()
    rel = f"obligations/{n:04d}-{slug(ob.id)}.gdv"
    (root / rel).write_bytes(pair)
    return {
        **obligation_result(out),
        "queries": files,
        "pair": {"file": rel, "sha256": sha256(pair)},
        "cache_key": out.key,
        "solver": solver,
    }


def _short(arr: Any) -> str:
    with np.printoptions(threshold=16, edgeitems=3, linewidth=100):
        return " ".join(str(np.asarray(arr)).split())


def error_bounds(source: Any, target: str = "reference") -> dict:
    """Rigorous error bounds of the source's outputs (symbolic and numeric) as `target` runs
    it, when every float input declares its range; `unavailable` with the reason otherwise."""
    from gdv.validate.bounds import analyze

    try:
        bounds = analyze(source, target=target)
    except IRError as e:
        return {"status": "unavailable", "reason": e.message}
    data = bounds.to_json()
    return {
        "status": "available",
        "target": target,
        "outputs": data["outputs"],
        "assumptions": data["assumptions"],
        "notes": data["notes"],
        "symbols": {k: float(v) for k, v in sorted(data["symbols"].items())},
    }


def conformance(
    source: Any,
    final: Any,
    seeds: tuple[int, ...] = CONFORMANCE_SEEDS,
    exact: bool = True,
    target: str = "reference",
    allow_fallback: bool = False,
    runner: Any = None,
) -> dict:
    """Run the source on the reference backend and the final module on `target` on seeded
    inputs within the declared ranges.

    Every output agreeing bit for bit is `agree`. Otherwise outputs may differ by at most the
    two programs' rigorous error bounds added (`close`), since both approximate the same exact
    values, in two cases only: `real` claims in the pipeline (not `exact`), and target `c`,
    whose transcendentals (gdv's f32 functions, libm) differ from the reference's in the last
    bits (IR_SPEC.md section 3). Anything else is `disagree`. `runner` is the final module's
    executable when the caller has one (built once for every seed, either way)."""
    from gdv.backends import reference
    from gdv.backends.targets import get_target

    results = []
    loose = not exact or not get_target(target).reference_transcendentals
    try:
        limits = _bound_sums(source, final, target) if loose else None
        if runner is None:
            runner = get_target(target).executable(final, allow_fallback)
        for seed in seeds:
            inputs = reference.random_inputs(source, seed)
            want = reference.run(source, inputs)
            got = runner(inputs)
            bad = [
                k
                for k, (a, b) in enumerate(zip(want, got, strict=True))
                if not reference.bit_equal(a, b)
            ]
            entry: dict[str, Any] = {"seed": seed, "bit_exact": not bad, "differing_outputs": bad}
            if limits is not None:
                entry["within_bounds"] = all(_max_diff(want[k], got[k]) <= limits[k] for k in bad)
            results.append(entry)
    except IRError as e:
        return {
            "backend": target,
            "status": "unavailable",
            "reason": e.message,
            "results": results,
        }
    if all(r["bit_exact"] for r in results):
        status, reason = "agree", ""
    elif loose and all(r.get("within_bounds") for r in results):
        why = "fast-math" if not exact else "libm transcendentals"
        status, reason = "close", f"{why}: differences within the two error bounds added"
    else:
        status, reason = "disagree", ""
    return {"backend": target, "status": status, "reason": reason, "results": results}


def _bound_sums(source: Any, final: Any, target: str) -> list[float] | None:
    """Per output, the source's bound on the reference backend plus the final module's on
    `target`: how far the two runs may differ, on inputs `random_inputs` draws (within each
    parameter's declared range, or the default range it draws from where none is declared)."""
    from gdv.backends.reference.inputs import DEFAULT_FLOAT_RANGE
    from gdv.validate.bounds import analyze

    rng = DEFAULT_FLOAT_RANGE
    try:
        a = analyze(source, rng).outputs
        b = analyze(final, rng, target=target).outputs
    except IRError:
        return None
    return [x.abs + y.abs for x, y in zip(a, b, strict=True)]


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    same_nan = np.isnan(x) == np.isnan(y)
    if not same_nan.all():
        return float("inf")
    with np.errstate(invalid="ignore"):
        d = np.where(np.isnan(x) | (x == y), 0.0, np.abs(x - y))
    return float(np.max(d, initial=0.0))
