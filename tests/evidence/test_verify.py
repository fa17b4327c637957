"""`gdv evidence verify`: a good bundle verifies; every kind of tampering is caught, by name."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import WrongPass, manifest_of, save_manifest, verify_cli

from gdv.cli import main
from gdv.driver import CompileOptions, compile_module, write_evidence
from gdv.evidence.bundle import sha256
from gdv.evidence.solvers import for_cvc5, solve
from gdv.passes import pipelines
from gdv.passes.base import Pass

_verify, _manifest, _save = verify_cli, manifest_of, save_manifest
TRIVIALLY_UNSAT = "(set-logic ALL)\n(assert false)\n(check-sat)\n"
SAT = "(set-logic ALL)\n(declare-fun a () Int)\n(assert (> a 0))\n(check-sat)\n"


def test_a_good_bundle_verifies_with_both_solvers(pristine, small_source, capsys) -> None:
    rc, out, err = _verify(capsys, str(pristine), "--solver", "all", "--source", str(small_source))
    assert rc == 0, out + err
    assert "ok    replay:" in out and "; 0 whole-function quer(ies)" in out
    assert "ir-chain" not in out and "unsat with z3, cvc5" in out
    assert "signature: unsigned" in out and f"verified: {pristine}" in out


def test_whole_function_keeps_the_old_chain_as_an_option(pristine, capsys) -> None:
    rc, out, err = _verify(capsys, str(pristine), "--whole-function", "--jobs", "1")
    assert rc == 0, out + err
    assert "ok    replay:" in out and "ok    ir-chain:" in out


def test_cvc5_reads_z3s_lambdas_and_annotations() -> None:
    query = (
        "(set-logic ALL)\n(declare-fun f (Int (Array Int Int)) Int)\n"
        "(assert (let ((?l (lambda ((k!0 Int)) (! (+ k!0 1) :qid k!1)))) "
        "(not (= (f 3 ?l) (f 3 ?l)))))\n(check-sat)\n"
    )
    assert "HO_ALL" in for_cvc5(query) and ":qid" not in for_cvc5(query)
    assert solve("cvc5", query, 10).result == "unsat"
    assert solve("z3", query, 10).result == "unsat"
    assert solve("cvc5", SAT, 10).result == "sat"
    assert solve("cvc5", "(set-logic ALL)\n(assert (frob))\n(check-sat)\n", 10).result == (
        "unknown"
    )


def test_a_tampered_query_is_caught_by_its_hash(bundle, capsys) -> None:
    q = _manifest(bundle)["obligations"][0]["queries"][0]["file"]
    (bundle / q).write_text(TRIVIALLY_UNSAT)
    rc, _, err = _verify(capsys, str(bundle))
    assert rc == 1
    assert f"not verified: files: {q}" in err and "does not match its recorded sha256" in err


def test_a_query_rehashed_into_the_manifest_is_still_re_solved(bundle, capsys) -> None:
    m = _manifest(bundle)
    entry = m["obligations"][-1]["queries"][0]
    (bundle / entry["file"]).write_text(SAT)
    entry["sha256"] = sha256(SAT.encode())
    _save(bundle, m)
    rc, _, err = _verify(capsys, str(bundle))
    assert rc == 1
    # Issue 15: the stored text must be the checker's own encoding of the obligation's pair.
    assert (
        f"not verified: encoding: {entry['file']} ({m['obligations'][-1]['id']}) is not the "
        "checker's own encoding of its pair" in err
    )


def test_a_flipped_status_is_caught(bundle, capsys) -> None:
    m = _manifest(bundle)
    m["obligations"][1]["status"] = "unknown"
    _save(bundle, m)
    rc, _, err = _verify(capsys, str(bundle))
    assert rc == 1
    assert f"not verified: verdict: obligation {m['obligations'][1]['id']} is unknown" in err


def test_an_edited_stage_is_caught_even_when_rehashed(bundle, capsys) -> None:
    m = _manifest(bundle)
    stage = m["stages"][1]
    path = bundle / stage["file"]
    edited = path.read_text().replace("add(", "sub(")
    assert edited != path.read_text()
    path.write_text(edited)
    rc, _, err = _verify(capsys, str(bundle))
    assert rc == 1 and f"not verified: files: {stage['file']}" in err
    stage["sha256"] = sha256(edited.encode())
    _save(bundle, m)
    rc, _, err = _verify(capsys, str(bundle))
    assert rc == 1
    assert f"not verified: replay: {stage['pass']}: replaying its" in err
    assert "does not give the next stage text for text" in err
    rc, _, err = _verify(capsys, str(bundle), "--whole-function")
    assert rc == 1
    assert f"not verified: replay: {stage['pass']}: replaying its" in err


def test_an_edited_source_is_caught(bundle, small_source, tmp_path, capsys) -> None:
    edited = tmp_path / "small.gdv"
    edited.write_text(small_source.read_text().replace("relu", "abs"))
    rc, _, err = _verify(capsys, str(bundle), "--source", str(edited))
    assert rc == 1 and "not verified: source:" in err and "recorded source sha256" in err


def test_a_removed_file_is_caught(bundle, capsys) -> None:
    art = _manifest(bundle)["artifact"]["files"][0]["file"]
    (bundle / art).unlink()
    rc, _, err = _verify(capsys, str(bundle))
    assert rc == 1 and f"not verified: files: {art} (artifact) is missing" in err


def test_input_errors_exit_3(tmp_path, capsys) -> None:
    rc, _, err = _verify(capsys, str(tmp_path / "none"))
    assert rc == 3 and "no such directory" in err
    rc, _, err = _verify(capsys, str(tmp_path))
    assert rc == 3 and "not an evidence bundle" in err


def test_signatures(bundle, small_source, tmp_path, capsys) -> None:
    key, pub = tmp_path / "k.pem", tmp_path / "p.pem"
    assert main(["evidence", "keygen", str(key), str(pub)]) == 0
    rc, out, _ = _verify(capsys, str(bundle))
    assert rc == 0 and "signature: unsigned" in out
    rc, _, err = _verify(capsys, str(bundle), "--trust-key", str(pub))
    assert rc == 1 and "not verified: signature: unsigned" in err
    signed = tmp_path / "signed"
    args = ["compile", str(small_source), "--jobs", "1", "--no-cache", "--emit-evidence"]
    assert main([*args, str(signed), "--sign-key", str(key)]) == 0
    capsys.readouterr()
    rc, out, _ = _verify(capsys, str(signed), "--trust-key", str(pub))
    assert rc == 0 and "signature: signed, checked against the trust key" in out
    sig = (signed / "manifest.sig").read_text()
    (signed / "manifest.sig").write_text(("0" if sig[0] != "0" else "1") + sig[1:])
    rc, _, err = _verify(capsys, str(signed), "--trust-key", str(pub))
    assert rc == 1 and "not verified: signature: manifest.sig is not a signature" in err
    other_key, other_pub = tmp_path / "k2.pem", tmp_path / "p2.pem"
    assert main(["evidence", "keygen", str(other_key), str(other_pub)]) == 0
    (signed / "manifest.sig").write_text(sig)
    rc, _, err = _verify(capsys, str(signed), "--trust-key", str(other_pub))
    assert rc == 1 and "signature" in err


@pytest.fixture
def rejected(monkeypatch, tmp_path) -> Path:
    """The bundle of a compile a wrong pass made refuted."""
    original = pipelines.pipeline

    def with_wrong_pass(*a, **k) -> list[Pass]:
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
    comp = compile_module(src, CompileOptions(jobs=1, use_cache=False))
    assert comp.verdict == "refuted"
    return write_evidence(comp, str(tmp_path / "rejected"))


def test_a_rejected_compile_never_verifies(rejected, capsys) -> None:
    rc, _, err = _verify(capsys, str(rejected))
    assert rc == 1
    assert "not verified: verdict: obligation wrong-pass/add-zero-bitexact/equivalence is" in err
    m = _manifest(rejected)
    (bad,) = [o for o in m["obligations"] if o["status"] == "refuted"]
    assert bad["counterexample"]["origin"]
    # Claiming it proved does not help: the stage chain is re-proved from the IR files.
    for o in m["obligations"]:
        o["status"], o["reason"], o["counterexample"] = "proved", "", None
    m["verdict"] = "proved"
    _save(rejected, m)
    rc, _, err = _verify(capsys, str(rejected))
    assert rc == 1
    assert "not verified: solvers: z3 finds the query of wrong-pass/add-zero-bitexact" in err


def test_a_stage_claimed_real_without_fast_math_is_refused(bundle, capsys) -> None:
    m = _manifest(bundle)
    m["stages"][2]["theory"] = "real"
    _save(bundle, m)
    rc, _, err = _verify(capsys, str(bundle))
    assert rc == 1
    assert f"replay: stage {m['stages'][2]['pass']} claims `real` but the pipeline" in err


def test_bounds_follow_the_bundles_target(tmp_path, capsys) -> None:
    """A C-target bundle records the bound as the C target runs the program (gdv's f32 exp,
    charged its measured ulps) and verify recomputes it for that target: the reference
    target's smaller bound written in its place is caught."""
    src = (
        "func @main(%x: f32[4,8] {range = [-4.0, 4.0]}) -> f32[4,8] {\n"
        "  %y = softmax(%x) {axis = 1} : f32[4,8]\n  return %y\n}\n"
    )
    path = tmp_path / "sm.gdv"
    path.write_text(src)
    bundle = write_evidence(
        compile_module(str(path), CompileOptions(jobs=1, use_cache=False)), tmp_path / "e"
    )
    m = _manifest(bundle)
    assert m["target"]["name"] == "c" and m["bounds"]["target"] == "c"
    assert any("c-f32-ulp:exp" in a for a in m["bounds"]["assumptions"])
    rc, _, _ = _verify(capsys, str(bundle))
    assert rc == 0
    from gdv.evidence.bundle import error_bounds

    m["bounds"] = error_bounds(compile_module(src, CompileOptions(jobs=1)).source, "reference")
    assert m["bounds"]["outputs"][0]["abs"] < _manifest(bundle)["bounds"]["outputs"][0]["abs"]
    _save(bundle, m)
    rc, _, err = _verify(capsys, str(bundle))
    assert rc == 1 and "not verified: bounds" in err
