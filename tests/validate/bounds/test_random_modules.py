"""Random well-typed functions from the op registry (tests/ir/strategies.py): the analysis never
crashes, an infinite bound always says why, and every finite bound holds when the function runs.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, assume, given, settings
from support import load_module

from gdv.ir.diagnostics import IRError
from gdv.ir.verifier import verify_function
from gdv.validate.bounds import analyze
from gdv.validate.bounds.measure import make_inputs, output_errors

S = load_module("ir/strategies.py")


@settings(max_examples=50, suppress_health_check=list(HealthCheck))
@given(S.functions("main"))
def test_random_functions_are_bounded_soundly(fn) -> None:
    verify_function(fn, "graph", "<random>")
    assume(fn.returns and sum(p.type.num_elements for p in fn.params) <= 20000)
    assume(all(o.type.num_elements <= 20000 for o in fn.ops))
    try:
        rigorous = analyze(fn, default_range=(-1.0, 1.0))
        ideal = analyze(fn, default_range=(-1.0, 1.0), ideal=True)
    except IRError as e:  # only the declared ranges may be refused
        assert "range" in e.message, e.message
        return
    for out in rigorous.outputs:
        assert out.abs >= 0
        assert math.isfinite(out.abs) or out.reason, out
    try:
        inputs = make_inputs(fn, "random", 0, default_range=(-1.0, 1.0))
        measured = output_errors(fn, inputs)
    except (ValueError, IRError):
        assume(False)
        return
    for i, (err, _) in enumerate(measured):
        assert err <= rigorous.outputs[i].abs + ideal.outputs[i].abs, (
            f"output {i}: measured {err} > bound {rigorous.outputs[i].abs}"
        )
