"""Measuring a program's actual rounding error, to check bounds against (tests, benchmarks).

The measured error of an output is max |exact-mode result - ideal-mode result| over its
elements, the reference backend's ideal mode evaluating every float in f64. The ideal result
has its own error against the real-number program; `analyze(module, ideal=True)` bounds it, so
a bound is refuted only when measured > bound + ideal bound.

Input families for the search (all within the declared ranges, rounded to the dtype):
`random` (uniform), `endpoints` (each element at lo or hi), `aligned` (every input at its hi, or
every at its lo: sums without cancellation reach the interval ends), `upper` (uniform in the top
quarter of the range: long sums of same-sign, non-representable terms whose partial sums grow
and round at every step), `flat` (each row along the last axis one value times 1 + noise of a
per-row scale 1e-9..1e-5: near-zero variance with inexact means, layer_norm's worst case),
`constant` (each tensor one
value plus relative noise 1e-6: near-zero variance for layer_norm, catastrophic cancellation in
x - mean), `tiny` (values near the dtype's underflow threshold where the range allows them),
`signs` (every element at lo or hi, the choice a product of one sign pattern per axis, each
axis's pattern one of two fixed random sign vectors of its length: tensors whose axes share a
pattern line up, so contractions over them add up without cancellation, and layer_norm passes
the pattern on), `scaled` (near-constant rows whose relative spread is drawn log-uniformly from
1e-7..1e-1: the variance comes near layer_norm's eps, where its sensitivity to the mean's
rounding peaks), `patterns` (rows c + a s_A + b s_B along the last axis, s_A and s_B the two
sign patterns, a nearly the same for every row and b not, both small: after layer_norm the rows
are nearly equal along s_A and differ along s_B, so attention's scores nearly tie while its
values differ, softmax's most sensitive spot), `split` (along the last axis, a leading part at
one end of the range and the rest tiny: long sums whose partial sums are large while small,
inexact terms keep rounding), `rows` (each row along the last axis either a full row, at the
range's ends along sign pattern 0, or one of two near-constant rows c + a s, s that pattern
times opposite signs, a small: after layer_norm the near-constant rows carry the mean's
rounding amplified by 1/sqrt(eps) as a shift, the full ones large values, and attention's
scores against them err unevenly where the values differ most), `rank1` (every element at lo or
hi, the sign a product of one vector per axis, each all ones or sign pattern 0: weights whose
columns are all alike, so a contraction sums a row's error, shift and all, into every output).

`worst_error` searches harder: every family, then each parameter drawn from its own family,
then coherent draws (the first float tensor of rank >= 2, by convention the activations, from
`patterns`, `scaled`, `signs` or `rows`, the other such tensors from `signs` or `rank1`,
vectors from `aligned`, `signs` or `random`: one draw in a few dozen lines up every sign
pattern along a layer's contractions), then a hill climb from each of the `CLIMBS` worst inputs
found, the rest of the budget shared equally (re-draw one parameter, or move a random few of
its elements to a range end, to a random value, or by a few ulps, or scale a row's spread, or
copy one row over another), keeping any step that does not lower the measured error. Every
candidate stays within the declared ranges.
"""

from __future__ import annotations

import math

import numpy as np

from gdv.ir.core import Function, Module, Param
from gdv.ir.dtypes import DType
from gdv.ir.numerics import float_to_float

KINDS = (
    "random",
    "endpoints",
    "aligned",
    "upper",
    "constant",
    "flat",
    "tiny",
    "signs",
    "scaled",
    "patterns",
    "split",
    "rows",
    "rank1",
)

_TINY = {
    DType.F64: 2.0**-1020,
    DType.F32: 2.0**-124,
    DType.F16: 2.0**-13,
    DType.BF16: 2.0**-124,
}
"""A little above each float dtype's smallest normal: products and sums of such values land in
the subnormal range."""


def _range(p: Param, default: tuple[float, float] | None) -> tuple[float, float]:
    r = p.range or default or (-1.0, 1.0)
    return float(r[0]), float(r[1])


def _axis_signs(length: int, pattern: int) -> np.ndarray:
    """Sign pattern number `pattern` (0 or 1) of an axis of `length`, the same for every tensor."""
    return np.where(np.random.default_rng([pattern, length]).random(length) < 0.5, -1.0, 1.0)


def _floats(
    p: Param,
    kind: str,
    rng: np.random.Generator,
    default: tuple[float, float] | None,
    seed: int = 0,
) -> np.ndarray:
    lo, hi = _range(p, default)
    shape = p.type.shape
    if kind in ("signs", "rank1"):
        sign = np.ones(shape)
        for axis, length in enumerate(shape):
            view = [1] * len(shape)
            view[axis] = length
            pattern = int(rng.integers(2))
            if kind == "rank1" and pattern == 1:
                axis_signs = np.ones(length)
            else:
                axis_signs = _axis_signs(length, pattern)
            sign = sign * axis_signs.reshape(view)
        wide = np.where(sign > 0, hi, lo)
    elif kind == "rows" and len(shape) >= 1:
        wide = _rows(shape, lo, hi, rng)
    elif kind == "patterns" and len(shape) >= 1:
        rows, n = shape[:-1] + (1,), shape[-1]
        first = int(rng.integers(2))
        s_a, s_b = _axis_signs(n, first), _axis_signs(n, 1 - first)
        amp = (hi - lo) * 10.0 ** rng.uniform(-4, -1.5)
        c = rng.uniform(lo + 0.25 * (hi - lo), hi, rows) * rng.choice([-1.0, 1.0])
        c = np.clip(c, lo + 2 * amp, hi - 2 * amp) if hi - lo > 4 * amp else c
        a = amp * (1 + 10.0 ** rng.uniform(-6, -2) * rng.uniform(-1, 1, rows))
        b = amp * rng.uniform(-1, 1, rows)
        wide = np.clip(c + a * s_a + b * s_b, lo, hi)
    elif kind == "split" and len(shape) >= 1:
        n = shape[-1]
        lead = max(1, int(n * rng.uniform(0.25, 0.75)))
        end = hi if rng.random() < 0.5 else lo
        tiny = rng.uniform(lo, hi, shape) * 2.0 ** -rng.uniform(6, 12, shape)
        if lo > 0 or hi < 0:  # no tiny values in the range: the other end instead
            tiny = np.full(shape, lo if end == hi else hi)
        wide = np.where(np.arange(n) < lead, end, tiny)
    elif kind == "scaled" and len(shape) >= 1:
        rows = shape[:-1] + (1,)
        c = rng.uniform(lo, hi, rows)
        scale = 10.0 ** rng.uniform(-7, -1, rows)
        wide = np.clip(c * (1 + scale * rng.uniform(-1, 1, shape)), lo, hi)
    elif kind == "endpoints":
        wide = np.where(rng.random(shape) < 0.5, lo, hi)
    elif kind == "aligned":
        wide = np.full(shape, hi if rng.random() < 0.5 else lo)
    elif kind == "upper":
        wide = rng.uniform(lo + 0.75 * (hi - lo), hi, shape)
    elif kind == "flat" and len(shape) >= 1:
        rows = shape[:-1] + (1,)
        c = rng.uniform(lo, hi, rows)
        scale = 10.0 ** rng.uniform(-9, -5, rows)
        wide = np.clip(c * (1 + scale * rng.uniform(-1, 1, shape)), lo, hi)
    elif kind == "constant":
        c = rng.uniform(lo, hi)
        wide = np.clip(c * (1 + 1e-6 * rng.standard_normal(shape)), lo, hi)
    elif kind == "tiny" and lo <= 0 <= hi:
        t = _TINY[p.type.dtype]
        scale = t * rng.uniform(0.5, 4.0, shape)
        wide = np.clip(np.where(rng.random(shape) < 0.5, -scale, scale), lo, hi)
    else:
        wide = rng.uniform(lo, hi, shape)
    return _to_dtype(p, np.asarray(wide, dtype=np.float64), lo, hi)


def _rows(shape: tuple[int, ...], lo: float, hi: float, rng: np.random.Generator) -> np.ndarray:
    """The `rows` family (module doc): every row along the last axis either at the range's ends
    along sign pattern 0 times -sigma (a full row), or one of two near-constant rows, c_A +
    sigma a s and c_B - sigma a s (s pattern 0, a small), the same two for the whole tensor."""
    rows, n = shape[:-1], shape[-1]
    s = _axis_signs(n, 0)
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    sigma = rng.choice([-1.0, 1.0])
    amp = (hi - lo) * 10.0 ** rng.uniform(-4, -2)
    centre = [mid + rng.choice([-1.0, 1.0]) * half * rng.uniform(0.75, 1.0) for _ in range(2)]
    choices = np.stack(
        [
            np.full(n, mid) - sigma * half * s,
            centre[0] + sigma * amp * s,
            centre[1] - sigma * amp * s,
        ]
    )
    full = rng.uniform(0.1, 0.6)  # the share of full rows
    near = 1 if rng.random() < 0.5 else 2  # one near-constant row or two
    pick = np.where(rng.random(rows) < full, 0, 1 + rng.integers(near, size=rows))
    return np.clip(choices[pick], lo, hi)


def _to_dtype(p: Param, wide: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """`wide` rounded to `p`'s dtype, kept within [lo, hi]."""
    shape = p.type.shape
    out = float_to_float(wide, p.type.dtype)
    # Rounding to the dtype may step just outside the range; step back in.
    w = out.astype(np.float64)
    if (w < lo).any() or (w > hi).any():
        out = float_to_float(np.clip(w, lo, hi), p.type.dtype)
        bad = (out.astype(np.float64) < lo) | (out.astype(np.float64) > hi)
        out = np.where(bad, float_to_float(np.full(shape, (lo + hi) / 2), p.type.dtype), out)
        w = out.astype(np.float64)
        if (w < lo).any() or (w > hi).any():
            raise ValueError(f"the range [{lo}, {hi}] of %{p.name} holds no {p.type.dtype} value")
    return out.astype(p.type.dtype.np)


def _ints(p: Param, rng: np.random.Generator) -> np.ndarray:
    dtype = p.type.dtype
    r = p.range
    lo, hi = (dtype.int_min, dtype.int_max) if r is None else (math.ceil(r[0]), math.floor(r[1]))
    lo, hi = max(lo, -8), min(hi, 8) if lo <= 0 else (lo, min(hi, lo + 16))
    return rng.integers(lo, hi, size=p.type.shape, endpoint=True).astype(dtype.np)


def make_inputs(
    fn: Function,
    kind: str,
    seed: int,
    default_range: tuple[float, float] | None = None,
) -> dict[str, np.ndarray]:
    """Inputs of family `kind` (see the module doc), reproducible from `seed`."""
    rng = np.random.default_rng(seed)
    out = {}
    for p in fn.params:
        if p.type.dtype.is_float:
            out[p.name] = _floats(p, kind, rng, default_range, seed)
        elif p.type.dtype.is_bool:
            out[p.name] = rng.random(p.type.shape) < 0.5
        else:
            out[p.name] = _ints(p, rng)
    return out


def output_errors(
    module: Module | Function, inputs: dict[str, np.ndarray]
) -> list[tuple[float, np.ndarray]]:
    """Per output: (max |exact - ideal| over its elements, the ideal values). A non-finite
    element on one side only (an overflow, a NaN) counts as an infinite error."""
    from gdv.backends import reference

    exact = reference.run(module, inputs, mode="exact")
    ideal = reference.run(module, inputs, mode="ideal")
    out = []
    for a, b in zip(exact, ideal, strict=True):
        a64 = np.asarray(a).astype(np.float64)
        b64 = np.asarray(b).astype(np.float64)
        both = np.isfinite(a64) & np.isfinite(b64)
        same = (np.isnan(a64) & np.isnan(b64)) | (a64 == b64)
        if (~both & ~same).any():
            out.append((math.inf, b64))
            continue
        err = float(np.max(np.abs(a64[both] - b64[both]))) if both.any() else 0.0
        out.append((err, b64))
    return out


def _mutate(
    fn: Function,
    inputs: dict[str, np.ndarray],
    rng: np.random.Generator,
    default_range: tuple[float, float] | None,
) -> dict[str, np.ndarray]:
    """`inputs` with one float parameter changed (see the module doc), within its range."""
    params = [p for p in fn.params if p.type.dtype.is_float and p.type.num_elements]
    out = dict(inputs)
    if not params:
        return out
    p = params[rng.integers(len(params))]
    lo, hi = _range(p, default_range)
    move = rng.integers(6)
    if move == 0:  # re-draw the whole parameter from a family
        kind = KINDS[rng.integers(len(KINDS))]
        seed = int(rng.integers(2**31))
        try:
            out[p.name] = make_inputs(fn, kind, seed, default_range)[p.name]
        except ValueError:
            pass
        return out
    x = inputs[p.name].astype(np.float64)
    flat = x.reshape(-1).copy()
    count = max(1, int(flat.size * 10.0 ** rng.uniform(-3, -0.5)))
    idx = rng.choice(flat.size, size=min(count, flat.size), replace=False)
    if move == 1:  # to the range's ends
        flat[idx] = np.where(rng.random(idx.size) < 0.5, lo, hi)
    elif move == 2:  # anywhere in the range
        flat[idx] = rng.uniform(lo, hi, idx.size)
    elif move == 3:  # a few ulps
        u = 2.0**-p.type.dtype.significand_bits
        flat[idx] = flat[idx] * (1 + u * rng.integers(-4, 5, idx.size))
    elif move == 4:  # a row's spread around its mean, scaled (layer_norm's variance vs eps)
        rows = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
        r = rng.integers(rows.shape[0])
        mean = rows[r].mean()
        rows[r] = mean + (rows[r] - mean) * 10.0 ** rng.uniform(-3, 1)
        flat = rows.reshape(-1)
    else:  # a row copied over another (rows that err alike add up in later contractions)
        rows = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
        r, to = rng.integers(rows.shape[0], size=2)
        rows[to] = rows[r]
        flat = rows.reshape(-1)
    x = np.clip(flat, lo, hi).reshape(x.shape)
    try:
        out[p.name] = _to_dtype(p, x, lo, hi).astype(p.type.dtype.np)
    except ValueError:
        pass
    return out


def _coherent(
    fn: Function, rng: np.random.Generator, default_range: tuple[float, float] | None
) -> dict[str, np.ndarray]:
    """One coherent draw (module doc)."""
    out: dict[str, np.ndarray] = {}
    first = True
    for p in fn.params:
        if p.type.dtype.is_float and p.type.rank >= 2:
            kinds = ("patterns", "scaled", "signs", "rows") if first else ("signs", "rank1")
            first = False
        elif p.type.dtype.is_float:
            kinds = ("aligned", "signs", "random")
        else:
            kinds = ("random",)
        kind = kinds[rng.integers(len(kinds))]
        try:
            out[p.name] = make_inputs(fn, kind, int(rng.integers(2**31)), default_range)[p.name]
        except ValueError:
            out[p.name] = make_inputs(fn, "random", int(rng.integers(2**31)), default_range)[p.name]
    return out


CLIMBS = 3
"""How many of the best inputs the search's hill climb starts from."""


def worst_error(
    module: Module,
    output: int = 0,
    budget: int = 400,
    seed: int = 0,
    default_range: tuple[float, float] | None = None,
) -> tuple[float, str, dict[str, np.ndarray]]:
    """The largest error of output `output` that a search of `budget` runs finds: (error, how
    it was found, the inputs). A sixth of the budget goes to the families (each parameter from
    one family, then each from its own), a sixth to coherent draws, the rest to the hill climbs
    (module doc)."""
    fn = module.entry if isinstance(module, Module) else module
    rng = np.random.default_rng(seed)
    best, how, best_inputs = -1.0, "-", {}
    runs = 0

    def measure(inputs: dict[str, np.ndarray]) -> float:
        nonlocal runs
        runs += 1
        return output_errors(module, inputs)[output][0]

    start, coherent = budget // 6, budget // 3
    found: list[tuple[float, str, dict[str, np.ndarray]]] = []
    while runs < coherent:
        k = runs
        if k >= start:  # coherent draws (module doc)
            inputs = _coherent(fn, rng, default_range)
            label = "coherent"
        elif k < 2 * len(KINDS):  # every family, twice
            kind = KINDS[k % len(KINDS)]
            try:
                inputs = make_inputs(fn, kind, int(rng.integers(2**31)), default_range)
            except ValueError:
                runs += 1
                continue
            label = kind
        else:  # each parameter from its own family
            inputs, kinds = {}, []
            for p in fn.params:
                kind = KINDS[rng.integers(len(KINDS))]
                try:
                    drawn = make_inputs(fn, kind, int(rng.integers(2**31)), default_range)
                except ValueError:
                    kind = "random"
                    drawn = make_inputs(fn, kind, int(rng.integers(2**31)), default_range)
                inputs[p.name] = drawn[p.name]
                kinds.append(kind)
            label = "mixed"
        e = measure(inputs)
        found.append((e, label, inputs))
        found = sorted(found, key=lambda f: -f[0])[:CLIMBS]
    if found:
        best, how, best_inputs = found[0]
    # The climb, from each of the CLIMBS best inputs in turn with an equal share of the rest of
    # the budget: a climb can settle on a local maximum its start's structure allows.
    share = max(1, (budget - runs) // max(1, len(found)))
    for e0, label, inputs in found:
        here, at, climbed, stop = e0, inputs, 0, min(budget, runs + share)
        while runs < stop and math.isfinite(here):
            candidate = _mutate(fn, at, rng, default_range)
            e = measure(candidate)
            if e >= here:
                climbed += e > here
                here, at = e, candidate
        if here > best:
            best, how, best_inputs = here, f"{label}+climb" if climbed else label, at
    return best, how, best_inputs
