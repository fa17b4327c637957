"""What the Triton-target tests share: compile a program through the target's pipeline (no
proofs: those are the passes' tests), run it, and compare with the reference backend."""

from __future__ import annotations

import numpy as np

from gdv.api import parse
from gdv.backends import reference
from gdv.backends import triton as tt
from gdv.backends.targets import get_target
from gdv.ir.core import Module
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline

TARGET = get_target("triton")


def final(text: str | Module, level: int = 2) -> Module:
    """The module the triton pipeline at `-O{level}` makes of `text`."""
    module = parse(text) if isinstance(text, str) else text
    return (
        PassManager(pipeline("triton", level, False), printer=lambda *a, **k: None)
        .run(module)
        .module
    )


def within_ulps(got: np.ndarray, want: np.ndarray, ulps: float) -> bool:
    """Bit-equal where `ulps` is 0; else the same NaN positions and within `ulps` ulps."""
    if ulps == 0 or not np.issubdtype(want.dtype, np.floating):
        return reference.bit_equal(got, want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(w)
    if not np.array_equal(np.isnan(g), nan):
        return False
    spacing = np.abs(np.spacing(want)).astype(np.float64)
    with np.errstate(invalid="ignore"):
        close = (g == w) | (np.abs(g - w) <= ulps * spacing)
    return bool(np.all(close | nan))


def check(
    text: str, inputs: dict[str, np.ndarray], level: int = 2, transcendental: str | None = None
) -> tt.Executable:
    """Run `text` on the triton target and assert each result equals the reference's run of
    the source bit for bit. On a GPU a result of a transcendental (`transcendental` names the
    largest-ulp one) may differ by the target's ulp table (libdevice); the interpreter uses
    the reference's functions, so there it is bit-exact too."""
    source = parse(text)
    exe = tt.Executable(final(source, level))
    got = exe(inputs)
    want = reference.run(source, inputs)
    ulps = 0.0
    if transcendental and exe.mode == "cuda":
        ulps = TARGET.f32_ulps[transcendental]
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert within_ulps(g, w, ulps), (
            f"result {k} ({exe.mode}):\n{reference.describe_difference(g, w)}\n{text}"
        )
    return exe
