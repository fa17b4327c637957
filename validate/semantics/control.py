"""SMT meaning of the control flow ops (IR_SPEC.md section 9).

`if` is an ite of its two branches' encodings (each body encoded on the operand tensors);
`scan` unrolls its static length L; `while` unrolls up to `max_trips` when that is at most
`UNROLL_TRIPS`, each trip guarded by the condition and by every earlier trip having run.

A `while` with more trips is an uninterpreted function of its operands' elements (and the
result index), one function per *proved class* of loops: two loops share a class when their
`max_trips`, operand types and `result` agree and their cond and body functions are proved
equivalent (bit for bit in `fp`, in the theory at hand otherwise; `unknown` is not proved) to
the class's first member's. Equal operands then give equal results by congruence, which is
the induction rule (if each trip computes the same state from the same state, so do N trips);
loops whose bodies are not proved equal get distinct functions, so nothing is claimed of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import z3

from gdv.ir.core import Function, Op
from gdv.ir.diagnostics import IRError
from gdv.ir.ops.control import IF, SCAN, WHILE, function_of, slice_type
from gdv.ir.types import TensorType
from gdv.validate.encode import encode
from gdv.validate.semantics.index import Idx
from gdv.validate.semantics.registry import Ctx, Index, Tensor, Term, rule

UNROLL_TRIPS = 64
"""A `while` with at most this many trips is unrolled; more is the induction rule."""
SCAN_UNROLL = 1024
"""The longest scan unrolled (a longer one is refused by name)."""
LOOP_ELEMENTS = 256
"""The most operand elements an uninterpreted loop application takes as arguments."""
CLASS_TIMEOUT = 10.0
"""Seconds per solver query when proving two loops' cond and body functions equivalent."""


class NotEncoded(IRError):
    """A control flow op too large for the encoding (a scan over more than SCAN_UNROLL steps,
    an induction-rule while over more than LOOP_ELEMENTS operand elements): a claim about it
    is refused (`gdv tv`) or left unknown (the discharger), never proved."""


@rule(IF)
def if_(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """c ? then(a...)[k] : else(a...)[k], elementwise."""
    c, args = xs[0], xs[1:]
    k = op.attrs["result"]
    then = encode(ctx, function_of(op, "then"), args)[k]
    other = encode(ctx, function_of(op, "else"), args)[k]

    def at(i: Index) -> Term:
        cond = yield c.read(())
        if z3.is_true(cond):
            return (yield then.read(i))
        if z3.is_false(cond):
            return (yield other.read(i))
        return z3.If(cond, (yield then.read(i)), (yield other.read(i)))

    return Tensor(op.type, at)


def _slice(x: Tensor, t: int) -> Tensor:
    def at(i: Index) -> Term:
        return (yield x.read((Idx.of(t), *i)))

    return Tensor(slice_type(x.type), at)


def _stack(type_: TensorType, parts: list[Tensor], values) -> Tensor:
    """Tensors of one type stacked on a new axis 0."""

    def at(i: Index) -> Term:
        k, rest = i[0], tuple(i[1:])
        live = []
        for t, y in enumerate(parts):
            cond = k.in_range(t, t + 1)
            if z3.is_false(cond):
                continue
            if z3.is_true(cond):
                return (yield y.read(rest))
            live.append((cond, (yield y.read(rest))))
        if not live:  # read only under a false guard
            return values.zero(type_.dtype)
        term = live[-1][1]
        for cond, here in reversed(live[:-1]):
            term = z3.If(cond, here, term)
        return term

    return Tensor(type_, at)


@rule(SCAN)
def scan(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """The body applied L times (unrolled), states threaded, outputs stacked."""
    body = function_of(op, "body")
    ns = len(xs) - op.attrs["num_scan_inputs"]
    length = xs[ns].shape[0]
    if length > SCAN_UNROLL:
        raise NotEncoded(
            f"scan over {length} steps is not encoded for proofs (at most {SCAN_UNROLL} are "
            "unrolled)",
            op.loc,
        )
    states, k = list(xs[:ns]), op.attrs["result"]
    ys: list[Tensor] = []
    for t in range(length):
        out = encode(ctx, body, states + [_slice(x, t) for x in xs[ns:]])
        states = out[:ns]
        if k >= ns:
            ys.append(out[k])
    if k < ns:
        return states[k]
    return _stack(op.type, ys, ctx.values)


def _guarded(guard: Tensor, new: Tensor, old: Tensor) -> Tensor:
    def at(i: Index) -> Term:
        g = yield guard.read(())
        if z3.is_true(g):
            return (yield new.read(i))
        if z3.is_false(g):
            return (yield old.read(i))
        return z3.If(g, (yield new.read(i)), (yield old.read(i)))

    return Tensor(old.type, at)


def _and(a: Tensor | None, c: Tensor) -> Tensor:
    if a is None:
        return c

    def at(i: Index) -> Term:
        x = yield a.read(())
        if z3.is_false(x):
            return x
        y = yield c.read(())
        return z3.simplify(z3.And(x, y)) if z3.is_true(x) else z3.And(x, y)

    return Tensor(c.type, at)


@rule(WHILE)
def while_(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """Unrolled: v_{t+1} = (ran_t and cond(v_t)) ? body(v_t) : v_t for t < max_trips, with
    ran_t the conjunction of the earlier conditions. Beyond UNROLL_TRIPS: the class's
    uninterpreted function (module docstring)."""
    cond, body = function_of(op, "cond"), function_of(op, "body")
    trips, k = op.attrs["max_trips"], op.attrs["result"]
    if trips > UNROLL_TRIPS and not ctx.unroll:
        return _induction(ctx, op, xs, cond, body)
    values = list(xs)
    running: Tensor | None = None
    for _ in range(trips):
        c = encode(ctx, cond, values)[0]
        running = _and(running, c)
        if ctx.unroll:  # concrete evaluation: stop at the first false condition
            if z3.is_false(z3.simplify(running.at(()))):
                break
        stepped = encode(ctx, body, values)
        values = [_guarded(running, new, old) for new, old in zip(stepped, values, strict=True)]
    return values[k]


# --- the induction rule -----------------------------------------------------------------------


@dataclass
class LoopClass:
    """Loops proved to compute the same function: its first member's cond and body."""

    number: int
    cond: Function
    body: Function
    trips: int
    types: tuple[TensorType, ...]


def _proved_equal(a: Function, b: Function, theory: str) -> bool:
    """Are two functions proved equivalent (every output; `unknown` is not a proof)?"""
    if a == b:
        return True
    from gdv.validate.equivalence import check_equivalence

    try:
        r = check_equivalence(a, b, theory, CLASS_TIMEOUT, names=(a.name, b.name))
    except IRError:  # different signatures, or a body the encoding refuses
        return False
    return r.verdict == "equivalent"


def classes(ctx: Ctx) -> list[LoopClass]:
    """The loop classes met so far, kept with the theory's values (`Values`), which also hold
    the uninterpreted functions named after them: a class number names one function."""
    return ctx.values.__dict__.setdefault("loop_classes", [])


def loop_class(ctx: Ctx, cond: Function, body: Function, trips: int, types: tuple) -> LoopClass:
    """The proved class of a loop (a new one when no class's functions are proved equal)."""
    classes_ = classes(ctx)
    for c in classes_:
        if (
            c.trips == trips
            and c.types == types
            and _proved_equal(c.cond, cond, ctx.theory)
            and _proved_equal(c.body, body, ctx.theory)
        ):
            return c
    found = LoopClass(len(classes_), cond, body, trips, types)
    classes_.append(found)
    return found


def _induction(ctx: Ctx, op: Op, xs: list[Tensor], cond: Function, body: Function) -> Tensor:
    elements = sum(math.prod(x.shape) for x in xs)
    if elements > LOOP_ELEMENTS:
        raise NotEncoded(
            f"while with max_trips {op.attrs['max_trips']} (over {UNROLL_TRIPS}) over "
            f"{elements} operand elements is not encoded for proofs (at most {LOOP_ELEMENTS})",
            op.loc,
        )
    types = tuple(x.type for x in xs)
    cls = loop_class(ctx, cond, body, op.attrs["max_trips"], types)
    k = op.attrs["result"]
    v = ctx.values
    sorts = [z3.IntSort()] * op.type.rank
    for x in xs:
        sorts += [v.sort(x.dtype)] * math.prod(x.shape)
    f = v.func(f"while.{cls.number}.r{k}", *sorts, v.sort(op.type.dtype))

    def at(i: Index) -> Term:
        args = [j.to_z3() for j in i]
        for x in xs:
            for pos in _positions(x.shape):
                args.append((yield x.read(tuple(Idx.of(p) for p in pos))))
        return f(*args)

    return Tensor(op.type, at)


def _positions(shape: tuple[int, ...]):
    import itertools

    return itertools.product(*(range(n) for n in shape))
