"""`gdv compile` and `gdv.compile`: every example proves at -O2, the cache makes repeated
layers free, a wrong rule is caught and named, external passes are checked, bisecting flags
work, and the evidence bundle is deterministic."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from support import WrongPass

import gdv
from gdv.backends import reference
from gdv.backends.c.elementwise import F32_DOUBLE_ENV
from gdv.cli import main
from gdv.driver import CompileOptions, compile_module, write_evidence
from gdv.passes import pipelines
from gdv.passes.base import Pass

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.gdv"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_compiles_at_O2_with_every_obligation_proved(
    path, tmp_path, monkeypatch
) -> None:
    comp = compile_module(str(path), CompileOptions(level=2, jobs=1, cache_dir=str(tmp_path)))
    assert comp.verdict == "proved", [(o.obligation.id, o.reason) for o in comp.outcomes]
    # The compiled program computes what the source does, bit for bit (f32 transcendentals
    # evaluated as the reference does them: in double, rounded once; gdv's own f32 ones are
    # compared in tests/backends/c/test_examples.py).
    monkeypatch.setenv(F32_DOUBLE_ENV, "1")
    fn = comp.source.entry
    inputs = reference.random_inputs(fn, 3)
    for a, b in zip(reference.run(comp.source, inputs), comp(**inputs), strict=True):
        assert a.tobytes() == b.tobytes()


def _layers(n: int) -> str:
    lines = ["func @main(%x: f32[8,16], %g: f32[16], %b: f32[16], %w: f32[16,16]) -> f32[8,16] {"]
    prev = "x"
    for k in range(n):
        lines += [
            f"  %n{k} = layer_norm(%{prev}, %g, %b) {{axes = [1], eps = 1e-05}} : f32[8,16]",
            f"  %m{k} = matmul(%n{k}, %w) : f32[8,16]",
            f'  %a{k} = gelu(%m{k}) {{approximate = "tanh"}} : f32[8,16]',
            f"  %r{k} = add(%{prev}, %a{k}) : f32[8,16]",
        ]
        prev = f"r{k}"
    lines += [f"  return %{prev}", "}"]
    return "\n".join(lines) + "\n"


def _solved(outcomes) -> list:
    return [o for o in outcomes if not o.cached and not o.shared_with]


def test_twelve_identical_layers_prove_once_and_hit_the_cache(tmp_path) -> None:
    two = compile_module(_layers(2), CompileOptions(jobs=1, use_cache=False))
    opts = CompileOptions(jobs=1, cache_dir=str(tmp_path))
    twelve = compile_module(_layers(12), opts)
    assert twelve.verdict == "proved"
    assert len(twelve.outcomes) > 5 * len(two.outcomes)
    # Twelve layers need no more solver calls than two (the second layer is where constants
    # first merge across layers): the other layers share their queries.
    assert len(_solved(twelve.outcomes)) <= len(_solved(two.outcomes)), [
        o.obligation.id for o in _solved(twelve.outcomes)
    ]
    again = compile_module(_layers(12), opts)
    assert again.verdict == "proved"
    assert all(o.cached for o in again.outcomes)  # a 100% hit rate


def test_a_wrong_rule_is_caught_with_a_counterexample_and_named(monkeypatch, tmp_path) -> None:
    original = pipelines.pipeline

    def with_wrong_pass(*a, **k) -> list[Pass]:
        # Before lowering to kernels, where the rule still sees `add` ops.
        passes = original(*a, **k)
        names = [p.name for p in passes]
        at = names.index("lower-to-kernels") if "lower-to-kernels" in names else len(passes)
        return [*passes[:at], WrongPass(), *passes[at:]]

    monkeypatch.setattr("gdv.driver.pipeline", with_wrong_pass)
    src = """func @main(%x: f32[4]) -> f32[4] {
  %z = constant() {value = 0.0} : f32[4]
  %y = add(%x, %z) : f32[4]
  return %y
}
"""
    comp = compile_module(src, CompileOptions(jobs=1, cache_dir=str(tmp_path)))
    assert comp.verdict == "refuted"
    bad = [o for o in comp.outcomes if o.status == "refuted"]
    assert [o.obligation.id for o in bad] == ["wrong-pass/add-zero-bitexact/equivalence"]
    cex = bad[0].counterexample
    x = cex.inputs["x"][cex.index]
    assert x == 0 and np.signbit(x)  # -0.0 + 0.0 is +0.0, not -0.0
    with pytest.raises(gdv.IRError, match="wrong-pass/add-zero-bitexact"):
        gdv.compile(src, jobs=1, cache_dir=str(tmp_path))


def test_cli_exit_status_and_summary(tmp_path, capsys) -> None:
    rc = main(
        ["compile", str(ROOT / "examples" / "mlp.gdv"), "--cache-dir", str(tmp_path), "--jobs", "1"]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "decompose-composites" in out and "verdict: proved" in out


def test_print_after_and_disable_pass(tmp_path, capsys) -> None:
    path = str(ROOT / "examples" / "layernorm_gelu.gdv")
    rc = main(
        [
            "compile",
            path,
            "--no-cache",
            "--jobs",
            "1",
            "--print-after",
            "decompose-composites",
            "--disable-pass",
            "fold-layout",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "// ----- IR after decompose-composites -----" in out
    assert "rsqrt(" in out  # layer_norm was expanded
    assert "fold-layout" not in out.split("IR after")[-1].split("\n", 1)[0]
    rc = main(["compile", path, "--disable-pass", "no-such-pass"])
    assert rc == 3
    assert "no pass named 'no-such-pass'" in capsys.readouterr().err


def test_O0_only_decomposes(tmp_path) -> None:
    """-O0 decomposes composites and nothing else; the C target then plans its arena (issue
    15: the C code takes every intermediate from the proved plan at every level)."""
    path = str(ROOT / "examples" / "mlp.gdv")
    comp = compile_module(
        path, CompileOptions(target="reference", level=0, jobs=1, cache_dir=str(tmp_path))
    )
    assert [r.name for r in comp.records] == ["decompose-composites"]
    comp = compile_module(path, CompileOptions(level=0, jobs=1, cache_dir=str(tmp_path)))
    assert [r.name for r in comp.records] == ["decompose-composites", "plan-memory"]


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "pass.py"
    path.write_text("import sys\n" + body)
    return f"{sys.executable} {path}"


SRC = """func @main(%x: f32[4]) -> f32[4] {
  %a = neg(%x) : f32[4]
  %b = neg(%a) : f32[4]
  return %b
}
"""


def test_external_pass_output_is_proved(tmp_path) -> None:
    good = _script(
        tmp_path, "sys.stdin.read()\nprint('func @main(%x: f32[4]) -> f32[4] {\\n  return %x\\n}')"
    )
    comp = compile_module(
        SRC, CompileOptions(external_passes=(good,), jobs=1, cache_dir=str(tmp_path))
    )
    assert comp.verdict == "proved"
    assert comp.records[0].name == "external-1"
    assert comp.module.functions[0].ops == []


def test_external_pass_that_miscompiles_is_refuted(tmp_path) -> None:
    bad = _script(
        tmp_path, "t = sys.stdin.read()\nprint(t.replace('%b = neg(%a)', '%b = abs(%a)'))"
    )
    comp = compile_module(
        SRC, CompileOptions(external_passes=(bad,), jobs=1, cache_dir=str(tmp_path))
    )
    assert comp.verdict == "refuted"
    assert comp.outcomes[0].obligation.id.startswith("external-1/")


@pytest.mark.parametrize(
    "body,message",
    [
        ("sys.stdin.read()\nsys.exit(4)", "exited with status 4"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", "crashed (signal 11)"),
        ("import time\ntime.sleep(30)", "did not finish within 1 s"),
        ("sys.stdin.read()\nprint('func @main(%x: f32[4]) -> f32[4] {')", "invalid IR"),
        (
            "sys.stdin.read()\nprint('func @main(%x: f32[5]) -> f32[5] {\\n  return %x\\n}')",
            "changed the signature of @main",
        ),
    ],
    ids=["nonzero-exit", "crash", "hang", "invalid-ir", "signature"],
)
def test_external_pass_failures_are_input_errors(tmp_path, capsys, body, message) -> None:
    src = tmp_path / "m.gdv"
    src.write_text(SRC)
    rc = main(
        [
            "compile",
            str(src),
            "--external-pass",
            _script(tmp_path, body),
            "--external-timeout",
            "1",
            "--no-cache",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 3
    assert message in err
    assert "Traceback" not in err


def test_evidence_is_deterministic_and_complete(tmp_path) -> None:
    opts = CompileOptions(jobs=1, cache_dir=str(tmp_path / "cache"))
    path = str(ROOT / "examples" / "attention.gdv")
    a = write_evidence(compile_module(path, opts), str(tmp_path / "a"))
    b = write_evidence(
        compile_module(path, CompileOptions(jobs=1, use_cache=False)), str(tmp_path / "b")
    )
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert files_a == files_b
    from gdv.evidence.bundle import MEASURED_FILES

    for rel in files_a:
        if rel.as_posix() not in MEASURED_FILES:  # timings.json, reports/compile-cost.json
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
    manifest = json.loads((a / "manifest.json").read_text())
    assert manifest["verdict"] == "proved"
    assert {o["status"] for o in manifest["obligations"]} == {"proved"}
    for o in manifest["obligations"]:
        for q in o["queries"]:
            assert (a / q["file"]).read_text().startswith("(set-logic ALL)")


def test_evidence_never_overwrites_a_foreign_directory(tmp_path) -> None:
    precious = tmp_path / "mine"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    comp = compile_module(SRC, CompileOptions(jobs=1, use_cache=False))
    with pytest.raises(gdv.IRError, match="not an evidence bundle"):
        write_evidence(comp, str(precious))
    assert (precious / "notes.txt").read_text() == "keep me"


def test_python_api_returns_an_executable(tmp_path) -> None:
    exe = gdv.compile(str(ROOT / "examples" / "mlp.gdv"), jobs=1, cache_dir=str(tmp_path))
    inputs = reference.random_inputs(exe.source.entry, 0)
    (out,) = exe(**inputs)
    (ref,) = reference.run(exe.source, inputs)
    assert out.tobytes() == ref.tobytes()


def test_parallel_discharge_agrees_with_serial(tmp_path) -> None:
    path = str(ROOT / "examples" / "attention.gdv")
    serial = compile_module(path, CompileOptions(jobs=1, use_cache=False))
    parallel = compile_module(path, CompileOptions(jobs=2, use_cache=False))
    assert [o.status for o in serial.outcomes] == [o.status for o in parallel.outcomes]


def test_fast_math_records_its_error_bound_change(tmp_path) -> None:
    src = """func @main(%x: f32[4] {range = [-1.0, 1.0]},
           %y: f32[4] {range = [-1.0, 1.0]}) -> f32[4] {
  %a = constant() {value = 0.1} : f32[4]
  %b = constant() {value = 0.2} : f32[4]
  %s = add(%x, %a) : f32[4]
  %t = add(%s, %b) : f32[4]
  %v = mul(%t, %y) : f32[4]
  return %v
}
"""
    comp = compile_module(src, CompileOptions(fast_math=True, jobs=1, cache_dir=str(tmp_path)))
    assert comp.verdict == "proved"
    (fm,) = [r for r in comp.records if r.name == "fast-math"]
    assert [o.theory for o in fm.obligations] == ["real"]
    before, after = fm.bound_change["before"][0], fm.bound_change["after"][0]
    # (x + 0.1) + 0.2 rounds twice before the product, x + 0.3 once: the bound shrinks.
    assert 0 < after < before
    plain = compile_module(src, CompileOptions(jobs=1, cache_dir=str(tmp_path)))
    assert all(r.bound_change is None for r in plain.records)


BOUND_LINEAR = """func @main(%x: f32[12,64], %w: f32[96,64]) -> f32[12,96] {
  %t = transpose(%w) {perm = [1, 0]} : f32[64,96]
  %y = matmul(%x, %t) : f32[12,96]
  return %y
}
"""


def test_bound_names_a_weights_file_or_parameters(tmp_path, capsys) -> None:
    """`gdv compile --bound W.npz` plans the products for W packed once and records it in the
    bundle, which verifies; a name that is no parameter is an input error with a position."""
    src = tmp_path / "lin.gdv"
    src.write_text(BOUND_LINEAR)
    np.savez(tmp_path / "w.npz", w=np.ones((96, 64), np.float32))
    bundle = tmp_path / "lin.evidence"
    argv = ["compile", str(src), "--bound", str(tmp_path / "w.npz"), "--jobs", "1"]
    assert main([*argv, "--emit-evidence", str(bundle)]) == 0
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["pipeline"]["bound"] == ["w"]
    assert main(["evidence", "verify", str(bundle), "--jobs", "1"]) == 0
    capsys.readouterr()
    assert main(["compile", str(src), "--bound", "%nosuch", "--jobs", "1"]) == 3
    err = capsys.readouterr().err
    assert "lin.gdv:1:" in err and "--bound names nosuch, not a parameter of @main" in err
