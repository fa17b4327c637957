"""The table of error-bound rules, one per op spec (DESIGN.md, one op one column), and the
context the rules read: the rounding model of the target, the assumptions, the producers of
values (for relational facts such as softmax's max subtraction)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gdv.ir.core import Op
from gdv.ir.dtypes import DType
from gdv.ir.ops import OpSpec
from gdv.ir.targets import TARGET_INFO, TARGET_NAMES
from gdv.validate.bounds.model import ETA, TB, UNIT_ROUNDOFF, eta_symbol, u_symbol

DEFAULT_ULPS = 4.0
"""The transcendental assumption on the reference target: exp, log, tanh, erf, sigmoid, sin,
cos, pow and rsqrt return a value within this many ulps of the exact one, of the same sign.
The reference backend evaluates them in float64 and rounds once, so for f32, f16 and bf16 it
does far better (tests/validate/bounds/test_transcendental_ulps.py measures it)."""

C_F32_ULPS: dict[str, float] = dict(TARGET_INFO["c"].f32_ulps)
"""The C target's own f32 functions (backends/c/vmath.py, F32_MAX_ULP: a test keeps the two
equal): the largest error over every f32 input, in ulps of the exact value, measured
exhaustively with and without FMA. On that target an f32 result of these ops is within this
many ulps of the exact value directly (no float64 step); other transcendentals, and f16, bf16
and f64 results, are evaluated as on the reference target."""

TARGETS = TARGET_NAMES
"""The targets whose execution the rules can model (reduction orders are the IR's on all; their
transcendentals' ulp tables are `gdv.ir.targets.TargetInfo.f32_ulps`)."""

DEFAULT_LAMBDA = 7.0
"""The probabilistic companion's lambda: each sum's probabilistic bound holds with probability
at least 1 - 2 exp(-lambda^2 (1-u)^2 / 2) (Azuma-Hoeffding in Higham and Mary's 2019 model,
`rounding.sequential_sum`); the failure probability reported is that times the number of sums
bounded so (union bound)."""


@dataclass
class Context:
    """What the rules know besides their operands.

    `ideal`: analyse the program as the reference backend's ideal mode runs it (every float
    dtype f64, float converts the identity), which bounds the f64 reference's own error.
    `lam`: None for the rigorous bound; a number for the probabilistic companion, where a sum
    of n terms gets about lambda sqrt(n/3) u in place of n u / 2 (`rounding.sequential_sum`).
    `target`: whose transcendental functions run (`TARGETS`)."""

    ideal: bool = False
    ulps: float = DEFAULT_ULPS
    lam: float | None = None
    target: str = "reference"
    assumptions: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    producers: dict[str, Op] = field(default_factory=dict)
    values: dict[str, TB] = field(default_factory=dict)
    prob_events: float = 0.0
    """How many sums the probabilistic companion bounded (its failure probability is this many
    times 2 exp(-lambda^2 (1-u)^2 / 2), union bound)."""
    max_u: float = 0.0
    mesh: Any = None
    """The mesh of the SPMD function being bounded (`gdv.ir.mesh.Mesh`), for the group sizes
    of its collectives; None for an ordinary function."""
    groups: dict[tuple, tuple[list[TB], Any]] = field(default_factory=dict)
    """The bounds of every result of a control flow op's group (the ops with the same operands
    and function attributes, another `result`: one evaluation, IR_SPEC.md section 9), by op
    name, operand names and attributes other than `result`, with the operand bounds they were
    computed from (`validate/bounds/control.py`)."""

    def fmt(self, dtype: DType) -> DType:
        """The float format a value of program dtype `dtype` is rounded to."""
        return DType.F64 if self.ideal and (dtype.is_float or dtype.is_float8) else dtype

    def u(self, dtype: DType) -> float:
        d = self.fmt(dtype)
        self.max_u = max(self.max_u, UNIT_ROUNDOFF[d])
        return UNIT_ROUNDOFF[d]

    def eta(self, dtype: DType) -> float:
        return ETA[self.fmt(dtype)]

    def u_sym(self, dtype: DType) -> str:
        return u_symbol(self.fmt(dtype))

    def eta_sym(self, dtype: DType) -> str:
        return eta_symbol(self.fmt(dtype))

    def assume(self, key: str, text: str) -> None:
        self.assumptions.setdefault(key, text)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def failure_probability(self) -> float:
        """The probabilistic companion's failure probability (union bound), at most 1."""
        if self.lam is None or self.prob_events == 0:
            return 0.0
        per = 2.0 * math.exp(-(self.lam**2) * (1.0 - self.max_u) ** 2 / 2.0)
        return min(1.0, per * self.prob_events)


Rule = Callable[[Op, list[TB], Context], TB]
"""(op, operand bounds, context) -> result bound."""

RULES: dict[OpSpec, Rule] = {}


def rule(*specs: OpSpec) -> Callable[[Rule], Rule]:
    """Register the decorated function as the bound rule of each of `specs`."""

    def register(fn: Rule) -> Rule:
        for spec in specs:
            if not isinstance(spec, OpSpec):
                raise TypeError(f"bound rules register against OpSpec objects, got {spec!r}")
            if spec in RULES:
                raise ValueError(f"{spec.name} already has a bound rule")
            RULES[spec] = fn
        return fn

    return register


def apply_op(op: Op, ctx: Context) -> TB:
    """Bound `op` from its operands' bounds in `ctx.values`; record the result and producer."""
    from gdv.ir.ops import get

    spec = get(op.name)
    if spec is None or spec not in RULES:
        raise KeyError(f"no bound rule for op {op.name}")
    args = [ctx.values[name] for name in op.operands]
    result = RULES[spec](op, args, ctx)
    assert result.type == op.type, (op.name, result.type, op.type)
    ctx.values[op.result] = result
    ctx.producers[op.result] = op
    return result
