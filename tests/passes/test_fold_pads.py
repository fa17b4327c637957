"""A kernel's `fill` (IR_SPEC section 7, since gdv 0.9) and `fold-pads` (issue 16): the
verifier's rules, the meaning in every layer (reference, SMT, bounds, C) against the same
kernel reading the `pad` on concrete values, the pass's conditions, its exact obligations and
its certificate."""

# ruff: noqa: E501  (IR programs written out line by line)

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends import reference
from gdv.driver import CompileOptions, compile_module
from gdv.ir.diagnostics import IRError
from gdv.ir.printer import print_module
from gdv.passes import pipelines
from gdv.passes.fold_pads import FoldPads
from gdv.passes.manager import PassManager
from gdv.validate.discharge import discharge
from gdv.validate.equivalence import check_equivalence

# A 3x3 cross-correlation of one 5x6 plane over a [low, high] padded copy: space (h, w, kh, kw).
PADDED = """func @main(%x: f32[5,6] {range = [-4.0, 4.0]}, %w: f32[3,3] {range = [-1.0, 1.0]}) -> f32[OH,OW] {
  %p = pad(%x) {low = [LH, LW], high = [HH, HW], value = VALUE} : f32[PH,PW]
  %y = kernel(%p, %w) {body = "b", space = [OH, OW, 3, 3], maps = [[[1, 0, 1, 0, 0], [0, 1, 0, 1, 0]], [[0, 0, 1, 0, 0], [0, 0, 0, 1, 0]]], out = [0, 1], reduce = [2, 3], combiner = "add"} : f32[OH,OW]
  return %y
}

func @b(%a: f32[], %c: f32[]) -> f32[] {
  %m = mul(%a, %c) : f32[]
  return %m
}
"""

FILLED = """func @main(%x: f32[5,6] {range = [-4.0, 4.0]}, %w: f32[3,3] {range = [-1.0, 1.0]}) -> f32[OH,OW] {
  %y = kernel(%x, %w) {body = "b", space = [OH, OW, 3, 3], maps = [[[1, 0, 1, 0, NLH], [0, 1, 0, 1, NLW]], [[0, 0, 1, 0, 0], [0, 0, 0, 1, 0]]], out = [0, 1], reduce = [2, 3], combiner = "add", fill = [[0, VALUE]]} : f32[OH,OW]
  return %y
}

func @b(%a: f32[], %c: f32[]) -> f32[] {
  %m = mul(%a, %c) : f32[]
  return %m
}
"""


def _text(template: str, low=(1, 1), high=(1, 1), value="0.0") -> str:
    ph, pw = 5 + low[0] + high[0], 6 + low[1] + high[1]
    subs = {
        "NLH": str(-low[0]),
        "NLW": str(-low[1]),
        "LH": str(low[0]),
        "LW": str(low[1]),
        "HH": str(high[0]),
        "HW": str(high[1]),
        "PH": str(ph),
        "PW": str(pw),
        "OH": str(ph - 2),
        "OW": str(pw - 2),
        "VALUE": value,
    }
    for key in sorted(subs, key=len, reverse=True):
        template = template.replace(key, subs[key])
    return template


SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3.0e38], np.float32)


def _inputs(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in (("x", (5, 6)), ("w", (3, 3))):
        v = (rng.standard_normal(shape) * 3).astype(np.float32)
        mask = rng.random(shape) < 0.2
        v[mask] = SPECIAL[rng.integers(0, len(SPECIAL), shape)][mask]
        out[name] = v
    return out


@given(
    st.tuples(st.integers(0, 2), st.integers(0, 2)),
    st.tuples(st.integers(0, 2), st.integers(0, 2)),
    st.sampled_from(["0.0", "-0.0", "1.5", "-inf", "nan"]),
    st.integers(0, 2**16),
)
def test_the_reference_reads_the_fill_outside_the_operand(low, high, value, seed) -> None:
    """A filled kernel gives the bits of the same kernel over the padded copy, with every
    padding and fill value (NaN, -inf, -0.0 included); with another fill value it does not
    (wherever a padded position meets a nonzero finite weight)."""
    ins = _inputs(seed)
    want = reference.run(parse(_text(PADDED, low, high, value)), ins)[0]
    got = reference.run(parse(_text(FILLED, low, high, value)), ins)[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)
    if low != (0, 0) or high != (0, 0):
        ins["w"][...] = 1.0
        ins["x"][...] = 2.0
        other = reference.run(parse(_text(FILLED, low, high, "7.0")), ins)[0]
        same = reference.run(parse(_text(PADDED, low, high, "0.0")), ins)[0]
        assert not reference.bit_equal(other, same)


@pytest.mark.parametrize("value", ["0.0", "-inf"])
def test_the_smt_meaning_is_the_padded_kernels(value) -> None:
    """Proved equal to the kernel over the pad; with another fill value, refuted with a
    counterexample the reference confirms."""
    ok = check_equivalence(parse(_text(PADDED, value=value)), parse(_text(FILLED, value=value)))
    assert ok.verdict == "equivalent", ok
    bad = check_equivalence(parse(_text(PADDED, value=value)), parse(_text(FILLED, value="1.0")))
    assert bad.verdict == "not-equivalent", bad
    cex = bad.counterexample.inputs
    a = reference.run(parse(_text(PADDED, value=value)), cex)[0]
    b = reference.run(parse(_text(FILLED, value="1.0")), cex)[0]
    assert not reference.bit_equal(a, b)


def test_a_shifted_map_without_its_fill_is_not_equivalent() -> None:
    """Dropping the fill (reads then shift inside the operand) is rejected: the maps read
    outside it."""
    with pytest.raises(IRError) as e:
        parse(_text(FILLED).replace(", fill = [[0, 0.0]]", ""))
    assert "reads indices -1..5" in e.value.message


def test_bounds_hold_the_fill_value() -> None:
    """The bound of a filled read is the pad rule's: the hull of the operand's and the fill's."""
    from gdv.validate.bounds.program import analyze

    a = analyze(parse(_text(PADDED, value="100.0")))
    b = analyze(parse(_text(FILLED, value="100.0")))
    assert a.outputs[0].interval == b.outputs[0].interval
    assert b.outputs[0].interval[1] >= 100.0
    assert a.outputs[0].abs == b.outputs[0].abs


@pytest.mark.parametrize(
    "fill, message",
    [
        ("[[2, 0.0]]", "fill names operands [2]"),
        ("[[1, 0.0], [0, 0.0]]", "in increasing order"),
        ("[[0, 0.0], [0, 1.0]]", "each at most once"),
        ("[[0]]", "[operand, value] pairs"),
        ('[[0, "a"]]', "[operand, value] pairs"),
    ],
)
def test_the_verifier_rejects_a_malformed_fill(fill, message) -> None:
    with pytest.raises(IRError) as e:
        parse(_text(FILLED).replace("fill = [[0, 0.0]]", f"fill = {fill}"))
    assert message in e.value.message
    assert e.value.loc is not None and e.value.loc.line == 2


CONV = """func @main(%x: f32[1,C,H,W], %w: f32[C,C,3,3], %v: f32[C,C,3,3]) -> f32[1,C,HO,WO] {
  %a = conv2d(%x, %w) {stride = [1, 1], padding = [[1, 1], [1, 1]], dilation = [1, 1], groups = 1} : f32[1,C,H,W]
  %b = relu(%a) : f32[1,C,H,W]
  %c = conv2d(%b, %v) {stride = [S, S], padding = [[1, 1], [1, 1]], dilation = [1, 1], groups = 1} : f32[1,C,HO,WO]
  %r = relu(%c) : f32[1,C,HO,WO]
  return %r
}
"""
"""Two convolutions: the second reads the first's output, a value in the arena, through a pad
that `fold-pads` folds (the first's pad reads a parameter and stays)."""


def _conv(c: int = 16, h: int = 12, w: int = 12, stride: int = 1) -> str:
    subs = {"HO": (h - 1) // stride + 1, "WO": (w - 1) // stride + 1, "C": c, "H": h, "W": w}
    text = CONV.replace("[S, S]", f"[{stride}, {stride}]")
    for key in ("HO", "WO", "C", "H", "W"):
        text = text.replace(key, str(subs[key]))
    return text


def _conv_inputs(c: int, h: int, w: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    out = {
        "x": rng.standard_normal((1, c, h, w)).astype(np.float32),
        "w": rng.standard_normal((c, c, 3, 3)).astype(np.float32),
        "v": rng.standard_normal((c, c, 3, 3)).astype(np.float32),
    }
    out["x"][0, 0, 0, :3] = [np.nan, -0.0, np.inf]
    out["v"][0, 0, 0, 0] = np.inf  # 0 * inf: a padded read gives NaN, as the padded copy does
    out["v"][1, 1, 2, 2] = -np.inf
    return out


@pytest.fixture
def every_host(monkeypatch):
    """The pass folds whatever this host's vector width, at stride 2 too, and over rows of any
    width (by default only with 64-byte vectors, at stride 1, over rows a micro-tile wide):
    narrower hosts then pack the filled slivers, guarded."""
    from gdv.passes import fold_pads

    monkeypatch.setattr(fold_pads, "FOLD_MIN_VECTOR_BYTES", 0)
    monkeypatch.setattr(fold_pads, "FOLD_STRIDES", (1, 2))
    monkeypatch.setattr(fold_pads, "FOLD_MIN_WIDTH_TILES", 0)


@pytest.mark.parametrize("level", [2, 3])
def test_a_conv_folds_its_pad_proves_and_runs_in_c(every_host, level) -> None:
    """The second conv's pad goes into its product as a fill: the obligation is proved, the
    final program has one pad (the first conv's, of a parameter), and the C target gives the
    reference's bits (at -O2 the source program's too)."""
    text = _conv()
    comp = compile_module(text, CompileOptions(target="c", level=level, cache_dir=None))
    assert comp.verdict == "proved"
    (rec,) = [r for r in comp.records if r.name == "fold-pads"]
    assert [o.id for o in rec.obligations] == ["fold-pads/fold-pad/equivalence"]
    final = print_module(comp.module)
    assert final.count("pad(") == 1 and final.count("fill = [[") == 1
    ins = _conv_inputs(16, 12, 12, level)
    got = comp(**ins)[0]
    want = reference.run(comp.module, ins)[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)
    if level == 2:
        exact = reference.run(parse(text), ins)[0]
        assert reference.bit_equal(got, exact), reference.describe_difference(got, exact)


@pytest.mark.parametrize(
    "c, h, w, stride",
    [
        (64, 56, 56, 1),
        (64, 28, 28, 2),
        (32, 13, 17, 1),
        (48, 30, 30, 2),
        (16, 7, 7, 1),
        (24, 9, 40, 1),
    ],
)
def test_the_folded_conv_is_bit_exact_in_c(every_host, c, h, w, stride) -> None:
    """Masked runs (64-byte vectors: the slivers with a lane outside the input through masks,
    the others plain, one run at stride 1, two at stride 2) or guarded packing (narrower
    vectors) give the padded program's bits: widths that are and are not multiples of the
    sliver, edge slivers, infinite weights meeting the padding."""
    text = _conv(c, h, w, stride)
    comp = compile_module(text, CompileOptions(target="c", level=2, cache_dir=None))
    assert comp.verdict == "proved"
    assert "fill = [[" in print_module(comp.module)
    ins = _conv_inputs(c, h, w, c + h)
    got = comp(**ins)[0]
    want = reference.run(parse(text), ins)[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


def test_avx512_code_reads_the_unpadded_input_through_masks(monkeypatch) -> None:
    """With 64-byte vectors (the C source only: it is not run here) the folded conv's full
    column slivers go to the masked and plain run micro-kernels; no padded copy is made."""
    from gdv.backends.c import lower, printer_choices

    monkeypatch.setenv("GDV_C_ISA", "avx512")
    comp = compile_module(_conv(64, 56, 56), CompileOptions(target="c", level=3, cache_dir=None))
    assert comp.verdict == "proved"
    source = lower(comp.module)
    assert "_r1_z_fma(" in source and "ymask[js]" in source
    assert not any(c["choice"] == "fill" for c in printer_choices(comp.module))


def _run_fold(text: str):
    module = parse(text)
    return PassManager([FoldPads()]).run(module)


LOOP = """func @main(%x: f32[4], %w: f32[2,3]) -> (f32[2,4], OUT2) {
  %e = exp(%x) : f32[4]
  %p = pad(%e) {low = [1], high = [1], value = 0.0} : f32[6]
  %y = kernel(%w, %p) {body = "b", space = [2, 4, 3], maps = [[[1, 0, 0, 0], [0, 0, 1, 0]], [[0, 1, 1, 0]]], out = [0, 1], reduce = [2], combiner = "add", strategy = "product", batch = [], rows = [0], cols = [1], row_factor = 0, micro = [4, 4], blocks = [4, 3, 4], split = "none"} : f32[2,4]
  RETURN
}

func @b(%a: f32[], %c: f32[]) -> f32[] {
  %m = mul(%a, %c) : f32[]
  return %m
}
"""


def test_the_certificate_and_obligation_of_a_fold(every_host) -> None:
    """One rewrite citing the obligation, then the pad's removal; the obligation's two sides
    are the pad with the kernel and the filled kernel, proved equal."""
    text = LOOP.replace("(f32[2,4], OUT2)", "f32[2,4]").replace("RETURN", "return %y")
    result = _run_fold(text)
    (rec,) = result.records
    (ob,) = rec.obligations
    assert [s.kind for s in rec.steps] == ["rewrite", "remove"]
    assert rec.steps[0].obligation == 0 and rec.steps[1].removed == ["p"]
    assert [o.name for o in ob.src.ops] == ["pad", "kernel"]
    assert [o.name for o in ob.tgt.ops] == ["kernel"]
    (outcome,) = discharge([ob], jobs=1, use_cache=False)
    assert outcome.status == "proved", outcome.reason
    (y,) = [o for o in result.module.function("main").ops if o.result == "y"]
    assert y.operands == ["w", "e"] and y.attrs["fill"] == [[1, 0.0]]
    assert y.attrs["maps"][1] == [[0, 1, 1, -1]]
    ins = {"x": np.array([0.5, -1.0, np.inf, 2.0], np.float32), "w": np.ones((2, 3), np.float32)}
    want = reference.run(parse(text), ins)[0]
    for module in (result.module, parse(print_module(result.module))):
        got = reference.run(module, ins)[0]
        assert reference.bit_equal(got, want), reference.describe_difference(got, want)
    exe = compile_module(
        print_module(result.module), CompileOptions(target="c", level=0, cache_dir=None)
    )
    got = exe(**ins)[0]  # a hand-scheduled product reading a parameter's fill: guarded packing
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


@pytest.mark.parametrize(
    "out2, ret, why",
    [
        ("f32[6]", "return %y, %p", "the pad is returned"),
        ("f32[6]", "%q = exp(%p) : f32[6]\n  return %y, %q", "the pad has another reader"),
        ("f32[4]", "return %y, %e", "the pad's operand is returned (it is not in the arena)"),
    ],
)
def test_a_pad_with_other_uses_stays(every_host, out2, ret, why) -> None:
    result = _run_fold(LOOP.replace("OUT2", out2).replace("RETURN", ret))
    assert not result.records[0].obligations, why
    assert any(o.name == "pad" for o in result.module.function("main").ops), why


def test_pads_the_c_target_would_not_read_in_place_stay(every_host) -> None:
    """An f64 product, a pad of a parameter, and a pad the row factor reads keep their pads; a
    loop nest folds it (`NESTS`), unless nests are left out."""
    plain = LOOP.replace("(f32[2,4], OUT2)", "f32[2,4]").replace("RETURN", "return %y")
    assert _run_fold(plain).records[0].obligations  # the base case folds
    schedule = ', strategy = "product", batch = [], rows = [0], cols = [1], row_factor = 0, micro = [4, 4], blocks = [4, 3, 4], split = "none"'
    nest = plain.replace(schedule, "")
    assert _run_fold(nest).records[0].obligations
    from gdv.passes import fold_pads

    with pytest.MonkeyPatch.context() as m:
        m.setattr(fold_pads, "NESTS", False)
        assert not _run_fold(nest).records[0].obligations
    assert not _run_fold(plain.replace("f32", "f64")).records[0].obligations
    param = plain.replace("  %e = exp(%x) : f32[4]\n", "").replace("pad(%e)", "pad(%x)")
    assert not _run_fold(param).records[0].obligations
    rows = plain.replace("row_factor = 0", "row_factor = 1").replace(
        "rows = [0], cols = [1]", "rows = [1], cols = [0]"
    )
    assert not _run_fold(rows).records[0].obligations


def test_narrow_vectors_and_rows_keep_their_pads(monkeypatch) -> None:
    """By default a product folds only with 64-byte vectors (its `vector` lanes) and over rows
    at least a micro-tile wide."""
    from gdv.passes import fold_pads

    wide_rows = LOOP.replace("f32[4]", "f32[16]").replace("f32[6]", "f32[18]")
    wide_rows = wide_rows.replace("f32[2,4]", "f32[2,16]").replace(
        "space = [2, 4, 3]", "space = [2, 16, 3]"
    )
    plain16 = wide_rows.replace("(f32[2,16], OUT2)", "f32[2,16]").replace("RETURN", "return %y")
    assert not _run_fold(plain16).records[0].obligations  # 4-byte vectors
    wide16 = plain16.replace('split = "none"', 'split = "none", vector = 16').replace(
        "micro = [4, 4]", "micro = [4, 16]"
    )
    assert _run_fold(wide16).records[0].obligations
    assert (
        not _run_fold(wide16.replace("micro = [4, 16]", "micro = [4, 32]")).records[0].obligations
    )
    monkeypatch.setattr(fold_pads, "FOLD_MIN_WIDTH_TILES", 0)
    plain = LOOP.replace("(f32[2,4], OUT2)", "f32[2,4]").replace("RETURN", "return %y")
    assert not _run_fold(plain).records[0].obligations
    wide = plain.replace('split = "none"', 'split = "none", vector = 16').replace(
        "micro = [4, 4]", "micro = [4, 16]"
    )
    assert _run_fold(wide).records[0].obligations


NEST_POOL = """func @main(%x: f32[2,9,34]) -> (f32[2,5,34], f32[2,5,17]) {
  %r = kernel(%x) {body = "id", space = [2, 5, 34, 3], maps = [[[1, 0, 0, 0, 0], [0, 2, 0, 1, -1], [0, 0, 1, 0, 0]]], out = [0, 1, 2], reduce = [3], combiner = "max", fill = [[0, -inf]]} : f32[2,5,34]
  %c = kernel(%r, %r) {body = "mx", space = [2, 5, 17], maps = [[[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 2, -1]], [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 2, 0]]], out = [0, 1, 2], reduce = [], combiner = "none", fill = [[0, -inf]]} : f32[2,5,17]
  return %r, %c
}

func @id(%a: f32[]) -> f32[] {
  return %a
}

func @mx(%a: f32[], %b: f32[]) -> f32[] {
  %m = max(%a, %b) : f32[]
  return %m
}
"""
"""Loop nests (a max over three rows at stride 2 and a max over column pairs at stride 2,
half of whose reads fall outside) reading -inf outside their operands, as a max pool's pad."""


@pytest.mark.parametrize("level", [0, 1, 2])
def test_a_nest_kernel_reads_its_fill_through_guards_in_c(level) -> None:
    """The C nest printer reads a filled operand through a guard per read (no copy of the
    operand is made), in its plain, vector and scheduled loops: the reference's bits, NaN and
    -0.0 included."""
    rng = np.random.default_rng(level)
    x = rng.standard_normal((2, 9, 34)).astype(np.float32)
    x[0, 0, :4] = [np.nan, -0.0, np.inf, -np.inf]
    want = reference.run(parse(NEST_POOL), {"x": x})
    comp = compile_module(NEST_POOL, CompileOptions(target="c", level=level, cache_dir=None))
    assert comp.verdict == "proved"
    got = comp(x=x)
    for g, w in zip(got, want, strict=True):
        assert reference.bit_equal(g, w), reference.describe_difference(g, w)
    # the fill is read: with +0.0 instead of -inf the border maxima of negative values differ
    zero = reference.run(parse(NEST_POOL.replace("-inf", "0.0")), {"x": x})
    assert not reference.bit_equal(zero[0], want[0]) and not reference.bit_equal(zero[1], want[1])


def test_fold_pads_runs_before_the_memory_plan_of_cpu_targets() -> None:
    """At -O2 and -O3 on the C target, after the schedules and fusions, before plan-memory;
    not at -O1, nor for the reference interpreter."""
    assert pipelines.PASSES["fold-pads"] is FoldPads
    for level in (2, 3):
        names = pipelines.pass_names("c", level)
        assert names.index("fold-pads") == names.index("plan-memory") - 1
    assert "fold-pads" not in pipelines.pass_names("c", 1)
    for level in (0, 1, 2, 3):
        assert "fold-pads" not in pipelines.pass_names("reference", level)


def test_the_evidence_bundle_of_a_fold_verifies(every_host, tmp_path) -> None:
    """The independent checker replays the fold's certificate (the rewrite and the pad's
    removal), re-proves its obligation and accepts the bundle."""
    import json

    from gdv.evidence.bundle import write_bundle
    from gdv.evidence.verify import verify_bundle

    comp = compile_module(_conv(), CompileOptions(target="c", level=2, cache_dir=None))
    bundle = write_bundle(comp, tmp_path / "m.evidence")
    report = verify_bundle(bundle)
    assert report.ok, [c for c in report.checks if not c.ok]
    (cert,) = bundle.glob("certificates/*-fold-pads.json")
    data = json.loads(cert.read_text())
    assert [s["kind"] for s in data["steps"]] == ["rewrite", "remove"]


def test_an_epilogue_reads_the_fill_too(every_host) -> None:
    """A product's epilogue reads its operands at the reduce dims' first position: a filled
    operand gives its fill there outside it, in the reference, the proof and the C target."""
    plain = LOOP.replace("(f32[2,4], OUT2)", "f32[2,4]").replace("RETURN", "return %y")
    epi = plain.replace('split = "none"', 'split = "none", epilogue = "e"') + (
        "\nfunc @e(%acc: f32[], %a: f32[], %c: f32[]) -> f32[] {\n"
        "  %s = add(%acc, %c) : f32[]\n  return %s\n}\n"
    )
    result = _run_fold(epi)
    (ob,) = result.records[0].obligations
    (outcome,) = discharge([ob], jobs=1, use_cache=False)
    assert outcome.status == "proved", outcome.reason
    ins = {"x": np.array([0.5, -1.0, 3.0, 2.0], np.float32), "w": np.ones((2, 3), np.float32)}
    want = reference.run(parse(epi), ins)[0]
    folded = print_module(result.module)
    got = reference.run(parse(folded), ins)[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)
    exe = compile_module(folded, CompileOptions(target="c", level=0, cache_dir=None))
    got = exe(**ins)[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)
    # column 0's epilogue read is the fill (0.0): the sum plus nothing
    assert got[0, 0] == np.float32(0.0 + np.exp(np.float32(0.5)) + np.exp(np.float32(-1.0)))


POOL = """func @main(%x: f32[1,4,20,20]) -> f32[1,4,10,10] {
  %r = relu(%x) : f32[1,4,20,20]
  %p = pad(%r) {low = [0, 0, 1, 1], high = [0, 0, 1, 1], value = -inf} : f32[1,4,22,22]
  %a = slice(%p) {start = [0, 0, 0, 0], limit = [1, 4, 19, 22], stride = [1, 1, 2, 1]} : f32[1,4,10,22]
  %b = slice(%p) {start = [0, 0, 1, 0], limit = [1, 4, 20, 22], stride = [1, 1, 2, 1]} : f32[1,4,10,22]
  %m = max(%a, %b) : f32[1,4,10,22]
  %c = slice(%p) {start = [0, 0, 2, 0], limit = [1, 4, 21, 22], stride = [1, 1, 2, 1]} : f32[1,4,10,22]
  %n = max(%m, %c) : f32[1,4,10,22]
  %d = slice(%n) {start = [0, 0, 0, 0], limit = [1, 4, 10, 19], stride = [1, 1, 1, 2]} : f32[1,4,10,10]
  %e = slice(%n) {start = [0, 0, 0, 1], limit = [1, 4, 10, 20], stride = [1, 1, 1, 2]} : f32[1,4,10,10]
  %f = max(%d, %e) : f32[1,4,10,10]
  %g = slice(%n) {start = [0, 0, 0, 2], limit = [1, 4, 10, 21], stride = [1, 1, 1, 2]} : f32[1,4,10,10]
  %y = max(%f, %g) : f32[1,4,10,10]
  return %y
}
"""
"""A 3x3 stride-2 max pool with its -inf padding, as the ONNX importer writes one (resnet18's),
over a computed value."""


@pytest.mark.parametrize("level", [2, 3])
def test_a_max_pool_reads_its_padding_through_guards(level) -> None:
    """The max pool's -inf pad folds into the nest that reads it (the row maxima, in a row
    group with the column maxima): proved, no pad left, and the C target gives the reference's
    bits, NaN, infinities and -0.0 included."""
    comp = compile_module(POOL, CompileOptions(target="c", level=level, cache_dir=None))
    assert comp.verdict == "proved"
    final = print_module(comp.module)
    assert "pad(" not in final and "fill = [[0, -inf]" in final and "row_group" in final
    rng = np.random.default_rng(level)
    x = rng.standard_normal((1, 4, 20, 20)).astype(np.float32)
    x[0, 0, 0, :4] = [np.nan, -0.0, np.inf, -np.inf]
    x[0, 1] = -1.0  # relu gives +0.0 everywhere: the padding's -inf never wins
    got = comp(x=x)[0]
    want = reference.run(parse(POOL), {"x": x})[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


ROW_MAX = """func @main(%x: f32[2,5,H,W]) -> f32[2,5,H,W] {
  %y = neg(%x) : f32[2,5,H,W]
  %p = pad(%y) {low = [0, 0, LH, 1], high = [0, 0, LH, 1], value = -inf} : f32[2,5,PH,PW]
  %s0 = slice(%p) {start = [0, 0, 0, 0], limit = [2, 5, H, W], stride = [1, 1, 1, 1]} : f32[2,5,H,W]
  %s1 = slice(%p) {start = [0, 0, LH, 1], limit = [2, 5, HL, W1], stride = [1, 1, 1, 1]} : f32[2,5,H,W]
  %s2 = slice(%p) {start = [0, 0, LH2, 2], limit = [2, 5, PH, PW], stride = [1, 1, 1, 1]} : f32[2,5,H,W]
  %m1 = max(%s0, %s1) : f32[2,5,H,W]
  %r = max(%m1, %s2) : f32[2,5,H,W]
  return %r
}
"""
"""A max over three padded neighbours (along W, or along H and W together) outside a row group:
the nest's loops over H and the channels continue its W loop's strides in every operand."""


@pytest.mark.parametrize("level", [2, 3])
@pytest.mark.parametrize(("h", "w", "lh"), [(4, 112, 0), (3, 17, 1), (1, 40, 0)])
def test_a_guarded_read_keeps_its_dims_loops(level, h, w, lh) -> None:
    """A filled operand's guards test each loop index against its own dim's extent, so a dim
    they read is never merged into the innermost loop (the printer once ran H * W as one loop
    and read the -inf fill past W: every row after the first wrong)."""
    subs = {"HL": h + lh, "W1": w + 1, "LH2": 2 * lh, "PH": h + 2 * lh, "PW": w + 2, "LH": lh}
    text = ROW_MAX
    for key in sorted(subs, key=len, reverse=True):
        text = text.replace(key, str(subs[key]))
    text = text.replace("H", str(h)).replace("W", str(w))
    comp = compile_module(text, CompileOptions(target="c", level=level, cache_dir=None))
    assert comp.verdict == "proved"
    assert "fill = [[0, -inf]" in print_module(comp.module)
    x = np.random.default_rng(h * w).standard_normal((2, 5, h, w)).astype(np.float32)
    x[0, 0, 0, :3] = [np.nan, -0.0, np.inf]
    got = comp(x=x)[0]
    want = reference.run(parse(text), {"x": x})[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)
