"""The reduced regression cases (tests/lit/regress/*.gdv, issue 18): each shows its EXPECT
signature (`clean` once the bug it was reduced from is fixed).

A RUN line names external passes portably (tests/lit/regress/README.md): the word `python` is
this interpreter (`sys.executable`) and a relative path is the repository's, whatever the
current directory."""

from __future__ import annotations

import dataclasses
import shlex
import sys
from pathlib import Path

import pytest

from gdv.fuzzing.regress import load_lit
from gdv.fuzzing.signature import Case, observe

ROOT = Path(__file__).resolve().parents[2]
REGRESS = ROOT / "tests" / "lit" / "regress"
CASES = sorted(REGRESS.glob("*.gdv"))


def portable_command(command: str) -> str:
    """An external pass command with `python` made `sys.executable` and relative paths that
    exist under the repository root made absolute."""
    words = []
    for w in shlex.split(command):
        if w == "python":
            w = sys.executable
        elif not Path(w).is_absolute() and "/" in w and (ROOT / w).exists():
            w = str(ROOT / w)
        words.append(w)
    return shlex.join(words)


def load(path: Path) -> tuple[Case, str]:
    case, expect = load_lit(path)
    commands = tuple(portable_command(c) for c in case.options.external_passes)
    options = dataclasses.replace(case.options, external_passes=commands)
    return Case(case.modules, case.inputs, options), expect


def test_there_are_regress_cases() -> None:
    assert CASES, f"no regress cases under {REGRESS}"


def test_run_lines_are_portable() -> None:
    """No RUN line names a path of the machine it was reduced on."""
    for path in CASES:
        case, _ = load_lit(path)
        for command in case.options.external_passes:
            for word in shlex.split(command):
                assert not Path(word).is_absolute(), f"{path.name}: absolute path {word}"


def test_portable_command() -> None:
    cmd = portable_command("python tests/fuzzing/wrong_pass.py swap-sub")
    assert shlex.split(cmd) == [
        sys.executable,
        str(ROOT / "tests" / "fuzzing" / "wrong_pass.py"),
        "swap-sub",
    ]
    assert portable_command("/bin/echo x/y") == "/bin/echo x/y"  # no such file: left as it is


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_regress_case_shows_its_expectation(path: Path) -> None:
    case, expect = load(path)
    assert observe(case, expect if expect != "clean" else None) == expect
