"""Symbolic floating-point error bounds (DESIGN.md, Error bounds).

`analyze(module)` bounds every output of the entry function: the interval of its exact values,
a rigorous bound on |computed - exact| (the exact program being its `real` reading, IR_SPEC.md
section 5) as a number and as a sympy expression over the unit roundoffs, a relative bound when
the interval excludes 0, and the Higham-Mary probabilistic companion. Rules live in one file
per op family, registered against the op specs in `registry.RULES`.

- `model`: the per-tensor abstract value `TB` (exact and computed intervals, error `Err`,
  agreed special values, relational facts) and interval arithmetic with outward rounding;
- `rounding`: one rounding, Higham's recursive summation, other reduction orders, overflow;
- `elementwise`, `layout`, `reduce`, `contract`, `conv`, `gather`, `composite`: the rules;
- `program`: `analyze`, the whole-program propagation; `measure`: measured errors and
  adversarial input families for tests and benchmarks.
"""

from gdv.validate.bounds import (  # noqa: F401  (importing the families fills RULES)
    collective,
    composite,
    contract,
    control,
    conv,
    elementwise,
    gather,
    kernel,
    layout,
    reduce,
)
from gdv.validate.bounds.model import SYMBOL_VALUES, TB, Err
from gdv.validate.bounds.program import OutputBound, ProgramBounds, analyze
from gdv.validate.bounds.registry import DEFAULT_LAMBDA, DEFAULT_ULPS, RULES, Context

__all__ = [
    "DEFAULT_LAMBDA",
    "DEFAULT_ULPS",
    "RULES",
    "SYMBOL_VALUES",
    "TB",
    "Context",
    "Err",
    "OutputBound",
    "ProgramBounds",
    "analyze",
]


def bound_change(before, after) -> dict:
    """How a `real` claim's step changed the program's float error (IR_SPEC.md section 5):
    every output's rigorous absolute bound before and after it (`{"before": [...], "after":
    [...]}`, None for an unbounded output), or `{"unavailable": reason}`. Plain data, so the
    evidence bundle stores it and its checker recomputes it from the two stages."""
    from gdv.ir.diagnostics import IRError

    def finite(x: float | None) -> float | None:
        return None if x is None or x != x or x in (float("inf"), float("-inf")) else float(x)

    try:
        old = [finite(o.abs) for o in analyze(before).outputs]
        new = [finite(o.abs) for o in analyze(after).outputs]
    except IRError as e:
        return {"unavailable": e.message}
    return {"before": old, "after": new}
