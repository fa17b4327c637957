"""Element values: the Z3 sort of each dtype per theory, literals, and scalar arithmetic.

Theories (DESIGN.md, "Semantics for proofs"):
- `fp`: floats are IEEE FPSort values (bf16 is FPSort(8, 8)), rounding to nearest-even;
  transcendentals are uninterpreted functions per (op, dtype).
- `real`: floats are reals (IR_SPEC.md section 5): no rounding, `convert` between floats is the
  identity, transcendentals are uninterpreted functions of a real (axioms in `lemmas.py`).
In both, integers are bit-vectors of their width (wrapping) and `i1` is a Bool; a bit-vector
is read as two's complement for i8..i64 and as unsigned for u8..u64 (comparisons, max/min,
widening and conversions to and from floats follow the dtype).

`abstract=True` replaces every float (and integer multiply and divide) primitive by an
uninterpreted function of the same signature. That over-approximates the meaning, so an `unsat`
under it is a proof for the precise meaning too; it lets Z3 prove structural equalities (layout
algebra, equal fold bodies) by congruence without bit-blasting floating-point circuits.

Commutative operands (`add`, `mul`, `max`, `min`, `cmp` eq/ne) are put in one canonical order
(`TermKeys`): `a + b` and `b + a` are one Z3 term, so `add(b, a)`, (AB)^T against B^T A^T and
products in fold bodies written either way prove by identity at any size. Each is commutative
bit for bit in its meaning (IEEE add and mul, with all NaNs one value; max and min by
IR_SPEC.md section 3, `max(-0.0, +0.0) = max(+0.0, -0.0) = +0.0`; wrapping integer add and
mul; real add and mul), so the order changes no value; in the abstract mode it reads the
uninterpreted primitive as a commutative one, still an over-approximation of the precise one.
"""

from __future__ import annotations

import hashlib
from fractions import Fraction
from typing import Any

import numpy as np
import z3

from gdv.ir.dtypes import DType
from gdv.ir.numerics import literal_to_array

THEORIES = ("fp", "real")

_RNE = z3.RNE()
_RTZ = z3.RTZ()


def fp_sort(dtype: DType) -> z3.FPSortRef:
    """The IEEE format of a float dtype (bf16: 8 exponent bits, 8 significand bits)."""
    return z3.FPSort(dtype.exponent_bits, dtype.significand_bits)


_BITS_NP = {16: np.uint16, 32: np.uint32, 64: np.uint64}


def fp_from_bits(bits: int, dtype: DType) -> z3.FPRef:
    """The FP value with IEEE bit pattern `bits` in `dtype`'s format."""
    return z3.simplify(z3.fpBVToFP(z3.BitVecVal(bits, dtype.bits), fp_sort(dtype)))


def fp_to_bits(value: z3.ExprRef, dtype: DType) -> int:
    """The IEEE bits of a concrete FP value (NaN: the dtype's canonical quiet NaN)."""
    if z3.is_fp_value(value) and value.isNaN():
        return int(np.array(np.nan, dtype=np.float64).astype(dtype.np).view(_BITS_NP[dtype.bits]))
    bv = z3.simplify(z3.fpToIEEEBV(value))
    if not z3.is_bv_value(bv):
        raise ValueError(f"not a concrete float: {value}")
    return bv.as_long()


def _children(t: z3.ExprRef) -> list[z3.ExprRef]:
    if z3.is_quantifier(t):
        return [t.body()]
    if z3.is_app(t):
        return t.children()
    return []


def _head(t: z3.ExprRef) -> str:
    """What identifies `t`'s root: a bound variable's index, a binder's kind and sorts, or an
    application's function (name, kind, parameters) and sort; a leaf's own text."""
    if z3.is_var(t):
        return f"var {z3.get_var_index(t)} {t.sort().sexpr()}"
    if z3.is_quantifier(t):
        kind = "lambda" if t.is_lambda() else ("forall" if t.is_forall() else "exists")
        sorts = " ".join(t.var_sort(i).sexpr() for i in range(t.num_vars()))
        return f"{kind} {sorts}"
    d = t.decl()
    if t.num_args() == 0:
        return f"leaf {t.sexpr()} {t.sort().sexpr()}"
    params = " ".join(p.sexpr() if isinstance(p, z3.AstRef) else str(p) for p in d.params())
    return f"app {d.name()} {d.kind()} [{params}] {t.sort().sexpr()}"


def float8_is_nan(dtype: DType, b: z3.BitVecRef) -> z3.BoolRef:
    """The bit pattern `b` is a NaN code of the float8 `dtype`."""
    fmt = dtype.float8
    if fmt.nan_code is None:
        return z3.BoolVal(False)
    if fmt.unsigned_zero:
        return b == fmt.sign_bit
    mag = z3.Extract(fmt.width - 2, 0, b)
    return z3.UGT(mag, fmt.max_code + (1 if fmt.has_inf else 0))


def float8_decode(dtype: DType, b: z3.BitVecRef, sort: z3.FPSortRef) -> z3.FPRef:
    """The exact value of the float8 bit pattern `b` in `sort` (f32 or wider; NaN codes give
    NaN, e5m2's infinity codes infinities): a normal code is rebuilt field by field in f32
    (sign, rebiased exponent, shifted mantissa), a subnormal one is m * 2^(1 - bias - mb),
    both exact, then widened exactly."""
    fmt = dtype.float8
    mb, eb = fmt.mantissa_bits, fmt.exponent_bits
    f32 = z3.FPSort(8, 24)
    w = fmt.width
    sign = z3.Extract(w - 1, w - 1, b)
    e = z3.Extract(w - 2, mb, b)
    m = z3.Extract(mb - 1, 0, b)
    exp32 = z3.ZeroExt(8 - eb, e) + z3.BitVecVal(127 - fmt.bias, 8)
    normal = z3.fpFP(sign, exp32, z3.Concat(m, z3.BitVecVal(0, 23 - mb)))
    step = z3.FPVal(float(2.0 ** (1 - fmt.bias - mb)), f32)
    tiny = z3.fpMul(_RNE, z3.fpUnsignedToFP(_RNE, m, f32), step)  # exact: m < 2^mb
    tiny = z3.If(sign == 1, z3.fpNeg(tiny), tiny)
    value = z3.If(e == 0, tiny, normal)
    if fmt.has_inf:
        inf = z3.If(sign == 1, z3.fpMinusInfinity(f32), z3.fpPlusInfinity(f32))
        value = z3.If(z3.Extract(w - 2, 0, b) == fmt.max_code + 1, inf, value)
    value = z3.If(float8_is_nan(dtype, b), z3.fpNaN(f32), value)
    return z3.fpFPToFP(_RNE, value, sort)


def float8_encode(dtype: DType, v: z3.FPRef, saturate: bool) -> z3.BitVecRef:
    """The float8 bit pattern of the f64 value `v` rounded once to nearest-even (IR_SPEC.md
    section 8). Below the least normal 2^emin the magnitude is scaled exactly to units of the
    least subnormal and rounded to an integer, which is the code itself (2^mb, the least
    normal's code, when it rounds up); above it, rounding to the format's precision in an
    11-bit exponent range is exact RNE and its fields, rebiased, are the code. saturate: a
    magnitude beyond max (inf too) is max's code; otherwise a rounded magnitude beyond max is
    inf (f8e5m2) or NaN."""
    fmt = dtype.float8
    mb, p, n = fmt.mantissa_bits, fmt.precision, fmt.width
    w = v.sort()
    a = z3.fpAbs(v)
    if p < 3:  # f4e2m1fn: Z3 has no 2-bit significand; no NaN, no infinity, so it clips
        return _encode_by_midpoints(dtype, v, a)
    narrow = z3.FPSort(11, p)
    tiny = z3.fpLT(a, z3.FPVal(float(2.0**fmt.emin), w))
    scaled = z3.fpMul(_RNE, a, z3.FPVal(float(2.0 ** (mb - fmt.emin)), w))  # exact, < 2^mb
    sub_code = z3.fpToUBV(_RTZ, z3.fpRoundToIntegral(_RNE, scaled), z3.BitVecSort(n))
    r = z3.fpFPToFP(_RNE, a, narrow)
    bits = z3.fpToIEEEBV(r)  # sign | 11 exponent bits | p - 1 mantissa bits
    exp11 = z3.Extract(10 + mb, mb, bits)
    field = z3.Extract(n - 1, 0, z3.ZeroExt(5, exp11) - z3.BitVecVal(1023 - fmt.bias, 16))
    normal_code = (field << mb) | z3.ZeroExt(n - mb, z3.Extract(mb - 1, 0, bits))
    mag = z3.If(tiny, sub_code, normal_code)
    top = float(fmt.max)
    max_code = z3.BitVecVal(fmt.max_code, n)
    if fmt.nan_code is None:  # no NaN and no infinity: beyond max is max either way
        saturate = True
    if saturate:
        mag = z3.If(z3.fpGT(a, z3.FPVal(top, w)), max_code, mag)
        over = z3.BoolVal(False)
    else:
        over = z3.And(z3.Not(tiny), z3.fpGT(r, z3.FPVal(top, narrow)))
        if fmt.has_inf:
            mag = z3.If(over, z3.BitVecVal(fmt.max_code + 1, n), mag)
            over = z3.BoolVal(False)
    negative = z3.fpIsNegative(v)
    if fmt.unsigned_zero:
        negative = z3.And(negative, mag != 0)  # no -0: a negative that rounds to 0 is +0
    code = z3.If(negative, mag | fmt.sign_bit, mag)
    nan = z3.BitVecVal(0 if fmt.nan_code is None else fmt.nan_code, n)  # no NaN: +0
    return z3.If(z3.Or(z3.fpIsNaN(v), over), nan, code)


def _encode_by_midpoints(dtype: DType, v: z3.FPRef, a: z3.FPRef) -> z3.BitVecRef:
    """The code of |v| rounded to nearest-even, as the number of midpoints between neighbouring
    codes that it rounds above (beyond a midpoint, or on it when the upper code is even), |v|
    clipped to max first; the sign as `float8_encode` gives it, NaN -> +0. For formats with
    few codes and no NaN (f4e2m1fn)."""
    fmt = dtype.float8
    n, w = fmt.width, v.sort()
    assert fmt.nan_code is None and not fmt.has_inf and not fmt.unsigned_zero, dtype
    values = [fmt.value(c) for c in range(fmt.max_code + 1)]
    mag = z3.BitVecVal(0, n)
    for k in range(fmt.max_code):
        mid = z3.FPVal(float((values[k] + values[k + 1]) / 2), w)  # exact: few bits
        up = z3.fpGEQ(a, mid) if (k + 1) % 2 == 0 else z3.fpGT(a, mid)
        mag = mag + z3.If(up, z3.BitVecVal(1, n), z3.BitVecVal(0, n))
    code = z3.If(z3.fpIsNegative(v), mag | fmt.sign_bit, mag)
    return z3.If(z3.fpIsNaN(v), z3.BitVecVal(0, n), code)


INPUT_PREFIX = "in."
"""How `encode.input_function` names the function of an input (`in.NAME`)."""


class TermKeys:
    """Per term: the inputs it reads (its support) and a structural digest of its tree
    (function names, literals, bound variable indices), never Z3's internal ids, so the
    canonical order of commutative operands is the same in every run and process (the stored
    SMT-LIB text stays stable).

    `order` puts the operand reading the smaller set of inputs first and leaves operands that
    read the same inputs as written. The support survives the rewrites a pass makes (layout,
    padding, index arithmetic), so both sides of a claim order `x * w` and `w * pad(x)` alike;
    a digest alone would order two equal but differently built operands apart, and two left
    folds of one input (`acc + x[k]`) are best left in their own order. A collision or a
    different order only leaves two equal operand pairs unidentified, never changes a value:
    any order is a correct one."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[z3.ExprRef, bytes]] = {}
        """id -> (the term, kept alive so that Z3 cannot reuse its id, its digest)."""
        self._support: dict[int, tuple[str, ...]] = {}

    def support(self, t: z3.ExprRef) -> tuple[str, ...]:
        """The names of the input functions `t` reads, sorted (under binders too)."""
        self.key(t)
        return self._support[t.get_id()]

    def key(self, t: z3.ExprRef) -> bytes:
        memo = self._memo
        hit = memo.get(t.get_id())
        if hit is not None:
            return hit[1]
        stack: list[tuple[z3.ExprRef, bool]] = [(t, False)]
        while stack:  # an explicit stack: terms can be deep (issue 14, long chains)
            u, expanded = stack.pop()
            if u.get_id() in memo:
                continue
            kids = _children(u)
            if not expanded:
                pending = [c for c in kids if c.get_id() not in memo]
                if pending:
                    stack.append((u, True))
                    stack.extend((c, False) for c in pending)
                    continue
            digest = hashlib.blake2b(_head(u).encode(), digest_size=16)
            names: set[str] = set()
            for c in kids:
                digest.update(memo[c.get_id()][1])
                names.update(self._support[c.get_id()])
            if z3.is_app(u) and u.decl().name().startswith(INPUT_PREFIX):
                names.add(u.decl().name())
            memo[u.get_id()] = (u, digest.digest())
            self._support[u.get_id()] = tuple(sorted(names))
        return memo[t.get_id()][1]

    def order(self, a: z3.ExprRef, b: z3.ExprRef) -> tuple[z3.ExprRef, z3.ExprRef]:
        """(a, b) or (b, a): the canonical order of two commutative operands."""
        if a.eq(b):
            return a, b
        sa, sb = self.support(a), self.support(b)
        return (b, a) if sb < sa else (a, b)


class Values:
    """Scalar meaning of the ops in one theory; every rule builds values through this."""

    def __init__(self, theory: str = "fp", abstract: bool = False) -> None:
        assert theory in THEORIES, theory
        self.theory = theory
        self.abstract = abstract
        self._funcs: dict[str, z3.FuncDeclRef] = {}
        self.uninterpreted: set[str] = set()
        """Names of the uninterpreted functions (other than inputs) the terms so far use."""
        self.keys = TermKeys()
        """Orders the operands of commutative ops (`commute`)."""

    # --- sorts and constants -------------------------------------------------------------

    def sort(self, dtype: DType) -> z3.SortRef:
        """The Z3 sort of `dtype`'s elements in this theory."""
        if dtype.is_bool:
            return z3.BoolSort()
        if dtype.is_int or dtype.is_storage:  # float8: its bit pattern (IR_SPEC.md section 8)
            return z3.BitVecSort(dtype.bits)
        if self.theory == "real":
            return z3.RealSort()
        return fp_sort(dtype)

    def func(self, name: str, *sorts: z3.SortRef, uninterpreted: bool = True) -> z3.FuncDeclRef:
        """One Z3 function per name, made once."""
        f = self._funcs.get(name)
        if f is None:
            f = self._funcs[name] = z3.Function(name, *sorts)
        if uninterpreted:
            self.uninterpreted.add(name)
        return f

    def scalar(self, value: Any, dtype: DType) -> z3.ExprRef:
        """A numpy scalar (already of `dtype`) as a Z3 value."""
        if dtype.is_bool:
            return z3.BoolVal(bool(value))
        if dtype.is_int or dtype.is_small_int:
            return z3.BitVecVal(int(value) % (1 << dtype.bits), dtype.bits)
        if dtype.is_float8:
            code = int(np.asarray(value, dtype=dtype.np).view(np.uint8))
            return z3.BitVecVal(code % dtype.float8.codes, dtype.bits)
        v = np.asarray(value, dtype=dtype.np)
        if self.theory == "real":
            f = float(v)
            if np.isfinite(f):
                return z3.RealVal(Fraction(f))
            # Reals have no NaN or infinity (IR_SPEC.md section 5): a program that writes one
            # gets an unknown real, the same on both sides.
            name = "real.nan" if np.isnan(f) else ("real.+inf" if f > 0 else "real.-inf")
            return self.func(name, z3.RealSort())()
        if np.isnan(v):
            return z3.fpNaN(fp_sort(dtype))
        return fp_from_bits(int(v.view(_BITS_NP[dtype.bits])), dtype)

    def literal(self, value: Any, dtype: DType) -> z3.ExprRef:
        """An IR literal rounded to nearest-even in `dtype` (IR_SPEC.md section 2)."""
        return self.scalar(literal_to_array(value, dtype)[()], dtype)

    def zero(self, dtype: DType) -> z3.ExprRef:
        """+0.0, 0 or false."""
        if dtype.is_bool:
            return z3.BoolVal(False)
        return self.scalar(np.zeros((), dtype.np), dtype)

    def one(self, dtype: DType) -> z3.ExprRef:
        """1.0, 1 or true."""
        return self.scalar(np.ones((), dtype.np), dtype)

    # --- float primitives: precise, or uninterpreted in the abstract mode ------------------

    def _fp(
        self, name: str, dtype: DType, args: list[z3.ExprRef], result: z3.SortRef, precise
    ) -> z3.ExprRef:
        if self.abstract:
            sorts = [a.sort() for a in args]
            return self.func(f"abs.{name}.{dtype}", *sorts, result, uninterpreted=False)(*args)
        return precise(*args)

    def _fbin(self, name: str, dtype: DType, a, b, precise, result=None) -> z3.ExprRef:
        return self._fp(
            name, dtype, [a, b], self.sort(dtype) if result is None else result, precise
        )

    def _fpred(self, name: str, dtype: DType, a, precise) -> z3.BoolRef:
        return self._fp(name, dtype, [a], z3.BoolSort(), precise)

    def is_nan(self, dtype: DType, a) -> z3.BoolRef:
        """a is a NaN (fp theory only)."""
        return self._fpred("isnan", dtype, a, z3.fpIsNaN)

    def _nan(self, dtype: DType) -> z3.ExprRef:
        return z3.fpNaN(fp_sort(dtype))

    def _pzero(self, dtype: DType) -> z3.ExprRef:
        return z3.FPVal(0.0, fp_sort(dtype))

    # --- arithmetic ------------------------------------------------------------------------

    def commute(self, a, b) -> tuple[z3.ExprRef, z3.ExprRef]:
        """The two operands of a commutative op in their canonical order (`TermKeys`)."""
        return self.keys.order(a, b)

    def add(self, dtype: DType, a, b) -> z3.ExprRef:
        """a + b, rounded to nearest-even (ints wrap); commutative, so in canonical order."""
        a, b = self.commute(a, b)
        if dtype.is_int or self.theory == "real":
            return a + b
        return self._fbin("add", dtype, a, b, lambda x, y: z3.fpAdd(_RNE, x, y))

    def sub(self, dtype: DType, a, b) -> z3.ExprRef:
        """a - b, rounded to nearest-even (ints wrap)."""
        if dtype.is_int or self.theory == "real":
            return a - b
        return self._fbin("sub", dtype, a, b, lambda x, y: z3.fpSub(_RNE, x, y))

    def mul(self, dtype: DType, a, b) -> z3.ExprRef:
        """a * b, rounded to nearest-even (ints wrap); commutative, so in canonical order."""
        a, b = self.commute(a, b)
        if dtype.is_int:
            if self.abstract:
                return self.func(f"abs.mul.{dtype}", *[self.sort(dtype)] * 3, uninterpreted=False)(
                    a, b
                )
            return a * b
        if self.theory == "real":
            return a * b
        return self._fbin("mul", dtype, a, b, lambda x, y: z3.fpMul(_RNE, x, y))

    def fma(self, dtype: DType, a, b, c) -> z3.ExprRef:
        """a * b + c rounded once (IEEE fusedMultiplyAdd); over the reals a * b + c, the very
        term `add(c, mul(a, b))` makes."""
        if self.theory == "real":
            return self.add(dtype, c, self.mul(dtype, a, b))
        a, b = self.commute(a, b)
        return self._fp(
            "fma", dtype, [a, b, c], self.sort(dtype), lambda x, y, z: z3.fpFMA(_RNE, x, y, z)
        )

    def div(self, dtype: DType, a, b) -> z3.ExprRef:
        """a / b, rounded to nearest-even; over the reals, a / 0 has no value (docs/IR_SPEC.md
        section 7): it is `real.div0(a)`, an uninterpreted function, so a claim is proved only
        if it holds whatever x / 0 would be, and a claim that rests on it is `unknown`.
        Integers (IR_SPEC.md section 4): bvsdiv / bvudiv, which truncate toward zero and wrap
        INT_MIN / -1 to INT_MIN, with a zero divisor giving 0 (where SMT-LIB gives -1 or 1).
        `dtype` None: a real quotient (the lemmas' terms)."""
        if dtype is not None and dtype.is_int:
            if self.abstract:  # as mul: a bit-blasted divider is costly, and congruence is enough
                sorts = [self.sort(dtype)] * 3
                return self.func(f"abs.div.{dtype}", *sorts, uninterpreted=False)(a, b)
            q = (a / b) if dtype.is_signed else z3.UDiv(a, b)  # z3py: / on bit-vectors is bvsdiv
            return z3.If(b == 0, z3.BitVecVal(0, dtype.bits), q)
        if self.theory == "real":
            # Not a made-up value such as 0, which proved div(x, 0.0) == 0.0 (issue 14).
            div0 = self.func("real.div0", z3.RealSort(), z3.RealSort())
            return z3.If(b == 0, div0(a), a / b)
        return self._fbin("div", dtype, a, b, lambda x, y: z3.fpDiv(_RNE, x, y))

    def neg(self, dtype: DType, a) -> z3.ExprRef:
        """-a (flips the sign bit)."""
        if self.theory == "real":
            return -a
        return self._fp("neg", dtype, [a], self.sort(dtype), z3.fpNeg)

    def abs(self, dtype: DType, a) -> z3.ExprRef:
        """|a| (clears the sign bit)."""
        if self.theory == "real":
            return z3.If(a < 0, -a, a)
        return self._fp("abs", dtype, [a], self.sort(dtype), z3.fpAbs)

    def sqrt(self, dtype: DType, a) -> z3.ExprRef:
        """sqrt(a), correctly rounded; uninterpreted over the reals."""
        if self.theory == "real":
            return self.func("real.sqrt", z3.RealSort(), z3.RealSort())(a)
        return self._fp("sqrt", dtype, [a], self.sort(dtype), lambda x: z3.fpSqrt(_RNE, x))

    def rem(self, dtype: DType, a, b, floor: bool = False) -> z3.ExprRef:
        """rem (floor=False: a - b trunc(a/b)) or mod (floor=True: a - b floor(a/b)), IR_SPEC.md
        section 4: a zero divisor gives a. Floats (rem only): C's fmod, from IEEE remainder r
        (a - b n, n = a/b rounded to nearest even, |r| <= |b|/2): where r is nonzero with the
        other sign than a, fmod is r + |b| with a's sign, which is exact (it is fmod itself);
        a zero r already has a's sign, and NaN and a / +-inf = a carry over."""
        if dtype.is_int:
            signed = dtype.int_min < 0
            if floor:
                r = (a % b) if signed else z3.URem(a, b)  # z3py's % on bit-vectors is bvsmod
            else:
                r = z3.SRem(a, b) if signed else z3.URem(a, b)
            return z3.If(b == 0, a, r)
        assert not floor, "mod takes integers only"
        if self.theory == "real":
            return self.func("real.rem", z3.RealSort(), z3.RealSort(), z3.RealSort())(a, b)

        def fmod(x, y):
            r = z3.fpRem(x, y)
            same = z3.fpIsNegative(r) == z3.fpIsNegative(x)
            step = z3.If(z3.fpIsNegative(x), -z3.fpAbs(y), z3.fpAbs(y))
            keep = z3.Or(z3.fpIsZero(r), z3.fpIsNaN(r), same)
            return z3.If(keep, r, z3.fpAdd(_RNE, r, step))

        return self._fbin("rem", dtype, a, b, fmod)

    def floor(self, dtype: DType, a) -> z3.ExprRef:
        """The largest integral value <= a (exact)."""
        if self.theory == "real":
            return z3.ToReal(z3.ToInt(a))
        return self._fp(
            "floor", dtype, [a], self.sort(dtype), lambda x: z3.fpRoundToIntegral(z3.RTN(), x)
        )

    def max(self, dtype: DType, a, b) -> z3.ExprRef:
        """NaN if either is NaN; max(-0.0, +0.0) = +0.0 (IR_SPEC.md section 3): symmetric bit
        for bit, so the operands go in canonical order."""
        a, b = self.commute(a, b)
        if dtype.is_unsigned:
            return z3.If(z3.UGE(a, b), a, b)
        if dtype.is_int or self.theory == "real":
            return z3.If(a >= b, a, b)
        gt = self._fbin("gt", dtype, a, b, z3.fpGT, z3.BoolSort())
        lt = self._fbin("lt", dtype, a, b, z3.fpLT, z3.BoolSort())
        # Equal and not NaN: the same value, or two zeros, where +0.0 wins.
        neg_a = self._fpred("isneg", dtype, a, z3.fpIsNegative)
        return z3.If(
            z3.Or(self.is_nan(dtype, a), self.is_nan(dtype, b)),
            self._nan(dtype),
            z3.If(gt, a, z3.If(lt, b, z3.If(neg_a, b, a))),
        )

    def min(self, dtype: DType, a, b) -> z3.ExprRef:
        """NaN if either is NaN; min(-0.0, +0.0) = -0.0: symmetric, canonical order."""
        a, b = self.commute(a, b)
        if dtype.is_unsigned:
            return z3.If(z3.ULE(a, b), a, b)
        if dtype.is_int or self.theory == "real":
            return z3.If(a <= b, a, b)
        gt = self._fbin("gt", dtype, a, b, z3.fpGT, z3.BoolSort())
        lt = self._fbin("lt", dtype, a, b, z3.fpLT, z3.BoolSort())
        neg_a = self._fpred("isneg", dtype, a, z3.fpIsNegative)
        return z3.If(
            z3.Or(self.is_nan(dtype, a), self.is_nan(dtype, b)),
            self._nan(dtype),
            z3.If(lt, a, z3.If(gt, b, z3.If(neg_a, a, b))),
        )

    def relu(self, dtype: DType, a) -> z3.ExprRef:
        """max(x, +0.0): relu(-0.0) = +0.0, relu(NaN) = NaN."""
        if self.theory == "real":
            return z3.If(a > 0, a, z3.RealVal(0))
        gt = self._fbin("gt", dtype, a, self._pzero(dtype), z3.fpGT, z3.BoolSort())
        return z3.If(self.is_nan(dtype, a), self._nan(dtype), z3.If(gt, a, self._pzero(dtype)))

    def cmp(self, direction: str, dtype: DType, a, b) -> z3.BoolRef:
        """IEEE comparison for floats (NaN compares false except `ne`); false < true on i1.
        `eq` and `ne` are symmetric: their operands go in canonical order."""
        if direction in ("eq", "ne"):
            a, b = self.commute(a, b)
        if dtype.is_bool:
            return {
                "lt": lambda: z3.And(z3.Not(a), b),
                "le": lambda: z3.Or(z3.Not(a), b),
                "gt": lambda: z3.And(a, z3.Not(b)),
                "ge": lambda: z3.Or(a, z3.Not(b)),
                "eq": lambda: a == b,
                "ne": lambda: a != b,
            }[direction]()
        if dtype.is_unsigned:
            return {
                "lt": lambda: z3.ULT(a, b),
                "le": lambda: z3.ULE(a, b),
                "gt": lambda: z3.UGT(a, b),
                "ge": lambda: z3.UGE(a, b),
                "eq": lambda: a == b,
                "ne": lambda: a != b,
            }[direction]()
        if dtype.is_int or self.theory == "real":
            return {
                "lt": lambda: a < b,
                "le": lambda: a <= b,
                "gt": lambda: a > b,
                "ge": lambda: a >= b,
                "eq": lambda: a == b,
                "ne": lambda: a != b,
            }[direction]()
        precise = {
            "lt": z3.fpLT,
            "le": z3.fpLEQ,
            "gt": z3.fpGT,
            "ge": z3.fpGEQ,
            "eq": z3.fpEQ,
            "ne": lambda x, y: z3.Not(z3.fpEQ(x, y)),
        }[direction]
        return self._fbin(direction, dtype, a, b, precise, z3.BoolSort())

    def select(self, c, a, b) -> z3.ExprRef:
        """c ? a : b."""
        return z3.If(c, a, b)

    # --- conversions ---------------------------------------------------------------------

    def convert(self, src: DType, dst: DType, x, saturate: bool = True) -> z3.ExprRef:
        """IR_SPEC.md section 4, `convert`, and section 5 for the real theory; float8 (a bit
        pattern) by section 8."""
        if src == dst:
            return x
        if src.is_small_int:  # its value, exactly, in a byte of its signedness
            signed = src.int_min < 0
            wide = DType.I8 if signed else DType.U8
            extend = z3.SignExt if signed else z3.ZeroExt
            return self.convert(wide, dst, extend(8 - src.bits, x), saturate)
        if dst.is_small_int:
            if src.is_float8:
                return self.convert(DType.F64, dst, self.convert(src, DType.F64, x))
            if src.is_bool:
                return z3.If(x, z3.BitVecVal(1, dst.bits), z3.BitVecVal(0, dst.bits))
            if src.is_int:  # the value modulo 2^n: the low n bits
                return z3.Extract(dst.bits - 1, 0, x)
            if self.theory == "real":
                return self._real_to_int(x, dst)
            return self._fp_to_int(src, dst, x)
        if src.is_float8 or dst.is_float8:
            return self._convert_float8(src, dst, x, saturate)
        if dst.is_bool:
            if src.is_float and self.theory == "fp":
                return z3.Not(self._fpred("iszero", src, x, z3.fpIsZero))  # NaN != 0
            return x != self.zero(src)
        if src.is_bool:
            return z3.If(x, self.one(dst), self.zero(dst))
        if src.is_int and dst.is_int:
            # The value modulo 2^n: extend by the source's reading, keep the low bits.
            if dst.bits > src.bits:
                extend = z3.SignExt if src.is_signed else z3.ZeroExt
                return extend(dst.bits - src.bits, x)
            if dst.bits == src.bits:
                return x
            return z3.Extract(dst.bits - 1, 0, x)
        if self.theory == "real":
            if dst.is_float:
                return x if src.is_float else z3.ToReal(z3.BV2Int(x, is_signed=src.is_signed))
            return self._real_to_int(x, dst)
        if src.is_float and dst.is_float:
            return self._fp(
                f"cvt.{dst}", src, [x], fp_sort(dst), lambda v: z3.fpFPToFP(_RNE, v, fp_sort(dst))
            )
        if src.is_int:
            to_fp = z3.fpSignedToFP if src.is_signed else z3.fpUnsignedToFP
            return self._fp(
                f"from.{src}",
                dst,
                [x],
                fp_sort(dst),
                lambda v: to_fp(_RNE, v, fp_sort(dst)),
            )
        return self._fp_to_int(src, dst, x)

    def same(self, dtype: DType, a, b) -> z3.BoolRef:
        """a and b are one value (IR_SPEC.md section 5): SMT `=`, and for float8 bit patterns
        also any two NaN codes."""
        if dtype.is_float8 and self.theory == "fp" and not self.abstract:
            return z3.Or(a == b, z3.And(float8_is_nan(dtype, a), float8_is_nan(dtype, b)))
        return a == b

    def _convert_float8(self, src: DType, dst: DType, x, saturate: bool) -> z3.ExprRef:
        """float8 conversions: decode the bits to their exact value, encode a value by one
        rounding with `saturate`'s overflow rule. Over the reals both are uninterpreted (a
        claim resting on them is not proved there)."""
        if self.theory == "real":
            if src.is_float8:
                x = self.func(f"real.from.{src}", z3.BitVecSort(src.bits), z3.RealSort())(x)
                src = DType.F64
            elif src.is_bool:
                x = z3.If(x, z3.RealVal(1), z3.RealVal(0))
                src = DType.F64
            elif src.is_int:
                x = z3.ToReal(z3.BV2Int(x, is_signed=src.is_signed))
                src = DType.F64
            if dst.is_float8:
                tag = "sat" if saturate else "nosat"
                bv = z3.BitVecSort(dst.bits)
                return self.func(f"real.to.{dst}.{tag}", z3.RealSort(), bv)(x)
            return self.convert(src, dst, x)
        wide = fp_sort(DType.F64)
        if src.is_float8:
            v = self._fp(f"dec.{src}", src, [x], wide, lambda b: float8_decode(src, b, wide))
            return self.convert(DType.F64, dst, v, saturate)
        # dst is float8: the source's exact value in f64 (integers beyond 2^53 round, but
        # every one of them is beyond every float8's range, so no second rounding is seen).
        v = x if src is DType.F64 else self.convert(src, DType.F64, x)
        tag = "sat" if saturate else "nosat"
        return self._fp(
            f"enc.{dst}.{tag}",
            DType.F64,
            [v],
            z3.BitVecSort(dst.bits),
            lambda w: float8_encode(dst, w, saturate),
        )

    def _fp_to_int(self, src: DType, dst: DType, x) -> z3.ExprRef:
        """Truncate toward zero, saturate to [int_min, int_max] (unsigned: [0, 2^n - 1], so
        -0.5 and -3.0 give 0), NaN -> 0."""
        sort = fp_sort(src)
        lo, hi = dst.int_min, dst.int_max
        # t >= hi exactly iff t >= (hi rounded up into the format): t is in the format.
        hi_up = z3.simplify(z3.fpToFP(z3.RTP(), z3.RealVal(hi), sort))
        lo_down = z3.simplify(z3.fpToFP(z3.RTN(), z3.RealVal(lo), sort))
        if self.abstract:
            return self.func(
                f"abs.toint.{src}.{dst}", sort, z3.BitVecSort(dst.bits), uninterpreted=False
            )(x)
        t = z3.fpRoundToIntegral(_RTZ, x)
        bv = z3.BitVecSort(dst.bits)
        # Strictly between the bounds, t is in the target's range: the exact conversion.
        to_bv = z3.fpToSBV if dst.int_min < 0 else z3.fpToUBV
        return z3.If(
            z3.fpIsNaN(x),
            z3.BitVecVal(0, dst.bits),
            z3.If(
                z3.fpGEQ(t, hi_up),
                z3.BitVecVal(hi, dst.bits),
                z3.If(z3.fpLEQ(t, lo_down), z3.BitVecVal(lo, dst.bits), to_bv(_RTZ, x, bv)),
            ),
        )

    def _real_to_int(self, x, dst: DType) -> z3.ExprRef:
        t = z3.If(x >= 0, z3.ToInt(x), -z3.ToInt(-x))
        lo, hi = dst.int_min, dst.int_max
        return z3.If(
            t >= hi,
            z3.BitVecVal(hi, dst.bits),
            z3.If(t <= lo, z3.BitVecVal(lo, dst.bits), z3.Int2BV(t, dst.bits)),
        )

    def from_index(self, dtype: DType, i: z3.ArithRef) -> z3.ExprRef:
        """An index (a non-negative Int) converted from i64 as `convert` does (`iota`)."""
        if dtype.is_int:
            return z3.Int2BV(i, dtype.bits)
        if self.theory == "real":
            return z3.ToReal(i)
        return self.convert(DType.I64, dtype, z3.Int2BV(i, 64))

    # --- transcendentals -----------------------------------------------------------------

    def transcendental(self, name: str, dtype: DType, *args: z3.ExprRef) -> z3.ExprRef:
        """Uninterpreted: deterministic, otherwise unknown (IR_SPEC.md section 3)."""
        if self.theory == "real":
            if name == "sigmoid":  # the exact function, 1 / (1 + exp(-x))
                e = self.transcendental("exp", dtype, -args[0])
                return self.div(dtype, z3.RealVal(1), 1 + e)
            if name == "rsqrt":
                return self.div(dtype, z3.RealVal(1), self.sqrt(dtype, args[0]))
            r = z3.RealSort()
            return self.func(f"real.{name}", *[r] * (len(args) + 1))(*args)
        s = fp_sort(dtype)
        return self.func(f"{name}.{dtype}", *[s] * (len(args) + 1))(*args)

    # --- folds -----------------------------------------------------------------------------

    def fold_identity(self, kind: str, dtype: DType) -> z3.ExprRef:
        """The value of an empty reduction (IR_SPEC.md section 3)."""
        if kind == "sum":
            return self.zero(dtype)
        if kind == "prod":  # cumprod's empty prefix
            return self.one(dtype)
        if dtype.is_int:
            return z3.BitVecVal(dtype.int_min if kind == "max" else dtype.int_max, dtype.bits)
        inf = np.array(-np.inf if kind == "max" else np.inf, dtype=dtype.np)
        return self.scalar(inf, dtype)

    def fold_step(self, kind: str, dtype: DType, acc, x) -> z3.ExprRef:
        """One step of the left fold: acc = op(acc, x)."""
        step = {"sum": self.add, "prod": self.mul, "max": self.max, "min": self.min}[kind]
        return step(dtype, acc, x)

    def fold_function(self, kind: str, dtype: DType) -> z3.FuncDeclRef:
        """fold(extent, array) -> value: uninterpreted, one per (kind, sort)."""
        s = self.sort(dtype)
        tag = "real" if (self.theory == "real" and dtype.is_float) else str(dtype)
        return self.func(f"fold.{kind}.{tag}", z3.IntSort(), z3.ArraySort(z3.IntSort(), s), s)
