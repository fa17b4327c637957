"""Symbolic tensor indices: affine forms over bounded integer atoms.

Index maps compose as Python closures (DESIGN.md, "index-symbolic"), so `transpose` of
`transpose` gives back `X(i, j)` syntactically. Reshapes go through row-major div/mod by
constants; an `Idx` knows the range of every atom, so `(i*6 + j) // 6` with `0 <= j < 6`
simplifies to `i` before Z3 sees it. Without that, two reshapes that cancel leave Z3 to prove
two lambda bodies equal through bit-blasted float arithmetic, which it often cannot do in time.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import z3


@dataclass(frozen=True, eq=False)
class Atom:
    """An integer term that an affine form treats as a variable, with its range [lo, hi]."""

    term: z3.ArithRef
    lo: int
    hi: int
    op: str = ""
    """"div" or "mod" when the atom is `base // n` or `base % n` (so that
    `(e % n) + (e // n) * n` folds back to `e`)."""
    base: Idx | None = None
    n: int = 0

    @property
    def key(self) -> tuple[int, int, int]:
        """Identity of the atom *with its range*.

        Bug class "range-blind memo" (issue 14): one Z3 term can stand for atoms of different
        ranges (every fold at one nesting depth binds `k!<depth>`, whatever its extent), and the
        static simplifications (`in_range`, `floordiv`, concat's choice of operand) depend on the
        range. A key of the term alone let a fold of extent 4 answer one of extent 8."""
        return (self.term.get_id(), self.lo, self.hi)

    @functools.cached_property
    def order(self) -> tuple[int, int, int, str]:
        """Where the atom goes in a sum: by a structural key (Z3's AST hash, which is the same
        in every process, then the range and the term's text), never by term id. Ids depend on
        what the process built before, so a sum ordered by them printed differently in a
        compile and in the checker (issue 15)."""
        return (self.term.hash(), self.lo, self.hi, self.term.sexpr())


@dataclass(frozen=True)
class Idx:
    """`const + sum(coef * atom)`; terms are sorted by atom so equal forms give equal Z3 terms."""

    terms: tuple[tuple[Atom, int], ...]
    const: int

    # --- construction --------------------------------------------------------------------

    @staticmethod
    def of(value: int) -> Idx:
        """A constant index."""
        return Idx((), int(value))

    @staticmethod
    def var(term: z3.ArithRef, lo: int, hi: int) -> Idx:
        """An integer term known to lie in [lo, hi]."""
        if lo == hi:
            return Idx.of(lo)
        return Idx(((Atom(term, lo, hi), 1),), 0)

    @property
    def key(self) -> tuple:
        return (tuple((a.key, c) for a, c in self.terms), self.const)

    @property
    def is_const(self) -> bool:
        """True when the index is a known integer (`const`)."""
        return not self.terms

    # --- ranges --------------------------------------------------------------------------

    @property
    def lo(self) -> int:
        """The least value the index can take."""
        return self.const + sum(c * (a.lo if c > 0 else a.hi) for a, c in self.terms)

    @property
    def hi(self) -> int:
        """The greatest value the index can take."""
        return self.const + sum(c * (a.hi if c > 0 else a.lo) for a, c in self.terms)

    # --- arithmetic ----------------------------------------------------------------------

    def __add__(self, other: Idx | int) -> Idx:
        if isinstance(other, int):
            return Idx(self.terms, self.const + other)
        coefs: dict[int, list] = {a.key: [a, c] for a, c in self.terms}
        for a, c in other.terms:
            if a.key in coefs:
                coefs[a.key][1] += c
            else:
                coefs[a.key] = [a, c]
        out = Idx(_sorted(coefs.values()), self.const + other.const)
        return out._recombine()

    def _recombine(self) -> Idx:
        """Fold `c * (e % n) + c * n * (e // n)` back into `c * e`."""
        by_key = {a.key: (a, c) for a, c in self.terms}
        for a, c in self.terms:
            if a.op != "mod" or a.key not in by_key:
                continue
            for b, d in self.terms:
                if b.op == "div" and b.n == a.n and b.key in by_key and d == c * a.n:
                    assert a.base is not None and b.base is not None
                    if a.base.key == b.base.key:
                        del by_key[a.key], by_key[b.key]
                        rest = Idx(_sorted(by_key.values()), self.const)
                        return rest + a.base * c
        return self

    def __mul__(self, k: int) -> Idx:
        if k == 0:
            return Idx.of(0)
        return Idx(tuple((a, c * k) for a, c in self.terms), self.const * k)

    def __sub__(self, other: Idx | int) -> Idx:
        if isinstance(other, int):
            return self + (-other)
        return self + other * -1

    def _split(self, n: int) -> tuple[Idx, Idx]:
        """self = n * q + r, q taking the terms whose coefficients n divides."""
        q_terms = tuple((a, c // n) for a, c in self.terms if c % n == 0)
        r_terms = tuple((a, c) for a, c in self.terms if c % n != 0)
        return Idx(q_terms, self.const // n), Idx(r_terms, self.const % n)

    def floordiv(self, n: int) -> Idx:
        """floor(self / n) for a constant n >= 1."""
        assert n >= 1
        if n == 1:
            return self
        q, r = self._split(n)
        if r.lo // n == r.hi // n:  # the remainder part never crosses a multiple of n
            return q + r.lo // n
        atom = Atom(r.to_z3() / n, r.lo // n, r.hi // n, "div", r, n)
        return q + Idx(((atom, 1),), 0)

    def mod(self, n: int) -> Idx:
        """self mod n (in [0, n)) for a constant n >= 1."""
        assert n >= 1
        if n == 1:
            return Idx.of(0)
        _, r = self._split(n)
        if r.lo // n == r.hi // n:
            return r - (r.lo // n) * n
        return Idx(((Atom(r.to_z3() % n, 0, n - 1, "mod", r, n), 1),), 0)

    def clamp(self, lo: int, hi: int) -> Idx:
        """min(max(self, lo), hi)."""
        if self.lo >= lo and self.hi <= hi:
            return self
        if self.hi <= lo:
            return Idx.of(lo)
        if self.lo >= hi:
            return Idx.of(hi)
        t = self.to_z3()
        clamped = z3.If(t < lo, z3.IntVal(lo), z3.If(t > hi, z3.IntVal(hi), t))
        return Idx.var(clamped, max(lo, self.lo), min(hi, self.hi))

    # --- conditions and terms ------------------------------------------------------------

    def in_range(self, lo: int, hi: int) -> z3.BoolRef:
        """lo <= self < hi, decided statically when the ranges allow."""
        if self.lo >= lo and self.hi < hi:
            return z3.BoolVal(True)
        if self.hi < lo or self.lo >= hi:
            return z3.BoolVal(False)
        # The constant moves to the bounds: `e - p` in [0, h) and `e` in [p, p + h) (a conv
        # reading its input unpadded, and a kernel reading the padded copy) give the same
        # term, so their equality is syntactic and the solver need not prove the two ranges
        # equal under every index.
        t = Idx(self.terms, 0).to_z3()
        lo, hi = lo - self.const, hi - self.const
        parts = []
        if self.lo < lo + self.const:
            parts.append(t >= lo)
        if self.hi >= hi + self.const:
            parts.append(t < hi)
        return parts[0] if len(parts) == 1 else z3.And(*parts)

    def to_z3(self) -> z3.ArithRef:
        """The index as a Z3 integer term (equal forms give equal terms)."""
        out: z3.ArithRef | None = None
        for a, c in self.terms:
            t = a.term if c == 1 else a.term * c
            out = t if out is None else out + t
        if out is None:
            return z3.IntVal(self.const)
        return out + self.const if self.const else out


def _sorted(terms) -> tuple[tuple[Atom, int], ...]:
    return tuple(sorted(((a, c) for a, c in terms if c), key=lambda t: t[0].order))


def linearize(idx: tuple[Idx, ...], shape: tuple[int, ...]) -> Idx:
    """The row-major linear position of `idx` in `shape`."""
    flat = Idx.of(0)
    for i, n in zip(idx, shape, strict=True):
        flat = flat * n + i
    return flat


def delinearize(flat: Idx, shape: tuple[int, ...]) -> tuple[Idx, ...]:
    """The row-major multi-index of linear position `flat` in `shape`."""
    out = []
    stride = 1
    for n in reversed(shape):
        d = flat.floordiv(stride)
        out.append(d.mod(n) if stride * n <= flat.hi or flat.lo < 0 else d)
        stride *= n
    return tuple(reversed(out))
