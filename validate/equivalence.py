"""Equivalence checking of two functions (IR_SPEC.md section 5), output by output.

For each output the query asks Z3 for an index inside the bounds and inputs on which the two
sides differ: `unsat` proves that output equal at every index at once. Under `fp` the steps are:
1. replay a few seeded random, special-value and uniform inputs on the reference backend (most
   non-equivalent pairs are refuted here, with a real counterexample);
2. the abstract query: float primitives replaced by uninterpreted functions (an
   over-approximation, so `unsat` is a proof), also case by case over small output dims;
3. the bit-precise query, its input reads Ackermannized, then in its plain form.
Under `real` the query carries the named lemma instances of `lemmas.py`. A `sat` answer is a
candidate: it is decoded into concrete inputs and replayed on the reference backend, and the
pair is `not-equivalent` only when the replay shows a real difference (under `real`, also an
exact real difference). `unknown` never counts as proved.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import threading
import time
from dataclasses import dataclass, field

import z3

from gdv.ir.core import Function, Module, Op
from gdv.ir.diagnostics import IRError, Loc
from gdv.ir.ops.control import CONTROL, function_of
from gdv.ir.ops.kernel import kernel_bodies
from gdv.validate.counterexample import (
    CANCELLING_TRIES,
    UNIFORM_TRIES,
    Counterexample,
    cancelling_inputs,
    decode_input,
    replay,
    sign_patterns,
    special_inputs,
    uniform_inputs,
    value_to_numpy,
)
from gdv.validate.encode import encode, input_function, input_tensor
from gdv.validate.semantics.index import Idx
from gdv.validate.semantics.registry import Ctx
from gdv.validate.semantics.values import THEORIES, TermKeys, Values

VERDICTS = ("equivalent", "not-equivalent", "unknown")
RANDOM_TRIES = 4
"""Seeded random and special-value inputs replayed when a model alone does not confirm."""
ABSTRACT_TIMEOUT = 2.0
"""Seconds for the abstract (uninterpreted floats) query: a fast proof or nothing."""
REPLAY_LIMIT = 2 * 10**8
"""Most element operations (`replay_cost`) for replaying a solver's candidate."""
PROBE_LIMIT = 2 * 10**7
"""Most element operations for trying seeded inputs before any query (a cheap first probe)."""
SIGN_BUDGET = 10**8
"""Element operations for the probe's IEEE special patterns (`sign_patterns`) together: all
of them for small programs, fewer (at least `SIGN_TRIES_MIN`) for large ones."""
SIGN_TRIES_MIN = 4
SHARED_SHARE = 0.25
"""The part of `timeout` the query with shared subterms abstracted (`share_subterms`) gets
before the full query."""


def replay_cost(fn: Function) -> int:
    """About how many element operations the reference backend spends running `fn`: result
    elements times the reduction extent per element (a 4096x4096 matmul: 6.9e10)."""
    types = fn.types()
    total = sum(p.type.num_elements for p in fn.params)
    for op in fn.ops:
        per = 1
        operands = [types[o] for o in op.operands]
        if op.name.startswith("reduce_") and op.type.num_elements:
            per = max(1, operands[0].num_elements // op.type.num_elements)
        elif op.name == "dot":
            per = math.prod(operands[0].shape[d] for d in op.attrs["lhs_contract"])
        elif op.name == "matmul":
            per = operands[0].shape[-1]
        elif op.name == "conv2d":
            per = math.prod(operands[1].shape[1:])
        elif op.name in ("softmax", "log_softmax", "layer_norm"):
            per = 8
        elif op.name == "kernel" and op.type.num_elements:
            # Every point of its space: a lowered conv2d's is N*O*OH*OW*C*KH*KW, not N*O*OH*OW.
            per = math.prod(op.attrs["space"]) // op.type.num_elements
        elif op.name in CONTROL:
            total += _control_cost(op, operands)
            continue
        total += op.type.num_elements * max(per, 1)
    return total


UNKNOWN_COST = 1 << 62
"""The cost of running a control flow op whose functions are not in scope (never replayed)."""


def _control_cost(op: Op, operands: list) -> int:
    """A control flow op's cost: its functions' costs, times the most trips a loop may run
    (so a while of 2^31 - 1 trips is never replayed, whatever its condition would do)."""
    try:
        if op.name == "if":
            then, other = function_of(op, "then"), function_of(op, "else")
            return max(replay_cost(then), replay_cost(other))
        if op.name == "while":
            cond, body = function_of(op, "cond"), function_of(op, "body")
            return op.attrs["max_trips"] * (replay_cost(cond) + replay_cost(body))
        length = operands[len(operands) - op.attrs["num_scan_inputs"]].shape[0]
        return length * replay_cost(function_of(op, "body"))
    except IRError:
        return UNKNOWN_COST


@dataclass
class QueryStat:
    """One solver call: which output, which stage (`abstract` or `precise`), its answer."""

    output: int
    stage: str
    result: str
    seconds: float


@dataclass
class EquivalenceResult:
    """The verdict on a pair, with its reason, counterexample and solver statistics."""

    verdict: str
    theory: str
    reason: str = ""
    counterexample: Counterexample | None = None
    queries: list[QueryStat] = field(default_factory=list)
    output_verdicts: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        """Solver and replay time, all queries together."""
        return sum(q.seconds for q in self.queries)


@dataclass
class Query:
    """One output's equivalence query: its assertions (lemma instances included), the index
    constants, and the uninterpreted functions other than inputs it relies on."""

    assertions: list[z3.BoolRef]
    index: list[z3.ArithRef]
    uninterpreted: set[str]
    lemmas: list[tuple[str, z3.BoolRef]]
    input_functions: list[z3.FuncDeclRef]
    trivial: bool = False
    """True when the output has no elements or both sides are the same term, or when a claim
    without inputs was decided by evaluation (`closed`)."""
    closed: bool = False
    """Decided by evaluation: a claim without inputs whose two sides Z3's simplifier and the
    reference interpreter both find equal at every position (`_closed_and_equal`)."""
    points: list[tuple[int, list[z3.ExprRef], z3.ExprRef]] = field(default_factory=list)
    """Input reads replaced by constants (`ackermannize`): (parameter, index terms, constant)."""
    plain: list[z3.BoolRef] = field(default_factory=list)
    """The assertions before `ackermannize` (empty when it changed nothing)."""
    sides: tuple[z3.ExprRef, z3.ExprRef] | None = None
    """The two sides' terms at the index (for `share_subterms`)."""
    raw: list[z3.BoolRef] = field(default_factory=list)
    """Every assertion, bounds first, before `ackermannize` and the bounds' pruning."""
    keys: TermKeys | None = None
    """The encoding's term keys (a stable order for the shared constants)."""
    shared: list[tuple[z3.ExprRef, z3.ExprRef]] = field(default_factory=list)
    """Subterms common to both sides replaced by fresh constants (`share_subterms`): (term,
    constant). Empty in a query that abstracts nothing."""

    def smt2(self) -> str:
        """The query as SMT-LIB 2 text, `(set-logic ALL)` first (how obligations are stored)."""
        s = z3.Solver()
        s.add(*self.assertions)
        return "(set-logic ALL)\n" + s.to_smt2()


def entry(program: Module | Function) -> Function:
    """The function compared: a module's entry function, or the function itself."""
    if isinstance(program, Function):
        return program
    fn = program.entry
    if fn is None:
        raise IRError("the module has no entry function", Loc(program.filename, 1, 1))
    return fn


def check_signatures(fa: Function, fb: Function, names: tuple[str, str] = ("A", "B")) -> None:
    """Same number and types of parameters, same result types; else an input error."""
    where = Loc(names[1], 1, 1) if fb.loc is None else fb.loc
    if len(fa.params) != len(fb.params):
        raise IRError(
            f"signature mismatch: @{fb.name} in {names[1]} has {len(fb.params)} parameter(s), "
            f"@{fa.name} in {names[0]} has {len(fa.params)}",
            where,
        )
    for k, (pa, pb) in enumerate(zip(fa.params, fb.params, strict=True)):
        if pa.type != pb.type:
            raise IRError(
                f"signature mismatch: parameter {k + 1} %{pb.name} is {pb.type} in {names[1]}, "
                f"expected {pa.type} like %{pa.name} in {names[0]}",
                pb.loc or where,
            )
    if fa.results != fb.results:
        shown_a = ", ".join(map(str, fa.results)) or "()"
        shown_b = ", ".join(map(str, fb.results)) or "()"
        raise IRError(
            f"signature mismatch: @{fb.name} in {names[1]} returns ({shown_b}), expected "
            f"({shown_a}) like @{fa.name} in {names[0]}",
            where,
        )


def build_query(
    fa: Function,
    fb: Function,
    output: int,
    theory: str = "fp",
    abstract: bool = False,
    fixed: dict[int, int] | None = None,
) -> Query:
    """The query "some in-bounds index and inputs make output `output` differ", with the
    output dims in `fixed` set to the given positions."""
    from gdv.validate import lemmas

    values = Values(theory, abstract)
    funcs = [input_function(values, p.name, p.type) for p in fa.params]
    ins = [input_tensor(values, p.name, p.type) for p in fa.params]
    ctx = Ctx(values)
    ta = encode(ctx, fa, ins)[output]
    tb = encode(ctx, fb, ins)[output]
    shape = ta.shape
    index = [z3.Int(f"idx!{d}") for d in range(len(shape))]
    bounds = [z3.And(i >= 0, i < n) for i, n in zip(index, shape, strict=True)]
    if 0 in shape:
        return Query([z3.BoolVal(False)], index, set(), [], funcs, trivial=True)
    fixed = fixed or {}
    idx = tuple(
        Idx.of(fixed[d]) if d in fixed else Idx.var(i, 0, n - 1)
        for d, (i, n) in enumerate(zip(index, shape, strict=True))
    )
    if _closed_and_equal(fa, ta, tb, theory, abstract, fixed) and _reference_agrees(fa, fb, output):
        return Query(
            [*bounds, z3.BoolVal(False)], index, set(), [], funcs, trivial=True, closed=True
        )
    va, vb = ta.at(idx), tb.at(idx)
    found = set(values.uninterpreted)
    lemma_list = lemmas.instantiate(ctx, [va, vb]) if theory == "real" else []
    found |= set(values.uninterpreted)
    # SMT `=`: all NaNs are one value and +0.0 != -0.0 (IR_SPEC.md section 5).
    differ = z3.Not(values.same(ta.dtype, va, vb))
    assertions = [*bounds, *(f for _, f in lemma_list), differ]
    if va.eq(vb):
        return Query(assertions, index, found, lemma_list, funcs, trivial=True)
    reduced, points, plain = _reduce(assertions, len(bounds), index, funcs)
    return Query(
        reduced,
        index,
        found,
        lemma_list,
        funcs,
        points=points,
        plain=plain,
        sides=(va, vb),
        raw=assertions,
        keys=values.keys,
    )


CLOSED_ELEMENTS = 4096
"""A claim about a program without inputs (what `fold-constants` makes: a constant table
converted, then divided) is decided element by element up to this many output elements."""


def _closed_and_equal(fa: Function, ta, tb, theory: str, abstract: bool, fixed) -> bool:
    """Whether a claim without inputs holds, decided by evaluation instead of a search: at
    every output position both sides are closed terms, and Z3's simplifier (its own rewriting
    of the same SMT meaning, exact on constant floating-point and integer operations) reduces
    "they differ" to `false` at each. Anything it cannot reduce (an uninterpreted fold or
    transcendental, a NaN payload) leaves the claim to the solver, as does a position where
    the sides differ (the solver then finds it with a counterexample). `build_query` also asks
    the reference interpreter (`_reference_agrees`); only when both agree is the query `false`,
    which the checker's own encoding rebuilds the same way (it runs this same decision) and any
    solver proves. A claim with inputs never comes here: it is a search over its inputs."""
    if fa.params or abstract or fixed or theory not in ("fp", "int"):
        return False
    shape = ta.shape
    if math.prod(shape) > CLOSED_ELEMENTS:
        return False
    for position in itertools.product(*(range(n) for n in shape)):
        at = tuple(Idx.of(p) for p in position)
        if not z3.is_false(z3.simplify(z3.Not(ta.at(at) == tb.at(at)))):
            return False
    return True


CLOSED_COST = 1 << 22
"""The most element operations (`replay_cost`, both sides) a claim without inputs may cost
the reference interpreter for `_reference_agrees` to run it (else the solver decides it)."""


def _reference_agrees(fa: Function, fb: Function, output: int) -> bool:
    """The second, independent half of the decision of a claim without inputs: the reference
    interpreter (numpy, IR_SPEC.md's meaning written again) gives output `output` of both
    sides the same bits at every position (all NaNs one value, as SMT `=`). Z3's simplifier
    and this evaluation must agree before the claim is decided without a search, so a fault in
    either one alone never proves a wrong fold. A program too costly to run, or that the
    interpreter refuses, leaves the claim to the solver."""
    from gdv.backends import reference
    from gdv.validate.counterexample import same_bits

    if replay_cost(fa) + replay_cost(fb) > CLOSED_COST:
        return False
    try:
        a = reference.run(fa, {}, mode="exact")[output]
        b = reference.run(fb, {}, mode="exact")[output]
    except (IRError, ArithmeticError, ValueError, MemoryError):
        return False
    return a.shape == b.shape and a.dtype == b.dtype and bool(same_bits(a, b).all())


def _reduce(
    assertions: list[z3.BoolRef], nbounds: int, index: list[z3.ArithRef], funcs
) -> tuple[list[z3.BoolRef], list, list[z3.BoolRef]]:
    """`ackermannize`, then the bounds (the first `nbounds` assertions) of the index constants
    still read: (assertions, points, the assertions before ackermannize or [])."""
    reduced, points = ackermannize(assertions, funcs)
    # Bounds on index constants that nothing else reads any more only keep Z3 from using its
    # fast pure floating-point tactic.
    body = reduced[nbounds:]
    used = _constants(body)
    kept = [b for b, i in zip(assertions[:nbounds], index, strict=True) if i.get_id() in used]
    return kept + body, points, assertions if points else []


SHARED = "shared!"
"""The name prefix of the constants `share_subterms` puts in place of common subterms."""


def shared_subterms(
    va: z3.ExprRef, vb: z3.ExprRef, inputs: set[str], keys: TermKeys
) -> list[z3.ExprRef]:
    """The largest subterms, outside any binder, that occur on both sides (one Z3 term, so
    structurally identical: canonical order makes `a*b` and `b*a` one), other than leaves,
    input reads and terms of index (Int), array or rounding-mode sort, in a stable order."""
    in_a, in_b = _subterms(va), _subterms(vb)
    common = in_a.keys() & in_b.keys()
    chosen: dict[int, z3.ExprRef] = {}
    seen: set[int] = set()
    stack = [va, vb]
    while stack:
        t = stack.pop()
        if t.get_id() in seen or z3.is_quantifier(t) or not z3.is_app(t):
            continue
        seen.add(t.get_id())
        if t.get_id() in common and _abstractable(t, inputs):
            chosen[t.get_id()] = t
            continue
        stack.extend(t.children())
    return sorted(chosen.values(), key=keys.key)


def _subterms(t: z3.ExprRef) -> dict[int, z3.ExprRef]:
    """The applications in `t` outside binders, by id."""
    out: dict[int, z3.ExprRef] = {}
    stack = [t]
    while stack:
        u = stack.pop()
        if u.get_id() in out or z3.is_quantifier(u) or not z3.is_app(u):
            continue
        out[u.get_id()] = u
        stack.extend(u.children())
    return out


def _abstractable(t: z3.ExprRef, inputs: set[str]) -> bool:
    if t.num_args() == 0 or t.decl().name() in inputs:
        return False
    kind = t.sort().kind()
    return kind not in (z3.Z3_INT_SORT, z3.Z3_ARRAY_SORT, z3.Z3_ROUNDING_MODE_SORT)


def share_subterms(q: Query) -> Query | None:
    """`q` with the subterms both sides share (`shared_subterms`) replaced, everywhere in the
    query, by fresh constants; None when there are none.

    A generalisation: putting each subterm back for its constant gives `q` again, so `unsat`
    here (no values of the constants make the sides differ) proves `q`. A model is no
    counterexample (the constants may take values the subterms never do): it counts only when
    its inputs replay on the reference backend."""
    if q.trivial or q.sides is None or q.keys is None:
        return None
    inputs = {f.name() for f in q.input_functions}
    terms = shared_subterms(*q.sides, inputs, q.keys)
    if not terms:
        return None
    shared = [(t, z3.Const(f"{SHARED}{n}", t.sort())) for n, t in enumerate(terms)]
    raw = [z3.substitute(a, *shared) for a in q.raw]
    reduced, points, plain = _reduce(raw, len(q.index), q.index, q.input_functions)
    return dataclasses.replace(
        q, assertions=reduced, points=points, plain=plain, raw=raw, shared=shared
    )


def _constants(terms: list[z3.ExprRef]) -> set[int]:
    """Ids of the uninterpreted constants in `terms` (lambda bodies included)."""
    out: set[int] = set()
    seen: set[int] = set()
    stack = list(terms)
    while stack:
        t = stack.pop()
        if t.get_id() in seen:
            continue
        seen.add(t.get_id())
        if z3.is_quantifier(t):
            stack.append(t.body())
        elif z3.is_app(t):
            if z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED:
                out.add(t.get_id())
            stack.extend(t.children())
    return out


def ackermannize(
    assertions: list[z3.BoolRef], funcs: list[z3.FuncDeclRef]
) -> tuple[list[z3.BoolRef], list[tuple[int, list[z3.ExprRef], z3.ExprRef]]]:
    """Replace each input read `X(t...)` outside a lambda by a fresh constant, with
    `t = t' -> c = c'` for each pair of reads of one input (Ackermann's reduction).

    The solver then bit-blasts plain float constants instead of reasoning about function
    applications, which is often ten times faster. Reads under a fold's lambda stay function
    applications and lose their link to the constants: the result has fewer constraints, so an
    `unsat` answer still proves the original query (a `sat` answer is replayed anyway)."""
    by_decl = {f.name(): k for k, f in enumerate(funcs) if f.arity() > 0}
    apps: dict[int, z3.ExprRef] = {}
    seen: set[int] = set()
    stack = list(assertions)
    while stack:
        t = stack.pop()
        if t.get_id() in seen:
            continue
        seen.add(t.get_id())
        if z3.is_quantifier(t) or not z3.is_app(t):
            continue
        if t.decl().name() in by_decl and t.num_args() == t.decl().arity():
            apps[t.get_id()] = t
            continue
        stack.extend(t.children())
    if not apps:
        return assertions, []
    points: list[tuple[int, list[z3.ExprRef], z3.ExprRef]] = []
    subst: list[tuple[z3.ExprRef, z3.ExprRef]] = []
    for n, app in enumerate(sorted(apps.values(), key=lambda a: a.sexpr())):
        c = z3.Const(f"{app.decl().name()}@{n}", app.sort())
        points.append((by_decl[app.decl().name()], list(app.children()), c))
        subst.append((app, c))
    out = [z3.substitute(a, *subst) for a in assertions]
    for i, (k, args, c) in enumerate(points):
        for k2, args2, c2 in points[i + 1 :]:
            if k != k2:
                continue
            same = [a == b for a, b in zip(args, args2, strict=True)]
            if any(z3.is_false(z3.simplify(e)) for e in same):
                continue  # distinct constant positions
            out.append(z3.Implies(z3.And(*same) if len(same) > 1 else same[0], c == c2))
    return out, points


DEADLINE_SLACK = 2.0
"""A query still running this many times its timeout (plus a second) after it started is
interrupted: z3's own `timeout` was seen not to fire on one derandomized test case (a CI run
stalled for 16 minutes in one `check`). The interrupted check answers unknown, never a proof."""


def check_within(s: z3.Solver, timeout: float) -> z3.CheckSatResult:
    """`s.check()` under z3's `timeout` and a wall-clock deadline that interrupts the solver's
    context from a timer thread (ctypes releases the GIL during the check)."""
    s.set("timeout", max(1, int(timeout * 1000)))
    timer = threading.Timer(timeout * DEADLINE_SLACK + 1.0, s.ctx.interrupt)
    timer.daemon = True
    timer.start()
    try:
        return s.check()
    finally:
        timer.cancel()


def _solve(q: Query, timeout: float) -> tuple[str, z3.ModelRef | None, str, float]:
    if q.trivial:
        return "unsat", None, "", 0.0
    s = z3.Solver()
    s.add(*q.assertions)
    start = time.perf_counter()
    r = check_within(s, timeout)
    elapsed = time.perf_counter() - start
    if r == z3.unsat:
        return "unsat", None, "", elapsed
    if r == z3.sat:
        return "sat", s.model(), "", elapsed
    return "unknown", None, s.reason_unknown(), elapsed


def check_equivalence(
    a: Module | Function,
    b: Module | Function,
    theory: str = "fp",
    timeout: float = 10.0,
    names: tuple[str, str] = ("A", "B"),
) -> EquivalenceResult:
    """Is B equivalent to A in `theory` (`fp`: bit-exact; `real`: IR_SPEC.md section 5)?

    `timeout` is in seconds per solver query. Raises IRError when the signatures differ."""
    assert theory in THEORIES, theory
    fa, fb = entry(a), entry(b)
    check_signatures(fa, fb, names)
    with kernel_bodies(_bodies(a, b, names)):
        return _check(fa, fb, theory, timeout)


def _bodies(a: Module | Function, b: Module | Function, names: tuple[str, str]) -> list[Function]:
    """The non-entry functions of both modules (kernel bodies), which must not disagree."""
    found: dict[str, Function] = {}
    for program, name in ((a, names[0]), (b, names[1])):
        if not isinstance(program, Module):
            continue
        for fn in program.functions:
            if fn is program.entry:
                continue
            other = found.get(fn.name)
            if other is not None and other != fn:
                raise IRError(
                    f"function @{fn.name} in {name} differs from the one of that name in "
                    f"{names[0]}: kernel bodies are shared by name",
                    fn.loc or Loc(name, 1, 1),
                )
            found[fn.name] = fn
    return list(found.values())


def _check(fa: Function, fb: Function, theory: str, timeout: float) -> EquivalenceResult:
    result = EquivalenceResult("equivalent", theory)
    unknown_reasons: list[str] = []
    for o in range(len(fa.results)):
        verdict, reason, cex = _check_output(fa, fb, o, theory, timeout, result.queries)
        result.output_verdicts.append(verdict)
        if verdict == "not-equivalent":
            result.verdict, result.reason, result.counterexample = verdict, reason, cex
            return result
        if verdict == "unknown":
            unknown_reasons.append(f"out{o}: {reason}")
    if unknown_reasons:
        result.verdict = "unknown"
        result.reason = "; ".join(unknown_reasons)
    elif any(q.stage == "closed" for q in result.queries):
        result.reason = CLOSED_REASON
    return result


CLOSED_REASON = (
    "decided by evaluation: the claim has no inputs, and Z3's simplifier and the reference "
    "interpreter both find its two sides equal at every position (its query is `false`)"
)
"""The reason recorded with an obligation proved so (the manifest's `reason`): how it was
decided. The checker decides it again as it encodes the pair (`build_query`)."""


def _check_output(
    fa: Function, fb: Function, o: int, theory: str, timeout: float, stats: list[QueryStat]
) -> tuple[str, str, Counterexample | None]:
    q = build_query(fa, fb, o, theory)
    if q.trivial:
        # Both sides encode to one term (commutative operands are in canonical order, so
        # `add(b, a)` and (AB)^T against B^T A^T land here): equal at every index, at any size,
        # with no probe and no solver.
        stats.append(QueryStat(o, "closed" if q.closed else "identical", "unsat", 0.0))
        return "equivalent", "", None
    if theory == "fp":
        # Seeded concrete inputs refute most non-equivalent pairs at once; the solver is
        # slow to refute pairs whose folds differ. Not first under `real`: its replay checks
        # differences in exact rationals, whose digits can grow without bound (repeated
        # squaring), so it runs only after the solver has answered `unknown`.
        start = time.perf_counter()
        cex = _try_concrete(fa, fb, o, theory, None, PROBE_LIMIT)
        found = "found" if cex else "none"
        stats.append(QueryStat(o, "replay", found, time.perf_counter() - start))
        if cex is not None:
            return "not-equivalent", f"out{o} differs", cex
        qa = build_query(fa, fb, o, theory, abstract=True)
        r, _, _, t = _solve(qa, min(timeout, ABSTRACT_TIMEOUT))
        stats.append(QueryStat(o, "abstract", r, t))
        if r == "unsat":
            return "equivalent", "", None
        if _specialized(fa, fb, o, theory, timeout, stats):
            return "equivalent", "", None
    shared = share_subterms(q)
    if shared is not None:
        # The subterms both sides share as opaque values: a proof for them is a proof; a
        # model counts only when its inputs replay; otherwise the full query decides.
        r, model, _, t = _solve(shared, timeout * SHARED_SHARE)
        stats.append(QueryStat(o, "shared", r, t))
        if r == "unsat":
            return "equivalent", "", None
        if r == "sat" and model is not None:
            cex = _replay_model(fa, fb, o, theory, shared, model)
            if cex is not None:
                return "not-equivalent", f"out{o} differs", cex
    r, model, why, t = _solve(q, timeout / 2 if q.plain else timeout)
    stats.append(QueryStat(o, "precise", r, t))
    if r == "unknown" and q.plain:
        # Some queries are easier with the input reads left as applications (Z3's rewriter
        # then normalises commutative float ops before any bit-blasting): try that form too.
        plain = dataclasses.replace(q, assertions=q.plain, points=[])
        r, model, why, t = _solve(plain, timeout / 2)
        stats.append(QueryStat(o, "precise-plain", r, t))
        if r == "sat":
            q = plain
    if r == "unsat":
        return "equivalent", "", None
    if r == "unknown":
        if theory == "real":
            cex = _try_concrete(fa, fb, o, theory, None)
            if cex is not None:
                return "not-equivalent", f"out{o} differs", cex
        return "unknown", f"the solver answered unknown ({why or 'no reason given'})", None
    assert model is not None
    cex = _confirm(fa, fb, o, theory, q, model)
    if cex is not None:
        return "not-equivalent", f"out{o} differs", cex
    if max(replay_cost(fa), replay_cost(fb)) > REPLAY_LIMIT:
        return (
            "unknown",
            f"the solver found a candidate counterexample for out{o}, but the programs are too "
            f"large (over {REPLAY_LIMIT:.0e} element operations) to replay on the reference "
            "backend",
            None,
        )
    if q.uninterpreted:
        names = ", ".join(sorted(q.uninterpreted))
        return (
            "unknown",
            f"the solver found a candidate counterexample for out{o} that rests on "
            f"uninterpreted functions ({names}); replay on the reference backend did not "
            "confirm it",
            None,
        )
    return (
        "unknown",
        f"the solver found a candidate counterexample for out{o} that replay on the reference "
        "backend did not confirm",
        None,
    )


SPECIALIZE_EXTENT = 4
SPECIALIZE_CASES = 16


def _specialized(
    fa: Function, fb: Function, o: int, theory: str, timeout: float, stats: list[QueryStat]
) -> bool:
    """Prove the abstract query once per position of the output's small dims (extent <= 4,
    at most 16 cases): with those indices constant, `concat` and `slice` choices resolve
    statically and batched terms become syntactically equal. Large dims stay symbolic, so the
    size of each query still does not grow with the tensor."""
    shape = fa.results[o].shape
    small = [d for d, n in enumerate(shape) if 1 < n <= SPECIALIZE_EXTENT]
    cases = 1
    chosen = []
    for d in sorted(small, key=lambda d: shape[d]):
        if cases * shape[d] > SPECIALIZE_CASES:
            break
        cases *= shape[d]
        chosen.append(d)
    if not chosen:
        return False
    budget = min(timeout, ABSTRACT_TIMEOUT)  # for all the cases together
    for combo in itertools.product(*(range(shape[d]) for d in chosen)):
        if budget <= 0.001:
            return False
        q = build_query(
            fa, fb, o, theory, abstract=True, fixed=dict(zip(chosen, combo, strict=True))
        )
        r, _, _, t = _solve(q, budget)
        budget -= t
        stats.append(QueryStat(o, "abstract-case", r, t))
        if r != "unsat":
            return False
    return True


def _confirm(
    fa: Function, fb: Function, o: int, theory: str, q: Query, model: z3.ModelRef
) -> Counterexample | None:
    """Replay the model's inputs, then a few seeded ones; the first confirmed difference."""
    if max(replay_cost(fa), replay_cost(fb)) > REPLAY_LIMIT:
        return None  # replaying programs this large on the reference would take too long
    found = _replay_model(fa, fb, o, theory, q, model)
    if found is not None:
        return found
    index = tuple(model.eval(i, model_completion=True).as_long() for i in q.index)
    return _try_concrete(fa, fb, o, theory, index)


def _replay_model(
    fa: Function, fb: Function, o: int, theory: str, q: Query, model: z3.ModelRef
) -> Counterexample | None:
    """The model's inputs, replayed on the reference backend: a counterexample only when the
    outputs really differ there (whatever the model says about shared or fold terms)."""
    if max(replay_cost(fa), replay_cost(fb)) > REPLAY_LIMIT:
        return None
    inputs = {
        p.name: decode_input(model, f, p.type)
        for p, f in zip(fa.params, q.input_functions, strict=True)
    }
    for k, args, c in q.points:
        p = fa.params[k]
        pos = tuple(model.eval(a, model_completion=True).as_long() for a in args)
        if all(0 <= i < n for i, n in zip(pos, p.type.shape, strict=True)):
            value = value_to_numpy(model.eval(c, model_completion=True), p.type.dtype)
            inputs[p.name][pos] = value
    index = tuple(model.eval(i, model_completion=True).as_long() for i in q.index)
    found = replay(fa, fb, inputs, theory, prefer=(o, index))
    if found is not None:
        origin = "solver model (shared subterms abstracted)" if q.shared else "solver model"
        return Counterexample(found[0], found[1], found[2], found[3], inputs, origin)
    return None


def _try_concrete(
    fa: Function,
    fb: Function,
    o: int,
    theory: str,
    index: tuple[int, ...] | None,
    limit: int = REPLAY_LIMIT,
) -> Counterexample | None:
    """Replay seeded random and special-value inputs; the first confirmed difference.

    All the replays together cost at most about twice `limit` element operations (at least
    two replays): a large true claim (a lowered 8x16x64x64 convolution, 1.4e7 operations a
    replay) spent 10 s here before its proof."""
    from gdv.backends import reference

    cost = max(replay_cost(fa), replay_cost(fb), 1)
    if cost > limit:
        return None
    left = max(2, (2 * limit) // cost)

    def spend() -> bool:
        nonlocal left
        left -= 1
        return left >= 0

    for seed in range(RANDOM_TRIES):
        for origin, draw in (
            (f"random inputs (seed {seed})", reference.random_inputs),
            (f"special values (seed {seed})", special_inputs),
        ):
            try:
                inputs = draw(fa, seed)
            except IRError:  # e.g. a declared range that holds no value of the dtype
                continue
            if not spend():
                return None
            found = replay(fa, fb, inputs, theory, prefer=None if index is None else (o, index))
            if found is not None:
                return Counterexample(found[0], found[1], found[2], found[3], inputs, origin)
    patterns = [("uniform", uniform_inputs, k) for k in range(UNIFORM_TRIES)]
    patterns += [("cancelling", cancelling_inputs, k) for k in range(CANCELLING_TRIES)]
    for name, draw, k in patterns:
        if not spend():
            return None
        inputs = draw(fa, k)
        found = replay(fa, fb, inputs, theory, prefer=None if index is None else (o, index))
        if found is not None:
            origin = f"{name} inputs (pattern {k})"
            return Counterexample(found[0], found[1], found[2], found[3], inputs, origin)
    if theory == "real":
        return None  # signed zeros, NaN and infinities are no real numbers
    tries = min(max(SIGN_TRIES_MIN, SIGN_BUDGET // cost), max(left, 0))
    for origin, inputs in itertools.islice(sign_patterns(fa), tries):
        found = replay(fa, fb, inputs, theory, prefer=None if index is None else (o, index))
        if found is not None:
            return Counterexample(found[0], found[1], found[2], found[3], inputs, origin)
    return None


def query_smt2(
    a: Module | Function, b: Module | Function, output: int = 0, theory: str = "fp"
) -> str:
    """The precise equivalence query for one output as SMT-LIB 2 text with (set-logic ALL)."""
    with kernel_bodies(_bodies(a, b, ("A", "B"))):
        return build_query(entry(a), entry(b), output, theory).smt2()
