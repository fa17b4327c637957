"""`gdv selftest --mutants` (issue 18): every seeded bug in gdv's passes and C printer is caught
by the proof, conformance or bounds check; with no mutation the same programs pass all three
(so a catch is no false alarm); the command's exit statuses."""

from __future__ import annotations

import json
import sys

import pytest

from gdv import cli
from gdv.fuzzing import mutants
from gdv.ir.diagnostics import IRError


def main(argv: list[str]) -> int:
    """`gdv ARGV`'s exit status: through `gdv.cli.main` once the command is registered there,
    else through a parser holding only `gdv selftest`, with the CLI's input-error handling."""
    if "gdv.commands.selftest" in cli.COMMAND_MODULES:
        return cli.main(argv)
    from gdv.commands import selftest

    parser = cli._Parser(prog="gdv")
    selftest.register(parser.add_subparsers(dest="command", parser_class=cli._Parser))
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except IRError as e:
        print(e, file=sys.stderr)
        return cli.EXIT_INPUT


LISTED = {
    "swapped operands": [
        "swapped-operands",
        "c-swapped-operands",
        "c-conv-epilogue-channel",  # a conv epilogue reading another channel's bias (issue 16)
    ],
    "dropped rounding": ["dropped-convert", "c-dropped-rounding"],
    "off-by-one bound": [
        "off-by-one-extent",
        "c-off-by-one-loop",
        "fold-pad-off-by-one",  # a folded pad's reads one element off (issue 16)
        "c-unguarded-fill",  # a filled operand read past its bounds unguarded (issue 16)
    ],
    "wrong fold start": ["c-wrong-fold-start"],
    "wrong fold order": [
        "wrong-fold-order",
        "unclaimed-accumulators",
        "c-reversed-fold",
        "c-epilogue-every-block",  # an epilogue applied to partial folds (issue 16)
    ],
    "skipped tile remainder": ["c-skipped-tile-remainder"],
    "overlapping buffer": ["overlapping-buffers"],
}
"""The kinds of bug issue 18 lists, and the mutants of each."""


def test_every_listed_kind_has_a_mutant_on_a_known_program() -> None:
    names = [n for group in LISTED.values() for n in group]
    assert sorted(names) == sorted(mutants.MUTANTS)
    for m in mutants.MUTANTS.values():
        assert m.programs and set(m.programs) <= set(mutants.PROGRAMS), m.name
        assert m.expected in mutants.CHECKS


def test_control_passes_every_check() -> None:
    """No mutation: every obligation proved, the C program bit for bit the reference on every
    input set, every error within its bound."""
    report = mutants.run_control()
    assert report.error == ""
    assert report.findings == [], [f.to_json() for f in report.findings]
    assert report.notes == []


def test_control_in_process_is_clean() -> None:
    # the same checks without a worker process, program by program
    for name in mutants.PROGRAMS:
        found, notes = mutants.check_program(name)
        assert found == [] and notes == [], (name, found, notes)


@pytest.mark.parametrize(
    "name", ["swapped-operands", "overlapping-buffers", "unclaimed-accumulators"]
)
def test_pass_mutants_are_refuted_with_a_confirmed_witness(name: str) -> None:
    report = mutants.Report.from_json(mutants.run_mutant(name))
    assert report.caught and report.first == "proof", report.to_json()
    proof = [f for f in report.findings if f.check == "proof"]
    assert proof and "refuted" in proof[0].detail


def test_patches_do_not_outlive_their_mutant() -> None:
    from gdv.backends.c import matmul, nest
    from gdv.passes import canonicalize, lower_to_kernels, plan_memory

    before = (
        lower_to_kernels.lower_op,
        len(canonicalize.RULES),
        plan_memory.plan,
        nest._finish,
        nest._start,
        matmul._blocked,
    )
    for m in mutants.MUTANTS.values():
        with m.patch():
            pass
    after = (
        lower_to_kernels.lower_op,
        len(canonicalize.RULES),
        plan_memory.plan,
        nest._finish,
        nest._start,
        matmul._blocked,
    )
    assert before == after


@pytest.mark.slow
def test_selftest_catches_every_mutant(capsys) -> None:
    """The whole run: 100% of the mutants caught, each pass mutant by a replayed
    counterexample (or a confirmed violation) and every C printer mutant by a conformance
    difference."""
    status = main(["selftest", "--mutants", "--json", "--jobs", "2"])
    data = json.loads(capsys.readouterr().out)
    assert status == 0, data
    assert data["caught"] == data["total"] == len(mutants.MUTANTS)
    assert data["control"]["findings"] == []
    first = {r["mutant"]: r["first"] for r in data["mutants"]}
    for m in mutants.MUTANTS.values():
        assert first[m.name] == m.expected, (m.name, first[m.name])


def test_selftest_only_runs_the_named_mutants(capsys) -> None:
    status = main(["selftest", "--mutants", "--only", "c-wrong-fold-start", "--no-control"])
    out = capsys.readouterr().out
    assert status == 0
    assert "c-wrong-fold-start" in out and "swapped-operands" not in out
    assert "mutation score: 1/1 (100%)" in out


def test_selftest_unknown_mutant_is_an_input_error(capsys) -> None:
    status = main(["selftest", "--mutants", "--only", "no-such-mutant"])
    err = capsys.readouterr().err
    assert status == 3
    assert "unknown mutant 'no-such-mutant'" in err and "swapped-operands" in err


def test_selftest_needs_mutants(capsys) -> None:
    assert main(["selftest"]) == 3
    assert "--mutants" in capsys.readouterr().err


def test_selftest_exit_1_when_a_mutant_escapes(capsys, monkeypatch) -> None:
    def escaped(names, jobs=1, progress=None):
        return [mutants.Report(n, "somewhere", "proof") for n in names]

    monkeypatch.setattr(mutants, "run_many", escaped)
    status = main(["selftest", "--mutants", "--only", "swapped-operands", "--no-control"])
    out = capsys.readouterr().out
    assert status == 1
    assert "NOT CAUGHT" in out and "mutation score: 0/1 (0%)" in out


def test_an_inert_mutant_is_reported_not_missed(monkeypatch) -> None:
    import contextlib

    inert = mutants.Mutant(
        "inert", "nowhere", "nothing", "proof", ("reduce",), contextlib.nullcontext
    )
    monkeypatch.setitem(mutants.MUTANTS, "inert", inert)
    report = mutants.Report.from_json(mutants.run_mutant("inert"))
    assert not report.caught
    assert report.error.startswith("inert:")
