"""Lit-style pass tests: each file in tests/lit/passes/ names the passes to run (`// RUN:`),
the obligations they must emit (`// OBLIGATIONS:`, ids without the `#N` suffix, in order),
the input program, and after `// ----- expected` the expected output. Every obligation must
prove, and both programs must round-trip through the printer."""

from __future__ import annotations

from pathlib import Path

import pytest

from gdv.api import parse
from gdv.ir.printer import print_module
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import PASSES
from gdv.validate.discharge import discharge

CASES = sorted((Path(__file__).parent.parent / "lit" / "passes").glob("*.gdv"))


def _header(text: str, key: str) -> list[str]:
    for line in text.splitlines():
        if line.startswith(f"// {key}:"):
            return [w.strip() for w in line.split(":", 1)[1].replace(",", " ").split()]
    raise AssertionError(f"missing // {key}: line")


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_lit_pass_case(path: Path, tmp_path: Path) -> None:
    text = path.read_text()
    source, expected_text = text.split("// ----- expected\n")
    passes = [PASSES[name]() for name in _header(text, "RUN")]
    module = parse(source, str(path))
    expected = parse(expected_text, str(path))
    for m in (module, expected):
        assert parse(print_module(m)) == m
    result = PassManager(passes).run(module)
    assert print_module(result.module) == print_module(expected)
    ids = [o.id.split("#")[0].rsplit("/", 1)[0] for o in result.obligations]
    assert ids == _header(text, "OBLIGATIONS")
    outcomes = discharge(result.obligations, jobs=1, cache_dir=tmp_path)
    assert [o.status for o in outcomes] == ["proved"] * len(outcomes), [
        (o.obligation.id, o.reason) for o in outcomes if o.status != "proved"
    ]


def test_there_are_cases_for_every_pass() -> None:
    covered = set()
    for path in CASES:
        covered.update(_header(path.read_text(), "RUN"))
    assert covered == set(PASSES)
