"""Named lemmas of the `real` theory, instantiated as explicit assumptions of a query.

Reordering a reduction is justified only over the reals (IR_SPEC.md section 5). Folds stay
uninterpreted, so the facts that make reorderings provable are added as ground instances, each
tagged with its lemma's name, about the sum terms the two programs actually build:

- `split`: a sum in blocks, sum_{k<K} f(k) = sum_{i<K/T} sum_{j<T} f(i*T + j) for T | K;
- `nest`: a sum over several axes as nested sums in either order,
  sum_{k<A*B} f(k) = sum_{j<B} sum_{i<A} f(i*B + j) (with `split`, any order of two axes);
- `scale`: a sum of a scaled body, sum_k c * g(k) = c * sum_k g(k) and
  sum_k g(k) / c = (sum_k g(k)) / c where c != 0, for c not depending on k;
- `exp-diff`: exp of a difference, exp(a - b) = exp(a) / exp(b), for terms outside folds and,
  lifted by congruence, under a sum: sum_k F[exp(a(k) - b)] = sum_k F[exp(a(k)) / exp(b)];
- `unroll`: a sum of at most 8 terms is their explicit sum, in order;
- `exp-pos`: exp(t) > 0.

Each is checked on concrete data in tests/validate/test_lemmas.py. Instances are only made for
sums outside any other fold (their terms mention no enclosing fold variable).
"""

from __future__ import annotations

from collections.abc import Iterator

import z3

from gdv.validate.semantics.index import Idx
from gdv.validate.semantics.registry import Ctx, SumRecord, Term, drive

LEMMAS: dict[str, str] = {
    "split": "sum_{k<K} f(k) = sum_{i<K/T} sum_{j<T} f(i*T + j), T divides K",
    "nest": "sum_{k<A*B} f(k) = sum_{j<B} sum_{i<A} f(i*B + j)",
    "scale": "sum_k c*g(k) = c * sum_k g(k); c != 0 -> sum_k g(k)/c = (sum_k g(k))/c; c free of k",
    "unroll": "sum_{k<n} f(k) = f(0) + ... + f(n-1) for n <= 8",
    "exp-diff": "exp(a - b) = exp(a) / exp(b)",
    "exp-pos": "exp(t) > 0",
}
"""Every lemma the real theory may assume, by name."""

MAX_INSTANCES = 400
UNROLL_MAX = 8
"""Sums of at most this many terms are also stated as their explicit sum (`unroll`)."""
MAX_ROUNDS = 3


def instantiate(ctx: Ctx, terms: list[z3.ExprRef]) -> list[tuple[str, z3.BoolRef]]:
    """Lemma instances (name, formula) about the sums and exp terms of `terms`."""
    out: list[tuple[str, z3.BoolRef]] = []
    seen: set[int] = set()

    def add(name: str, f: z3.BoolRef) -> None:
        if f.get_id() not in seen and len(out) < MAX_INSTANCES:
            seen.add(f.get_id())
            out.append((name, f))

    done: set[int] = set()
    # Splitting is tried only into blocks whose sizes some other sum has: other splits only
    # add terms (and lambda equalities) that the solver has to wade through.
    extents = {r.n for r in ctx.sums}
    work = [r for r in ctx.sums if r.depth == 0]
    for round_ in range(MAX_ROUNDS):
        before = len(ctx.sums)
        for r in work:
            if r.term.get_id() in done:
                continue
            done.add(r.term.get_id())
            if round_ == 0:
                for name, f in _split(ctx, r, extents):
                    add(name, f)
            for name, f in _scale(ctx, r):
                add(name, f)
            for name, f in _unroll(ctx, r):
                add(name, f)
            for name, f in _exp_diff_under_sum(ctx, r):
                add(name, f)
        work = [r for r in ctx.sums[before:] if r.depth == 0]
        if not work:
            break
    exp_terms = [t for t in _ground_apps(terms + [f for _, f in out], "real.exp")]
    for t in exp_terms:
        add("exp-pos", t > 0)
        arg = t.arg(0)
        if z3.is_sub(arg) and arg.num_args() == 2:
            a, b = arg.arg(0), arg.arg(1)
            add("exp-diff", t == ctx.values.div(None, _exp(ctx, a), _exp(ctx, b)))
    # The exp terms the exp-diff instances introduce are positive too.
    for t in _ground_apps([f for _, f in out], "real.exp"):
        add("exp-pos", t > 0)
    return out


def _exp(ctx: Ctx, a: z3.ExprRef) -> z3.ExprRef:
    return ctx.values.transcendental("exp", None, a)  # type: ignore[arg-type]


def _divisors(n: int) -> Iterator[int]:
    return (t for t in range(2, n) if n % t == 0)


def _split(ctx: Ctx, r: SumRecord, extents: set[int]) -> Iterator[tuple[str, z3.BoolRef]]:
    """Both block decompositions of a sum, for the factorisations of its extent into the
    extents of other sums."""
    f, dt = r.body_fn, r.dtype
    for t in _divisors(r.n):
        outer = r.n // t
        if t not in extents and outer not in extents:
            continue

        def rows(i: Idx, t: int = t) -> Term:
            return ctx.fold("sum", dt, t, lambda j: f(i * t + j))

        def cols(j: Idx, t: int = t, outer: int = outer) -> Term:
            return ctx.fold("sum", dt, outer, lambda i: f(i * t + j))

        yield "split", r.term == drive(ctx.fold("sum", dt, outer, rows))
        yield "nest", r.term == drive(ctx.fold("sum", dt, t, cols))


def _unroll(ctx: Ctx, r: SumRecord) -> Iterator[tuple[str, z3.BoolRef]]:
    """A short sum equals its terms added in order (the blocks left by `split`)."""
    if r.n > UNROLL_MAX:
        return
    terms = [drive(r.body_fn(Idx.of(k))) for k in range(r.n)]
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    yield "unroll", r.term == total


def _mentions(term: z3.ExprRef, var: z3.ExprRef) -> bool:
    target = var.get_id()
    seen: set[int] = set()
    stack = [term]
    while stack:
        t = stack.pop()
        i = t.get_id()
        if i in seen:
            continue
        seen.add(i)
        if i == target:
            return True
        if z3.is_quantifier(t):
            stack.append(t.body())
        elif z3.is_app(t):
            stack.extend(t.children())
    return False


def _scale(ctx: Ctx, r: SumRecord) -> Iterator[tuple[str, z3.BoolRef]]:
    """Pull a factor or divisor that does not depend on the fold variable out of the sum."""
    b, k, v = r.body, r.var, ctx.values
    if z3.is_mul(b):
        factors = _factors(b)
        free = [a for a in factors if not _mentions(a, k)]
        bound = [a for a in factors if _mentions(a, k)]
        if free and bound:
            c = _product(free)
            g = _product(bound)
            inner = _record_sum(ctx, r, g)
            yield "scale", r.term == c * inner
    # Real division is If(c == 0, real.div0(g), g / c) (values.Values.div). Where c is 0 the
    # sum of the div0 values is not div0 of the sum, so the instance holds only where c != 0.
    if z3.is_app_of(b, z3.Z3_OP_ITE):
        cond, then, other = b.children()
        if (
            z3.is_eq(cond)
            and z3.is_div(other)
            and other.arg(1).eq(cond.arg(0))
            and not _mentions(other.arg(1), k)
            and z3.is_app(then)
            and then.decl().name() == "real.div0"
        ):
            c = other.arg(1)
            inner = _record_sum(ctx, r, other.arg(0))
            yield "scale", z3.Implies(c != 0, r.term == v.div(None, inner, c))


def _factors(t: z3.ExprRef) -> list[z3.ExprRef]:
    """The factors of a product tree, left to right (an explicit stack: trees can be deep)."""
    out: list[z3.ExprRef] = []
    stack = [t]
    while stack:
        u = stack.pop()
        if z3.is_mul(u):
            stack.extend(reversed(u.children()))
        else:
            out.append(u)
    return out


def _product(ts: list[z3.ExprRef]) -> z3.ExprRef:
    out = ts[0]
    for t in ts[1:]:
        out = out * t
    return out


def _record_sum(ctx: Ctx, r: SumRecord, body: z3.ExprRef) -> z3.ExprRef:
    """The sum of `body` (over r's variable and extent), recorded for further lemmas."""
    term = ctx.fold_term("sum", r.dtype, r.n, r.var, body)

    def body_fn(k: Idx, body: z3.ExprRef = body) -> z3.ExprRef:
        return z3.substitute(body, (r.var, k.to_z3()))

    ctx.sums.append(SumRecord(r.n, r.dtype, r.var, body, body_fn, term, r.depth))
    return term


def _exp_diff_under_sum(ctx: Ctx, r: SumRecord) -> Iterator[tuple[str, z3.BoolRef]]:
    """sum_k F[exp(a(k) - b)] = sum_k F[exp(a(k)) / exp(b)], b free of k."""
    pairs = []
    for t in _apps(r.body, "real.exp"):
        arg = t.arg(0)
        if z3.is_sub(arg) and arg.num_args() == 2 and not _mentions(arg.arg(1), r.var):
            a, b = arg.arg(0), arg.arg(1)
            pairs.append((t, ctx.values.div(None, _exp(ctx, a), _exp(ctx, b))))
    if pairs:
        body = z3.substitute(r.body, *pairs)
        yield "exp-diff", r.term == _record_sum(ctx, r, body)


def _apps(term: z3.ExprRef, name: str) -> list[z3.ExprRef]:
    """Applications of the function `name` in `term` that are not under a binder."""
    out: list[z3.ExprRef] = []
    seen: set[int] = set()
    stack = [term]
    while stack:
        t = stack.pop()
        if t.get_id() in seen:
            continue
        seen.add(t.get_id())
        if z3.is_quantifier(t) or not z3.is_app(t):
            continue
        if t.decl().name() == name:
            out.append(t)
        stack.extend(t.children())
    return out


def _ground_apps(terms: list[z3.ExprRef], name: str) -> list[z3.ExprRef]:
    found: dict[int, z3.ExprRef] = {}
    for term in terms:
        for t in _apps(term, name):
            if not _has_fold_var(t):
                found[t.get_id()] = t
    return list(found.values())


def _has_fold_var(t: z3.ExprRef) -> bool:
    seen: set[int] = set()
    stack = [t]
    while stack:
        u = stack.pop()
        if u.get_id() in seen:
            continue
        seen.add(u.get_id())
        if z3.is_const(u) and u.decl().name().startswith("k!"):
            return True
        if z3.is_app(u):
            stack.extend(u.children())
    return False
