"""What makes a case interesting: its *signature* (issue 18).

A signature is a short string `KIND:DETAIL`:

| signature                    | shown when                                                    |
|------------------------------|---------------------------------------------------------------|
| `refuted:PASS/RULE`          | an obligation of that pass and rule is refuted                |
| `unknown:PASS/RULE`          | ... is unknown (the solver could not decide it)               |
| `error:CLASS`                | parsing, verifying or compiling stops with an input error of  |
|                              | that message class (the message with names, numbers, types    |
|                              | and quoted text taken out)                                    |
| `crash:TYPE@MODULE.FUNCTION` | an exception that is no input error (`gdv` exits 4), raised   |
|                              | in that innermost gdv frame                                   |
| `mismatch:TARGET`            | the target's output differs from the reference's beyond what  |
|                              | the target allows (bit-exact, or within both error bounds     |
|                              | added where transcendentals or `real` claims are involved,    |
|                              | under ranges widened to hold the finite inputs; NaN and       |
|                              | infinities must match exactly)                                |
| `bound:TARGET`               | an executed output lies farther from the exact (real) result  |
|                              | than the larger of the source's and the final module's        |
|                              | rigorous error bounds on the target                           |
| `tv:VERDICT`, `tv-real:VERDICT` | a `gdv tv` pair (two functions) gets that verdict          |
| `clean`                      | none of these: every obligation proved, the run agrees        |

`observe(case)` says which one a case shows (the first in the order above that a compile meets:
the input, the passes, the proofs, the run, the bounds); `observe(case, want)` decides whether
it shows `want`, doing only the work that `want` needs (a `refuted:` signature discharges only
that pass and rule's obligations, and never builds the C program).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import re
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gdv.backends.reference.inputs import DEFAULT_FLOAT_RANGE
from gdv.ir.core import Function, Module
from gdv.ir.diagnostics import IRError
from gdv.ir.printer import print_module

KINDS = ("refuted", "unknown", "error", "crash", "mismatch", "bound", "tv", "tv-real", "clean")
TV_SEPARATOR = "// -----\n"
_PACKAGE_ROOTS = tuple(
    str(Path(__file__).resolve().parents[2] / d) + os.sep
    for d in ("gdv", "ir", "passes", "validate", "backends", "evidence", "grammar", "frontends")
)


@dataclass(frozen=True)
class CaseOptions:
    """How a case is compiled: the `gdv compile` options a signature depends on. `passes`,
    when set, replaces the level's pipeline (names of `gdv.passes.pipelines.PASSES`, or a
    prefix of the pipeline as `pipeline:N`)."""

    target: str = "c"
    level: int = 2
    reassociate: bool = False
    fast_math: bool = False
    external_passes: tuple[str, ...] = ()
    timeout: float = 10.0
    passes: tuple[str, ...] | None = None

    def argv(self) -> list[str]:
        """The options as `gdv reduce`/`gdv compile` arguments (for RUN lines)."""
        out = ["--target", self.target, f"-O{self.level}"]
        out += ["--reassociate"] if self.reassociate else []
        out += ["--fast-math"] if self.fast_math else []
        for cmd in self.external_passes:
            out += ["--external-pass", cmd]
        if self.timeout != 10.0:
            out += ["--timeout", f"{self.timeout:g}"]
        if self.passes is not None:
            out += ["--passes", ",".join(self.passes)]
        return out


@dataclass
class Case:
    """A program (or a `gdv tv` pair, two modules), its inputs and its compile options."""

    modules: list[Module]
    inputs: dict[str, np.ndarray] | None = None
    options: CaseOptions = field(default_factory=CaseOptions)

    @property
    def is_pair(self) -> bool:
        return len(self.modules) == 2

    def text(self) -> str:
        return TV_SEPARATOR.join(print_module(m) for m in self.modules)

    def key(self) -> str:
        """A hash of everything the signature depends on."""
        h = hashlib.sha256(self.text().encode())
        h.update(repr(dataclasses.astuple(self.options)).encode())
        for name in sorted(self.inputs or {}):
            a = np.ascontiguousarray(self.inputs[name])
            h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
            h.update(a.tobytes())
        return h.hexdigest()

    @property
    def ops(self) -> int:
        return sum(len(m.entry.ops) for m in self.modules if m.entry is not None)

    @property
    def largest_dim(self) -> int:
        dims = [
            d
            for m in self.modules
            if m.entry is not None
            for t in [p.type for p in m.entry.params] + [o.type for o in m.entry.ops]
            for d in t.shape
        ]
        return max(dims, default=0)


def parse_case_text(text: str, filename: str = "<case>") -> list[Module]:
    """One module, or a `gdv tv` pair written as two modules separated by `// -----`."""
    from gdv.ir.parser import parse

    parts = text.split(TV_SEPARATOR) if TV_SEPARATOR in text else [text]
    if len(parts) > 2:
        raise IRError(f"a case holds one module or a pair of two, found {len(parts)}")
    return [parse(p, filename) for p in parts]


def check_signature(sig: str) -> str:
    """`sig` if it is a well-formed signature, else an IRError saying what is accepted."""
    kind, _, detail = sig.partition(":")
    if kind not in KINDS or (kind != "clean" and not detail):
        raise IRError(
            f"unknown signature {sig!r}: expected KIND:DETAIL with KIND one of "
            + ", ".join(k for k in KINDS if k != "clean")
            + ", or 'clean'"
        )
    return sig


def slug(sig: str) -> str:
    """A file-name form of a signature: `refuted-fold-constants-fold`."""
    return re.sub(r"[^a-z0-9]+", "-", sig.lower()).strip("-")[:80] or "case"


_CLASS_PATTERNS = (
    (re.compile(r"(?:\S+?|<[^>]*>):\d+:\d+: "), ""),  # positions: a file name must not matter
    (re.compile(r"'[^']*'|\"[^\"]*\""), "Q"),
    (re.compile(r"[%@][\w.$-]+"), "V"),
    (re.compile(r"\b(?:f64|f32|f16|bf16|i64|i32|i16|i8|i1|u8|u16|u32|u64)\[[^\]]*\]"), "T"),
    (re.compile(r"\[[^\]]*\]"), "L"),
    (re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"), "N"),
)


def error_class(message: str) -> str:
    """An input error's message class: the message with quoted text, value names, types, lists
    and numbers replaced, so that it stays the same as a case shrinks."""
    text = message.splitlines()[0] if message else ""
    for pattern, repl in _CLASS_PATTERNS:
        text = pattern.sub(repl, text)
    return re.sub(r"\s+", " ", text).strip()[:100]


def crash_signature(e: BaseException) -> str:
    """`crash:TYPE@MODULE.FUNCTION` of the innermost frame inside gdv's own code."""
    where = "?"
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        path = str(Path(frame.filename).resolve())
        root = next((r for r in _PACKAGE_ROOTS if path.startswith(r)), None)
        if root is not None:
            rel = Path(path[len(root) :]).with_suffix("")
            top = Path(root).name  # the folders are imported as gdv.<folder>
            where = ".".join(("gdv", *([] if top == "gdv" else [top]), *rel.parts, frame.name))
            break
    return f"crash:{type(e).__name__}@{where}"


def observe(case: Case, want: str | None = None, quick: bool = False) -> str:
    """The signature `case` shows; with `want`, `want` when the case shows it (else whatever
    was found first, possibly `clean`), doing only the work `want` needs. With `quick`, a
    `refuted:` signature is decided by the seeded-input probe alone (a difference it finds
    is a refutation with a replayed counterexample; none found counts as not shown): what
    the reducer uses once the original case is refuted that way."""
    try:
        return _observe(case, want, quick)
    except IRError as e:
        return f"error:{error_class(e.message)}"
    except Exception as e:  # noqa: BLE001 - a crash is a signature, never a crash of reduce
        return crash_signature(e)


def shows(case: Case, want: str) -> bool:
    return observe(case, want) == want


def _observe(case: Case, want: str | None, quick: bool = False) -> str:
    from gdv.ir.verifier import verify

    kind = want.split(":", 1)[0] if want else None
    modules = [verify(m) for m in case.modules]
    if case.is_pair:
        return _tv(modules, case.options, kind)
    module, records = _run_passes(modules[0], case.options)
    if kind in (None, "refuted", "unknown"):
        found = _prove(records, case.options, want, quick)
        if found is not None or kind is not None:
            return found or "clean"
    if kind not in (None, "mismatch", "bound", "crash", "error"):
        return "clean"
    return _execute(modules[0], module, case, kind)


def _tv(modules: list[Module], options: CaseOptions, kind: str | None) -> str:
    from gdv.validate.equivalence import check_equivalence

    a, b = (m.entry for m in modules)
    if a is None or b is None:
        raise IRError("a tv pair needs an entry function (@main, or the only one) in each module")
    theory = "real" if kind == "tv-real" else "fp"
    result = check_equivalence(a, b, theory, timeout=options.timeout)
    return f"{'tv-real' if theory == 'real' else 'tv'}:{result.verdict}"


def pipeline_passes(options: CaseOptions) -> list:
    """The passes a case runs: the level's pipeline, a prefix of it, or named passes."""
    from gdv.backends.targets import get_target
    from gdv.passes.pipelines import PASSES, pipeline

    full = pipeline(
        options.target,
        options.level,
        options.fast_math,
        reassociate=options.reassociate,
        **get_target(options.target).schedule_parameters(),
    )
    if options.passes is None:
        return full
    if len(options.passes) == 1 and options.passes[0].startswith("pipeline:"):
        return full[: int(options.passes[0].split(":", 1)[1])]
    by_name = {p.name: p for p in full}
    out = []
    for name in options.passes:
        if name not in PASSES:
            raise IRError(f"unknown pass {name!r} (available: {', '.join(sorted(PASSES))})")
        out.append(by_name.get(name) or PASSES[name]())
    return out


def _run_passes(module: Module, options: CaseOptions):
    from gdv.external import run_external_pass
    from gdv.passes.manager import PassManager, PassRecord

    records = []
    for k, command in enumerate(options.external_passes, start=1):
        module, obligations = run_external_pass(module, command, k, 60.0)
        records.append(PassRecord(f"external-{k}", obligations, True, 0.0, "graph"))
    result = PassManager(pipeline_passes(options), printer=lambda *a, **k: None).run(module)
    return result.module, records + result.records


PROBE_ELEMENTS, PROBE_COST = 1 << 26, 1 << 30
"""Limits of the seeded-input probe before any solver: far above `discharge`'s own, since a
whole-function obligation of a real model (MiniLM: 22M weights, 1.5e8 element operations, a
third of a second on the reference backend) is decided by a run where building its SMT query
alone takes longer than a reduction may."""


def _prove(records, options: CaseOptions, want: str | None, quick: bool = False) -> str | None:
    from gdv.ir.ops.kernel import kernel_bodies
    from gdv.validate.discharge import discharge, quick_refute

    obligations = [o for r in records for o in r.obligations]
    if want is not None:
        rule = want.split(":", 1)[1]
        obligations = [o for o in obligations if f"{o.pass_name}/{o.rule}" == rule]
    if want is None or want.startswith("refuted:"):
        # First what needs no solver: a pass that changed nothing cannot be refuted, and a
        # difference the reference backend shows on seeded random or special inputs is a
        # refutation with a replayed counterexample (what `discharge` would find first).
        obligations = [o for o in obligations if not _unchanged(o)]
        for ob in obligations:
            with kernel_bodies(ob.functions):
                # quick (gdv reduce's candidates): one seed, and a candidate it misses is
                # merely not kept, while whatever it finds is a replayed refutation
                seeds = 1 if quick and want is not None else 2
                if quick_refute(ob, PROBE_ELEMENTS, PROBE_COST, seeds) is not None:
                    return f"refuted:{ob.pass_name}/{ob.rule}"
        if quick and want is not None:
            return None
    if not obligations:
        return None
    outcomes = discharge(obligations, jobs=1, timeout=options.timeout, use_cache=False)
    status = {"refuted": None, "unknown": None}
    for out in outcomes:
        if out.status in status and status[out.status] is None:
            status[out.status] = f"{out.status}:{out.obligation.pass_name}/{out.obligation.rule}"
    if want is not None:
        return want if want in status.values() else None
    return status["refuted"] or status["unknown"]


def _unchanged(ob) -> bool:
    """An equivalence claim between two identical functions (up to their names)."""
    a, b = ob.src, ob.tgt
    return (
        ob.kind == "equivalence"
        and ob.formula is None
        and a.params == b.params
        and a.ops == b.ops
        and a.returns == b.returns
        and a.results == b.results
    )


def _execute(source: Module, final: Module, case: Case, kind: str | None) -> str:
    from gdv.backends import reference
    from gdv.backends.targets import get_target
    from gdv.validate.bounds import analyze

    target = get_target(case.options.target)
    runner = target.executable(final)
    inputs = case.inputs if case.inputs is not None else reference.random_inputs(source, 0)
    want = reference.run(source, inputs)
    got = runner(inputs)
    if kind in (None, "mismatch", "crash", "error"):
        bad = [
            k
            for k, (a, b) in enumerate(zip(want, got, strict=True))
            if not reference.bit_equal(a, b)
        ]
        if bad:
            loose = case.options.reassociate or case.options.fast_math or case.options.level == 3
            loose = loose or not target.reference_transcendentals
            limits = _limits(source, final, case.options.target, inputs, bad) if loose else []
            if not loose or any(
                _differs(want[k], got[k], limit) for k, limit in zip(bad, limits, strict=True)
            ):
                return f"mismatch:{case.options.target}"
    if kind in (None, "bound", "crash") and _within_ranges(source, inputs):
        # The executed final module's error from the source's exact value is within the
        # source's bound on the target where every pass kept the floats (fp claims: the same
        # results bit for bit), and within the final's own bound where passes kept the exact
        # value (real claims). A fold that rounds a literal is the first kind and changes
        # the exact value, so the check allows the larger of the two.
        try:
            rng = DEFAULT_FLOAT_RANGE
            target_name = case.options.target
            run_bounds = [
                max(f.abs, s.abs)
                for f, s in zip(
                    analyze(final, rng, target=target_name).outputs,
                    analyze(source, rng, target=target_name).outputs,
                    strict=True,
                )
            ]
            ideal_bounds = analyze(source, rng, ideal=True).outputs
        except IRError:
            run_bounds = None
        if run_bounds is not None:
            ideal = reference.run(source, inputs, mode="ideal")
            for b, r, x, y in zip(run_bounds, ideal_bounds, got, ideal, strict=True):
                if _beyond(b + r.abs, x, y):
                    return f"bound:{case.options.target}"
    return "clean"


def _limits(source: Module, final: Module, target: str, inputs, outputs: list[int]):
    """How far each of `outputs` may lie from the reference's when the target is allowed to
    differ (`real` claims, or transcendentals other than the reference's): the two rigorous
    bounds added, under ranges that hold the inputs (each parameter's declared or the default
    range, widened to its finite input values, so inputs with specials are covered too).
    Where no bound can be computed, infinity: only the NaN and infinity pattern is checked."""
    from gdv.validate.bounds import analyze

    wide = _widened(source, inputs)
    try:
        a = analyze(wide, DEFAULT_FLOAT_RANGE).outputs
        b = analyze(_with_ranges(final, wide), DEFAULT_FLOAT_RANGE, target=target).outputs
        sums = [x.abs + y.abs for x, y in zip(a, b, strict=True)]
    except IRError:
        sums = [math.inf] * len(source.entry.results)
    return [sums[k] for k in outputs]


def _widened(module: Module, inputs: dict[str, np.ndarray]) -> Module:
    """`module` with each float parameter's range widened to hold its finite input values."""
    fn = module.entry
    params = []
    for p in fn.params:
        if not p.type.dtype.is_float or p.name not in inputs:
            params.append(p)
            continue
        x = np.asarray(inputs[p.name], dtype=np.float64).ravel()
        x = x[np.isfinite(x)]
        if x.size:
            lo, hi = p.range or DEFAULT_FLOAT_RANGE
            lo, hi = min(lo, float(x.min())), max(hi, float(x.max()))
            p = dataclasses.replace(p, attrs={**p.attrs, "range": [lo, hi]})
        params.append(p)
    return with_entry(module, dataclasses.replace(fn, params=params))


def _with_ranges(final: Module, ranged: Module) -> Module:
    """`final` with the parameter ranges of `ranged` (same entry parameters by name)."""
    by_name = {p.name: p for p in ranged.entry.params}
    params = [
        dataclasses.replace(p, attrs={**p.attrs, "range": by_name[p.name].attrs["range"]})
        if p.name in by_name and "range" in by_name[p.name].attrs
        else p
        for p in final.entry.params
    ]
    return with_entry(final, dataclasses.replace(final.entry, params=params))


def with_entry(module: Module, fn: Function) -> Module:
    """`module` with `fn` in place of its entry function."""
    entry = module.entry
    return Module([fn if f is entry else f for f in module.functions], module.filename)


def _differs(want: np.ndarray, got: np.ndarray, limit: float) -> bool:
    """Whether `got` lies beyond `limit` of `want`: a NaN or an infinity where the other has
    none (or the other sign), or finite values farther apart than `limit`."""
    x, y = np.asarray(want, dtype=np.float64), np.asarray(got, dtype=np.float64)
    if (np.isnan(x) != np.isnan(y)).any():
        return True
    special = np.isinf(x) | np.isinf(y)
    if (x[special] != y[special]).any():
        return True
    both = np.isfinite(x) & np.isfinite(y)
    return bool(both.any() and np.max(np.abs(x[both] - y[both])) > limit)


def _within_ranges(fn_module: Module, inputs: dict[str, np.ndarray]) -> bool:
    """Whether every float input lies in its parameter's range (the bounds' assumption)."""
    fn = fn_module.entry
    for p in fn.params:
        if not p.type.dtype.is_float:
            continue
        lo, hi = p.range or DEFAULT_FLOAT_RANGE
        x = np.asarray(inputs[p.name], dtype=np.float64)
        if x.size and not (np.all(np.isfinite(x)) and x.min() >= lo and x.max() <= hi):
            return False
    return True


def _beyond(limit: float, got: np.ndarray, ideal: np.ndarray) -> bool:
    """Whether a finite executed value lies farther than `limit` from the exact value."""
    if not np.issubdtype(np.asarray(ideal).dtype, np.floating) or limit is None:
        return False
    x = np.asarray(got, dtype=np.float64)
    y = np.asarray(ideal, dtype=np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    if not ok.any() or not np.isfinite(limit):
        return False
    return bool(np.max(np.abs(x[ok] - y[ok])) > limit)
