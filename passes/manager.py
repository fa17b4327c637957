"""The pass manager: runs a pipeline, verifies the module after every pass, collects the
obligations (adding the claim a pass forgot for a kernel whose fold it changed:
`gdv.passes.unclaimed`), times each pass, and prints IR after passes on request."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gdv.ir.core import Module
from gdv.ir.diagnostics import IRError
from gdv.ir.obligation import Obligation
from gdv.ir.printer import print_module
from gdv.ir.verifier import verify
from gdv.passes.base import Pass, Step
from gdv.passes.unclaimed import snapshot, unclaimed_obligations

STAGE_AFTER = {"decompose-composites": "core", "lower-to-kernels": "loop"}
"""The stage a module is at (and verified at) after these passes."""


@dataclass
class PassRecord:
    """What one pass did: its obligations, whether it changed the module, its time."""

    name: str
    obligations: list[Obligation]
    changed: bool
    seconds: float
    stage: str
    bound_change: dict | None = None
    steps: list[Step] | None = None
    """The pass's certificate (`Step`), or None (an external pass: no certificate)."""
    """For passes that made `real` claims: each output's rigorous error bound before and after
    (`{"before": [...], "after": [...]}`), or `{"unavailable": reason}`."""


@dataclass
class PipelineResult:
    module: Module
    records: list[PassRecord] = field(default_factory=list)
    stages: list[tuple[str, Module]] = field(default_factory=list)
    """(pass name or "input", module after it), for evidence and --print-ir-after-all."""

    @property
    def obligations(self) -> list[Obligation]:
        return [o for r in self.records for o in r.obligations]


@dataclass
class PassManager:
    passes: list[Pass]
    disabled: frozenset[str] = frozenset()
    print_after: frozenset[str] = frozenset()
    print_after_all: bool = False
    printer: Callable[[str], None] = print

    def run(self, module: Module) -> PipelineResult:
        known = {p.name for p in self.passes}
        for name in self.disabled | self.print_after:
            if name not in known:
                raise IRError(
                    f"no pass named '{name}' in this pipeline (passes: {', '.join(known)})"
                )
        result = PipelineResult(module, stages=[("input", module)])
        stage = "graph"
        for p in self.passes:
            if p.name in self.disabled:
                continue
            kernels = snapshot(module)
            start = time.perf_counter()
            out = p.run(module)
            seconds = time.perf_counter() - start
            stage = STAGE_AFTER.get(p.name, stage)
            try:
                verify(out.module, stage=stage)
            except IRError as e:
                raise IRError(f"internal: pass {p.name} produced invalid IR: {e}") from None
            # Fail-closed: a kernel whose meaning (fold order, rounding) the pass changed
            # without an obligation of its own gets the claim it should have made, under `fp`
            # (`gdv.passes.unclaimed`); appended, so the steps' obligation numbers still hold.
            extra = unclaimed_obligations(p.name, kernels, module, out.module, out.obligations)
            obligations = [*out.obligations, *extra] if extra else out.obligations
            obligations = [with_called_functions(o, module) for o in obligations]
            module = out.module
            result.records.append(
                PassRecord(
                    p.name, obligations, out.changed or bool(extra), seconds, stage,
                    steps=out.steps,
                )
            )  # fmt: skip
            result.stages.append((p.name, module))
            if self.print_after_all or p.name in self.print_after:
                self.printer(f"// ----- IR after {p.name} -----\n{print_module(module)}")
        result.module = module
        return result


def with_called_functions(ob: Obligation, module: Module) -> Obligation:
    """`ob` with the functions the control flow ops and kernels of its pair name (and those
    they call in turn), as the pass's input `module` defines them, in scope where the pass did
    not give them. A pass rewrites each function of a module with claims of its own, so a call
    by name means the same before and after it, and either side's definition may serve the
    pair. (A rule of `rewrite_module` merging two kernels of a loop-stage input, as
    `eliminate-common-subexpressions` does, gives none: its claim could not be encoded.)"""
    from gdv.ir.ops.control import called_functions, functions_named

    pair = [*ob.src.ops, *ob.tgt.ops]
    if not any(functions_named(op) or op.name in ("kernel", "conv2d") for op in pair):
        return ob  # the claims without calls stay as the pass made them
    have = {f.name for f in ob.functions}
    found = [f for f in called_functions(pair, module) if f.name not in have]
    if not found:
        return ob
    return dataclasses.replace(ob, functions=[*ob.functions, *found])
