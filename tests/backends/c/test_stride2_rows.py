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
from gdv.ir.dtypes import DType
from gdv.ir.types import TensorType
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline

from .test_thread_splits import _run_with_threads

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


def _pool(ch: int, h: int, w: int) -> str:
    """A 3x3 max pool at stride 2 on f32[1, ch, h, w] as resnet18's ONNX import writes it: a
    row max over stride-2 row slices, then a column max over stride-2 column slices. The two
    kernels form a row group (by channels), and the second one's rows are staged."""
    oh, ow = (h - 3) // 2 + 1, (w - 3) // 2 + 1
    a, b = f"f32[1,{ch},{oh},{w}]", f"f32[1,{ch},{oh},{ow}]"
    lines = [f"func @main(%x: f32[1,{ch},{h},{w}]) -> {b} {{"]
    for t in range(3):
        lines.append(
            f"  %r{t} = slice(%x) {{start = [0, 0, {t}, 0], limit = [1, {ch}, "
            f"{t + 2 * (oh - 1) + 1}, {w}], stride = [1, 1, 2, 1]}} : {a}"
        )
    lines += [f"  %ra = max(%r0, %r1) : {a}", f"  %rb = max(%ra, %r2) : {a}"]
    for t in range(3):
        lines.append(
            f"  %c{t} = slice(%rb) {{start = [0, 0, 0, {t}], limit = [1, {ch}, {oh}, "
            f"{t + 2 * (ow - 1) + 1}], stride = [1, 1, 1, 2]}} : {b}"
        )
    lines += [f"  %ca = max(%c0, %c1) : {b}", f"  %cb = max(%ca, %c2) : {b}", "  return %cb", "}"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_row_groups_staged_rows_are_exact_at_every_thread_count(
    tmp_path, monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    """The row group's blocks run on the threads; each block stages only its own rows'
    stride-2 columns."""
    monkeypatch.setenv(VECTOR_BYTES_ENV, "64")
    text = _pool(64, 57, 57)
    module = PassManager(pipeline("c", 2, **c.schedule_parameters())).run(parse(text)).module
    grouped = [op for op in module.entry.ops if op.attrs.get("row_group") is not None]
    assert len(grouped) == 2
    staged = [
        ch["kernel"] for ch in c.printer_choices(module) if ch["value"] == "stride-2 rows staged"
    ]
    assert staged == [grouped[1].result]
    rng = np.random.default_rng(threads)
    x = rng.standard_normal((1, 64, 57, 57)).astype(np.float32)
    x[0, 3, 4, :5] = [np.nan, np.inf, -np.inf, -0.0, 0.0]
    want = reference.run(parse(text), {"x": x})[0]
    got = _run_with_threads(tmp_path, text, {"x": x}, threads, host=True)
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


def test_a_row_groups_own_row_dim_is_never_staged() -> None:
    """A grouped kernel computes only rows [r0, r1) of its row dim, while a staged row is
    copied whole: where the row dim is the innermost loop, it keeps the strided loop."""
    f32 = DType.F32
    types = [TensorType(f32, (1, 1, 1, 64))]
    maps = [[[1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 2, 0]]]

    class _Op:
        type = TensorType(f32, (1, 1, 1, 32))

    def stageable(schedule: dict) -> bool:
        loops = nest.Nest([1, 1, 1, 32], maps, [0, 1, 2, 3], [], "none", schedule)
        return nest._stageable(None, _Op(), loops, types, [2], 3)  # type: ignore[arg-type]

    assert stageable({"vector": 16})
    assert not stageable({"vector": 16, "row_group": [0, 4]})
