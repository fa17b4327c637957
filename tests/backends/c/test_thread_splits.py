"""Which thread computes what (issue 16): a product whose factor reads a model's weight of a
quarter of L2 or more splits that factor's side between the threads (`products.split`), and
neither split changes a bit: the C program's result equals the reference's at 1, 2 and 3
OpenMP threads (OpenMP reads OMP_NUM_THREADS once per process, so each count runs in a
process of its own)."""

# ruff: noqa: E501  (IR programs written out line by line)

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gdv.api import parse
from gdv.backends import reference
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline

CONV = "stride = [1, 1], padding = [[1, 1], [1, 1]], dilation = [1, 1], groups = 1"

MID = f"""func @main(%x: f32[1,128,28,28], %w1: f32[128,128,3,3], %w2: f32[128,128,3,3]) -> f32[1,128,28,28] {{
  %c1 = conv2d(%x, %w1) {{{CONV}}} : f32[1,128,28,28]
  %z = constant() {{value = 0.0}} : f32[1,128,28,28]
  %r1 = max(%c1, %z) : f32[1,128,28,28]
  %c2 = conv2d(%r1, %w2) {{{CONV}}} : f32[1,128,28,28]
  %s = add(%c2, %x) : f32[1,128,28,28]
  %r2 = max(%s, %z) : f32[1,128,28,28]
  return %r2
}}
"""
"""resnet18's second stage: 3x3 convs of 128 channels on 28x28 (576 KiB weights each)."""

LATE = f"""func @main(%x: f32[1,256,7,7], %w: f32[256,256,3,3]) -> f32[1,256,7,7] {{
  %c = conv2d(%x, %w) {{{CONV}}} : f32[1,256,7,7]
  return %c
}}
"""
"""A late CNN layer (few positions, many channels: a product through a workspace)."""

UNEVEN = f"""func @main(%x: f32[1,256,6,7], %w: f32[256,256,3,3]) -> f32[1,256,6,7] {{
  %c = conv2d(%x, %w) {{{CONV}}} : f32[1,256,6,7]
  return %c
}}
"""
"""A late layer on 6 x 7: 42 positions as rows in 6-row slivers, 7 of them, so whole slivers
would give two threads 18 and 24 rows (`matmul.BALANCED_ROWS` gives each 21: 6 + 6 + 6 + 3)."""

PACKED = """func @main(%a: f32[100,70], %b: f32[70,130]) -> f32[100,130] {
  %s = add(%a, %a) : f32[100,70]
  %t = add(%b, %b) : f32[70,130]
  %p = matmul(%s, %t) : f32[100,130]
  return %p
}
"""
"""A product of two computed values (both factors packed on every call), with N < 2M: its
rows are split (`products.SPLIT_X_PACK_RATIO`), with partial slivers on both sides."""

RUN = textwrap.dedent(
    """
    import sys
    import numpy as np
    from gdv.api import parse
    from gdv.backends import c
    from gdv.passes.manager import PassManager
    from gdv.passes.pipelines import pipeline

    source = open(sys.argv[1], encoding="utf-8").read()
    inputs = dict(np.load(sys.argv[2]))
    params = c.schedule_parameters() if sys.argv[4:] == ["host"] else {}
    module = PassManager(pipeline("c", 2, **params)).run(parse(source)).module
    np.save(sys.argv[3], c.run(module, inputs)[0])
    """
)


def _inputs(source: str, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    fn = parse(source).function("main")
    return {p.name: rng.standard_normal(p.type.shape).astype(np.float32) for p in fn.params}


def _run_with_threads(
    tmp_path, source: str, inputs: dict, threads: int, host: bool = False
) -> np.ndarray:
    """`source` compiled (with this host's schedule parameters where `host`, as `gdv
    compile` does; else the pipeline's defaults) and run at `threads` OpenMP threads."""
    prog, data, out = tmp_path / "p.gdv", tmp_path / "in.npz", tmp_path / f"out{threads}.npy"
    prog.write_text(source, encoding="utf-8")
    np.savez(data, **inputs)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(prog), str(data), str(out), *(["host"] if host else [])],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return np.load(out)


def test_the_weights_side_is_split() -> None:
    """The convs' weights are the row factor (576 KiB each, the model's parameters beyond
    L2): their rows are split, though the products have more columns (784) than rows."""
    module = PassManager(pipeline("c", 2)).run(parse(MID)).module
    products = [op.attrs for op in module.entry.ops if op.attrs.get("strategy") == "product"]
    assert len(products) == 2
    for a in products:
        assert a["split"] == "rows", a


def test_a_conv_window_gathered_on_every_call_splits_its_rows() -> None:
    """The late layer runs as 49 positions by 256 channels: X gathers the padded input through
    the 3x3 window (2304 taps a position) on every call, Y is the 2.25 MiB weight. The rows
    are split (`products.SPLIT_WINDOW_ROWS`), so each thread gathers half of X; the weight
    rule alone would split the columns."""
    from gdv.ir import products

    module = PassManager(pipeline("c", 2)).run(parse(LATE)).module
    (op,) = [op for op in module.entry.ops if op.attrs.get("strategy") == "product"]
    p, body = products.recorded(op.attrs), module.function(op.attrs["body"])
    x, y = products.factors(op.attrs, body)
    assert products.sizes(op.attrs, p)[1:] == (49, 256, 2304)
    assert products.windowed(op.attrs, p, body, x) and not products.windowed(op.attrs, p, body, y)
    assert op.attrs["split"] == "rows"
    assert products.split(op.attrs, p, body, "rows", (32 << 10, 1 << 20), 4, (13, 16)) == "columns"


def test_a_product_of_two_packed_factors_splits_its_rows() -> None:
    module = PassManager(pipeline("c", 2)).run(parse(PACKED)).module
    products = [op.attrs for op in module.entry.ops if op.attrs.get("strategy") == "product"]
    assert [a["split"] for a in products] == ["rows"]


def test_uneven_row_slivers_are_shared_evenly() -> None:
    """Rows split between threads in whole slivers would be uneven here (7 slivers of 6 rows):
    the printer gives each thread half of the rows instead, records the choice, and has an
    exact kernel for each thread's partial sliver (3 rows for two threads); a product whose
    threads split evenly in whole slivers keeps them."""
    from gdv.backends import c
    from gdv.ir import products

    module = PassManager(pipeline("c", 2)).run(parse(UNEVEN)).module
    (op,) = [op for op in module.entry.ops if op.attrs.get("strategy") == "product"]
    assert products.sizes(op.attrs, products.recorded(op.attrs))[1] == 42
    assert op.attrs["micro"][0] == 6 and op.attrs["split"] == "rows"
    choices = [ch["choice"] for ch in c.printer_choices(module)]
    assert "balanced rows" in choices
    text = c.lower(module)
    assert "i_lo = tid * INT64_C(42) / nt;" in text and "(mr - ii >= 3)" in text
    even = PassManager(pipeline("c", 2)).run(parse(MID)).module
    assert "balanced rows" not in [ch["choice"] for ch in c.printer_choices(even)]


@pytest.mark.parametrize("program", ["mid", "late", "packed", "uneven"])
def test_every_thread_count_gives_the_reference_bits(tmp_path, program) -> None:
    source = {"mid": MID, "late": LATE, "packed": PACKED, "uneven": UNEVEN}[program]
    inputs = _inputs(source, 7)
    want = reference.run(parse(source), inputs)[0]
    for threads in (1, 2, 3):
        got = _run_with_threads(tmp_path, source, inputs, threads)
        assert reference.bit_equal(got, want), (threads, reference.describe_difference(got, want))
