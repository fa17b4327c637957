"""Bounds for the C target (`analyze(..., target="c")`, `gdv bounds --target c`): its f32 exp,
tanh, erf and sigmoid are gdv's own f32 functions, within `C_F32_ULPS` ulps of the exact value
directly (not evaluated in float64 and rounded once, as the reference does), and the bound
charges them so. The executed C program's error against 60-digit mpmath stays within the
bound on inputs that include each function's worst measured point; the tables the bound and
the code use agree; and the C target is charged more than the reference, whose f64-then-round
evaluation is within about half an ulp."""

from __future__ import annotations

import functools
from pathlib import Path

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends import c
from gdv.backends.c import vmath
from gdv.commands import bounds as bounds_command
from gdv.validate.bounds import analyze
from gdv.validate.bounds.measure import KINDS, make_inputs
from gdv.validate.bounds.registry import C_F32_ULPS, TARGETS

EXACT = {
    "exp": mpmath.exp,
    "tanh": mpmath.tanh,
    "erf": mpmath.erf,
    "sigmoid": lambda x: 1 / (1 + mpmath.exp(-x)),
}
WORST = {  # where benchmarks/vmath_ulp.py found each function's largest error (with FMA)
    "exp": -87.71553,
    "tanh": 0.0077671753,
    "erf": 0.89482313,
    "sigmoid": -86.209244,
}
RANGE = {"exp": (-88.0, 8.0), "tanh": (-4.0, 4.0), "erf": (-4.0, 4.0), "sigmoid": (-88.0, 20.0)}


def test_the_tables_agree() -> None:
    assert C_F32_ULPS == vmath.F32_MAX_ULP
    assert bounds_command.TARGETS == TARGETS


def _program(name: str) -> str:
    lo, hi = RANGE[name]
    return (
        f"func @main(%x: f32[64] {{range = [{lo}, {hi}]}}) -> f32[64] {{\n"
        f"  %y = {name}(%x) : f32[64]\n  return %y\n}}\n"
    )


@pytest.mark.parametrize("name", sorted(EXACT))
def test_c_functions_stay_within_the_c_bound(name: str) -> None:
    text = _program(name)
    module = parse(text)
    bound_c = analyze(module, target="c").outputs[0].abs
    bound_ref = analyze(module).outputs[0].abs
    assert bound_c > bound_ref  # below 1 ulp directly costs more than f64 rounded once
    lo, hi = RANGE[name]
    x = np.random.default_rng(5).uniform(lo, hi, 64).astype(np.float32)
    x[0] = np.float32(WORST[name])
    x[1:4] = np.nextafter(np.float32(WORST[name]), np.float32([-np.inf, np.inf, 0.0]))
    got = c.run(module, {"x": x})[0].astype(np.float64)
    worst = 0.0
    with mpmath.workdps(40):
        for xi, yi in zip(x.astype(np.float64), got, strict=True):
            worst = max(worst, float(abs(mpmath.mpf(float(yi)) - EXACT[name](mpmath.mpf(xi)))))
    assert worst <= bound_c, (name, worst, bound_c)


def test_bounds_command_takes_the_c_target(tmp_path, capsys) -> None:
    from gdv.cli import main

    path = tmp_path / "exp.gdv"
    path.write_text(_program("exp"))
    assert main(["bounds", str(path), "--target", "c"]) == 0
    out = capsys.readouterr().out
    assert "c-f32-ulp:exp" in out and "0.77 ulp" in out
    assert main(["bounds", str(path), "--target", "gpu"]) != 0


EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.gdv"))


@functools.cache
def _compiled(path: Path):
    from gdv.driver import CompileOptions, compile_module

    comp = compile_module(str(path), CompileOptions(level=2, jobs=1))
    assert comp.verdict == "proved"
    return comp, analyze(comp.source, target="c"), analyze(comp.source, ideal=True)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
@settings(max_examples=6, deadline=None)
@given(kind=st.sampled_from(KINDS), seed=st.integers(0, 2**32 - 1))
def test_examples_on_the_c_target_stay_within_its_bound(path: Path, kind: str, seed: int) -> None:
    """Each example compiled for C (gdv's f32 functions included) and run on adversarial
    inputs: its outputs differ from the float64 program by no more than the C target's bound
    plus the float64 program's own error."""
    from gdv.backends import reference

    comp, bound, ideal = _compiled(path)
    inputs = make_inputs(comp.source.entry, kind, seed)
    got = comp(**inputs)
    want = reference.run(comp.source, inputs, mode="ideal")
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g64, w64 = np.asarray(g, np.float64), np.asarray(w, np.float64)
        finite = np.isfinite(g64) & np.isfinite(w64)
        assert (finite | (np.isnan(g64) & np.isnan(w64)) | (g64 == w64)).all()
        err = float(np.max(np.abs(g64[finite] - w64[finite]), initial=0.0))
        limit = bound.outputs[i].abs + ideal.outputs[i].abs
        assert err <= limit, (path.stem, i, kind, seed, err, limit)
