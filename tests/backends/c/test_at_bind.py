"""Kernels computed at bind time (`at_bind`; issue 16).

A kernel that reads only bound weights (a batch norm's scale and shift on the torch.export
path) computes the same value in every call. `plan-memory` lists such kernels of the entry in
its `at_bind` attribute (for the parameters the compile was told are bound) and keeps them
out of the arena; the C target computes each once, in `Executable.bind`, with the code a call
would run, and calls skip it. So a bound call must give bit for bit what the unbound program
gives, and the reference backend too (exact modes), whatever subset of the weights is bound.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import sprinkle_specials

from gdv.api import parse
from gdv.backends import c, reference
from gdv.ir.diagnostics import IRError
from gdv.ir.verifier import verify
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline

BN = """func @main(%x: f32[{m},{k}], %w: f32[{k},{n}], %g: f32[{n}], %var: f32[{n}],
           %beta: f32[{n}], %mean: f32[{n}], %w2: f32[{n},{n}]) -> f32[{m},{n}] {{
  %e = constant() {{value = 0.00001}} : f32[]
  %eb = broadcast(%e) {{dims = []}} : f32[{n}]
  %ve = add(%var, %eb) : f32[{n}]
  %sd = sqrt(%ve) : f32[{n}]
  %sc = div(%g, %sd) : f32[{n}]
  %ms = mul(%mean, %sc) : f32[{n}]
  %sh = sub(%beta, %ms) : f32[{n}]
  %p = matmul(%x, %w) : f32[{m},{n}]
  %scb = broadcast(%sc) {{dims = [1]}} : f32[{m},{n}]
  %shb = broadcast(%sh) {{dims = [1]}} : f32[{m},{n}]
  %q = mul(%p, %scb) : f32[{m},{n}]
  %h = add(%q, %shb) : f32[{m},{n}]
  %r = relu(%h) : f32[{m},{n}]
  %y = matmul(%r, %w2) : f32[{m},{n}]
  return %y
}}
"""
WEIGHTS = ("w", "g", "var", "beta", "mean", "w2")
NORM = ("g", "var", "beta", "mean")


def _inputs(m: int, k: int, n: int, seed: int, specials: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {
        "x": rng.standard_normal((m, k)),
        "w": rng.standard_normal((k, n)),
        "g": rng.standard_normal(n),
        "var": rng.uniform(0.0, 2.0, n),
        "beta": rng.standard_normal(n),
        "mean": rng.standard_normal(n),
        "w2": rng.standard_normal((n, n)),
    }
    out = {name: v.astype(np.float32) for name, v in out.items()}
    if specials:
        for name in ("g", "var", "mean"):
            sprinkle_specials(out[name], every=3)
    return out


def _compiled(text: str, level: int, bound: tuple[str, ...]):
    params = c.schedule_parameters()
    return PassManager(pipeline("c", level, bound=bound, **params)).run(parse(text)).module


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert reference.bit_equal(got, want), reference.describe_difference(got, want)


@settings(max_examples=12, deadline=None)
@given(
    m=st.integers(1, 20),
    k=st.integers(1, 24),
    n=st.integers(1, 40),
    level=st.sampled_from([1, 2, 3]),
    told=st.sampled_from([WEIGHTS, NORM, ("g", "var")]),
    bind=st.sampled_from([WEIGHTS, NORM, ("g", "var"), ("var", "beta", "mean")]),
    seed=st.integers(0, 2**16),
    specials=st.booleans(),
)
def test_bound_calls_are_the_program(m, k, n, level, told, bind, seed, specials) -> None:
    """Whatever the compile was told is bound and whatever is bound, a bound call gives bit
    for bit the unbound program's result (and the reference backend's at -O1 and -O2); a
    kernel is computed at bind time exactly when every parameter it reads is bound."""
    text = BN.format(m=m, k=k, n=n)
    module = _compiled(text, level, told)
    listed = module.entry.attrs.get("at_bind", [])
    assert listed, "the scale and shift read only bound parameters"
    inputs = _inputs(m, k, n, seed, specials)
    exe = c.Executable(module)
    want = exe(inputs)[0]
    if level < 3:
        _same(want, reference.run(module, inputs)[0])
    bound = exe.bind({name: inputs[name] for name in bind})
    flags = bound._buffers[exe.lowered.program.bound_slot]
    for h in exe._hoists:
        assert bool(flags[h.index]) == (h.params <= set(bind)), h
    rest = {name: v for name, v in inputs.items() if name not in bind}
    _same(bound(rest)[0], want)
    _same(bound(rest)[0], want)  # a call never writes what the bind computed
    _same(exe(inputs)[0], want)  # the unbound executable computes all of it per call
    _same(bound(rest)[0], want)  # ... into buffers of its own
    more = [name for name in WEIGHTS if name not in bind]
    if more:  # binding the rest later computes what is left, once
        full = bound.bind({name: inputs[name] for name in more})
        assert all(full._buffers[exe.lowered.program.bound_slot])
        _same(full({"x": inputs["x"]})[0], want)
        _same(bound(rest)[0], want)


def test_a_bound_call_reads_what_the_bind_computed() -> None:
    """The calls skip the kernels computed at bind time: a value overwritten after the bind
    shows in the result (a call that computed it again would hide it)."""
    text = BN.format(m=8, k=16, n=32)
    inputs = _inputs(8, 16, 32, 0, False)
    exe = c.Executable(_compiled(text, 2, WEIGHTS))
    bound = exe.bind({name: inputs[name] for name in WEIGHTS})
    hoisted = {h.value: h for h in exe._hoists}
    assert set(hoisted) == set(exe.module.entry.attrs["at_bind"])
    assert "sc" in hoisted  # the shift is fused into the second product's prologue
    slot = exe.lowered.program.slot_of["sc"]
    good = bound({"x": inputs["x"]})[0].copy()
    bound._buffers[slot][:] = np.nan
    assert np.isnan(bound({"x": inputs["x"]})[0]).any()
    assert reference.bit_equal(exe(inputs)[0], good)  # the unbound one computes its own


def test_weights_changed_after_the_bind_change_nothing() -> None:
    text = BN.format(m=4, k=8, n=16)
    inputs = _inputs(4, 8, 16, 1, False)
    exe = c.Executable(_compiled(text, 2, WEIGHTS))
    weights = {name: inputs[name].copy() for name in WEIGHTS}
    bound = exe.bind(weights)
    want = bound({"x": inputs["x"]})[0].copy()
    for v in weights.values():
        v[...] = 7.0
    _same(bound({"x": inputs["x"]})[0], want)


def test_what_plan_memory_lists() -> None:
    """Exactly the kernels computed from told parameters alone, none of them returned; none
    of them in the arena; none at all when nothing is told bound or at -O0."""
    text = BN.format(m=8, k=16, n=32)
    module = _compiled(text, 2, WEIGHTS)
    fn = module.entry
    listed = fn.attrs["at_bind"]
    ops = {op.result: op for op in fn.ops}
    assert listed and all(ops[v].name == "kernel" for v in listed)
    assert not set(listed) & {b[0] for b in fn.attrs["buffers"]}
    assert "at_bind" not in _compiled(text, 2, ()).entry.attrs
    assert "at_bind" not in _compiled(text, 0, WEIGHTS).entry.attrs
    assert _compiled(text, 2, ("g",)).entry.attrs.get("at_bind") is None  # sc reads var too
    reshaped = """func @main(%x: f32[4,6], %g: f32[6]) -> (f32[4,6], f32[2,3]) {
  %e = mul(%g, %g) : f32[6]
  %r = reshape(%e) : f32[2,3]
  %f = reshape(%r) : f32[6]
  %b = broadcast(%f) {dims = [1]} : f32[4,6]
  %y = add(%x, %b) : f32[4,6]
  %h = sqrt(%g) : f32[6]
  %t = reshape(%h) : f32[2,3]
  return %y, %t
}
"""
    module = _compiled(reshaped, 1, ("g",))
    kernels = {op.result for op in module.entry.ops if op.name == "kernel"}
    listed = module.entry.attrs["at_bind"]
    assert "e" in listed and "h" in kernels and "h" not in listed  # %h is returned, reshaped
    rng = np.random.default_rng(3)
    inputs = {"x": rng.standard_normal((4, 6), np.float32), "g": rng.standard_normal(6, np.float32)}
    exe = c.Executable(module)
    bound = exe.bind({"g": inputs["g"]})
    want = reference.run(module, inputs)
    for got, w in zip(bound({"x": inputs["x"]}), want, strict=True):
        _same(got, w)


@pytest.mark.parametrize(
    ("listed", "message"),
    [('["s", "s"]', "at_bind names a value twice"), ("[1]", "must be a list of value names")],
)
def test_the_verifier_checks_the_form_of_at_bind(listed: str, message: str) -> None:
    text = HAND.replace('at_bind = ["s", "t", "y", "b", "nope"]', f"at_bind = {listed}")
    with pytest.raises(IRError) as e:
        verify(parse(text), "loop")
    assert message in e.value.message
    assert e.value.loc is not None and e.value.loc.line == 9


HAND = """func @f1(%a: f32[]) -> f32[] {
  %r = mul(%a, %a) : f32[]
  return %r
}
func @f2(%a: f32[], %b: f32[]) -> f32[] {
  %r = add(%a, %b) : f32[]
  return %r
}
func @main(%x: f32[4], %g: f32[4]) -> (f32[4], f32[4]) {at_bind = ["s", "t", "y", "b", "nope"]} {
  %s = kernel(%g) {body = "f1", space = [4], maps = [[[1, 0]]], out = [0], reduce = [],
      combiner = "none"} : f32[4]
  %u = kernel(%g) {body = "f1", space = [4], maps = [[[1, 0]]], out = [0], reduce = [],
      combiner = "none"} : f32[4]
  %t = kernel(%s, %u) {body = "f2", space = [4], maps = [[[1, 0]], [[1, 0]]], out = [0],
      reduce = [], combiner = "none"} : f32[4]
  %y = kernel(%x, %s) {body = "f2", space = [4], maps = [[[1, 0]], [[1, 0]]], out = [0],
      reduce = [], combiner = "none"} : f32[4]
  %b = reshape(%y) : f32[4]
  %z = kernel(%s, %g) {body = "f2", space = [4], maps = [[[1, 0]], [[1, 0]]], out = [0],
      reduce = [], combiner = "none"} : f32[4]
  %w = kernel(%b, %t) {body = "f2", space = [4], maps = [[[1, 0]], [[1, 0]]], out = [0],
      reduce = [], combiner = "none"} : f32[4]
  return %z, %w
}
"""


def test_the_c_target_computes_once_only_what_may_be() -> None:
    """A hand-written `at_bind` is a plan the C target checks itself: it computes once only
    listed kernels reading parameters and such kernels, not returned (here %s, and %y when %x
    is bound too, read through its reshape %b; %t reads %u, unlisted; %z is unlisted; %b is
    no kernel; %nope no value); results are the reference's whatever is bound."""
    from gdv.ir.ops.kernel import at_bind_params

    module = parse(HAND)
    verify(module, "loop")
    assert at_bind_params(module) == {"s": frozenset({"g"}), "y": frozenset({"g", "x"})}
    rng = np.random.default_rng(4)
    inputs = {"x": rng.standard_normal(4, np.float32), "g": rng.standard_normal(4, np.float32)}
    want = reference.run(module, inputs)
    exe = c.Executable(module)
    assert [h.value for h in exe._hoists] == ["s", "y"]
    for names in (("g",), ("x",), ("x", "g")):
        bound = exe.bind({n: inputs[n] for n in names})
        flags = bound._buffers[exe.lowered.program.bound_slot]
        assert [bool(f) for f in flags] == [{"g"} <= set(names), {"g", "x"} <= set(names)]
        for _ in range(2):
            got = bound({n: v for n, v in inputs.items() if n not in names})
            for g, w in zip(got, want, strict=True):
                _same(g, w)


def test_a_stale_at_bind_in_the_input_compiles(tmp_path) -> None:
    """`at_bind` in a loop-stage input names kernels that `fuse-kernels` then removes; the
    plan replaces the list (`plan-memory` owns it), and the compile proves and runs."""
    from gdv.driver import CompileOptions, compile_module

    src = tmp_path / "hand.gdv"
    src.write_text(HAND)
    comp = compile_module(str(src), CompileOptions(target="c", jobs=1, cache_dir=str(tmp_path)))
    assert comp.verdict == "proved"
    assert "at_bind" not in comp.module.entry.attrs
    rng = np.random.default_rng(5)
    inputs = {"x": rng.standard_normal(4, np.float32), "g": rng.standard_normal(4, np.float32)}
    got = comp.executable()(inputs)
    for g, w in zip(got, reference.run(parse(HAND), inputs), strict=True):
        _same(g, w)


def test_a_bound_compile_proves_and_its_bundle_verifies(tmp_path, capsys) -> None:
    """`gdv compile --bound` lists the kernels in the final stage, proves the plan that keeps
    them apart, and the bundle verifies; a forged `at_bind` that names a value the plan gives an
    arena buffer, certificate and stage edited alike, is refused."""
    import json

    from support import manifest_of, rehash, save_manifest, verify_cli

    from gdv.driver import CompileOptions, compile_module, write_evidence

    src = tmp_path / "bn.gdv"
    src.write_text(BN.format(m=8, k=16, n=32))
    options = CompileOptions(target="c", level=2, bound=WEIGHTS, jobs=1, cache_dir=str(tmp_path))
    comp = compile_module(str(src), options)
    assert comp.verdict == "proved"
    assert comp.module.entry.attrs["at_bind"] == ["sc"]
    inputs = _inputs(8, 16, 32, 2, True)
    bound = comp.bind(**{name: inputs[name] for name in WEIGHTS})
    _same(bound(x=inputs["x"])[0], reference.run(comp.module, inputs)[0])
    bundle = write_evidence(comp, tmp_path / "e")
    rc, out, err = verify_cli(capsys, bundle, "--jobs", "1")
    assert rc == 0, out + err
    m = manifest_of(bundle)
    final = m["stages"][-1]
    assert final["pass"] == "plan-memory"
    text = (bundle / final["file"]).read_text()
    forged = text.replace('at_bind = ["sc"]', 'at_bind = ["sc", "p.dot"]')
    assert forged != text
    (bundle / final["file"]).write_text(forged)
    rehash(bundle, final)
    cert = bundle / final["certificate"]["file"]
    data = json.loads(cert.read_text())
    (step,) = [s for s in data["steps"] if s.get("function") == "main"]
    step["attrs"]["at_bind"] = ["sc", "p.dot"]
    cert.write_text(json.dumps(data, indent=1) + "\n")
    rehash(bundle, final["certificate"])
    save_manifest(bundle, m)
    rc, _, err = verify_cli(capsys, bundle, "--jobs", "1")
    assert rc == 1 and "not verified: encoding:" in err  # the plan's claim is not the stage's
    assert "plan-memory/arena/memory-safety" in err


def test_a_hand_written_at_bind_is_replaced_and_the_bundle_verifies(tmp_path, capsys) -> None:
    """An input listing `at_bind` (before its plan's keys), compiled with `--bound`: the plan
    replaces the list where it stood, and the checker's replay rebuilds that stage."""
    from support import verify_cli

    from gdv.driver import CompileOptions, compile_module, write_evidence

    text = BN.format(m=4, k=8, n=16).replace(
        ") -> f32[4,16] {\n", ') -> f32[4,16] {at_bind = ["nothing"]} {\n', 1
    )
    assert 'at_bind = ["nothing"]' in text
    src = tmp_path / "bn.gdv"
    src.write_text(text)
    options = CompileOptions(target="c", level=2, bound=WEIGHTS, jobs=1, cache_dir=str(tmp_path))
    comp = compile_module(str(src), options)
    assert comp.verdict == "proved"
    attrs = comp.module.entry.attrs
    assert list(attrs)[:1] == ["at_bind"] and attrs["at_bind"] == ["sc"]
    rc, out, err = verify_cli(capsys, write_evidence(comp, tmp_path / "e"), "--jobs", "1")
    assert rc == 0, out + err
