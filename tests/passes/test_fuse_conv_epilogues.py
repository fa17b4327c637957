"""`fuse-conv-epilogues` (issue 16) and conv2d's `epilogue` (IR_SPEC, since gdv 0.8): the
verifier's rules, the meaning in every layer (reference, SMT, bounds) against the unfused
program on concrete values, the pass's conditions and its exact obligations, and an evidence
bundle that the independent checker accepts."""

# ruff: noqa: E501  (IR programs written out line by line)

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from gdv.api import parse
from gdv.backends import reference
from gdv.driver import CompileOptions, compile_module
from gdv.ir.diagnostics import IRError
from gdv.passes import pipelines
from gdv.validate.equivalence import check_equivalence


@pytest.fixture(autouse=True)
def _any_vector_width(monkeypatch):
    """The pass runs whatever this host's vector width (by default only with 64 bytes)."""
    monkeypatch.setattr(pipelines, "CONV_EPILOGUE_MIN_VECTOR_BYTES", 0)


UNFUSED = """func @main(%x: f32[1,4,5,5] {range = [-4.0, 4.0]}, %w: f32[4,1,3,3] {range = [-1.0, 1.0]}, %b: f32[4] {range = [-1.0, 1.0]}) -> f32[1,4,5,5] {
  %c = conv2d(%x, %w) {stride = [1, 1], padding = [[1, 1], [1, 1]], dilation = [1, 1], groups = 4} : f32[1,4,5,5]
  %bb = broadcast(%b) {dims = [1]} : f32[1,4,5,5]
  %a = add(%c, %bb) : f32[1,4,5,5]
  %lo = constant() {value = 0.0} : f32[1,4,5,5]
  %hi = constant() {value = 6.0} : f32[1,4,5,5]
  %m = max(%a, %lo) : f32[1,4,5,5]
  %r = min(%m, %hi) : f32[1,4,5,5]
  return %r
}
"""

FUSED = """func @main(%x: f32[1,4,5,5] {range = [-4.0, 4.0]}, %w: f32[4,1,3,3] {range = [-1.0, 1.0]}, %b: f32[4] {range = [-1.0, 1.0]}) -> f32[1,4,5,5] {
  %r = conv2d(%x, %w, %b) {stride = [1, 1], padding = [[1, 1], [1, 1]], dilation = [1, 1], groups = 4, epilogue = "e"} : f32[1,4,5,5]
  return %r
}

func @e(%acc: f32[], %bias: f32[]) -> f32[] {
  %a = add(%acc, %bias) : f32[]
  %lo = constant() {value = 0.0} : f32[]
  %hi = constant() {value = LO_OR_HI} : f32[]
  %m = max(%a, %lo) : f32[]
  %r = min(%m, %hi) : f32[]
  return %r
}
"""


def _fused(hi: str = "6.0") -> str:
    return FUSED.replace("LO_OR_HI", hi)


SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 6.0, -6.0], np.float32)


def _inputs(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in (("x", (1, 4, 5, 5)), ("w", (4, 1, 3, 3)), ("b", (4,))):
        v = (rng.standard_normal(shape) * 4).astype(np.float32)
        mask = rng.random(shape) < 0.2
        v[mask] = SPECIAL[rng.integers(0, len(SPECIAL), shape)][mask]
        out[name] = v
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_reference_applies_the_epilogue_per_channel(seed) -> None:
    ins = _inputs(seed)
    got = reference.run(parse(_fused()), ins)[0]
    want = reference.run(parse(UNFUSED), ins)[0]
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)
    # and the epilogue is applied: the unclipped conv differs where the sum exceeds 6
    wrong = reference.run(parse(_fused("1e30")), ins)[0]
    assert not reference.bit_equal(wrong, want) or not (np.nan_to_num(want) > 5.9).any()


def test_the_smt_meaning_is_the_unfused_programs() -> None:
    """The fused conv is proved equal to the unfused program; with the clip at 7 instead of
    6 it is refuted with a counterexample the reference confirms."""
    ok = check_equivalence(parse(UNFUSED), parse(_fused()))
    assert ok.verdict == "equivalent", ok
    bad = check_equivalence(parse(UNFUSED), parse(_fused("7.0")))
    assert bad.verdict == "not-equivalent", bad
    cex = bad.counterexample.inputs
    a = reference.run(parse(UNFUSED), cex)[0]
    b = reference.run(parse(_fused("7.0")), cex)[0]
    assert not reference.bit_equal(a, b)


def test_bounds_agree_with_the_unfused_program() -> None:
    """The fused conv's bound is the unfused program's: the conv's dot bound, then the
    epilogue's ops by their own rules (the clip bounds the values to [0, 6])."""
    from gdv.validate.bounds.program import analyze

    a, b = analyze(parse(UNFUSED)), analyze(parse(_fused()))
    assert a.outputs[0].interval == b.outputs[0].interval
    assert b.outputs[0].interval[0] == 0.0 and b.outputs[0].interval[1] == pytest.approx(6.0)
    assert a.outputs[0].abs == b.outputs[0].abs > 0
    wide = analyze(parse(_fused("1e30")))
    assert wide.outputs[0].interval[1] > 6.0


@pytest.mark.parametrize(
    "text, message",
    [
        (_fused().replace(', epilogue = "e"', ""), "only with an epilogue"),
        (
            _fused().replace("%b: f32[4] {", "%b: f32[5] {"),
            "one value per output channel",
        ),
        (_fused().replace('epilogue = "e"', 'epilogue = "nope"'), "not a function of the module"),
        (
            _fused()
            .replace("%acc: f32[], %bias: f32[]", "%acc: f32[]")
            .replace("add(%acc, %bias)", "add(%acc, %acc)"),
            "expected (f32[], f32[])",
        ),
        (
            _fused().replace(
                "  %a = add(%acc, %bias) : f32[]",
                "  %a = add(%acc, %bias) : f32[]\n  %q = reduce_sum(%a) {axes = []} : f32[]",
            ),
            "scalar elementwise ops",
        ),
    ],
)
def test_the_verifier_rejects_a_malformed_epilogue(text, message) -> None:
    with pytest.raises(IRError) as e:
        parse(text)
    assert message in str(e.value), str(e.value)


RELU6_PROJECTION = """func @main(%x: f32[1,32,12,12], %w: f32[32,1,3,3], %b: f32[32], %p: f32[16,32,1,1]{extra}) -> f32[1,16,12,12] {{
  %c = conv2d(%x, %w) {{stride = [1, 1], padding = [[1, 1], [1, 1]], dilation = [1, 1], groups = 32}} : f32[1,32,12,12]
  %bb = broadcast(%b) {{dims = [1]}} : f32[1,32,12,12]
  %a = add(%c, %bb) : f32[1,32,12,12]
  %lo = constant() {{value = 0.0}} : f32[1,32,12,12]
  %hi = constant() {{value = 6.0}} : f32[1,32,12,12]
  %m = max(%a, %lo) : f32[1,32,12,12]
  %r = min(%m, %hi) : f32[1,32,12,12]
  {tail}
}}
"""


def _compile(tmp_path, text: str, target: str = "c", level: int = 2):
    path = tmp_path / "m.gdv"
    path.write_text(text)
    return compile_module(
        str(path),
        CompileOptions(target=target, level=level, cache_dir=str(tmp_path / "cache")),
    )


@pytest.mark.parametrize("level", [2, 3])
def test_the_activation_becomes_the_convs_epilogue(tmp_path, level) -> None:
    tail = (
        "%y = conv2d(%r, %p) {stride = [1, 1], padding = [[0, 0], [0, 0]], dilation = [1, 1], "
        "groups = 1} : f32[1,16,12,12]\n  return %y"
    )
    comp = _compile(tmp_path, RELU6_PROJECTION.format(extra="", tail=tail), level=level)
    assert comp.verdict == "proved"
    conv = comp.module.entry.ops[0]
    assert conv.name == "conv2d" and len(conv.operands) == 3 and "epilogue" in conv.attrs
    fused = [o for o in comp.outcomes if "fuse-conv-epilogues" in o.obligation.id]
    assert fused and all(o.status == "proved" for o in fused)
    ins = reference.random_inputs(comp.source.entry, 3)
    got = comp(**ins)[0]
    assert reference.bit_equal(got, reference.run(comp.module, ins)[0])
    if level == 2:
        assert reference.bit_equal(got, reference.run(comp.source, ins)[0])


@pytest.mark.parametrize(
    "extra, tail",
    [
        # the conv's activation is returned beside the conv itself: the conv is read twice
        ("", "return %r, %c"),
        # a residual (a whole tensor) in the consumer: not one value per channel
        (", %q: f32[1,32,12,12]", "%t = add(%r, %q) : f32[1,32,12,12]\n  return %t"),
    ],
)
def test_no_conv_epilogue_where_the_conditions_fail(tmp_path, extra, tail) -> None:
    text = RELU6_PROJECTION.format(extra=extra, tail=tail)
    if "%c" in tail:
        text = text.replace("-> f32[1,16,12,12] {", "-> (f32[1,32,12,12], f32[1,32,12,12]) {")
    else:
        text = text.replace("-> f32[1,16,12,12] {", "-> f32[1,32,12,12] {")
    comp = _compile(tmp_path, text)
    assert comp.verdict == "proved"
    convs = [o for o in comp.module.entry.ops if o.name == "conv2d"]
    if "%q" in extra:
        # the bias and relu6 fuse; the residual add stays a kernel of its own
        assert all(o.name != "kernel" or "q" in o.operands for o in comp.module.entry.ops)
        assert all(len(o.operands) <= 3 for o in convs)
    else:
        assert all("epilogue" not in o.attrs for o in convs)
    ins = reference.random_inputs(comp.source.entry, 5)
    got = comp(**ins)
    for g, w in zip(got, reference.run(comp.source, ins), strict=True):
        assert reference.bit_equal(g, w)


AFFINE = """func @main(%x: f32[1,32,12,12], %w: f32[32,1,3,3], %s: f32[32], %m: f32[32], %b: f32[32], %p: f32[16,32,1,1]) -> f32[1,16,12,12] {
  %c = conv2d(%x, %w) {stride = [1, 1], padding = [[1, 1], [1, 1]], dilation = [1, 1], groups = 32} : f32[1,32,12,12]
  %sb = broadcast(%s) {dims = [1]} : f32[1,32,12,12]
  %mb = broadcast(%m) {dims = [1]} : f32[1,32,12,12]
  %bb = broadcast(%b) {dims = [1]} : f32[1,32,12,12]
  %ms = mul(%mb, %sb) : f32[1,32,12,12]
  %t = sub(%bb, %ms) : f32[1,32,12,12]
  %y = mul(%c, %sb) : f32[1,32,12,12]
  %a = add(%y, %t) : f32[1,32,12,12]
  %z = conv2d(%a, %p) {stride = [1, 1], padding = [[0, 0], [0, 0]], dilation = [1, 1], groups = 1} : f32[1,16,12,12]
  return %z
}
"""


def test_an_epilogue_op_may_read_the_extras_alone(tmp_path) -> None:
    """x * s + (b - m * s) written over the whole tensor: `b - m * s` is in the consumer's own
    body, so the conv's epilogue holds ops that read only its extra operands.
    The reference evaluates each op of the epilogue at every output element (it once gave such
    an op the channel vector's shape and failed the compile's counterexample replay)."""
    comp = _compile(tmp_path, AFFINE)
    assert comp.verdict == "proved"
    conv = comp.module.entry.ops[0]
    assert conv.name == "conv2d" and "epilogue" in conv.attrs
    epi = comp.module.function(conv.attrs["epilogue"])
    acc = epi.params[0].name
    assert any(acc not in o.operands and o.operands for o in epi.ops), "no op reads extras alone"
    for seed in range(3):
        ins = reference.random_inputs(comp.source.entry, seed)
        want = reference.run(comp.source, ins)[0]
        assert reference.bit_equal(reference.run(comp.module, ins)[0], want)
        assert reference.bit_equal(comp(**ins)[0], want)


def test_other_targets_keep_the_activation_a_kernel(tmp_path) -> None:
    """The pass runs for CPU targets only; an interpreter runs the program as written."""
    tail = "return %r"
    text = RELU6_PROJECTION.format(extra="", tail=tail).replace(
        "-> f32[1,16,12,12] {", "-> f32[1,32,12,12] {"
    )
    comp = _compile(tmp_path, text, target="reference")
    assert all("epilogue" not in o.attrs for o in comp.module.entry.ops)


def test_the_evidence_bundle_verifies(tmp_path) -> None:
    """`gdv compile --emit-evidence` on a fused conv: the independent checker replays the pass
    (its added epilogue function included) and accepts the bundle."""
    tail = (
        "%y = conv2d(%r, %p) {stride = [1, 1], padding = [[0, 0], [0, 0]], dilation = [1, 1], "
        "groups = 1} : f32[1,16,12,12]\n  return %y"
    )
    src = tmp_path / "m.gdv"
    src.write_text(RELU6_PROJECTION.format(extra="", tail=tail))
    env = {**os.environ, "GDV_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run(
        [sys.executable, "-m", "gdv", "compile", str(src), "--target", "c", "--emit-evidence",
         "-o", str(tmp_path / "m.c")],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    bundle = next(tmp_path.glob("*.evidence"))
    check = subprocess.run(
        [sys.executable, "-m", "gdv", "evidence", "verify", str(bundle)],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    assert list(bundle.glob("certificates/*-fuse-conv-epilogues.json"))


def test_rank0_clip_bounds_become_literals_of_the_epilogue(tmp_path) -> None:
    """ONNX's Clip gives its bounds as rank-0 constants broadcast to the tensor: after
    fold-layout the clip kernel reads the `constant` ops themselves, shared by every clip. The
    fused conv does not take them as operands: the epilogue computes them (the constant ops
    are in the obligation's source, which still proves exactly)."""
    text = RELU6_PROJECTION.format(extra="", tail="return %r").replace(
        "-> f32[1,16,12,12] {", "-> f32[1,32,12,12] {"
    )
    text = text.replace(
        "%lo = constant() {value = 0.0} : f32[1,32,12,12]",
        "%lo0 = constant() {value = 0.0} : f32[]\n"
        "  %lo = broadcast(%lo0) {dims = []} : f32[1,32,12,12]",
    ).replace(
        "%hi = constant() {value = 6.0} : f32[1,32,12,12]",
        "%hi0 = constant() {value = 6.0} : f32[]\n"
        "  %hi = broadcast(%hi0) {dims = []} : f32[1,32,12,12]",
    )
    comp = _compile(tmp_path, text)
    assert comp.verdict == "proved"
    (conv,) = [o for o in comp.module.entry.ops if o.name == "conv2d"]
    assert len(conv.operands) == 3 and "epilogue" in conv.attrs
    epi = comp.module.function(conv.attrs["epilogue"])
    assert sorted(o.attrs["value"] for o in epi.ops if o.name == "constant") == [0.0, 6.0]
    ins = reference.random_inputs(comp.source.entry, 9)
    assert reference.bit_equal(comp(**ins)[0], reference.run(comp.source, ins)[0])


def test_the_pass_runs_with_64_byte_vectors_only(monkeypatch) -> None:
    """`CONV_EPILOGUE_MIN_VECTOR_BYTES`: on AVX2 the fused relu6 measured slower."""
    monkeypatch.setattr(pipelines, "CONV_EPILOGUE_MIN_VECTOR_BYTES", 64)

    def names(width: int) -> list[str]:
        return [p.name for p in pipelines.pipeline("c", 2, vector_bytes=width)]

    assert "fuse-conv-epilogues" in names(64)
    assert "fuse-conv-epilogues" not in names(32) and "fuse-conv-epilogues" not in names(16)
    assert "fuse-conv-epilogues" not in [p.name for p in pipelines.pipeline("reference", 2)]


def test_the_triton_target_refuses_a_conv_epilogue(tmp_path) -> None:
    """The GPU target has no lowering of a conv2d's epilogue (the pass never makes one there):
    a hand-written one is an input error at the op, exit code 3, not a wrong kernel."""
    src = tmp_path / "f.gdv"
    src.write_text(_fused())
    env = {**os.environ, "GDV_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run(
        [sys.executable, "-m", "gdv", "compile", str(src), "--target", "triton",
         "-o", str(tmp_path / "f_gpu")],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 3, out.stdout + out.stderr
    assert "f.gdv:2:3:" in out.stderr and "conv2d with an epilogue" in out.stderr


def test_the_claims_cache_key_depends_on_the_epilogue(tmp_path) -> None:
    """Two fusions alike but for the clip's bound (6 against 7) have different canonical
    claims, so the proof cache can never answer one with the other's proof; the epilogue's
    own name is not part of the claim (it is renamed by the hash of its text)."""
    from gdv.passes.manager import PassManager
    from gdv.validate.discharge import canonical_claim

    def claim(hi: str) -> str:
        text = RELU6_PROJECTION.format(extra="", tail="return %r").replace(
            "-> f32[1,16,12,12] {", "-> f32[1,32,12,12] {"
        )
        text = text.replace("{value = 6.0}", "{value = " + hi + "}")
        result = PassManager(pipelines.pipeline("c", 2, vector_bytes=64)).run(parse(text))
        (ob,) = [o for o in result.obligations if "fuse-conv-epilogues" in o.id]
        return canonical_claim(ob)

    six, seven = claim("6.0"), claim("7.0")
    assert six != seven
    assert "main.c0" not in six and "epilogue" in six
