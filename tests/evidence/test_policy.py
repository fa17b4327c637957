"""The policy gate: `gdv compile` and `gdv evidence verify` both fail on a violated rule, by
name; policies come from --policy, gdv-policy.toml or [tool.gdv.policy]."""

from __future__ import annotations

import pytest

from gdv.cli import main
from gdv.evidence import EvidenceError
from gdv.evidence.policy import Policy, check_policy, load_policy
from gdv.evidence.solvers import SolverResult
from gdv.evidence.verify import verify_bundle

FAST_MATH = """func @main(%x: f32[4] {range = [-1.0, 1.0]},
           %y: f32[4] {range = [-1.0, 1.0]}) -> f32[4] {
  %a = constant() {value = 0.1} : f32[4]
  %b = constant() {value = 0.2} : f32[4]
  %s = add(%x, %a) : f32[4]
  %t = add(%s, %b) : f32[4]
  %v = mul(%t, %y) : f32[4]
  return %v
}
"""

DEAD_CODE = """func @main(%x: f32[4] {range = [-1.0, 1.0]}) -> f32[4] {
  %u = neg(%x) : f32[4]
  %y = relu(%x) : f32[4]
  return %y
}
"""


def _compile(path, *extra: str) -> list[str]:
    return ["compile", str(path), "--jobs", "1", "--no-cache", *extra]


def test_fast_math_needs_allow_real(tmp_path, monkeypatch, capsys) -> None:
    src = tmp_path / "fm.gdv"
    src.write_text(FAST_MATH)
    monkeypatch.chdir(tmp_path)
    assert main(_compile(src, "--fast-math", "--emit-evidence", "fm.evidence")) == 0
    capsys.readouterr()
    assert main(["evidence", "verify", "fm.evidence"]) == 1
    err = capsys.readouterr().err
    assert "not verified: policy: policy allow_real: claims over the reals" in err
    (tmp_path / "gdv-policy.toml").write_text("allow_real = true\n")
    assert main(["evidence", "verify", "fm.evidence"]) == 0
    out = capsys.readouterr().out
    assert "policy from gdv-policy.toml" in out and "verified" in out
    # The compile gate reads the same discovered policy.
    (tmp_path / "gdv-policy.toml").write_text("allow_real = false\n")
    assert main(_compile(src, "--fast-math")) == 1
    assert "policy allow_real" in capsys.readouterr().err


def test_max_abs_error(tmp_path, small_source, capsys) -> None:
    strict, loose = tmp_path / "strict.toml", tmp_path / "loose.toml"
    strict.write_text("max_abs_error = 1e-12\n")
    loose.write_text("max_abs_error = 0.01\n")
    assert main(_compile(small_source, "--policy", str(strict))) == 1
    err = capsys.readouterr().err
    assert "policy max_abs_error: output r error bound" in err and "exceeds 1e-12" in err
    assert main(_compile(small_source, "--policy", str(loose))) == 0
    nobounds = tmp_path / "nb.gdv"
    nobounds.write_text(
        "func @main(%x: f32[4]) -> f32[4] {\n  %y = relu(%x) : f32[4]\n  return %y\n}\n"
    )
    capsys.readouterr()
    assert main(_compile(nobounds, "--policy", str(loose))) == 1
    assert "policy max_abs_error: no error bound" in capsys.readouterr().err


def test_pyproject_policy_forbids_fallbacks(tmp_path, monkeypatch, capsys) -> None:
    # An external pass is proved by a whole-function equivalence (it makes no local claim).
    src = tmp_path / "dead.gdv"
    src.write_text(DEAD_CODE)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.gdv.policy]\nallow_fallback = false\n")
    assert main(_compile(src, "--external-pass", "cat")) == 1
    err = capsys.readouterr().err
    assert "policy allow_fallback: whole-function obligation external-1/" in err
    assert "pyproject.toml [tool.gdv.policy]" in err
    assert main(_compile(src)) == 0  # dead-code elimination's obligation is local
    (tmp_path / "pyproject.toml").write_text("[tool.gdv.policy]\nallow_fallback = true\n")
    assert main(_compile(src, "--external-pass", "cat")) == 0


def test_required_second_solver(tmp_path, small_source, pristine, capsys) -> None:
    both = tmp_path / "both.toml"
    both.write_text('required_solvers = ["z3", "cvc5"]\n')
    assert main(_compile(small_source, "--policy", str(both))) == 0
    assert main(["evidence", "verify", str(pristine), "--policy", str(both)]) == 0
    assert "unsat with z3, cvc5" in capsys.readouterr().out


def test_allow_unknown_governs_a_required_solver_that_cannot_answer(monkeypatch, pristine):
    def cvc5_unknown(name: str, text: str, timeout: float) -> SolverResult:
        if name == "cvc5":
            return SolverResult("cvc5", "unknown", "cannot read it")
        return SolverResult(name, "unsat")

    monkeypatch.setattr("gdv.evidence.verify.solve", cvc5_unknown)
    strict = Policy(required_solvers=("z3", "cvc5"))
    report = verify_bundle(pristine, policy=strict)
    assert report.failure is not None and report.failure.item == "solvers"
    assert "cvc5 gives unknown" in report.failure.detail
    lenient = Policy(required_solvers=("z3", "cvc5"), allow_unknown=True)
    assert verify_bundle(pristine, policy=lenient).ok


def test_trusted_kernels_rule() -> None:
    manifest = {
        "obligations": [
            {
                "id": "p/r/equivalence",
                "theory": "fp",
                "scope": "local",
                "assumptions": ["trusted kernel: vendor gemm"],
            }
        ],
        "stages": [],
        "bounds": {"status": "unavailable", "reason": "x"},
    }
    (v,) = check_policy(Policy(), manifest)
    assert v.rule == "allow_trusted_kernels" and "vendor gemm" in v.message
    assert check_policy(Policy(allow_trusted_kernels=True), manifest) == []


@pytest.mark.parametrize(
    "text, message",
    [
        ("allow_everything = true\n", "unknown policy key(s) allow_everything"),
        ("allow_real = 1\n", "allow_real must be true or false"),
        ("max_abs_error = -1\n", "max_abs_error must be a number >= 0"),
        ('required_solvers = ["yices"]\n', "required_solvers must be a list of z3, cvc5"),
        ("allow_real = \n", "not valid TOML"),
    ],
)
def test_bad_policies_are_input_errors(tmp_path, pristine, capsys, text, message) -> None:
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(EvidenceError, match="policy|TOML|must"):
        load_policy(str(path))
    assert main(["evidence", "verify", str(pristine), "--policy", str(path)]) == 3
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
