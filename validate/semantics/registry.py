"""The table of SMT rules, keyed by op spec, and the encoding context they build terms in.

A tensor is its shape, its dtype and a function from a tuple of symbolic indices (`Idx`) to a
value term (DESIGN.md, "Semantics for proofs"): never one term per element. A rule takes the
op and its operand tensors and returns the result tensor; `Ctx.fold` gives reductions their
meaning as an uninterpreted fold over `(extent, lambda k. body(k))`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import z3

from gdv.ir.core import Op
from gdv.ir.dtypes import DType
from gdv.ir.ops import REGISTRY, OpSpec
from gdv.ir.types import TensorType
from gdv.validate.semantics.index import Idx
from gdv.validate.semantics.values import Values

Index = tuple[Idx, ...]


class Tensor:
    """A tensor value: `type` and `at(index) -> term`, memoised per index."""

    def __init__(self, type_: TensorType, at: Callable[[Index], z3.ExprRef]) -> None:
        self.type = type_
        self._at = at
        self._memo: dict[tuple, z3.ExprRef] = {}

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    def at(self, idx: Index) -> z3.ExprRef:
        """The element at `idx` (one index term per dim)."""
        # Shared subterms (`d` in `d * d`) would otherwise be rebuilt once per use, which grows
        # exponentially with the depth of a program.
        key = tuple(i.key for i in idx)
        t = self._memo.get(key)
        if t is None:
            t = self._memo[key] = self._at(idx)
        return t


@dataclass
class SumRecord:
    """A real-valued sum fold built during encoding: the lemmas in `lemmas.py` rewrite these."""

    n: int
    dtype: DType
    var: z3.ArithRef
    body: z3.ExprRef
    """The body with `var` free (before the range guard)."""
    body_fn: Callable[[Idx], z3.ExprRef]
    term: z3.ExprRef
    depth: int
    """The nesting depth the fold was built at: 0 means no enclosing fold variable."""


@dataclass
class Ctx:
    """Where terms are built: the theory's values, fold bookkeeping, and fresh names."""

    values: Values
    unroll: bool = False
    """Concrete evaluation: folds unroll into their left-fold definition instead of staying
    uninterpreted (used by the agreement tests, never by proofs of symbolic programs)."""
    depth: int = 0
    sums: list[SumRecord] = field(default_factory=list)
    _fresh: int = 0

    @property
    def theory(self) -> str:
        """ "fp" or "real"."""
        return self.values.theory

    def fresh(self, hint: str) -> str:
        """A value name not used before (for decompositions)."""
        self._fresh += 1
        return f"{hint}.{self._fresh}"

    def fold(
        self, kind: str, dtype: DType, n: int, body: Callable[[Idx], z3.ExprRef]
    ) -> z3.ExprRef:
        """The left fold `acc = body(0); acc = step(acc, body(k))` for k < n (IR_SPEC.md 3).

        Extent 0 is the identity and extent 1 is `body(0)` exactly; otherwise an uninterpreted
        function of the extent and `lambda k. body(k)`, with the body set to zero outside
        [0, n), so that equal bodies give equal results whatever the extent."""
        v = self.values
        if n == 0:
            return v.fold_identity(kind, dtype)
        if n == 1:
            return body(Idx.of(0))
        if self.unroll:
            acc = body(Idx.of(0))
            for k in range(1, n):
                acc = v.fold_step(kind, dtype, acc, body(Idx.of(k)))
            return acc
        # Named by nesting depth: both programs name the same fold alike, and an inner fold's
        # variable never captures an outer one.
        var = z3.Int(f"k!{self.depth}")
        self.depth += 1
        try:
            b = body(Idx.var(var, 0, n - 1))
        finally:
            self.depth -= 1
        term = self.fold_term(kind, dtype, n, var, b)
        if kind == "sum" and self.theory == "real" and dtype.is_float:
            self.sums.append(SumRecord(n, dtype, var, b, body, term, self.depth))
        return term

    def fold_term(
        self, kind: str, dtype: DType, n: int, var: z3.ArithRef, body: z3.ExprRef
    ) -> z3.ExprRef:
        """fold(n, lambda var. body guarded to [0, n)): the one normal form of a fold."""
        v = self.values
        guarded = z3.If(z3.And(var >= 0, var < n), body, v.zero(dtype))
        return v.fold_function(kind, dtype)(z3.IntVal(n), z3.Lambda([var], guarded))


Rule = Callable[[Ctx, Op, list[Tensor]], Tensor]
"""(context, op, operand tensors) -> result tensor."""

SEMANTICS: dict[OpSpec, Rule] = {}
"""The SMT meaning of every op, keyed by its spec object (tests check none is missing)."""


def rule(*names: str) -> Callable[[Rule], Rule]:
    """Register a rule for the ops `names` (looked up in the op registry)."""

    def deco(fn: Rule) -> Rule:
        for name in names:
            spec = REGISTRY[name]
            assert spec not in SEMANTICS, name
            SEMANTICS[spec] = fn
        return fn

    return deco


def apply(ctx: Ctx, op: Op, operands: list[Tensor]) -> Tensor:
    """The result tensor of `op` applied to `operands`."""
    from gdv.validate.semantics import load_all

    load_all()
    return SEMANTICS[REGISTRY[op.name]](ctx, op, operands)
