"""Issue 14's reproducers, each as the user ran it (the programs are copied here, not read from
elsewhere): three false proofs, the crashes beside them, and the weak spots. Each test names the
bug class it guards; the property guards are in tests/validate/test_whole_program.py and
tests/validate/test_cache_keys.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from support import rehash as _rehash
from support import save_manifest as _save_manifest

from gdv.cli import main

ROOT = Path(__file__).resolve().parent.parent

CONCAT_A = """func @main(%x1: i32[2,4], %x2: i32[2,4]) -> i32[2] {
  %y = concat(%x1, %x2) {axis = 1} : i32[2,8]
  %h = slice(%y) {start = [0, 0], limit = [2, 4], stride = [1, 1]} : i32[2,4]
  %s1 = reduce_sum(%h) {axes = [1]} : i32[2]
  %s2 = reduce_sum(%y) {axes = [1]} : i32[2]
  %r = add(%s1, %s2) : i32[2]
  return %r
}
"""
CONCAT_B = """func @main(%x1: i32[2,4], %x2: i32[2,4]) -> i32[2] {
  %c = constant() {value = -1000} : i32[2,4]
  %z = max(%x2, %c) : i32[2,4]
  %y = concat(%x1, %z) {axis = 1} : i32[2,8]
  %h = slice(%y) {start = [0, 0], limit = [2, 4], stride = [1, 1]} : i32[2,4]
  %s1 = reduce_sum(%h) {axes = [1]} : i32[2]
  %s2 = reduce_sum(%y) {axes = [1]} : i32[2]
  %r = add(%s1, %s2) : i32[2]
  return %r
}
"""
SUB_A = """func @main(%a: f32[4], %b: f32[4]) -> f32[4] {
  %r = sub(%a, %b) : f32[4]
  return %r
}
"""
SUB_WRONG = """func @main(%b: f32[4], %c: f32[4]) -> f32[4] {
  %r = sub(%c, %b) : f32[4]
  return %r
}
"""
SUB_GOOD = """func @main(%b: f32[4], %c: f32[4]) -> f32[4] {
  %r = sub(%b, %c) : f32[4]
  return %r
}
"""


def gdv(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def cat(path: Path) -> str:
    return f"{sys.executable} -c \"import sys; sys.stdin.read(); print(open('{path}').read())\""


# --- unsound verdicts ----------------------------------------------------------------------


def test_range_blind_memo_tv_refutes_with_the_witness(tmp_path, capsys) -> None:
    a, b = write(tmp_path, "a.gdv", CONCAT_A), write(tmp_path, "b.gdv", CONCAT_B)
    code, out, _ = gdv(capsys, "tv", a, b, "--timeout", "20", "--cex", tmp_path / "cex.npz")
    assert code == 1, out
    assert "not-equivalent" in out
    # The user's witness: x1 = 0, x2[0,0] = -5000 gives [-5000, 0] against [-1000, 0].
    np.savez(tmp_path / "in.npz", x1=np.zeros((2, 4), np.int32), x2=_witness())
    assert gdv(capsys, "run", a, "--inputs", tmp_path / "in.npz")[1].split()[-2:] == [
        "[-5000",
        "0]",
    ]
    assert gdv(capsys, "run", b, "--inputs", tmp_path / "in.npz")[1].split()[-2:] == [
        "[-1000",
        "0]",
    ]


def _witness() -> np.ndarray:
    x2 = np.zeros((2, 4), np.int32)
    x2[0, 0] = -5000
    return x2


def test_range_blind_memo_reaches_no_compile_through_an_external_pass(tmp_path, capsys) -> None:
    a, b = write(tmp_path, "a.gdv", CONCAT_A), write(tmp_path, "b.gdv", CONCAT_B)
    ev = tmp_path / "ev"
    code, _, err = gdv(
        capsys, "compile", a, "--target", "reference", "--external-pass", cat(b), "--no-cache",
        "--jobs", "1", "--timeout", "20", "--emit-evidence", ev, "-o", tmp_path / "out.gdv",
    )  # fmt: skip
    assert code == 1, err
    assert "refuted: external-1/whole-function/equivalence#main" in err
    code, out, _ = gdv(capsys, "evidence", "verify", ev, "--source", a, "--solver", "z3")
    assert code == 1, out


def test_a_bundle_without_its_external_stage_does_not_verify(tmp_path, capsys) -> None:
    """The user's variant: from the bundle of A compiled through B, drop the external stage and
    its obligation and call the verdict proved (no hash to fix but the manifest's, which is
    not hashed). The chain then starts at A and goes on with stages computed from B."""
    a, b = write(tmp_path, "a.gdv", CONCAT_A), write(tmp_path, "b.gdv", CONCAT_B)
    ev = tmp_path / "ev"
    code, _, err = gdv(
        capsys, "compile", a, "--target", "reference", "--external-pass", cat(b), "--no-cache",
        "--jobs", "1", "--emit-evidence", ev, "-o", tmp_path / "out.gdv",
    )  # fmt: skip
    assert code == 1, err
    manifest = json.loads((ev / "manifest.json").read_text())
    assert manifest["stages"][1]["pass"] == "external-1"
    del manifest["stages"][1]
    manifest["obligations"] = [
        o for o in manifest["obligations"] if not o["id"].startswith("external-1/")
    ]
    manifest["verdict"] = "proved"
    (ev / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    code, out, _ = gdv(capsys, "evidence", "verify", ev, "--source", a, "--solver", "z3")
    assert code == 1, out
    # Issue 15: stage 1's certificate no longer rebuilds it from A.
    assert "FAIL  replay: decompose-composites" in out, out
    code, out, _ = gdv(capsys, "evidence", "verify", ev, "--source", a, "--whole-function")
    assert code == 1 and "FAIL  replay" in out, out


def test_cache_key_collision_wrong_rewrite_is_reproved(tmp_path, capsys) -> None:
    a = write(tmp_path, "a.gdv", SUB_A)
    wrong, good = write(tmp_path, "b.gdv", SUB_WRONG), write(tmp_path, "good.gdv", SUB_GOOD)
    cache = tmp_path / "C"
    base = ("compile", a, "--target", "reference", "--cache-dir", cache, "--jobs", "1")
    code, _, err = gdv(capsys, *base, "--external-pass", cat(good), "-o", tmp_path / "o1.gdv")
    assert code == 0, err
    code, _, err = gdv(capsys, *base, "--external-pass", cat(wrong), "-o", tmp_path / "o2.gdv")
    assert code == 1, err
    assert "refuted" in err
    assert not (tmp_path / "o2.gdv").exists()


# --- crashes: never exit 4 -------------------------------------------------------------------

RANK0 = """func @main(%a: f32[], %b: f32[]) -> f32[] {
  %r = add(%a, %b) : f32[]
  return %r
}
"""
RANK0_SUMS = """func @main(%x: f32[4], %y: f32[4]) -> f32[] {
  %s = reduce_sum(%x) {axes = [0]} : f32[]
  %t = reduce_sum(%y) {axes = [0]} : f32[]
  %r = add(%s, %t) : f32[]
  return %r
}
"""


@pytest.mark.parametrize("text", [RANK0, RANK0_SUMS], ids=["add", "sums"])
@pytest.mark.parametrize("level", ["-O0", "-O1", "-O2"])
def test_rank0_elementwise_kernels_compile_and_run(tmp_path, capsys, text, level) -> None:
    src = write(tmp_path, "a.gdv", text)
    if text is RANK0:
        np.savez(tmp_path / "in.npz", a=np.float32(1.5), b=np.float32(2.0))
    else:
        np.savez(tmp_path / "in.npz", x=np.ones(4, np.float32), y=np.ones(4, np.float32))
    code, _, err = gdv(
        capsys, "compile", src, level, "--target", "reference", "-o", tmp_path / "o.gdv",
        "--jobs", "1", "--no-cache",
    )  # fmt: skip
    assert code == 0, err
    code, out, err = gdv(capsys, "run", src, "--target", "c", "--inputs", tmp_path / "in.npz")
    assert code == 0, err
    assert out.split()[-1] == ("3.5" if text is RANK0 else "8.0")


def chain(n: int) -> str:
    lines = ["func @main(%x: f32[4], %y: f32[4]) -> f32[4] {"]
    prev = "%x"
    for k in range(n):
        if k % 3 == 0:
            lines.append(f"  %v{k} = add({prev}, %y) : f32[4]")
        else:
            lines.append(f"  %v{k} = {('neg', 'abs', 'relu')[k % 3]}({prev}) : f32[4]")
        prev = f"%v{k}"
    return "\n".join([*lines, f"  return {prev}", "}"]) + "\n"


@pytest.mark.slow
def test_a_chain_of_ten_thousand_ops_checks_runs_and_proves(tmp_path, capsys) -> None:
    """Recursive walks: every walk over the IR and the encoding is iterative (the encoding
    runs its rules on an explicit stack)."""
    src = write(tmp_path, "chain.gdv", chain(10_000))
    assert gdv(capsys, "check", src)[0] == 0
    assert gdv(capsys, "run", src, "--seed", "0")[0] == 0
    code, out, err = gdv(capsys, "tv", src, src, "--timeout", "60")
    assert code == 0, out + err
    assert gdv(capsys, "bounds", src, "--default-range", "-1", "1")[0] == 0


@pytest.mark.slow
def test_a_bundle_of_a_deep_chain_verifies(tmp_path, capsys) -> None:
    src = write(tmp_path, "chain.gdv", chain(2_000))
    ev = tmp_path / "ev"
    code, _, err = gdv(
        capsys, "compile", src, "-O1", "--target", "reference", "--emit-evidence", ev,
        "-o", tmp_path / "o.gdv", "--cache-dir", tmp_path / "C",
    )  # fmt: skip
    assert code == 0, err
    code, out, err = gdv(capsys, "evidence", "verify", ev, "--solver", "z3")
    assert code == 0, out + err


def test_rank_over_64_is_refused_at_check_with_a_position(tmp_path, capsys) -> None:
    dims = ",".join(["1"] * 65)
    src = write(
        tmp_path, "a.gdv", f"func @main(%x: f32[{dims}]) -> f32[{dims}] {{\n  return %x\n}}\n"
    )
    for cmd in (("check", src), ("run", src), ("tv", src, src)):
        code, _, err = gdv(capsys, *cmd)
        assert code == 3, err
        assert err.startswith(f"{src}:1:12: error:") and "rank 65" in err, err
    ok = write(
        tmp_path, "b.gdv", f"func @main(%x: f32[{','.join(['1'] * 64)}]) -> () {{\n  return\n}}\n"
    )
    assert gdv(capsys, "check", ok)[0] == 0


KERNEL_ATTRS = 'space = [4], maps = [[[1, 0]]], out = [0], reduce = [], combiner = "none"'
BODY_F16 = """func @main(%x: f32[4]) -> f32[4] {
  %y = kernel(%x) {body = "b", KERNEL} : f32[4]
  return %y
}
func @b(%a: f16[]) -> f16[] {
  %r = add(%a, %a) : f16[]
  return %r
}
"""
BODY_SELF = """func @main(%x: f32[4]) -> f32[4] {
  %r = kernel(%x) {body = "main", KERNEL} : f32[4]
  return %r
}
"""
BODY_NESTED = """func @main(%x: f32[4]) -> f32[4] {
  %r = kernel(%x) {body = "b", KERNEL} : f32[4]
  return %r
}
func @b(%a: f32[]) -> f32[] {
  %r = kernel(%a) {body = "b", space = [], maps = [[]], out = [], reduce = [],
    combiner = "none"} : f32[]
  return %r
}
"""


@pytest.mark.parametrize(
    "text,where,fragment",
    [
        (BODY_F16, "2:20", "takes (f16[]), expected (f32[])"),
        (BODY_SELF, "2:20", "is the function that calls it"),
        (BODY_NESTED, "6:3", "a body holds only scalar elementwise ops"),
    ],
    ids=["dtype", "recursion", "nested"],
)
def test_unchecked_kernel_bodies_are_rejected_everywhere(tmp_path, capsys, text, where, fragment):
    src = write(tmp_path, "a.gdv", text.replace("KERNEL", KERNEL_ATTRS))
    runs = [
        ("check", src),
        ("run", src, "--seed", "0"),
        ("tv", src, src, "--timeout", "20"),
        ("bounds", src, "--default-range", "-1", "1"),
        ("compile", src, "--no-cache", "-o", tmp_path / "o.so"),
    ]
    for argv in runs:
        code, _, err = gdv(capsys, *argv)
        assert code == 3, (argv, err)
        assert err.startswith(f"{src}:{where}: error:") and fragment in err, (argv, err)


def test_a_bundle_claiming_theory_int_fails(tmp_path, capsys) -> None:
    from gdv.driver import CompileOptions, compile_module, write_evidence

    comp = compile_module(
        (ROOT / "examples" / "mlp.gdv").read_text(), CompileOptions(jobs=1, use_cache=False)
    )
    ev = tmp_path / "ev"
    write_evidence(comp, ev)
    manifest = json.loads((ev / "manifest.json").read_text())
    manifest["stages"][1]["theory"] = "int"
    (ev / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    code, out, _ = gdv(capsys, "evidence", "verify", ev, "--solver", "z3")
    assert code == 1
    assert "FAIL  replay: stage" in out and "'int'" in out


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (("--timeout", "nan"), "argument --timeout"),
        (("--timeout", "inf"), "argument --timeout"),
        (("--timeout", "0"), "argument --timeout"),
        (("--external-timeout", "-5", "--external-pass", "cat"), "argument --external-timeout"),
        (("--jobs", "0"), "argument --jobs"),
        (("--memory-limit", "-1"), "argument --memory-limit"),
    ],
)
def test_bad_option_values_are_usage_errors(tmp_path, capsys, argv, fragment) -> None:
    src = write(tmp_path, "a.gdv", SUB_A)
    with pytest.raises(SystemExit) as e:
        main(["compile", str(src), "--no-cache", *argv])
    assert e.value.code == 3
    assert fragment in capsys.readouterr().err


def test_tv_and_verify_refuse_a_nan_timeout(tmp_path, capsys) -> None:
    src = write(tmp_path, "a.gdv", SUB_A)
    for argv in (["tv", str(src), str(src)], ["evidence", "verify", str(tmp_path)]):
        with pytest.raises(SystemExit) as e:
            main([*argv, "--timeout", "nan"])
        assert e.value.code == 3


def test_a_worker_killed_by_its_memory_limit_is_unknown_naming_the_limit(tmp_path) -> None:
    src = write(tmp_path, "a.gdv", SUB_A)
    r = subprocess.run(
        [sys.executable, "-m", "gdv", "compile", str(src), "--target", "reference",
         "--memory-limit", "1", "--jobs", "2", "--no-cache", "-o", str(tmp_path / "o.gdv")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "its memory limit is 1 MB" in r.stderr
    assert "internal error" not in r.stderr


def test_an_external_pass_timeout_kills_its_whole_process_group(tmp_path, capsys) -> None:
    marker = tmp_path / "alive"
    child = write(
        tmp_path,
        "child.py",
        f"import pathlib, time\ntime.sleep(3)\npathlib.Path({str(marker)!r}).write_text('x')\n",
    )
    # The pass answers at once, but a child it leaves behind holds its stdout open.
    script = write(
        tmp_path,
        "pass.py",
        "import subprocess, sys\n"
        "src = sys.stdin.read()\n"
        f"subprocess.Popen([sys.executable, {str(child)!r}])\n"
        "sys.stdout.write(src)\n",
    )
    src = write(tmp_path, "a.gdv", SUB_A)
    start = time.monotonic()
    code, _, err = gdv(
        capsys, "compile", src, "--target", "reference", "--external-timeout", "1",
        "--external-pass", f"{sys.executable} {script}", "--no-cache", "-o", tmp_path / "o.gdv",
    )  # fmt: skip
    assert code == 3 and "killed with its process group" in err, err
    assert time.monotonic() - start < 30
    time.sleep(4)  # the grandchild would have written its marker by now
    assert not marker.exists()


# --- weak spots ----------------------------------------------------------------------------

SUM4 = """func @main(%x: f32[2,2]) -> f32[] {
  %r = reduce_sum(%x) {axes = [0, 1]} : f32[]
  return %r
}
"""
SUM4_T = """func @main(%x: f32[2,2]) -> f32[] {
  %t = transpose(%x) {perm = [1, 0]} : f32[2,2]
  %r = reduce_sum(%t) {axes = [0, 1]} : f32[]
  return %r
}
"""


def test_a_reordered_four_element_sum_is_refuted(tmp_path, capsys) -> None:
    a, b = write(tmp_path, "a.gdv", SUM4), write(tmp_path, "b.gdv", SUM4_T)
    code, out, _ = gdv(capsys, "tv", a, b, "--timeout", "20")
    assert code == 1, out
    np.savez(tmp_path / "in.npz", x=np.array([[1e8, 1], [-1e8, 1]], np.float32))
    assert gdv(capsys, "run", a, "--inputs", tmp_path / "in.npz")[1].split()[-1] == "1.0"
    assert gdv(capsys, "run", b, "--inputs", tmp_path / "in.npz")[1].split()[-1] == "2.0"


def test_real_division_by_zero_is_not_a_made_up_value(tmp_path, capsys) -> None:
    a = write(
        tmp_path,
        "a.gdv",
        "func @main(%x: f32[4]) -> f32[4] {\n  %z = constant() {value = 0.0} : f32[4]\n"
        "  %r = div(%x, %z) : f32[4]\n  return %r\n}\n",
    )
    b = write(
        tmp_path,
        "b.gdv",
        "func @main(%x: f32[4]) -> f32[4] {\n  %r = constant() {value = 0.0} : f32[4]\n"
        "  return %r\n}\n",
    )
    code, out, _ = gdv(capsys, "tv", a, b, "--real", "--timeout", "20")
    assert code == 2, out
    assert "real.div0" in out


def test_no_process_traceback_on_any_issue_input(tmp_path) -> None:
    """The same inputs through a real process: exit status only 0-3, never a traceback."""
    src = write(tmp_path, "a.gdv", RANK0)
    bad = write(tmp_path, "k.gdv", BODY_SELF)
    env = {k: v for k, v in os.environ.items() if k != "GDV_DEBUG"}
    for argv in (["run", str(src)], ["check", str(bad)], ["compile", str(src), "--timeout", "nan"]):
        r = subprocess.run(
            [sys.executable, "-m", "gdv", *argv], capture_output=True, text=True, env=env,
            timeout=120,
        )  # fmt: skip
        assert r.returncode in (0, 3), r.stderr
        assert "Traceback" not in r.stderr


def test_fusion_of_a_long_chain_keeps_bodies_bounded() -> None:
    """Fusing a whole chain into one body cost O(n^2) in obligations (a 10^4-op chain at -O2
    exhausted memory); bodies stop growing at `MAX_BODY_OPS`."""
    from gdv.api import parse
    from gdv.passes.fuse_kernels import MAX_BODY_OPS, FuseKernels
    from gdv.passes.lower_to_kernels import LowerToKernels
    from gdv.passes.manager import PassManager

    n = 2 * MAX_BODY_OPS + 10
    result = PassManager([LowerToKernels(), FuseKernels()]).run(parse(chain(n)))
    main_fn = result.module.entry
    kernels = [op for op in main_fn.ops if op.name == "kernel"]
    bodies = {f.name: f for f in result.module.functions}
    sizes = [len(bodies[k.attrs["body"]].ops) for k in kernels]
    assert max(sizes) <= MAX_BODY_OPS
    assert len(kernels) >= 3 and sum(sizes) == n


# --- weak-evidence-queries-unbound (issue 15: queries bound to the IR by certificates) -----


@pytest.fixture(scope="module")
def mlp_bundle(tmp_path_factory) -> Path:
    from gdv.driver import CompileOptions, compile_module, write_evidence

    comp = compile_module(
        (ROOT / "examples" / "mlp.gdv").read_text(), CompileOptions(jobs=1, use_cache=False)
    )
    return write_evidence(comp, tmp_path_factory.mktemp("mlp") / "mlp.ev")


def _copy_bundle(src: Path, tmp_path: Path) -> tuple[Path, dict]:
    import shutil

    ev = Path(shutil.copytree(src, tmp_path / "ev"))
    return ev, json.loads((ev / "manifest.json").read_text())


def test_every_query_replaced_by_false_fails(mlp_bundle, tmp_path, capsys) -> None:
    ev, manifest = _copy_bundle(mlp_bundle, tmp_path)
    for o in manifest["obligations"]:
        for q in o["queries"]:
            (ev / q["file"]).write_text("(set-logic ALL)\n(assert false)")
            _rehash(ev, q)
    _save_manifest(ev, manifest)
    code, out, _ = gdv(capsys, "evidence", "verify", ev)
    assert code == 1 and "FAIL  encoding:" in out and "not the checker's own encoding" in out


def test_no_obligations_at_all_fails(mlp_bundle, tmp_path, capsys) -> None:
    ev, manifest = _copy_bundle(mlp_bundle, tmp_path)
    manifest["obligations"] = []
    _save_manifest(ev, manifest)
    code, out, _ = gdv(capsys, "evidence", "verify", ev)
    assert code == 1 and "FAIL  replay:" in out and "which has no pair" in out


def test_final_stage_schedule_edited_with_its_artifact_fails(mlp_bundle, tmp_path, capsys):
    from gdv.api import parse
    from gdv.evidence.bundle import artifact_text
    from gdv.ir.printer import print_module

    ev, manifest = _copy_bundle(mlp_bundle, tmp_path)
    final = manifest["stages"][-1]
    module = parse((ev / final["file"]).read_text())
    kernel = next(op for op in module.function("main").ops if op.name == "kernel")
    kernel.attrs["tile"] = [max(1, t // 2) for t in kernel.attrs["tile"]]
    kernel.attrs["parallel"] = []
    (ev / final["file"]).write_text(print_module(module))
    _rehash(ev, final)
    art = manifest["artifact"]["files"][0]
    (ev / art["file"]).write_text(artifact_text(module, "c")[0])
    _rehash(ev, art)
    _save_manifest(ev, manifest)
    code, out, _ = gdv(capsys, "evidence", "verify", ev)
    assert code == 1 and "FAIL  replay: plan-memory" in out
