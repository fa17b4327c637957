"""A schedule step that changes a kernel's fold order with no claim (the seeded bug
`unclaimed-accumulators` of `gdv selftest --mutants`): the compile is refuted by the claim the
pass manager adds, and a bundle made without that claim (an older compiler) is refuted by
`gdv evidence verify` with a counterexample, not left at `unknown`."""

from __future__ import annotations

from support import verify_cli

from gdv.driver import CompileOptions, compile_module, write_evidence
from gdv.fuzzing import mutants


def _compile(**options):
    with mutants.MUTANTS["unclaimed-accumulators"].patch():
        return compile_module(
            mutants.PROGRAMS["reduce"],
            CompileOptions(target="c", jobs=1, use_cache=False, **options),
        )


def test_the_compile_refutes_the_unclaimed_reorder(tmp_path, capsys) -> None:
    comp = _compile()
    assert comp.verdict == "refuted"
    (bad,) = [o for o in comp.outcomes if o.status != "proved"]
    assert bad.obligation.id == "schedule-kernels/unclaimed-reorder/equivalence"
    assert bad.status == "refuted" and bad.counterexample is not None
    bundle = write_evidence(comp, str(tmp_path / "e"))
    rc, _, err = verify_cli(capsys, bundle)
    assert rc == 1 and "not verified: verdict" in err


def test_verify_refutes_a_bundle_that_lacks_the_claim(tmp_path, capsys, monkeypatch) -> None:
    from gdv.passes import manager

    monkeypatch.setattr(manager, "unclaimed_obligations", lambda *a, **k: [])
    comp = _compile()
    assert comp.verdict == "proved"  # the hole this closes: coverage claims only
    bundle = write_evidence(comp, str(tmp_path / "e"))
    rc, out, err = verify_cli(capsys, bundle, "--timeout", "5")
    assert rc == 1, out
    assert "ok    replay:" in out
    assert "not verified: solvers: schedule-kernels/main/%s is refuted: on " in err, err
    assert "replayed on the reference interpreter" in err
