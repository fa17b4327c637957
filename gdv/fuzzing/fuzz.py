"""`gdv fuzz`: random well-typed programs, compiled at every level for every target and run
against the reference backend, Csmith-style (issue 18).

Each program (`gdv.fuzzing.programs.sample`) is checked for every target and level on two
input sets: seeded inputs with float specials (NaN, infinities, -0.0, subnormals, the
largest finite value) for bit-exactness against the reference backend, and seeded inputs
within the declared ranges for the observed error against the rigorous bound. Every
obligation must be proved, or refuted with a counterexample that replays; nothing may crash.
What a target refuses with a clear input error (`error:` signatures, except `error:internal`,
a pass producing invalid IR) is counted as refused, not as a failure. Every failure is
reduced with `gdv reduce` into the output folder as a lit regression test."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gdv.fuzzing.signature import Case, CaseOptions, observe
from gdv.ir.core import Module
from gdv.ir.printer import print_module

BATCH = 16
"""Programs drawn per seed; the k-th batch uses seed S + k."""


@dataclass
class Finding:
    program: int
    target: str
    level: int
    signature: str
    text: str
    specials: bool = True
    """Whether the inputs with specials showed it (else the seeded in-range inputs did)."""
    reduced: str | None = None
    lit: str | None = None
    reduced_ops: int | None = None


@dataclass
class Report:
    programs: int = 0
    checks: int = 0
    clean: Counter = field(default_factory=Counter)
    refused: Counter = field(default_factory=Counter)
    failures: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    def table(self) -> str:
        keys = sorted(
            set(self.clean) | set(self.refused) | {(f.target, f.level) for f in self.failures}
        )
        rows = ["| target | level | clean | refused | failed |", "|---|---|---|---|---|"]
        for t, lv in keys:
            failed = sum(1 for f in self.failures if (f.target, f.level) == (t, lv))
            rows.append(
                f"| {t} | -O{lv} | {self.clean[(t, lv)]} | {self.refused[(t, lv)]} | {failed} |"
            )
        by_sig = Counter(f.signature for f in self.failures)
        lines = [
            f"{self.programs} programs, {self.checks} compiles checked in {self.seconds:.1f} s, "
            f"{len(self.failures)} failures",
            *rows,
        ]
        for sig, n in sorted(by_sig.items()):
            lines.append(f"  {n} x {sig}")
        for f in self.failures:
            where = f" -> {f.lit}" if f.lit else ""
            lines.append(f"  program {f.program} {f.target} -O{f.level}: {f.signature}{where}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {
            "programs": self.programs,
            "checks": self.checks,
            "seconds": round(self.seconds, 3),
            "clean": {f"{t} -O{lv}": n for (t, lv), n in sorted(self.clean.items())},
            "refused": {f"{t} -O{lv}": n for (t, lv), n in sorted(self.refused.items())},
            "failures": [vars(f) for f in self.failures],
        }


def refused(sig: str) -> bool:
    """An input error that is a target's or the IR's refusal, not a pass producing invalid IR
    (those messages start `internal:`)."""
    return sig.startswith("error:") and not sig.startswith("error:internal")


def check(module: Module, seed: int, target: str, level: int, timeout: float) -> tuple[str, bool]:
    """The signature one program shows on one target and level, and whether the special
    inputs showed it: with special inputs first (proofs, crashes, bit-exactness), then, when
    clean, with in-range inputs (the bound, or a crash only they reach)."""
    from gdv.fuzzing.programs import inputs

    options = CaseOptions(target=target, level=level, timeout=timeout)
    sig = observe(Case([module], inputs(module, seed), options))
    if sig != "clean":
        return sig, True
    return observe(Case([module], None, options), "bound"), False


def fuzz(
    seed: int = 0,
    count: int | None = None,
    seconds: float | None = None,
    ops: Sequence[str] | None = None,
    targets: Sequence[str] | None = None,
    levels: Sequence[int] = (0, 1, 2, 3),
    out: str | Path | None = None,
    reduce: bool = True,
    max_ops: int = 6,
    timeout: float = 10.0,
    progress=None,
) -> Report:
    """Fuzz until `count` programs are checked or `seconds` have passed (a program started
    is finished)."""
    from gdv.fuzzing.programs import sample
    from gdv.ir.targets import TARGET_NAMES

    targets = list(targets or TARGET_NAMES)
    report = Report()
    start = time.perf_counter()
    batch_seed, pending = seed, []
    while True:
        if count is not None and report.programs >= count:
            break
        if seconds is not None and time.perf_counter() - start >= seconds:
            break
        if not pending:
            pending = sample(batch_seed, BATCH, ops, max_ops)
            batch_seed += 1
            if not pending:
                break
        module = pending.pop(0)
        k = report.programs
        report.programs += 1
        for target in targets:
            for level in levels:
                sig, specials = check(module, seed * 100003 + k, target, level, timeout)
                report.checks += 1
                if sig == "clean":
                    report.clean[(target, level)] += 1
                elif refused(sig):
                    report.refused[(target, level)] += 1
                else:
                    f = Finding(k, target, level, sig, print_module(module), specials)
                    report.failures.append(f)
                    if reduce and out is not None:
                        _reduce_into(f, module, seed * 100003 + k, out)
        if progress:
            progress(report)
    report.seconds = time.perf_counter() - start
    return report


def _reduce_into(f: Finding, module: Module, seed: int, out: str | Path) -> None:
    from gdv.fuzzing.programs import inputs
    from gdv.fuzzing.reduce import reduce_case
    from gdv.fuzzing.regress import write_lit
    from gdv.ir.diagnostics import IRError

    options = CaseOptions(target=f.target, level=f.level)
    case = Case([module], inputs(module, seed) if f.specials else None, options)
    try:
        result = reduce_case(case, f.signature)
    except IRError as e:  # not reproducible on its own (should not happen): keep the original
        f.reduced = f"not reduced: {e.message}"
        path = Path(out) / f"program-{f.program}.gdv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f.text)
        f.lit = str(path)
        return
    f.reduced_ops = result.case.ops
    f.lit = str(write_lit(result, out, f"fuzz program {f.program} (seed {seed})"))
