"""`gdv reduce` and `gdv signature` (issue 18): every signature kind from a tiny concrete case;
the reducer keeps the signature, is 1-minimal, deterministic and independent of `--jobs`; its
dims, dtypes and tv-pair steps; the CLI's outputs and exit statuses."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from gdv import cli
from gdv.fuzzing.reduce import keep_ops, reduce_case
from gdv.fuzzing.signature import (
    TV_SEPARATOR,
    Case,
    CaseOptions,
    error_class,
    observe,
    parse_case_text,
)
from gdv.ir.diagnostics import IRError

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WRONG_PASS = HERE / "wrong_pass.py"
REFUTED = "refuted:external-1/whole-function"
NO_PIPELINE = ("pipeline:0",)


def wrong(mode: str) -> str:
    return f"{sys.executable} {WRONG_PASS} {mode}"


def case(text: str, inputs=None, **options) -> Case:
    return Case(parse_case_text(text), inputs, CaseOptions(**options))


def binary(op: str, t: str = "f32[4]", a: str = "%a", b: str = "%b", r: str = "%r") -> str:
    head = f"func @main({a}: {t}, {b}: {t}) -> {t} {{\n"
    return head + f"  {r} = {op}({a}, {b}) : {t}\n  return {r}\n}}\n"


def corpus():
    spec = importlib.util.spec_from_file_location("gdv_test_fuzzing_corpus", HERE / "corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- signatures ------------------------------------------------------------------------------


def test_refuted_signature_from_a_wrong_external_pass() -> None:
    c = case(binary("sub"), external_passes=(wrong("swap-sub"),), passes=NO_PIPELINE)
    assert observe(c) == REFUTED
    assert observe(c, REFUTED) == REFUTED
    assert observe(c, REFUTED, quick=True) == REFUTED
    # the same pass on a program where it finds nothing is right
    assert (
        observe(case(binary("add"), external_passes=(wrong("swap-sub"),), passes=NO_PIPELINE))
        == "clean"
    )


def test_refuted_signature_of_a_large_program_needs_no_solver(monkeypatch) -> None:
    # 2M elements a side: past discharge's own probe limit (1M), within the reducer's, so a
    # real model's whole-function refutation never waits for its SMT query to be built
    from gdv.validate import discharge

    def no_solver(*args, **kwargs):
        raise AssertionError("the solver was asked")

    monkeypatch.setattr(discharge, "discharge", no_solver)
    big = case(
        binary("sub", "f32[1024,2048]"), external_passes=(wrong("swap-sub"),), passes=NO_PIPELINE
    )
    assert observe(big) == REFUTED


def test_error_signature_class_drops_names_and_numbers() -> None:
    one = binary("add").replace("%b)", "%undefined)")
    two = binary("add", "f64[7,3]", "%x1", "%y22", "%out").replace("%y22)", "%nothing_here)")
    s1, s2 = observe(case(one)), observe(case(two))
    assert s1.startswith("error:") and "undefined" in s1
    assert s1 == s2
    for name in ("%undefined", "%nothing_here", "undefined_", "7", "22"):
        assert name not in s1 and name not in s2
    # shape errors: different dims, different names, one class
    bad = (
        "func @main(%{p}: f32[{n}], %{q}: f32[{m}]) -> f32[{n}] {{\n"
        "  %z = add(%{p}, %{q}) : f32[{n}]\n  return %z\n}}\n"
    )
    e1 = observe(case(bad.format(p="a", q="b", n=4, m=5)))
    e2 = observe(case(bad.format(p="lhs", q="rhs", n=16, m=3)))
    assert e1 == e2 and e1.startswith("error:")
    assert not any(ch.isdigit() for ch in e1)
    # positions (and so the file name) do not matter either
    assert error_class("a.gdv:3:7: error: use of undefined value %x") == error_class(
        "other/b.gdv:12:1: error: use of undefined value %long_name"
    )


def test_crash_signature_names_the_innermost_gdv_frame(monkeypatch) -> None:
    import gdv.passes.canonicalize as canonicalize

    def boom(*args, **kwargs):
        return {}["missing"]  # a KeyError raised outside gdv (this test file)

    monkeypatch.setattr(canonicalize, "rewrite_module", boom)
    sig = observe(case(binary("add")))
    assert sig.startswith("crash:KeyError@")
    assert sig == "crash:KeyError@gdv.passes.canonicalize.run"  # innermost gdv frame, import name
    assert "test_reduce" not in sig and "boom" not in sig
    assert observe(case(binary("add")), sig) == sig


def test_mismatch_signature_from_a_wrong_c_executable(monkeypatch) -> None:
    import gdv.backends.targets as targets

    real = targets.get_target
    c = real("c")

    def executable(module, allow_fallback=False):
        run = c.executable(module, allow_fallback)
        return lambda inputs: [np.asarray(x) + 1 for x in run(inputs)]

    bad = dataclasses.replace(c, _executable=executable)
    monkeypatch.setattr(
        targets, "get_target", lambda name, loc=None: bad if name == "c" else real(name, loc)
    )
    prog = case(binary("add"), passes=NO_PIPELINE)
    assert observe(prog) == "mismatch:c"
    assert observe(prog, "mismatch:c") == "mismatch:c"
    monkeypatch.setattr(targets, "get_target", real)
    assert observe(prog) == "clean"


def pair(op_a: str = "add", op_b: str = "sub") -> str:
    return binary(op_a) + TV_SEPARATOR + binary(op_b)


def test_tv_signature_of_a_pair() -> None:
    assert observe(case(pair())) == "tv:not-equivalent"
    assert observe(case(pair("add", "add"))) == "tv:equivalent"


def test_clean_signature_of_an_example() -> None:
    text = (ROOT / "examples" / "mlp.gdv").read_text()
    assert observe(case(text)) == "clean"


TANH = "func @main(%a: f32[4,4]) -> f32[4,4] {\n  %e = tanh(%a) : f32[4,4]\n  return %e\n}\n"


def test_transcendental_within_its_bound_is_clean_with_a_range() -> None:
    ranged = TANH.replace("%a: f32[4,4]", "%a: f32[4,4] {range = [-1.0, 1.0]}", 1)
    assert observe(case(ranged)) == "clean"


def test_transcendental_within_its_bound_is_clean_without_a_range() -> None:
    assert observe(case(TANH)) == "clean"


SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 3.0e38, 1e-40, 0.5, -0.7], np.float32)


def test_transcendental_on_inputs_with_specials_is_clean_on_c() -> None:
    # outside the ranges C's tanh still only has to lie within the bounds under ranges that
    # hold the finite inputs; NaN and infinities must match exactly
    inputs = {"a": np.resize(SPECIALS, (4, 4))}
    assert observe(case(TANH, inputs=inputs)) == "clean"


def test_wrong_c_results_on_inputs_with_specials_are_a_mismatch(monkeypatch) -> None:
    from gdv.fuzzing import mutants

    # tanh makes the C run loose (its tanh is not the reference's): checked against the bound
    text = binary("sub", "f32[4,4]").replace(
        "  return %r", "  %t = tanh(%r) : f32[4,4]\n  return %t"
    )
    # (no huge finite input here: the bounds under a range up to 3e38 allow any tanh result,
    # and only the in-range run, checked against its bound, would see the swap)
    a = np.resize(SPECIALS[np.abs(SPECIALS) != 3.0e38], (4, 4))
    inputs = {"a": a, "b": np.full((4, 4), 0.25, np.float32)}
    prog = case(text, inputs=inputs)
    assert observe(prog) == "clean"
    with mutants.MUTANTS["c-swapped-operands"].patch():
        assert observe(prog) == "mismatch:c"


@pytest.mark.parametrize(
    ("want", "got", "limit", "differs"),
    [
        ([np.nan, 1.0], [np.nan, 1.0], 0.0, False),
        ([np.nan, 1.0], [0.0, 1.0], np.inf, True),  # a NaN where the other has none
        ([np.inf], [-np.inf], np.inf, True),  # the other infinity
        ([np.inf], [3.0e38], np.inf, True),  # an infinity where the other is finite
        ([1.0, np.inf], [1.0 + 1e-7, np.inf], 1e-6, False),
        ([1.0], [1.1], 1e-6, True),
        ([1.0], [1.1], np.inf, False),  # no bound: only the NaN and infinity pattern
    ],
)
def test_differs(want, got, limit, differs) -> None:
    from gdv.fuzzing.signature import _differs

    assert _differs(np.array(want), np.array(got), limit) is differs


# --- reducing a corpus case ------------------------------------------------------------------


@pytest.fixture(scope="module")
def case00():
    name, text, cmd = corpus().cases()[0]
    assert name.startswith("case00")
    original = case(text, external_passes=(cmd,))
    assert original.ops == 64
    first = reduce_case(original)
    second = reduce_case(original)
    parallel = reduce_case(original, jobs=2)
    return original, first, second, parallel


def test_corpus_case_keeps_its_signature_and_shrinks(case00) -> None:
    original, result, _, _ = case00
    assert result.signature == REFUTED
    assert observe(result.case, REFUTED) == REFUTED
    assert result.case.ops <= 8
    assert result.case.largest_dim <= 4
    assert result.case.options.passes is not None  # the pipeline step cut the pipeline
    assert result.case.options.external_passes == original.options.external_passes
    log = result.log()
    assert log["schema"] == "gdv-reduction-1" and log["signature"] == REFUTED
    assert log["original"]["ops"] == 64 and log["reduced"]["ops"] == result.case.ops
    assert [s["name"] for s in log["steps"]][0] == "pipeline"


def test_corpus_case_is_one_minimal(case00) -> None:
    _, result, _, _ = case00
    fn = result.case.modules[0].entry
    for i in range(len(fn.ops)):
        smaller, _ = keep_ops(fn, set(range(len(fn.ops))) - {i})
        module = dataclasses.replace(result.case.modules[0], functions=[smaller])
        cand = Case([module], result.case.inputs, result.case.options)
        cand = Case(parse_case_text(cand.text()), cand.inputs, cand.options)
        assert observe(cand, REFUTED) != REFUTED, f"op {i} is not needed"


def test_reduction_is_deterministic_and_independent_of_jobs(case00) -> None:
    _, first, second, parallel = case00
    assert first.case.text() == second.case.text()
    assert first.case.options == second.case.options
    assert parallel.case.text() == first.case.text()
    assert parallel.case.options == first.case.options


# --- steps -----------------------------------------------------------------------------------


SUB_16 = """func @main(%a: f32[16,16], %b: f32[16,16], %c: f32[16]) -> f32[16] {
  %s = sub(%a, %b) : f32[16,16]
  %r = reduce_sum(%s) {axes = [1]} : f32[16]
  %t = add(%r, %c) : f32[16]
  return %t
}
"""


def test_dims_step_shrinks_every_dim() -> None:
    c = case(SUB_16, external_passes=(wrong("swap-sub"),), passes=NO_PIPELINE)
    assert c.largest_dim == 16
    result = reduce_case(c)
    assert observe(result.case, REFUTED) == REFUTED
    assert result.case.largest_dim <= 2
    assert "dims" in [s.name for s in result.steps]


def test_dims_step_stops_where_the_signature_needs_the_size() -> None:
    def needs_two(candidate: Case) -> bool:  # interesting: a sub on a dim of at least 2
        fn = candidate.modules[0].entry
        return any(op.name == "sub" and max(op.type.shape, default=0) >= 2 for op in fn.ops)

    result = reduce_case(case(SUB_16, passes=NO_PIPELINE), test=needs_two)
    assert needs_two(result.case)
    assert result.case.largest_dim == 2
    assert result.case.ops == 1


def test_dtypes_step_narrows_f64_to_f32() -> None:
    text = binary("sub", "f64[8]")
    c = case(text, external_passes=(wrong("swap-sub"),), passes=NO_PIPELINE)
    result = reduce_case(c, REFUTED)
    out = result.case.text()
    assert "f64" not in out and "f32" in out
    assert observe(result.case, REFUTED) == REFUTED


TV_BODY = """func @main(%a: f32[8], %b: f32[8], %c: f32[8]) -> f32[8] {{
  %t = mul(%a, %b) : f32[8]
  %u = {op}(%t, %c) : f32[8]
  %v = exp(%u) : f32[8]
  %w = mul(%v, %a) : f32[8]
  return %w
}}
"""


@pytest.fixture(scope="module")
def tv_reduced():
    c = case(TV_BODY.format(op="add") + TV_SEPARATOR + TV_BODY.format(op="sub"))
    assert observe(c) == "tv:not-equivalent"
    return c, reduce_case(c)


def test_tv_pair_reduction_keeps_parameters_aligned(tv_reduced) -> None:
    c, result = tv_reduced
    assert result.signature == "tv:not-equivalent"
    assert observe(result.case) == "tv:not-equivalent"
    a, b = (m.entry for m in result.case.modules)
    assert len(a.params) == len(b.params)
    assert [p.type for p in a.params] == [p.type for p in b.params]
    assert a.results == b.results
    assert result.case.ops < c.ops


def test_tv_pair_reduction_keeps_the_difference(tv_reduced) -> None:
    _, result = tv_reduced
    a, b = (m.entry for m in result.case.modules)
    # the verdict must still come from add-vs-sub, not from parameter positions
    assert "add" in {op.name for op in a.ops}
    assert "sub" in {op.name for op in b.ops}
    same_name_at = [
        (i, j)
        for i, p in enumerate(a.params)
        for j, q in enumerate(b.params)
        if p.name == q.name and i != j
    ]
    assert not same_name_at, "a value rerouted on both sides sits at different positions"
    # the returns step works on both sides at once: nothing but the differing op is left
    assert [len(a.ops), len(b.ops)] == [1, 1]


def test_reduce_case_rejects_a_case_that_shows_nothing() -> None:
    with pytest.raises(IRError, match="clean"):
        reduce_case(case(binary("add"), passes=NO_PIPELINE))
    c = case(binary("sub"), external_passes=(wrong("swap-sub"),), passes=NO_PIPELINE)
    with pytest.raises(IRError, match="does not show"):
        reduce_case(c, "refuted:fold-constants/fold")
    with pytest.raises(IRError, match="does not show"):
        reduce_case(c, "crash:KeyError@passes.canonicalize.run")


# --- the CLI ---------------------------------------------------------------------------------


PROGRAM = """func @main(%a: f32[4,4], %b: f32[4,4]) -> f32[4,4] {
  %m = mul(%a, %b) : f32[4,4]
  %e = exp(%m) : f32[4,4]
  %s = sub(%e, %a) : f32[4,4]
  %t = neg(%s) : f32[4,4]
  %u = add(%t, %b) : f32[4,4]
  return %u
}
"""


def test_cli_test_command_reduces(tmp_path, capsys) -> None:
    script = tmp_path / "interesting.py"
    script.write_text('import sys\nsys.exit(0 if "sub(" in open(sys.argv[1]).read() else 1)\n')
    src = tmp_path / "case.gdv"
    src.write_text(PROGRAM)
    out = tmp_path / "out.gdv"
    lit = tmp_path / "lit"
    rc = cli.main(
        [
            "reduce", str(src), "--test", f"{sys.executable} {script}", "-o", str(out),
            "--lit-dir", str(lit), "--quiet", "--passes", "pipeline:0",
        ]
    )  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    reduced = out.read_text()
    assert "sub(" in reduced
    assert Case(parse_case_text(reduced)).ops == 1
    assert not lit.exists()  # no lit test for an external interestingness test
    assert src.read_text() == PROGRAM


def test_cli_input_errors(tmp_path, capsys) -> None:
    assert cli.main(["reduce", str(tmp_path / "missing.gdv"), "--lit-dir", ""]) == 3
    assert "no such file" in capsys.readouterr().err
    src = tmp_path / "case.gdv"
    src.write_text(PROGRAM)
    for bad in ("bogus:x", "refuted", "refuted:"):
        assert cli.main(["reduce", str(src), "--signature", bad, "--lit-dir", ""]) == 3
        assert "unknown signature" in capsys.readouterr().err
    assert cli.main(["signature", str(tmp_path / "missing.gdv")]) == 3
    assert cli.main(["signature", str(src), "--expect", "nonsense"]) == 3
    # a clean case has nothing to reduce
    assert cli.main(["reduce", str(src), "--passes", "pipeline:0", "--lit-dir", ""]) == 3
    assert "clean" in capsys.readouterr().err


def sub_case(tmp_path) -> tuple[Path, list[str]]:
    src = tmp_path / "case.gdv"
    src.write_text(PROGRAM)
    return src, ["--external-pass", wrong("swap-sub"), "--passes", "pipeline:0", "--quiet"]


def test_cli_writes_output_lit_and_log(tmp_path, capsys) -> None:
    src, opts = sub_case(tmp_path)
    out, lit, log = tmp_path / "out.gdv", tmp_path / "lit", tmp_path / "log.json"
    argv = ["reduce", str(src), *opts, "-o", str(out), "--lit-dir", str(lit)]
    assert cli.main([*argv, "--emit-evidence", str(log)]) == 0, capsys.readouterr().err
    stdout = capsys.readouterr().out
    assert REFUTED in stdout and str(out) in stdout
    reduced = case(out.read_text(), external_passes=(wrong("swap-sub"),), passes=NO_PIPELINE)
    assert observe(reduced, REFUTED) == REFUTED and reduced.ops == 1
    files = sorted(lit.iterdir())
    assert [f.name for f in files] == ["refuted-external-1-whole-function.gdv"]
    text = files[0].read_text()
    assert f"// SIGNATURE: {REFUTED}" in text and f"// EXPECT: {REFUTED}" in text
    assert "// RUN: gdv signature %s" in text
    data = json.loads(log.read_text())
    assert data["schema"] == "gdv-reduction-1"
    assert data["signature"] == REFUTED
    assert data["original"]["sha256"] == hashlib.sha256(PROGRAM.encode()).hexdigest()
    assert data["original"]["file"] == str(src)
    assert data["original"]["ops"] == 5 and data["reduced"]["ops"] == 1
    assert data["reduced"]["sha256"] == hashlib.sha256(out.read_text().encode()).hexdigest()
    assert data["steps"] and all(
        {"name", "ops_before", "ops_after"} <= set(s) for s in data["steps"]
    )
    assert data["tests"] >= 1
    # a second run never overwrites the first lit test
    assert cli.main([*argv]) == 0
    assert sorted(f.name for f in lit.iterdir()) == [
        "refuted-external-1-whole-function-2.gdv",
        "refuted-external-1-whole-function.gdv",
    ]


def test_cli_refuses_to_overwrite_the_case(tmp_path, capsys, monkeypatch) -> None:
    src, opts = sub_case(tmp_path)
    assert cli.main(["reduce", str(src), *opts, "-o", str(src), "--lit-dir", ""]) == 3
    assert "overwrite" in capsys.readouterr().err
    assert src.read_text() == PROGRAM
    monkeypatch.chdir(tmp_path)  # the same file spelled differently
    assert cli.main(["reduce", str(src), *opts, "-o", "./case.gdv", "--lit-dir", ""]) == 3
    assert src.read_text() == PROGRAM


def test_cli_signature_and_expect(tmp_path, capsys) -> None:
    src = tmp_path / "pair.gdv"
    src.write_text(pair())
    assert cli.main(["signature", str(src)]) == 0
    assert capsys.readouterr().out.strip() == "tv:not-equivalent"
    assert cli.main(["signature", str(src), "--expect", "tv:not-equivalent"]) == 0
    assert capsys.readouterr().out.strip() == "tv:not-equivalent"
    assert cli.main(["signature", str(src), "--expect", "clean"]) == 1
    assert cli.main(["signature", str(src), "--expect", "tv:equivalent"]) == 1
    capsys.readouterr()
    one, opts = sub_case(tmp_path)
    assert cli.main(["signature", str(one), *opts[:4]]) == 0
    assert capsys.readouterr().out.strip() == REFUTED
    assert cli.main(["signature", str(one), "--passes", "pipeline:0", "--expect", "clean"]) == 0
