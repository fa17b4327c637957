"""Discharging obligations: a content-addressed cache, worker processes, per-obligation
timeouts and memory limits (DESIGN.md, "Obligations and their discharge").

The cache key is the SHA-256 of the claim with every value renamed in order (`cache_key`), so
the same claim about differently named values (twelve identical layers) is solved once; the
queries stored with an obligation are SMT-LIB text made stable from run to run. Only proofs are
cached; `unknown` is never `proved`, and a refutation is recomputed so that its
counterexample is replayed again.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import re
import resource
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import z3

from gdv.ir.core import Function, Op, Param
from gdv.ir.obligation import Obligation
from gdv.ir.ops.kernel import kernel_bodies
from gdv.ir.printer import print_function
from gdv.validate.counterexample import Counterexample
from gdv.validate.equivalence import build_query, check_equivalence, check_within, replay_cost
from gdv.validate.schedules import claim_formula
from gdv.validate.semantics.control import NotEncoded

STATUSES = ("proved", "refuted", "unknown")
_VERDICT_STATUS = {"equivalent": "proved", "not-equivalent": "refuted", "unknown": "unknown"}
DEFAULT_TIMEOUT = 10.0
DEFAULT_MEMORY_MB = 4096


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gdv"


@dataclass
class Outcome:
    """The result of discharging one obligation."""

    obligation: Obligation
    status: str
    seconds: float
    reason: str = ""
    counterexample: Counterexample | None = None
    cached: bool = False
    """Proved by an earlier run (the cache), not solved now."""
    shared_with: str = ""
    """The id of an obligation with the same query, solved once for both."""
    key: str = ""
    smt2: list[str] = field(default_factory=list)
    """The queries (one per output) as SMT-LIB 2 text, `(set-logic ALL)` first."""


_LET_VAR = re.compile(r"(?<![\w.!|])([?$]x\d+)(?![\w.!|])")


def stable_smt2(text: str) -> str:
    """`text` without comments and with Z3's let variables (`?x35`, `$x10`, named after
    internal term ids that change from run to run) renamed `?l0`, `$l1`, ... in order of first
    occurrence: the same query always gives the same text (evidence is byte-identical)."""
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith(";")]
    body = "\n".join(lines) + "\n"
    lets: dict[str, str] = {}
    return _LET_VAR.sub(lambda m: lets.setdefault(m.group(1), f"{m.group(1)[0]}l{len(lets)}"), body)


def obligation_queries(ob: Obligation) -> list[str]:
    """The obligation's queries as SMT-LIB 2 text, one per output (a formula claim: its own).

    What is encoded is the claim in its canonical form (`canonical_form`: values renamed by
    position, bodies by the hash of their text), so the text is a function of
    `canonical_claim(ob)` alone: obligations making one claim (twelve identical layers) have
    one query text, encoded once by the compile and once by the checker (issue 15)."""
    formula = claim_formula(ob)
    if formula is not None:
        return [stable_smt2(formula)]
    src, tgt, bodies = canonical_form(ob)
    with kernel_bodies(bodies):
        try:
            return [_query_text(src, tgt, ob.theory, o) for o in range(len(src.results))]
        except NotEncoded:  # no query: the claim is left unknown when it is solved
            return []


def canonical_form(ob: Obligation) -> tuple[Function, Function, list[Function]]:
    """`src` and `tgt` renamed as `canonical_claim` prints them, and the functions they call
    (kernel bodies; the functions control flow ops name, and those they call in turn), each
    named as the renamed callers call it."""
    bodies = {f.name: f for f in ob.functions}
    renamed: dict[str, Function] = {}
    todo = [ob.src, ob.tgt]
    while todo:
        fn = todo.pop()
        for op in fn.ops:
            for key in _function_keys(op):
                name = op.attrs.get(key)
                if name in bodies and name not in renamed:
                    nested = bodies if op.name not in ("kernel", "conv2d") else None
                    body = _renamed(bodies[name], nested)
                    renamed[name] = replace(body, name=_body_name(body))
                    todo.append(bodies[name])
    src = replace(_renamed(ob.src, bodies), name="src")
    tgt = replace(_renamed(ob.tgt, bodies), name="tgt")
    return src, tgt, list(renamed.values())


def _function_keys(op: Op) -> tuple[str, ...]:
    """The attributes of `op` that name functions of the module."""
    from gdv.ir.ops.control import FUNCTION_ATTRS

    if op.name == "conv2d":
        return ("epilogue",)
    return BODY_KEYS if op.name == "kernel" else FUNCTION_ATTRS.get(op.name, ())


BODY_KEYS = ("body", "epilogue")
"""A kernel's attributes that name functions: each is renamed by the hash of the function's
text, so the claim (and its cache key) depends on what they compute."""


def _body_name(renamed_body: Function) -> str:
    return "b" + hashlib.sha256(print_function(renamed_body).encode()).hexdigest()


def _query_text(src: Function, tgt: Function, theory: str, output: int) -> str:
    query = build_query(src, tgt, output, theory)
    if query.trivial:
        # Both sides are one term, so "they differ" is `false`. Z3 would print that term with
        # `let`s chosen by reference counts that vary from run to run; the evidence must not.
        query = replace(query, assertions=[*query.assertions[:-1], z3.BoolVal(False)])
    return stable_smt2(query.smt2())


SEMANTICS_VERSION = "3"
"""Bump when the SMT meaning of any op changes: cached proofs of the old meaning then miss.
2: the range-blind encoding memo of version 1 could prove false claims (issue 14), so no
proof cached under it is trusted. 3: commutative operands in canonical order
(`values.TermKeys`, issue 15), which changes every stored query's text."""


def _renamed(fn: Function, bodies: dict[str, Function] | None = None) -> Function:
    """`fn` with its parameters renamed `p0, p1, ...` by position and its op results `v0, v1,
    ...` in order, and each kernel's body name (each function a control flow op names)
    replaced by the hash of the body's renamed text: the claim depends on what a body
    computes, not on what it is called.

    Bug class "cache key not injective" (issue 14): parameters are matched by *position* in an
    equivalence claim (`check_signatures`, `build_query`), so they are named by position on
    both sides. Naming target parameters after the source parameter of the same name, and the
    rest `p{len(names)}`, let two names coincide: `(%b, %c) -> sub(%c, %b)` against source
    `(%a, %b)` printed like the correct `sub(%b, %c)`. Parameters and results have disjoint
    prefixes, so no renamed name can clash with another."""
    names = {p.name: f"p{k}" for k, p in enumerate(fn.params)}
    if len(names) != len(fn.params):
        raise ValueError(f"@{fn.name} names two parameters alike")
    ops = []
    for k, op in enumerate(fn.ops):
        attrs = dict(op.attrs)
        for key in _function_keys(op) if bodies else ():
            if attrs.get(key) in bodies:
                # A control op's functions may call others in turn (never in a cycle, the
                # verifier checks): they are renamed by the hash of their own renamed text.
                nested = bodies if op.name not in ("kernel", "conv2d") else None
                attrs[key] = _body_name(_renamed(bodies[attrs[key]], nested))
        ops.append(Op(f"v{k}", op.name, [names[o] for o in op.operands], attrs, op.type))
        names[op.result] = f"v{k}"
    params = [Param(names[p.name], p.type) for p in fn.params]
    return Function("f", params, fn.results, ops, [names[r] for r in fn.returns])


def canonical_claim(ob: Obligation) -> str:
    """The claim itself as text: kind, theory, assumptions and both functions renamed
    canonically (`_renamed`), or a formula claim's own stable SMT-LIB text. Two obligations
    with equal text make the same claim; the cache key is this text's hash, and a cache hit is
    accepted only when the stored text is equal too."""
    formula = claim_formula(ob)
    if formula is not None:
        return f"gdv-obligation kind={ob.kind} theory={ob.theory}\n{stable_smt2(formula)}"
    bodies = {f.name: f for f in ob.functions}
    return "\n".join(
        [
            f"gdv-obligation semantics={SEMANTICS_VERSION} kind={ob.kind} theory={ob.theory}",
            *ob.assumptions,
            print_function(_renamed(ob.src, bodies)),
            print_function(_renamed(ob.tgt, bodies)),
        ]
    )


def cache_key(ob: Obligation) -> str:
    """The SHA-256 of `canonical_claim(ob)`. The queries are a deterministic function of the
    claim (and of the semantics version), so equal keys mean equal queries, while Z3's printed
    text can differ for equal queries (its let-bindings follow internal term ids)."""
    return claim_key(canonical_claim(ob))


def claim_key(claim: str) -> str:
    """The cache key of a claim's canonical text."""
    return hashlib.sha256(claim.encode()).hexdigest()


class Cache:
    """Proved obligations, one small JSON file per key under `root/obligations/`."""

    def __init__(self, root: Path | None) -> None:
        self.root = None if root is None else Path(root) / "obligations"

    def _path(self, key: str) -> Path:
        assert self.root is not None
        return self.root / key[:2] / f"{key}.json"

    def proved(self, claim: str) -> bool:
        """Was exactly this claim proved before? The entry found under the claim's hash must
        also hold the same canonical text: a hash alone is no proof of identity."""
        if self.root is None:
            return False
        try:
            entry = json.loads(self._path(claim_key(claim)).read_text())
        except (OSError, ValueError):
            return False
        return (
            isinstance(entry, dict)
            and entry.get("status") == "proved"
            and entry.get("claim") == claim
        )

    def store(self, claim: str, outcome: Outcome) -> None:
        if self.root is None or outcome.status != "proved":
            return
        path = self._path(claim_key(claim))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump(
                    {
                        "status": "proved",
                        "id": outcome.obligation.id,
                        "theory": outcome.obligation.theory,
                        "claim": claim,
                    },
                    f,
                )
            os.replace(tmp, path)
        except OSError:
            pass  # a cache that cannot be written only costs time


def _limit_memory(megabytes: int) -> None:
    try:
        limit = megabytes * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ValueError, OSError):
        pass


QUICK_REFUTE_ELEMENTS = 1 << 20
"""Obligations whose tensors hold fewer elements than this are first run on a few random and
special inputs: a bit-exact difference refutes at once, with a replayed counterexample, where
the solver could spend its whole timeout."""

QUICK_REFUTE_COST = 1 << 22
"""... and whose two sides cost at most this many element operations to run on the reference
backend (`gdv.validate.equivalence.replay_cost`: a kernel's whole iteration space, a
reduction's extent per output). Issue 16: the element count alone let a lowered 3x3 conv
over 64x56x56 (115 M multiply-adds a side, 4 replays) through, and replaying it took 13.8 s
where Z3 proves the obligation in 70 ms; such probes were 99.5% of resnet18's proving time.
Skipping the probe never proves anything: the solver still decides every obligation."""


def _quick_refute(
    ob: Obligation,
    elements: int = QUICK_REFUTE_ELEMENTS,
    cost: int = QUICK_REFUTE_COST,
    seeds: int = 2,
) -> Counterexample | None:
    from gdv.backends import reference
    from gdv.validate.counterexample import replay, special_inputs

    size = sum(p.type.num_elements for p in ob.src.params)
    size += sum(o.type.num_elements for f in (ob.src, ob.tgt) for o in f.ops)
    if ob.theory != "fp" or size > elements or ob.kind != "equivalence":
        return None
    if replay_cost(ob.src) + replay_cost(ob.tgt) > cost:
        return None
    for seed in range(seeds):
        for origin, draw in (
            ("random inputs", reference.random_inputs),
            ("special values", special_inputs),
        ):
            inputs = draw(ob.src, seed)
            found = replay(ob.src, ob.tgt, inputs, "fp")
            if found is not None:
                return Counterexample(*found, inputs, f"{origin} (seed {seed})")
    return None


quick_refute = _quick_refute
"""The probe alone (gdv reduce decides `refuted:` signatures with it before any solver, with
limits of its own: `elements` and `cost` as QUICK_REFUTE_ELEMENTS and QUICK_REFUTE_COST, and
`seeds` random and special input sets each)."""


def _solve_formula(ob: Obligation, timeout: float) -> tuple[str, float, str, None]:
    """A formula claim asserts a violation: unsat proves the claim, a model refutes it."""
    import z3

    formula = claim_formula(ob)
    assert formula is not None
    start = time.perf_counter()
    s = z3.Solver()
    s.from_string(formula)
    r = check_within(s, timeout)
    seconds = time.perf_counter() - start
    if r == z3.unsat:
        return "proved", seconds, "", None
    if r == z3.sat:
        m = s.model()
        shown = ", ".join(f"{d.name()} = {m[d]}" for d in sorted(m.decls(), key=str)[:12])
        return "refuted", seconds, f"violated at {shown}", None
    return "unknown", seconds, f"the solver answered unknown ({s.reason_unknown()})", None


def _solve(ob: Obligation, timeout: float) -> tuple[str, float, str, Counterexample | None]:
    if claim_formula(ob) is not None:
        return _solve_formula(ob, timeout)
    with kernel_bodies(ob.functions):
        return _solve_equivalence(ob, timeout)


def _solve_equivalence(
    ob: Obligation, timeout: float
) -> tuple[str, float, str, Counterexample | None]:
    start = time.perf_counter()
    cex = _quick_refute(ob)
    if cex is not None:
        return "refuted", time.perf_counter() - start, f"out{cex.output} differs", cex
    try:
        r = check_equivalence(ob.src, ob.tgt, ob.theory, timeout, names=("src", "tgt"))
    except MemoryError:
        return "unknown", time.perf_counter() - start, "out of memory", None
    except NotEncoded as e:  # a loop too large to encode: not proved, and not refuted
        return "unknown", time.perf_counter() - start, e.message, None
    status = _VERDICT_STATUS[r.verdict]
    return status, time.perf_counter() - start, r.reason, r.counterexample


def discharge(
    obligations: list[Obligation],
    *,
    jobs: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    memory_mb: int = DEFAULT_MEMORY_MB,
    cache_dir: Path | None = None,
    use_cache: bool = True,
    progress=None,
) -> list[Outcome]:
    """Discharge every obligation; the outcomes come back in the obligations' order.

    `timeout` is seconds per solver query; `jobs` worker processes (default: all cores; 1
    solves in this process). `progress(done, total)` is called as outcomes arrive."""
    cache = Cache((cache_dir or default_cache_dir()) if use_cache else None)
    outcomes: list[Outcome | None] = [None] * len(obligations)
    todo: list[int] = []
    seen_claims: dict[str, int] = {}
    claims: list[str] = []
    duplicates: list[tuple[int, int]] = []
    texts: dict[str, list[str]] = {}
    for i, ob in enumerate(obligations):
        claim = canonical_claim(ob)
        if claim not in texts:  # the query text is a function of the claim
            texts[claim] = obligation_queries(ob)
        queries = texts[claim]
        claims.append(claim)
        key = claim_key(claim)
        if cache.proved(claim):
            outcomes[i] = Outcome(
                ob, "proved", 0.0, "proved before (cache)", None, True, key=key, smt2=queries
            )
        elif claim in seen_claims:
            duplicates.append((i, seen_claims[claim]))
            outcomes[i] = Outcome(ob, "unknown", 0.0, "", None, key=key, smt2=queries)
        else:
            seen_claims[claim] = i
            outcomes[i] = Outcome(ob, "unknown", 0.0, "", None, key=key, smt2=queries)
            todo.append(i)
    total, done = len(obligations), len(obligations) - len(todo) - len(duplicates)
    if progress:
        progress(done, total)
    jobs = jobs or os.cpu_count() or 1

    def record(i: int, result: tuple[str, float, str, Counterexample | None]) -> None:
        nonlocal done
        out = outcomes[i]
        assert out is not None
        out.status, out.seconds, out.reason, out.counterexample = result
        cache.store(claims[i], out)
        done += 1
        if progress:
            progress(done, total)

    if jobs == 1 or len(todo) <= 1:
        for i in todo:
            record(i, _solve(obligations[i], timeout))
    else:
        _solve_in_workers(obligations, todo, jobs, timeout, memory_mb, record)
    for i, j in duplicates:
        twin = outcomes[j]
        out = outcomes[i]
        assert twin is not None and out is not None
        out.status, out.reason, out.counterexample = twin.status, twin.reason, twin.counterexample
        out.shared_with = twin.obligation.id
        done += 1
        if progress:
            progress(done, total)
    return [o for o in outcomes if o is not None]


def _solve_in_workers(obligations, todo, jobs, timeout, memory_mb, record) -> None:
    pool = concurrent.futures.ProcessPoolExecutor(
        max_workers=min(jobs, len(todo)), initializer=_limit_memory, initargs=(memory_mb,)
    )
    try:
        futures = {pool.submit(_solve, obligations[i], timeout): i for i in todo}
        # z3 honours its own timeout per query; this wall-clock guard catches a worker that
        # does not return at all (each obligation asks at most two queries per output).
        per = max(len(obligations[i].src.results) for i in todo)
        guard = (2 * per * timeout + 30) * max(1, len(todo) / min(jobs, len(todo)))
        try:
            for fut in concurrent.futures.as_completed(futures, timeout=guard):
                i = futures[fut]
                try:
                    record(i, fut.result())
                except (
                    concurrent.futures.process.BrokenProcessPool,
                    MemoryError,
                    ImportError,
                    OSError,
                ) as e:
                    # A worker that runs out of its address space fails in whatever it was
                    # doing (often loading a library): never a proof, and never a crash.
                    why = f"{type(e).__name__}: {str(e)[:200]}"
                    limit = f"its memory limit is {memory_mb} MB (--memory-limit)"
                    record(i, ("unknown", 0.0, f"the solver worker failed; {limit}: {why}", None))
        except concurrent.futures.TimeoutError:
            for fut, i in futures.items():
                if not fut.done():
                    record(i, ("unknown", guard, "the solver did not return in time", None))
    finally:
        for p in getattr(pool, "_processes", {}).values():
            if p.is_alive():
                p.kill()
        pool.shutdown(wait=False, cancel_futures=True)
