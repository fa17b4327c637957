"""Bound rules of the contract family: `dot` (IR_SPEC.md section 3's summation order).

Per output element: p[k] = convert(a[k], acc) * convert(b[k], acc), summed left to right over
the K contraction positions in `acc`, then converted to the result dtype. With A, B the largest
|a|, |b| and P = A B:

  |error| <= K (A eb + B ea + ea eb)             operands' errors
           + K (u_acc P + eta_acc)               products' rounding (none when exact, below)
           + sequential_sum(K, acc, P)           the accumulation, Higham's recursive sum
           + u_res |result| + eta_res            the final conversion, when it narrows

Mixed precision: bf16 or f16 operands converted to an f32 (or f64) accumulator convert exactly,
and the product of two such values is exact in the accumulator (2p <= p_acc: 16 <= 24 for
bf16, 22 <= 24 for f16); bf16 products may still underflow f32's range, so eta stays for them.
"""

from __future__ import annotations

import math

from gdv.ir.core import Op
from gdv.ir.dtypes import DType
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.types import TensorType
from gdv.validate.bounds.elementwise import _convert, finish, int_result
from gdv.validate.bounds.model import TB, Err, i_mul, i_scale, lin_scale, mag, make_tb, up
from gdv.validate.bounds.registry import Context, rule
from gdv.validate.bounds.rounding import combine, exact_conversion, one_rounding, sequential_sum


def _product_rounding(ctx: Context, operand: DType, acc: DType) -> tuple[bool, bool]:
    """(rounds, may underflow) for the product of two `operand` values computed in `acc`."""
    a, c = ctx.fmt(operand), ctx.fmt(acc)
    if a == c:
        return True, True
    exact_significand = 2 * a.significand_bits <= c.significand_bits
    # bf16 has f32's exponent range, so its products can fall below f32's subnormals.
    underflow = (a, c) == (DType.BF16, DType.F32)
    return not exact_significand, underflow


def l1_fact(x: TB, axis: int | None) -> tuple[float, Err] | None:
    """(L, Le) when every fiber of `x` along `axis` has sum |x_i| <= L and
    sum |x^_i - x_i| <= Le (fact `l1`), else None."""
    if axis is None:
        return None
    return x.facts.get("l1", {}).get(axis)


def _smallest(*errs: Err) -> Err:
    return min(errs, key=lambda e: e.total)


def contraction(
    op: Op,
    a: TB,
    b: TB,
    k: int,
    acc: DType,
    ctx: Context,
    what: str,
    axes: tuple[int | None, int | None] = (None, None),
) -> TB:
    """The bound of K-term sequential dot products of `a`'s and `b`'s elements. `axes`: the
    single contracting axis of each operand, where there is one, for its `l1` fact (then
    sum |a_k b_k| <= L_a max|b| may beat K max|a| max|b|)."""
    result = op.type.dtype
    if (a.specials | b.specials) - {"nan"}:
        return make_tb(
            op.type,
            (-math.inf, math.inf),
            Err.infinite(f"{what} with infinite operand values is not analysed"),
        )
    specials = frozenset({"nan"}) & (a.specials | b.specials)
    if k == 0:
        return make_tb(op.type, (0.0, 0.0), Err.zero())
    if not result.is_float:
        prod = i_mul(a.exact, b.exact)
        A, B = mag(*a.exact), mag(*b.exact)
        prop = Err.make({}, k * (A * b.err.total + B * a.err.total + a.err.total * b.err.total))
        return int_result(op, ctx, i_scale(prod, k), prop, specials)
    if not a.err.finite or not b.err.finite:
        return make_tb(op.type, (-math.inf, math.inf), a.err if not a.err.finite else b.err)
    la, lb = l1_fact(a, axes[0]), l1_fact(b, axes[1])
    if not exact_conversion(ctx, a.dtype, acc):
        # Operands rounded into a narrower accumulator: the convert rule gives their bounds.
        conv = Op(op.result, "convert", [op.operands[0]], {}, TensorType(acc, a.type.shape))
        a = _convert(conv, [a], ctx)
        conv = Op(op.result, "convert", [op.operands[1]], {}, TensorType(acc, b.type.shape))
        b = _convert(conv, [b], ctx)
        la = lb = None
    A, B = mag(*a.exact), mag(*b.exact)
    Ac, Bc = mag(*a.computed), mag(*b.computed)
    P, Pc = A * B, Ac * Bc
    ea, eb = a.err, b.err
    # S >= sum_k |a_k b_k| (exact), Sc >= sum_k |a^_k b^_k| (computed).
    S, Sc = k * P, k * Pc
    # sum_k |a^_k| eb_k and sum_k |b_k| ea_k, the propagated error.
    on_b = [Err.make(lin_scale(eb.lin, k * A), k * Ac * eb.total)]
    on_a = [ea.scale(k * B)]
    if la is not None:
        L, Le = la
        S, Sc = min(S, L * B), min(Sc, (L + Le.total) * Bc)
        on_b.append(Err.make(lin_scale(eb.lin, L), (L + Le.total) * eb.total))
        on_a.append(Le.scale(B))
    if lb is not None:
        L, Le = lb
        S, Sc = min(S, A * L), min(Sc, Ac * (L + Le.total))
        on_a.append(ea.scale(L))
        on_b.append(Err.make(lin_scale(Le.lin, A), Ac * Le.total))
    products = _smallest(*on_b) + _smallest(*on_a)
    rounds, underflow = _product_rounding(ctx, a.dtype, acc)
    term_sum, term_max = Sc, Pc
    if rounds:
        products = products + Err.make({ctx.u_sym(acc): S}, ctx.u(acc) * Sc)
        term_sum, term_max = term_sum * (1 + ctx.u(acc)), term_max * (1 + ctx.u(acc))
    if underflow:
        products = products + Err.make({ctx.eta_sym(acc): k}, k * ctx.eta(acc))
        term_sum, term_max = term_sum + k * ctx.eta(acc), term_max + ctx.eta(acc)
    summed = sequential_sum(
        ctx, k, acc, P, term_max, op.type.num_elements, s_exact=S, s_computed=term_sum
    )
    if not math.isfinite(summed[1]):
        return make_tb(
            op.type,
            (-math.inf, math.inf),
            Err.infinite(
                f"{what}: K u >= 1 ({k} terms in {ctx.fmt(acc)})"
                if math.isfinite(P) and math.isfinite(term_max)
                else f"{what}: its terms have no finite bound"
            ),
        )
    err = products + combine(summed)
    lo, hi = i_scale(i_mul(a.exact, b.exact), k)
    exact = (max(lo, -up(S)), min(hi, up(S)))
    m_acc = term_sum + summed[1]
    tb = finish(op, ctx, exact, err, m_acc, None, specials)
    if tb.err.finite and not exact_conversion(ctx, acc, result):
        own = one_rounding(ctx, result, mag(*exact), m_acc)
        tb = finish(op, ctx, exact, tb.err + combine(own), m_acc, None, specials)
    return tb


@rule(OPS["dot"])
def _dot(op: Op, args: list[TB], ctx: Context) -> TB:
    a, b = args
    k = math.prod(a.type.shape[d] for d in op.attrs["lhs_contract"])
    acc = op.attrs.get("acc") or op.type.dtype
    lc, rc = op.attrs["lhs_contract"], op.attrs["rhs_contract"]
    axes = (lc[0], rc[0]) if len(lc) == 1 else (None, None)
    return contraction(op, a, b, k, acc, ctx, "dot", axes)
