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


def evaluate_symbolic(
    fn: Function, inputs: dict[str, np.ndarray], theory: str = "fp"
) -> list[np.ndarray]:
    """Every output of `fn` on `inputs`, through the encoding that proofs use.

    Unlike `evaluate`, nothing is concrete while encoding: folds get their symbolic variables
    (`k!<depth>`, with ranges) and stay uninterpreted applications, and the memo of every
    tensor is exercised as in a query. Only then are the inputs fixed (each is a constant Z3
    array) and each fold application expanded into its left fold by instantiating its lambda
    at 0, ..., n-1. A bug between ops in the symbolic encoding (issue 14's range-blind memo)
    shows here as a value that differs from the reference backend's."""
    from gdv.validate.encode import input_tensor

    values = Values(theory)
    ctx = Ctx(values)
    ins = [input_tensor(values, p.name, p.type) for p in fn.params]
    arrays = {f"in.{p.name}": _constant_array(values, inputs[p.name], p.type) for p in fn.params}
    steps = _fold_steps(values)
    outs = []
    for t in encode(ctx, fn, ins):
        arr = np.zeros(t.shape, dtype=t.dtype.np)
        memo: dict[int, z3.ExprRef] = {}
        for pos in np.ndindex(*t.shape):
            term = t.at(tuple(Idx.of(p) for p in pos))
            term = z3.simplify(_expand(term, arrays, steps, memo))
            if not _is_value(term):
                raise NotConcrete(f"output element {pos} is not a value: {term}")
            arr[pos] = value_to_numpy(term, t.dtype)
        outs.append(arr)
    return outs


def _constant_array(values: Values, array: np.ndarray, type_) -> tuple:
    """(the input's values as Z3 terms in row-major order, its shape, a zero of its dtype)."""
    array = np.asarray(array, dtype=type_.dtype.np)
    flat = [values.scalar(x, type_.dtype) for x in array.reshape(-1)]
    return flat, type_.shape, values.zero(type_.dtype)


def _fold_steps(values: Values) -> dict[str, object]:
    """Fold function name -> the step of its left fold."""
    from gdv.ir.dtypes import DType

    out: dict[str, object] = {}
    for kind in ("sum", "max", "min"):
        for d in DType:
            if d.is_bool:
                continue
            name = values.fold_function(kind, d).name()
            out[name] = lambda acc, x, kind=kind, d=d: values.fold_step(kind, d, acc, x)
    return out


def _expand(term: z3.ExprRef, arrays: dict, steps: dict, memo: dict[int, z3.ExprRef]):
    """`term` with input reads replaced by the inputs' values and folds by their left folds
    (bottom-up, each subterm once). Recursive over the term's depth: for the small programs
    of the agreement tests, not for proofs."""
    key = term.get_id()
    if key in memo:
        return memo[key]
    if z3.is_quantifier(term) or not z3.is_app(term):
        out = term
    else:
        name = term.decl().name()
        if name in steps and term.num_args() == 2:
            n = z3.simplify(term.arg(0)).as_long()
            lam = term.arg(1)
            acc = None
            for k in range(n):
                # Z3's rewriter beta-reduces a read of a lambda (and reads a constant array).
                element = z3.simplify(z3.Select(lam, z3.IntVal(k)))
                element = z3.simplify(_expand(element, arrays, steps, {}))
                acc = element if acc is None else steps[name](acc, element)
            out = acc if acc is not None else term
        elif name in arrays and term.num_args() == len(arrays[name][1]):
            flat, shape, zero = arrays[name]
            pos = [z3.simplify(_expand(a, arrays, steps, memo)).as_long() for a in term.children()]
            if all(0 <= p < s for p, s in zip(pos, shape, strict=True)):
                lin = 0
                for p, s in zip(pos, shape, strict=True):
                    lin = lin * s + p
                out = flat[lin]
            else:
                out = zero  # input functions are total; such reads sit under a false guard
        else:
            kids = [_expand(c, arrays, steps, memo) for c in term.children()]
            out = term.decl()(*kids) if kids else term
    memo[key] = out
    return out
