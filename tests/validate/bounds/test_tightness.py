"""Bounds that can fail in both directions: with 50000 rows of low-precision inputs the search
finds nearly the worst rounding, so the rigorous bound must hold and also be within a small
factor of what is measured (an undercounted term or a grossly loose rule both fail here)."""

from __future__ import annotations

import numpy as np
import pytest

from gdv.api import parse
from gdv.ir.numerics import float_to_float
from gdv.validate.bounds import analyze
from gdv.validate.bounds.measure import output_errors

ROWS = 50000
CASES = [
    # (program body over %x: DT[ROWS, N] and %w: DT[ROWS, N], result type, allowed ratio)
    ("%y = reduce_sum(%x) {{axes = [1]}} : {dt}[{rows}]", "{dt}[{rows}]", 3.5),
    (
        "%p = mul(%x, %w) : {dt}[{rows},{n}]\n  %y = reduce_sum(%p) {{axes = [1]}} : {dt}[{rows}]",
        "{dt}[{rows}]",
        3.5,
    ),
    ("%y = add(%x, %w) : {dt}[{rows},{n}]", "{dt}[{rows},{n}]", 2.1),
    ("%y = mul(%x, %w) : {dt}[{rows},{n}]", "{dt}[{rows},{n}]", 2.1),
    ("%y = div(%x, %w) : {dt}[{rows},{n}]", "{dt}[{rows},{n}]", 5.0),
    ("%y = sqrt(%x) : {dt}[{rows},{n}]", "{dt}[{rows},{n}]", 2.1),
]


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_bound_is_sound_and_tight(dt: str, n: int, case: int) -> None:
    body, result, ratio = CASES[case]
    fill = {"dt": dt, "rows": ROWS, "n": n}
    text = (
        f"func @main(%x: {dt}[{ROWS},{n}] {{range = [0.5, 2.0]}}, "
        f"%w: {dt}[{ROWS},{n}] {{range = [0.5, 2.0]}}) -> {result.format(**fill)} {{\n  "
        f"{body.format(**fill)}\n  return %y\n}}\n"
    )
    module = parse(text)
    bound = analyze(module).outputs[0].abs
    rng = np.random.default_rng(n)
    dtype = module.entry.params[0].type.dtype
    inputs = {name: float_to_float(rng.uniform(0.5, 2.0, (ROWS, n)), dtype) for name in ("x", "w")}
    ((measured, _),) = output_errors(module, inputs)
    assert measured <= bound, f"measured {measured} > bound {bound}"
    assert bound <= ratio * measured, f"bound {bound} > {ratio} x measured {measured}"
