"""Targets, capability descriptors, the reference-kernel fallback and the C artifact (issue 5,
items 1 and 2): `gdv targets`, `gdv capabilities --target T --json`, `--allow-fallback`,
`gdv compile -o`, and `c` as the default target of `gdv compile`."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from gdv.api import parse
from gdv.backends import c, reference
from gdv.backends.c import registry
from gdv.backends.capabilities import SCHEMA, TARGETS, descriptor
from gdv.cli import main
from gdv.driver import CompileOptions, compile_module
from gdv.ir import ops
from gdv.ir.diagnostics import IRError

ROOT = Path(__file__).resolve().parents[3]

# At -O0 the transpose stays an op of the entry function (no kernels).
TRANSPOSE = """func @main(%x: f32[3,5] {range = [-1.0, 1.0]}) -> f32[5,3] {
  %0 = transpose(%x) {perm = [1, 0]} : f32[5,3]
  %1 = exp(%0) : f32[5,3]
  return %1
}
"""


@pytest.fixture
def transpose_unsupported(monkeypatch: pytest.MonkeyPatch):
    """Pretend the C target cannot do `transpose`, as it could not do an op it has no rule for."""
    spec = ops.REGISTRY["transpose"]
    monkeypatch.delitem(registry.LOWERINGS, spec)
    entry = registry.Unsupported(spec, "pretend: no transpose in C", registry.__name__)
    monkeypatch.setitem(registry.UNSUPPORTED, spec, entry)
    return spec


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_descriptor_follows_the_one_schema(name: str) -> None:
    d = descriptor(name)
    jsonschema.validate(d, SCHEMA)
    assert d["name"] == name and json.loads(json.dumps(d)) == d
    every = {s.name for s in ops.all_specs()}
    assert set(d["ops"]) | set(d["unsupported_ops"]) == every
    assert not set(d["ops"]) & set(d["unsupported_ops"])


def test_c_descriptor_reports_the_machine_and_compiler() -> None:
    d = descriptor("c")
    m = d["machine"]
    assert m["cores"] >= 1 and m["simd"].startswith(d["execution"]["vectorization"]["isa"])
    assert m["peak_gflops"]["f32_mul_add"] > 0 and m["copy_bandwidth_gbs"] > 0
    assert all(cache["size_bytes"] > 0 for cache in m["caches"])
    flags = d["compiler"]["flags"]
    assert "-ffp-contract=off" in flags and "-fno-fast-math" in flags
    assert "kernel" in d["ops"] and "f32" in d["dtypes"]


def test_measurement_is_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    from gdv.backends.c import machine

    first = machine.measure()
    monkeypatch.setattr(machine, "_measure", lambda cc: pytest.fail("measured again"))
    assert machine.measure() == first


def test_targets_and_capabilities_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["targets"]) == 0
    out = capsys.readouterr().out
    assert "* c " in out and "reference" in out
    assert main(["targets", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} == set(TARGETS)
    assert [r["name"] for r in rows if r["default"]] == ["c"]
    assert main(["capabilities", "--target", "c", "--json"]) == 0
    jsonschema.validate(json.loads(capsys.readouterr().out), SCHEMA)
    assert main(["capabilities", "--target", "reference"]) == 0
    assert "target reference" in capsys.readouterr().out
    assert main(["capabilities", "--target", "tpu"]) == 3
    err = capsys.readouterr().err
    assert "unknown target 'tpu' (available: c, reference, triton)" in err
    assert "Traceback" not in err


def test_unsupported_op_is_a_compile_error_naming_it(transpose_unsupported, tmp_path) -> None:
    src = tmp_path / "t.gdv"
    src.write_text(TRANSPOSE)
    with pytest.raises(IRError) as e:
        options = CompileOptions(target="c", level=0, cache_dir=str(tmp_path / "cache"))
        compile_module(str(src), options)
    assert "target c does not support transpose: pretend: no transpose in C" in e.value.message
    assert str(e.value.loc).startswith(str(src))


def test_fallback_runs_the_reference_kernel_and_is_recorded(transpose_unsupported, tmp_path):
    src = tmp_path / "t.gdv"
    src.write_text(TRANSPOSE)
    options = CompileOptions(
        target="c", level=0, allow_fallback=True, cache_dir=str(tmp_path / "cache")
    )
    comp = compile_module(str(src), options)
    assert comp.verdict == "proved"
    (f,) = comp.artifact.fallbacks
    assert f.op == "transpose" and f.reason.endswith("pretend: no transpose in C")
    assert "gdv_fallback" in comp.artifact.text
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    (got,) = comp(x=x)
    (want,) = reference.run(parse(TRANSPOSE), {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-6)  # exp: libm, last bits may differ
    np.testing.assert_array_equal(got.shape, (5, 3))


def test_fallback_in_evidence_fails_the_default_policy(transpose_unsupported, tmp_path, capsys):
    src = tmp_path / "t.gdv"
    src.write_text(TRANSPOSE)
    bundle = tmp_path / "t.evidence"
    args = ["compile", str(src), "-O0", "--allow-fallback", "--emit-evidence", str(bundle)]
    assert main([*args, "--cache-dir", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert "transpose runs on the reference kernel (--allow-fallback)" in out
    manifest = json.loads((bundle / "manifest.json").read_text())
    (entry,) = manifest["artifact"]["fallbacks"]
    assert entry["op"] == "transpose" and entry["index"] == 0
    assert main(["evidence", "verify", str(bundle)]) == 1
    assert "allow_reference_kernels" in capsys.readouterr().out


def test_compile_defaults_to_c_and_writes_the_artifact(tmp_path, capsys) -> None:
    out = tmp_path / "mlp.so"
    args = ["compile", str(ROOT / "examples" / "mlp.gdv"), "-o", str(out)]
    assert main([*args, "--cache-dir", str(tmp_path / "cache")]) == 0
    printed = capsys.readouterr().out
    assert "target c:" in printed and f"wrote {out}" in printed
    source = (tmp_path / "mlp.c").read_text()
    assert source.startswith("/* Generated by gdv (target c).")
    assert out.read_bytes()[:4] == b"\x7fELF"
    assert CompileOptions().target == "c"


def test_reference_artifact_is_the_final_ir(tmp_path, capsys) -> None:
    out = tmp_path / "final.gdv"
    args = ["compile", str(ROOT / "examples" / "mlp.gdv"), "--target", "reference", "-o"]
    assert main([*args, str(out), "--cache-dir", str(tmp_path / "cache")]) == 0
    capsys.readouterr()
    final = parse(out.read_text())
    assert any(op.name == "kernel" for op in final.entry.ops)
    source = parse((ROOT / "examples" / "mlp.gdv").read_text())
    inputs = reference.random_inputs(source, 3)
    (want,), (got,) = reference.run(source, inputs), reference.run(final, inputs)
    assert reference.bit_equal(got, want)


def test_unwritable_output_is_an_input_error(tmp_path, capsys) -> None:
    out = tmp_path / "missing-dir" / "x.so"
    args = ["compile", str(ROOT / "examples" / "mlp.gdv"), "-o", str(out)]
    assert main([*args, "--cache-dir", str(tmp_path / "cache")]) == 3
    err = capsys.readouterr().err
    assert "cannot write" in err and "Traceback" not in err


def test_c_evidence_bundle_verifies_and_catches_a_tampered_source(tmp_path, capsys) -> None:
    bundle = tmp_path / "mlp.evidence"
    args = ["compile", str(ROOT / "examples" / "mlp.gdv"), "--emit-evidence", str(bundle)]
    assert main([*args, "--cache-dir", str(tmp_path / "cache")]) == 0
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["target"]["name"] == "c"
    assert manifest["artifact"]["kind"] == "c-source"
    assert manifest["conformance"]["backend"] == "c"
    assert manifest["conformance"]["status"] in {"agree", "close"}
    capsys.readouterr()
    assert main(["evidence", "verify", str(bundle)]) == 0
    assert "artifact/main.c regenerated" in capsys.readouterr().out
    # A changed C source with its hash updated in the manifest is still caught: the source is
    # regenerated from the final stage and compared byte for byte.
    import hashlib

    c_file = bundle / "artifact" / "main.c"
    tampered = c_file.read_text().replace("return 0;", "return 0; /* */", 1).encode()
    c_file.write_bytes(tampered)
    manifest["artifact"]["files"][0]["sha256"] = hashlib.sha256(tampered).hexdigest()
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    assert main(["evidence", "verify", str(bundle)]) == 1
    assert "is not the final stage regenerated" in capsys.readouterr().out


TANH = """func @main(%x: f32[7,7]) -> f32[7,7] {
  %t = tanh(%x) : f32[7,7]
  return %t
}
"""


def test_c_conformance_of_a_transcendental_without_a_range_is_close_not_disagree(
    tmp_path, capsys
) -> None:
    # C's tanh is not the reference's (a few ulps apart); the seeded inputs come from the
    # default range, so the two bounds under that range say how far apart the runs may be.
    # It used to be `disagree` (no range, no bound), and `evidence verify` failed the bundle.
    src = tmp_path / "tanh.gdv"
    src.write_text(TANH)
    bundle = tmp_path / "tanh.evidence"
    args = ["compile", str(src), "--emit-evidence", str(bundle), "--cache-dir", str(tmp_path)]
    assert main(args) == 0
    conf = json.loads((bundle / "manifest.json").read_text())["conformance"]
    assert conf["status"] == "close", conf
    assert all(r["within_bounds"] for r in conf["results"])
    capsys.readouterr()
    assert main(["evidence", "verify", str(bundle)]) == 0
    # ... and a final stage that computes something else is still `disagree`
    from gdv.evidence.bundle import conformance

    wrong = parse(TANH.replace("tanh(%x)", "sin(%x)"))
    assert conformance(parse(TANH), wrong, target="c")["status"] == "disagree"


def test_fallback_callback_failure_is_reported(transpose_unsupported, monkeypatch) -> None:
    module = parse(TRANSPOSE)
    from gdv.backends.reference import evaluate

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(evaluate, "evaluate_ops", broken)
    with pytest.raises(IRError) as e:
        c.run(module, {"x": np.zeros((3, 5), np.float32)}, allow_fallback=True)
    assert "the reference fallback for transpose" in e.value.message


def test_executable_reads_inputs_in_place_without_changing_them() -> None:
    text = """func @main(%x: f32[4,6], %w: f32[6,3]) -> (f32[4,3], f32[24], f32[4,6]) {
  %y = matmul(%x, %w) : f32[4,3]
  %f = reshape(%x) : f32[24]
  return %y, %f, %x
}
"""
    comp = compile_module(text, CompileOptions(target="c", use_cache=False))
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    w_t = rng.standard_normal((3, 6)).astype(np.float32)
    before = (x.copy(), w_t.copy())
    w = w_t.T  # not C-contiguous: copied, not read in place
    outs = comp(x=x, w=w)
    want = reference.run(parse(text), {"x": x, "w": np.ascontiguousarray(w)})
    for got, ref in zip(outs, want, strict=True):
        assert reference.bit_equal(got, ref)
    np.testing.assert_array_equal(x, before[0])
    np.testing.assert_array_equal(w_t, before[1])
    outs[1][0] = 42.0  # outputs are copies: neither the input nor the next call sees this
    assert x[0, 0] == before[0][0, 0]
    assert reference.bit_equal(comp(x=x, w=w)[1], want[1])
    with pytest.raises(IRError, match="input %x is f64"):
        comp(x=x.astype(np.float64), w=w)


def test_repeated_calls_see_new_values_and_new_arrays() -> None:
    """The executable remembers the address of the array it last read in place (weakly): an
    array changed in place between calls, a different array, and a new array that may reuse a
    dead one's memory are each read afresh."""
    text = """func @main(%x: f32[64,32], %w: f32[32,48]) -> f32[64,48] {
  %y = matmul(%x, %w) : f32[64,48]
  return %y
}
"""
    comp = compile_module(text, CompileOptions(target="c", use_cache=False))
    module = parse(text)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((64, 32)).astype(np.float32)
    w = rng.standard_normal((32, 48)).astype(np.float32)

    def check(x: np.ndarray, w: np.ndarray) -> None:
        got = comp(x=x, w=w)[0]
        assert reference.bit_equal(got, reference.run(module, {"x": x, "w": w})[0])

    check(x, w)
    x[3, :] = -x[3, :]  # same array, new values
    w[:, 5] = 0.0
    check(x, w)
    other = x.copy()  # another array, with other values
    other[0, 0] = 7.0
    check(other, w)
    for seed in range(20):  # arrays dying and being allocated again, perhaps at one address
        fresh = np.random.default_rng(seed).standard_normal((64, 32)).astype(np.float32)
        check(fresh, w)
        del fresh
    # A call that copies its input (here not C-contiguous) points at the copy; the array read
    # in place before is pointed at again on the next call, not the dead copy.
    check(np.asfortranarray(x), w)
    check(x, w)
    x[0, :] = 3.0
    check(x, w)
    # The one way a live array's memory could move: NumPy refuses while the weak reference is
    # held, so the remembered address cannot go stale.
    check(x, w)
    with pytest.raises(ValueError, match="resize"):
        x.resize((8, 32))
    check(x, w)


def test_descriptor_states_the_measured_transcendental_accuracy() -> None:
    from gdv.backends.c import vmath

    text = c.capabilities(measure=False)["execution"]["exactness"]
    for name, ulps in vmath.F32_MAX_ULP.items():
        assert f"{name} {ulps:.2f}" in text, (name, ulps)


def test_large_results_are_new_arrays_each_call() -> None:
    """A result of at least FRESH_MIN_BYTES is computed straight into a new array, returned
    without a copy: two calls give two arrays, and a result returned twice, or read again by a
    later op, is still right."""
    n = 512  # 512 x 512 f32: 1 MiB
    text = f"""func @main(%x: f32[{n},{n}]) -> (f32[{n},{n}], f32[{n},{n}], f32[{n},{n}], f32[4]) {{
  %y = mul(%x, %x) : f32[{n},{n}]
  %z = add(%y, %x) : f32[{n},{n}]
  %s = slice(%z) {{start = [0, 0], limit = [1, 4], stride = [1, 1]}} : f32[1,4]
  %t = reshape(%s) : f32[4]
  return %y, %z, %y, %t
}}
"""
    assert n * n * 4 >= c.FRESH_MIN_BYTES
    module = parse(text)
    exe = c.Executable(module)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, n)).astype(np.float32)
    first = exe({"x": x})
    want = reference.run(module, {"x": x})
    for got, ref in zip(first, want, strict=True):
        assert reference.bit_equal(got, ref)
    assert len({slot for _, slot, _, _ in exe._fresh}) == 1  # %z alone: %y is returned twice
    assert not np.shares_memory(first[0], first[2])
    second = exe({"x": -x})
    assert not np.shares_memory(first[1], second[1])
    assert reference.bit_equal(first[1], want[1])  # the first result is untouched
    assert reference.bit_equal(second[1], reference.run(module, {"x": -x})[1])
