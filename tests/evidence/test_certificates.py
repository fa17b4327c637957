"""Certificates (issue 15): every pass records its steps; `gdv evidence verify` rebuilds each
stage from the one before with a replayer that imports no pass, re-encodes every pair itself
and proves it, with no whole-function query. Every tampering fails without a signature."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import manifest_of, rehash, save_manifest, verify_cli

from gdv.api import parse
from gdv.cli import main
from gdv.driver import CompileOptions, compile_module, write_evidence
from gdv.evidence.replay import ReplayError, read_pair, replay
from gdv.ir.obligation import Obligation
from gdv.ir.printer import print_module
from gdv.validate.discharge import obligation_queries

REPO = Path(__file__).resolve().parents[2]
_verify, _manifest, _save, _rehash = verify_cli, manifest_of, save_manifest, rehash


def _certificate(bundle: Path, m: dict, pass_name: str) -> tuple[dict, dict]:
    (stage,) = [s for s in m["stages"] if s["pass"] == pass_name]
    return stage, json.loads((bundle / stage["certificate"]["file"]).read_text())


def _write_certificate(bundle: Path, stage: dict, data: dict) -> None:
    (bundle / stage["certificate"]["file"]).write_text(json.dumps(data, indent=1) + "\n")
    _rehash(bundle, stage["certificate"])


def test_the_replayer_imports_no_pass() -> None:
    tree = ast.parse((REPO / "evidence" / "replay.py").read_text())
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    gdv = [m for m in imported if m and m.startswith("gdv")]
    assert gdv and all(m.startswith("gdv.ir.") for m in gdv), gdv
    code = (
        "import sys, gdv.evidence.replay\n"
        "bad = [m for m in sys.modules if m.startswith(('gdv.passes', 'gdv.backends'))]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_a_default_verify_makes_no_whole_function_query(pristine, capsys) -> None:
    m = _manifest(pristine)
    assert all(s["certificate"] for s in m["stages"][1:]) and m["stages"][0]["certificate"] is None
    assert all(o["pair"] for o in m["obligations"])
    rc, out, err = _verify(capsys, str(pristine), "--jobs", "1")
    assert rc == 0, out + err
    assert "; 0 whole-function quer(ies)" in out and "ir-chain" not in out
    assert "equal the checker's own encoding of their pairs" in out


def test_a_dropped_certificate_step_is_caught(bundle, capsys) -> None:
    m = _manifest(bundle)
    stage, data = _certificate(bundle, m, "lower-to-kernels")
    data["steps"].pop(0)
    _write_certificate(bundle, stage, data)
    _save(bundle, m)
    rc, _, err = _verify(capsys, str(bundle))
    assert rc == 1 and "not verified: replay: lower-to-kernels" in err


@pytest.mark.parametrize(
    "edit,why",
    [
        (lambda s: s.update(position=s["position"] + 1), "is not the op at position"),
        (lambda s: s.update(emitted=s["emitted"][:-1]), "neither emitted nor the program's"),
        (lambda s: s.update(root="nowhere"), "is not the op at position"),
    ],
    ids=["position", "emitted", "root"],
)
def test_an_altered_certificate_step_is_caught(bundle, capsys, edit, why) -> None:
    m = _manifest(bundle)
    stage, data = _certificate(bundle, m, "lower-to-kernels")
    edit(data["steps"][0])
    _write_certificate(bundle, stage, data)
    _save(bundle, m)
    rc, _, err = _verify(capsys, str(bundle))
    assert rc == 1 and "not verified: replay: lower-to-kernels" in err and why in err


def test_a_step_citing_another_obligation_is_caught(bundle, capsys) -> None:
    m = _manifest(bundle)
    stage, data = _certificate(bundle, m, "lower-to-kernels")
    first, second = data["steps"][0], data["steps"][1]
    first["obligation"], second["obligation"] = second["obligation"], first["obligation"]
    _write_certificate(bundle, stage, data)
    _save(bundle, m)
    rc, _, err = _verify(capsys, str(bundle))
    assert rc == 1 and "not verified: replay: lower-to-kernels step 0" in err


def test_an_edited_pair_is_caught(bundle, capsys) -> None:
    m = _manifest(bundle)
    ob = next(o for o in m["obligations"] if o["pass"] == "lower-to-kernels")
    path = bundle / ob["pair"]["file"]
    text = path.read_text()
    edited = text.replace("f32[4,8]", "f32[4,9]", 1)
    assert edited != text
    path.write_text(edited)
    _rehash(bundle, ob["pair"])
    _save(bundle, m)
    rc, _, err = _verify(capsys, str(bundle))
    assert rc == 1 and "not verified: replay:" in err


def test_an_edited_c_source_is_caught(bundle, capsys) -> None:
    m = _manifest(bundle)
    entry = m["artifact"]["files"][0]
    path = bundle / entry["file"]
    path.write_text(path.read_text().replace("0.0f", "1.0f", 1) + "\n/* edited */\n")
    _rehash(bundle, entry)
    _save(bundle, m)
    rc, _, err = _verify(capsys, str(bundle))
    assert rc == 1 and f"not verified: artifact: {entry['file']} is not the final stage" in err


def _overlapping(buffers: list) -> list:
    """The plan with the second value moved onto the first's bytes."""
    edited = [list(b) for b in buffers]
    edited[1][1] = edited[0][1]
    return edited


# Two rows: too few for a row group (whose row sum would be block-local, not in the arena).
TWO_LIVE = """func @main(%x: f32[2,8], %w: f32[8,4]) -> f32[2,4] {
  %m = matmul(%x, %w) : f32[2,4]
  %s = reduce_sum(%m) {axes = [1]} : f32[2]
  %b = broadcast(%s) {dims = [0]} : f32[2,4]
  %y = div(%m, %b) : f32[2,4]
  return %y
}
"""


def test_an_edited_plan_is_caught_by_replay_then_by_its_proof(tmp_path, capsys) -> None:
    comp = compile_module(TWO_LIVE, CompileOptions(jobs=1, use_cache=False))
    bundle = write_evidence(comp, tmp_path / "e")
    m = _manifest(bundle)
    final = m["stages"][-1]
    assert final["pass"] == "plan-memory"
    module = parse((bundle / final["file"]).read_text())
    main_fn = module.function("main")
    buffers = main_fn.attrs["buffers"]
    assert len(buffers) >= 2
    main_fn.attrs["buffers"] = _overlapping(buffers)
    (bundle / final["file"]).write_text(print_module(module))
    _rehash(bundle, final)
    _save(bundle, m)
    rc, _, err = _verify(capsys, str(bundle))
    assert rc == 1 and "not verified: replay: plan-memory" in err
    # The certificate edited to match: the plan replays, and its derived claim is refuted.
    stage, data = _certificate(bundle, m, "plan-memory")
    (step,) = [s for s in data["steps"] if s["function"] == "main"]
    step["attrs"]["buffers"] = main_fn.attrs["buffers"]
    _write_certificate(bundle, stage, data)
    _save(bundle, m)
    rc, _, err = _verify(capsys, str(bundle))
    assert rc == 1 and "not verified: encoding:" in err and "memory-safety" in err
    # ... and its stored query rewritten to match: the claim itself is refuted.
    rc, _, err = _with_memory_query_of(bundle, m, main_fn, capsys)
    assert rc == 1
    assert "not verified: solvers: z3 finds the query of plan-memory/arena/memory-safety sat" in err


def _with_memory_query_of(bundle: Path, m: dict, fn, capsys) -> tuple[int, str, str]:
    """The bundle's stored memory-safety query rewritten to the claim of `fn`'s plan (every
    hash fixed), then verified: (exit code, stdout, stderr)."""
    from gdv.validate.discharge import stable_smt2
    from gdv.validate.schedules import formula_text, memory_violation

    (ob,) = [o for o in m["obligations"] if o["kind"] == "memory-safety"]
    query = ob["queries"][0]
    (bundle / query["file"]).write_text(stable_smt2(formula_text(memory_violation(fn))))
    _rehash(bundle, query)
    _save(bundle, m)
    return _verify(capsys, str(bundle))


SOFTMAX_THEN_PRODUCT = """func @main(%x: f32[64,32], %w: f32[32,16]) -> f32[64,16] {
  %p = softmax(%x) {axis = 1} : f32[64,32]
  %y = matmul(%p, %w) : f32[64,16]
  return %y
}
"""


def test_a_forged_block_local_value_is_refuted(tmp_path, capsys) -> None:
    """A plan listing in `block_local` a value a product reads outside its row group (softmax's
    exp, which the product reads through its fused division; its arena buffer dropped), stage,
    certificate and stored query edited alike: the checker derives the claim from the rules
    itself, and it is violated."""
    import z3

    from gdv.validate.schedules import memory_violation

    comp = compile_module(SOFTMAX_THEN_PRODUCT, CompileOptions(jobs=1, use_cache=False))
    assert comp.verdict == "proved"
    bundle = write_evidence(comp, tmp_path / "e")
    m = _manifest(bundle)
    final = m["stages"][-1]
    module = parse((bundle / final["file"]).read_text())
    main_fn = module.function("main")
    ops = {op.result: op for op in main_fn.ops}
    listed = main_fn.attrs["block_local"]
    assert listed == ["p.reduce_max"]  # the product reads the exp and the sum (its prologue)
    last = next(b[0] for b in main_fn.attrs["buffers"] if "row_group" in ops[b[0]].attrs)
    main_fn.attrs["block_local"] = [*listed, last]
    main_fn.attrs["buffers"] = [b for b in main_fn.attrs["buffers"] if b[0] != last]
    (bundle / final["file"]).write_text(print_module(module))
    _rehash(bundle, final)
    stage, data = _certificate(bundle, m, "plan-memory")
    (step,) = [s for s in data["steps"] if s["function"] == "main"]
    step["attrs"]["block_local"] = main_fn.attrs["block_local"]
    step["attrs"]["buffers"] = main_fn.attrs["buffers"]
    _write_certificate(bundle, stage, data)
    rc, _, err = _with_memory_query_of(bundle, m, main_fn, capsys)
    # The replay's verifier refuses the stage first; the claim's own formula is violated too.
    assert rc == 1 and "not verified: replay: plan-memory" in err, err
    assert "%p.exp may not be block-local: read outside its row group" in err
    assert z3.is_true(memory_violation(main_fn))


def test_a_forged_stage_with_a_matching_pair_and_query_is_refuted(tmp_path, capsys) -> None:
    """The strongest forgery without a key: a wrong stage whose certificate, pair and stored
    query all agree with it, every hash fixed. The pair is then false, and proving it fails."""
    src = tmp_path / "g.gdv"
    src.write_text(
        "func @main(%x: f32[4,4], %w: f32[4,4]) -> f32[4,4] {\n"
        "  %y = matmul(%x, %w) : f32[4,4]\n  return %y\n}\n"
    )
    comp = compile_module(
        str(src), CompileOptions(target="reference", level=0, jobs=1, use_cache=False)
    )
    bundle = write_evidence(comp, tmp_path / "e")
    m = _manifest(bundle)
    assert [s["pass"] for s in m["stages"]] == ["input", "decompose-composites"]
    stage = m["stages"][1]
    ob = m["obligations"][0]
    text = (bundle / stage["file"]).read_text()
    right, wrong = "lhs_contract = [1]", "lhs_contract = [0]"  # x^T w in place of x w
    assert right in text
    forged = text.replace(right, wrong)
    (bundle / stage["file"]).write_text(forged)
    _rehash(bundle, stage)
    pair_path = bundle / ob["pair"]["file"]
    pair_path.write_text(pair_path.read_text().replace(right, wrong))
    _rehash(bundle, ob["pair"])
    pair = read_pair(pair_path.read_text(), "pair")
    forged_ob = Obligation(ob["id"], ob["kind"], ob["theory"], pair.src, pair.tgt, "", [], None, [])
    for q, t in zip(ob["queries"], obligation_queries(forged_ob), strict=True):
        (bundle / q["file"]).write_text(t)
        _rehash(bundle, q)
    art = m["artifact"]["files"][0]
    (bundle / art["file"]).write_text(forged)
    _rehash(bundle, art)
    _save(bundle, m)
    rc, out, err = _verify(capsys, str(bundle), "--timeout", "3")
    assert rc == 1, out
    assert "ok    replay:" in out and "ok    encoding:" in out
    # Z3 refutes the false pair or cannot prove it in time: never a proof.
    assert f"not verified: solvers: z3 finds the query of {ob['id']} satisfiable" in err or (
        f"not verified: solvers: z3 gives unknown on the query of {ob['id']}" in err
    )


def test_an_external_pass_is_the_one_whole_function_step(tmp_path, capsys) -> None:
    src = tmp_path / "a.gdv"
    src.write_text("func @main(%x: f32[4]) -> f32[4] {\n  %y = abs(%x) : f32[4]\n  return %y\n}\n")
    script = tmp_path / "swap.py"
    script.write_text("import sys\nsys.stdout.write(sys.stdin.read().replace('%y', '%z'))\n")
    out_dir = tmp_path / "e"
    argv = ["compile", str(src), "--target", "reference", "--jobs", "1", "--no-cache"]
    argv += ["--external-pass", f"{sys.executable} {script}", "--emit-evidence", str(out_dir)]
    assert main(argv) == 0
    capsys.readouterr()
    m = _manifest(out_dir)
    assert m["stages"][1]["pass"] == "external-1" and m["stages"][1]["certificate"] is None
    rc, out, err = _verify(capsys, str(out_dir))
    assert rc == 0, out + err
    assert "; 1 whole-function quer(ies)" in out


# -- the replayer on its own ------------------------------------------------------------------

BEFORE = """func @main(%x: f32[4], %y: f32[4]) -> f32[4] {
  %a = add(%x, %y) : f32[4]
  %b = mul(%a, %a) : f32[4]
  return %b
}
"""
PAIR = """func @src(%x: f32[4], %y: f32[4]) -> f32[4] {
  %a = add(%x, %y) : f32[4]
  return %a
}
func @tgt(%x: f32[4], %y: f32[4]) -> f32[4] {
  %a.1 = add(%y, %x) : f32[4]
  return %a.1
}
"""
AFTER = """func @main(%x: f32[4], %y: f32[4]) -> f32[4] {
  %a.1 = add(%y, %x) : f32[4]
  %b = mul(%a.1, %a.1) : f32[4]
  return %b
}
"""
STEP = {
    "kind": "rewrite",
    "function": "main",
    "position": 0,
    "root": "a",
    "replacement": "a.1",
    "emitted": ["a.1"],
    "obligation": "p/r/equivalence",
}


def _replay(steps: list, pair: str = PAIR, after: str = AFTER):
    p = read_pair(pair, "pair")
    return replay(parse(BEFORE), after.encode(), steps, "p", lambda i: p)


def test_the_replayer_rebuilds_a_rewrite() -> None:
    assert _replay([STEP]).rewrites == 1


@pytest.mark.parametrize(
    "steps,pair,why",
    [
        ([{**STEP, "position": 1}], PAIR, "is not the op at position"),
        ([{**STEP, "replacement": "x"}], PAIR, "the pair returns"),
        ([STEP], PAIR.replace("%a = add(%x, %y)", "%a = sub(%x, %y)"), "is not the program's"),
        (
            [STEP],
            PAIR.replace("%a.1 = add(%y, %x)", "%b = add(%y, %x)").replace("%a.1\n}", "%b\n}"),
            "the pair returns",
        ),
        ([{**STEP, "emitted": ["a.1", "a.1"]}], PAIR, "not distinct"),
        ([STEP, {"kind": "remove", "function": "main", "removed": ["a.1"]}], PAIR, "still read"),
        ([STEP, {"kind": "attrs", "function": "main", "attrs": {"fast": True}}], PAIR, "changes"),
        ([STEP, {"kind": "drop-functions", "functions": ["main"]}], PAIR, "entry"),
        ([STEP, {"kind": "teleport"}], PAIR, "unknown step kind"),
        ([], PAIR, "text for text"),
    ],
    ids=[
        "position",
        "replacement",
        "src-not-the-program",
        "tgt-name",
        "emitted-twice",
        "remove-live",
        "attrs",
        "drop-entry",
        "kind",
        "no-steps",
    ],
)
def test_the_replayer_refuses(steps, pair, why) -> None:
    with pytest.raises(ReplayError, match=why):
        _replay(steps, pair)


def test_an_emitted_op_may_not_read_a_later_value() -> None:
    pair = (
        PAIR.replace("%a.1 = add(%y, %x)", "%a.1 = add(%y, %b)")
        .replace(
            "func @tgt(%x: f32[4], %y: f32[4])", "func @tgt(%x: f32[4], %y: f32[4], %b: f32[4])"
        )
        .replace(
            "func @src(%x: f32[4], %y: f32[4])", "func @src(%x: f32[4], %y: f32[4], %b: f32[4])"
        )
    )
    with pytest.raises(ReplayError, match="is not a value before"):
        _replay([STEP], pair)


def test_the_encoding_is_the_same_in_another_process(tmp_path) -> None:
    """The checker's encoding must give the stored text byte for byte in a fresh process
    (different hash seeds, term ids and import order), or no real bundle would verify."""
    src = tmp_path / "a.gdv"
    src.write_text((REPO / "examples" / "attention.gdv").read_text())
    out = tmp_path / "e"
    gdv = [sys.executable, "-m", "gdv"]
    env = {"PYTHONHASHSEED": "1", "XDG_CACHE_HOME": str(tmp_path / "cache")}

    run = subprocess.run(
        [*gdv, "compile", str(src), "--target", "reference", "--emit-evidence", str(out)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    env["PYTHONHASHSEED"] = "2"
    run = subprocess.run(
        [*gdv, "evidence", "verify", str(out)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ok    encoding:" in run.stdout


def test_a_stored_query_may_differ_from_the_checkers_only_in_lets() -> None:
    """Z3 picks its `let` abbreviations by internal term ids, which depend on what a process
    built before; the stored query still counts as the checker's own when it parses to the same
    terms, and never when a declaration or an assertion differs."""
    from gdv.evidence.verify import same_query

    head = "(set-logic ALL)\n(declare-fun x () (_ FloatingPoint 8 24))\n"
    lets = head + "(assert (let ((?l0 (fp.add RNE x x))) (not (fp.eq ?l0 ?l0))))\n(check-sat)\n"
    flat = head + "(assert (not (fp.eq (fp.add RNE x x) (fp.add RNE x x))))\n(check-sat)\n"
    other = head + "(assert (not (fp.eq (fp.add RNE x x) (fp.mul RNE x x))))\n(check-sat)\n"
    more = flat.replace("(check-sat)", "(assert false)\n(check-sat)")
    decl = flat.replace(head, head + "(declare-fun y () Int)\n")
    assert same_query(lets, flat) and same_query(flat, flat)
    assert not same_query(lets, other)
    assert not same_query(more, flat) and not same_query(flat, more)
    assert not same_query(decl, flat)


def test_an_emitted_op_may_not_read_a_program_value_defined_later() -> None:
    """A tgt op that is the program's own but comes after the root is no scope for the ops
    the step places at the root's position (they would read it before it is computed)."""
    before = """func @main(%x: f32[4], %y: f32[4]) -> f32[4] {
  %a = add(%x, %y) : f32[4]
  %c = mul(%x, %x) : f32[4]
  %b = mul(%a, %c) : f32[4]
  return %b
}
"""
    pair = """func @src(%x: f32[4], %y: f32[4]) -> f32[4] {
  %a = add(%x, %y) : f32[4]
  return %a
}
func @tgt(%x: f32[4], %y: f32[4]) -> f32[4] {
  %c = mul(%x, %x) : f32[4]
  %a.1 = sub(%c, %c) : f32[4]
  return %a.1
}
"""
    after = before.replace("%a = add(%x, %y)", "%a.1 = sub(%c, %c)").replace(
        "mul(%a, %c)", "mul(%a.1, %c)"
    )
    p = read_pair(pair, "pair")
    with pytest.raises(ReplayError, match="reads %c too late"):
        replay(parse(before), after.encode(), [STEP], "p", lambda i: p)


def test_the_encoding_does_not_depend_on_what_the_process_built_before() -> None:
    """Sums of index atoms are ordered by a structural key, not by Z3 term ids: ids follow
    what the process created before (a long test run, a notebook), and a sum ordered by them
    printed differently in the compile and in the checker, failing `encoding`."""
    script = (
        "import sys, z3\n"
        "from gdv.validate.semantics.index import Idx\n"
        "first, second = sys.argv[1:]\n"
        "made = {n: z3.Int(n) for n in (first, second)}\n"
        "i = Idx.var(made['idx!3'], 0, 7) + Idx.var(made['k!0'], 0, 2) * 2\n"
        "print(i.to_z3().sexpr())\n"
    )
    texts = {
        subprocess.run(
            [sys.executable, "-c", script, *names], check=True, capture_output=True, text=True
        ).stdout
        for names in (("idx!3", "k!0"), ("k!0", "idx!3"))
    }
    assert len(texts) == 1, texts


def test_a_function_with_its_own_attributes_replays_its_memory_plan(tmp_path, capsys) -> None:
    # The plan's attributes come after the function's own in the stage text; the replayer
    # keeps that order (it used to put them first, and a default verify failed).
    src = tmp_path / "own.gdv"
    src.write_text(
        "func @main(%x: f32[4,8] {range = [-1.0, 1.0]}, %w: f32[8,4] {range = [-1.0, 1.0]})"
        ' -> f32[4,4] {note = "mine"} {\n'
        "  %m = matmul(%x, %w) : f32[4,4]\n  %r = relu(%m) : f32[4,4]\n  return %r\n}\n"
    )
    comp = compile_module(src, CompileOptions(jobs=1, cache_dir=str(tmp_path / "cache")))
    bundle = write_evidence(comp, str(tmp_path / "ev"))
    rc, out, _ = verify_cli(capsys, bundle)
    assert rc == 0, out


FOLD = """func @main(%x: f32[2,2]) -> f32[2,2] {
  %t = constant() {value = [[1, 2], [3, 4]]} : i32[2,2]
  %f = convert(%t) : f32[2,2]
  %y = add(%x, %f) : f32[2,2]
  return %y
}
"""


def test_a_forged_constant_fold_with_a_false_query_fails_the_encoding(tmp_path, capsys) -> None:
    """A fold's claim has no inputs, so its query is decided as it is encoded and stored as
    `false`. A forged fold (a different constant, consistent in every stage, pair and
    artifact) with that `false` query stored is caught: the checker's own encoding of the
    forged pair is no `false`."""
    comp = compile_module(
        FOLD, CompileOptions(target="reference", level=1, jobs=1, use_cache=False)
    )
    bundle = write_evidence(comp, tmp_path / "e")
    m = _manifest(bundle)
    (ob,) = [o for o in m["obligations"] if o["id"].startswith("fold-constants/")]
    (query,) = ob["queries"]
    stored = (bundle / query["file"]).read_text()
    assert " ".join(stored.split()).endswith("(assert false) (check-sat)")
    right, wrong = "[[1.0, 2.0], [3.0, 4.0]]", "[[1.0, 2.0], [3.0, 5.0]]"
    entries = [*m["stages"][1:], ob["pair"], *m["artifact"]["files"]]
    changed = 0
    for entry in entries:
        path = bundle / entry["file"]
        text = path.read_text()
        if right in text:
            path.write_text(text.replace(right, wrong))
            _rehash(bundle, entry)
            changed += 1
    assert changed >= 2  # the fold's stage and its pair at least
    for stage in m["stages"]:
        if stage.get("certificate"):
            cert = bundle / stage["certificate"]["file"]
            cert.write_text(cert.read_text().replace(right, wrong))
            _rehash(bundle, stage["certificate"])
    _save(bundle, m)
    rc, out, err = _verify(capsys, str(bundle))
    assert rc == 1, out
    assert "ok    replay:" in out, out  # the forgery is consistent: only the encoding sees it
    assert "not verified: encoding:" in err and ob["id"] in err, out + err
