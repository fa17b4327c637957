"""`gdv fuzz`: the short derandomized fuzz CI runs (issue 18), a planted bug it must find and
reduce, and the command's bad input."""

from __future__ import annotations

import json

import pytest

from gdv import cli
from gdv.fuzzing import mutants
from gdv.fuzzing.fuzz import fuzz, refused
from gdv.fuzzing.regress import load_lit
from gdv.fuzzing.signature import observe
from gdv.ir.targets import TARGET_NAMES

CI_SEED, CI_COUNT = 0, 40
"""The CI fuzz: 40 programs from seed 0, every target at every level (about 50 s here)."""


def test_ci_fuzz_is_clean() -> None:
    report = fuzz(seed=CI_SEED, count=CI_COUNT, reduce=False)
    assert report.programs == CI_COUNT
    assert report.checks == CI_COUNT * len(TARGET_NAMES) * 4
    assert not report.failures, report.table()
    # refusals are counted, not hidden: every check is clean or refused
    assert sum(report.clean.values()) + sum(report.refused.values()) == report.checks


def test_fuzz_finds_a_planted_bug_and_reduces_it_to_a_regression_case(tmp_path) -> None:
    with mutants.MUTANTS["swapped-operands"].patch():
        report = fuzz(seed=0, count=4, ops=["sub"], targets=["c"], levels=[2], out=tmp_path)
        assert report.failures, report.table()
        for f in report.failures:
            assert f.signature == "refuted:lower-to-kernels/elementwise-sub"
            assert f.reduced_ops == 1
            reduced, expect = load_lit(f.lit)
            assert expect == f.signature
            assert reduced.ops == 1
            # the reduced case still shows the bug while it is in ...
            assert observe(reduced, f.signature) == f.signature
    # ... and is clean once it is gone: the lit test then fails until its EXPECT is updated
    for f in report.failures:
        assert observe(load_lit(f.lit)[0]) == "clean"
    assert "refuted:lower-to-kernels/elementwise-sub" in report.table()


def test_refused_counts_input_errors_but_not_invalid_ir_from_a_pass() -> None:
    assert refused("error:unsupported-dtype")
    assert not refused("error:internal")
    assert not refused("crash:KeyError@gdv.passes.canonicalize.run")
    assert not refused("clean")


def test_cli_prints_the_table_or_json_and_exits_by_the_failures(capsys) -> None:
    argv = ["fuzz", "--count", "2", "--targets", "reference", "--levels", "0", "--no-reduce"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "2 programs, 2 compiles checked" in out and "| reference | -O0 | 2 |" in out
    assert cli.main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["programs"] == 2 and data["failures"] == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ops", "add,bogus"], "cannot generate bogus"),
        (["--targets", "vax"], "unknown vax"),
        (["--levels", "2,x"], "--levels"),
        (["--levels", "7"], "--levels"),
    ],
)
def test_cli_bad_arguments_are_input_errors(args, message, capsys) -> None:
    assert cli.main(["fuzz", "--count", "1", *args]) == 3
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_failure_only_in_range_inputs_show_is_reduced_on_those_inputs(tmp_path, monkeypatch):
    # a crash in the bound check, which only in-range inputs reach: its reduction must use
    # in-range inputs too (it used to get the special inputs, not show, and stay unreduced)
    from gdv.api import parse
    from gdv.fuzzing.fuzz import Finding, _reduce_into
    from gdv.fuzzing.signature import Case, CaseOptions
    from gdv.validate import bounds

    def broken(*args, **kwargs):
        raise ZeroDivisionError("planted")

    monkeypatch.setattr(bounds, "analyze", broken)
    text = (
        "func @main(%a: f32[4,4], %b: f32[4,4]) -> f32[4,4] {\n"
        "  %s = add(%a, %b) : f32[4,4]\n  %t = mul(%s, %a) : f32[4,4]\n  return %t\n}\n"
    )
    module = parse(text)
    options = CaseOptions(target="reference", level=0)
    sig = observe(Case([module], None, options))
    assert sig.startswith("crash:ZeroDivisionError@")
    f = Finding(0, "reference", 0, sig, text, specials=False)
    _reduce_into(f, module, 7, tmp_path)
    assert f.reduced_ops is not None and f.reduced_ops <= 1, f.reduced
    reduced, expect = load_lit(f.lit)
    assert expect == sig and observe(reduced) == sig
