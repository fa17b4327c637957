"""Golden canonical forms: each `tests/lit/roundtrip/*.gdv` file carries, in `// CHECK:` lines,
the exact text `gdv fmt` must print for it; printing is then stable and round-trips."""

from __future__ import annotations

from pathlib import Path

import pytest

from gdv.ir.parser import parse
from gdv.ir.printer import print_module
from gdv.ir.verifier import verify

CASES = sorted((Path(__file__).resolve().parent.parent / "lit" / "roundtrip").glob("*.gdv"))


def _expected(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.startswith("// CHECK:")]
    return "".join(ln.removeprefix("// CHECK:").removeprefix(" ") + "\n" for ln in lines)


def test_there_are_cases() -> None:
    assert len(CASES) >= 3


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_canonical_form(path: Path) -> None:
    text = path.read_text()
    module = verify(parse(text, str(path)))
    printed = print_module(module)
    assert printed == _expected(text)
    again = parse(printed)
    assert again == module
    assert print_module(again) == printed
