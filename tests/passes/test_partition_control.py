"""Partitioning programs with control flow (IR_SPEC.md section 9): `if`, `while` and `scan` keep
every operand and their result replicated, so a sharded operand is gathered whole before the
op and every rank runs it; the functions they name stay ordinary functions of the partitioned
module and are in scope of (and in the key of) each op's claim; the claims and the whole
program are proved, a changed body is refuted, a loop too large to encode is left unknown;
`gdv partition`, `gdv tv`, `gdv plan` and the partition bundle accept them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gdv.backends import reference
from gdv.backends.reference.compare import bit_equal
from gdv.backends.reference.spmd import run_spmd
from gdv.cli import main
from gdv.ir.core import Module
from gdv.ir.diagnostics import IRError
from gdv.ir.ops.control import CONTROL
from gdv.ir.parser import parse
from gdv.ir.printer import print_module
from gdv.ir.verifier import verify
from gdv.passes.partition import parse_mesh, parse_shard, partition, prove_steps
from gdv.validate.spmd import check_spmd_equivalence

# An if, two ops of one while (its state and its counter), a scan, all reading values that
# `x` and `xs`'s shardings split; @step's body holds an if of its own (naming @dbl in turn).
SOURCE = """func @main(%c: i1[], %x: f32[4,6], %n: i32[], %xs: f32[3,6])
    -> (f32[4,6], i32[], f32[4,6], f32[3,6], f32[4,6]) {
  %e = exp(%x) : f32[4,6]
  %r = if(%c, %e) {then = "dbl", else = "neg", result = 0} : f32[4,6]
  %k = while(%e, %n) {cond = "pos", body = "step", max_trips = TRIPS, result = 1} : i32[]
  %w = while(%e, %n) {cond = "pos", body = "step", max_trips = TRIPS, result = 0} : f32[4,6]
  %s = slice(%e) {start = [0, 0], limit = [1, 6], stride = [1, 1]} : f32[1,6]
  %s1 = reshape(%s) : f32[6]
  %ys = scan(%s1, %xs) {body = "acc", num_scan_inputs = 1, result = 1} : f32[3,6]
  %o = add(%r, %w) : f32[4,6]
  return %r, %k, %w, %ys, %o
}
func @dbl(%a: f32[4,6]) -> f32[4,6] {
  %b = add(%a, %a) : f32[4,6]
  return %b
}
func @neg(%a: f32[4,6]) -> f32[4,6] {
  %b = neg(%a) : f32[4,6]
  return %b
}
func @pos(%a: f32[4,6], %n: i32[]) -> i1[] {
  %z = constant() {value = 0} : i32[]
  %p = cmp(%n, %z) {dir = "gt"} : i1[]
  return %p
}
func @step(%a: f32[4,6], %n: i32[]) -> (f32[4,6], i32[]) {
  %one = constant() {value = 1} : i32[]
  %m = sub(%n, %one) : i32[]
  %t = constant() {value = true} : i1[]
  %h = if(%t, %a) {then = "dbl", else = "neg", result = 0} : f32[4,6]
  return %h, %m
}
func @acc(%s: f32[6], %x: f32[6]) -> (f32[6], f32[6]) {
  %t = add(%s, %x) : f32[6]
  return %t, %t
}
"""
SHARDS = ("x=[data,-]", "xs=[-,data]")
LOOP = {"pos", "step", "dbl", "neg"}
NAMED = {"r": {"dbl", "neg"}, "k": LOOP, "w": LOOP, "ys": {"acc"}}
"""The functions each control op's claim holds (the loop's through @step's own if)."""

# A then branch that differs from @dbl at one input only (a = 3, which no random input in
# [-1, 1] draws): the solver, not the replay, must find it.
DBL3 = """
func @dbl3(%a: f32[4,6]) -> f32[4,6] {
  %b = add(%a, %a) : f32[4,6]
  %three = constant() {value = 3.0} : f32[4,6]
  %q = cmp(%a, %three) {dir = "eq"} : i1[4,6]
  %z = constant() {value = 0.0} : f32[4,6]
  %y = select(%q, %z, %b) : f32[4,6]
  return %y
}
"""


def program(trips: int = 5) -> Module:
    return verify(parse(SOURCE.replace("TRIPS", str(trips)), "cf.gdv"))


def partitioned(module: Module):
    return partition(module, parse_mesh("data=2"), dict(parse_shard(s) for s in SHARDS))


def test_control_ops_run_whole_on_gathered_operands_and_their_claims_are_proved() -> None:
    module = program()
    part = partitioned(module)
    verify(part.module)
    fn = part.module.entry
    made_by = {op.result: op.name for op in fn.ops}
    local, whole = fn.types(), module.entry.types()
    control = [op for op in fn.ops if op.name in CONTROL]
    assert [op.result for op in control] == ["r", "k", "w", "ys"]
    for op in control:  # every operand whole on every rank, the result too
        for o, g in zip(op.operands, _source_op(module, op).operands, strict=True):
            assert local[o] == whole[g], (op.result, o)
        assert op.type == whole[op.result]
    assert [made_by.get(o) for o in control[0].operands] == [None, "all_gather"]  # %c, %e
    assert made_by[control[3].operands[1]] == "all_gather"  # %xs, split on its dim 1
    # The functions stay in the partitioned module as they were: ordinary, no mesh.
    assert fn.attrs["mesh"] == "m"
    assert part.module.functions[1:] == module.functions[1:]
    assert not any("mesh" in f.attrs for f in part.module.functions[1:])
    # Each control op's claim holds the functions it names, and those they name in turn.
    for step in part.steps:
        named = {f.name for f in step.global_.functions[1:]}
        assert named == {f.name for f in step.spmd.functions[1:]}
        assert named == NAMED.get(step.op, set()), step.op
    assert prove_steps(part) == "proved"
    assert all(s.verdict == "proved" for s in part.steps)
    # The whole program, and its runs.
    assert check_spmd_equivalence(module, part.module, "fp", 20).verdict == "equivalent"
    for seed in range(3):
        inputs = reference.random_inputs(module.entry, seed)
        inputs["n"] = np.array(2 * seed, np.int32)
        for c in (True, False):
            inputs["c"] = np.array(c)
            sim = run_spmd(part.module, inputs)
            assert not sim.disagreements
            for a, b in zip(sim.outputs, reference.run(module, inputs), strict=True):
                assert bit_equal(a, b)


def _source_op(module: Module, op):
    return next(o for o in module.entry.ops if o.result == op.result)


def _renamed(step, old: str, new: str, extra: str):
    """`step`'s SPMD side with its control op naming @new (defined by `extra`) for @old."""
    ops = [
        dataclasses.replace(o, attrs={k: (new if v == old else v) for k, v in o.attrs.items()})
        for o in step.spmd.entry.ops
    ]
    fn = dataclasses.replace(step.spmd.entry, ops=ops)
    functions = [fn, *step.spmd.functions[1:], *parse(extra).functions]
    return Module(functions, step.spmd.filename, step.spmd.meshes)


@pytest.mark.parametrize("trips", [5, 100])  # unrolled, and the induction rule
def test_a_changed_body_is_refuted_not_proved(trips: int) -> None:
    """An op's claim sees its bodies: a then branch, or a loop body, that differs on one input
    is refuted (unrolled) or not proved (an induction-rule loop whose bodies are not proved
    alike)."""
    part = partitioned(program(trips))
    steps = {s.op: s for s in part.steps}
    steps["r"].spmd = _renamed(steps["r"], "dbl", "dbl3", DBL3)
    body = DBL3.replace("dbl3", "step3").replace("(%a: f32[4,6])", "(%a: f32[4,6], %n: i32[])")
    body = body.replace("-> f32[4,6]", "-> (f32[4,6], i32[])").replace(
        "return %y",
        "%one = constant() {value = 1} : i32[]\n  %m = sub(%n, %one) : i32[]\n  return %y, %m",
    )
    steps["w"].spmd = _renamed(steps["w"], "step", "step3", body)
    assert prove_steps(part) == "refuted"
    assert steps["r"].verdict == "refuted"
    assert steps["w"].verdict != "proved"
    if trips == 5:
        assert steps["w"].verdict == "refuted"
    assert steps["k"].verdict == "proved" and steps["ys"].verdict == "proved"


def test_the_whole_program_naming_a_changed_body_is_refuted(tmp_path, capsys) -> None:
    module = program()
    part = partitioned(module)
    good, bad = tmp_path / "p.gdv", tmp_path / "bad.gdv"
    src = tmp_path / "cf.gdv"
    src.write_text(print_module(module))
    good.write_text(print_module(part.module))
    assert main(["tv", str(src), str(good)]) == 0
    # A branch swapped: refuted with a counterexample.
    bad.write_text(print_module(part.module).replace('then = "dbl"', 'then = "neg"', 1))
    assert main(["tv", str(src), str(bad)]) == 1
    assert "Value mismatch in out0" in capsys.readouterr().out
    # A branch that differs where exp(x) = 3 only: the candidate rests on exp's uninterpreted
    # function and no replay confirms it, so it is left unknown, never proved.
    bad.write_text(print_module(part.module).replace('then = "dbl"', 'then = "dbl3"', 1) + DBL3)
    assert main(["tv", str(src), str(bad)]) == 2
    assert "unknown is never a proof" in capsys.readouterr().out


def test_a_claim_s_key_holds_the_bodies() -> None:
    """Two programs that differ in a branch only make claims with different keys (no cache or
    `same as` link between them)."""
    a = partitioned(program())
    b = partitioned(
        verify(parse(SOURCE.replace("TRIPS", "5").replace("%b = neg(%a)", "%b = abs(%a)")))
    )
    keys = {s.op: (s.key, t.key) for s, t in zip(a.steps, b.steps, strict=True)}
    assert keys["r"][0] != keys["r"][1] and keys["w"][0] != keys["w"][1]
    assert keys["ys"][0] == keys["ys"][1] and keys["o"][0] == keys["o"][1]


def test_a_loop_too_large_to_encode_is_unknown_not_proved(tmp_path, capsys) -> None:
    """An induction-rule while over more than 256 operand elements is not encoded: its claim
    is unknown with the reason, the verdict unknown, and nothing written."""
    text = SOURCE.replace("TRIPS", "100").replace("4,6", "50,6")
    part = partitioned(verify(parse(text)))
    assert prove_steps(part) == "unknown"
    (why,) = {s.reason for s in part.steps if s.verdict == "unknown"}
    assert "over 301 operand elements is not encoded for proofs (at most 256)" in why
    path, out = tmp_path / "big.gdv", tmp_path / "out.gdv"
    path.write_text(text)
    argv = ["partition", "--mesh", "data=2", *[f"--shard={s}" for s in SHARDS], str(path)]
    assert main([*argv, "-o", str(out)]) == 2
    assert not out.exists()
    assert "%w: unknown (fp) while with max_trips 100" in capsys.readouterr().out


def test_gdv_partition_plan_and_the_bundle_accept_control_flow(tmp_path, capsys) -> None:
    path = tmp_path / "cf.gdv"
    path.write_text(SOURCE.replace("TRIPS", "5"))
    out, bundle = tmp_path / "p.gdv", tmp_path / "ev"
    shard = [f"--shard={s}" for s in SHARDS]
    argv = ["partition", "--mesh", "data=2", *shard, str(path), "-o", str(out)]
    assert main([*argv, "--emit-evidence", str(bundle)]) == 0
    assert "8 op claims (8 distinct, 0 real), 8 proved" in capsys.readouterr().out
    assert main(["evidence", "verify", str(bundle)]) == 0
    assert "verified" in capsys.readouterr().out
    assert main(["tv", str(path), str(out)]) == 0
    capsys.readouterr()
    assert main(["plan", "--mesh", "data=2", str(path)]) == 0
    assert "plan on mesh [data=2]" in capsys.readouterr().out
    assert main(["plan", "--mesh", "data=2", "--shard=x=[data,-]", "--apply", str(path)]) == 0
    planned, summary = capsys.readouterr()
    assert "claims: 8 of 8 proved; verdict proved" in summary
    # The plan gathers %x once, before the exp, rather than %e before each control op.
    assert "%x.p1 = all_gather(%x)" in planned and "all_gather(%e" not in planned
    assert "func @step(" in planned


@pytest.mark.parametrize("where", ["the SPMD program", "a claim"])
def test_a_bundle_whose_body_is_not_the_source_s_is_caught(tmp_path, where: str) -> None:
    """A tamperer who changes @dbl (rehashing, and re-encoding the claim's query: the claim is
    then true of the body it holds) is caught by the composition check: every function the
    SPMD program and its claims hold is the source's."""
    import json

    from gdv.evidence.bundle import sha256
    from gdv.evidence.verify import verify_bundle
    from gdv.validate.spmd import claim_queries

    path, ev = tmp_path / "cf.gdv", tmp_path / "ev"
    path.write_text(SOURCE.replace("TRIPS", "5"))
    argv = ["partition", "--mesh", "data=2", *[f"--shard={s}" for s in SHARDS], str(path)]
    assert main([*argv, "-o", str(tmp_path / "p.gdv"), "--emit-evidence", str(ev)]) == 0
    m = json.loads((ev / "manifest.json").read_text())
    old = "func @dbl(%a: f32[4,6]) -> f32[4,6] {\n  %b = add(%a, %a)"
    new = old.replace("add(", "mul(")
    if where == "the SPMD program":
        entries = [m["spmd"]]
    else:
        c = next(c for c in m["claims"] if c["op"] == "r")
        entries = [c["global"], c["spmd"]]
    for e in entries:
        f = ev / e["file"]
        text = f.read_text()
        assert old in text
        f.chmod(0o644)
        f.write_text(text.replace(old, new))
        e["sha256"] = sha256(f.read_bytes())
    if where == "a claim":
        g, s = (parse((ev / c[k]["file"]).read_text()) for k in ("global", "spmd"))
        for q, text in zip(c["queries"], claim_queries(g, s, c["theory"]), strict=True):
            (ev / q["file"]).chmod(0o644)
            (ev / q["file"]).write_text(text)
            q["sha256"] = sha256(text.encode())
    (ev / "manifest.json").chmod(0o644)
    (ev / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    bad = verify_bundle(ev).failure
    assert bad is not None and bad.item == "composition", bad
    assert "function" in bad.detail and "not the source's" in bad.detail


def test_a_control_op_naming_an_spmd_function_is_not_partitioned() -> None:
    text = """mesh @m = {data = 2}

func @main(%c: i1[], %x: f32[4]) -> f32[4] {
  %r = if(%c, %x) {then = "g", else = "g", result = 0} : f32[4]
  return %r
}

func @g(%a: f32[4]) -> f32[4] {mesh = "m"} {
  %b = neg(%a) : f32[4]
  return %b
}
"""
    with pytest.raises(IRError) as e:
        partition(parse(text, "gm.gdv"), parse_mesh("data=2"), {})
    assert str(e.value).startswith("gm.gdv:8:6: error: @g, which @main's ops call, is an SPMD")
