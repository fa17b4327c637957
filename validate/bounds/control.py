"""Bound rules of the control flow ops (IR_SPEC.md section 9).

A function a control op names is bounded by its ops' own rules on its arguments' bounds, in a
context of its own (relational facts dropped); the rounding model, assumptions and notes are
shared, and its probabilistic events are counted once per time the function may run. All the
results of an op's group (same operands and function attributes, another `result`) are bounded
once and kept in the context.

- `if` is bounded as `select` is (`validate/bounds/elementwise.py`): each branch is bounded on
  the operands' bounds and the result is their hull with the larger error; where the computed
  condition may differ from the exact one (its error is not 0) the flip adds the span of the
  branches' exact values, or makes the bound infinite between special values.
- `scan` (static length L): the body is bounded L times, carrying the states' bounds; each
  scanned operand's slice has the operand's bound. Results 0 .. p-1 are the last states'
  bounds; an output (result p + j) is the hull over the steps of the body's output j (exact
  and computed intervals hulled, the largest error, the union of the specials). When a step
  gives the states the very bounds it got, every later step repeats it, so the iteration stops
  there. L = 0: the states' bounds, and empty outputs. More than `SCAN_BOUND_STEPS` steps
  without such a fixpoint: an infinite bound that names the op and says why.
- `while` (at most N = `max_trips` trips, the count data dependent): S_0 is the operands'
  bounds and S_{j+1} the body's bounds on S_j, the cond bounded on each S_j with j < N. Trip
  j + 1 may run unless the cond on S_j is exactly 0 with error 0 (then neither the exact nor the
  computed loop runs it); the loop may stop after j trips when j = N or the cond on S_j is not
  exactly 1 with error 0. A result is the hull of S_j[k] over those j, with the largest error.
  If the cond on some S_j with j < N that is reached has a nonzero error, the computed loop may
  stop after another number of trips j' than the exact loop's j, and
  |comp_j' - exact_j| <= err_j' + |exact_j' - exact_j|: the span of the hulled exact values is
  added (an infinite bound where a special value may be involved). Each trip count is bounded
  in turn, so the bound holds whichever trip either loop stops at. A fixpoint (S_{j+1} = S_j)
  ends the iteration as for `scan`; more than `WHILE_BOUND_TRIPS` trips without a fixpoint or
  a stop: an infinite bound that names the op and says why.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from gdv.ir.core import Function, Op, attr_key
from gdv.ir.diagnostics import IRError
from gdv.ir.ops.control import IF, SCAN, WHILE, function_of, slice_type
from gdv.ir.types import TensorType
from gdv.validate.bounds.model import EMPTY, SPECIALS, TB, Err, hull, is_empty, make_tb, up
from gdv.validate.bounds.registry import Context, apply_op, rule

SCAN_BOUND_STEPS = 1024
"""The most steps of a scan the bound iterates; a longer scan whose states' bounds have not
reached a fixpoint by then gets an infinite bound."""

WHILE_BOUND_TRIPS = 1024
"""The most trips of a while the bound iterates; a loop with a larger `max_trips` whose states'
bounds neither reach a fixpoint nor a cond that is exactly false by then gets an infinite
bound."""


def _unbounded(op: Op, reason: str) -> TB:
    specials = SPECIALS if op.type.dtype.is_float else frozenset()
    return make_tb(op.type, (-math.inf, math.inf), Err.infinite(reason), None, specials)


def _call(fn: Function, args: list[TB], ctx: Context) -> tuple[list[TB], float]:
    """Every result of `fn` bounded on `args` (retyped to its parameters' types, facts dropped),
    in a context of its own: the rounding model, assumptions and notes shared. Returns the
    results and the probabilistic events one evaluation counts (the caller adds them, times
    the evaluations it stands for)."""
    sub = Context(ctx.ideal, ctx.ulps, ctx.lam, ctx.target, ctx.assumptions, ctx.notes)
    sub.mesh = ctx.mesh
    for p, a in zip(fn.params, args, strict=True):
        sub.values[p.name] = a.with_(type=p.type, facts={})
    for b in fn.ops:
        apply_op(b, sub)
    ctx.max_u = max(ctx.max_u, sub.max_u)
    return [sub.values[name].with_(facts={}) for name in fn.returns], sub.prob_events


Group = list[TB] | str
"""The bounds of every result of a control op's group, or why it has none."""


def _group(op: Op, args: list[TB], ctx: Context, run: Callable[[], Group]) -> TB:
    """Result `result` of `op`'s group: bounded once per group (`Context.groups`, keyed by the
    op name, the operand names and the attributes other than `result`, and kept only for the
    very same operand bounds), else by `run()`."""
    attrs = tuple((k, attr_key(v)) for k, v in sorted(op.attrs.items()) if k != "result")
    key = (op.name, tuple(op.operands), attrs)
    hit = ctx.groups.get(key)
    same = hit is not None and len(hit[0]) == len(args)
    if not (same and all(x is y for x, y in zip(hit[0], args, strict=True))):
        try:
            hit = (list(args), run())
        except IRError as e:  # analysed without its module: nothing is known of its functions
            hit = (list(args), e.message)
        ctx.groups[key] = hit
    results = hit[1]
    if isinstance(results, str):
        return _unbounded(op, results)
    return results[op.attrs["result"]].with_(type=op.type, facts={})


def _join(tbs: list[TB], type_: TensorType) -> TB:
    """The hull of `tbs`: exact and computed intervals hulled, the largest error, the specials'
    union."""
    err = Err.zero()
    for t in tbs:
        err = err.max(t.err)
    specials = frozenset().union(*(t.specials for t in tbs))
    return make_tb(
        type_,
        hull(*(t.exact for t in tbs)),
        err,
        hull(*(t.computed for t in tbs)),
        specials,
    )


def _flipped(joined: TB, what: str) -> TB:
    """`joined` (a hull of results from both sides of a condition that may flip) with the span
    of its exact values added to its error: |a^ - b| <= ea + |a - b|."""
    if joined.specials:
        err = Err.infinite(f"{what} on a condition that may flip, between special values")
    elif not joined.err.finite:
        err = joined.err
    else:
        span = joined.hi - joined.lo if not is_empty(*joined.exact) else 0.0
        if not math.isfinite(span):
            err = Err.infinite(f"{what} on a condition that may flip, between unbounded values")
        else:
            err = Err.make(joined.err.lin, joined.err.total + up(span))
    return make_tb(joined.type, joined.exact, err, joined.computed, joined.specials)


def _always(c: TB) -> bool:
    """Whether an i1 bound is 1 in both the exact and the computed program (each interval lies
    above 0; declared ends are widened outward, so `lo == 1.0` would miss a constant true)."""
    return not is_empty(*c.exact) and c.lo > 0.5 and c.clo > 0.5


def _never(c: TB) -> bool:
    """Whether an i1 bound is 0 in both the exact and the computed program."""
    return not is_empty(*c.exact) and c.hi < 0.5 and c.chi < 0.5


# --- if ----------------------------------------------------------------------------------------


@rule(IF)
def _if(op: Op, args: list[TB], ctx: Context) -> TB:
    return _group(op, args, ctx, lambda: _if_group(op, args, ctx))


def _if_group(op: Op, args: list[TB], ctx: Context) -> Group:
    then, other = function_of(op, "then"), function_of(op, "else")
    c = args[0]
    a, ea = _call(then, args[1:], ctx)
    b, eb = _call(other, args[1:], ctx)
    ctx.prob_events += ea + eb
    if _always(c):
        return a
    if _never(c):
        return b
    out = []
    for x, y in zip(a, b, strict=True):
        joined = _join([x, y], x.type)
        out.append(_flipped(joined, "if") if c.err.total > 0 else joined)
    return out


# --- scan --------------------------------------------------------------------------------------


@rule(SCAN)
def _scan(op: Op, args: list[TB], ctx: Context) -> TB:
    return _group(op, args, ctx, lambda: _scan_group(op, args, ctx))


def _scan_group(op: Op, args: list[TB], ctx: Context) -> Group:
    body = function_of(op, "body")
    ns = len(args) - op.attrs["num_scan_inputs"]
    length = args[ns].type.shape[0]
    out_types = [TensorType(t.dtype, (length, *t.shape)) for t in body.results[ns:]]
    states = [a.with_(facts={}) for a in args[:ns]]
    slices = [a.with_(type=slice_type(a.type), facts={}) for a in args[ns:]]
    ys: list[list[TB]] = [[] for _ in out_types]
    step = 0
    while step < length:
        if step >= SCAN_BOUND_STEPS:
            return (
                f"scan of {length} steps: the bounds of its states reach no fixpoint within "
                f"{SCAN_BOUND_STEPS} steps"
            )
        out, events = _call(body, states + slices, ctx)
        ctx.prob_events += events
        for j, y in enumerate(out[ns:]):
            ys[j].append(y)
        step += 1
        if out[:ns] == states:  # every later step gives these very bounds
            ctx.prob_events += events * (length - step)
            break
        states = out[:ns]
    outputs = [
        _join(y, t) if length > 0 else make_tb(t, EMPTY, Err.zero())
        for y, t in zip(ys, out_types, strict=True)
    ]
    return [*states, *outputs]


# --- while -------------------------------------------------------------------------------------


@rule(WHILE)
def _while(op: Op, args: list[TB], ctx: Context) -> TB:
    return _group(op, args, ctx, lambda: _while_group(op, args, ctx))


def _while_group(op: Op, args: list[TB], ctx: Context) -> Group:
    cond, body = function_of(op, "cond"), function_of(op, "body")
    trips = op.attrs["max_trips"]
    state = [a.with_(facts={}) for a in args]
    stops: list[list[TB]] = []  # the states the loop may stop in, exact or computed
    flip = False  # whether the computed loop may stop after another trip than the exact one
    j = 0
    while True:
        if j == trips:
            stops.append(state)
            break
        if j >= WHILE_BOUND_TRIPS:
            return (
                f"while of up to {trips} trips: the bounds of its states reach no fixpoint "
                f"and its cond is not exactly false within {WHILE_BOUND_TRIPS} trips"
            )
        (c,), cond_events = _call(cond, state, ctx)
        ctx.prob_events += cond_events
        always, never = _always(c), _never(c)
        flip = flip or (c.err.total > 0 and not always and not never)
        if not always:
            stops.append(state)
        if never:
            break
        after, body_events = _call(body, state, ctx)
        ctx.prob_events += body_events
        if after == state:
            # Every later trip gives these very bounds: the loop may run on to max_trips in
            # this state, each trip counting the events of this one.
            stops.append(state)
            ctx.prob_events += (cond_events + body_events) * (trips - j - 1)
            break
        state = after
        j += 1
    out = []
    for k, a in enumerate(args):
        joined = _join([s[k] for s in stops], a.type)
        out.append(_flipped(joined, "while") if flip else joined)
    return out
