"""What a pass is, and the rewrite machinery that most passes share.

A pass is a small frozen dataclass with a `name` and `run(module) -> PassResult`. A rewriting
pass walks each function's ops in order; a rule looks at one op (and, through `Site.producer`,
at the ops that define its operands) and may return a `Rewrite`: new ops and the value that
replaces the op's result. Each rewrite yields one equivalence obligation between the ops it
matched (`src`) and the ops it emitted (`tgt`), as two small functions over the values they
read, so a proof failure names the exact rule and place.
"""

from __future__ import annotations

import abc
import dataclasses
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.obligation import Obligation
from gdv.ir.types import TensorType


@dataclass
class Step:
    """One entry of a pass's certificate: a change it made, as data that
    `gdv.evidence.replay` applies to the stage before to rebuild the stage after, text for text,
    without running the pass (issue 15).

    Kinds:
    - `rewrite`: in `function`, the op defining `root` (at index `position` of the function's
      current ops) is replaced by the ops named `emitted` (taken from the `tgt` side of the
      obligation numbered `obligation` in the pass's list), placed where it was, and every
      later use of `root` reads `replacement`. `functions` names the functions (kernel bodies)
      the step adds, taken from the obligation too. With `obligation` None, the step replaces
      one op by one op of the same name that differs only in schedule attributes, and the
      checker builds and proves the pair itself; `attrs` are then the op's new attributes.
    - `remove`: the ops defining `removed` are dropped; nothing may read them afterwards.
    - `attrs`: `function`'s attributes become `attrs` (only execution-plan keys may change).
    - `drop-functions`: the functions in `functions`, which no kernel uses, are dropped.
    """

    kind: str
    function: str = ""
    position: int = -1
    root: str = ""
    replacement: str = ""
    emitted: list[str] = field(default_factory=list)
    obligation: int | None = None
    functions: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    attrs: dict | None = None
    """`attrs` steps: the function's new attributes; a `rewrite` without an obligation: the
    op's."""

    def to_json(self, ids: list[str] | None = None) -> dict:
        """The step as JSON, the obligation named by its id when `ids` are given."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.function:
            out["function"] = self.function
        if self.kind == "rewrite":
            out |= {
                "position": self.position,
                "root": self.root,
                "replacement": self.replacement,
                "emitted": list(self.emitted),
                "obligation": None
                if self.obligation is None
                else (ids[self.obligation] if ids is not None else self.obligation),
            }
            if self.obligation is None:
                out["attrs"] = self.attrs
        if self.functions:
            out["functions"] = list(self.functions)
        if self.kind == "remove":
            out["removed"] = list(self.removed)
        if self.kind == "attrs":
            out["attrs"] = self.attrs
        return out


def rescheduled(function: str, position: int, op: Op) -> Step:
    """The step that gives the op at `position` of `function` the attributes `op` has, and
    nothing else (a schedule): the checker builds and proves its pair itself."""
    return Step("rewrite", function, position, op.result, op.result, [op.result], attrs=op.attrs)


def reordered(function: str, position: int, op: Op, obligation: int) -> Step:
    """The step that replaces the op at `position` of `function` by `op`, the same op with
    attributes that change its meaning, citing obligation number `obligation` (a `real`
    claim whose pair is the op before and after)."""
    return Step("rewrite", function, position, op.result, op.result, [op.result], obligation)


def operand_step(op: Op, types: dict, k: int, d: int) -> int:
    """How far kernel `op`'s operand k moves in its row-major flat index per step of loop
    dim d (its map's rows weighted by the operand's strides)."""
    shape = types[op.operands[k]].shape
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= size
    strides.reverse()
    return sum(s * row[d] for s, row in zip(strides, op.attrs["maps"][k], strict=True))


def fresh_function(prefix: str, taken: set[str]) -> str:
    """`prefix0`, `prefix1`, ...: the first not in `taken`, which it joins."""
    name = next(f"{prefix}{n}" for n in range(len(taken) + 1) if f"{prefix}{n}" not in taken)
    taken.add(name)
    return name


def readers_and_types(fn: Function, ops: list[Op]) -> tuple[dict[str, list[Op]], dict]:
    """The ops of `ops` that read each value (each op once per value), and the type of every
    parameter of `fn` and result of `ops`."""
    readers: dict[str, list[Op]] = {}
    for o in ops:
        for v in set(o.operands):
            readers.setdefault(v, []).append(o)
    types = {q.name: q.type for q in fn.params} | {o.result: o.type for o in ops}
    return readers, types


def drop_unused_bodies(
    module: Module, functions: dict[str, Function], taken: set[str], steps: list[Step]
) -> list[Function]:
    """`functions` (the module's, rewritten, and the bodies a pass added to `taken`) without
    the bodies no kernel calls any more; the `drop-functions` step goes to `steps`."""
    from gdv.ir.ops.kernel import bodies_used

    used_after = bodies_used(functions.values())
    bodies = bodies_used(module.functions) | (taken - {f.name for f in module.functions})
    kept = [f for f in functions.values() if f.name not in bodies or f.name in used_after]
    names = {f.name for f in kept}
    dropped = [name for name in functions if name not in names]
    if dropped:
        steps.append(Step("drop-functions", functions=dropped))
    return kept


def rewrite_each_function(module: Module, rewrite_one: Callable) -> PassResult:
    """A pass that rewrites one op pair at a time: for each function that is not a kernel body,
    `rewrite_one(fn, ops, functions, taken, index, steps)` changes `ops` in place (adding new
    bodies to `functions` and their names to `taken`, its steps to `steps`) and returns the
    obligation of the change, or None when nothing is left to change. Bodies no kernel uses
    any more are dropped."""
    from gdv.ir.ops.kernel import bodies_used

    used_before = bodies_used(module.functions)
    functions = {f.name: f for f in module.functions}
    taken = set(functions)
    obligations: list = []
    steps: list[Step] = []
    for fn in module.functions:
        if fn.name in used_before:
            continue
        ops = list(fn.ops)
        while found := rewrite_one(fn, ops, functions, taken, len(obligations), steps):
            obligations.append(found)
        functions[fn.name] = dataclasses.replace(fn, ops=ops)
    kept = drop_unused_bodies(module, functions, taken, steps)
    return PassResult(Module(kept, module.filename), obligations, bool(obligations), steps)


@dataclass
class PassResult:
    module: Module
    obligations: list[Obligation] = field(default_factory=list)
    changed: bool = False
    steps: list[Step] | None = None
    """The certificate: what the pass did, step by step (`Step`); None when the pass gives
    none (an external pass), which the checker then proves as one whole-function step."""


class Pass(abc.ABC):
    """Base of every pass: subclasses are frozen dataclasses with a class-level `name`."""

    name: ClassVar[str] = ""
    stage_in: ClassVar[str] = "graph"
    """The stage the pass's input is verified at."""

    @abc.abstractmethod
    def run(self, module: Module) -> PassResult:
        """The new module and the obligations that justify it; never calls a solver."""


class Names:
    """Fresh value names for one function."""

    def __init__(self, fn: Function) -> None:
        self.taken = {p.name for p in fn.params} | {op.result for op in fn.ops}

    def fresh(self, base: str) -> str:
        if base not in self.taken:
            self.taken.add(base)
            return base
        for k in itertools.count(1):
            name = f"{base}.{k}"
            if name not in self.taken and len(name) <= 128:
                self.taken.add(name)
                return name
        raise AssertionError("unreachable")


@dataclass
class Rewrite:
    """Replace the matched op's result with `replacement`, computed by `ops` (maybe none, when
    the replacement is an existing value). `matched` are the ops of the pattern (the root op
    last) that the obligation's `src` recomputes."""

    rule: str
    ops: list[Op]
    replacement: str
    matched: list[Op]
    witness: list[Op] | None = None
    """When the replacement is a value computed outside the pattern (CSE), the ops that
    recompute it for the obligation's target side; they are not emitted into the module."""


@dataclass
class Site:
    """What a rule sees: the op, the function's value types and the defining ops so far."""

    op: Op
    types: dict[str, TensorType]
    defs: dict[str, Op]
    names: Names
    function: str

    def producer(self, i: int) -> Op | None:
        """The op defining operand `i`, or None for a parameter."""
        return self.defs.get(self.op.operands[i])

    def type_of(self, i: int) -> TensorType:
        return self.types[self.op.operands[i]]

    def new_op(self, name: str, operands: list[str], type_: TensorType, **attrs: Any) -> Op:
        result = self.names.fresh(f"{self.op.result}.{name}")
        return Op(result, name, list(operands), dict(attrs), type_, self.op.loc)


Rule = Callable[[Site], Rewrite | None]


def local_obligation(
    pass_name: str,
    rewrite: Rewrite,
    types: dict[str, TensorType],
    theory: str = "fp",
    index: int = 0,
) -> Obligation:
    """The claim that `rewrite.matched` and `rewrite.ops` compute the same value."""
    src_ops = rewrite.matched
    # The target may read values the matched ops define (a rule can keep part of its
    # pattern); then it recomputes them, so both functions stand alone.
    src_defs = {o.result: o for o in src_ops}
    tgt_side = rewrite.ops + (rewrite.witness or [])
    wanted = {v for o in tgt_side for v in o.operands} | {rewrite.replacement}
    for o in reversed(src_ops):
        if o.result in wanted:
            wanted |= set(o.operands)
    kept = [o for o in src_ops if o.result in wanted and o.result in src_defs]
    tgt_ops = kept + rewrite.ops + (rewrite.witness or [])
    defined = {o.result for o in src_ops} | {o.result for o in tgt_ops}
    reads: list[str] = []
    for o in itertools.chain(src_ops, tgt_ops):
        for v in o.operands:
            if v not in defined and v not in reads:
                reads.append(v)
    if not rewrite.witness and rewrite.replacement not in defined | set(reads):
        reads.append(rewrite.replacement)
    params = [Param(v, types[v]) for v in reads]
    root = src_ops[-1]
    src = Function("src", params, [root.type], [_copy(o) for o in src_ops], [root.result])
    tgt_params = [Param(v, types[v]) for v in reads]
    tgt_result = rewrite.witness[-1].result if rewrite.witness else rewrite.replacement
    tgt = Function("tgt", tgt_params, [root.type], [_copy(o) for o in tgt_ops], [tgt_result])
    suffix = f"#{index}" if index else ""
    return Obligation(
        id=f"{pass_name}/{rewrite.rule}/equivalence{suffix}",
        kind="equivalence",
        theory=theory,
        src=src,
        tgt=tgt,
        claim=f"%{root.result} = {root.name}(...) may be replaced by %{rewrite.replacement}",
        loc=root.loc,
    )


def _copy(op: Op) -> Op:
    return Op(op.result, op.name, list(op.operands), dict(op.attrs), op.type, op.loc)


class _FunctionRewriter:
    """Rewrites one function's ops in order; see `rewrite_module`."""

    MAX_DEPTH = 16  # a rule's output is offered to the rules again, this many times at most

    def __init__(
        self,
        fn: Function,
        pass_name: str,
        rules: list[Rule],
        theory: str,
        counts: dict[str, int],
        obligations: list[Obligation],
        steps: list[Step],
    ) -> None:
        self.fn = fn
        self.steps = steps
        self.pass_name, self.rules, self.theory = pass_name, rules, theory
        self.counts, self.obligations = counts, obligations
        self.names = Names(fn)
        self.types = fn.types()
        self.defs: dict[str, Op] = {}
        self.rename: dict[str, str] = {}
        self.out: list[Op] = []

    def emit(self, op: Op, depth: int = 0) -> None:
        op = _copy(op)
        op.operands = [self.rename.get(v, v) for v in op.operands]
        site = Site(op, self.types, self.defs, self.names, self.fn.name)
        for rule in self.rules if depth < self.MAX_DEPTH else []:
            rw = rule(site)
            if rw is None:
                continue
            for new in rw.ops:
                self.types[new.result] = new.type
            k = self.counts.get(rw.rule, 0)
            self.counts[rw.rule] = k + 1
            # Every op before this one is in `out` already, and the ops of earlier rewrites
            # still waiting to be emitted come after it: it sits at index len(out).
            self.steps.append(
                Step(
                    "rewrite",
                    self.fn.name,
                    len(self.out),
                    op.result,
                    rw.replacement,
                    [new.result for new in rw.ops],
                    len(self.obligations),
                )
            )
            self.obligations.append(
                local_obligation(self.pass_name, rw, self.types, self.theory, k)
            )
            for new in rw.ops:
                self.emit(new, depth + 1)
            self.rename[op.result] = self.rename.get(rw.replacement, rw.replacement)
            return
        self.defs[op.result] = op
        self.out.append(op)

    def run(self) -> Function:
        for op in self.fn.ops:
            self.emit(op)
        returns = [self.rename.get(r, r) for r in self.fn.returns]
        return dataclasses.replace(self.fn, ops=self.out, returns=returns)


def rewrite_module(
    module: Module,
    pass_name: str,
    rules: Iterable[Rule],
    theory: str = "fp",
) -> PassResult:
    """Apply `rules` to every op of every function, first match wins; the ops a rule emits are
    offered to the rules again."""
    rules = list(rules)
    obligations: list[Obligation] = []
    counts: dict[str, int] = {}
    steps: list[Step] = []
    functions = [
        _FunctionRewriter(fn, pass_name, rules, theory, counts, obligations, steps).run()
        for fn in module.functions
    ]
    return PassResult(Module(functions, module.filename), obligations, bool(obligations), steps)
