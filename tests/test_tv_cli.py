"""`gdv tv`: verdicts and exit statuses, the Example block, --json, --cex, input errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gdv.cli import main

IDENTITY = "func @main(%x: f32[4]) -> f32[4] {\n  return %x\n}\n"
PLUS_ZERO = """func @main(%x: f32[4]) -> f32[4] {
  %c = constant() {value = 0.0} : f32[4]
  %y = add(%x, %c) : f32[4]
  return %y
}
"""
TIMES_ONE = PLUS_ZERO.replace("0.0", "1.0").replace("add", "mul")
MAX_SRC = """func @main(%x: f32[3,4]) -> f32[] {
  %r = reduce_max(%x) {axes = [0, 1]} : f32[]
  return %r
}
"""
MAX_TGT = """func @main(%x: f32[3,4]) -> f32[] {
  %t = transpose(%x) {perm = [1, 0]} : f32[4,3]
  %r = reduce_max(%t) {axes = [0, 1]} : f32[]
  return %r
}
"""


@pytest.fixture
def files(tmp_path):
    def write(name: str, text: str) -> str:
        p = tmp_path / name
        p.write_text(text)
        return str(p)

    return write


def test_equivalent_exits_0(files, capsys):
    assert main(["tv", files("a.gdv", TIMES_ONE), files("b.gdv", IDENTITY)]) == 0
    out = capsys.readouterr().out
    assert "Transformation seems to be correct!" in out


def test_refutation_exits_1_with_an_example(files, capsys, tmp_path):
    cex = tmp_path / "cex.npz"
    rc = main(["tv", files("a.gdv", PLUS_ZERO), files("b.gdv", IDENTITY), "--cex", str(cex)])
    assert rc == 1
    out = capsys.readouterr().out
    assert "Transformation doesn't verify!" in out
    assert "Example" in out and "%x : f32[4]" in out
    assert "Source value: 0.0" in out and "Target value: -0.0" in out
    with np.load(cex) as data:
        x = data["x"]
    from gdv.api import parse
    from gdv.backends import reference

    a = reference.run(parse(PLUS_ZERO), {"x": x})[0]
    b = reference.run(parse(IDENTITY), {"x": x})[0]
    assert not reference.bit_equal(a, b)


def test_real_theory_proves_x_plus_zero(files):
    assert main(["tv", files("a.gdv", PLUS_ZERO), files("b.gdv", IDENTITY), "--real"]) == 0


def test_unknown_exits_2(files, capsys):
    rc = main(["tv", files("a.gdv", MAX_SRC), files("b.gdv", MAX_TGT), "--timeout", "1"])
    assert rc == 2
    assert "unknown" in capsys.readouterr().out


def test_json_refutation(files, capsys):
    rc = main(["tv", files("a.gdv", PLUS_ZERO), files("b.gdv", IDENTITY), "--json"])
    assert rc == 1
    obj = json.loads(capsys.readouterr().out)
    assert obj["verdict"] == "not-equivalent"
    cex = obj["counterexample"]
    assert cex["output"] == "out0"
    assert cex["source_value"] == "0.0" and cex["target_value"] == "-0.0"
    assert len(cex["inputs"]["x"]["values"]) == 4


def test_json_equivalent_and_unknown(files, capsys):
    assert main(["tv", files("a.gdv", TIMES_ONE), files("b.gdv", IDENTITY), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "equivalent"
    rc = main(["tv", files("c.gdv", MAX_SRC), files("d.gdv", MAX_TGT), "--json", "--timeout", "1"])
    assert rc == 2
    obj = json.loads(capsys.readouterr().out)
    assert obj["verdict"] == "unknown" and obj["reason"]


def test_signature_mismatch_is_an_input_error(files, capsys):
    other = IDENTITY.replace("f32[4]", "f32[5]")
    assert main(["tv", files("a.gdv", IDENTITY), files("b.gdv", other)]) == 3
    assert "signature mismatch" in capsys.readouterr().err
    assert main(["tv", files("a.gdv", IDENTITY), files("b.gdv", other), "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["verdict"] == "error"


def test_bad_file_is_an_input_error(files, capsys):
    assert main(["tv", files("a.gdv", IDENTITY), "/nonexistent/b.gdv"]) == 3
    assert main(["tv", files("a.gdv", "func @main("), files("b.gdv", IDENTITY)]) == 3
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


def test_bf16_counterexample_feeds_gdv_run(files, tmp_path, capsys):
    src = (
        "func @main(%x: bf16[2]) -> bf16[2] {\n  %c = constant() {value = 0.0} : bf16[2]\n"
        "  %y = add(%x, %c) : bf16[2]\n  return %y\n}\n"
    )
    tgt = "func @main(%x: bf16[2]) -> bf16[2] {\n  return %x\n}\n"
    cex = tmp_path / "c.npz"
    a, b = files("a.gdv", src), files("b.gdv", tgt)
    assert main(["tv", a, b, "--cex", str(cex)]) == 1
    with np.load(cex) as data:
        assert data["x"].dtype.itemsize == 2  # raw bf16 bits
    outs = []
    for prog in (a, b):
        out = tmp_path / f"{len(outs)}.npz"
        assert main(["run", prog, "--inputs", str(cex), "--output", str(out)]) == 0
        with np.load(out) as data:
            outs.append(data["out0"].view(np.uint16).copy())
    assert (outs[0] != outs[1]).any()


KERNEL_SUM = """func @main(%x: f32[4,8]) -> f32[4] {
  %r = kernel(%x) {body = "k0", space = [4, 8], maps = [[[1, 0, 0], [0, 1, 0]]], out = [0],
    reduce = [1], combiner = "add"} : f32[4]
  return %r
}
func @k0(%a: f32[]) -> f32[] {
  return %a
}
"""
REDUCE_SUM = """func @main(%x: f32[4,8]) -> f32[4] {
  %r = reduce_sum(%x) {axes = [1]} : f32[4]
  return %r
}
"""


def test_kernel_bodies_of_the_modules_are_in_scope(files):
    a, b = files("a.gdv", REDUCE_SUM), files("b.gdv", KERNEL_SUM)
    assert main(["tv", a, b]) == 0
    reversed_ = files("c.gdv", KERNEL_SUM.replace("[0, 1, 0]", "[0, -1, 7]"))
    assert main(["tv", a, reversed_]) == 1
    assert main(["tv", a, reversed_, "--real"]) == 0


def test_clashing_kernel_bodies_are_an_input_error(files, capsys):
    other = KERNEL_SUM.replace("return %a", "%n = neg(%a) : f32[]\n  return %n")
    assert main(["tv", files("a.gdv", KERNEL_SUM), files("b.gdv", other)]) == 3
    assert "kernel bodies are shared by name" in capsys.readouterr().err
