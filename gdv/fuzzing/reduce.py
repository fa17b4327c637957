"""`gdv reduce`: shrink a failing case to a small one with the same signature (issue 18).

The steps, iterated to a fixpoint (each candidate is printed, re-parsed and verified; an
invalid one is simply not interesting):

- `pipeline`: the smallest prefix of the pass pipeline that still shows the signature, then
  the single culprit pass alone when that suffices;
- `ops`: ddmin over the entry function's ops; a removed op's uses are rerouted to a new
  parameter of its name and type (its input is the value the op had, so the values the
  remaining ops see do not change), or to a splat constant;
- `outputs`: ddmin over the returned values; `returns`: a returned value replaced by an
  operand of the op that made it;
- `dead-code`: ops no output needs, and parameters nothing reads, are dropped;
- `dims`: every dim of one size is halved at once (types, and the attributes that name that
  size), down to 1; inputs are sliced along;
- `dtypes`: f64 to f32, i64 to i32, i32 to i8, everywhere at once; inputs converted;
- `attributes`: optional attributes and parameter ranges removed, constants made splats of
  0 or 1.

Candidates are cached by a hash of their text, inputs and options, and each round's candidates
run on `jobs` worker processes; the first interesting one in a fixed order wins, so the output
is the same byte for byte whatever `jobs` is.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import hashlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gdv.fuzzing.ddmin import ddmin
from gdv.fuzzing.signature import Case, observe, pipeline_passes, with_entry
from gdv.ir.core import Function, Op, Param
from gdv.ir.diagnostics import IRError
from gdv.ir.dtypes import DType
from gdv.ir.numerics import float_to_int
from gdv.ir.types import TensorType

NARROWER = {DType.F64: DType.F32, DType.I64: DType.I32, DType.I32: DType.I8}
"""The dtype each is narrowed to by the `dtypes` step (where the IR has it)."""
MAX_ROUNDS = 20
"""Rounds of all the steps at most (each round must change the case to go on)."""
INPUT_KINDS = ("mismatch", "bound")
"""Signatures that depend on input values: the reducer keeps explicit inputs for them."""


@dataclass
class Step:
    name: str
    ops_before: int
    ops_after: int
    largest_dim_after: int
    tests: int
    seconds: float

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class Result:
    case: Case
    signature: str
    original: Case
    steps: list[Step] = field(default_factory=list)
    tests: int = 0
    cache_hits: int = 0
    seconds: float = 0.0

    @property
    def culprit(self) -> str | None:
        p = self.case.options.passes
        return p[0] if p and len(p) == 1 and not p[0].startswith("pipeline:") else None

    def log(self) -> dict:
        """The reduction log (`--emit-evidence`)."""
        return {
            "schema": "gdv-reduction-1",
            "signature": self.signature,
            "original": {
                "sha256": hashlib.sha256(self.original.text().encode()).hexdigest(),
                "ops": self.original.ops,
                "largest_dim": self.original.largest_dim,
                "options": self.original.options.argv(),
            },
            "reduced": {
                "sha256": hashlib.sha256(self.case.text().encode()).hexdigest(),
                "ops": self.case.ops,
                "largest_dim": self.case.largest_dim,
                "options": self.case.options.argv(),
            },
            "culprit_pass": self.culprit,
            "steps": [s.to_json() for s in self.steps],
            "tests": self.tests,
            "cache_hits": self.cache_hits,
            "seconds": round(self.seconds, 3),
        }


def _observe_worker(case: Case, want: str, quick: bool) -> str:
    return observe(case, want, quick)


class Oracle:
    """Decides, with a cache and a worker pool, whether candidates show the signature."""

    def __init__(
        self,
        signature: str,
        jobs: int = 1,
        test: Callable[[Case], bool] | None = None,
        quick: bool = False,
    ):
        self.signature = signature
        self.quick = quick
        self.jobs = max(1, jobs)
        self.test = test
        self.cache: dict[str, bool] = {}
        self.tests = 0
        self.hits = 0
        self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _valid(self, case: Case) -> Case | None:
        """The candidate re-read from its own text, verified; None when invalid."""
        from gdv.fuzzing.signature import parse_case_text
        from gdv.ir.verifier import verify

        try:
            modules = [verify(m) for m in parse_case_text(case.text())]
        except (IRError, RecursionError, ValueError, KeyError, TypeError, AssertionError):
            return None
        return Case(modules, case.inputs, case.options)

    def many(self, cases: list) -> list[bool]:
        """Verdicts for `cases` (cases, or functions that build one: built only when needed),
        taken in order in windows of `jobs`; after a window with an interesting candidate the
        rest count as not interesting. The first interesting one is therefore the same
        whatever `jobs` is."""
        verdicts = [False] * len(cases)
        window = 1 if self.test is not None else self.jobs
        for start in range(0, len(cases), window):
            todo: list[tuple[int, Case, str]] = []
            for i in range(start, min(start + window, len(cases))):
                c = cases[i]() if callable(cases[i]) else cases[i]
                valid = None if c is None else self._valid(c)
                if valid is None:
                    continue
                key = valid.key()
                if key in self.cache:
                    self.hits += 1
                    verdicts[i] = self.cache[key]
                else:
                    todo.append((i, valid, key))
            if len(todo) == 1 or (todo and window == 1):
                i, c, key = todo[0]
                verdicts[i] = self._run_one(c, key)
            elif todo:
                self._run_parallel(todo, verdicts)
            if any(verdicts[start : start + window]):
                break
        return verdicts

    def _run_one(self, case: Case, key: str) -> bool:
        self.tests += 1
        ok = (
            self.test(case)
            if self.test is not None
            else observe(case, self.signature, self.quick) == self.signature
        )
        self.cache[key] = ok
        return ok

    def _run_parallel(self, todo, verdicts) -> None:
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(max_workers=self.jobs)
        futures = [
            self._pool.submit(_observe_worker, c, self.signature, self.quick) for _, c, _ in todo
        ]
        for (i, _, key), fut in zip(todo, futures, strict=True):
            self.tests += 1
            try:
                ok = fut.result() == self.signature
            except Exception:  # noqa: BLE001 - a worker that died shows nothing
                ok = False
            self.cache[key] = ok
            verdicts[i] = ok

    def one(self, case: Case) -> bool:
        return self.many([case])[0]


# --- rewriting the entry function -----------------------------------------------------------


def dead_code(fn: Function) -> Function:
    """Only the ops the returned values need, and the parameters something reads."""
    live = set(fn.returns)
    kept: list[Op] = []
    for op in reversed(fn.ops):
        if op.result in live:
            kept.append(op)
            live.update(op.operands)
    kept.reverse()
    params = [p for p in fn.params if p.name in live]
    return dataclasses.replace(fn, ops=kept, params=params)


def keep_ops(fn: Function, kept: set[int]) -> tuple[Function, list[str]]:
    """`fn` with only the ops at `kept` (indices); every other op a kept op or a return reads
    becomes a parameter of its name and type. Returns the function and the new parameters."""
    needed = set(fn.returns)
    for i, op in enumerate(fn.ops):
        if i in kept:
            needed.update(op.operands)
    new_params = [
        Param(op.result, op.type)
        for i, op in enumerate(fn.ops)
        if i not in kept and op.result in needed
    ]
    ops = [op for i, op in enumerate(fn.ops) if i in kept]
    out = dataclasses.replace(fn, params=list(fn.params) + new_params, ops=ops)
    return dead_code(out), [p.name for p in new_params]


def keep_outputs(fn: Function, kept: list[int]) -> Function:
    return dead_code(
        dataclasses.replace(
            fn,
            returns=[fn.returns[i] for i in kept],
            results=[fn.results[i] for i in kept],
            results_parenthesized=len(kept) != 1 or fn.results_parenthesized,
        )
    )


def _map_types(fn: Function, f: Callable[[TensorType], TensorType], attr=None) -> Function:
    params = [dataclasses.replace(p, type=f(p.type)) for p in fn.params]
    ops = [
        dataclasses.replace(
            op, type=f(op.type), attrs=attr(op) if attr is not None else dict(op.attrs)
        )
        for op in fn.ops
    ]
    return dataclasses.replace(fn, params=params, ops=ops, results=[f(t) for t in fn.results])


def _swap_ints(value: Any, old: int, new: int) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return new if value == old else value
    if isinstance(value, list):
        return [_swap_ints(v, old, new) for v in value]
    return value


def resize_dim(fn: Function, old: int, new: int, attrs_too: bool) -> Function:
    """Every dim of size `old` made `new` (and, with `attrs_too`, integer attributes equal to
    `old`, such as a reshape's shape or a slice's limits)."""

    def t(tt: TensorType) -> TensorType:
        return tt.with_shape([new if d == old else d for d in tt.shape])

    def a(op: Op) -> dict:
        if not attrs_too:
            return dict(op.attrs)
        return {k: _swap_ints(v, old, new) for k, v in op.attrs.items()}

    return _map_types(fn, t, a)


def retype(fn: Function, old: DType, new: DType) -> Function:
    def t(tt: TensorType) -> TensorType:
        return tt.with_dtype(new) if tt.dtype == old else tt

    return _map_types(fn, t)


def _dims(fn: Function) -> list[int]:
    sizes = {d for p in fn.params for d in p.type.shape} | {d for o in fn.ops for d in o.type.shape}
    return sorted((d for d in sizes if d > 1), reverse=True)


def _slice_inputs(fn: Function, inputs: dict[str, np.ndarray] | None) -> dict | None:
    """Inputs cut (leading elements) and converted to `fn`'s parameter types."""
    if inputs is None:
        return None
    out = {}
    for p in fn.params:
        a = np.asarray(inputs[p.name])
        if a.ndim == len(p.type.shape) and all(
            n <= m for n, m in zip(p.type.shape, a.shape, strict=True)
        ):
            a = a[tuple(slice(0, n) for n in p.type.shape)]
        else:
            from gdv.backends.reference import random_inputs

            a = random_inputs(Function("x", [p], [], [], []), 0)[p.name]
        out[p.name] = _convert(a, p.type.dtype)
    return out


def _convert(a: np.ndarray, dtype: DType) -> np.ndarray:
    target = dtype.np
    if a.dtype == target:
        return np.ascontiguousarray(a)
    with np.errstate(all="ignore"):
        if dtype.is_int:
            if a.dtype.kind not in "iub":  # floats: truncate and saturate, exactly
                return float_to_int(a, dtype)
            info = np.iinfo(target)  # integers: saturate, in Python integers (u64, i64)
            return np.clip(a.astype(object), info.min, info.max).astype(target)
        return a.astype(target)


# --- the reducer --------------------------------------------------------------------------


class Reducer:
    def __init__(self, case: Case, signature: str, oracle: Oracle, progress=None):
        self.case = case
        self.signature = signature
        self.oracle = oracle
        self.progress = progress
        self.steps: list[Step] = []

    # helpers ---------------------------------------------------------------------------
    def _fn(self, case: Case | None = None, k: int = 0) -> Function:
        fn = (case or self.case).modules[k].entry
        assert fn is not None
        return fn

    def _make(self, fns: list[Function], inputs, options=None) -> Case:
        modules = [with_entry(m, f) for m, f in zip(self.case.modules, fns, strict=True)]
        return Case(modules, inputs, options or self.case.options)

    def _show(self, step: str, done: bool = False) -> None:
        if self.progress:
            self.progress(step, self.case.ops, self.case.largest_dim, self.oracle.tests, done)

    def _run_step(self, name: str, fn: Callable[[], bool]) -> bool:
        before, t0, tests0 = self.case.ops, time.perf_counter(), self.oracle.tests
        self._show(name)
        changed = fn()
        self.steps.append(
            Step(
                name,
                before,
                self.case.ops,
                self.case.largest_dim,
                self.oracle.tests - tests0,
                round(time.perf_counter() - t0, 3),
            )
        )
        self._show(name, True)
        return changed

    def _values(self) -> dict[str, np.ndarray] | None:
        """Every value of the entry function on the current inputs (for rerouted ops)."""
        if self.case.inputs is None or self.case.is_pair:
            return None
        from gdv.backends.reference.evaluate import evaluate_ops
        from gdv.backends.reference.interpreter import check_inputs
        from gdv.backends.reference.registry import Context
        from gdv.ir.ops.kernel import kernel_bodies

        fn = self._fn()
        ctx = Context("exact")
        env = check_inputs(fn, self.case.inputs, ctx)
        with kernel_bodies(self.case.modules[0].functions):
            return evaluate_ops(fn.ops, env, ctx, keep=[o.result for o in fn.ops])

    # steps -----------------------------------------------------------------------------
    def pipeline(self) -> bool:
        opts = self.case.options
        if self.case.is_pair or opts.passes is not None:
            return False
        names = [p.name for p in pipeline_passes(opts)]
        lo, hi = 0, len(names)  # the smallest prefix length that still shows it

        def prefix(k: int) -> Case:
            return dataclasses.replace(
                self.case, options=dataclasses.replace(opts, passes=(f"pipeline:{k}",))
            )

        if not self.oracle.one(prefix(hi)):
            return False
        while lo < hi:
            mid = (lo + hi) // 2
            if self.oracle.one(prefix(mid)):
                hi = mid
            else:
                lo = mid + 1
        best = prefix(hi)
        if hi >= 1:
            alone = dataclasses.replace(
                self.case, options=dataclasses.replace(opts, passes=(names[hi - 1],))
            )
            if self.oracle.one(alone):
                best = alone
        if hi == 0:
            best = dataclasses.replace(
                self.case, options=dataclasses.replace(opts, passes=("pipeline:0",))
            )
        self.case = best
        return True

    def ops(self) -> bool:
        fns = [self._fn(k=k) for k in range(len(self.case.modules))]
        # A tv pair's ops are items by result name, so a value both sides define is kept or
        # rerouted on both at once (to one shared parameter), never on one side alone.
        if self.case.is_pair:
            items = list(dict.fromkeys(op.result for f in fns for op in f.ops))
        else:
            items = [op.result for op in fns[0].ops]
        if not items:
            return False
        values = self._values()

        def build(subset: list[str]) -> Case:
            chosen = set(subset)
            new_fns = []
            for f in fns:
                nf, _ = keep_ops(f, {i for i, op in enumerate(f.ops) if op.result in chosen})
                new_fns.append(nf)
            if self.case.is_pair:
                new_fns = _align_pair(new_fns, fns)
            inputs = None
            if values is not None:
                inputs = {
                    p.name: values.get(p.name, self.case.inputs.get(p.name))
                    for p in new_fns[0].params
                }
            return self._make(new_fns, inputs)

        kept = ddmin(
            items,
            interesting_many=lambda cands: self.oracle.many(
                [functools.partial(build, c) for c in cands]
            ),
        )
        if len(kept) == len(items):
            return False
        self.case = build(kept)
        return True

    def outputs(self) -> bool:
        if self.case.is_pair:
            return False
        fn = self._fn()
        if len(fn.returns) < 2:
            return False

        def build(subset: list[int]) -> Case:
            nf = keep_outputs(fn, subset)
            inputs = (
                None
                if self.case.inputs is None
                else {p.name: self.case.inputs[p.name] for p in nf.params}
            )
            return self._make([nf], inputs)

        kept = ddmin(
            list(range(len(fn.returns))),
            interesting_many=lambda cands: self.oracle.many(
                [functools.partial(build, c) if c else None for c in cands]
            ),
        )
        if len(kept) == len(fn.returns) or not kept:
            return False
        self.case = build(kept)
        return True

    def returns(self) -> bool:
        """A returned value replaced by one of its defining op's operands (the result type
        follows): what ddmin over ops cannot do, since a removed op's result stays returned.
        In a tv pair the same value replaces the return on both sides, where both have it."""
        changed = True
        any_change = False
        while changed:
            changed = False
            fns = [self._fn(k=k) for k in range(len(self.case.modules))]
            types = [f.types() for f in fns]
            cands = []
            for i in range(len(fns[0].returns)):
                operands = [
                    x for f in fns for op in f.ops if op.result == f.returns[i] for x in op.operands
                ]
                for x in dict.fromkeys(operands):
                    if any(t.get(x) != types[0].get(x) for t in types):
                        continue
                    new_fns = []
                    for f in fns:
                        rets, results = list(f.returns), list(f.results)
                        rets[i], results[i] = x, types[0][x]
                        new_fns.append(
                            dead_code(dataclasses.replace(f, returns=rets, results=results))
                        )
                    if self.case.is_pair:
                        new_fns = _align_pair(new_fns, fns)
                    cands.append(self._make(new_fns, self._inputs_for(new_fns[0])))
            verdicts = self.oracle.many(cands)
            hit = next((c for c, ok in zip(cands, verdicts, strict=True) if ok), None)
            if hit is not None:
                self.case = hit
                changed = any_change = True
        return any_change

    def _inputs_for(self, fn: Function) -> dict | None:
        if self.case.inputs is None or self.case.is_pair:  # a tv verdict reads no inputs
            return None
        return {p.name: self.case.inputs[p.name] for p in fn.params}

    def dead_code(self) -> bool:
        fns = [dead_code(self._fn(k=k)) for k in range(len(self.case.modules))]
        if self.case.is_pair:
            fns = _align_pair(fns, [self._fn(k=k) for k in range(2)])
        if all(
            len(f.ops) == len(self._fn(k=k).ops) and len(f.params) == len(self._fn(k=k).params)
            for k, f in enumerate(fns)
        ):
            return False
        inputs = (
            None
            if self.case.inputs is None
            else {p.name: self.case.inputs[p.name] for p in fns[0].params}
        )
        cand = self._make(fns, inputs)
        if self.oracle.one(cand):
            self.case = cand
            return True
        return False

    def dims(self) -> bool:
        changed = False
        progress = True
        while progress:
            progress = False
            sizes = sorted(
                {d for k in range(len(self.case.modules)) for d in _dims(self._fn(k=k))},
                reverse=True,
            )
            for d in sizes:
                for new in ([d // 2] if d >= 4 else []) + ([1] if d >= 2 else []):
                    cands = []
                    for attrs_too in (True, False):
                        fns = [
                            resize_dim(self._fn(k=k), d, new, attrs_too)
                            for k in range(len(self.case.modules))
                        ]
                        cands.append(self._make(fns, _slice_inputs(fns[0], self.case.inputs)))
                    verdicts = self.oracle.many(cands)
                    hit = next((c for c, ok in zip(cands, verdicts, strict=True) if ok), None)
                    if hit is not None:
                        self.case = hit
                        changed = progress = True
                        break
                if progress:
                    break
        return changed

    def dtypes(self) -> bool:
        changed = False
        for old, new in NARROWER.items():
            present = any(
                t.dtype == old
                for k in range(len(self.case.modules))
                for t in [p.type for p in self._fn(k=k).params]
                + [o.type for o in self._fn(k=k).ops]
            )
            if not present:
                continue
            fns = [retype(self._fn(k=k), old, new) for k in range(len(self.case.modules))]
            cand = self._make(fns, _slice_inputs(fns[0], self.case.inputs))
            if self.oracle.one(cand):
                self.case = cand
                changed = True
        return changed

    def attributes(self) -> bool:
        changed = False
        for k in range(len(self.case.modules)):
            for cand_fn in _attribute_candidates(self._fn(k=k)):
                fns = [self._fn(k=j) for j in range(len(self.case.modules))]
                fns[k] = cand_fn
                cand = self._make(fns, self.case.inputs)
                if self.oracle.one(cand):
                    self.case = cand
                    changed = True
        return changed

    def run(self) -> Case:
        self._run_step("pipeline", self.pipeline)
        for _ in range(MAX_ROUNDS):
            before = self.case.key()
            changed = False
            for name, step in (
                ("outputs", self.outputs),
                ("returns", self.returns),
                ("ops", self.ops),
                ("dead-code", self.dead_code),
                ("dims", self.dims),
                ("dtypes", self.dtypes),
                ("attributes", self.attributes),
            ):
                changed |= self._run_step(name, step)
            if not changed or self.case.key() == before:
                break
        return self.case


def _align_pair(new_fns: list[Function], old_fns: list[Function]) -> list[Function]:
    """Both functions of a tv pair with parameters that still correspond by position: the
    original positions either side reads, then each side's new parameters: a value rerouted
    on both sides (same name and type) is one parameter at one position; any other is mirrored
    on the other side as a parameter it does not read."""
    (a, b), (oa, ob) = new_fns, old_fns
    na, nb = {p.name for p in a.params}, {p.name for p in b.params}
    keep = [
        i
        for i, (x, y) in enumerate(zip(oa.params, ob.params, strict=True))
        if x.name in na or y.name in nb
    ]
    params_a, params_b = [oa.params[i] for i in keep], [ob.params[i] for i in keep]
    new_a = [p for p in a.params if p.name not in {q.name for q in oa.params}]
    new_b = [p for p in b.params if p.name not in {q.name for q in ob.params}]

    def mirror(p: Param, fn: Function, params: list[Param]) -> Param:
        taken = {q.name for q in params} | {o.result for o in fn.ops} | {q.name for q in fn.params}
        name = p.name
        while name in taken:
            name += "_"
        return Param(name, p.type)

    shared = {p.name: p for p in new_b}
    for p in new_a:
        params_a.append(p)
        twin = shared.get(p.name)
        if twin is not None and twin.type == p.type:
            # the same value rerouted on both sides: one parameter, at one position
            params_b.append(shared.pop(p.name))
        else:
            params_b.append(mirror(p, b, params_b))
    for p in new_b:
        if p.name in shared:
            params_a.append(mirror(p, a, params_a))
            params_b.append(p)
    return [dataclasses.replace(a, params=params_a), dataclasses.replace(b, params=params_b)]


def _attribute_candidates(fn: Function):
    """One simplification at a time: a parameter's range dropped, an optional attribute
    dropped, a constant made a splat of 0 or 1."""
    from gdv.ir.ops import REGISTRY

    for i, p in enumerate(fn.params):
        if p.attrs:
            params = list(fn.params)
            params[i] = dataclasses.replace(p, attrs={})
            yield dataclasses.replace(fn, params=params)
    if fn.attrs:
        yield dataclasses.replace(fn, attrs={})
    for i, op in enumerate(fn.ops):
        spec = REGISTRY.get(op.name)
        if op.name == "constant":
            current = op.attrs.get("value")
            simple = [False, True] if op.type.dtype.is_bool else [0, 1]
            if op.type.dtype.is_float:
                simple = [0.0, 1.0]
            if current in simple:  # already simple: never flip between 0 and 1
                continue
            for value in simple:
                ops = list(fn.ops)
                ops[i] = dataclasses.replace(op, attrs={**op.attrs, "value": value})
                yield dataclasses.replace(fn, ops=ops)
            continue
        for key in sorted(op.attrs):
            if spec is not None and key in getattr(spec, "required_attrs", ()):
                continue
            ops = list(fn.ops)
            ops[i] = dataclasses.replace(op, attrs={k: v for k, v in op.attrs.items() if k != key})
            yield dataclasses.replace(fn, ops=ops)


def reduce_case(
    case: Case,
    signature: str | None = None,
    *,
    jobs: int = 1,
    test: Callable[[Case], bool] | None = None,
    progress=None,
) -> Result:
    """Reduce `case` keeping `signature` (default: the one it shows) or, with `test`, keeping
    `test(candidate)` true. Raises IRError when the case does not show it to begin with."""
    start = time.perf_counter()
    quick = False
    if signature == "clean":
        raise IRError("'clean' is no failure: give the signature of a failure to keep")
    if test is None:
        if signature is None:
            signature = observe(case)
            if signature == "clean":
                raise IRError("the case shows no failure (signature 'clean'): nothing to reduce")
        # A refutation the seeded-input probe finds is decided without a solver for every
        # candidate: what the reduced case shows is then a replayed counterexample.
        quick = signature.startswith("refuted:") and observe(case, signature, True) == signature
        if not quick and observe(case, signature) != signature:
            raise IRError(
                f"the case does not show signature {signature!r} (it shows {observe(case)!r})"
            )
    else:
        signature = signature or "test"
        if not test(case):
            raise IRError("the interestingness test fails on the original case")
    if test is None and signature.split(":", 1)[0] in INPUT_KINDS and case.inputs is None:
        from gdv.backends.reference import random_inputs

        case = Case(case.modules, random_inputs(case.modules[0], 0), case.options)
    oracle = Oracle(signature, jobs, test, quick)
    try:
        reducer = Reducer(case, signature, oracle, progress)
        reduced = reducer.run()
    finally:
        oracle.close()
    return Result(
        reduced,
        signature,
        case,
        reducer.steps,
        oracle.tests,
        oracle.hits,
        time.perf_counter() - start,
    )


def progress_bar(stream=None):
    """A one-line progress display: the step, the ops and largest dim, the tests run."""
    stream = stream or sys.stderr
    tty = stream.isatty()

    def show(step: str, ops: int, dim: int, tests: int, done: bool) -> None:
        line = f"reduce [{step:<10}] {ops:5d} ops, largest dim {dim:5d}, {tests:5d} tests"
        if tty:
            stream.write("\r" + line)
            stream.flush()
        elif done:
            stream.write(line + "\n")

    return show
