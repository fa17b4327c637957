"""The table of SMT rules, keyed by op spec, and the encoding context they build terms in.

A tensor is its shape, its dtype and a function from a tuple of symbolic indices (`Idx`) to a
value term (DESIGN.md, "Semantics for proofs"): never one term per element. A rule takes the
op and its operand tensors and returns the result tensor; `Ctx.fold` gives reductions their
meaning as an uninterpreted fold over `(extent, lambda k. body(k))`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import z3

from gdv.ir.core import Op
from gdv.ir.dtypes import DType
from gdv.ir.ops import REGISTRY, OpSpec
from gdv.ir.types import TensorType
from gdv.validate.semantics.index import Idx
from gdv.validate.semantics.values import Values

Index = tuple[Idx, ...]


Request = tuple["Tensor", Index]
"""What a rule's generator yields to read an operand: `v = yield x.read(j)`."""
Term = z3.ExprRef | Generator[Request, z3.ExprRef, z3.ExprRef]
"""What a rule's `at` returns: a term at once, or a generator that yields the operand reads it
needs (each answered with the element's term) and returns the term."""


class Tensor:
    """A tensor value: `type` and `at(index) -> term`, memoised per index.

    A rule builds its tensor from a function `at(index)` that returns a term, or a generator
    that reads operands with `yield x.read(index)`. `Tensor.at` runs those generators on an
    explicit stack (`drive`): the Python stack does not grow with the depth of the program, so
    a chain of 10^4 ops encodes like a chain of 10 (issue 14, "recursive walks")."""

    def __init__(self, type_: TensorType, at: Callable[[Index], Term]) -> None:
        self.type = type_
        self._at = at
        self._memo: dict[tuple, tuple[Index, z3.ExprRef]] = {}

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    def read(self, idx: Index) -> Request:
        """A request for the element at `idx`, for a rule's generator to yield."""
        return (self, idx)

    def at(self, idx: Index) -> z3.ExprRef:
        """The element at `idx` (one index term per dim)."""
        return drive(_read_one(self, idx))


def _read_one(x: Tensor, idx: Index) -> Generator[Request, z3.ExprRef, z3.ExprRef]:
    return (yield x.read(idx))


def _key(idx: Index) -> tuple:
    # The key holds each atom's range (see `Atom.key`); the memo keeps the index itself alive,
    # since Z3 reuses the id of a freed term and a key of ids alone could later name another.
    return tuple(i.key for i in idx)


def drive(term: Term) -> z3.ExprRef:
    """The term `term` stands for, running generators and the operand reads they yield on an
    explicit stack. Reads hit each tensor's memo first: shared subterms (`d` in `d * d`)
    would otherwise be rebuilt once per use, which grows exponentially with the depth."""
    if not isinstance(term, Generator):
        return term
    # Frames: (tensor whose element is being built, memo key, index, generator); the first
    # frame builds no tensor element.
    stack: list[tuple[Tensor | None, tuple, Index, Generator]] = [(None, (), (), term)]
    answer: z3.ExprRef | None = None
    while True:
        owner, key, idx, gen = stack[-1]
        try:
            x, j = gen.send(answer)
        except StopIteration as done:
            value = done.value
            stack.pop()
            if owner is not None:
                owner._memo[key] = (idx, value)
            if not stack:
                return value
            answer = value
            continue
        k = _key(j)
        hit = x._memo.get(k)
        if hit is not None:
            answer = hit[1]
            continue
        made = x._at(j)
        if isinstance(made, Generator):
            stack.append((x, k, j, made))
            answer = None
        else:
            x._memo[k] = (j, made)
            answer = made


@dataclass
class SumRecord:
    """A real-valued sum fold built during encoding: the lemmas in `lemmas.py` rewrite these."""

    n: int
    dtype: DType
    var: z3.ArithRef
    body: z3.ExprRef
    """The body with `var` free (before the range guard)."""
    body_fn: Callable[[Idx], Term]
    """The body as a function of the index (run it with `drive`)."""
    term: z3.ExprRef
    depth: int
    """The nesting depth the fold was built at: 0 means no enclosing fold variable."""


@dataclass
class Ctx:
    """Where terms are built: the theory's values, fold bookkeeping, and fresh names."""

    values: Values
    mesh: Any = None
    """While encoding an SPMD function (`gdv.validate.spmd`): its mesh. Collectives then take
    and give stacked tensors, indexed `(rank coordinates..., local index...)`."""
    unroll: bool = False
    """Concrete evaluation: folds unroll into their left-fold definition instead of staying
    uninterpreted (used by the agreement tests, never by proofs of symbolic programs)."""
    depth: int = 0
    sums: list[SumRecord] = field(default_factory=list)
    _fresh: int = 0
    _unrolled: int = 1
    """The product of the extents of the small folds being unrolled around the current one."""

    @property
    def theory(self) -> str:
        """ "fp" or "real"."""
        return self.values.theory

    def fresh(self, hint: str) -> str:
        """A value name not used before (for decompositions)."""
        self._fresh += 1
        return f"{hint}.{self._fresh}"

    def fold(
        self, kind: str, dtype: DType, n: int, body: Callable[[Idx], Term]
    ) -> Generator[Request, z3.ExprRef, z3.ExprRef]:
        """The left fold `acc = body(0); acc = step(acc, body(k))` for k < n (IR_SPEC.md 3).

        Extent 0 is the identity and extent 1 is `body(0)` exactly; otherwise an uninterpreted
        function of the extent and `lambda k. body(k)`, with the body set to zero outside
        [0, n), so that equal bodies give equal results whatever the extent. A generator, used
        as `yield from ctx.fold(...)` inside a rule (`drive(ctx.fold(...))` elsewhere)."""
        v = self.values
        if n == 0:
            return v.fold_identity(kind, dtype)
        if n == 1:
            return (yield from _run(body(Idx.of(0))))
        if self.unroll or self._small(n):
            # Concrete evaluation, or a small fold in `fp`: the left fold itself, so the solver
            # decides it instead of answering through an uninterpreted fold (a reordered
            # 4-element sum was `unknown`, issue 14).
            weight = self._unrolled
            self._unrolled = weight * n
            try:
                acc = yield from _run(body(Idx.of(0)))
                for k in range(1, n):
                    acc = v.fold_step(kind, dtype, acc, (yield from _run(body(Idx.of(k)))))
            finally:
                self._unrolled = weight
            return acc
        # Named by nesting depth: both programs name the same fold alike, and an inner fold's
        # variable never captures an outer one. The reads the body yields are served in stack
        # order, so a fold met while serving them sees this fold's depth, as a call would.
        var = z3.Int(f"k!{self.depth}")
        self.depth += 1
        try:
            b = yield from _run(body(Idx.var(var, 0, n - 1)))
        finally:
            self.depth -= 1
        term = self.fold_term(kind, dtype, n, var, b)
        if kind == "sum" and self.theory == "real" and dtype.is_float:
            self.sums.append(SumRecord(n, dtype, var, b, body, term, self.depth))
        return term

    def small_fold(self, n: int) -> bool:
        """Would a fold of extent n be unrolled here (`_small`)? For rules that pick among
        unrolled folds of several extents (the scans)."""
        return self._small(n)

    def _small(self, n: int) -> bool:
        """Unroll this fold? Only in `fp` (the `real` theory has its `unroll` lemma), for
        extents up to `SMALL_FOLD`, while the unrolled folds around it multiply to at most
        `SMALL_FOLD_TERMS` terms."""
        return self.theory == "fp" and n <= SMALL_FOLD and self._unrolled * n <= SMALL_FOLD_TERMS

    def fold_term(
        self, kind: str, dtype: DType, n: int, var: z3.ArithRef, body: z3.ExprRef
    ) -> z3.ExprRef:
        """fold(n, lambda var. body guarded to [0, n)): the one normal form of a fold."""
        v = self.values
        guarded = z3.If(z3.And(var >= 0, var < n), body, v.zero(dtype))
        return v.fold_function(kind, dtype)(z3.IntVal(n), z3.Lambda([var], guarded))


SMALL_FOLD = 8
"""Folds of at most this extent are encoded unrolled in `fp` (`Ctx._small`)."""
SMALL_FOLD_TERMS = 64
"""The most terms nested unrolled folds may make together."""

Rule = Callable[[Ctx, Op, list[Tensor]], Tensor]
"""(context, op, operand tensors) -> result tensor."""

SEMANTICS: dict[OpSpec, Rule] = {}
"""The SMT meaning of every op, keyed by its spec object (tests check none is missing)."""


def rule(*specs: OpSpec) -> Callable[[Rule], Rule]:
    """Register the decorated function as the SMT meaning of each of `specs` (spec objects of
    `gdv.ir.ops`, never names)."""

    def deco(fn: Rule) -> Rule:
        for spec in specs:
            if not isinstance(spec, OpSpec):
                raise TypeError(f"SMT rules register against OpSpec objects, got {spec!r}")
            if spec in SEMANTICS:
                raise ValueError(f"{spec.name} already has an SMT rule")
            SEMANTICS[spec] = fn
        return fn

    return deco


def _run(term: Term) -> Generator[Request, z3.ExprRef, z3.ExprRef]:
    """`yield from _run(t)`: the term, whether `t` is one or a generator making one."""
    if isinstance(term, Generator):
        return (yield from term)
    return term


def apply(ctx: Ctx, op: Op, operands: list[Tensor]) -> Tensor:
    """The result tensor of `op` applied to `operands`."""
    from gdv.validate.semantics import load_all

    load_all()
    return SEMANTICS[REGISTRY[op.name]](ctx, op, operands)
