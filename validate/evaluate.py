"""Evaluate the SMT meaning of a function on concrete inputs.

Inputs become concrete tensors, folds unroll into their left-fold definition, and each output
element's term is simplified to a Z3 value. This is how the agreement tests compare the proof
semantics with the reference backend bit for bit; it costs one term per element, so it is for
small tensors only.
"""

from __future__ import annotations

import numpy as np
import z3

from gdv.ir.core import Function
from gdv.validate.counterexample import value_to_numpy
from gdv.validate.encode import concrete_tensor, encode
from gdv.validate.semantics.index import Idx
from gdv.validate.semantics.registry import Ctx
from gdv.validate.semantics.values import Values


class NotConcrete(ValueError):
    """An output term did not simplify to a value (it involves an uninterpreted function)."""


def evaluate(fn: Function, inputs: dict[str, np.ndarray], theory: str = "fp") -> list[np.ndarray]:
    """Every output of `fn` on `inputs` (keyed by parameter name), per the SMT meaning."""
    values = Values(theory)
    ctx = Ctx(values, unroll=True)
    ins = [concrete_tensor(values, inputs[p.name], p.type) for p in fn.params]
    outs = []
    for t in encode(ctx, fn, ins):
        arr = np.zeros(t.shape, dtype=t.dtype.np)
        for pos in np.ndindex(*t.shape):
            term = z3.simplify(t.at(tuple(Idx.of(p) for p in pos)))
            if not _is_value(term):
                raise NotConcrete(f"output element {pos} is not a value: {term}")
            arr[pos] = value_to_numpy(term, t.dtype)
        outs.append(arr)
    return outs


def _is_value(t: z3.ExprRef) -> bool:
    return (
        z3.is_true(t)
        or z3.is_false(t)
        or z3.is_bv_value(t)
        or z3.is_rational_value(t)
        or z3.is_fp_value(t)
    )


def real_difference(
    fa: Function,
    fb: Function,
    inputs: dict[str, np.ndarray],
    output: int,
    positions: list[tuple[int, ...]],
) -> tuple[int, ...] | None:
    """The first of `positions` where output `output` of the two functions differs over the
    reals on `inputs` (exact rationals, folds unrolled); None when none does or when a value
    is not concrete (an uninterpreted transcendental)."""
    values = Values("real")
    ctx = Ctx(values, unroll=True)
    ins = [concrete_tensor(values, inputs[p.name], p.type) for p in fa.params]
    ta = encode(ctx, fa, ins)[output]
    tb = encode(ctx, fb, ins)[output]
    for pos in positions:
        idx = tuple(Idx.of(p) for p in pos)
        va, vb = z3.simplify(ta.at(idx)), z3.simplify(tb.at(idx))
        if not (_is_value(va) and _is_value(vb)):
            continue
        if not z3.is_true(z3.simplify(va == vb)):
            return pos
    return None
