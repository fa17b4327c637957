"""`gdv evidence verify`: re-check a bundle without trusting the compiler.

The checks run in a fixed order and stop at the first that fails (Alive2's habit: each check
named, a failure says which):

1. `signature`: `manifest.sig` against `--trust-key` (an unsigned bundle fails only then);
2. `schema`: `manifest.json` follows the schema of its version;
3. `files`: every file the manifest lists exists and has its hash;
   `reports`: every report under `reports/` follows its own versioned schema;
4. `source`: the given source has the recorded hash and parses to stage 0;
5. `verdict`: every obligation proved and the verdict `proved` (a rejected compile never
   verifies);
6. `replay`: each stage rebuilt from the one before by its pass's certificate, text for text
   (`gdv.evidence.replay`, which imports no pass); each rewrite's pair is bound to the program
   it rewrites. A stage without a certificate (an external pass) is the one place a
   whole-function claim is made: proved here from the two stages' text.
7. `ir-chain` (only with `whole_function`): each stage proved equivalent to the previous one
   from the stored IR text alone, whole entry function, as before certificates existed;
8. `encoding`: every obligation's queries encoded here from its pair (never read from the
   stored `.smt2`), and the stored `.smt2` must be exactly that text; the coverage and
   memory-safety claims of every scheduled kernel and planned function of the final stage are
   derived here from its IR;
9. `solvers`: every distinct query (claims equal up to renaming are solved once) answered
   `unsat` by every required solver; any `sat` fails;
10. `conformance`: stage 0 and the final stage rerun on the recorded seeds: bit for bit, or
   (fast-math) within their error bounds added;
11. `bounds`: the error bounds recomputed from stage 0 equal the recorded ones;
12. `artifact`: regenerated from the final stage, byte for byte;
13. `policy`: the policy's rules.

A cross-target bundle (`gdv.evidence.cross_target`) holds one ordinary bundle per target, each
verified with every check above, and the cross-target table, recomputed by rerunning every
target on the recorded seeds.

So neither an edited status, nor a doctored query whose hash is fixed, nor an edited stage or
certificate can stand in for a proof, without any signature.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import z3

from gdv.api import parse
from gdv.evidence.bundle import (
    EvidenceError,
    artifact_text,
    conformance,
    error_bounds,
    read_manifest,
    sha256,
)
from gdv.evidence.cross_target import is_cross_target_manifest, verify_cross_target
from gdv.evidence.partition import is_partition_manifest, verify_partition
from gdv.evidence.policy import Policy, check_policy
from gdv.evidence.signing import SIGNATURE_FILE
from gdv.evidence.solvers import SOLVERS, solve
from gdv.ir.core import Module
from gdv.ir.diagnostics import IRError
from gdv.ir.printer import print_module

DEFAULT_TIMEOUT = 30.0


@dataclass(frozen=True)
class Check:
    """One named check and what it found."""

    item: str
    ok: bool
    detail: str


@dataclass
class VerifyReport:
    """The checks run, in order; the last is the first failure, if any."""

    checks: list[Check] = field(default_factory=list)
    signature: str = "unsigned"

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failure(self) -> Check | None:
        return next((c for c in self.checks if not c.ok), None)


class _Failed(Exception):
    pass


def verify_bundle(
    directory: str | os.PathLike,
    *,
    solvers: tuple[str, ...] = (),
    source: str | os.PathLike | None = None,
    trust_key: str | os.PathLike | None = None,
    policy: Policy | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    log: Callable[[Check], None] | None = None,
    whole_function: bool = False,
    jobs: int | None = None,
) -> VerifyReport:
    """Run every check on the bundle in `directory`; raises EvidenceError on input errors
    (no such directory, not a bundle, an unreadable key or source)."""
    root = Path(directory)
    if not root.is_dir():
        raise EvidenceError(f"{os.fspath(directory)}: no such directory")
    if not (root / "manifest.json").is_file():
        raise EvidenceError(f"{os.fspath(directory)}: no manifest.json (not an evidence bundle)")
    policy = policy or Policy()
    report = VerifyReport()

    def passed(item: str, detail: str) -> None:
        report.checks.append(Check(item, True, detail))
        if log:
            log(report.checks[-1])

    def failed(item: str, detail: str) -> None:
        report.checks.append(Check(item, False, detail))
        if log:
            log(report.checks[-1])
        raise _Failed

    key = None
    if trust_key is not None:
        from gdv.evidence.signing import load_public_key

        key = load_public_key(trust_key)
    source_bytes = None
    if source is not None:
        try:
            source_bytes = Path(source).read_bytes()
        except OSError as e:
            raise EvidenceError(f"cannot read source {os.fspath(source)}: {e.strerror}") from None
    try:
        _signature(root, key, report, passed, failed)
        try:
            manifest = read_manifest(root)
        except EvidenceError as e:
            failed("schema", str(e))
        passed("schema", f"manifest.json follows schema {manifest['schema_version']}")
        if is_partition_manifest(manifest):
            # A segment's outputs are intermediate values (partial sums included): the error
            # limit applies to the partitioned program's outputs, checked by the partition.
            local = dataclasses.replace(policy, max_abs_error=None)

            def segment(sub: Path) -> str:
                inner = verify_bundle(sub, solvers=solvers, policy=local, timeout=timeout)
                bad = inner.failure
                return "" if bad is None else f"{bad.item}: {bad.detail}"

            verify_partition(root, manifest, solvers, policy, timeout, passed, failed, segment)
            return report
        if is_cross_target_manifest(manifest):

            def one_target(sub: Path) -> str:
                inner = verify_bundle(
                    sub,
                    solvers=solvers,
                    source=source,
                    policy=policy,
                    timeout=timeout,
                    whole_function=whole_function,
                    jobs=jobs,
                )
                bad = inner.failure
                return "" if bad is None else f"{bad.item}: {bad.detail}"

            verify_cross_target(root, manifest, policy, passed, failed, one_target)
            return report
        stages = _files(root, manifest, passed, failed)
        _reports(root, manifest, passed, failed)
        rerun = _Rerun(manifest, stages, jobs)
        _source(manifest, source, source_bytes, stages, passed, failed)
        _verdict(manifest, passed, failed)
        _theories(manifest, passed, failed)
        pairs = _pairs(root, manifest, jobs, failed)
        claims = _replay(root, manifest, stages, pairs, whole_function, timeout, passed, failed)
        if whole_function:
            _chain(manifest, stages, timeout, passed, failed)
        queries = _encoding(root, manifest, stages, pairs, claims, passed, failed)
        use = tuple(s for s in SOLVERS if s in set(solvers) | set(policy.required_solvers))
        probes = {c.what: c.obligation for c in claims}
        _resolve(queries, use, policy, timeout, jobs, passed, failed, probes)
        _conformance(manifest, rerun.conformance(), passed, failed)
        _bounds(manifest, rerun.bounds(), passed, failed)
        _bound_changes(manifest, stages, passed, failed)
        _artifact(root, manifest, stages, passed, failed)
        violations = check_policy(policy, manifest)
        if violations:
            failed("policy", f"{violations[0]} (policy from {policy.origin})")
        passed("policy", f"every rule holds (policy from {policy.origin})")
    except _Failed:
        pass
    finally:
        if "rerun" in locals():
            rerun.close()
    return report


def _signature(root: Path, key, report: VerifyReport, passed, failed) -> None:
    sig = root / SIGNATURE_FILE
    if not sig.is_file():
        report.signature = "unsigned"
        if key is not None:
            failed("signature", "unsigned: no manifest.sig, but a trust key was given")
        return
    if key is None:
        report.signature = "signed (not checked: no --trust-key)"
        return
    from gdv.evidence.signing import check

    if not check(key, (root / "manifest.json").read_bytes(), sig.read_text()):
        report.signature = "bad signature"
        failed("signature", "manifest.sig is not a signature of manifest.json by the trust key")
    report.signature = "signed, checked against the trust key"
    passed("signature", report.signature)


def _files(root: Path, manifest: dict, passed, failed) -> list[tuple[str, Module, bytes]]:
    listed = [(f"stage {s['pass']}", s) for s in manifest["stages"]]
    listed += [
        (f"certificate of {s['pass']}", s["certificate"])
        for s in manifest["stages"]
        if s.get("certificate")
    ]
    listed += [(o["id"], q) for o in manifest["obligations"] for q in o["queries"]]
    listed += [(f"pair of {o['id']}", o["pair"]) for o in manifest["obligations"] if o.get("pair")]
    listed += [("artifact", f) for f in manifest["artifact"]["files"]]
    listed += [(f"report {r['name']}", r) for r in manifest.get("reports", []) if r["sha256"]]
    check_files(root, listed, passed, failed)
    stages = _Stages(failed)
    for s in manifest["stages"]:
        stages.append([s["pass"], None, (root / s["file"]).read_bytes(), s["file"]])
    stages.module(0)
    return stages


def check_files(root: Path, listed: list[tuple[str, dict]], passed, failed) -> None:
    """Each `(what, {file, sha256})` lies inside the bundle, exists and has its hash."""
    resolved = root.resolve()
    for what, entry in listed:
        path = (root / entry["file"]).resolve()
        if resolved not in path.parents:
            failed("files", f"{entry['file']} ({what}) lies outside the bundle")
        if not path.is_file():
            failed("files", f"{entry['file']} ({what}) is missing")
        if sha256(path.read_bytes()) != entry["sha256"]:
            failed("files", f"{entry['file']} ({what}) does not match its recorded sha256")
    passed("files", f"{len(listed)} file(s) match their sha256")


def _reports(root: Path, manifest: dict, passed, failed) -> None:
    """Every report the manifest lists is JSON and follows its schema (the hashed ones were
    checked with the other files)."""
    from gdv.evidence.bundle import validate_report

    entries = manifest.get("reports", [])
    resolved = root.resolve()
    for r in entries:
        path = (root / r["file"]).resolve()
        if resolved not in path.parents or not path.is_file():
            failed("reports", f"{r['file']} (report {r['name']}) is missing")
        try:
            data = json.loads(path.read_bytes())
        except ValueError as e:
            failed("reports", f"{r['file']} (report {r['name']}) is not JSON: {e}")
        try:
            validate_report(r["schema"], data, r["file"])
        except EvidenceError as e:
            failed("reports", e.message)
    if not entries:
        passed("reports", "none recorded")
        return
    names = ", ".join(r["name"] for r in entries)
    passed("reports", f"{len(entries)} report(s) follow their schemas ({names})")


class _Stages(list):
    """[pass, module or None, text, file] per stage. Only stage 0 is parsed up front: replay
    rebuilds every other stage from it and compares texts, so parsing them all again (most of
    the time a big model's check took) is needed only where no certificate exists."""

    def __init__(self, failed) -> None:
        super().__init__()
        self.failed = failed

    def module(self, k: int) -> Module:
        if self[k][1] is None:
            name, _, text, file = self[k]
            try:
                self[k][1] = parse(text.decode(), file)
            except (IRError, UnicodeDecodeError) as e:
                self.failed("files", f"{file} is not a valid module: {e}")
        return self[k][1]


def _source(manifest, source, data: bytes | None, stages, passed, failed) -> None:
    if data is None:
        return
    if sha256(data) != manifest["source"]["sha256"]:
        failed("source", f"{os.fspath(source)} does not match the recorded source sha256")
    try:
        module = parse(data.decode(), os.fspath(source))
    except (IRError, UnicodeDecodeError) as e:
        failed("source", f"{os.fspath(source)} does not parse: {e}")
    if print_module(module).encode() != stages[0][2]:
        failed("source", f"stage 0 ({manifest['stages'][0]['file']}) is not the parsed source")
    passed("source", f"{os.fspath(source)} matches its hash and stage 0")


def _verdict(manifest: dict, passed, failed) -> None:
    for o in manifest["obligations"]:
        if o["status"] != "proved":
            failed("verdict", f"obligation {o['id']} is {o['status']}: {o['reason']}")
    if manifest["verdict"] != "proved":
        failed("verdict", f"the verdict is {manifest['verdict']}: a rejected compile")
    passed("verdict", f"{len(manifest['obligations'])} obligation(s) recorded proved")


def _chain(manifest: dict, stages, timeout: float, passed, failed) -> None:
    from gdv.validate.equivalence import check_equivalence
    from gdv.validate.semantics.values import THEORIES

    fast_math = _reals_allowed(manifest)
    for k, entry in enumerate(manifest["stages"][1:], start=1):
        before, after, name = stages.module(k - 1), stages.module(k), stages[k][0]
        theory = entry["theory"]
        if theory not in THEORIES:
            # The schema admits `int` (DESIGN.md's integer theory); no stage step claims it.
            failed(
                "ir-chain",
                f"stage {name} claims theory {theory!r}, which no stage step can claim (one of "
                f"{', '.join(THEORIES)})",
            )
        if theory == "real" and not fast_math:
            failed(
                "ir-chain",
                f"stage {name} claims `real` but the pipeline had no fast-math or reassociate",
            )
        try:
            r = check_equivalence(before, after, theory, timeout, names=("before", name))
        except IRError as e:
            failed("ir-chain", f"stage {name}: {e}")
        if r.verdict != "equivalent":
            why = r.reason or r.verdict
            failed(
                "ir-chain",
                f"stage {name} ({entry['file']}) is {r.verdict} to the one "
                f"before it under {theory}: {why}",
            )
    passed("ir-chain", f"{len(stages) - 1} stage-to-stage claim(s) proved from the IR files")


def _reals_allowed(manifest: dict) -> bool:
    """Whether the pipeline asked for claims over the reals (`--fast-math`, `--reassociate`
    or -O3)."""
    p = manifest["pipeline"]
    return bool(p["fast_math"] or p.get("reassociate") or p["level"] >= 3)


def _theories(manifest: dict, passed, failed) -> None:
    """Each claim's theory fits its kind and its stage: `int` only for coverage and memory
    claims, `real` only in a stage that claims `real`, and `real` stages only with fast-math
    or reassociation."""
    from gdv.validate.semantics.values import THEORIES

    fast_math = _reals_allowed(manifest)
    stage_theory = {s["pass"]: s["theory"] for s in manifest["stages"]}
    for s in manifest["stages"][1:]:
        if s["theory"] not in THEORIES:
            # The schema admits `int` (DESIGN.md's integer theory); no stage step claims it.
            failed(
                "ir-chain" if s.get("certificate") is None else "replay",
                f"stage {s['pass']} claims theory {s['theory']!r}, which no stage step can "
                f"claim (one of {', '.join(THEORIES)})",
            )
        if s["theory"] == "real" and not fast_math:
            failed(
                "replay",
                f"stage {s['pass']} claims `real` but the pipeline had no fast-math or reassociate",
            )
    for o in manifest["obligations"]:
        formula = o["kind"] in ("coverage", "memory-safety")
        if formula != (o["theory"] == "int"):
            failed("replay", f"obligation {o['id']} is a {o['kind']} claim under {o['theory']}")
        if o["theory"] == "real" and stage_theory.get(o["pass"]) != "real":
            failed("replay", f"obligation {o['id']} claims `real` in a bit-exact stage")


@dataclass
class _Claim:
    """A claim the checker proves: the obligation it came from (or what built it) and the
    checker's own `Obligation`."""

    what: str
    obligation: object


@dataclass
class _Prepared:
    """One obligation read and encoded by the checker: its pair (or why it is not one), its
    queries as the checker encodes them, its canonical claim, and a stored query that differs
    from that encoding (or why it does not encode)."""

    id: str
    pair: object = None
    pair_error: str = ""
    texts: list[str] = field(default_factory=list)
    claim: str = ""
    encode_error: str = ""
    mismatch: str = ""


def _prepare(root: str, entries: list[dict]) -> list[_Prepared]:
    """Read `entries` (a worker's share of the obligations): each pair and its claim."""
    from gdv.evidence.replay import ReplayError, read_pair
    from gdv.validate.discharge import canonical_claim

    out = []
    for o in entries:
        p = _Prepared(o["id"])
        out.append(p)
        if o["kind"] in FORMULA_KINDS:
            continue  # derived from its stage's IR (`_formula_claims`), not from its pair
        if not o.get("pair"):
            p.pair_error = "it has no pair"
            continue
        try:
            p.pair = pair = read_pair(Path(root, o["pair"]["file"]).read_text(), o["pair"]["file"])
        except (ReplayError, UnicodeDecodeError) as e:
            p.pair_error = f"its pair is not a valid module: {e}"
            continue
        try:
            p.claim = canonical_claim(_obligation(o, pair))
        except (IRError, ValueError, KeyError, AssertionError, z3.Z3Exception) as e:
            p.encode_error = f"its pair does not encode: {e}"
    return out


FORMULA_KINDS = ("coverage", "memory-safety")
"""Claims the checker derives from a stage's IR: each scheduled kernel's nest and each planned
function's arena. Their pair files say where the claim was made, for review only."""


def _formula_claims(module: Module) -> dict[str, tuple[str, str]]:
    """{query text: (kind, what)} for every scheduled kernel and planned function of `module`,
    derived here from its IR."""
    from gdv.validate.discharge import stable_smt2
    from gdv.validate.schedules import coverage_text, memory_text

    out: dict[str, tuple[str, str]] = {}
    for fn in module.functions:
        if "buffers" in fn.attrs:
            text = stable_smt2(memory_text(fn))
            out.setdefault(text, ("memory-safety", f"the arena of @{fn.name}"))
        for op in fn.ops:
            if op.name == "kernel" and "tile" in op.attrs:
                out.setdefault(stable_smt2(coverage_text(op.attrs)), ("coverage", f"%{op.result}"))
    return out


def _obligation(o: dict, pair):
    """The checker's own `Obligation` for manifest entry `o` with its pair."""
    from gdv.ir.obligation import Obligation

    return Obligation(
        o["id"],
        o["kind"],
        o["theory"],
        pair.src,
        pair.tgt,
        o["claim"],
        list(o["assumptions"]),
        None,
        list(pair.functions.values()),
    )


def _encode(root: Path, manifest: dict, prepared: dict[str, _Prepared], stages) -> None:
    """Each distinct claim encoded once (the query text is a function of the canonical claim,
    `gdv.validate.discharge.obligation_queries`), and every obligation's stored queries
    compared with its claim's encoding; a coverage or memory-safety claim's stored query must
    be one the checker derives from the IR of the stage its pass produced."""
    from gdv.validate.discharge import obligation_queries

    where = {s["pass"]: k for k, s in enumerate(manifest["stages"])}
    derived: dict[int, dict[str, tuple[str, str]]] = {}
    encoded: dict[str, list[str] | str] = {}
    for o in manifest["obligations"]:
        p = prepared.get(o["id"])
        if p is None or p.encode_error:
            continue
        if o["kind"] in FORMULA_KINDS:
            k = where.get(o["pass"])
            if k is None:
                p.encode_error = f"no stage was made by its pass {o['pass']!r}"
                continue
            if k not in derived:
                derived[k] = _formula_claims(stages.module(k))
            texts = [(root / q["file"]).read_text() for q in o["queries"]]
            ours = derived[k]
            if len(texts) == 1 and texts[0] not in ours:  # other lets (see `same_query`)?
                texts = [
                    next(
                        (
                            t
                            for t, (kind, _) in ours.items()
                            if kind == o["kind"] and same_query(texts[0], t)
                        ),
                        texts[0],
                    )
                ]
            if len(texts) != 1 or ours.get(texts[0], ("",))[0] != o["kind"]:
                p.mismatch = o["queries"][0]["file"] if o["queries"] else "(no query)"
                continue
            p.texts = texts
            p.claim = f"gdv-obligation kind={o['kind']} theory={o['theory']}\n{texts[0]}"
            continue
        if p.claim not in encoded:
            try:
                encoded[p.claim] = obligation_queries(_obligation(o, p.pair))
            except (IRError, ValueError, KeyError, AssertionError, z3.Z3Exception) as e:
                encoded[p.claim] = f"its pair does not encode: {e}"
        texts = encoded[p.claim]
        if isinstance(texts, str):
            p.encode_error = texts
            continue
        p.texts = texts
        if len(texts) != len(o["queries"]):
            p.encode_error = (
                f"it stores {len(o['queries'])} queries, not the {len(texts)} its pair gives"
            )
            continue
        for q, t in zip(o["queries"], texts, strict=True):
            if not same_query((root / q["file"]).read_text(), t):
                p.mismatch = q["file"]
                break


def same_query(stored: str, own: str) -> bool:
    """The stored query is the checker's own: the same text, or, where Z3 chose other `let`
    abbreviations (its printer's choice follows internal term ids, which depend on what the
    process built before), the same declarations and assertions once parsed: Z3 shares equal
    terms, so `eq` is structural identity, never mere equivalence."""
    if stored == own:
        return True
    strip = [ln for ln in stored.splitlines() if not ln.startswith(("(set-", "(check-sat"))]
    mine = [ln for ln in own.splitlines() if not ln.startswith(("(set-", "(check-sat"))]
    if [ln for ln in strip if ln.startswith("(declare")] != [
        ln for ln in mine if ln.startswith("(declare")
    ]:
        return False
    try:
        a, b = z3.parse_smt2_string(stored), z3.parse_smt2_string(own)
    except z3.Z3Exception:
        return False
    return len(a) == len(b) and all(x.eq(y) for x, y in zip(a, b, strict=True))


def _pairs(root: Path, manifest: dict, jobs: int | None, failed) -> dict[str, _Prepared]:
    """Every obligation's pair read and encoded, in worker processes (most of a big model's
    check); a pair that is no valid module fails `replay`."""
    import concurrent.futures

    entries = manifest["obligations"] if manifest["schema_version"] != "1" else []
    jobs = jobs or os.cpu_count() or 1
    if jobs == 1 or len(entries) < 32:
        prepared = _prepare(str(root), entries)
    else:
        size = max(1, len(entries) // (4 * jobs))
        chunks = [entries[k : k + size] for k in range(0, len(entries), size)]
        with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
            prepared = [
                p for part in pool.map(_prepare, [str(root)] * len(chunks), chunks) for p in part
            ]
    out = {}
    for p in prepared:
        if p.pair_error:
            failed("replay", f"obligation {p.id}: {p.pair_error}")
        out[p.id] = p
    return out


def _replay(root: Path, manifest, stages, pairs, whole_function: bool, timeout, passed, failed):
    """Rebuild every stage from the one before; the claims to prove besides the obligations'
    (one op against its rescheduled self, built from the program)."""
    from gdv.evidence.replay import ReplayError, replay
    from gdv.ir.obligation import Obligation

    if manifest["schema_version"] == "1":
        if whole_function:
            return []
        failed(
            "replay",
            "a schema-1 bundle records no certificates: check it with --whole-function "
            "(or compile it again)",
        )
    cited = {o["id"]: o for o in manifest["obligations"]}
    claims: list[_Claim] = []
    rewrites = whole = 0
    for k, entry in enumerate(manifest["stages"][1:], start=1):
        name, _, text, file = stages[k]
        before = stages.module(k - 1)
        if entry["certificate"] is None:
            whole += _whole_function_step(name, before, stages.module(k), entry, timeout, failed)
            continue
        try:
            data = json.loads((root / entry["certificate"]["file"]).read_bytes())
        except ValueError as e:
            failed("replay", f"the certificate of {name} is not JSON: {e}")
        if not isinstance(data, dict) or data.get("pass") != name:
            failed("replay", f"the certificate of {name} is not this pass's")

        def pair(ob_id: str, stage: str = name):
            o = cited.get(ob_id)
            if o is None or o["pass"] != stage or o["kind"] != "equivalence":
                return None
            p = pairs.get(ob_id)
            return None if p is None else p.pair

        try:
            out = replay(before, text, data.get("steps"), name, pair, file)
        except ReplayError as e:
            failed("replay", str(e))
        stages[k][1] = out.module  # prints as the stage's file, byte for byte
        rewrites += out.rewrites
        for what, src, tgt, bodies in out.built:
            ob = Obligation(
                f"{what}/reschedule", "equivalence", "fp", src, tgt, "", [], None, bodies
            )
            claims.append(_Claim(what, ob))
    passed(
        "replay",
        f"{len(stages) - 1} stage(s) rebuilt from their certificates ({rewrites} rewrites "
        f"bound to their pairs); {whole} whole-function quer(ies)",
    )
    return claims


def _whole_function_step(name, before: Module, after: Module, entry, timeout, failed) -> int:
    """A stage without a certificate (an external pass): each function proved equivalent to
    the one of its name before, whole, here. Returns how many queries that took."""
    from gdv.validate.equivalence import check_equivalence

    count = 0
    names = [f.name for f in before.functions]
    if names != [f.name for f in after.functions]:
        failed("replay", f"stage {name} has no certificate and changes the module's functions")
    for fa, fb in zip(before.functions, after.functions, strict=True):
        if print_module(Module([fa])) == print_module(Module([fb])):
            continue
        count += 1
        try:
            r = check_equivalence(
                Module([fa, *[f for f in before.functions if f is not fa]]),
                Module([fb, *[f for f in after.functions if f is not fb]]),
                entry["theory"],
                timeout,
                names=("before", name),
            )
        except IRError as e:
            failed("replay", f"stage {name}: {e}")
        if r.verdict != "equivalent":
            failed(
                "replay",
                f"stage {name} (no certificate) is {r.verdict} to the one before it: "
                f"{r.reason or r.verdict}",
            )
    return count


def _encoding(root: Path, manifest, stages, pairs, claims: list[_Claim], passed, failed) -> dict:
    """Every obligation's queries encoded here from its pair, equal to the stored text; plus
    the claims built during replay and the final stage's coverage and memory claims derived
    from its IR. Returns {canonical claim: (what, query texts)}, one entry per distinct
    claim."""
    from gdv.validate.discharge import canonical_claim, obligation_queries

    distinct: dict[str, tuple[str, list[str]]] = {}
    stored = 0
    _encode(root, manifest, pairs, stages)
    for o in manifest["obligations"]:
        p = pairs.get(o["id"])
        if p is None:
            break  # a schema-1 bundle: no pairs
        if p.encode_error:
            failed("encoding", f"obligation {o['id']}: {p.encode_error}")
        if p.mismatch:
            failed(
                "encoding",
                f"{p.mismatch} ({o['id']}) is not the checker's own encoding of its pair",
            )
        stored += len(p.texts)
        distinct.setdefault(p.claim, (o["id"], p.texts))
    for c in claims:
        claim = canonical_claim(c.obligation)
        if claim not in distinct:
            distinct[claim] = (c.what, obligation_queries(c.obligation))
    final = _formula_claims(stages.module(len(stages) - 1))
    for text, (kind, what) in final.items():
        # Keyed as `canonical_claim` keys a formula claim, so a proved obligation's twin is
        # solved once.
        distinct.setdefault(
            f"gdv-obligation kind={kind} theory=int\n{text}", (f"the {kind} of {what}", [text])
        )
    derived = len(final)
    passed(
        "encoding",
        f"{stored} stored quer(ies) equal the checker's own encoding of their pairs; "
        f"{len(claims)} rescheduling claim(s) built, {derived} coverage and memory claim(s) "
        f"derived from the final stage; {len(distinct)} distinct claim(s)",
    )
    return distinct


def _resolve(distinct: dict, use, policy: Policy, timeout, jobs, passed, failed, probes=None):
    """Every distinct query answered by every solver in `use`, in worker processes. A
    rescheduling claim (`probes`, by what it is about) that a required solver does not prove
    is also run on random and special inputs: a bit-exact difference refutes it, with the
    counterexample, where the solver only answered unknown."""
    import concurrent.futures

    work = [(what, t) for what, texts in distinct.values() for t in texts]
    jobs = jobs or os.cpu_count() or 1
    answers: list[dict] = [{} for _ in work]
    tasks = [(i, s) for i in range(len(work)) for s in use]
    if jobs == 1 or len(tasks) <= 1:
        for i, s in tasks:
            answers[i][s] = solve(s, work[i][1], timeout)
    else:
        with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(_solve_one, s, work[i][1], timeout): (i, s) for i, s in tasks}
            for fut in concurrent.futures.as_completed(futures):
                i, s = futures[fut]
                answers[i][s] = fut.result()
    for (what, _), got in zip(work, answers, strict=True):
        for s, a in got.items():
            if a.result == "sat":
                failed("solvers", f"{s} finds the query of {what} satisfiable: it is not proved")
        proved_by = [s for s, a in got.items() if a.result == "unsat"]
        for s in policy.required_solvers:
            a = got[s]
            if a.result == "unsat":
                continue
            if not (policy.allow_unknown and proved_by):
                refuted = _refuted_on_inputs((probes or {}).get(what))
                if refuted:
                    failed("solvers", f"{what} is refuted: {refuted} ({s} gives {a.result})")
                failed(
                    "solvers",
                    f"{s} gives {a.result} on the query of {what}: {a.reason} (required by "
                    f"policy {policy.origin})",
                )
    passed("solvers", f"{len(work)} distinct quer(ies) unsat with {', '.join(use)}")


def _refuted_on_inputs(ob) -> str:
    """Where the rescheduled op `ob` claims equal to its old self differs from it bit for
    bit on the reference interpreter (random and special inputs), or "" (no difference found,
    or the claim is too large to run)."""
    if ob is None:
        return ""
    from gdv.ir.ops.kernel import kernel_bodies
    from gdv.validate.discharge import _quick_refute

    with kernel_bodies(ob.functions):
        cex = _quick_refute(ob)
    if cex is None:
        return ""
    return (
        f"on {cex.origin} out{cex.output}{list(cex.index)} is {cex.value_a} before and "
        f"{cex.value_b} after (replayed on the reference interpreter)"
    )


def _solve_one(name: str, text: str, timeout: float):
    return solve(name, text, timeout)  # `solve` looked up in the worker (tests replace it)


class _Rerun:
    """Conformance and bounds, recomputed from stage 0 and the final stage's text in a worker
    process while the proofs are checked (they need only those two files; their results are
    used only once replay has shown the final stage is what the certificates make)."""

    def __init__(self, manifest: dict, stages, jobs: int | None) -> None:
        recorded = manifest["conformance"]
        self.seeds = tuple(r["seed"] for r in recorded["results"]) or (0, 1, 2)
        args = (
            stages[0][2],
            stages[0][3],
            stages[-1][2],
            stages[-1][3],
            self.seeds,
            all(s["theory"] == "fp" for s in manifest["stages"]),
            manifest["target"]["name"],
            bool(manifest["artifact"].get("fallbacks")),
        )
        self.pool = None
        if (jobs or os.cpu_count() or 1) > 1:
            import concurrent.futures
            import multiprocessing

            # Spawned, not forked: the conformance run executes the OpenMP C code, and libgomp
            # hangs in a child forked from a process that has used it (a test run, the API).
            self.pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn")
            )
            self.future = self.pool.submit(_rerun, *args)
        else:
            self.args = args
        self.result: tuple[dict, dict] | None = None

    def _get(self) -> tuple[dict, dict]:
        if self.result is None:
            self.result = self.future.result() if self.pool else _rerun(*self.args)
        return self.result

    def conformance(self) -> tuple[dict, tuple[int, ...]]:
        return self._get()[0], self.seeds

    def bounds(self) -> dict:
        return self._get()[1]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)


def _rerun(source: bytes, source_file, final: bytes, final_file, seeds, exact, target, fallback):
    first = parse(source.decode(), source_file)
    last = first if final == source else parse(final.decode(), final_file)
    again = conformance(first, last, seeds, exact, target, fallback)
    return again, error_bounds(first, target)


def _conformance(manifest: dict, rerun: tuple[dict, tuple[int, ...]], passed, failed) -> None:
    recorded = manifest["conformance"]
    again, seeds = rerun
    if recorded["status"] == "disagree" or again["status"] == "disagree":
        failed("conformance", "the final stage and the source disagree on seeded inputs")
    if again != recorded:
        failed("conformance", "rerunning the recorded seeds does not give the recorded results")
    passed("conformance", f"{again['status']} on seeds {list(seeds)}")


def _bound_changes(manifest: dict, stages, passed, failed) -> None:
    """Every stage claimed over the reals records how it changed each output's error bound,
    and that change recomputed from the stage and the one before it is the recorded one."""
    from gdv.validate.bounds import bound_change

    count = 0
    for k, entry in enumerate(manifest["stages"][1:], start=1):
        recorded = entry.get("bound_change")
        if entry["theory"] != "real":
            if recorded is not None:
                failed("bounds", f"bit-exact stage {entry['pass']} records an error-bound change")
            continue
        if recorded is None:
            failed("bounds", f"stage {entry['pass']} claims `real` but records no bound change")
        if bound_change(stages.module(k - 1), stages.module(k)) != recorded:
            failed(
                "bounds",
                f"the error-bound change of stage {entry['pass']} recomputed from its IR differs "
                "from the recorded",
            )
        count += 1
    if count:
        passed("bounds", f"{count} real stage(s): error-bound changes recomputed")


def _bounds(manifest: dict, again: dict, passed, failed) -> None:
    if again != manifest["bounds"]:
        failed("bounds", "the error bounds recomputed from stage 0 differ from the recorded")
    passed("bounds", f"{again['status']}, recomputed from stage 0")


def _artifact(root: Path, manifest: dict, stages, passed, failed) -> None:
    from gdv.backends.targets import TARGETS

    artifact = manifest["artifact"]
    name = manifest["target"]["name"]
    target = TARGETS.get(name)
    if target is None or target.artifact_kind != artifact["kind"]:
        failed("artifact", f"no way to regenerate an artifact of kind {artifact['kind']!r}")
    fallback = bool(artifact.get("fallbacks"))
    try:
        text, fallbacks, choices = artifact_text(stages.module(-1), name, allow_fallback=fallback)
    except IRError as e:
        failed("artifact", f"the final stage does not lower for target {name}: {e.message}")
    data = text.encode()
    (entry,) = artifact["files"]
    if sha256(data) != entry["sha256"] or (root / entry["file"]).read_bytes() != data:
        failed("artifact", f"{entry['file']} is not the final stage regenerated")

    # Locations name the file the stage was read from, so only what ran where is compared.
    def what(entries: list) -> list:
        return [(f["index"], f["op"], f["reason"]) for f in entries]

    if what(fallbacks) != what(artifact.get("fallbacks", [])):
        failed("artifact", "the recorded reference-kernel fallbacks are not the regenerated ones")
    if choices != artifact.get("choices", []):
        failed("artifact", "the recorded printer choices are not the regenerated ones")
    passed(
        "artifact",
        f"{entry['file']} regenerated from {manifest['stages'][-1]['file']} "
        f"({len(choices)} printer choice(s) recorded)",
    )
