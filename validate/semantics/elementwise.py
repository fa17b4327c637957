"""SMT meaning of the elementwise ops, conversions and generators (`constant`, `iota`).

Elementwise ops apply the theory's scalar meaning (`values.py`) at the same index of every
operand; `constant` is its literal (a splat, or a Z3 array built once for nested lists).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import z3

from gdv.ir.core import Op
from gdv.ir.dtypes import DType
from gdv.ir.numerics import literal_to_array
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops.elementwise import TRANSCENDENTAL, is_signed, iter_leaves
from gdv.validate.semantics.index import linearize
from gdv.validate.semantics.registry import Ctx, Index, Tensor, Term, rule

_UNARY = {
    "neg": lambda v, d, a: v.neg(d, a),
    "abs": lambda v, d, a: v.abs(d, a),
    "sqrt": lambda v, d, a: v.sqrt(d, a),
    "floor": lambda v, d, a: v.floor(d, a),
    "relu": lambda v, d, a: v.relu(d, a),
}
_BINARY = {
    "add": lambda v, d, a, b: v.add(d, a, b),
    "sub": lambda v, d, a, b: v.sub(d, a, b),
    "mul": lambda v, d, a, b: v.mul(d, a, b),
    "div": lambda v, d, a, b: v.div(d, a, b),
    "max": lambda v, d, a, b: v.max(d, a, b),
    "min": lambda v, d, a, b: v.min(d, a, b),
}


@rule(*(OPS[n] for n in _UNARY))
def unary(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """Pointwise `f(x)`."""
    (x,), f, v = xs, _UNARY[op.name], ctx.values
    return Tensor(op.type, lambda i: f(v, x.dtype, (yield x.read(i))))


@rule(*(OPS[n] for n in _BINARY))
def binary(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """Pointwise `f(a, b)`."""
    (a, b), f, v = xs, _BINARY[op.name], ctx.values
    return Tensor(op.type, lambda i: f(v, a.dtype, (yield a.read(i)), (yield b.read(i))))


def _bits(bool_fn, bv_fn):
    """A bitwise op on i1 (Booleans) or on bit-vectors (integers of any width)."""
    return lambda d, *xs: bool_fn(*xs) if d.is_bool else bv_fn(*xs)


def _shift_right(d: DType, a, b):
    # SMT-LIB's shifts read the amount unsigned: a negative amount of a signed dtype is then at
    # least 2^(n-1) >= n, out of range like any amount >= n, where bvashr fills with the sign
    # bit and bvlshr and bvshl with zeros: IR_SPEC.md's rule exactly.
    return a >> b if is_signed(d) else z3.LShR(a, b)


_BITWISE = {
    "bitwise_and": _bits(z3.And, lambda a, b: a & b),
    "bitwise_or": _bits(z3.Or, lambda a, b: a | b),
    "bitwise_xor": _bits(z3.Xor, lambda a, b: a ^ b),
    "bitwise_not": _bits(z3.Not, lambda a: ~a),
    "shift_left": lambda d, a, b: a << b,
    "shift_right": _shift_right,
}


@rule(OPS["rem"], OPS["mod"])
def remainder(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """Pointwise rem or mod (`Values.rem`)."""
    (a, b), v, floor = xs, ctx.values, op.name == "mod"
    return Tensor(
        op.type, lambda i: v.rem(a.dtype, (yield a.read(i)), (yield b.read(i)), floor=floor)
    )


@rule(*(OPS[n] for n in _BITWISE))
def bitwise(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """Pointwise bitwise op or shift, on the operands' bits."""
    f, d = _BITWISE[op.name], xs[0].dtype

    def at(i: Index) -> Term:
        args = []
        for x in xs:
            args.append((yield x.read(i)))
        return f(d, *args)

    return Tensor(op.type, at)


@rule(*TRANSCENDENTAL.specs())
def transcendental(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """Uninterpreted per (op, dtype) in `fp`; per op, with named axioms, in `real`."""
    v, d = ctx.values, xs[0].dtype

    def at(i: Index) -> Term:
        args = []
        for x in xs:
            args.append((yield x.read(i)))
        return v.transcendental(op.name, d, *args)

    return Tensor(op.type, at)


@rule(OPS["cmp"])
def cmp(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """IEEE comparison, an i1 per element."""
    (a, b), d = xs, op.attrs["dir"]
    return Tensor(
        op.type, lambda i: ctx.values.cmp(d, a.dtype, (yield a.read(i)), (yield b.read(i)))
    )


@rule(OPS["select"])
def select(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """`c ? a : b` elementwise."""
    c, a, b = xs
    return Tensor(op.type, lambda i: z3.If((yield c.read(i)), (yield a.read(i)), (yield b.read(i))))


@rule(OPS["convert"])
def convert(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """To the written dtype (values.Values.convert)."""
    (x,) = xs
    sat = op.attrs.get("saturate", True)
    return Tensor(
        op.type, lambda i: ctx.values.convert(x.dtype, op.type.dtype, (yield x.read(i)), sat)
    )


@rule(OPS["iota"])
def iota(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """The index along `axis`, converted from i64."""
    axis = op.attrs["axis"]
    return Tensor(op.type, lambda i: ctx.values.from_index(op.type.dtype, i[axis].to_z3()))


@rule(OPS["constant"])
def constant(ctx: Ctx, op: Op, xs: list[Tensor]) -> Tensor:
    """A splat is its value; a nested list is a Z3 array over the row-major position, built once
    with the most common value as its default (mostly-zero constants stay small)."""
    v, t = ctx.values, op.type
    value = op.attrs["value"]
    if not isinstance(value, list):
        c = v.literal(value, t.dtype)
        return Tensor(t, lambda i: c)
    leaves = [literal_to_array(x, t.dtype)[()] for x in iter_leaves(value)]
    terms = [v.scalar(x, t.dtype) for x in leaves]
    if not terms:
        return Tensor(t, lambda i: v.zero(t.dtype))
    keys = [_bits_key(x) for x in leaves]
    common = Counter(keys).most_common(1)[0][0]
    default = terms[keys.index(common)]
    arr = z3.K(z3.IntSort(), default)
    for pos, (k, term) in enumerate(zip(keys, terms, strict=True)):
        if k != common:
            arr = z3.Store(arr, pos, term)

    def at(i: Index) -> z3.ExprRef:
        flat = linearize(i, t.shape)
        if flat.is_const:
            return terms[flat.const]
        return z3.Select(arr, flat.to_z3())

    return Tensor(t, at)


def _bits_key(x: np.generic) -> bytes:
    """Equal for bit-identical values (and for any two NaNs: SMT has one NaN)."""
    a = np.asarray(x)
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        if np.isnan(a.astype(np.float64)):
            return b"nan"
    return a.tobytes()
