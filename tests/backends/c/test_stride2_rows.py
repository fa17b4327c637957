"""Elementwise nests reading f32 rows at stride 2 (a max pool's windows as strided slices, as
the ONNX importer writes them): with 64-byte vectors the printer copies each strided row into a
contiguous buffer by vector shuffles and runs the row as an omp simd loop over the copies
(`nest.STAGE_STRIDE2_MIN`). The results must be the reference's bits, with NaN, infinities and
signed zeros among the values, at row lengths around the 16-lane blocks."""

from __future__ import annotations

import numpy as np
import pytest

from gdv.api import parse
from gdv.backends import c, reference
from gdv.backends.c import nest
from gdv.backends.c.simd import VECTOR_BYTES_ENV
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline

SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-45, 3.4e38]


def _window_max(rows: int, width: int, taps: int) -> tuple[str, int]:
    """A 1 x `taps` window max at stride 2 along the last dim of f32[2, 3, rows, width]."""
    out = (width - taps) // 2 + 1
    shape = f"f32[2,3,{rows},{out}]"
    lines = [f"func @main(%x: f32[2,3,{rows},{width}]) -> {shape} {{"]
    for t in range(taps):
        limit = t + 2 * (out - 1) + 1
        lines.append(
            f"  %s{t} = slice(%x) {{start = [0, 0, 0, {t}], limit = [2, 3, {rows}, {limit}], "
            f"stride = [1, 1, 1, 2]}} : {shape}"
        )
    acc = "%s0"
    for t in range(1, taps):
        lines.append(f"  %m{t} = max({acc}, %s{t}) : {shape}")
        acc = f"%m{t}"
    lines += [f"  return {acc}", "}"]
    return "\n".join(lines) + "\n", out


def _run(
    monkeypatch: pytest.MonkeyPatch, text: str, width: int, rows: int, vector: str, seed: int
) -> list[dict]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 3, rows, width)).astype(np.float32)
    mask = rng.random(x.shape) < 0.2
    special = np.array(SPECIAL, dtype=np.float32)
    x[mask] = special[rng.integers(0, len(special), x.shape)][mask]
    module = parse(text)
    monkeypatch.setenv(VECTOR_BYTES_ENV, vector)
    compiled = PassManager(pipeline("c", 2, **c.schedule_parameters())).run(module).module
    got = c.run(compiled, {"x": x})[0]
    want = reference.run(module, {"x": x})[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)
    return c.printer_choices(compiled)


def _staged(choices: list[dict]) -> bool:
    return any(ch["value"] == "stride-2 rows staged" for ch in choices)


@pytest.mark.parametrize("width", [33, 34, 35, 63, 64, 65, 66, 113, 114, 200])
@pytest.mark.parametrize("taps", [2, 3])
def test_stride2_rows_are_staged_and_exact(
    monkeypatch: pytest.MonkeyPatch, width: int, taps: int
) -> None:
    """Rows of 16 to 99 outputs: whole 16-lane blocks, a tail, and the last load ending at the
    row's last element read (2 n - 2)."""
    text, out = _window_max(5, width, taps)
    choices = _run(monkeypatch, text, width, 5, "64", width * 10 + taps)
    assert _staged(choices) == (out >= nest.STAGE_STRIDE2_MIN), [
        ch for ch in choices if ch["choice"] == "loop"
    ]


@pytest.mark.parametrize("vector", ["32", "16"])
def test_narrower_vectors_leave_the_strided_loop_to_the_compiler(
    monkeypatch: pytest.MonkeyPatch, vector: str
) -> None:
    text, _ = _window_max(4, 114, 3)
    assert not _staged(_run(monkeypatch, text, 114, 4, vector, 7))


def test_a_short_row_is_not_staged(monkeypatch: pytest.MonkeyPatch) -> None:
    text, out = _window_max(4, 29, 3)
    assert out < nest.STAGE_STRIDE2_MIN
    assert not _staged(_run(monkeypatch, text, 29, 4, "64", 3))


def test_a_row_longer_than_the_stack_buffers_allow_is_not_staged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The row buffers live on the stack: a row of more than STAGE_STRIDE2_MAX outputs keeps
    the strided loop (still exact)."""
    width = 2 * nest.STAGE_STRIDE2_MAX + 3
    text, out = _window_max(1, width, 2)
    assert out > nest.STAGE_STRIDE2_MAX
    assert not _staged(_run(monkeypatch, text, width, 1, "64", 5))
