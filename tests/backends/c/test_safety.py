"""Safety and errors of the C target (issue 5, items 2, 5): hostile names never reach the C
source outside comments, unsupported ops are compile-time errors naming the op, its location
and the reason, a compiler failure keeps the generated file, and the capability descriptor."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from gdv.api import parse
from gdv.backends import c, reference
from gdv.backends.c.emit import comment
from gdv.driver import CompileOptions, compile
from gdv.ir import ops
from gdv.ir.diagnostics import IRError
from gdv.ir.dtypes import DType

LONG = "x" * 60 + "." + "y" * 67  # 128 characters, the longest name the IR allows
HOSTILE = {
    "x": "int",
    "w": "return",
    "a": "a.b..c.",
    "b": "gdv_entry",
    "r": "buf",
    "d": "acc",
    "e": "first",
    "f": "v0",
    "g": "x0",
    "h": "val",
    "i": "double",
    "j": "s0",
    "k": LONG,
    "body": "main.int.return.",
}


def _hostile_program() -> str:
    return _hostile_program_with(HOSTILE)


def _hostile_program_with(n: dict[str, str]) -> str:
    return f"""
func @main(%{n["x"]}: f32[4,3], %{n["w"]}: f32[3,2], %{n["i"]}: f32[4,2]) -> (f32[4,2], f32[8]) {{
  %{n["a"]} = kernel(%{n["x"]}, %{n["w"]}) {{body = "{n["body"]}", space = [4, 2, 3],
      maps = [[[1, 0, 0, 0], [0, 0, 1, 0]], [[0, 0, 1, 0], [0, 1, 0, 0]]], out = [0, 1],
      reduce = [2], combiner = "add", tile = [3, 2, 3], order = [0, 1, 2]}} : f32[4,2]
  %{n["b"]} = add(%{n["a"]}, %{n["i"]}) : f32[4,2]
  %{n["r"]} = reshape(%{n["b"]}) : f32[8]
  %{n["d"]} = constant() {{value = 0.1}} : f32[8]
  %{n["e"]} = mul(%{n["r"]}, %{n["d"]}) : f32[8]
  %{n["k"]} = relu(%{n["e"]}) : f32[8]
  return %{n["b"]}, %{n["k"]}
}}
func @{n["body"]}(%{n["f"]}: f32[], %{n["g"]}: f32[]) -> f32[] {{
  %{n["h"]} = mul(%{n["f"]}, %{n["g"]}) : f32[]
  %{n["j"]} = sub(%{n["h"]}, %{n["f"]}) : f32[]
  return %{n["j"]}
}}
"""


def _strip_comments(source: str) -> str:
    return re.sub(r"/\*.*?\*/", " ", source, flags=re.S)


def test_hostile_names_run_and_stay_out_of_the_code() -> None:
    module = parse(_hostile_program())
    source = c.lower(module)
    code = _strip_comments(source)
    # The same program with plain names gives the same C code: names reach comments only.
    plain = dict(HOSTILE)
    for k, key in enumerate(HOSTILE):
        plain[key] = f"plain{k}"
    text = _hostile_program_with(plain)
    assert _strip_comments(c.lower(parse(text))) == code
    rng = np.random.default_rng(0)
    inputs = {
        HOSTILE["x"]: rng.standard_normal((4, 3)).astype(np.float32),
        HOSTILE["w"]: rng.standard_normal((3, 2)).astype(np.float32),
        HOSTILE["i"]: rng.standard_normal((4, 2)).astype(np.float32),
    }
    got = c.run(module, inputs)
    want = reference.run(module, inputs)
    for g, w in zip(got, want, strict=True):
        assert reference.bit_equal(g, w), reference.describe_difference(g, w)


def test_comments_cannot_be_closed_or_carry_non_ascii() -> None:
    text = comment("a*/ b /* c\n\u00e9\u202e */")
    assert "*/" not in text and "/*" not in text
    assert text.isascii() and "\n" not in text


def test_unsupported_op_is_a_compile_time_error_with_exact_message() -> None:
    # Composites belong to the graph stage: lowering one without the pipeline is refused,
    # naming the op, its position and the reason.
    text = (
        "func @main(%a: f32[5,3], %b: f32[3,4]) -> f32[5,4] {\n"
        "  %y = matmul(%a, %b) : f32[5,4]\n"
        "  return %y\n"
        "}\n"
    )
    with pytest.raises(IRError) as e:
        c.lower(parse(text))
    assert e.value.message == (
        "target c does not support matmul: matmul is a graph-stage composite; compile with "
        "the pipeline, which decomposes it"
    )
    assert (e.value.loc.line, e.value.loc.col) == (2, 8)  # at the op's name
    assert compile(text, target="c").verdict == "proved"  # the pipeline decomposes it


def test_compiler_failure_keeps_the_generated_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "false")
    module = parse(_hostile_program())
    with pytest.raises(IRError) as e:
        c.build(module)
    match = re.search(r"the generated source is kept at (\S+\.c)", e.value.message)
    assert match, e.value.message
    kept = Path(match.group(1))
    assert kept.exists()
    assert kept.read_text() == c.lower(module)
    assert "the C compiler failed (exit status 1)" in e.value.message


def test_run_through_the_driver_and_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    from gdv.cli import main

    root = Path(__file__).resolve().parents[3]
    comp = compile(str(root / "examples" / "mlp.gdv"), target="c")
    inputs = reference.random_inputs(comp.module.entry, 5)
    (got,) = comp(**inputs)
    (want,) = reference.run(comp.module, inputs)
    assert reference.bit_equal(got, want)
    assert comp.options == CompileOptions(target="c")
    assert main(["run", "--target", "c", str(root / "examples" / "mlp.gdv"), "--seed", "2"]) == 0
    c_out = capsys.readouterr().out
    assert main(["run", str(root / "examples" / "mlp.gdv"), "--seed", "2"]) == 0
    assert capsys.readouterr().out == c_out
    bf16 = str(root / "examples" / "bf16_matmul.gdv")
    assert main(["run", "--target", "c", bf16, "--seed", "4"]) == 0
    c_out = capsys.readouterr().out
    assert main(["run", bf16, "--seed", "4"]) == 0
    assert capsys.readouterr().out == c_out


def test_capability_descriptor() -> None:
    caps = c.capabilities(measure=False)
    json.dumps(caps)  # JSON-ready
    assert caps["name"] == "c" and caps["schema"] == "gdv.capabilities/1"
    names = set(caps["ops"]) | set(caps["unsupported_ops"])
    assert names == {s.name for s in ops.all_specs()}
    assert not set(caps["ops"]) & set(caps["unsupported_ops"])
    assert "kernel" in caps["ops"]
    composites = {"matmul", "softmax", "log_softmax", "layer_norm", "gelu"}
    # Collectives run in the MPI runtime between compiled segments (tests/backends/mpi).
    collectives = {s.name for s in ops.all_specs() if s.family == "collective"}
    assert collectives >= {"all_reduce", "all_gather", "reduce_scatter", "shard_slice"}
    assert set(caps["unsupported_ops"]) == composites | collectives
    assert {"if", "while", "scan"} <= set(caps["ops"])  # IR_SPEC.md section 9
    assert set(caps["dtypes"]) == {str(d) for d in DType}  # every dtype, u8 .. u64 included
    assert caps["unsupported_dtypes"] == {}
    assert isinstance(caps["machine"]["isa"], list) and caps["machine"]["cores"] >= 1
    flags = caps["compiler"]["flags"]
    assert "-ffp-contract=off" in flags and "-fno-fast-math" in flags
    assert "exp" in caps["execution"]["libm"]
