"""Proof obligations as data (DESIGN.md, "Obligations and their discharge").

A pass never calls a solver: it returns obligations, and `gdv.validate` turns each into an SMT
query and discharges it. An equivalence obligation carries two small functions with one
signature, `src` (what the pass found) and `tgt` (what it put in its place), so that what a
rewrite changed is proved locally; the whole function before and after is the fallback.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gdv.ir.core import Function
from gdv.ir.diagnostics import Loc

KINDS = ("equivalence", "legality", "coverage", "memory-safety", "bound")
THEORIES = ("fp", "real", "int")


@dataclass
class Obligation:
    """One claim a pass makes, to be proved for all inputs.

    `id` is `<pass>/<rule>/<kind>`, with a `#N` suffix when a rule fires more than once."""

    id: str
    kind: str
    theory: str
    src: Function
    tgt: Function
    claim: str
    assumptions: list[str] = field(default_factory=list)
    loc: Loc | None = None
    functions: list[Function] = field(default_factory=list)
    """Functions `src` and `tgt` call (kernel bodies), in scope while the claim is encoded."""
    formula: str | None = None
    """For claims that are no equivalence (`coverage`, `memory-safety`): SMT-LIB 2 text whose
    unsatisfiability is the claim (it asserts a violation); `src`/`tgt` then only say where."""

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind
        assert self.theory in THEORIES, self.theory

    @property
    def pass_name(self) -> str:
        return self.id.split("/", 1)[0]

    @property
    def rule(self) -> str:
        return self.id.split("/")[1]
