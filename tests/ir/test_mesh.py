"""Meshes, shardings and collectives in the textual IR (issue 17; docs/IR_SPEC.md section 7):
printing is canonical and parses back, and every malformed declaration, sharding or
collective is an input error at its token."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gdv.ir.diagnostics import IRError
from gdv.ir.mesh import global_signature
from gdv.ir.parser import parse
from gdv.ir.printer import print_module
from gdv.ir.verifier import verify

GOOD = """mesh @m = {data = 2, model = 2}
mesh @line = {r = 4}

func @main(%x: f32[4,16] {sharding = [["data"], []], range = [-1.0, 1.0]},
           %w: f32[16,8] {sharding = [[], ["model"]]}) -> f32[4,16]
    {mesh = "m", out_shardings = [[["data"], []]]} {
  %h = matmul(%x, %w) : f32[4,8]
  %g = all_gather(%h) {axes = ["model"], dim = 1} : f32[4,16]
  %s = all_reduce(%g) {axes = ["data", "model"], combiner = "max", order = "tree"} : f32[4,16]
  %t = reduce_scatter(%s) {axes = ["model"], dim = 1, combiner = "add", order = "ring"} : f32[4,8]
  %a = all_to_all(%t) {axes = ["model"], split_dim = 0, concat_dim = 1} : f32[2,16]
  %p = collective_permute(%a) {axes = ["data"], pairs = [[0, 1], [1, 0]]} : f32[2,16]
  %y = reshape(%p) : f32[4,8]
  %z = all_gather(%y) {axes = ["model"], dim = 1} : f32[4,16]
  %c = carry_reduce(%z) {axes = ["data"], dims = [1, 0], combiner = "add"} : f32[]
  return %z
}
"""


def test_a_meshed_module_prints_canonically_and_parses_back() -> None:
    m = verify(parse(GOOD, "good.gdv"))
    text = print_module(m)
    again = verify(parse(text, "again.gdv"))
    assert again == m and print_module(again) == text
    assert text.startswith("mesh @m = {data = 2, model = 2}\nmesh @line = {r = 4}\n")
    params, results = global_signature(m, m.entry)
    assert [str(t) for t in params] == ["f32[8,16]", "f32[16,16]"]
    assert [str(t) for t in results] == ["f32[8,16]"]


def test_a_module_without_a_mesh_prints_as_before() -> None:
    text = "func @main(%x: f32[2]) -> f32[2] {\n  %y = neg(%x) : f32[2]\n  return %y\n}\n"
    assert print_module(parse(text)) == text


def _error(text: str) -> IRError:
    with pytest.raises(IRError) as e:
        verify(parse(text, "bad.gdv"))
    return e.value


def _fn(params: str, body: str, attrs: str = '{mesh = "m"}', result: str = "f32[4]") -> str:
    return (
        "mesh @m = {data = 2, model = 2}\n"
        f"func @main({params}) -> {result} {attrs} {{\n{body}}}\n"
    )


@pytest.mark.parametrize(
    ("text", "message", "line", "col"),
    [
        (
            "mesh @m = {a = 2, a = 3}\nfunc @f(%x: f32[1]) -> f32[1] {\n  return %x\n}\n",
            "names axis 'a' twice",
            1,
            19,
        ),
        (
            "mesh @m = {a = 0}\nfunc @f(%x: f32[1]) -> f32[1] {\n  return %x\n}\n",
            "has size 0",
            1,
            12,
        ),
        (
            "mesh @m = {a = 2}\nmesh @m = {b = 2}\nfunc @f(%x: f32[1]) -> f32[1] {\n  return %x\n}\n",
            "declared twice",
            2,
            1,
        ),
        (
            "mesh @m = {a = 1024, b = 1024, c = 2}\nfunc @f(%x: f32[1]) -> f32[1] {\n  return %x\n}\n",
            "more than 1048576 ranks",
            1,
            32,
        ),
        (_fn("%x: f32[4]", "  return %x\n", '{mesh = "q"}'), 'mesh "q" is not declared', 2, 35),
        (
            _fn('%x: f32[4] {sharding = [["data"]]}', "  return %x\n", "{}"),
            "not an SPMD function",
            2,
            24,
        ),
        (_fn('%x: f32[4] {sharding = [["rows"]]}', "  return %x\n"), "has no axis 'rows'", 2, 24),
        (
            _fn('%x: f32[4] {sharding = [["data"], []]}', "  return %x\n"),
            "has 2 entries, expected 1",
            2,
            24,
        ),
        (
            _fn('%x: f32[4] {sharding = [["data", "data"]]}', "  return %x\n"),
            "uses mesh axis 'data' twice",
            2,
            24,
        ),
        (
            _fn("%x: f32[4]", "  return %x\n", '{mesh = "m", out_shardings = []}'),
            "one sharding per result",
            2,
            47,
        ),
        (
            _fn(
                "%x: f32[4]",
                '  %y = all_reduce(%x) {axes = ["data"], combiner = "add", order = "rank"} : f32[4]\n'
                "  return %y\n",
                "{}",
            ),
            "appears only in an SPMD function",
            3,
            8,
        ),
        (
            _fn(
                "%x: f32[4]",
                '  %y = all_gather(%x) {axes = ["data"], dim = 0} : f32[12]\n  return %y\n',
                result="f32[12]",
            ),
            "gives f32[8], but the written type is f32[12]",
            3,
            52,
        ),
        (
            _fn(
                "%x: f32[4]",
                '  %y = all_reduce(%x) {axes = ["pipe"], combiner = "add", order = "rank"} : f32[4]\n'
                "  return %y\n",
            ),
            "has no axis 'pipe'",
            3,
            24,
        ),
        (
            _fn(
                "%x: f32[4]",
                '  %y = all_reduce(%x) {axes = ["data"], combiner = "add", order = "fast"} : f32[4]\n'
                "  return %y\n",
            ),
            'expected one of "rank", "tree", "ring"',
            3,
            59,
        ),
        (
            _fn(
                "%x: f32[6]",
                '  %y = reduce_scatter(%x) {axes = ["data", "model"], dim = 0, combiner = "add", '
                'order = "rank"} : f32[1]\n  return %y\n',
                result="f32[1]",
            ),
            "not a multiple of the group size 4",
            3,
            54,
        ),
        (
            _fn(
                "%x: f32[4]",
                '  %y = collective_permute(%x) {axes = ["data"], pairs = [[0, 2]]} : f32[4]\n'
                "  return %y\n",
            ),
            "outside [0, 2)",
            3,
            49,
        ),
        (
            _fn(
                "%x: f32[4]",
                '  %y = collective_permute(%x) {axes = ["data"], pairs = [[0, 1], [1, 1]]} : f32[4]\n'
                "  return %y\n",
            ),
            "destination at most once",
            3,
            49,
        ),
        (
            _fn(
                "%x: i1[4]",
                '  %y = all_reduce(%x) {axes = ["data"], combiner = "add", order = "rank"} : i1[4]\n'
                "  return %y\n",
                result="i1[4]",
            ),
            "needs a numeric operand",
            3,
            19,
        ),
        (
            _fn(
                "%x: f32[4,3]",
                '  %y = carry_reduce(%x) {axes = ["data"], dims = [], combiner = "add"} : f32[4,3]\n'
                "  return %y\n",
                result="f32[4,3]",
            ),
            "dims lists no dim to fold",
            3,
            43,
        ),
        (
            _fn(
                "%x: i1[4,3]",
                '  %y = carry_reduce(%x) {axes = ["data"], dims = [0], combiner = "max"} : i1[3]\n'
                "  return %y\n",
                result="i1[3]",
            ),
            "needs a numeric operand",
            3,
            21,
        ),
        (
            _fn(
                "%x: f32[4,3]",
                '  %y = carry_reduce(%x) {axes = ["data"], dims = [1], combiner = "add"} : f32[3]\n'
                "  return %y\n",
                result="f32[3]",
            ),
            "carry_reduce of (f32[4,3]) gives f32[4]",
            3,
            75,
        ),
    ],
)
def test_a_bad_mesh_sharding_or_collective_is_an_error_at_its_token(text, message, line, col):
    e = _error(text)
    assert message in e.message, e.message
    assert (e.loc.line, e.loc.col) == (line, col), (str(e), e.message)


def test_gdv_check_reports_a_bad_sharding_with_exit_3_and_no_traceback(tmp_path) -> None:
    bad = tmp_path / "bad.gdv"
    bad.write_text(_fn('%x: f32[4] {sharding = [["rows"]]}', "  return %x\n"))
    run = subprocess.run(
        [sys.executable, "-m", "gdv", "check", str(bad)], capture_output=True, text=True
    )
    assert run.returncode == 3
    assert f"{bad}:2:24: error: sharding of %x: mesh @m has no axis 'rows'" in run.stderr
    assert "Traceback" not in run.stderr
