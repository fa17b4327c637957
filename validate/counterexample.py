"""Counterexamples: decode a Z3 model into concrete inputs, and replay them on the reference.

A model interprets each input function `X(i, j)` as a finite table of entries plus an `else`
value; the decoder fills a numpy array with the `else` value and then writes the entries that
fall inside the shape, so decoding costs O(entries + elements) in numpy, never one solver call
per element. A candidate becomes a counterexample only when the reference backend, run on the
decoded inputs, really gives different outputs (bit-exact: NaNs equal, +0.0 != -0.0).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np
import z3

from gdv.ir.core import Function
from gdv.ir.dtypes import DType
from gdv.ir.numerics import literal_to_array
from gdv.ir.types import TensorType
from gdv.validate.semantics.values import fp_to_bits

_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}
_EVAL_LIMIT = 4096
"""Most elements evaluated one by one when a model's `else` value is not a constant."""


@dataclass
class Counterexample:
    """Concrete inputs (keyed by A's parameter names) on which the two programs differ."""

    output: int
    index: tuple[int, ...]
    value_a: Any
    value_b: Any
    inputs: dict[str, np.ndarray]
    origin: str
    """Where the inputs came from: "solver model" or "random inputs (seed N)"."""


def value_to_numpy(value: z3.ExprRef, dtype: DType) -> Any:
    """A concrete Z3 value as a numpy scalar of `dtype` (reals are rounded to the dtype)."""
    if dtype.is_bool:
        return np.bool_(z3.is_true(value))
    if dtype.is_int or dtype.is_small_int:
        v = value.as_signed_long() if z3.is_bv_value(value) else 0
        if dtype.is_small_int:  # its value in its range (as_signed_long reads the top bit)
            v = (v - dtype.int_min) % (1 << dtype.bits) + dtype.int_min
        return np.array(v, dtype=np.int64).astype(dtype.np)[()]
    if dtype.is_float8:  # the bit pattern (IR_SPEC.md section 8)
        v = value.as_long() if z3.is_bv_value(value) else 0
        return np.array(v, dtype=np.uint8).view(dtype.np)[()]
    if z3.is_rational_value(value):
        return literal_to_array(Fraction(value.as_fraction()), dtype)[()]
    if z3.is_algebraic_value(value):
        approx = value.approx(30)
        return literal_to_array(Fraction(approx.as_fraction()), dtype)[()]
    if z3.is_fp_value(value):
        bits = fp_to_bits(value, dtype)
        return np.array(bits, dtype=_UINT[dtype.itemsize]).view(dtype.np)[()]
    return np.zeros((), dtype.np)[()]


def _is_constant(value: z3.ExprRef) -> bool:
    return (
        z3.is_true(value)
        or z3.is_false(value)
        or z3.is_bv_value(value)
        or z3.is_rational_value(value)
        or z3.is_algebraic_value(value)
        or z3.is_fp_value(value)
    )


def decode_input(model: z3.ModelRef, f: z3.FuncDeclRef, type_: TensorType) -> np.ndarray:
    """The full concrete tensor a model gives input function `f` (zeros where unconstrained)."""
    dtype = type_.dtype
    if type_.rank == 0:
        v = model.eval(f(), model_completion=True)
        return np.array(value_to_numpy(v, dtype), dtype=dtype.np)
    out = np.zeros(type_.shape, dtype=dtype.np)
    try:
        interp = model.get_interp(f)
        else_value = None if interp is None else interp.else_value()
    except z3.Z3Exception:  # no interpretation: the query never reads f
        interp = None
    if interp is None or out.size == 0:
        return out
    if else_value is not None and _is_constant(else_value):
        out[...] = value_to_numpy(else_value, dtype)
    elif out.size <= _EVAL_LIMIT:
        for pos in np.ndindex(*type_.shape):
            v = model.eval(f(*[z3.IntVal(p) for p in pos]), model_completion=True)
            out[pos] = value_to_numpy(v, dtype)
        return out
    for e in range(interp.num_entries()):
        entry = interp.entry(e)
        args = [entry.arg_value(a) for a in range(entry.num_args())]
        if not all(z3.is_int_value(a) for a in args):
            continue
        pos = tuple(a.as_long() for a in args)
        if all(0 <= p < n for p, n in zip(pos, type_.shape, strict=True)):
            out[pos] = value_to_numpy(entry.value(), dtype)
    return out


def same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per element: the same bits, or both NaN (IR_SPEC.md section 5)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16" or a.dtype.name.startswith("float8"):
        u = _UINT[a.dtype.itemsize] if a.dtype.itemsize > 1 else np.uint8
        wa, wb = a.astype(np.float64), b.astype(np.float64)
        return (a.view(u) == b.view(u)) | (np.isnan(wa) & np.isnan(wb))
    return a == b


def replay(
    fa: Function,
    fb: Function,
    inputs: dict[str, np.ndarray],
    theory: str,
    prefer: tuple[int, tuple[int, ...]] | None = None,
) -> tuple[int, tuple[int, ...], Any, Any] | None:
    """Run both programs on the reference backend; the first differing (output, index, a, b),
    or None when they agree everywhere.

    Under `real`, a bit-exact difference counts only where the two outputs also differ when
    evaluated exactly over the reals on the same inputs (`evaluate.real_difference`): a
    difference of rounding alone is no real refutation."""
    from gdv.backends import reference
    from gdv.validate.evaluate import real_difference

    inputs_b = {pb.name: inputs[pa.name] for pa, pb in zip(fa.params, fb.params, strict=True)}
    out_a = reference.run(fa, inputs, mode="exact")
    out_b = reference.run(fb, inputs_b, mode="exact")
    masks = [~same_bits(a, b) for a, b in zip(out_a, out_b, strict=True)]
    order = list(range(len(masks)))
    if prefer is not None and prefer[0] < len(masks):
        order.remove(prefer[0])
        order.insert(0, prefer[0])
    for o in order:
        m = masks[o]
        if not m.any():
            continue
        positions = [tuple(int(k) for k in p) for p in np.argwhere(m)] if m.shape else [()]
        if prefer is not None and prefer[0] == o and prefer[1] in positions:
            positions.remove(prefer[1])
            positions.insert(0, prefer[1])
        if theory == "real":
            pos = real_difference(fa, fb, inputs, o, positions[:REAL_CHECKS])
            if pos is None:
                continue
        else:
            pos = positions[0]
        return o, pos, out_a[o][pos], out_b[o][pos]
    return None


REAL_CHECKS = 16
"""Positions checked for an exact real difference per replay."""


_SPECIAL = {
    # ±1e30 against ±1: sums that cancel differ by order (a reordered 4-element sum).
    "float": [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 0.5, -2.0, 3.0, 1e-40, 1e30, -1e30],
    "int": [0, 1, -1, 2, -2, 127, -128, 3],
}


def _int_specials(dtype: DType) -> list[int]:
    """The integer special values as `dtype` values, taken modulo 2^n (-1 is the largest
    unsigned value, -128 is 128 in u8)."""
    return [int(v) for v in np.array(_SPECIAL["int"], dtype=np.int64).astype(dtype.np)]


def special_inputs(fn: Function, seed: int) -> dict[str, np.ndarray]:
    """Inputs drawn from special values (±0, ±inf, NaN, subnormal, large), seeded."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for p in fn.params:
        d = p.type.dtype
        if d.is_bool:
            out[p.name] = rng.integers(0, 2, size=p.type.shape).astype(bool)
        elif d.is_int or d.is_small_int:
            vals = np.array(_int_specials(d), dtype=d.np)
            out[p.name] = rng.choice(vals, size=p.type.shape)
        else:
            vals = np.array(_SPECIAL["float"], dtype=np.float64)
            with np.errstate(all="ignore"):
                out[p.name] = rng.choice(vals, size=p.type.shape).astype(d.np)
    return out


def uniform_inputs(fn: Function, k: int) -> dict[str, np.ndarray]:
    """Every input filled with the k-th special value of its kind (all -0.0, all NaN, all the
    largest finite value, ...): sums of -0.0 and overflowing sums need every element alike,
    which random draws almost never give."""
    out: dict[str, np.ndarray] = {}
    for p in fn.params:
        d = p.type.dtype
        if d.is_bool:
            out[p.name] = np.full(p.type.shape, bool(k % 2))
        elif d.is_int or d.is_small_int:
            vals = [*_int_specials(d), d.int_max]
            out[p.name] = np.full(p.type.shape, vals[k % len(vals)], dtype=d.np)
        else:
            vals = [*_SPECIAL["float"], float(ml_dtypes.finfo(d.np).max)]
            with np.errstate(all="ignore"):
                v = np.array(vals[k % len(vals)], dtype=np.float64).astype(d.np)
            out[p.name] = np.full(p.type.shape, v, dtype=d.np)
    return out


UNIFORM_TRIES = len(_SPECIAL["float"]) + 1


def cancelling_inputs(fn: Function, k: int) -> dict[str, np.ndarray]:
    """Every float input filled, in row-major order, with `big, 1, -big, 1, ...` (k = 0) or
    `1, big, 1, -big, ...` (k = 1), where `big + 1` rounds to `big`: a sum taken in another
    order then differs (a reordered 4-element sum gives 1 against 2), which random draws
    rarely show. Other inputs are zero."""
    out: dict[str, np.ndarray] = {}
    for p in fn.params:
        d = p.type.dtype
        if not d.is_float:
            out[p.name] = np.zeros(p.type.shape, dtype=d.np)
            continue
        big = 2.0 ** (ml_dtypes.finfo(d.np).nmant + 2)
        cycle = [big, 1.0, -big, 1.0] if k == 0 else [1.0, big, 1.0, -big]
        flat = np.resize(np.array(cycle, dtype=np.float64), p.type.num_elements)
        out[p.name] = flat.reshape(p.type.shape).astype(d.np)
    return out


CANCELLING_TRIES = 2
"""How many `cancelling_inputs` patterns there are."""

SIGN_INPUTS = 4
"""Float inputs up to this many get every sign pattern (`sign_patterns`); beyond, each input
alone takes the other sign."""
_LONE = [np.nan, np.inf, -np.inf, 1e-40, -1e-40, -0.0]
"""The values one input takes alone, the others all 1.0 (`sign_patterns`)."""


def _masks(m: int) -> list[tuple[bool, ...]]:
    """Which of `m` inputs take the negative value: every choice for a few inputs, else each
    input alone and all but each one."""
    if m <= SIGN_INPUTS:
        return [tuple(bool(k >> j & 1) for j in range(m)) for k in range(1 << m)]
    one = [tuple(j == i for j in range(m)) for i in range(m)]
    return one + [tuple(not b for b in mask) for mask in one]


def sign_patterns(fn: Function) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
    """IEEE special inputs, whole tensors alike, for the probe before any query (issue 15):

    - `signed zeros`: every float input all +0.0 or all -0.0, in every combination of signs (a
      few inputs) or each input against the others: a sum of products is exactly -0.0 only
      when every product is, which needs operands of opposite signs (-0.0 * +0.0), so a
      rewrite `x + 0.0 -> x` inside a product is seen; uniform inputs (every input the same
      value) give products of one sign, +0.0, only;
    - `zeros and ones`: the same with +1.0 in place of +0.0 (-0.0 * 1.0 is -0.0 too);
    - `lone specials`: one input all NaN, ±inf or a ±subnormal, the others all 1.0.

    Integer and boolean inputs are all zero (false). Yields (name, inputs), made one at a time
    (`sign_pattern_count` of them)."""
    floats = [p for p in fn.params if p.type.dtype.is_float]

    def fill(values: dict[str, float]) -> dict[str, np.ndarray]:
        inputs: dict[str, np.ndarray] = {}
        for p in fn.params:
            d = p.type.dtype
            v = values.get(p.name, 0.0)
            with np.errstate(all="ignore"):
                x = np.array(v if d.is_float else 0, dtype=np.float64).astype(d.np)
            inputs[p.name] = np.full(p.type.shape, x, dtype=d.np)
        return inputs

    if not floats:
        return
    masks = _masks(len(floats))
    for name, positive in (("signed zeros", 0.0), ("zeros and ones", 1.0)):
        for k, mask in enumerate(masks):
            pairs = zip(floats, mask, strict=True)
            chosen = {p.name: -0.0 if neg else positive for p, neg in pairs}
            yield f"{name} (pattern {k})", fill(chosen)
    for i, p in enumerate(floats[:SIGN_INPUTS]):
        for k, v in enumerate(_LONE):
            chosen = {q.name: 1.0 for q in floats}
            chosen[p.name] = v
            yield f"lone specials (input {i}, value {k})", fill(chosen)


def sign_pattern_count(fn: Function) -> int:
    """How many inputs `sign_patterns(fn)` yields."""
    m = sum(p.type.dtype.is_float for p in fn.params)
    return 0 if m == 0 else 2 * len(_masks(m)) + len(_LONE) * min(m, SIGN_INPUTS)


"""How many `uniform_inputs` patterns there are."""
