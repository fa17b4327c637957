"""Targets are objects (DESIGN.md, "Turn 2 additions"): one table of plain data
(`gdv.ir.targets`), one object per entry (`gdv.backends.targets`), one default target, and no
layer branching on a target's name."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import numpy as np
import pytest

from gdv.api import parse
from gdv.backends.targets import TARGETS, Target, get_target
from gdv.ir.diagnostics import IRError
from gdv.ir.printer import print_module
from gdv.ir.targets import DEFAULT_TARGET, TARGET_INFO, TARGET_NAMES

ROOT = Path(__file__).resolve().parents[2]

SMALL = """func @main(%x: f32[4] {range = [-1.0, 1.0]}) -> f32[4] {
  %y = add(%x, %x) : f32[4]
  return %y
}
"""


def test_one_object_per_target() -> None:
    assert set(TARGETS) == set(TARGET_INFO) == set(TARGET_NAMES)
    for name, target in TARGETS.items():
        assert isinstance(target, Target) and target.name == name
        assert target.info is TARGET_INFO[name]
        assert target.description and target.artifact_kind
    assert sum(t.is_default for t in TARGETS.values()) == 1
    assert TARGETS[DEFAULT_TARGET].is_default


def test_an_unknown_target_names_the_available_ones() -> None:
    with pytest.raises(IRError, match=r"unknown target 'tpu' \(available: c, reference, triton\)"):
        get_target("tpu")


def test_one_default_target_everywhere() -> None:
    import gdv
    from gdv.cli import build_parser
    from gdv.driver import CompileOptions
    from gdv.driver import compile as driver_compile

    assert DEFAULT_TARGET == "c"
    assert inspect.signature(gdv.compile).parameters["target"].default == DEFAULT_TARGET
    assert inspect.signature(driver_compile).parameters["target"].default == DEFAULT_TARGET
    assert CompileOptions().target == DEFAULT_TARGET
    parser = build_parser()
    assert parser.parse_args(["compile", "x.gdv"]).target == DEFAULT_TARGET
    assert parser.parse_args(["capabilities"]).target == DEFAULT_TARGET


def test_the_reference_target_needs_no_compiler(monkeypatch) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc")
    module = parse(SMALL)
    ref = get_target("reference")
    assert ref.interpreter and ref.build_info() is None and ref.reference_transcendentals
    assert ref.lower(module).text == print_module(module)
    artifact = ref.build(module)
    assert artifact.kind == ref.artifact_kind == "reference-ir" and artifact.library is None
    x = np.arange(4, dtype=np.float32)
    (y,) = ref.run(module, {"x": x})
    assert np.array_equal(y, x + x)
    assert ref.capabilities(measure=False)["available"]["ok"]
    with pytest.raises(IRError, match="no C compiler found"):
        get_target("c").build(module)
    assert not get_target("c").capabilities(measure=False)["available"]["ok"]


def test_the_c_target_object() -> None:
    c = get_target("c")
    assert not c.interpreter and not c.reference_transcendentals and c.artifact_kind == "c-source"
    from gdv.backends.c import vmath

    assert dict(c.f32_ulps) == vmath.F32_MAX_ULP
    assert get_target("reference").f32_ulps == {}
    module = parse(SMALL)
    lowered = c.lower(module)
    assert "gdv_main" in lowered.text or "void" in lowered.text
    assert lowered.fallbacks == []
    assert set(c.build_info()) == {"compiler", "compiler_version", "flags"}


_NAME_BRANCH = re.compile(r"""target\s*[!=]=\s*["'](c|reference)["']""")


@pytest.mark.parametrize("folder", ["gdv", "passes", "validate", "backends"])
def test_no_layer_branches_on_a_target_name(folder: str) -> None:
    """The driver, the commands, the passes, the bounds and the backends ask the target object
    (or its plain data), never `target == "c"`."""
    hits = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if _NAME_BRANCH.search(line)
    ]
    assert not hits, hits


def _slow_cc(tmp_path: Path, stamps: Path, seconds: float) -> Path:
    """A C compiler that notes when it starts and ends on a program (two lines of `stamps`)
    and waits `seconds` before running gcc."""
    cc = tmp_path / "slow-cc"
    cc.write_text(
        "#!/bin/sh\n"
        'case "$*" in *program.c*) ;; *) exec gcc "$@";; esac\n'
        f'date +%s.%N > "{stamps}"; sleep {seconds}\n'
        f'gcc "$@"; rc=$?; date +%s.%N >> "{stamps}"; exit $rc\n'
    )
    cc.chmod(0o755)
    return cc


def test_the_c_build_runs_while_the_obligations_are_proved(tmp_path, monkeypatch) -> None:
    """compile_module starts the C compiler (`Target.start_build`) before proving and waits
    for it after: the compiler's run and the proofs overlap, and the artifact is built."""
    import time

    import gdv.validate.discharge as discharge_module
    from gdv.driver import CompileOptions, compile_module

    stamps = tmp_path / "cc-ran"
    monkeypatch.setenv("CC", str(_slow_cc(tmp_path, stamps, 2.0)))
    monkeypatch.setenv("GDV_C_CACHE", str(tmp_path / "c-cache"))
    proving: list[float] = []
    real = discharge_module.discharge

    def timed(*args, **kwargs):
        proving.append(time.time())
        # The proofs of SMALL can end before the compiler's thread has started its process
        # (CI once saw 22 ms of proving against 70 ms to start the compiler); waiting here for
        # the compiler's first stamp keeps the test about overlap, not about which thread is
        # scheduled first. A build that only starts after discharge returns never stamps
        # while we wait, so the wait times out and the overlap assertion below fails.
        deadline = time.time() + 20.0
        while not stamps.exists() and time.time() < deadline:
            time.sleep(0.01)
        try:
            return real(*args, **kwargs)
        finally:
            proving.append(time.time())

    monkeypatch.setattr(discharge_module, "discharge", timed)
    comp = compile_module(SMALL, CompileOptions(target="c", use_cache=False, jobs=1))
    assert comp.verdict == "proved" and comp.artifact.library.exists()
    cc_start, cc_end = (float(line) for line in stamps.read_text().split())
    proof_start, proof_end = proving
    assert proof_start < cc_end and cc_start < proof_end  # the two ran at the same time
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    assert np.array_equal(comp(x=x)[0], x + x)


def test_start_build_raises_lowering_errors_at_once_and_compiler_errors_when_finished(
    monkeypatch,
) -> None:
    from gdv.driver import CompileOptions, compile_module

    c = get_target("c")
    graph = "func @main(%a: f32[2,3], %b: f32[3,4]) -> f32[2,4] {\n"
    graph += "  %y = matmul(%a, %b) : f32[2,4]\n  return %y\n}\n"
    with pytest.raises(IRError, match="target c does not support matmul"):
        c.start_build(parse(graph))  # before any compiler runs
    monkeypatch.setenv("CC", "false")
    monkeypatch.setenv("GDV_C_CACHE", "/nonexistent/never-written")
    finish = c.start_build(parse(SMALL))
    with pytest.raises(IRError, match=r"the C compiler failed \(exit status 1\)"):
        finish()
    with pytest.raises(IRError, match=r"the C compiler failed \(exit status 1\)"):
        compile_module(SMALL, CompileOptions(target="c", use_cache=False, jobs=1))
