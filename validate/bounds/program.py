"""Whole-program error bounds: every op of the entry function, one abstract value per tensor.

The cost is a handful of float operations per op, independent of tensor sizes, so a
transformer layer at any sequence length bounds in milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import sympy

from gdv.ir.core import Function, Module, Param
from gdv.ir.diagnostics import IRError
from gdv.ir.mesh import function_mesh
from gdv.ir.ops.kernel import kernel_bodies
from gdv.ir.types import TensorType
from gdv.validate.bounds.model import SAFETY, SYMBOL_VALUES, TB, Err, down, make_tb, up
from gdv.validate.bounds.registry import DEFAULT_LAMBDA, DEFAULT_ULPS, TARGETS, Context, apply_op

INPUT_ASSUMPTION = (
    "inputs: every input element is finite and within its parameter's declared range "
    "(integers without a range: anywhere in their dtype)"
)


PROB_MODEL = (
    "Higham-Mary: each rounding error mean-zero given the earlier ones, |delta| <= u; every "
    "sum's error is a martingale, bounded by lambda*u*sqrt(sum_k |z_k|^2) over its partial "
    "sums z_k (Azuma-Hoeffding), failing with probability <= 2*exp(-lambda^2*(1-u)^2/2) per "
    "sum; failure_probability is the union over all sums"
)
"""What the probabilistic companion assumes and how its failure probability is counted."""


@dataclass(frozen=True)
class OutputBound:
    """The bound of one output of the entry function.

    `abs`: rigorous bound on |computed - exact| for every element (inf when unbounded, with
    `reason`); `expr`: the same as a sympy expression over the unit roundoffs (first order
    symbolic, higher order as one number); `rel`: abs / min |exact| when the exact interval
    excludes 0; `prob_abs`/`prob_expr`: the probabilistic companion (Higham-Mary), holding with
    probability at least 1 - `ProgramBounds.prob_failure`."""

    name: str
    type: TensorType
    interval: tuple[float, float]
    abs: float
    expr: sympy.Expr
    rel: float | None
    prob_abs: float
    prob_expr: sympy.Expr
    specials: tuple[str, ...]
    reason: str | None

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "type": str(self.type),
            "interval": [_json_float(self.interval[0]), _json_float(self.interval[1])],
            "abs": _json_float(self.abs),
            "rel": None if self.rel is None else _json_float(self.rel),
            "expr": str(self.expr),
            "prob_abs": _json_float(self.prob_abs),
            "prob_expr": str(self.prob_expr),
            "specials": list(self.specials),
            "reason": self.reason,
        }


@dataclass(frozen=True)
class ProgramBounds:
    """Bounds of every output, with what they rest on."""

    outputs: list[OutputBound]
    assumptions: list[str]
    notes: list[str]
    prob_lambda: float
    prob_failure: float
    values: dict[str, TB] = field(repr=False, default_factory=dict)
    """Every tensor's rigorous abstract value, by name (for inspection and tests)."""

    def to_json(self) -> dict:
        return {
            "outputs": [o.to_json() for o in self.outputs],
            "assumptions": self.assumptions,
            "notes": self.notes,
            "probabilistic": {
                "model": PROB_MODEL,
                "lambda": self.prob_lambda,
                "failure_probability": self.prob_failure,
            },
            "symbols": {k: v for k, v in SYMBOL_VALUES.items()},
        }


def _json_float(x: float) -> float | None:
    """JSON has no infinities: an unbounded value is null (and `reason` says why)."""
    return x if math.isfinite(x) else None


def _param_bound(p: Param, default_range: tuple[float, float] | None, filename: str) -> TB:
    t = p.type
    loc = p.attr_locs.get("range", p.loc)
    try:
        r = p.range
    except (TypeError, ValueError, IndexError):
        raise IRError(f"parameter %{p.name}: range must be [lo, hi] numbers", loc) from None
    if t.dtype.is_bool:
        r = r or (0.0, 1.0)
    elif (t.dtype.is_int or t.dtype.is_small_int) and r is None:
        r = (float(t.dtype.int_min), float(t.dtype.int_max))
    if r is None:
        r = default_range
    if r is None:
        raise IRError(
            f"parameter %{p.name}: {t} has no range; declare {{range = [lo, hi]}} on it or "
            f"pass a default (gdv bounds --default-range LO HI)",
            p.loc,
        )
    lo, hi = r
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise IRError(f"parameter %{p.name}: range [{lo}, {hi}] must be finite", loc)
    if lo > hi:
        raise IRError(f"parameter %{p.name}: range [{lo}, {hi}] has lo > hi", loc)
    return make_tb(t, (down(lo), up(hi)) if t.dtype.is_float else (lo, hi), Err.zero())


def _run(fn: Function, params: dict[str, TB], ctx: Context) -> list[TB]:
    ctx.values.update(params)
    for op in fn.ops:
        apply_op(op, ctx)
    return [ctx.values[name] for name in fn.returns]


def entry(module: Module | Function) -> Function:
    if isinstance(module, Function):
        return module
    fn = module.entry
    if fn is None:
        raise IRError("module has no entry function: neither @main nor a single function")
    return fn


def analyze(
    module: Module | Function,
    default_range: tuple[float, float] | None = None,
    *,
    ideal: bool = False,
    ulps: float = DEFAULT_ULPS,
    lam: float = DEFAULT_LAMBDA,
    target: str = "reference",
) -> ProgramBounds:
    """Error bounds of every output of `module`'s entry function (a verified module).

    `default_range`: the range of float parameters that declare none (else an IRError).
    `ideal`: bound the program as the reference backend's ideal mode runs it (all floats f64),
    i.e. the f64 reference's own error. `ulps`: the transcendental assumption. `lam`: the
    probabilistic companion's lambda. `target`: whose functions compute the transcendentals
    (registry.TARGETS; both keep the IR's reduction orders)."""
    fn = entry(module)
    filename = module.filename if isinstance(module, Module) else "<input>"
    params = {p.name: _param_bound(p, default_range, filename) for p in fn.params}
    if target not in TARGETS:
        raise IRError(f"bounds: unknown target '{target}' (available: {', '.join(TARGETS)})")
    mesh = function_mesh(module, fn) if isinstance(module, Module) else None
    rigorous = Context(ideal=ideal, ulps=ulps, target=target, mesh=mesh)
    rigorous.assume("inputs", INPUT_ASSUMPTION)
    prob = Context(ideal=ideal, ulps=ulps, lam=lam, target=target, mesh=mesh)
    with kernel_bodies(module.functions if isinstance(module, Module) else []):
        outs = _run(fn, params, rigorous)
        pouts = _run(fn, params, prob)
    outputs = []
    for name, tb, ptb in zip(fn.returns, outs, pouts, strict=True):
        err = tb.err
        p_err = ptb.err if ptb.err.total <= err.total else err
        rel = None
        if tb.dtype.is_float and not tb.specials and tb.lo <= tb.hi and (tb.lo > 0 or tb.hi < 0):
            rel = err.value / min(abs(tb.lo), abs(tb.hi))
        outputs.append(
            OutputBound(
                name=name,
                type=tb.type,
                interval=(tb.lo, tb.hi),
                abs=err.value,
                expr=err.sympy(),
                rel=rel,
                prob_abs=p_err.value,
                prob_expr=p_err.sympy(),
                specials=tuple(sorted(tb.specials)),
                reason=err.reason,
            )
        )
    assumptions = [
        f"{k}: {v}" if not v.startswith(k) else v for k, v in rigorous.assumptions.items()
    ]
    assumptions.append(
        f"bound arithmetic: float64 on nonnegative terms, each result scaled by {SAFETY!r}"
    )
    return ProgramBounds(
        outputs=outputs,
        assumptions=assumptions,
        notes=list(rigorous.notes),
        prob_lambda=lam,
        prob_failure=prob.failure_probability(),
        values=dict(rigorous.values),
    )
